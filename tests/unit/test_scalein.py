"""Scale-in drains first and waits: which nodes are drained, when the StatefulSet may shrink."""

from __future__ import annotations

from warden.model import parse_spec
from warden.reconcile import hold_replicas
from warden.render.cluster import render
from warden.render.context import Cluster
from warden.scalein import SCALE_IN_PREFIX, Group, plan, reason
from warden.slurm import Node

STS = "demo-worker-cpu"


def node(i: int, state: str = "IDLE", *flags: str, why: str = "") -> Node:
    return Node(name=f"{STS}-{i}", state=state, flags=frozenset(flags), reason=why, gres="", features=(), partitions=())


def nodes(*items: Node) -> dict[str, Node]:
    return {n.name: n for n in items}


G = Group(statefulset=STS, desired=1, current=3)


def test_the_leaving_nodes_are_drained_first_and_the_group_waits() -> None:
    out = plan([G], nodes(node(0, "ALLOCATED"), node(1), node(2, "ALLOCATED")))
    assert out.drains == [(f"{STS}-1", reason(G)), (f"{STS}-2", reason(G))]
    assert out.scale == [], "never shrink in the round that drains"


def test_the_group_shrinks_only_once_no_leaving_node_runs_a_job() -> None:
    drained = reason(G)
    busy = plan([G], nodes(node(0), node(1, "IDLE", "DRAIN", why=drained), node(2, "ALLOCATED", "DRAIN", why=drained)))
    assert busy.scale == [] and busy.waiting == {STS: [f"{STS}-2"]}
    idle = plan([G], nodes(node(0), node(1, "IDLE", "DRAIN", why=drained), node(2, "IDLE", "DRAIN", why=drained)))
    assert idle.scale == [(STS, 1)] and idle.drains == []


def test_a_leaving_node_that_never_registered_holds_nothing_up() -> None:
    assert plan([G], nodes(node(0))).scale == [(STS, 1)]


def test_scaled_back_up_the_staying_nodes_are_resumed_but_not_a_persons_drain() -> None:
    back = Group(statefulset=STS, desired=3, current=3)
    out = plan(
        [back], nodes(node(1, "IDLE", "DRAIN", why=f"{SCALE_IN_PREFIX}: x"), node(2, "IDLE", "DRAIN", why="bob"))
    )
    assert out.resumes == [f"{STS}-1"] and out.scale == [] and out.drains == []


def test_growing_or_steady_groups_need_nothing() -> None:
    assert plan([Group(STS, desired=4, current=2)], nodes(node(0), node(1))) == plan([], {})


def test_the_reconcile_keeps_a_shrinking_group_at_its_size_and_lets_others_be() -> None:
    spec = {"workerGroups": [{"name": "cpu", "replicas": 1}, {"name": "gpu", "replicas": 2, "autoscaled": True}]}
    objects = render(Cluster(name="demo", namespace="ns", spec=parse_spec(spec))).objects
    live = {
        "demo-worker-cpu": {"spec": {"replicas": 3}},
        "demo-worker-gpu": {"spec": {"replicas": 5}},
        "demo-login": {"spec": {"replicas": 4}},
    }
    held = hold_replicas(live, objects)
    sts = {o["metadata"]["name"]: o["spec"]["replicas"] for o in objects if o["kind"] == "StatefulSet"}
    assert sts["demo-worker-cpu"] == 3 and len(held) == 1, "shrinks only once the sync says its nodes are idle"
    assert sts["demo-worker-gpu"] == 2, "autoscaled: not the operator's to hold"
    assert sts["demo-login"] == 1, "login nodes run no jobs"
