#!/usr/bin/env python3
"""Generate charts/slurm-cluster/values.schema.json from the SlurmCluster CRD.

The CRD (charts/slurm-operator-crds/templates/slurmclusters.yaml, itself generated from the operator's
models by `make crd`) is the single source of truth: the chart's values are the SlurmCluster spec plus
a few chart-only keys, so the values schema is the CRD's spec schema translated to JSON Schema:

- every object with fixed properties refuses unknown keys (`additionalProperties: false`; Kubernetes
  would silently prune them instead, and a typo in values would go unnoticed);
- `x-kubernetes-int-or-string` (quantities) becomes `type: [string, number]`;
- `x-kubernetes-list-type: set` becomes `uniqueItems: true`;
- OpenAPI 3.0's boolean `exclusiveMinimum`/`exclusiveMaximum` become JSON Schema's numeric bounds;
- optional fields without a default may be `null` (values.yaml lists them as `null`, the chart drops
  nulls when it renders the SlurmCluster);
- CEL rules "no item of this list matches a pattern" become `items: {not: {pattern}}` (`anyOf` when several: slurm.conf
  lines setting keys the operator owns or refuses), "every item matches" `items: {allOf: [{pattern}]}` (the keys
  extraLines may set); other CEL rules and `x-kubernetes-*` extensions are dropped:
  cross-field rules are checked by the chart's templates (`slurm-cluster.validate` in
  templates/_helpers.tpl) and, in any case, by the API server on install.

    hack/gen-values-schema.py            # print
    hack/gen-values-schema.py --write    # rewrite the checked-in file
    hack/gen-values-schema.py --check    # exit 1 when the checked-in file differs
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CRD_PATH = ROOT / "charts/slurm-operator-crds/templates/slurmclusters.yaml"
SCHEMA_PATH = ROOT / "charts/slurm-cluster/values.schema.json"

DNS_LABEL_OR_EMPTY = r"^([a-z]([-a-z0-9]*[a-z0-9])?)?$"
NAME_RULE = re.compile(r"^self\.metadata\.name\.size\(\) <= (\d+)$")
# CEL "no item matches": `self.all(l, !l.matches(r'PATTERN'))` on a list of strings.
NO_ITEM_MATCHES = re.compile(r"^self\.all\((\w+), !\1\.matches\(r'(.*)'\)\)$")
# CEL "every item matches": `self.all(l, l.matches(r'PATTERN'))` (an allow-list, e.g. extraLines' keys).
ALL_ITEMS_MATCH = re.compile(r"^self\.all\((\w+), \1\.matches\(r'(.*)'\)\)$")


def chart_only(max_name_length: int) -> dict[str, Any]:
    """Keys of the chart's values that are not part of the spec."""
    return {
        "global": {"type": "object", "description": "Helm's global values."},
        "nameOverride": {
            "type": "string",
            "pattern": DNS_LABEL_OR_EMPTY,
            "maxLength": max_name_length,
            "description": f"Name of the SlurmCluster; empty means the release name. A DNS label of at most "
            f"{max_name_length} characters: lower-case letters, digits and '-', starting with a letter.",
        },
        "labels": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "description": "Extra labels of the SlurmCluster object.",
        },
        "annotations": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "description": "Extra annotations of the SlurmCluster object.",
        },
    }


def _types(node: dict[str, Any]) -> list[str]:
    t = node.get("type")
    if t is None:
        return []
    return list(t) if isinstance(t, list) else [t]


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    types = _types(node)
    if not types or "null" in types:
        return node
    return {**node, "type": [*types, "null"]}


def translate(node: Any) -> Any:
    """One CRD (OpenAPI 3.0 structural) schema node as a JSON Schema node."""
    if isinstance(node, list):
        return [translate(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key in ("exclusiveMinimum", "exclusiveMaximum"):
            continue
        if key == "properties":
            required = set(node.get("required", []))
            props: dict[str, Any] = {}
            for name, sub in value.items():
                child = translate(sub)
                if name not in required and "default" not in sub:
                    child = _nullable(child)
                props[name] = child
            out[key] = props
        elif key in ("items", "additionalProperties"):
            out[key] = translate(value)
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["string", "number"]
    if node.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    for bound, flag in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if node.get(flag) is True and bound in out:
            out[flag] = out.pop(bound)
    if "properties" in out:
        out["additionalProperties"] = False
    refused = [
        {"pattern": _portable_pattern(m.group(2))}
        for rule in node.get("x-kubernetes-validations", [])
        if (m := NO_ITEM_MATCHES.match(rule["rule"]))
    ]
    if refused and "items" in out:
        out["items"] = {**out["items"], "not": refused[0] if len(refused) == 1 else {"anyOf": refused}}
    required = [
        {"pattern": _portable_pattern(m.group(2))}
        for rule in node.get("x-kubernetes-validations", [])
        if (m := ALL_ITEMS_MATCH.match(rule["rule"]))
    ]
    if required and "items" in out:
        out["items"] = {**out["items"], "allOf": required}
    return _order(out)


def _portable_pattern(pattern: str) -> str:
    """RE2 takes inline flags anywhere; other engines (Python's, for the unit tests) only at the start."""
    if pattern.startswith("^(?i)"):
        return "(?i)^" + pattern[len("^(?i)") :]
    return pattern


_KEY_ORDER = ["type", "description", "default", "enum", "const", "pattern", "minimum", "maximum"]


def _order(node: dict[str, Any]) -> dict[str, Any]:
    """A stable, readable key order (the CRD's own order is pydantic's, which varies by node)."""
    first = [k for k in _KEY_ORDER if k in node]
    rest = sorted(k for k in node if k not in _KEY_ORDER)
    return {k: node[k] for k in first + rest}


def crd_root_schema(crd_path: Path = CRD_PATH) -> dict[str, Any]:
    crd = yaml.safe_load(crd_path.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
    root: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return root


def max_name_length(root: dict[str, Any]) -> int:
    """The CRD's CEL bound on metadata.name (the name prefixes every child object and Slurm node name)."""
    for rule in root.get("x-kubernetes-validations", []):
        match = NAME_RULE.match(rule["rule"])
        if match:
            return int(match.group(1))
    raise SystemExit(f"{CRD_PATH}: no CEL rule bounding metadata.name; update hack/gen-values-schema.py")


def values_schema(crd_path: Path = CRD_PATH) -> dict[str, Any]:
    root = crd_root_schema(crd_path)
    spec = translate(root["properties"]["spec"])
    properties = {**chart_only(max_name_length(root)), **spec["properties"]}
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$comment": "Generated by hack/gen-values-schema.py from the SlurmCluster CRD. Do not edit.",
        "title": "slurm-cluster values",
        "description": spec.get("description", ""),
        "type": "object",
        "additionalProperties": False,
        "required": spec.get("required", []),
        "properties": properties,
    }


def render(crd_path: Path = CRD_PATH) -> str:
    return json.dumps(values_schema(crd_path), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"rewrite {SCHEMA_PATH.relative_to(ROOT)}")
    mode.add_argument("--check", action="store_true", help="exit 1 when the checked-in schema is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        SCHEMA_PATH.write_text(text)
        return 0
    if args.check:
        if not SCHEMA_PATH.is_file() or SCHEMA_PATH.read_text() != text:
            print(f"{SCHEMA_PATH.relative_to(ROOT)} is stale: run hack/gen-values-schema.py --write", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
