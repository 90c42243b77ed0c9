"""The WorkerSet controller's planners and its one look at a set (``warden.workers``): the steps in order,
each Slurm round acted on once. The API is an in-memory stand-in (the controller against a real
apiserver is in tests/integration, with a stand-in slurmrestd for Slurm, which cannot run there)."""

from __future__ import annotations

import copy
import datetime
import tracemalloc
from dataclasses import replace
from typing import Any, cast

from warden.events import Event, Ref
from warden.kube import events
from warden.kube.client import Kube
from warden.kube.fanout import Fanout
from warden.slurm.model import Node, Reservation
from warden.slurm.rest import SlurmRest
from warden.slurmactions import SlurmActions
from warden.workers import registration
from warden.workers.controller import SlurmView, WorkerSets
from warden.workers.pod import SetPod, ordinal

NOW = datetime.datetime(2026, 11, 26, 12, 0, 0, tzinfo=datetime.UTC)
CLUSTER = Ref("slurm.warden.dev/v1alpha1", "SlurmCluster", "hpc", "demo", "uid-demo")


def test_a_pod_that_never_registers_is_made_afresh_after_the_timeout_only() -> None:
    timeout, now = 300.0, 10_000.0

    def started(ago: float | None, deleting: bool = False) -> list[SetPod]:
        return [SetPod("a", 0, deleting=deleting, slurmd_started=None if ago is None else now - ago)]

    assert registration.overdue(started(timeout - 1), set(), timeout, now) == []
    assert registration.overdue(started(None), set(), timeout, now) == []
    [(name, why)] = registration.overdue(started(timeout + 5), set(), timeout, now)
    assert name == "a" and "slurmd has run 305s without registering" in why
    assert registration.overdue(started(timeout + 5), {"a"}, timeout, now) == []
    assert registration.overdue(started(timeout + 5, deleting=True), set(), timeout, now) == []


class FakeKube:
    """WorkerSets and pods in memory: get, list (by labels), create, delete (at once), patches."""

    def __init__(self, workerset: dict[str, Any]) -> None:
        self.workerset = workerset
        self.pods: dict[str, dict[str, Any]] = {}
        self.deleted: list[str] = []
        self.fanout = Fanout(4)  # the real one: pods are made several at a time

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.workerset) if name == self.workerset["metadata"]["name"] else None

    def list(self, api_version: str, kind: str, namespace: str, selector: dict[str, str]) -> list[dict[str, Any]]:
        return [copy.deepcopy(p) for p in self.pods.values()]

    def create(self, obj: dict[str, Any]) -> bool:
        obj = copy.deepcopy(obj)
        running = {"running": {"startedAt": "2026-11-26T11:00:00Z"}}  # an hour before NOW
        obj["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                         "containerStatuses": [{"name": "slurmd", "state": running}]}  # fmt: skip
        self.pods[obj["metadata"]["name"]] = obj
        return True

    def delete(self, api_version: str, kind: str, namespace: str, name: str, propagation: str) -> bool:
        self.deleted.append(name)
        return self.pods.pop(name, None) is not None

    def set_pod_annotation(self, namespace: str, pod: str, key: str, value: str | None) -> bool:
        annotations = self.pods[pod]["metadata"].setdefault("annotations", {})
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
        return True

    def patch_status(self, name: str, namespace: str, status: dict[str, Any], kind: str = "") -> None:
        """A merge patch, as the API server applies it: a field named with null goes."""
        merged = {**self.workerset.get("status", {}), **status}
        self.workerset["status"] = {k: v for k, v in merged.items() if v is not None}


class FakeRest:
    def __init__(self) -> None:
        self.drained: list[tuple[str, str]] = []
        self.held: dict[str, Reservation] = {}

    def reservations(self) -> list[Reservation]:
        return list(self.held.values())

    def put_reservation(self, name: str, start: int, minutes: int, nodes: Any, flags: Any, users: Any) -> None:
        self.held[name] = Reservation(name, start, start + 60 * minutes, tuple(nodes), frozenset(flags))

    def delete_reservation(self, name: str) -> None:
        self.held.pop(name, None)

    def drain(self, node: str, reason: str) -> None:
        self.drained.append((node, reason))

    def resume(self, node: str) -> None:
        pass

    def jobs(self) -> list[Any]:
        return []


class Recorded:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def post_event(self, event: Event) -> None:
        self.events.append(event)


def _workerset(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "slurm.warden.dev/v1alpha1", "kind": "WorkerSet",
        "metadata": {"name": "demo-worker-cpu", "namespace": "hpc", "uid": "ws-uid", "generation": 1,
                     "ownerReferences": [{"apiVersion": CLUSTER.api_version, "kind": "SlurmCluster",
                                          "name": CLUSTER.name, "uid": CLUSTER.uid}]},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "w"}},
                 "template": {"metadata": {"labels": {"app": "w"}}, "spec": {"containers": [{"name": "slurmd"}]}}},
    }  # fmt: skip


