"""The operator's actions on Slurm (``warden.slurmactions``): each told in an Event, a failure told once
per cluster until it works again. The Kubernetes side is a recorder of Events (the actions are carried
out against a real apiserver and a stand-in slurmrestd in tests/integration/test_slurmsync.py)."""

from __future__ import annotations

from typing import cast

from warden.events import Event, Ref
from warden.kube import events
from warden.slurm.model import SlurmError
from warden.slurmactions import SlurmActions


class Recorded:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def post_event(self, event: Event) -> None:
        self.events.append(event)


def _cluster(namespace: str, name: str = "cpu") -> Ref:
    return Ref("slurm.warden.dev/v1alpha1", "SlurmCluster", namespace, name, f"uid-{namespace}")


def _actions() -> tuple[SlurmActions, Recorded]:
    recorder = Recorded()
    return SlurmActions(cast(events.EventRecorder, recorder)), recorder


def _fail() -> None:
    raise SlurmError("slurmctld said no")


def _reasons(recorder: Recorded) -> list[tuple[str, str]]:
    return [(e.regarding.namespace, e.reason) for e in recorder.events]


def test_a_failure_is_told_once_then_again_after_it_worked() -> None:
    actions, recorder = _actions()
    a = _cluster("team-a")
    for _ in range(3):
        assert not actions.act(a, "cpu-worker-0", _fail, "SlurmNodeCordoned", "cpu-worker-0: drained: x")
    assert _reasons(recorder) == [("team-a", "SlurmActionFailed")]
    assert actions.act(a, "cpu-worker-0", lambda: None, "SlurmNodeCordoned", "cpu-worker-0: drained: x")
    actions.act(a, "cpu-worker-0", _fail, "SlurmNodeCordoned", "cpu-worker-0: drained: x")
    assert _reasons(recorder) == [
        ("team-a", "SlurmActionFailed"),
        ("team-a", "SlurmNodeCordoned"),
        ("team-a", "SlurmActionFailed"),
    ]
    failed = recorder.events[0]
    assert failed.action == "Drain" and failed.related is not None and failed.related.name == "cpu-worker-0"


def test_two_clusters_of_one_name_in_two_namespaces_each_hear_of_their_failure() -> None:
    actions, recorder = _actions()
    for namespace in ("team-a", "team-b"):
        actions.act(_cluster(namespace), "cpu-worker-0", _fail, "SlurmNodeCordoned", "cpu-worker-0: drained: x")
    assert _reasons(recorder) == [("team-a", "SlurmActionFailed"), ("team-b", "SlurmActionFailed")]
