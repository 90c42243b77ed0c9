"""Which slurmctld is in charge with backup controllers (``warden.ha.incharge``): the controller pods'
verdict, asked over HTTP (``warden.ha.verdict``), relayed; and how the Slurm sync carries it out
(``warden.slurmsync``): pod conditions, a takeover Event, the status's record of it.

The planner is pure; the verdict client asks real HTTP servers on loopback; the sync's part runs against
fakes of the Kubernetes API, a loopback stand-in for slurmrestd and one for the pods' verdict (the real
takeover is in the dataplane tier, tests/dataplane/test_controller_failover.py).
"""

from __future__ import annotations

import base64
import json
import logging
import struct
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, cast

import pytest

from tests.support.jsonserver import JsonServer
from warden import naming
from warden.clusterqueue import ClusterQueue
from warden.events import Event
from warden.ha import beat, ctld, verdict
from warden.ha import sync as ha_sync
from warden.ha.incharge import CONDITION, ControllerPod, condition_of, in_charge, plan
from warden.ha.verdict import Verdict, WrongAnswer
from warden.kube.cache import slim_pod
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


def said(charge: str | None, writer: str | None = None, age: int | None = 2, timeout: int = 15) -> Verdict:
    """The pods' verdict: ``charge`` in charge (its beat ``age`` s old), or nobody (``writer``'s beat)."""
    return Verdict(charge, writer or charge, age, timeout, asked=C0)


IN_CHARGE = PodCondition("True", "InCharge", "slurmctld here is in charge")


# --- who is in charge: the pods' verdict, relayed ----------------------------------------------------


def test_the_one_in_charge_is_the_one_the_verdict_names() -> None:
    assert in_charge(said(C2)) == C2
    assert in_charge(said(None, writer=C0, age=40)) is None  # nobody: C0's beat is stale
    assert in_charge(None) is None  # no pod said


def test_backup_2_in_charge_while_backup_1_is_back_in_standby() -> None:
    """The first controller to answer the ping is not the one in charge: backup 1 came back and stands by
    while backup 2 holds control (the ping's order would have named backup 1)."""
    todo = plan(pods(C0, C1, C2), pings(False, True, True), said(C2), previous=C2)
    assert todo.in_charge == C2
    assert {n: (c.status, c.reason) for n, c in todo.conditions.items()} == {
        C0: ("False", "NotResponding"),
        C1: ("False", "Standby"),
        C2: ("True", "InCharge"),
    }
    assert C2 in todo.conditions[C1].message and C2 in todo.conditions[C0].message
    assert todo.events == []


def test_the_primary_answering_again_stands_by_while_a_backup_holds_control() -> None:
    todo = plan(pods(C0, C1), pings(True, True), said(C1), previous=C1)
    assert {n: c.reason for n, c in todo.conditions.items()} == {C0: "Standby", C1: "InCharge"}
    assert todo.events == []


def test_the_one_the_verdict_names_is_in_charge_even_if_its_ping_went_unanswered() -> None:
    """The pods decide: a slurmctld whose beat is fresh is in charge, whatever one ping said."""
    todo = plan(pods(C0, C1), pings(False, True), said(C0), previous=C0)
    assert todo.conditions[C0] == IN_CHARGE and todo.conditions[C1].reason == "Standby"


def test_nobody_in_charge_while_one_hangs_is_said_on_every_pod_and_recorded_as_nothing_new() -> None:
    """C0 hangs: its beat is older than SlurmctldTimeout and no backup took over yet."""
    hung = said(None, writer=C0, age=20, timeout=15)
    carry = {C0: IN_CHARGE}
    todo = plan(pods(C0, C1, C2, carry=carry), pings(False, True, False), hung, previous=C0)
    assert todo.in_charge is None  # status keeps C0: the takeover that ends the gap is told against it
    assert {n: (c.status, c.reason) for n, c in todo.conditions.items()} == {
        C0: ("False", "NotResponding"),
        C1: ("False", "Standby"),
        C2: ("False", "NotResponding"),
    }
    why = f"no slurmctld is in charge: {C0}'s last beat is 20 s old (SlurmctldTimeout 15)"
    assert all(c.message.endswith(why) for c in todo.conditions.values()), todo.conditions
    assert todo.events == []  # no takeover to tell: nobody took charge


