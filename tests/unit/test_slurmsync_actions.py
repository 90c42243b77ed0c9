"""The Slurm sync's actions (``warden.slurmsync.SlurmSync._act``): each told in an Event, a failure told
once per cluster until it works again. The Kubernetes side is a recorder of Events (the sync's writes are
exercised against a real apiserver in tests/integration/test_slurmsync.py)."""

from __future__ import annotations

from typing import Any, cast

from warden.events import Event
from warden.kube import events
from warden.kube.client import Kube
from warden.slurm.model import SlurmError
from warden.slurmsync import Settings, SlurmSync


class Recorded:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def post_event(self, event: Event) -> None:
        self.events.append(event)


def _cluster(namespace: str, name: str = "cpu") -> dict[str, Any]:
    return {
        "apiVersion": "slurm.warden.dev/v1alpha1",
        "kind": "SlurmCluster",
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{namespace}"},
    }


def _sync() -> tuple[SlurmSync, Recorded]:
    recorder = Recorded()
    return SlurmSync(cast(Kube, None), cast(events.EventRecorder, recorder), Settings(), lambda *_: None), recorder


def _fail() -> None:
    raise SlurmError("slurmctld said no")


def _reasons(recorder: Recorded) -> list[tuple[str, str]]:
    return [(e.regarding.namespace, e.reason) for e in recorder.events]


def test_a_failure_is_told_once_then_again_after_it_worked() -> None:
    sync, recorder = _sync()
    a = _cluster("team-a")
    for _ in range(3):
        sync._act(a, "cpu-worker-0", _fail, "SlurmNodeCordoned", "cpu-worker-0: drained: x")
    assert _reasons(recorder) == [("team-a", "SlurmActionFailed")]
    sync._act(a, "cpu-worker-0", lambda: None, "SlurmNodeCordoned", "cpu-worker-0: drained: x")
    sync._act(a, "cpu-worker-0", _fail, "SlurmNodeCordoned", "cpu-worker-0: drained: x")
    assert _reasons(recorder) == [
        ("team-a", "SlurmActionFailed"),
        ("team-a", "SlurmNodeCordoned"),
        ("team-a", "SlurmActionFailed"),
    ]


def test_two_clusters_of_one_name_in_two_namespaces_each_hear_of_their_failure() -> None:
    sync, recorder = _sync()
    for namespace in ("team-a", "team-b"):
        sync._act(_cluster(namespace), "cpu-worker-0", _fail, "SlurmNodeCordoned", "cpu-worker-0: drained: x")
    assert _reasons(recorder) == [("team-a", "SlurmActionFailed"), ("team-b", "SlurmActionFailed")]
