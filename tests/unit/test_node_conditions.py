"""Kubernetes node conditions drain Slurm nodes (``spec.nodeConditionDrains``): what the planner decides
from the conditions and Slurm's node states, and what the spec accepts."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from warden.events import REASONS
from warden.model import NodeConditionDrain, SlurmClusterSpec, parse_spec
from warden.nodeconditions.plan import REASON_LIMIT, Action, NodeCondition, drain_reason, plan
from warden.nodeconditions.watch import conditions_of, slim_node
from warden.nodesync import WorkerPod
from warden.nodesync import plan as cordon_plan
from warden.slurm import reasons
from warden.slurm.model import Node

XID = NodeCondition("GpuXidError", "True", "Xid79", "GPU fell off the bus")
XID_REASON = "warden-condition: GpuXidError (Xid79): GPU fell off the bus (node gpu-1)"
RULES = [NodeConditionDrain(type="GpuXidError")]


def node(name: str, state: str = "IDLE", *flags: str, reason: str = "") -> Node:
    return Node(name=name, state=state, flags=frozenset(flags), reason=reason, gres="", features=(), partitions=())


def pod(name: str, k8s: str | None = "gpu-1", group: str | None = "gpu", deleting: bool = False) -> WorkerPod:
    return WorkerPod(name=name, k8s_node=k8s, condition=None, deleting=deleting, group=group)


def run(
    nodes: list[Node],
    conditions: dict[str, list[NodeCondition]],
    pods: list[WorkerPod] | None = None,
    rules: list[NodeConditionDrain] | None = None,
    cordoned: dict[str, bool] | None = None,
) -> list[Action]:
    pods = pods if pods is not None else [pod(n.name) for n in nodes]
    return plan(RULES if rules is None else rules, pods, {n.name: n for n in nodes}, conditions, cordoned or {}).actions


def test_a_named_condition_drains_the_node_with_its_type_reason_and_message() -> None:
    [action] = run([node("w0")], {"gpu-1": [XID]})
    assert action == Action("w0", XID_REASON, "NodeConditionDrained", f"w0: drained: {XID_REASON}")
    assert REASONS[action.event].warning and REASONS[action.event].action == "Drain"
    # the exporter and every other Warden part know whose drain it is
    assert reasons.reason_class(node("w0", "IDLE", "DRAIN", reason=XID_REASON)) == "node_condition"


def test_a_drained_node_is_not_drained_again_while_the_condition_holds() -> None:
    assert run([node("w0", "IDLE", "DRAIN", reason=XID_REASON)], {"gpu-1": [XID]}) == []
    # a busy node is drained (DRAIN flag, jobs go on) just the same
    assert run([node("w0", "ALLOCATED", "DRAIN", reason=XID_REASON)], {"gpu-1": [XID]}) == []


def test_a_resumed_node_whose_old_reason_matches_is_drained_again() -> None:
    """Slurm keeps the reason after RESUME: the text alone does not say the node is drained."""
    [action] = run([node("w0", reason=XID_REASON)], {"gpu-1": [XID]})
    assert action.reason == XID_REASON


def test_a_changed_condition_updates_the_reason() -> None:
    other = NodeCondition("GpuXidError", "True", "Xid48", "double bit ECC error")
    [action] = run([node("w0", "IDLE", "DRAIN", reason=XID_REASON)], {"gpu-1": [other]})
    assert action.reason == "warden-condition: GpuXidError (Xid48): double bit ECC error (node gpu-1)"


def test_the_drain_is_lifted_once_the_condition_clears() -> None:
    drained = node("w0", "IDLE", "DRAIN", reason=XID_REASON)
    cleared = NodeCondition("GpuXidError", "False", "NoXid", "no Xid since 10:00")
    for now in ([], [cleared]):
        [action] = run([drained], {"gpu-1": now})
        assert action == Action("w0", None, "NodeConditionCleared", "w0: conditions cleared on gpu-1: resumed")
        assert not REASONS[action.event].warning and REASONS[action.event].action == "Resume"


def test_other_drains_are_never_touched() -> None:
    """A person's drain, the health checks', a scale-in's: left as they are, condition or not."""
    for reason in ("hands off: bad DIMM", "warden-health: busbw 12.0 GB/s < 100", "warden: scale-in: gpu shrinks"):
        drained = node("w0", "IDLE", "DRAIN", reason=reason)
        assert run([drained], {"gpu-1": [XID]}) == []
        assert run([drained], {"gpu-1": []}) == []


def test_a_node_down_with_slurms_own_reason_is_drained() -> None:
    [action] = run([node("w0", "DOWN", "NOT_RESPONDING", reason="Not responding")], {"gpu-1": [XID]})
    assert action.reason == XID_REASON