def test_why_nobody_is_in_charge_in_words() -> None:
    assert said(None, writer=C1, age=31, timeout=30).nobody() == (
        f"no slurmctld is in charge: {C1}'s last beat is 31 s old (SlurmctldTimeout 30)"
    )
    assert Verdict(None, None, None, 15, C0).nobody() == (
        "no slurmctld is in charge: no heartbeat in the state directory yet (SlurmctldTimeout 15)"
    )
    assert Verdict(None, C0, None, 15, C0).nobody() == (
        f"no slurmctld is in charge: the heartbeat names {C0} but no time (SlurmctldTimeout 15)"
    )


def test_the_gap_closed_by_a_backup_is_told_once_against_the_one_that_was_in_charge() -> None:
    hung = said(None, writer=C0, age=20)
    gap = plan(pods(C0, C1, carry={C0: IN_CHARGE}), pings(False, True), hung, previous=C0)
    assert gap.in_charge is None and gap.events == []
    # status kept C0 (in_charge None is "not asked": warden.status._in_charge)
    after = plan(pods(C0, C1, carry=gap.conditions), pings(False, True), said(C1), previous=C0)
    [event] = after.events
    assert (event.reason, event.pod, event.message) == (
        "ControllerTakeover",
        C1,
        f"slurmctld in charge moved from {C0} to {C1}",
    )
    assert {n: c.reason for n, c in after.conditions.items()} == {C0: "NotResponding", C1: "InCharge"}
    assert C1 in after.conditions[C0].message and "no slurmctld" not in after.conditions[C0].message


# --- the pod conditions ---------------------------------------------------------------------------


def test_the_condition_type_is_the_operators_own() -> None:
    assert CONDITION == f"{naming.LABEL_PREFIX}/SlurmctldInCharge" == "slurm.warden.dev/SlurmctldInCharge"


def test_only_changed_conditions_are_set() -> None:
    first = plan(pods(C0, C1), pings(True, True), said(C0), previous=None)
    assert set(first.conditions) == {C0, C1}
    again = plan(pods(C0, C1, carry=first.conditions), pings(True, True), said(C0), previous=C0)
    assert again.conditions == {} and again.events == [] and again.in_charge == C0


def test_a_takeover_changes_both_pods_conditions() -> None:
    before = plan(pods(C0, C1), pings(True, True), said(C0), previous=None).conditions
    after = plan(pods(C0, C1, carry=before), pings(False, True), said(C1), previous=C0)
    assert {n: c.reason for n, c in after.conditions.items()} == {C0: "NotResponding", C1: "InCharge"}


def test_a_standby_message_follows_who_is_in_charge() -> None:
    """Three controllers, the primary gone: the third's Standby now names the second."""
    before = plan(pods(C0, C1, C2), pings(True, True, True), said(C0), previous=None).conditions
    after = plan(pods(C0, C1, C2, carry=before), pings(False, True, True), said(C1), previous=C0)
    assert after.conditions[C2].reason == "Standby" and C1 in after.conditions[C2].message
    assert C0 not in after.conditions[C2].message


def test_a_pod_the_ping_does_not_list_does_not_respond() -> None:
    cond = condition_of(C2, pings(True, True), said(C0))
    assert cond is not None and cond.reason == "NotResponding"
    todo = plan(pods(C0, C1, C2), pings(True, True), said(C0), previous=None)
    assert (todo.conditions[C2].status, todo.conditions[C2].reason) == ("False", "NotResponding")


