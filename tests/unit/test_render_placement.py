"""Where each component's pods may run: the controller, the login nodes and the jail's populate Job take a
nodeSelector and tolerations as worker groups do (an NFS jail mounted only where nodes have an NFS client,
tainted node pools)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.test_render_manifests import objects, pod_spec
from warden.model import parse_spec
from warden.render.context import Cluster

PLACE = {"nodeSelector": {"warden.dev/vm-node": "true"},
         "tolerations": [{"key": "warden.dev/vm-node", "operator": "Exists", "effect": "NoSchedule"}]}  # fmt: skip


def cluster(**spec: Any) -> Cluster:
    return Cluster(name="c", namespace="ns", spec=parse_spec({"workerGroups": [{"name": "cpu"}], **spec}))


def test_each_component_lands_where_its_own_placement_says() -> None:
    objs = objects(cluster(controller=PLACE, login=PLACE, jail={"populate": PLACE}))
    for key in ("StatefulSet/c-controller", "StatefulSet/c-login", "Job/c-populate-jail"):
        spec = pod_spec(objs[key])
        assert spec["nodeSelector"] == PLACE["nodeSelector"], key
        assert spec["tolerations"] == PLACE["tolerations"], key
    # the worker group said nothing: its pods go anywhere, as before
    assert "nodeSelector" not in pod_spec(objs["WorkerSet/c-worker-cpu"])


def test_a_cluster_that_places_nothing_renders_as_before() -> None:
    for key, obj in objects(cluster()).items():
        if "template" in obj.get("spec", {}):
            assert "nodeSelector" not in pod_spec(obj) and "tolerations" not in pod_spec(obj), key


@pytest.mark.parametrize("where", ["controller", "login"])
def test_a_selector_key_that_is_no_label_key_is_refused_naming_it(where: str) -> None:
    with pytest.raises(ValueError, match="nodeSelector key"):
        cluster(**{where: {"nodeSelector": {"not a key!": "x"}}})
