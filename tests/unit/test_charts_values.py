"""The charts' values, schemas and READMEs, without helm (tests/integration/test_charts.py runs helm).

- charts/slurm-cluster/values.schema.json is what hack/gen-values-schema.py makes from the CRD;
- every value is documented in values.yaml (`# --`) and appears in its chart's README table;
- the values files validate against their schemas, and the cluster chart's values are a valid
  SlurmCluster spec whose defaults are the operator's own;
- examples/gpu-values.yaml is docs/examples/gpu-two-groups.yaml, to the operator;
- values the operator refuses, the schema refuses too.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
import yaml

from warden.model import parse_spec, parse_spec_unknown

ROOT = Path(__file__).resolve().parents[2]
CHARTS = ROOT / "charts"
CLUSTER = CHARTS / "slurm-cluster"
CHART_NAMES = ["slurm-operator-crds", "slurm-operator", "slurm-cluster"]
CHART_ONLY_KEYS = ("nameOverride", "labels", "annotations", "global")


def _hack(name: str) -> ModuleType:
    path = ROOT / "hack" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name.replace("-", "_"), path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


gen_schema = _hack("gen-values-schema")
gen_docs = _hack("gen-chart-docs")


def values(chart: str) -> dict[str, Any]:
    out: dict[str, Any] = yaml.safe_load((CHARTS / chart / "values.yaml").read_text())
    return out


def schema(chart: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads((CHARTS / chart / "values.schema.json").read_text())
    return out


def merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's coalescing: maps merge key by key, anything else (lists too) is replaced."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value if v is not None]
    return value


def spec_of(chart_values: dict[str, Any]) -> dict[str, Any]:
    """The SlurmCluster spec the chart renders (templates/_helpers.tpl: slurm-cluster.spec)."""
    out: dict[str, Any] = without_nulls({k: v for k, v in chart_values.items() if k not in CHART_ONLY_KEYS})
    return out


def test_cluster_values_schema_is_generated_from_the_crd() -> None:
    checked_in = (CLUSTER / "values.schema.json").read_text()
    assert checked_in == gen_schema.render(), "stale: run hack/gen-values-schema.py --write"


def test_generated_schema_follows_the_crd() -> None:
    """Every spec field of the CRD is a value, with the same enums and bounds."""
    crd_spec = gen_schema.crd_root_schema()["properties"]["spec"]
    generated = schema("slurm-cluster")

    def walk(crd: dict[str, Any], gen: dict[str, Any], path: str) -> None:
        for key in ("enum", "minimum", "maximum", "pattern", "maxItems", "maxLength"):
            if key in crd:
                exclusive = {"minimum": "exclusiveMinimum", "maximum": "exclusiveMaximum"}.get(key)
                if exclusive and crd.get(exclusive) is True:  # OpenAPI 3.0's flag, JSON Schema's number
                    assert gen.get(exclusive) == crd[key] and key not in gen, f"{path}: {exclusive}"
                else:
                    assert gen.get(key) == crd[key], f"{path}: {key}"
        if "properties" in crd:
            assert gen["additionalProperties"] is False, path
            assert set(gen["properties"]) == set(crd["properties"]), path
            for name, sub in crd["properties"].items():
                walk(sub, gen["properties"][name], f"{path}.{name}")
        if "items" in crd:
            walk(crd["items"], gen["items"], f"{path}[]")

    walk(crd_spec, {**generated, "properties": {k: generated["properties"][k] for k in crd_spec["properties"]}}, "")


@pytest.mark.parametrize("chart", CHART_NAMES)
def test_every_value_documented_and_in_the_readme(chart: str) -> None:
    rows, undocumented = gen_docs.parse(CHARTS / chart / "values.yaml")
    assert undocumented == [], f"values without a '# --' comment: {undocumented}"
    readme = (CHARTS / chart / "README.md").read_text()

    def leaves(node: dict[str, Any], prefix: str) -> list[str]:
        out = []
        for key, value in node.items():
            path = f"{prefix}{key}"
            if isinstance(value, dict) and value and not any(r.key == path for r in rows):
                out += leaves(value, f"{path}.")
            else:
                out.append(path)
        return out

    missing = [key for key in leaves(values(chart), "") if f"| `{key}` |" not in readme]
    assert missing == [], f"values not in charts/{chart}/README.md: {missing}"
    current, fresh, _ = gen_docs.updated_readme(CHARTS / chart)
    assert current == fresh, "stale values table: run hack/gen-chart-docs.py"


@pytest.mark.parametrize("chart", CHART_NAMES)
def test_default_values_satisfy_the_schema(chart: str) -> None:
    jsonschema.Draft7Validator.check_schema(schema(chart))
    jsonschema.Draft7Validator(schema(chart)).validate(values(chart))


def test_gpu_example_satisfies_the_schema() -> None:
    gpu = yaml.safe_load((CLUSTER / "examples" / "gpu-values.yaml").read_text())
    jsonschema.Draft7Validator(schema("slurm-cluster")).validate(merged(values("slurm-cluster"), gpu))


def test_cluster_defaults_are_the_operators_defaults() -> None:
    """Apart from the worker group and the in-cluster accounting the chart adds, values.yaml says what the
    operator would do anyway. (A SlurmCluster written by hand gets no database volume unless it asks:
    spec.accounting.mode defaults to Disabled; `helm install` turns accounting on.)"""
    chart = values("slurm-cluster")
    from_chart = parse_spec(spec_of(chart))
    assert chart["accounting"]["mode"] == "InCluster"
    from_operator = parse_spec({"workerGroups": chart["workerGroups"], "accounting": {"mode": "InCluster"}})
    assert from_chart == from_operator
    assert parse_spec({"workerGroups": chart["workerGroups"]}).accounting.mode == "Disabled"
    assert [(g.name, g.replicas) for g in from_chart.worker_groups] == [("cpu", 2)]
    assert from_chart.login.replicas == 1


def test_gpu_values_are_the_gpu_example() -> None:
    gpu = yaml.safe_load((CLUSTER / "examples" / "gpu-values.yaml").read_text())
    example = yaml.safe_load((ROOT / "docs/examples/gpu-two-groups.yaml").read_text())
    assert parse_spec(spec_of(merged(values("slurm-cluster"), gpu))) == parse_spec(example["spec"])


BAD_SPECS = [
    ("workerGroups", [{"name": "cpu", "replicas": -1}]),
    ("workerGroups", [{"name": "Bad_Name"}]),
    ("login", {"service": {"type": "Ingress"}}),
    ("login", {"sshAuthorizedKeys": ["not a key"]}),
    ("login", {"service": {"nodePort": 80}}),
    ("jail", {"size": "lots"}),
    ("accounting", {"mode": "Sometimes"}),
    ("images", {"pullPolicy": "Sometimes"}),
    ("slurmConfig", {"extraLines": ["nodename = x"]}),
    ("slurmConfig", {"extraLines": ["PrivateData=none"]}),
    ("slurmConfig", {"privateData": ["jobs", "secrets"]}),
    ("slurmConfig", {"privateData": ["jobs", "jobs"]}),
    ("login", {"forwarding": {"tcp": "yes"}}),
    ("healthChecks", {"nccl": {"minBusBandwidthGbps": 0}}),
    ("healthChecks", {"nccl": {"schedule": "hourly"}}),
]


@pytest.mark.parametrize(("key", "bad"), BAD_SPECS, ids=[f"{k}={json.dumps(v)}" for k, v in BAD_SPECS])
def test_schema_refuses_what_the_operator_refuses(key: str, bad: Any) -> None:
    chart = merged(values("slurm-cluster"), {key: bad})
    if isinstance(bad, list):
        chart[key] = bad
    with pytest.raises(ValueError):
        parse_spec(spec_of(chart))
    errors = list(jsonschema.Draft7Validator(schema("slurm-cluster")).iter_errors(chart))
    assert errors, f"the schema accepted {key}={bad!r}"
    assert any(e.absolute_path and e.absolute_path[0] == key for e in errors), [e.message for e in errors]


def test_a_misspelt_value_is_refused_by_the_schema_and_left_out_by_the_operator() -> None:
    """helm refuses the typo naming it; an operator older than its CRD would see fields it does not know
    the same way, and runs on the rest (``parse_spec_unknown``)."""
    chart = merged(values("slurm-cluster"), {"jail": {"sise": "10Gi"}})
    errors = list(jsonschema.Draft7Validator(schema("slurm-cluster")).iter_errors(chart))
    assert [list(e.absolute_path) for e in errors] == [["jail"]] and "sise" in errors[0].message
    spec, unknown = parse_spec_unknown(spec_of(chart))
    assert unknown == ["jail.sise"] and spec.jail.size == "20Gi"