def test_without_a_verdict_only_what_the_ping_tells_changes_and_nothing_is_recorded() -> None:
    """No pod said who is in charge: the ones that do not answer the ping do not respond; the ones that
    do keep what they carry (in charge or standing by: this round cannot tell)."""
    carry = {C0: PodCondition("False", "Standby", "x"), C1: IN_CHARGE, C2: IN_CHARGE}
    todo = plan(pods(C0, C1, C2, carry=carry), pings(False, True, False), None, previous=C1)
    assert todo.in_charge is None and todo.events == []
    assert {n: c.reason for n, c in todo.conditions.items()} == {C0: "NotResponding", C2: "NotResponding"}
    assert condition_of(C1, pings(False, True), None) is None
    # a pod that answers and carries nothing yet gets nothing yet
    assert plan(pods(C0, C1), pings(True, True), None, previous=None).conditions == {}


def test_without_a_ping_no_condition_changes_but_the_verdict_is_recorded_and_a_takeover_told() -> None:
    todo = plan(pods(C0, C1, carry={C0: IN_CHARGE}), None, said(C1), previous=C0)
    assert todo.conditions == {} and todo.in_charge == C1
    [event] = todo.events
    assert event.pod == C1


def test_a_pod_being_deleted_is_left_alone() -> None:
    todo = plan([ControllerPod(C0, None, deleting=True), ControllerPod(C1, None)], pings(False, True), said(C1), None)
    assert set(todo.conditions) == {C1}


# --- the takeover Event -----------------------------------------------------------------------------


def test_a_takeover_is_told_once_against_what_status_recorded() -> None:
    todo = plan(pods(C0, C1), pings(False, True), said(C1), previous=C0)
    [event] = todo.events
    assert event.reason == "ControllerTakeover" and event.pod == C1
    assert event.message == f"slurmctld in charge moved from {C0} to {C1}"
    # the next round reads the status this round wrote: nothing again (an operator restarted too)
    assert plan(pods(C0, C1), pings(False, True), said(C1), previous=C1).events == []


def test_the_primary_taking_charge_back_is_a_takeover_too() -> None:
    [event] = plan(pods(C0, C1), pings(True, True), said(C0), previous=C1).events
    assert (event.pod, event.message) == (C0, f"slurmctld in charge moved from {C1} to {C0}")


def test_the_first_sight_of_who_is_in_charge_is_no_takeover() -> None:
    assert plan(pods(C0, C1), pings(False, True), said(C1), previous=None).events == []


# --- the verdict client: GET /in-charge of each controller pod ----------------------------------------

Reply = tuple[int, bytes]  # status, body


class PodServer:
    """A controller pod's ``/in-charge`` on loopback address ``host``: ``reply`` answers each GET (after
    ``delay`` s); ``asked`` lists the paths asked."""

    def __init__(self, host: str, port: int, reply: Callable[[], Reply], delay: float = 0.0) -> None:
        self.asked: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.asked.append(self.path)
                time.sleep(delay)
                status, body = (404, b"{}") if self.path != "/in-charge" else reply()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def answer(doc: Any) -> Callable[[], Reply]:
    return lambda: (200, json.dumps(doc).encode())


GOOD = {"inCharge": C1, "writer": C1, "beatAgeSeconds": 3, "slurmctldTimeout": 15}


