"""Scale-in drains first, waits, and frees the right nodes: idle ones first, then those whose jobs
end soonest, each pod deleted as soon as its own node is idle."""

from __future__ import annotations

from warden.slurm.model import Node
from warden.slurm.reasons import SCALE_IN as SCALE_IN_PREFIX
from warden.workers.pod import SetPod
from warden.workers.scalein import Group, plan, reason

WS = "demo-worker-cpu"
NOW = 1_000_000.0


def node(i: int, state: str = "IDLE", *flags: str, why: str = "") -> Node:
    return Node(name=f"{WS}-{i}", state=state, flags=frozenset(flags), reason=why, gres="", features=(), partitions=())


def nodes(*items: Node) -> dict[str, Node]:
    return {n.name: n for n in items}


def pod(i: int, since: float | None = None, deleting: bool = False) -> SetPod:
    return SetPod(name=f"{WS}-{i}", ordinal=i, deleting=deleting, leaving_since=since)


def group(desired: int, *pods: SetPod, timeout: float | None = None) -> Group:
    return Group(workerset=WS, desired=desired, pods=pods, timeout=timeout)


def name(i: int) -> str:
    return f"{WS}-{i}"


def test_idle_nodes_go_first_then_the_node_whose_jobs_end_soonest() -> None:
    """3 -> 1 with a long job on ordinal 2 and a short one on ordinal 0: a StatefulSet would remove
    1 and 2 and kill the long job; the plan takes 1 (idle) and 0 (its job ends first)."""
    g = group(1, pod(0), pod(1), pod(2))
    out = plan(
        [g], nodes(node(0, "ALLOCATED"), node(1), node(2, "ALLOCATED")), {name(0): NOW + 60, name(2): NOW + 600}, NOW
    )
    assert sorted(out.pick) == [name(0), name(1)]
    assert out.drains == [(name(1), reason(g)), (name(0), reason(g))]
    assert out.deletes == [], "never delete in the round that drains: a job may have just started"


def test_each_leaving_pod_goes_once_its_own_node_is_idle() -> None:
    g = group(1, pod(0, since=NOW), pod(1, since=NOW), pod(2))
    drained = reason(g)
    out = plan(
        [g], nodes(node(0, "ALLOCATED", "DRAIN", why=drained), node(1, "IDLE", "DRAIN", why=drained), node(2)), {}, NOW
    )
    assert [p for p, _ in out.deletes] == [name(1)], "the idle one goes; the busy one does not hold it back"
    assert out.waiting == {WS: [name(0)]} and out.pick == [] and out.drains == []


def test_a_choice_holds_even_when_another_node_becomes_idle() -> None:
    g = group(2, pod(0, since=NOW), pod(1), pod(2))
    out = plan([g], nodes(node(0, "ALLOCATED", "DRAIN", why=reason(g)), node(1), node(2)), {name(0): NOW + 9999}, NOW)
    assert out.pick == [] and out.resumes == [] and out.waiting == {WS: [name(0)]}


def test_unregistered_pods_and_nodes_someone_else_drained_go_before_idle_ones() -> None:
    g = group(2, pod(0), pod(1), pod(2), pod(3))
    out = plan([g], nodes(node(0), node(1, "IDLE", "DRAIN", why="bob: bad disk"), node(3)), {}, NOW)
    assert sorted(out.pick) == [name(1), name(2)]
    assert [p for p, _ in out.deletes] == [name(2), name(1)], "no job there: nothing to wait for"
    assert out.drains == [], "a person's drain reason is kept"


def test_ties_go_to_the_highest_ordinal_and_busy_nodes_with_unknown_ends_go_last() -> None:
    g = group(2, pod(0), pod(1), pod(2), pod(3))
    out = plan([g], nodes(node(0), node(1), node(2, "ALLOCATED"), node(3, "MIXED")), {name(3): NOW + 5}, NOW)
    assert sorted(out.pick) == [name(0), name(1)]
    busy = plan([group(1, pod(0), pod(1))], nodes(node(0, "ALLOCATED"), node(1, "ALLOCATED")), {name(0): NOW + 5}, NOW)
    assert busy.pick == [name(0)], "a known end beats an unknown one"


def test_the_optional_bound_deletes_a_pod_still_busy_after_it() -> None:
    drained = nodes(node(0), node(1, "ALLOCATED", "DRAIN", why=f"{SCALE_IN_PREFIX}: x"))
    patient = plan([group(1, pod(0), pod(1, since=NOW - 3600))], drained, {}, NOW)
    assert patient.deletes == [], "unbounded by default"
    bounded = plan([group(1, pod(0), pod(1, since=NOW - 120), timeout=100)], drained, {}, NOW)
    assert [p for p, _ in bounded.deletes] == [name(1)] and "100 s bound" in bounded.deletes[0][1]
    early = plan([group(1, pod(0), pod(1, since=NOW - 50), timeout=100)], drained, {}, NOW)
    assert early.deletes == []


def test_scaled_back_up_the_picked_pods_stay_and_are_resumed_but_not_a_persons_drain() -> None:
    g = group(3, pod(0), pod(1, since=NOW), pod(2))
    out = plan(
        [g],
        nodes(node(0), node(1, "IDLE", "DRAIN", why=f"{SCALE_IN_PREFIX}: x"), node(2, "IDLE", "DRAIN", why="bob")),
        {},
        NOW,
    )
    assert out.unpick == [name(1)] and out.resumes == [name(1)]
    assert out.deletes == [] and out.drains == [] and out.pick == []


def test_pods_already_going_count_as_gone_and_steady_groups_need_nothing() -> None:
    going = group(1, pod(0), pod(1, since=NOW, deleting=True))
    assert plan([going], nodes(node(0), node(1)), {}, NOW) == plan([], {}, {}, NOW)
    assert plan([group(4, pod(0), pod(1))], nodes(node(0), node(1)), {}, NOW) == plan([], {}, {}, NOW)


def test_without_slurms_end_times_no_busy_node_is_picked_until_they_are_read() -> None:
    """A round whose read of Slurm's jobs failed (slurmctld not answering): by ordinal alone it would pick
    the long job's node; it picks only what needs no end time and leaves the rest to the next round."""
    g = group(1, pod(0), pod(1), pod(2))
    busy = nodes(node(0, "ALLOCATED"), node(1), node(2, "ALLOCATED"))
    blind = plan([g], busy, None, NOW)
    assert blind.pick == [name(1)] and blind.drains == [(name(1), reason(g))]
    later = plan([group(1, pod(0), pod(1, since=NOW), pod(2))], busy, {name(0): NOW + 60, name(2): NOW + 600}, NOW)
    assert later.pick == [name(0)], "read again: the job that ends first"