def _node(name: str, state: str = "IDLE") -> Node:
    return Node(name=name, state=state, flags=frozenset(), reason="", gres="", features=(), partitions=())


def _controller(replicas: int, slurm: bool = True) -> tuple[WorkerSets, FakeKube, Recorded]:
    kube, recorded = FakeKube(_workerset(replicas)), Recorded()
    actions = SlurmActions(cast(events.EventRecorder, recorded))
    return WorkerSets(cast(Kube, kube), actions, slurm=slurm), kube, recorded


def _view(controller: WorkerSets, round: int, nodes: list[Node], rest: FakeRest) -> None:
    view = SlurmView(round, CLUSTER, {n.name: n for n in nodes}, cast(SlurmRest, rest), NOW)
    controller.observed(view, [])


def test_without_slurm_a_set_is_filled_and_shrinks_at_its_highest_ordinals() -> None:
    controller, kube, _ = _controller(3, slurm=False)
    controller.sync("hpc", "demo-worker-cpu")
    assert sorted(kube.pods) == ["demo-worker-cpu-0", "demo-worker-cpu-1", "demo-worker-cpu-2"]
    assert kube.workerset["status"]["replicas"] == 3 and kube.workerset["status"]["readyReplicas"] == 3
    kube.workerset["spec"]["replicas"] = 1
    controller.sync("hpc", "demo-worker-cpu")
    assert sorted(kube.pods) == ["demo-worker-cpu-0"] and kube.workerset["status"]["replicas"] == 1


def test_with_slurm_nothing_shrinks_until_a_round_says_which_node_is_idle_then_once_per_round() -> None:
    controller, kube, recorded = _controller(2)
    controller.sync("hpc", "demo-worker-cpu")
    kube.workerset["spec"]["replicas"] = 1
    controller.sync("hpc", "demo-worker-cpu")
    assert sorted(kube.pods) == ["demo-worker-cpu-0", "demo-worker-cpu-1"], "no Slurm word yet: nothing goes"
    rest = FakeRest()
    _view(controller, 1, [_node("demo-worker-cpu-0", "ALLOCATED"), _node("demo-worker-cpu-1")], rest)
    controller.sync("hpc", "demo-worker-cpu")
    # the idle node is picked and drained (it goes once Slurm says it is drained and idle)
    assert [n for n, _ in rest.drained] == ["demo-worker-cpu-1"]
    assert "slurm.warden.dev/leaving-since" in kube.pods["demo-worker-cpu-1"]["metadata"]["annotations"]
    controller.sync("hpc", "demo-worker-cpu")  # an event, no new round: Slurm is not asked again
    assert len(rest.drained) == 1
    drained = Node(name="demo-worker-cpu-1", state="IDLE", flags=frozenset({"DRAIN"}), reason=rest.drained[0][1],
                   gres="", features=(), partitions=())  # fmt: skip
    _view(controller, 2, [_node("demo-worker-cpu-0", "ALLOCATED"), drained], rest)
    controller.sync("hpc", "demo-worker-cpu")
    assert sorted(kube.pods) == ["demo-worker-cpu-0"] and kube.workerset["status"]["replicas"] == 1
    assert [e.reason for e in recorded.events] == ["ScaleInDraining", "ScaledIn"]


def test_a_round_forgotten_while_the_next_is_read_is_not_acted_on_and_the_next_is() -> None:
    """The Slurm sync lets go of a round's nodes before reading the next (``forget``): a set that looks in
    between does no Slurm step; it acts on the round that follows."""
    controller, kube, _ = _controller(2)
    controller.sync("hpc", "demo-worker-cpu")
    kube.workerset["spec"]["replicas"] = 1
    rest = FakeRest()
    _view(controller, 1, [_node("demo-worker-cpu-0", "ALLOCATED"), _node("demo-worker-cpu-1")], rest)
    controller.forget(CLUSTER.namespace, CLUSTER.name)
    controller.sync("hpc", "demo-worker-cpu")
    assert rest.drained == [] and sorted(kube.pods) == ["demo-worker-cpu-0", "demo-worker-cpu-1"]
    _view(controller, 2, [_node("demo-worker-cpu-0", "ALLOCATED"), _node("demo-worker-cpu-1")], rest)
    controller.sync("hpc", "demo-worker-cpu")
    assert [n for n, _ in rest.drained] == ["demo-worker-cpu-1"]