def pod(name: str, ip: str | None = "127.0.0.1", phase: str = "Running", deleting: bool = False) -> Manifest:
    meta: Manifest = {"name": name, "labels": {"app.kubernetes.io/component": "controller"}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: Manifest = {"phase": phase, "conditions": []}
    if ip is not None:
        status["podIP"] = ip
    return {"metadata": meta, "status": status}


@pytest.fixture
def servers() -> Iterator[Callable[..., PodServer]]:
    """Starts pod servers on one port (the pods' port), each on its own loopback address."""
    started: list[PodServer] = []

    def start(host: str, reply: Callable[[], Reply], delay: float = 0.0) -> PodServer:
        server = PodServer(host, started[0].port if started else 0, reply, delay)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def test_a_pods_answer_is_its_verdict(servers: Callable[..., PodServer]) -> None:
    server = servers("127.0.0.1", answer(GOOD))
    got = verdict.ask([pod(C0)], port=server.port)
    assert got == Verdict(in_charge=C1, writer=C1, beat_age_s=3, timeout_s=15, asked=C0)
    assert server.asked == ["/in-charge"]


def test_nobody_in_charge_is_an_answer_too(servers: Callable[..., PodServer]) -> None:
    doc = {"inCharge": None, "writer": C0, "beatAgeSeconds": 40, "slurmctldTimeout": 15}
    server = servers("127.0.0.1", answer(doc))
    assert verdict.ask([pod(C0)], port=server.port) == Verdict(None, C0, 40, 15, C0)
    fresh = {"inCharge": None, "writer": None, "beatAgeSeconds": None, "slurmctldTimeout": 15}
    assert verdict.parse(fresh, C1) == Verdict(None, None, None, 15, C1)


def test_the_pods_are_asked_in_name_order_and_the_first_answer_wins(servers: Callable[..., PodServer]) -> None:
    first = servers("127.0.0.1", answer(GOOD))
    second = servers("127.0.0.2", answer({**GOOD, "inCharge": C2, "writer": C2}))
    got = verdict.ask([pod(C1, "127.0.0.2"), pod(C0, "127.0.0.1")], port=first.port)
    assert got is not None and (got.in_charge, got.asked) == (C1, C0)
    assert second.asked == []


@pytest.mark.parametrize(
    "reply",
    [
        lambda: (404, b'{"inCharge": null}'),
        lambda: (500, b"oops"),
        lambda: (200, b"<html>not json</html>"),
        lambda: (200, b'{"inCharge": "dp-controller-1"'),  # cut short
        lambda: (200, b"\xff\xfe"),
        answer(["dp-controller-1"]),
        answer({**GOOD, "inCharge": "dp-login-0", "writer": "dp-login-0"}),
    ],
    ids=["404", "500", "not-json", "cut-short", "not-utf8", "a-list", "not-a-controller"],
)
def test_a_wrong_answer_is_no_answer_and_the_next_pod_is_asked(
    servers: Callable[..., PodServer], reply: Callable[[], Reply]
) -> None:
    wrong = servers("127.0.0.1", reply)
    right = servers("127.0.0.2", answer(GOOD))
    got = verdict.ask([pod(C0, "127.0.0.1"), pod(C1, "127.0.0.2")], port=wrong.port)
    assert got is not None and (got.in_charge, got.asked) == (C1, C1)
    assert wrong.asked == ["/in-charge"] and right.asked == ["/in-charge"]


def test_a_refused_port_or_a_silent_pod_moves_on_to_the_next(servers: Callable[..., PodServer]) -> None:
    slow = servers("127.0.0.1", answer(GOOD), delay=1.0)
    right = servers("127.0.0.2", answer({**GOOD, "inCharge": C2, "writer": C2}))
    # 127.0.0.3: nothing listens there (refused); 127.0.0.1 answers too late
    pods_ = [pod(C0, "127.0.0.3"), pod(C1, "127.0.0.1"), pod(C2, "127.0.0.2")]
    begun = time.monotonic()
    got = verdict.ask(pods_, port=slow.port, timeout_s=0.3)
    assert got is not None and (got.in_charge, got.asked) == (C2, C2)
    assert time.monotonic() - begun < 1.0
    assert right.asked == ["/in-charge"]


def test_when_no_pod_answers_there_is_no_verdict_and_the_log_says_why(
    servers: Callable[..., PodServer], caplog: pytest.LogCaptureFixture
) -> None:
    wrong = servers("127.0.0.1", lambda: (404, b"{}"))
    pods_ = [
        pod(C0, "127.0.0.1"),
        pod(C1, "127.0.0.3"),  # refused
        pod(C2, None, phase="Pending"),
        pod("dp-controller-3", "127.0.0.1", deleting=True),
    ]
    with caplog.at_level(logging.WARNING, logger="warden.ha.verdict"):
        assert verdict.ask(pods_, port=wrong.port, who="SlurmCluster team-a/dp") is None
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("SlurmCluster team-a/dp: no controller pod said which slurmctld is in charge")
    assert f"{C0} (127.0.0.1): HTTP 404" in line
    assert f"{C1} (127.0.0.3): " in line and "refused" in line.lower()
    assert f"{C2}: not running" in line and "dp-controller-3: not running" in line
    assert wrong.asked == ["/in-charge"]  # the pod being deleted was not asked
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="warden.ha.verdict"):
        assert verdict.ask([], port=wrong.port) is None
    assert "no controller pods" in caplog.records[0].getMessage()


