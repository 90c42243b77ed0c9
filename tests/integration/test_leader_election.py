"""Leader election against a real kube-apiserver: two electors on one Lease (warden.leader.elector), then
two operator processes (`--leader-elect`): only the leader acts, a frozen leader (SIGSTOP) is replaced
within its lease, and once resumed it exits before writing anything."""

from __future__ import annotations

import os
import signal
import sys
import time
import urllib.request
from typing import Any

from kubernetes import client

from tests.integration.test_metrics import scrape, total
from tests.support.operator import OperatorProcess, apply_cluster, get_cluster, load_example, wait_ready
from warden.events import CONTROLLER
from warden.leader import fence
from warden.leader.decide import Timing
from warden.leader.elector import Elector
from warden.leader.lease import Leases
from warden.model import API_GROUP, API_VERSION, WORKER_SET_PLURAL
from warden_dev.controlplane import wait_for

LEASE = "warden-operator"


def _lease(api_client: Any, ns: str) -> Any:
    return client.CoordinationV1Api(api_client).read_namespaced_lease(LEASE, ns).spec


def test_two_electors_one_holds_a_frozen_holder_is_replaced_within_the_lease_and_steps_down_resumed(
    api_client: Any, namespace: str
) -> None:
    timing = Timing.for_lease(3)
    lost: list[str] = []
    a, b = (Elector(Leases(api_client, namespace, LEASE), who, timing, on_lost=lost.append) for who in ("a", "b"))
    try:
        a.start()
        assert a.wait_leading(10), "a never made the Lease"
        b.start()
        assert not b.wait_leading(2 * timing.lease_duration), "b took the lease of a leader that renews"
        assert _lease(api_client, namespace).holder_identity == "a"

        assert a.wait_leading(10), "a lost the lease and never took it back"
        a.stop()  # frozen: no renewal, no look, its state kept as it was
        # a starved machine may have made a step down once already (safe: it renews again when it can)
        lost_before = len(lost)
        frozen = time.monotonic()
        last_renewal = _lease(api_client, namespace).renew_time
        assert b.wait_leading(timing.lease_duration + 3 * timing.retry), "b never took over"
        took = time.monotonic() - frozen
        print(f"\nstandby elector took over {took:.1f}s after the leader froze (lease {timing.lease_duration:g}s)")
        spec = _lease(api_client, namespace)
        assert (spec.holder_identity, spec.lease_transitions) == ("b", 1)
        # b waited the lease out (as the Lease's own times say), it did not take a live leader's
        assert (spec.acquire_time - last_renewal).total_seconds() >= timing.lease_duration, (last_renewal, spec)

        # a resumes: it finds its renew deadline gone by and steps down without writing
        assert not a.step() and not a.leading
        assert lost[lost_before:] == ["a did not renew its lease within 2s"], lost
        assert _lease(api_client, namespace).holder_identity == "b" and b.leading

        assert b.release() and not _lease(api_client, namespace).holder_identity
    finally:
        a.stop()
        b.stop()
        fence.forget()


def _operator(factory: Any, ns: str, identity: str, duration: float) -> OperatorProcess:
    op: OperatorProcess = factory(start=False)
    op.log_path = op.log_path.with_name(f"operator-{ns}-{identity}.log")
    op.extra_args = ["--leader-elect", f"--leader-election-namespace={ns}", f"--leader-election-identity={identity}",
                     f"--leader-election-lease-duration={duration:g}"]  # fmt: skip
    op.start()
    return op


def _pods(api_client: Any, ns: str) -> dict[str, str]:
    pods = client.CoreV1Api(api_client).list_namespaced_pod(ns, label_selector="app.kubernetes.io/component=worker")
    return {str(p.metadata.name): str(p.metadata.uid) for p in pods.items}


def _said(api_client: Any, ns: str) -> list[tuple[str, str, str | None]]:
    """(reason, note, related) of each Event object of the operator's in ``ns``."""
    listed = client.CustomObjectsApi(api_client).list_namespaced_custom_object("events.k8s.io", "v1", ns, "events")
    return [(str(e.get("reason")), str(e.get("note")), (e.get("related") or {}).get("name"))
            for e in listed["items"] if e.get("reportingController") == CONTROLLER]  # fmt: skip


