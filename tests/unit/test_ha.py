"""Which slurmctld is in charge with backup controllers (``warden.ha.incharge``), and how the Slurm sync
carries it out (``warden.slurmsync``): pod conditions, a takeover Event, the status's record of it.

The planner is pure; the sync's part runs against fakes of the Kubernetes API and a loopback stand-in
for slurmrestd (the real takeover is in the dataplane tier, tests/dataplane/test_controller_failover.py).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any, cast

import pytest

from tests.support.jsonserver import JsonServer
from warden import naming
from warden.clusterqueue import ClusterQueue
from warden.events import Event
from warden.ha.incharge import CONDITION, ControllerPod, condition_of, in_charge, plan
from warden.kube.client import Kube
from warden.kube.events import EventRecorder
from warden.kube.fanout import Fanout
from warden.model import Slurmctld, SlurmNodesStatus
from warden.naming import Names
from warden.nodesync import PodCondition
from warden.render.pods import Manifest
from warden.slurm.rest import ControllerPing
from warden.slurmactions import SlurmActions
from warden.slurmsync import Settings, SlurmSync
from warden.workers.controller import SlurmView, WorkerSets

C0, C1, C2 = Names(cluster="dp", namespace="team-a").controller_pods(3)


def pings(*up: bool) -> list[ControllerPing]:
    """Pings of dp-controller-0.. in SlurmctldHost order, each responding or not."""
    return [ControllerPing(name, ok, 120) for name, ok in zip((C0, C1, C2), up, strict=False)]


def pods(*names: str, carry: dict[str, PodCondition] | None = None) -> list[ControllerPod]:
    return [ControllerPod(n, (carry or {}).get(n)) for n in names]


IN_CHARGE = PodCondition("True", "InCharge", "slurmctld here is in charge")


# --- who is in charge -------------------------------------------------------------------------------


def test_the_first_controller_that_responds_in_slurmctldhost_order_is_in_charge() -> None:
    assert in_charge(pings(True, True, True)) == C0
    assert in_charge(pings(False, True, True)) == C1
    assert in_charge(pings(False, False, True)) == C2
    assert in_charge(pings(True, False)) == C0


def test_nobody_is_in_charge_when_no_controller_responds() -> None:
    assert in_charge(pings(False, False)) is None
    assert in_charge([]) is None


def test_a_ping_without_a_hostname_is_never_in_charge() -> None:
    assert in_charge([ControllerPing("", True), ControllerPing(C1, True)]) == C1


# --- the pod conditions ---------------------------------------------------------------------------


def test_one_in_charge_the_other_responding_ones_stand_by_the_rest_do_not_respond() -> None:
    todo = plan(pods(C0, C1, C2), pings(False, True, True), previous=None)
    assert todo.in_charge == C1
    assert {n: (c.status, c.reason) for n, c in todo.conditions.items()} == {
        C0: ("False", "NotResponding"),
        C1: ("True", "InCharge"),
        C2: ("False", "Standby"),
    }
    assert C1 in todo.conditions[C2].message  # a standby names the one in charge
    assert all(c.message for c in todo.conditions.values())


def test_the_condition_type_is_the_operators_own() -> None:
    assert CONDITION == f"{naming.LABEL_PREFIX}/SlurmctldInCharge" == "slurm.warden.dev/SlurmctldInCharge"


def test_only_changed_conditions_are_set() -> None:
    first = plan(pods(C0, C1), pings(True, True), previous=None)
    assert set(first.conditions) == {C0, C1}
    again = plan(pods(C0, C1, carry=first.conditions), pings(True, True), previous=C0)
    assert again.conditions == {} and again.events == [] and again.in_charge == C0


def test_a_takeover_changes_both_pods_conditions() -> None:
    before = plan(pods(C0, C1), pings(True, True), previous=None).conditions
    after = plan(pods(C0, C1, carry=before), pings(False, True), previous=C0)
    assert {n: c.reason for n, c in after.conditions.items()} == {C0: "NotResponding", C1: "InCharge"}


def test_a_standby_message_follows_who_is_in_charge() -> None:
    """Three controllers, the primary gone: the third's Standby now names the second."""
    before = plan(pods(C0, C1, C2), pings(True, True, True), previous=None).conditions
    after = plan(pods(C0, C1, C2, carry=before), pings(False, True, True), previous=C0)
    assert after.conditions[C2].reason == "Standby" and C1 in after.conditions[C2].message
    assert C0 not in after.conditions[C2].message


def test_a_pod_the_ping_does_not_list_does_not_respond() -> None:
    assert condition_of(C2, pings(True, True), C0).reason == "NotResponding"
    todo = plan(pods(C0, C1, C2), pings(True, True), previous=None)
    assert (todo.conditions[C2].status, todo.conditions[C2].reason) == ("False", "NotResponding")


