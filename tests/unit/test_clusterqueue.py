"""The cluster work queue (``warden.clusterqueue``): what the loops and watches queue for a cluster is merged,
each part waits for its time, and the cluster due first is taken first."""

from __future__ import annotations

import threading

from warden.clusterqueue import ClusterQueue, Reconcile, Refresh, Told, Work
from warden.ldapcheck import DirectoryCheck
from warden.model import Slurmctld, SlurmNodesStatus


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_many_changes_of_one_cluster_are_one_refresh_with_the_newest_of_each_observation() -> None:
    queue = ClusterQueue(clock=Clock())
    first, second = SlurmNodesStatus(registered=2), SlurmNodesStatus(registered=3)
    directory = DirectoryCheck(True, "Bound", "ok")
    queue.refresh("ns", "a", slurm=first, slurmctld=Slurmctld(answers=True))
    queue.refresh("ns", "a")  # a pod changed: nothing observed, the Slurm sync's word stands
    queue.refresh("ns", "a", directory=directory)
    queue.refresh("ns", "a", slurm=second)
    assert queue.take(timeout=0) == (
        ("ns", "a"),
        Work(refresh=Refresh(slurm=second, slurmctld=Slurmctld(answers=True), directory=directory)),
    )
    assert queue.take(timeout=0) is None


def test_every_event_a_watch_had_to_tell_waits_in_the_merged_refresh_in_the_order_it_came() -> None:
    """An image pull failing twice and a health check's drain, told by the watches between two takes: the
    worker says all three (a repeat counts up its Event's series), none is lost to the merge."""
    queue = ClusterQueue(clock=Clock())
    pull = Told("ImagePullFailed", "r.example.com/worker:9: ErrImagePull: not found", "a-worker-cpu-0")
    drained = Told("NodeDrained", "a-worker-gpu-1: busbw 12 GB/s below 80", "a-worker-gpu-1")
    queue.refresh("ns", "a", tell=(pull,))
    queue.refresh("ns", "a", slurm=SlurmNodesStatus(registered=2))
    queue.refresh("ns", "a", tell=(drained, pull))
    taken = queue.take(timeout=0)
    assert taken is not None and taken[1].refresh is not None
    assert taken[1].refresh.tell == (pull, drained, pull)
    assert taken[1].refresh.slurm == SlurmNodesStatus(registered=2)


def test_what_drifted_is_healed_in_one_reconcile_naming_each_once() -> None:
    queue = ClusterQueue(clock=Clock())
    queue.heal("ns", "a", "Service/a-login deleted")
    queue.heal("ns", "a", "ConfigMap/a-slurm changed by someone else")
    queue.heal("ns", "a", "Service/a-login deleted")
    queue.reconcile("ns", "a")
    taken = queue.take(timeout=0)
    assert taken is not None
    assert taken[1] == Work(
        reconcile=Reconcile(("Service/a-login deleted", "ConfigMap/a-slurm changed by someone else"))
    )


def test_a_heal_tried_again_later_waits_for_its_time_while_a_refresh_goes_now() -> None:
    clock = Clock()
    queue = ClusterQueue(clock=clock)
    queue.heal("ns", "a", "Service/a-login deleted", after=10)
    queue.refresh("ns", "a")
    assert queue.take(timeout=0) == (("ns", "a"), Work(refresh=Refresh()))
    assert queue.take(timeout=0) is None  # the heal is not due yet
    assert queue.waiting() == {("ns", "a"): Work(reconcile=Reconcile(("Service/a-login deleted",)))}
    clock.now += 10
    assert queue.take(timeout=0) == (("ns", "a"), Work(reconcile=Reconcile(("Service/a-login deleted",))))
    assert queue.waiting() == {}


def test_work_asked_sooner_moves_a_later_time_forward() -> None:
    clock = Clock()
    queue = ClusterQueue(clock=clock)
    queue.reconcile("ns", "a", after=3)
    queue.heal("ns", "a", "Job/a-populate deleted")  # now: the reconcile due later comes with it
    assert queue.take(timeout=0) == (("ns", "a"), Work(reconcile=Reconcile(("Job/a-populate deleted",))))


def test_the_cluster_due_first_is_taken_first_and_a_refresh_and_reconcile_due_together_come_together() -> None:
    clock = Clock()
    queue = ClusterQueue(clock=clock)
    queue.reconcile("ns", "late", after=5)
    queue.refresh("ns", "b")
    clock.now += 1
    queue.refresh("ns", "a")
    queue.reconcile("ns", "a")
    clock.now += 5
    taken = [queue.take(timeout=0) for _ in range(3)]
    assert [t[0] if t else None for t in taken] == [("ns", "b"), ("ns", "a"), ("ns", "late")]
    assert taken[1] is not None and taken[1][1] == Work(refresh=Refresh(), reconcile=Reconcile())


def test_take_waits_for_work_queued_from_another_thread_and_close_ends_the_wait() -> None:
    queue = ClusterQueue()
    got: list[object] = []
    taker = threading.Thread(target=lambda: got.append(queue.take(timeout=30)))
    taker.start()
    queue.refresh("ns", "a")
    taker.join(30)
    assert got == [(("ns", "a"), Work(refresh=Refresh()))]

    ended: list[object] = []
    taker = threading.Thread(target=lambda: ended.append(queue.take()))
    taker.start()
    queue.close()
    taker.join(30)
    assert ended == [None] and not taker.is_alive()


def test_a_check_runs_report_is_told_as_one_event_per_node_drained_or_resumed_and_one_for_a_failed_run() -> None:
    from warden.handlers import health_told

    report = {
        "drained": [{"node": "a-worker-gpu-1", "reason": "warden-health: busbw 12.0 GB/s < 80.0"}],
        "resumed": ["a-worker-gpu-0"],
        "checkFailed": None,
    }
    assert health_told(report) == (
        Told("NodeDrained", "a-worker-gpu-1: warden-health: busbw 12.0 GB/s < 80.0", "a-worker-gpu-1"),
        Told("NodeResumed", "a-worker-gpu-0 passed the NCCL check again", "a-worker-gpu-0"),
    )
    failed = health_told({"drained": [], "resumed": [], "checkFailed": "srun: no GPU node answers"})
    assert failed == (Told("HealthCheckFailed", "NCCL check drained nobody: srun: no GPU node answers"),)