def test_only_the_named_type_and_status_drain() -> None:
    noise = [NodeCondition("Ready", "True", "KubeletReady"), NodeCondition("GpuXidError", "False", "NoXid"),
             NodeCondition("MemoryPressure", "False")]  # fmt: skip
    assert run([node("w0")], {"gpu-1": noise}) == []
    not_ready = [NodeConditionDrain(type="Ready", status="Unknown")]
    unknown = NodeCondition("Ready", "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
    [action] = run([node("w0")], {"gpu-1": [unknown]}, rules=not_ready)
    assert action.reason == (
        "warden-condition: Ready=Unknown (NodeStatusUnknown): Kubelet stopped posting node status. (node gpu-1)"
    )


def test_every_holding_condition_is_in_the_reason_in_the_order_of_their_types() -> None:
    rules = [NodeConditionDrain(type="GpuXidError"), NodeConditionDrain(type="KernelDeadlock")]
    deadlock = NodeCondition("KernelDeadlock", "True", "DockerHung", "task docker:7 blocked\nfor more than 120 s")
    [action] = run([node("w0")], {"gpu-1": [deadlock, XID]}, rules=rules)
    assert action.reason == (
        "warden-condition: GpuXidError (Xid79): GPU fell off the bus;"
        " KernelDeadlock (DockerHung): task docker:7 blocked for more than 120 s (node gpu-1)"
    )


def test_a_long_message_is_cut() -> None:
    reason = drain_reason("gpu-1", [NodeCondition("GpuXidError", "True", "Xid79", "x" * 1000)])
    assert len(reason) == REASON_LIMIT and reason.startswith("warden-condition: GpuXidError (Xid79): xxx")
    assert reason.endswith("x... (node gpu-1)")


def test_only_the_workers_on_that_node_and_in_the_named_groups_drain() -> None:
    rules = [NodeConditionDrain(type="GpuXidError", worker_groups=["gpu"])]
    pods = [pod("g0"), pod("g1", k8s="gpu-2"), pod("c0", group="cpu"), pod("x0", group=None)]
    nodes = [node(p.name) for p in pods]
    actions = run(nodes, {"gpu-1": [XID], "gpu-2": []}, pods=pods, rules=rules)
    assert [a.node for a in actions] == ["g0"]
    # no group named: every group's workers on the node
    actions = run(nodes, {"gpu-1": [XID], "gpu-2": []}, pods=pods)
    assert [a.node for a in actions] == ["c0", "g0", "x0"]


def test_unknown_nodes_leaving_pods_and_unregistered_nodes_are_left_alone() -> None:
    drained = node("w0", "IDLE", "DRAIN", reason=XID_REASON)
    assert run([drained], {}) == []  # the Kubernetes node is not (yet) in the watch: nothing known
    assert run([drained], {"gpu-1": []}, pods=[pod("w0", deleting=True)]) == []
    assert run([drained], {"gpu-1": []}, pods=[pod("w0", k8s=None)]) == []
    assert run([], {"gpu-1": [XID]}, pods=[pod("w0")]) == []


def test_removing_the_rules_lifts_the_drains_they_made() -> None:
    [action] = run([node("w0", "IDLE", "DRAIN", reason=XID_REASON)], {"gpu-1": [XID]}, rules=[])
    assert action.reason is None


def test_the_cordon_and_the_conditions_hand_over_without_a_gap() -> None:
    """A node both want drained never takes a job between the two: one drain at a time, handed over."""
    cordoned = {"gpu-1": True}
    fresh = node("w0")
    # cordoned with a condition: the condition's drain, the cordon's left out this round
    [action] = run([fresh], {"gpu-1": [XID]}, cordoned=cordoned)
    assert action.reason == XID_REASON
    # the condition clears while the node is still cordoned: back to the cordon's reason, not resumed
    mine = node("w0", "IDLE", "DRAIN", reason=XID_REASON)
    [action] = run([mine], {"gpu-1": []}, cordoned=cordoned)
    assert action.reason == reasons.cordon("gpu-1") and action.event == "NodeConditionCleared"
    # ... and the cordon's own plan then leaves it drained until the uncordon
    by_cordon = node("w0", "IDLE", "DRAIN", reason=reasons.cordon("gpu-1"))
    assert cordon_plan([pod("w0")], [by_cordon], cordoned).resumes == []
    # uncordoned while a condition holds: the condition's drain replaces the cordon's (no resume between)
    [action] = run([by_cordon], {"gpu-1": [XID]}, cordoned={})
    assert action.reason == XID_REASON
    # still cordoned, the cordon's drain with a condition: it holds the node already
    assert run([by_cordon], {"gpu-1": [XID]}, cordoned=cordoned) == []


def test_the_watch_keeps_a_nodes_conditions_words_only() -> None:
    raw: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "gpu-1", "resourceVersion": "7", "labels": {"a": "b"}, "managedFields": [{}]},
        "status": {
            "images": [{"names": ["x"], "sizeBytes": 1}],
            "conditions": [
                {
                    "type": "GpuXidError",
                    "status": "True",
                    "reason": "Xid79",
                    "message": "GPU fell off the bus",
                    "lastHeartbeatTime": "2026-11-29T10:00:00Z",
                }
            ],
        },
    }
    slim = slim_node(raw)
    assert slim["metadata"] == {"name": "gpu-1", "resourceVersion": "7"} and "images" not in slim["status"]
    assert conditions_of(slim) == [XID]


def _spec(**extra: Any) -> SlurmClusterSpec:
    return parse_spec({"workerGroups": [{"name": "gpu", "replicas": 1}], **extra})


def test_the_spec_names_conditions_by_type_and_status() -> None:
    spec = _spec(nodeConditionDrains=[{"type": "GpuXidError"}, {"type": "example.com/Disk", "status": "Unknown",
                                                                 "workerGroups": ["gpu"]}])  # fmt: skip
    assert [(d.type, d.status, d.worker_groups) for d in spec.node_condition_drains] == [
        ("GpuXidError", "True", []),
        ("example.com/Disk", "Unknown", ["gpu"]),
    ]
    assert _spec().node_condition_drains == []


@pytest.mark.parametrize(
    ("drains", "words"),
    [
        ([{"type": "GpuXidError", "workerGroups": ["cpu"]}], "names worker group 'cpu'"),
        ([{"type": "GpuXidError"}, {"type": "GpuXidError", "status": "True"}], "each condition type and status once"),
        ([{"type": "GpuXidError", "status": "true"}], "status"),
        ([{"type": "has space"}], "type"),
    ],
)
def test_the_spec_refuses(drains: list[dict[str, Any]], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        _spec(nodeConditionDrains=drains)