def test_nobody_responding_marks_every_pod_and_records_nobody() -> None:
    todo = plan(pods(C0, C1), pings(False, False), previous=C0)
    assert todo.in_charge is None
    assert {c.reason for c in todo.conditions.values()} == {"NotResponding"}
    assert todo.events == []  # no takeover to tell: nobody took charge


def test_a_pod_being_deleted_is_left_alone() -> None:
    todo = plan([ControllerPod(C0, None, deleting=True), ControllerPod(C1, None)], pings(False, True), None)
    assert set(todo.conditions) == {C1}


# --- the takeover Event -----------------------------------------------------------------------------


def test_a_takeover_is_told_once_against_what_status_recorded() -> None:
    todo = plan(pods(C0, C1), pings(False, True), previous=C0)
    [event] = todo.events
    assert event.reason == "ControllerTakeover" and event.pod == C1
    assert event.message == f"slurmctld in charge moved from {C0} to {C1}"
    # the next round reads the status this round wrote: nothing again (an operator restarted too)
    assert plan(pods(C0, C1), pings(False, True), previous=C1).events == []


def test_the_primary_taking_charge_back_is_a_takeover_too() -> None:
    [event] = plan(pods(C0, C1), pings(True, True), previous=C1).events
    assert (event.pod, event.message) == (C0, f"slurmctld in charge moved from {C1} to {C0}")


def test_the_first_sight_of_who_is_in_charge_is_no_takeover() -> None:
    assert plan(pods(C0, C1), pings(False, True), previous=None).events == []


# --- the Slurm sync carries it out ------------------------------------------------------------------

KEY = b"k" * 32
GROUPS = [{"name": "cpu", "replicas": 1}]


class FakeKube:
    """The API objects the sync reads, and what it did to pods."""

    def __init__(self, spec: Manifest, status: Manifest, pods: list[Manifest]) -> None:
        names = Names(cluster="dp", namespace="team-a")
        self.objects: dict[tuple[str, str], Manifest] = {
            ("SlurmCluster", "dp"): {
                "apiVersion": "slurm.warden.dev/v1alpha1",
                "kind": "SlurmCluster",
                "metadata": {"name": "dp", "namespace": "team-a", "uid": "u-1", "generation": 1},
                "spec": spec,
                "status": status,
            },
            ("Deployment", names.restapi): {"status": {"readyReplicas": 1}},
            ("Secret", names.jwt_key): {"data": {naming.JWT_KEY: base64.b64encode(KEY).decode()}},
        }
        self.pods = pods
        self.conditions: list[tuple[str, Manifest]] = []
        self.listed: list[str] = []
        self.fanout = Fanout(4)

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Manifest | None:
        return self.objects.get((kind, name))

    def list(self, api_version: str, kind: str, namespace: str, selector: dict[str, str]) -> list[Manifest]:
        component = selector["app.kubernetes.io/component"]
        self.listed.append(f"{kind}/{component}")
        if kind != "Pod":
            return []
        return [p for p in self.pods if p["metadata"]["labels"]["app.kubernetes.io/component"] == component]

    def cordoned_nodes(self) -> set[str]:
        return set()

    def server_side_apply(self, obj: Manifest) -> Manifest:  # the token Secrets (warden.tokens)
        self.objects[(obj["kind"], obj["metadata"]["name"])] = obj
        return obj

    def set_pod_condition(self, namespace: str, pod: str, condition: Manifest) -> None:
        self.conditions.append((pod, condition))

    def set_pod_label(self, namespace: str, pod: str, key: str, value: str | None) -> None:
        pass


class Recorded:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def post_event(self, event: Event) -> None:
        self.events.append(event)


class Workers:
    """The WorkerSet controller's side of a round: not what these tests look at."""

    def forget(self, namespace: str, cluster: str) -> None:
        pass

    def observed(self, view: SlurmView, sets: list[str]) -> None:
        pass


def controller(name: str, condition: Manifest | None = None) -> Manifest:
    return {
        "metadata": {"name": name, "labels": {"app.kubernetes.io/component": "controller"}},
        "status": {"conditions": [condition] if condition else []},
    }


