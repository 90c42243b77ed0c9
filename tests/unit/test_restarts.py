"""Which spec changes replace pods, named for the PodsReplaced Event; Slurm config changes never do."""

from __future__ import annotations

import copy
from typing import Any

from warden.model import parse_spec
from warden.render.cluster import render
from warden.render.context import Cluster
from warden.render.pods import Manifest
from warden.restarts import template_changes

BASE: dict[str, Any] = {"workerGroups": [{"name": "cpu", "replicas": 2}]}


def templates(spec: dict[str, Any]) -> dict[str, Manifest]:
    cluster = Cluster(name="demo", namespace="ns", spec=parse_spec(spec))
    return {o["metadata"]["name"]: o["spec"]["template"] for o in render(cluster).objects if o["kind"] == "StatefulSet"}


def changes(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[str]]:
    before, after = templates(old), templates(new)
    return {name: c for name in after if name in before and (c := template_changes(before[name], after[name]))}


def test_slurm_config_partitions_and_scaling_replace_no_pod() -> None:
    new = copy.deepcopy(BASE)
    new["slurmConfig"] = {"extraLines": ["MessageTimeout=17"]}
    new["workerGroups"] = [{"name": "cpu", "replicas": 5}]
    new["partitions"] = [{"name": "batch", "workerGroups": ["cpu"]}]
    assert changes(BASE, new) == {}


def test_image_and_resources_are_named() -> None:
    new = copy.deepcopy(BASE)
    new["images"] = {"controller": "warden/controller:9.9"}
    new["controller"] = {"resources": {"limits": {"memory": "2Gi"}}}
    got = changes(BASE, new)
    assert list(got) == ["demo-controller"]
    [image, resources] = got["demo-controller"]
    assert image.startswith("slurmctld: image warden/controller:") and image.endswith("-> warden/controller:9.9")
    assert resources == "slurmctld: resources {} -> {'limits': {'memory': '2Gi'}}"


def test_a_live_template_with_api_defaults_is_no_change() -> None:
    [tpl] = [t for n, t in templates(BASE).items() if n == "demo-controller"]
    live = copy.deepcopy(tpl)
    live["spec"]["containers"][0]["terminationMessagePath"] = "/dev/termination-log"
    live["spec"]["restartPolicy"] = "Always"
    assert template_changes(live, tpl) == []