def test_a_pod_whose_slurmd_never_registered_is_made_afresh_by_its_set() -> None:
    controller, kube, recorded = _controller(1)
    controller.sync("hpc", "demo-worker-cpu")
    _view(controller, 1, [], FakeRest())  # slurmd has run an hour (FakeKube), no node of its name
    controller.sync("hpc", "demo-worker-cpu")
    assert kube.deleted == ["demo-worker-cpu-0"]
    assert [e.reason for e in recorded.events] == ["WorkerRecreated"]
    controller.sync("hpc", "demo-worker-cpu")  # the next look makes it again
    assert sorted(kube.pods) == ["demo-worker-cpu-0"]


class NamesOnly(FakeKube):
    """Keeps the names of the pods made, not the pods (ten thousand kept would measure the stand-in)."""

    def __init__(self, workerset: dict[str, Any]) -> None:
        super().__init__(workerset)
        self.made: list[str] = []

    def create(self, obj: dict[str, Any]) -> bool:
        self.made.append(obj["metadata"]["name"])
        return True

    def list(self, api_version: str, kind: str, namespace: str, selector: dict[str, str]) -> list[dict[str, Any]]:
        return []


def test_ten_thousand_pods_are_made_without_ten_thousand_manifests_held_at_once() -> None:
    workerset = _workerset(10_000)
    spec = workerset["spec"]["template"]["spec"]
    spec.update({f"field{i}": {"value": i} for i in range(20)})  # a pod spec's top level has about as many
    kube = NamesOnly(workerset)
    controller = WorkerSets(cast(Kube, kube), SlurmActions(cast(events.EventRecorder, Recorded())), slurm=False)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        controller.sync("hpc", "demo-worker-cpu")
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert len(set(kube.made)) == 10_000
    # the names the stand-in keeps are about 1 MiB; with every manifest made before the first call: 31 MiB
    assert peak < 4 << 20, f"{peak / 2**20:.1f} MiB held while making them"


def test_pods_are_named_after_their_set_and_ordinal() -> None:
    assert ordinal("demo-worker-cpu", "demo-worker-cpu-12") == 12
    assert ordinal("demo-worker-cpu", "demo-worker-cpu-012") is None


def test_an_upgrade_waits_for_the_maintenance_window_with_the_nodes_reserved_then_goes_at_once() -> None:
    """NOW is 12:00 UTC; the window opens at 12:30 for an hour. The template changes: nothing is drained, the
    reservation covers both nodes from 12:30, status says so; at 12:31 both drain at once and the reservation
    goes; once every pod runs the new template, status says nothing waits any more."""
    controller, kube, recorded = _controller(2)
    controller.sync("hpc", "demo-worker-cpu")
    kube.workerset["spec"]["maintenanceWindow"] = {"start": "12:30", "durationMinutes": 60}
    kube.workerset["spec"]["template"]["spec"]["containers"][0]["image"] = "worker:new"
    rest, nodes = FakeRest(), [_node("demo-worker-cpu-0"), _node("demo-worker-cpu-1")]
    _view(controller, 1, nodes, rest)
    controller.sync("hpc", "demo-worker-cpu")
    assert rest.drained == []
    (held,) = rest.held.values()
    opens = datetime.datetime(2026, 11, 26, 12, 30, tzinfo=datetime.UTC)
    assert (held.name, held.start, held.minutes) == ("warden-maintenance-demo-worker-cpu", int(opens.timestamp()), 60)
    assert sorted(held.nodes) == ["demo-worker-cpu-0", "demo-worker-cpu-1"] and "MAINT" in held.flags
    assert kube.workerset["status"]["upgradeWaitsForWindow"] == "2026-11-26T12:30:00Z"
    assert [e.reason for e in recorded.events] == ["MaintenanceReserved"]

    opened = SlurmView(2, CLUSTER, {n.name: n for n in nodes}, cast(SlurmRest, rest), opens.replace(minute=31))
    controller.observed(opened, [])
    controller.sync("hpc", "demo-worker-cpu")
    assert sorted(n for n, _ in rest.drained) == ["demo-worker-cpu-0", "demo-worker-cpu-1"]
    assert rest.held == {} and "MaintenanceReservationEnded" in [e.reason for e in recorded.events]

    # the drained nodes are idle: both pods go, the set makes them again from the new template
    drained = [
        replace(n, flags=frozenset({"DRAIN"}), reason=why)
        for n, (_, why) in zip(nodes, sorted(rest.drained), strict=True)
    ]
    later = SlurmView(3, CLUSTER, {n.name: n for n in drained}, cast(SlurmRest, rest), opens.replace(minute=32))
    controller.observed(later, [])
    controller.sync("hpc", "demo-worker-cpu")
    controller.sync("hpc", "demo-worker-cpu")
    status = kube.workerset["status"]
    assert status["updatedReplicas"] == status["replicas"] == 2, status
    assert "upgradeWaitsForWindow" not in status
