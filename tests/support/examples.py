"""The example SlurmClusters under docs/examples, loaded as renderer input."""

from __future__ import annotations

from pathlib import Path

import yaml

from warden.model import parse_spec
from warden.render.context import Cluster

EXAMPLES_DIR = Path(__file__).resolve().parents[2] / "docs" / "examples"
EXAMPLES = sorted(p.stem for p in EXAMPLES_DIR.glob("*.yaml"))


def load(name: str) -> Cluster:
    doc = yaml.safe_load((EXAMPLES_DIR / f"{name}.yaml").read_text())
    meta = doc["metadata"]
    return Cluster(name=meta["name"], namespace=meta["namespace"], spec=parse_spec(doc["spec"]))
