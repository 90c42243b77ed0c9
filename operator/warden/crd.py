"""Generate the CustomResourceDefinitions: SlurmCluster from the pydantic models, and WorkerSet (the
operator's own child object per worker group, with a scale subresource).

`warden-crd` prints them; `warden-crd --write` rewrites the checked-in copies in the CRD chart, and a
unit test fails whenever those copies differ from what the code generates.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from warden.model import (
    API_GROUP,
    API_VERSION,
    KIND,
    PLURAL,
    WORKER_SET_KIND,
    WORKER_SET_PLURAL,
    SlurmClusterSpec,
    SlurmClusterStatus,
)

CRD_DIR = Path("charts/slurm-operator-crds/templates")
CRD_PATH = CRD_DIR / "slurmclusters.yaml"
WORKER_SET_CRD_PATH = CRD_DIR / "workersets.yaml"
SHORT_NAMES = ["slurm"]  # not `sc`: kubectl resolves that to StorageClass
CATEGORIES = ["warden", "all-slurm"]
# metadata.name ends up inside child object names and Slurm node names (<name>-worker-<group>-<i>),
# which must stay valid 63-character DNS labels.
MAX_NAME_LENGTH = 24

PRINTER_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Workers", "type": "string", "jsonPath": ".status.workers", "description": "ready/desired"},
    {"name": "Login", "type": "string", "jsonPath": ".status.login", "description": "ready/desired"},
    {
        "name": "Usable",
        "type": "integer",
        "jsonPath": ".status.slurmNodes.usable",
        "description": "worker nodes Slurm may start jobs on",
    },
    {"name": "Jail", "type": "boolean", "jsonPath": ".status.jailPopulated", "description": "populated"},
    {
        "name": "Slurm",
        "type": "string",
        "jsonPath": ".status.slurm.version",
        "description": "the Slurm series every part runs (an upgrade's target: status.slurm.target)",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

# Keys of pydantic's JSON schema that have no place in a Kubernetes structural schema.
_DROPPED = {"title", "additionalProperties", "$defs"}


def _structural(node: Any, defs: dict[str, Any]) -> Any:
    """Turn pydantic's JSON schema into a Kubernetes structural schema.

    References are inlined, `X | None` becomes an optional X, titles go, and `dict[str, X]`
    becomes `additionalProperties: X` (the only form in which additionalProperties is kept).
    """
    if isinstance(node, list):
        return [_structural(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _structural(merged, defs)
    if "anyOf" in node:
        branches = [b for b in node["anyOf"] if b.get("type") != "null"]
        if len(branches) == 1:
            rest = {k: v for k, v in node.items() if k not in ("anyOf", "default")}
            # absent means None: never defaulted to {} (see _default_nested_objects)
            return {**_structural({**branches[0], **rest}, defs), _OPTIONAL: True}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED:
            continue
        if key == "properties":
            out[key] = {name: _structural(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out[key] = _structural(value, defs)
        else:
            out[key] = value
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        out["additionalProperties"] = _structural(extra, defs)
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        # JSON Schema 2020 (pydantic) gives the bound itself; OpenAPI 3.0 (Kubernetes) a boolean flag.
        if isinstance(out.get(exclusive), int | float) and not isinstance(out[exclusive], bool):
            out[bound] = out[exclusive]
            out[exclusive] = True
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
    if out.get("type") == "object" and "properties" in out:
        _default_nested_objects(out)
    return out


_OPTIONAL = "x-warden-optional"  # a marker _structural leaves for _default_nested_objects, then removed


def _default_nested_objects(schema: dict[str, Any]) -> None:
    """Give optional object-valued properties `default: {}` so their own defaults apply.

    Kubernetes only defaults fields of objects that exist; an empty default makes e.g.
    `spec.login.replicas` appear even when `spec.login` was left out.
    """
    required = set(schema.get("required", []))
    for name, sub in schema["properties"].items():
        if sub.pop(_OPTIONAL, False) or name in required or "default" in sub or sub.get("type") != "object":
            continue
        if "properties" in sub and not sub.get("required"):
            sub["default"] = {}


def openapi_schema() -> dict[str, Any]:
    spec = SlurmClusterSpec.model_json_schema(by_alias=True, mode="validation")
    status = SlurmClusterStatus.model_json_schema(by_alias=True, mode="serialization")
    spec_schema = _structural(spec, spec.get("$defs", {}))
    status_schema = _structural(status, status.get("$defs", {}))
    status_schema.pop("required", None)
    return {
        "type": "object",
        "description": "A Slurm cluster whose login and worker nodes share one root filesystem (the jail).",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema,
            "status": status_schema,
        },
        "x-kubernetes-validations": [
            {
                "rule": f"self.metadata.name.size() <= {MAX_NAME_LENGTH}",
                "message": f"metadata.name must be at most {MAX_NAME_LENGTH} characters "
                "(it prefixes every child object and Slurm node name)",
            }
        ],
    }


def _definition(
    kind: str, plural: str, version: dict[str, Any], short_names: list[str] | None = None
) -> dict[str, Any]:
    """A CustomResourceDefinition of ours: namespaced, one served and stored version, kept by Helm."""
    names: dict[str, Any] = {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()}
    if short_names:
        names["shortNames"] = short_names
    names["categories"] = CATEGORIES
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{API_GROUP}",
            "annotations": {"helm.sh/resource-policy": "keep"},
            "labels": {"app.kubernetes.io/name": "slurm-operator-crds", "app.kubernetes.io/part-of": "warden"},
        },
        "spec": {
            "group": API_GROUP,
            "scope": "Namespaced",
            "names": names,
            "versions": [{"name": API_VERSION, "served": True, "storage": True, **version}],
        },
    }


def crd() -> dict[str, Any]:
    version = {
        "subresources": {"status": {}},
        "additionalPrinterColumns": PRINTER_COLUMNS,
        "schema": {"openAPIV3Schema": openapi_schema()},
    }
    return _definition(KIND, PLURAL, version, SHORT_NAMES)


def _int(description: str, minimum: int = 0) -> dict[str, Any]:
    return {"type": "integer", "format": "int32", "minimum": minimum, "description": description}


def worker_set_schema() -> dict[str, Any]:
    spec = {
        "type": "object",
        "required": ["replicas", "selector", "template"],
        "properties": {
            "replicas": _int("Pods (Slurm nodes) the group should have; HPA, KEDA and `kubectl scale` set it."),
            "selector": {
                "type": "object",
                "description": "Labels of the set's pods (set by the operator, never changes).",
                "required": ["matchLabels"],
                "properties": {"matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}},
                "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "selector is immutable"}],
            },
            "maxUnavailable": _int("Upgrades: pods out of service at a time (drained, replaced once idle).", 1),
            "scaleInTimeoutSeconds": _int("Scale-in: how long a drained leaving node waits for its jobs."),
            "maintenanceWindow": {
                "type": "object",
                "description": "Upgrades wait for this window (the SlurmCluster's spec.maintenanceWindow).",
                "required": ["start", "durationMinutes"],
                "properties": {
                    "start": {"type": "string", "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$"},
                    "durationMinutes": _int("How long it stays open.", 1),
                    "days": {
                        "type": "array",
                        "items": {"type": "string", "enum": ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]},
                    },
                },
            },
            "template": {
                "type": "object",
                "description": "The pod template, rendered by the operator from the SlurmCluster.",
                "x-kubernetes-preserve-unknown-fields": True,
            },
        },
    }
    status = {
        "type": "object",
        "properties": {
            "replicas": _int("Pods of the set, not counting those being deleted."),
            "readyReplicas": _int("Of those, ready (slurmd listening)."),
            "updatedReplicas": _int("Of those, made from the current template."),
            "updateRevision": {"type": "string", "description": "Hash of the current pod template."},
            "upgradeWaitsForWindow": {
                "type": "string",
                "description": "Pods on an older template wait for the maintenance window opening then (RFC 3339).",
            },
            "selector": {"type": "string", "description": "Label selector of the pods (for the scale subresource)."},
            "observedGeneration": {"type": "integer", "format": "int64"},
        },
    }
    return {
        "type": "object",
        "description": "The worker pods of one worker group of a SlurmCluster, made by the operator, which picks "
        "the nodes that leave on scale-in (idle ones first, then those whose jobs end soonest). "
        "Scale it, do not edit it: the SlurmCluster is its source.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
    }


def worker_set_crd() -> dict[str, Any]:
    columns = [
        {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"},
        {"name": "Current", "type": "integer", "jsonPath": ".status.replicas"},
        {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
        {"name": "Up-to-date", "type": "integer", "jsonPath": ".status.updatedReplicas"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    scale = {
        "specReplicasPath": ".spec.replicas",
        "statusReplicasPath": ".status.replicas",
        "labelSelectorPath": ".status.selector",
    }
    version = {
        "subresources": {"status": {}, "scale": scale},
        "additionalPrinterColumns": columns,
        "schema": {"openAPIV3Schema": worker_set_schema()},
    }
    return _definition(WORKER_SET_KIND, WORKER_SET_PLURAL, version)


HEADER = "# Generated by `warden-crd --write` from operator/warden/{source}. Do not edit.\n"


def render_crd_yaml() -> str:
    return HEADER.format(source="model.py") + yaml.safe_dump(crd(), sort_keys=False, width=100)


def render_worker_set_crd_yaml() -> str:
    return HEADER.format(source="crd.py") + yaml.safe_dump(worker_set_crd(), sort_keys=False, width=100)


def outputs() -> dict[Path, str]:
    return {CRD_PATH: render_crd_yaml(), WORKER_SET_CRD_PATH: render_worker_set_crd_yaml()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print or write the SlurmCluster and WorkerSet CRDs.")
    parser.add_argument("--write", action="store_true", help=f"write them into {CRD_DIR} (from the repo root)")
    args = parser.parse_args(argv)
    for path, text in outputs().items():
        if args.write:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}", file=sys.stderr)
        else:
            sys.stdout.write(("---\n" if path != CRD_PATH else "") + text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