@pytest.mark.parametrize(
    "doc",
    [
        {"writer": C1, "beatAgeSeconds": 3, "slurmctldTimeout": 15},  # no inCharge
        {"inCharge": C1, "writer": C1, "beatAgeSeconds": 3},  # no slurmctldTimeout
        {**GOOD, "slurmctldTimeout": 0},
        {**GOOD, "slurmctldTimeout": True},
        {**GOOD, "slurmctldTimeout": "15"},
        {**GOOD, "beatAgeSeconds": -1},
        {**GOOD, "beatAgeSeconds": 2.5},
        {**GOOD, "inCharge": 1, "writer": 1},
        {**GOOD, "inCharge": "other-controller-1", "writer": "other-controller-1"},  # another cluster's
        {**GOOD, "inCharge": f"{C1}x", "writer": f"{C1}x"},
        {**GOOD, "writer": C0},  # in charge but not the heartbeat's writer
        {**GOOD, "writer": None},
        "dp-controller-1",
        None,
    ],
)
def test_an_answer_not_of_the_contracts_shape_is_refused(doc: Any) -> None:
    with pytest.raises(WrongAnswer):
        verdict.parse(doc, C0)


def test_an_ipv6_pod_is_asked_by_its_bracketed_address() -> None:
    assert verdict.url_of("fd00::7", 6827) == "http://[fd00::7]:6827/in-charge"
    assert verdict.url_of("10.244.1.7", 6827) == "http://10.244.1.7:6827/in-charge"


def test_the_client_reads_what_the_pods_serve(tmp_path: Path) -> None:
    """The contract end to end: warden.ha.ctld's server (what each controller pod runs) answers, from a
    heartbeat file as Slurm writes it, and warden.ha.verdict reads that answer."""
    etc, state = tmp_path / "etc", tmp_path / "state"
    etc.mkdir()
    state.mkdir()
    hosts = "".join(f"SlurmctldHost={n}\n" for n in (C0, C1, C2))
    (etc / "slurm.conf").write_text(f"ClusterName=dp\n{hosts}SlurmctldTimeout=15\n")
    me = ctld.Pod(host=C0, slurm_conf=etc / "slurm.conf", self_conf=tmp_path / "self.conf", waiting=tmp_path / "w")
    server = ctld.server(me, state, 0)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        port = int(server.server_address[1])
        assert verdict.ask([pod(C0)], port=port) == Verdict(None, None, None, 15, C0)  # no heartbeat yet
        now = int(time.time())
        (state / beat.HEARTBEAT).write_bytes(struct.pack(">QQ", now, 2))
        got = verdict.ask([pod(C0)], port=port)
        assert got is not None and (got.in_charge, got.writer, got.timeout_s) == (C2, C2, 15)
        (state / beat.HEARTBEAT).write_bytes(struct.pack(">QQ", now - 100, 2))
        got = verdict.ask([pod(C0)], port=port)
        assert got is not None and (got.in_charge, got.writer) == (None, C2)
        assert got.beat_age_s is not None and got.beat_age_s >= 100
    finally:
        server.shutdown()
        server.server_close()


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
        # as the operator's pod cache holds them (warden.kube.cache.slim_pod): what the sync reads must be kept
        return [slim_pod(p) for p in self.pods if p["metadata"]["labels"]["app.kubernetes.io/component"] == component]

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


