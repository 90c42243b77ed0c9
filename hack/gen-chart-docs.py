#!/usr/bin/env python3
"""Write the values table of each chart's README.md from its values.yaml (helm-docs style comments).

A value is documented by a `# -- description` comment (continued by further `# ` lines) right above
its key. Maps without such a comment are descended into; lists are documented as a whole. The table
goes between the README's `<!-- values:start -->` and `<!-- values:end -->` markers.

    hack/gen-chart-docs.py            # rewrite the tables
    hack/gen-chart-docs.py --check    # exit 1 when a table is stale or a value has no `# --` comment
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHARTS = ["slurm-operator-crds", "slurm-operator", "slurm-cluster"]
START, END = "<!-- values:start -->", "<!-- values:end -->"
KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?P<rest>.*)$")


@dataclass(frozen=True)
class Row:
    key: str
    type: str
    default: str
    description: str


_JSON_TYPES = {"integer": "int", "boolean": "bool", "number": "float", "array": "list"}


def _schema_type(schema: dict[str, Any], path: list[str]) -> str | None:
    """The type values.schema.json gives the value (for `null` defaults, which say nothing)."""
    node: Any = schema
    for part in path:
        node = (node.get("properties") or {}).get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        return None
    types = node.get("type")
    types = types if isinstance(types, list) else [types]
    named = [str(_JSON_TYPES.get(t, t)) for t in types if t and t != "null"]
    return " or ".join(named) if named else None


def _type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "list"
    return "object"


def _lookup(values: dict[str, Any], path: list[str]) -> Any:
    node: Any = values
    for part in path:
        node = node[part]
    return node


def parse(values_path: Path) -> tuple[list[Row], list[str]]:
    """The documented rows, and the keys (leaves outside lists) that lack a `# --` comment."""
    schema_path = values_path.with_name("values.schema.json")
    schema = json.loads(schema_path.read_text()) if schema_path.is_file() else {}
    text = values_path.read_text()
    values = yaml.safe_load(text) or {}
    rows: list[Row] = []
    undocumented: list[str] = []
    stack: list[tuple[int, str]] = []  # (indent, key) of the enclosing maps
    comment: list[str] | None = None
    in_list_indent: int | None = None  # inside a documented list: skip its items
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            comment = [stripped[4:].strip()]
            continue
        if stripped.startswith("#") and comment is not None:
            comment.append(stripped[1:].strip())
            continue
        if not stripped:
            comment = None
            continue
        if stripped.startswith("#"):
            continue
        match = KEY_LINE.match(line)
        indent = len(line) - len(line.lstrip())
        if in_list_indent is not None and (indent > in_list_indent or stripped.startswith("-")):
            continue
        in_list_indent = None
        if match is None:
            comment = None
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = [k for _, k in stack] + [match.group("key")]
        value = _lookup(values, path)
        key = ".".join(path)
        if comment is not None:
            default = json.dumps(value, ensure_ascii=False)
            kind = (_schema_type(schema, path) or "string") if value is None else _type(value)
            rows.append(Row(key, kind, default, " ".join(c for c in comment if c)))
            if isinstance(value, list):
                in_list_indent = indent
            elif isinstance(value, dict):
                in_list_indent = indent  # a documented map is documented as a whole
        elif isinstance(value, dict) and value:
            stack.append((indent, match.group("key")))
        else:
            undocumented.append(key)
            if isinstance(value, list | dict):
                in_list_indent = indent
        comment = None
    return rows, undocumented


def table(rows: list[Row]) -> str:
    out = ["| Key | Type | Default | Description |", "| --- | --- | --- | --- |"]
    for r in rows:
        default = r.default.replace("|", "\\|")
        description = r.description.replace("|", "\\|")
        out.append(f"| `{r.key}` | {r.type} | `{default}` | {description} |")
    return "\n".join(out)


def updated_readme(chart: Path) -> tuple[str, str, list[str]]:
    """(current README text, README text with a fresh table, undocumented keys)."""
    rows, undocumented = parse(chart / "values.yaml")
    readme = chart / "README.md"
    current = readme.read_text() if readme.is_file() else ""
    if START not in current or END not in current:
        raise SystemExit(f"{readme}: no {START} ... {END} markers")
    head, rest = current.split(START, 1)
    _, tail = rest.split(END, 1)
    return current, f"{head}{START}\n{table(rows)}\n{END}{tail}", undocumented


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a README table is stale")
    args = parser.parse_args(argv)
    rc = 0
    for name in CHARTS:
        chart = ROOT / "charts" / name
        current, fresh, undocumented = updated_readme(chart)
        for key in undocumented:
            print(f"charts/{name}/values.yaml: {key} has no '# --' comment", file=sys.stderr)
            rc = 1
        if args.check:
            if current != fresh:
                print(f"charts/{name}/README.md is stale: run hack/gen-chart-docs.py", file=sys.stderr)
                rc = 1
        else:
            (chart / "README.md").write_text(fresh)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
