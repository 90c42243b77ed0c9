"""Rolling upgrades: a batch at a time, each node drained and replaced only once it runs no job."""

from __future__ import annotations

from warden.slurm.model import Node
from warden.slurm.reasons import UPGRADE as UPGRADE_PREFIX
from warden.workers.pod import SetPod
from warden.workers.rollout import Group, plan, reason

STS = "demo-worker-cpu"


def node(i: int, state: str = "IDLE", *flags: str, why: str = "") -> Node:
    return Node(name=f"{STS}-{i}", state=state, flags=frozenset(flags), reason=why, gres="", features=(), partitions=())


def group(*pods: SetPod, max_unavailable: int = 1, leaving: tuple[int, ...] = ()) -> Group:
    return Group(workerset=STS, update_revision="new", max_unavailable=max_unavailable, pods=pods,
                 leaving=frozenset(f"{STS}-{i}" for i in leaving))  # fmt: skip


def pod(i: int, revision: str = "old", deleting: bool = False) -> SetPod:
    return SetPod(name=f"{STS}-{i}", ordinal=i, template=revision, deleting=deleting)


def nodes(*items: Node) -> dict[str, Node]:
    return {n.name: n for n in items}


def test_one_batch_at_a_time_highest_ordinal_first() -> None:
    g = group(pod(0), pod(1), pod(2))
    out = plan([g], nodes(node(0), node(1), node(2)))
    assert out.drains == [(f"{STS}-2", reason(g))] and out.deletes == []
    wide = group(pod(0), pod(1), pod(2), max_unavailable=2)
    assert [n for n, _ in plan([wide], nodes(node(0), node(1), node(2))).drains] == [f"{STS}-2", f"{STS}-1"]


def test_a_drained_node_is_replaced_only_once_its_job_has_ended() -> None:
    g = group(pod(0), pod(1))
    drained = reason(g)
    busy = plan([g], nodes(node(0), node(1, "ALLOCATED", "DRAIN", why=drained)))
    assert busy.deletes == [] and busy.drains == [], "the batch is full while the job runs"
    idle = plan([g], nodes(node(0), node(1, "IDLE", "DRAIN", why=drained)))
    assert [p for p, _ in idle.deletes] == [f"{STS}-1"]


def test_the_next_batch_waits_for_the_new_pod_to_register() -> None:
    g = group(pod(0), pod(1, revision="new"))
    assert plan([g], nodes(node(0))).drains == [], "the replacement has not registered yet"
    assert [n for n, _ in plan([g], nodes(node(0), node(1))).drains] == [f"{STS}-0"]


def test_done_when_every_pod_runs_the_new_revision_and_leaving_pods_are_scale_ins() -> None:
    assert plan([group(pod(0, "new"), pod(1, "new"))], nodes(node(0), node(1))) == plan([], {})
    leaving = group(pod(0, "new"), pod(1), leaving=(1,))
    assert plan([leaving], nodes(node(0), node(1))) == plan([], {})


def test_a_node_a_person_drained_keeps_its_pod_and_reason_until_they_resume_it() -> None:
    g = group(pod(0), pod(1))
    out = plan([g], nodes(node(0), node(1, "IDLE", "DRAIN", why="bob: bad disk")))
    assert out.deletes == [] and out.drains == [(f"{STS}-0", reason(g))]
    assert reason(g).startswith(UPGRADE_PREFIX)