def controller(name: str, condition: Manifest | None = None, ip: str | None = None) -> Manifest:
    """A controller pod; with ``ip``, Running there (its verdict asked of the ``pods_say`` server)."""
    status: Manifest = {"conditions": [condition] if condition else []}
    if ip is not None:
        status |= {"phase": "Running", "podIP": ip}
    return {"metadata": {"name": name, "labels": {"app.kubernetes.io/component": "controller"}}, "status": status}


class Slurmrestd:
    def __init__(self) -> None:
        self.asked: list[str] = []
        self.pings: list[dict[str, Any]] = []
        self.ping_fails = False
        self.reads_fail = False  # slurmctld does not answer (the ping, slurmrestd's own, still does)

    def answer(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        below = path.split(f"/slurm/{naming.RESTAPI_VERSION}/", 1)[1]
        self.asked.append(below)
        if below == "nodes" and self.reads_fail:
            return 500, {"errors": [{"description": "Unable to contact slurm controller (connect failure)"}]}
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


class PodsSay:
    """The controller pods' verdict, served on 127.0.0.1; the sync asks it there (``ha_sync.ask``'s port)."""

    def __init__(self) -> None:
        self.doc: Any = None  # None: the pods answer 404

    def reply(self) -> Reply:
        return (404, b"{}") if self.doc is None else (200, json.dumps(self.doc).encode())


@pytest.fixture
def pods_say(monkeypatch: pytest.MonkeyPatch) -> Iterator[PodsSay]:
    says = PodsSay()
    server = PodServer("127.0.0.1", 0, says.reply)
    monkeypatch.setattr(ha_sync, "ask", partial(ha_sync.ask, port=server.port))
    try:
        yield says
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
    slurmrestd: tuple[Slurmrestd, str], pods_say: PodsSay
) -> None:
    fake, url = slurmrestd
    fake.pings = [
        {"hostname": C0, "responding": False, "latency": 5_000_000, "mode": "primary", "primary": True},
        {"hostname": C1, "responding": True, "latency": 300, "mode": "backup1", "primary": False},
        {"hostname": C2, "responding": True, "latency": 300, "mode": "backup2", "primary": False},
    ]
    pods_say.doc = {"inCharge": C2, "writer": C2, "beatAgeSeconds": 1, "slurmctldTimeout": 15}
    kube = FakeKube(
        {"controller": {"replicas": 3}, "workerGroups": GROUPS},
        {},
        [controller(C0, ip="127.0.0.1"), controller(C1, ip="127.0.0.1"), controller(C2, ip="127.0.0.1")],
    )
    recorder, refreshed = sync(kube, url)
    assert "ping" in fake.asked
    marked = {pod: (c["type"], c["status"], c["reason"]) for pod, c in kube.conditions}
    assert marked == {
        C0: (CONDITION, "False", "NotResponding"),
        C1: (CONDITION, "False", "Standby"),  # answers first, yet not in charge: the pods said C2
        C2: (CONDITION, "True", "InCharge"),
    }
    assert all(c["message"] and c["lastTransitionTime"] for _, c in kube.conditions)
    assert recorder.events == []  # status recorded nobody yet: no takeover
    assert [s for _, s in refreshed] == [Slurmctld(answers=True, in_charge=C2)]


def test_a_takeover_is_posted_about_the_cluster_and_the_pod_now_in_charge(
    slurmrestd: tuple[Slurmrestd, str], pods_say: PodsSay
) -> None:
    fake, url = slurmrestd
    fake.pings = [{"hostname": C0, "pinged": "DOWN"}, {"hostname": C1, "pinged": "UP"}]  # the older spelling
    pods_say.doc = {"inCharge": C1, "writer": C1, "beatAgeSeconds": 0, "slurmctldTimeout": 15}
    carried = {"type": CONDITION, "status": "True", "reason": "InCharge", "message": IN_CHARGE.message}
    kube = FakeKube(
        {"controller": {"replicas": 2}, "workerGroups": GROUPS},
        {"slurmctldInCharge": C0},
        [controller(C0, carried), controller(C1, ip="127.0.0.1")],  # C0's pod is not running: C1 is asked
    )
    recorder, refreshed = sync(kube, url)
    [event] = recorder.events
    assert (event.reason, event.regarding.kind, event.regarding.name) == ("ControllerTakeover", "SlurmCluster", "dp")
    assert event.related is not None and (event.related.kind, event.related.name) == ("Pod", C1)
    assert event.note == f"slurmctld in charge moved from {C0} to {C1}"
    assert [s.in_charge for _, s in refreshed if s is not None] == [C1]