def test_of_two_operators_only_the_leader_acts_a_frozen_one_is_replaced_and_exits_when_resumed(
    api_client: Any, cluster_namespace: str, operator_factory: Any
) -> None:
    ns, duration = cluster_namespace, 6.0
    a = _operator(operator_factory, ns, "op-a", duration)
    wait_for("op-a holding the Lease", lambda: _lease(api_client, ns).holder_identity == "op-a", 60,
             on_fail=a.log_tail)  # fmt: skip
    b = _operator(operator_factory, ns, "op-b", duration)
    wait_for("op-b standing by", lambda: "op-b stands by" in b.log_of_this_start(), 60, on_fail=b.log_tail)

    def health(op: OperatorProcess) -> str:
        with urllib.request.urlopen(op.liveness_url, timeout=5) as answer:
            return str(answer.read().decode())

    wait_for("op-b's health naming op-a", lambda: health(b) == "standby op-b; leader: op-a\n", 30)

    body = load_example("cpu-only", ns)
    apply_cluster(api_client, body)
    wait_ready(api_client, ns, "cpu", a)
    assert total(scrape(a.metrics_url), "warden_operator_leading", identity="op-a") == 1
    standby = scrape(b.metrics_url)
    assert total(standby, "warden_operator_leading", identity="op-b") == 0
    assert total(standby, "warden_api_writes_total") == 0, "the standby wrote to the API server"
    before = wait_for("two worker pods", lambda: (lambda p: p if len(p) == 2 else None)(_pods(api_client, ns)), 60)
    # a change op-a reconciles to Ready: the Event op-b says again when it takes over (its resume reconcile)
    body["spec"]["login"]["sshAuthorizedKeys"].append(
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ0T3ikGxaWcqlsYzQJ1vAPvpmFn3aCVdHtpHqUxZHdc bob@example"
    )
    apply_cluster(api_client, body)

    def reconciled_ready() -> bool:
        return any(r == "Reconciled" and note.endswith("phase Ready") for r, note, _ in _said(api_client, ns))

    wait_for("op-a's Reconciled ... phase Ready", reconciled_ready, 60, on_fail=a.log_tail)

    assert a.proc is not None
    os.kill(a.proc.pid, signal.SIGSTOP)
    frozen = time.monotonic()
    try:
        wait_for("op-b holding the Lease", lambda: _lease(api_client, ns).holder_identity == "op-b",
                 duration + 10, on_fail=b.log_tail)  # fmt: skip
        took = time.monotonic() - frozen
        b.wait_resumed()
        acting = time.monotonic() - frozen
        # the new leader acts: a scale-up made while the old one is frozen lands, once
        body["spec"]["workerGroups"][0]["replicas"] = 3
        apply_cluster(api_client, body)
        ws = client.CustomObjectsApi(api_client)
        wait_for("three worker pods", lambda: len(_pods(api_client, ns)) == 3, 60, on_fail=b.log_tail)
        print(f"\nleader frozen: standby held the Lease after {took:.1f}s, had reconciled after {acting:.1f}s"
              f" (lease {duration:g}s)", file=sys.stderr)  # fmt: skip
        wait_ready(api_client, ns, "cpu", b)
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)
    # resumed, op-a finds its lease gone and exits before it writes anything
    assert a.proc.wait(timeout=20) == fence.EXIT_LOST
    assert "exiting so that nothing is done twice" in a.log_of_this_start()
    after = _pods(api_client, ns)
    assert len(after) == 3 and all(after[name] == uid for name, uid in before.items()), "a pod was made twice"
    sets = ws.list_namespaced_custom_object(API_GROUP, API_VERSION, ns, WORKER_SET_PLURAL)["items"]
    assert [s["spec"]["replicas"] for s in sets] == [3]
    assert get_cluster(api_client, ns, "cpu")["status"]["phase"] == "Ready"
    assert total(scrape(b.metrics_url), "warden_operator_leading", identity="op-b") == 1
    # no Event said twice: op-b's repeats of op-a's Events (Reconciled, phase Ready) counted theirs up
    said = _said(api_client, ns)
    assert any(reason == "Reconciled" for reason, _, _ in said), said
    assert sorted(k for k in set(said) if said.count(k) > 1) == [], said

    # a clean stop (SIGTERM: the pod deleted) hands the Lease back at once, for a standby's next look
    assert b.proc is not None
    stopping = time.monotonic()
    os.kill(b.proc.pid, signal.SIGTERM)
    assert b.proc.wait(timeout=15) == 0
    assert not _lease(api_client, ns).holder_identity
    assert time.monotonic() - stopping < 5
