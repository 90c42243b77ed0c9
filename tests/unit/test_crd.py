"""The CRD has one source of truth: the spec model. The chart's copy must match it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from warden.crd import CRD_PATH, MAX_NAME_LENGTH, crd, outputs, render_crd_yaml, worker_set_crd

ROOT = Path(__file__).resolve().parents[2]


def test_checked_in_crd_matches_the_models() -> None:
    checked_in = (ROOT / CRD_PATH).read_text()
    assert checked_in == render_crd_yaml(), "the CRD drifted from operator/warden/model.py: run `make crd`"
    for path, text in outputs().items():
        assert (ROOT / path).read_text() == text, f"{path} drifted from operator/warden/crd.py: run `make crd`"


def test_worker_sets_scale_like_deployments_and_never_change_their_selector() -> None:
    """HPA and KEDA drive a group through the WorkerSet's scale subresource (spec and status replicas,
    and a label selector to find its pods' metrics)."""
    (version,) = worker_set_crd()["spec"]["versions"]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["replicas"]["minimum"] == 0
    assert spec["properties"]["selector"]["x-kubernetes-validations"][0]["rule"] == "self == oldSelf"


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        out.append((path, node))
        for key, value in node.get("properties", {}).items():
            out += _walk(value, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            out += _walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            out += _walk(node["additionalProperties"], f"{path}{{}}")
    return out


def test_schema_is_structural() -> None:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert "$ref" not in node and "anyOf" not in node and "title" not in node, path
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"
        if node.get("additionalProperties") is not None:
            assert "properties" not in node, path


def test_printer_columns_tell_health_at_a_glance() -> None:
    version = crd()["spec"]["versions"][0]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns == {
        "Phase": ".status.phase",
        "Workers": ".status.workers",
        "Login": ".status.login",
        "Usable": ".status.slurmNodes.usable",
        "Jail": ".status.jailPopulated",
        "Slurm": ".status.slurm.version",
        "Age": ".metadata.creationTimestamp",
    }
    assert version["subresources"] == {"status": {}}


def test_names_scope_and_categories() -> None:
    doc = crd()
    assert doc["metadata"]["name"] == "slurmclusters.slurm.warden.dev"
    assert doc["spec"]["scope"] == "Namespaced"
    # `kubectl get slurm`; not `sc`, which kubectl resolves to the built-in StorageClass first
    assert doc["spec"]["names"]["shortNames"] == ["slurm"]
    assert "warden" in doc["spec"]["names"]["categories"]
    rules = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"]
    assert any(str(MAX_NAME_LENGTH) in r["rule"] for r in rules)


def test_worker_groups_are_a_map_keyed_by_name() -> None:
    spec = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    groups = spec["properties"]["workerGroups"]
    assert groups["x-kubernetes-list-type"] == "map"
    assert groups["x-kubernetes-list-map-keys"] == ["name"]
    assert spec["required"] == ["workerGroups"]


def test_checked_in_crd_is_valid_yaml_with_one_document() -> None:
    docs = list(yaml.safe_load_all((ROOT / CRD_PATH).read_text()))
    assert len(docs) == 1 and docs[0]["kind"] == "CustomResourceDefinition"


def test_reference_docs_match_the_schema() -> None:
    from warden.reference import REFERENCE_PATH, render_reference

    assert (ROOT / REFERENCE_PATH).read_text() == render_reference(), "docs/reference.md is stale: run `make crd`"


def test_reference_lists_every_spec_field() -> None:
    from warden.reference import render_reference

    text = render_reference()
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for path, _node in _walk(schema, "spec"):
        if path.endswith(("{}", "[]")) or path == "spec":
            continue
        assert f"| `{path}` |" in text, path
