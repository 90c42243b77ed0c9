"""The peer bench (bench/peer_scale.py) gives every run the same room and says when a run could not finish.

Issue 59: Slinky's NodeSet of 1,000 got 999 places (five one-pod worker nodes still held Warden's own
cluster pods), waited out the limit and was reported as a figure. These hold the bench's pure parts:
the room check that refuses such a run before it starts, and the table's marks and ratios.
"""

from __future__ import annotations

from typing import Any

import pytest
from bench.peer_scale import POOL, WORKER_TAINT, Refused, Run, mark_counts, ratio_cell, room


def node(name: str, pool: str, pods: int = 1, ready: bool = True, **spec: Any) -> dict[str, Any]:
    taints = [WORKER_TAINT] if pool == "worker" else []
    return {
        "metadata": {"name": name, "labels": {POOL: pool}},
        "spec": {"taints": taints, **spec},
        "status": {
            "allocatable": {"pods": str(pods)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(namespace: str, on: str = "", phase: str = "Running", selector: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace},
        "spec": {"nodeName": on, "nodeSelector": selector or {}},
        "status": {"phase": phase},
    }


def layout(workers: int) -> list[dict[str, Any]]:
    return [node(f"system-{i}", "system", pods=100) for i in range(4)] + [
        node(f"worker-{i}", "worker") for i in range(workers)
    ]


def test_the_run_of_issue_59_is_refused_before_it_starts() -> None:
    # Warden's controller, login, exporter, read gate and REST pods on five one-pod worker nodes, in the
    # namespace of the run before: Slinky's 1,000 workers would have 995 worker nodes
    nodes = layout(1000)
    pods = [pod("warden-1000", on=f"worker-{i}") for i in range(5)]
    with pytest.raises(Refused, match="not free of other runs' pods \\(5 pods in warden-1000\\)"):
        room(nodes, pods, "slinky-1000", 1000, one_per_node=True)


def test_a_worker_node_short_is_refused_and_says_how_many_places_there_are() -> None:
    nodes = layout(1000)
    pods = [pod("slinky-1000", on="worker-7")]  # the run's own pod (not a worker) on a worker node
    with pytest.raises(Refused, match="999 places for 1000 workers on 1000 worker nodes \\(one per node\\)"):
        room(nodes, pods, "slinky-1000", 1000, one_per_node=True)
    assert room(layout(1000), [], "slinky-1000", 1000, one_per_node=True).startswith("1000 places for 1000 workers")


def test_nodes_that_take_no_pod_are_no_place() -> None:
    not_ready = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
    nodes = [
        *layout(3),
        node("not-ready", "worker", ready=False),
        node("cordoned", "worker", unschedulable=True),
        node("tainted", "worker", taints=[WORKER_TAINT, not_ready]),
    ]
    with pytest.raises(Refused, match="3 places for 4 workers on 3 worker nodes"):
        room(nodes, [], "warden-4", 4, one_per_node=False)


def test_each_operator_is_counted_by_its_own_placement_rule() -> None:
    # two worker nodes of ten pods each: twenty places for Warden's workers, two for Slinky's (one per node)
    nodes = [node(f"system-{i}", "system", pods=100) for i in range(4)] + [
        node("big-0", "worker", pods=10),
        node("big-1", "worker", pods=10),
    ]
    assert room(nodes, [], "warden-20", 20, one_per_node=False).startswith("20 places for 20 workers")
    with pytest.raises(Refused, match="2 places for 3 workers"):
        room(nodes, [], "slinky-3", 3, one_per_node=True)


def test_workers_of_the_run_still_waiting_for_a_node_and_ended_pods_are_counted_as_they_take_room() -> None:
    nodes = layout(10)
    waiting = [pod("warden-10", selector={POOL: "worker"})]  # a worker of its own namespace, not yet placed
    ended = [pod("warden-10", on="worker-0", phase="Succeeded"), pod("old", on="worker-1", phase="Failed")]
    with pytest.raises(Refused, match="9 places for 10 workers"):
        room(nodes, waiting + ended, "warden-10", 10, one_per_node=False)
    assert room(nodes, ended, "warden-10", 10, one_per_node=False).startswith("10 places")


def test_the_rest_of_a_run_needs_room_on_the_system_nodes() -> None:
    nodes = [node("system-0", "system", pods=8)] + [node(f"worker-{i}", "worker") for i in range(5)]
    with pytest.raises(Refused, match="8 pod places free on the system nodes"):
        room(nodes, [], "warden-5", 5, one_per_node=False)


def test_the_marks_are_the_share_of_workers_ready() -> None:
    assert mark_counts(1000) == {50: 500, 90: 900, 99: 990, 100: 1000}
    assert mark_counts(10) == {50: 5, 90: 9, 99: 10, 100: 10}


def test_a_ratio_with_a_run_that_did_not_finish_says_so_instead_of_a_number() -> None:
    warden = Run("Warden", 1000, marks={50: 10.0, 90: 18.0, 99: 20.0, 100: 20.3})
    slinky = Run("Slinky", 1000, marks={50: 12.0, 90: 21.0, 99: 24.0}, ready=999)
    slinky.stopped = "999 of 1000 Ready at the 1800 s limit"
    assert ratio_cell(slinky, warden, 50) == "1.20x"
    assert ratio_cell(slinky, warden, 100) == "none: Slinky stopped (999 of 1000 Ready at the 1800 s limit)"
    refused = Run("Slinky", 1000, refused="999 places for 1000 workers")
    assert ratio_cell(refused, warden, 50) == "none: Slinky refused"
