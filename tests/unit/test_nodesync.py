"""Slurm and Kubernetes node state both ways: what the planner decides from what it observed."""

from __future__ import annotations

from warden.events import REASONS
from warden.nodesync import PodCondition, WorkerPod, condition_of, plan
from warden.slurm.model import Node
from warden.slurm.reasons import CORDON as CORDON_PREFIX
from warden.slurm.reasons import cordon as cordon_reason


def node(name: str, state: str = "IDLE", *flags: str, reason: str = "") -> Node:
    return Node(name=name, state=state, flags=frozenset(flags), reason=reason, gres="", features=(), partitions=())


def pod(name: str, k8s: str = "k1", condition: PodCondition | None = None, deleting: bool = False) -> WorkerPod:
    return WorkerPod(name=name, k8s_node=k8s, condition=condition, deleting=deleting)


def test_each_pod_carries_its_slurm_state_and_reason() -> None:
    assert condition_of(node("a")) == PodCondition("True", "Idle", "IDLE")
    assert condition_of(node("a", "MIXED")).reason == "Mixed"
    assert condition_of(node("a", "ALLOCATED")).reason == "Allocated"
    assert condition_of(node("a", "IDLE", "DRAIN", reason="bob: bad disk")) == PodCondition(
        "False", "Drained", "IDLE+DRAIN: bob: bad disk"
    )
    assert condition_of(node("a", "ALLOCATED", "DRAIN", reason="x")).reason == "Draining"
    assert condition_of(node("a", "IDLE", "NOT_RESPONDING")).reason == "NotResponding"
    assert condition_of(node("a", "DOWN", reason="Not responding")).reason == "Down"
    assert condition_of(None).reason == "NotRegistered"


def test_only_changed_conditions_are_written_and_transitions_make_events() -> None:
    idle = condition_of(node("a"))
    out = plan([pod("a", condition=idle), pod("b", condition=idle)],
               [node("a"), node("b", "IDLE", "DRAIN", reason="health: slow")], {})  # fmt: skip
    assert list(out.conditions) == ["b"]
    [event] = out.events
    assert (event.reason, event.pod) == ("SlurmNodeDrained", "b") and "health: slow" in event.message
    assert REASONS[event.reason].warning
    back = plan([pod("b", condition=out.conditions["b"])], [node("b")], {})
    assert [(e.reason, e.pod) for e in back.events] == [("SlurmNodeUsable", "b")]
    assert not REASONS["SlurmNodeUsable"].warning
    assert plan([pod("b", condition=out.conditions["b"])],
                [node("b", "IDLE", "DRAIN", reason="health: slow")], {}).events == []  # fmt: skip


def test_status_counts_registered_usable_and_lists_every_drain_whoever_made_it() -> None:
    out = plan(
        [pod("a"), pod("b"), pod("c"), pod("d")],
        [node("a"), node("b", "IDLE", "DRAIN", reason="alice: firmware"), node("c", "DOWN", reason="Not responding")],
        {},
    )
    s = out.summary
    assert (s.registered, s.usable) == (3, 1)
    assert [(d.node, d.reason) for d in s.drained] == [("b", "alice: firmware")]
    assert [(d.node, d.reason) for d in s.down] == [("c", "Not responding")]


def test_cordon_drains_with_the_owner_prefix_and_uncordon_resumes_only_that() -> None:
    nodes = [node("a"), node("b", "IDLE", "DRAIN", reason="bob: keep off")]
    cordoned = plan([pod("a", "k1"), pod("b", "k1")], nodes, {"k1": True})
    assert cordoned.drains == [("a", cordon_reason("k1"))]  # b is drained already: bob's reason stays
    assert cordon_reason("k1").startswith(CORDON_PREFIX) and "k1" in cordon_reason("k1")

    after = [node("a", "IDLE", "DRAIN", reason=cordon_reason("k1")), node("b", "IDLE", "DRAIN", reason="bob: keep off")]
    uncordoned = plan([pod("a", "k1"), pod("b", "k1")], after, {"k1": False})
    assert uncordoned.resumes == ["a"] and uncordoned.drains == []
    still = plan([pod("a", "k1"), pod("b", "k1")], after, {"k1": True})
    assert still.resumes == [] and still.drains == []


def test_a_drain_someone_else_made_on_a_cordoned_node_is_never_resumed() -> None:
    looks_similar = node("a", "IDLE", "DRAIN", reason="warden: pod terminating")
    assert plan([pod("a")], [looks_similar], {"k1": False}).resumes == []


def test_ghost_nodes_of_gone_pods_are_deleted_not_those_of_pods_on_their_way_out() -> None:
    out = plan([pod("a"), pod("b", deleting=True)], [node("a"), node("b"), node("gone", "DOWN")], {})
    assert out.delete_nodes == ["gone"]
    assert "b" not in out.conditions
    hidden = plan([pod("a")], [node("a"), node("demo-worker-cpu-standby-0", "FUTURE")], {})
    assert hidden.delete_nodes == [] and hidden.summary.registered == 1, "slurm.conf's hidden capacity stays"


def test_busy_label_follows_jobs_so_the_budget_keeps_only_working_pods() -> None:
    out = plan([pod("a"), pod("b"), pod("c")], [node("a", "ALLOCATED"), node("b", "MIXED"), node("c")], {})
    assert out.busy == {"a": True, "b": True}
    done = WorkerPod(name="a", k8s_node="k1", condition=None, busy_label=True)
    assert plan([done], [node("a")], {}).busy == {"a": False}
    completing = plan([done], [node("a", "IDLE", "COMPLETING")], {})
    assert completing.busy == {}, "a job still completing keeps the pod protected"


def test_status_counts_the_slurmd_versions_the_registered_nodes_report() -> None:
    import dataclasses
    import json
    from pathlib import Path

    from warden.slurm.model import nodes_from_doc

    fixture = Path(__file__).parent / "fixtures" / "slurm" / "slurmrestd_nodes_three.json"
    parsed = nodes_from_doc(json.loads(fixture.read_text()))
    assert {n.version for n in parsed} == {"24.11.5"}  # slurmrestd's /nodes `version`
    a, b, c = (dataclasses.replace(node(x), version=v) for x, v in (("a", "26.05.5"), ("b", "24.11.5"), ("c", "")))
    out = plan([pod("a"), pod("b"), pod("c")], [a, b, c], {})
    assert out.summary.slurmd_versions == {"24.11.5": 1, "26.05.5": 1}  # c reported none


def test_nodes_in_one_state_get_one_condition_each_reason_its_own() -> None:
    """Ten thousand allocated nodes: one condition object written to each pod, not ten thousand alike."""
    nodes = [node(f"n{i}", "ALLOCATED") for i in range(4)] + [
        node("d1", "IDLE", "DRAIN", reason="bob: disk"),
        node("d2", "IDLE", "DRAIN", reason="ann: fan"),
    ]
    out = plan([pod(n.name) for n in nodes], nodes, {})
    assert len({id(out.conditions[f"n{i}"]) for i in range(4)}) == 1
    assert out.conditions["n0"] == PodCondition("True", "Allocated", "ALLOCATED")
    assert out.conditions["d1"].message == "IDLE+DRAIN: bob: disk"
    assert out.conditions["d2"].message == "IDLE+DRAIN: ann: fan"