@pytest.mark.parametrize("answers", [True, False], ids=["slurmctld-answers", "slurmctld-silent"])
def test_nobody_in_charge_is_said_on_the_pods_and_status_keeps_the_last_one(
    slurmrestd: tuple[Slurmrestd, str], pods_say: PodsSay, answers: bool
) -> None:
    """Also while slurmctld answers no read (``answers`` False): the gap the verdict is for, the one in charge
    hangs and no backup took over yet; the controller pods still say it (their verdict needs no slurmctld)."""
    fake, url = slurmrestd
    fake.reads_fail = not answers
    fake.pings = [{"hostname": C0, "responding": False}, {"hostname": C1, "responding": True}]
    pods_say.doc = {"inCharge": None, "writer": C0, "beatAgeSeconds": 18, "slurmctldTimeout": 15}
    carried = {"type": CONDITION, "status": "True", "reason": "InCharge", "message": IN_CHARGE.message}
    kube = FakeKube(
        {"controller": {"replicas": 2}, "workerGroups": GROUPS},
        {"slurmctldInCharge": C0},
        [controller(C0, carried, ip="127.0.0.1"), controller(C1, ip="127.0.0.1")],
    )
    recorder, refreshed = sync(kube, url)
    why = f"no slurmctld is in charge: {C0}'s last beat is 18 s old (SlurmctldTimeout 15)"
    assert {pod: (c["reason"], c["message"].endswith(why)) for pod, c in kube.conditions} == {
        C0: ("NotResponding", True),
        C1: ("Standby", True),
    }
    assert not any(e.reason == "ControllerTakeover" for e in recorder.events)
    [(_, said)] = refreshed
    assert said is not None and said.answers == answers and said.in_charge is None  # status keeps C0
    if answers:
        assert recorder.events == [] and said == Slurmctld(answers=True)


def test_a_failed_ping_keeps_the_pods_conditions_but_the_verdict_is_heard(
    slurmrestd: tuple[Slurmrestd, str], pods_say: PodsSay
) -> None:
    fake, url = slurmrestd
    fake.ping_fails = True
    pods_say.doc = {"inCharge": C1, "writer": C1, "beatAgeSeconds": 0, "slurmctldTimeout": 15}
    kube = FakeKube(
        {"controller": {"replicas": 2}, "workerGroups": GROUPS},
        {"slurmctldInCharge": C0},
        [controller(C0), controller(C1, ip="127.0.0.1")],
    )
    recorder, refreshed = sync(kube, url)
    assert "ping" in fake.asked and kube.conditions == []
    [event] = recorder.events
    assert event.reason == "ControllerTakeover"
    assert [s for _, s in refreshed] == [Slurmctld(answers=True, in_charge=C1)]


def test_neither_ping_nor_verdict_keeps_what_pods_and_status_say(
    slurmrestd: tuple[Slurmrestd, str], pods_say: PodsSay
) -> None:
    fake, url = slurmrestd
    fake.ping_fails = True  # and the pods answer 404
    kube = FakeKube(
        {"controller": {"replicas": 2}, "workerGroups": GROUPS},
        {"slurmctldInCharge": C0},
        [controller(C0, ip="127.0.0.1"), controller(C1, ip="127.0.0.1")],
    )
    recorder, refreshed = sync(kube, url)
    assert "ping" in fake.asked
    assert kube.conditions == [] and recorder.events == []
    assert [s for _, s in refreshed] == [Slurmctld(answers=True)]  # in_charge None: the last answer stands