class Slurmrestd:
    def __init__(self) -> None:
        self.asked: list[str] = []
        self.pings: list[dict[str, Any]] = []
        self.ping_fails = False

    def answer(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        below = path.split(f"/slurm/{naming.RESTAPI_VERSION}/", 1)[1]
        self.asked.append(below)
        if below == "nodes":
            return 200, {"nodes": [], "errors": []}
        if below.startswith("job/"):
            return 500, {"errors": [{"description": "Invalid job id specified", "error": "Invalid job id"}]}
        if below == "ping" and self.ping_fails:
            return 500, {"errors": [{"description": "Unable to contact slurm controller", "error": "x"}]}
        if below == "ping":
            return 200, {"pings": self.pings, "errors": []}
        return 404, {"errors": [{"description": f"no route {below}"}]}


@pytest.fixture
def slurmrestd() -> Iterator[tuple[Slurmrestd, str]]:
    fake = Slurmrestd()
    server = JsonServer(fake.answer).start()
    try:
        yield fake, server.url
    finally:
        server.stop()


Refreshed = list[tuple[SlurmNodesStatus | None, Slurmctld | None]]


def sync(kube: FakeKube, url: str) -> tuple[Recorded, Refreshed]:
    """One Slurm sync round; what it queued for the cluster's status."""
    recorder = Recorded()
    queue = ClusterQueue()
    slurm_sync = SlurmSync(
        cast(Kube, kube),
        cast(EventRecorder, recorder),
        SlurmActions(cast(EventRecorder, recorder)),
        cast(WorkerSets, Workers()),
        Settings(restapi_url=url),
        queue,
    )
    assert slurm_sync.sync("team-a", "dp")
    refreshed: Refreshed = []
    while (taken := queue.take(timeout=0)) is not None:
        key, work = taken
        assert key == ("team-a", "dp") and work.refresh is not None and work.reconcile is None, taken
        refreshed.append((work.refresh.slurm, work.refresh.slurmctld))
    return recorder, refreshed


def test_a_one_controller_cluster_is_never_pinged(slurmrestd: tuple[Slurmrestd, str]) -> None:
    fake, url = slurmrestd
    kube = FakeKube({"workerGroups": GROUPS}, {}, [controller(C0)])
    recorder, refreshed = sync(kube, url)
    assert "ping" not in fake.asked
    assert "Pod/controller" not in kube.listed and kube.conditions == [] and recorder.events == []
    assert [s for _, s in refreshed] == [Slurmctld(answers=True)]


def test_with_backups_the_pods_are_marked_and_status_hears_who_is_in_charge(
    slurmrestd: tuple[Slurmrestd, str],
) -> None:
    fake, url = slurmrestd
    fake.pings = [
        {"hostname": C0, "responding": False, "latency": 5_000_000, "mode": "primary", "primary": True},
        {"hostname": C1, "responding": True, "latency": 300, "mode": "backup1", "primary": False},
    ]
    kube = FakeKube({"controller": {"replicas": 2}, "workerGroups": GROUPS}, {}, [controller(C0), controller(C1)])
    recorder, refreshed = sync(kube, url)
    assert "ping" in fake.asked
    marked = {pod: (c["type"], c["status"], c["reason"]) for pod, c in kube.conditions}
    assert marked == {C0: (CONDITION, "False", "NotResponding"), C1: (CONDITION, "True", "InCharge")}
    assert all(c["message"] and c["lastTransitionTime"] for _, c in kube.conditions)
    assert recorder.events == []  # status recorded nobody yet: no takeover
    assert [s for _, s in refreshed] == [Slurmctld(answers=True, in_charge=C1)]


def test_a_takeover_is_posted_about_the_cluster_and_the_pod_now_in_charge(
    slurmrestd: tuple[Slurmrestd, str],
) -> None:
    fake, url = slurmrestd
    fake.pings = [{"hostname": C0, "pinged": "DOWN"}, {"hostname": C1, "pinged": "UP"}]  # the older spelling
    carried = {"type": CONDITION, "status": "True", "reason": "InCharge", "message": IN_CHARGE.message}
    kube = FakeKube(
        {"controller": {"replicas": 2}, "workerGroups": GROUPS},
        {"slurmctldInCharge": C0},
        [controller(C0, carried), controller(C1)],
    )
    recorder, refreshed = sync(kube, url)
    [event] = recorder.events
    assert (event.reason, event.regarding.kind, event.regarding.name) == ("ControllerTakeover", "SlurmCluster", "dp")
    assert event.related is not None and (event.related.kind, event.related.name) == ("Pod", C1)
    assert event.note == f"slurmctld in charge moved from {C0} to {C1}"
    assert [s.in_charge for _, s in refreshed if s is not None] == [C1]


def test_a_failed_ping_keeps_what_pods_and_status_say(slurmrestd: tuple[Slurmrestd, str]) -> None:
    fake, url = slurmrestd
    fake.ping_fails = True
    kube = FakeKube(
        {"controller": {"replicas": 2}, "workerGroups": GROUPS}, {"slurmctldInCharge": C0}, [controller(C0)]
    )
    recorder, refreshed = sync(kube, url)
    assert "ping" in fake.asked
    assert kube.conditions == [] and recorder.events == []
    assert [s for _, s in refreshed] == [Slurmctld(answers=True)]  # in_charge None: the last answer stands
