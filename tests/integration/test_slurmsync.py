"""The Slurm sync (``warden.slurmsync``) against the real kube-apiserver: what a user would notice.

The rest of this tier runs the operator with the sync off, since kwok pods run no Slurm daemons. Here
the operator runs with it on (every second), pointed by ``--slurmrestd-url`` at a stand-in slurmrestd
(tests/support/fake_slurmrestd.py, built from slurmrestd answers captured from Slurm 24.11.5) that
plays slurmctld: the test registers the worker pods' nodes there, sets their states and jobs, and reads
back what the operator did to them (drains, resumes, deletions). Kubernetes' side is all real: pods,
their conditions and labels, cordoned nodes, Events, the SlurmCluster's status.

- Slurm's node states show on the worker pods (condition ``slurm.warden.dev/SlurmNode``) and in
  ``status.slurmNodes``; Ready waits for slurmctld's word that the workers registered; a person's
  drain is shown, never undone.
- A cordoned Kubernetes node drains its workers' Slurm nodes (``warden: Kubernetes node ...``,
  ``SlurmNodeCordoned``); uncordoned, they are resumed (``SlurmNodeUncordoned``).
- A slurmctld that answers no read turns ``ControllerReady`` False (``SlurmctldUnresponsive``, an
  Event); answering again, a ``SlurmctldResponsive`` Event and Ready again.
- The exporter mounts no signing key: the operator writes it a token for ``warden-reader`` and writes a
  new one, signed with the new key, when the key is rotated.
- A Kubernetes node condition the SlurmCluster names (``GpuXidError``) drains its workers' Slurm nodes
  with the condition's words (``warden-condition: ...``, ``NodeConditionDrained``); cleared, they are
  resumed (``NodeConditionCleared``); a person's drain on the same node is never touched.
- A shrinking worker group drains the node whose jobs end soonest (``warden: scale-in``), keeps its pod
  while the job runs, and deletes it once Slurm says the node is idle.
"""

from __future__ import annotations

import base64
import sys
import time
from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from kubernetes import client

from tests.integration.test_metrics import scrape, total
from tests.support.fake_slurmrestd import Action, FakeSlurmrestd
from tests.support.operator import OperatorProcess, apply_cluster, get_cluster, load_example, wait_ready
from warden import tokens
from warden.naming import (
    BUSY_LABEL,
    JWT_KEY,
    LEAVING_ANNOTATION,
    READER_USER,
    TOKEN_ISSUED_ANNOTATION,
    TOKEN_KEY,
    Names,
)
from warden.nodesync import CONDITION
from warden.slurm.rest import token_claims
from warden_dev.audit import audit_requests, rfc3339, wait_written
from warden_dev.controlplane import ControlPlane, wait_for

CLUSTER = "cpu"  # docs/examples/cpu-only.yaml: one worker group "cpu" of 2, a login node
NAMES = Names(cluster=CLUSTER, namespace="")
WORKERS = [f"{NAMES.worker('cpu')}-{i}" for i in range(2)]
SYNC_INTERVAL = 1.0
#: seconds for what the sync does within a few rounds, with room for a slow, busy CI machine
TIMEOUT = 60
READY_TIMEOUT = 180


@pytest.fixture
def slurm(cluster_namespace: str) -> Iterator[FakeSlurmrestd]:
    with FakeSlurmrestd(cluster_namespace, CLUSTER) as fake:
        yield fake


@pytest.fixture
def synced_operator(
    controlplane: ControlPlane, cluster_namespace: str, slurm: FakeSlurmrestd, request: pytest.FixtureRequest
) -> Iterator[OperatorProcess]:
    """The operator with the Slurm sync on, reaching this test's cluster's slurmrestd at the stand-in."""
    op = OperatorProcess(
        controlplane.kubeconfig,
        cluster_namespace,
        controlplane.log_dir,
        slurm_sync_interval=SYNC_INTERVAL,
        extra_args=[f"--slurmrestd-url={slurm.url_template}"],
    )
    op.start()
    yield op
    op.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(f"\n--- operator log ({op.log_path}) ---\n{op.log_tail(120)}", file=sys.stderr)
        print(f"--- fake slurmrestd: actions {slurm.actions}, served {dict(slurm.served)}, auth failures "
              f"{slurm.auth_failures[:5]}, strays {slurm.strays[:5]}", file=sys.stderr)  # fmt: skip


def _pod(core: client.CoreV1Api, ns: str, name: str) -> Any:
    return core.read_namespaced_pod(name, ns)


def _slurm_condition(core: client.CoreV1Api, ns: str, pod: str) -> Any:
    return next((c for c in _pod(core, ns, pod).status.conditions or [] if c.type == CONDITION), None)


def _wait_condition(
    core: client.CoreV1Api, ns: str, pod: str, status: str, reason: str, op: OperatorProcess, words: str = ""
) -> Any:
    def shown() -> Any:
        c = _slurm_condition(core, ns, pod)
        return c if c is not None and (c.status, c.reason) == (status, reason) and words in c.message else None

    return wait_for(f"{pod}: {CONDITION} {status}/{reason} ({words})", shown, TIMEOUT, on_fail=op.log_tail)


def _events(core: client.CoreV1Api, ns: str, reason: str) -> list[Any]:
    return [e for e in core.list_namespaced_event(ns).items if e.reason == reason]


def _wait_event(core: client.CoreV1Api, ns: str, reason: str, words: str, op: OperatorProcess) -> Any:
    def posted() -> Any:
        return next((e for e in _events(core, ns, reason) if words in str(e.message)), None)

    return wait_for(f"Event {reason} saying {words!r}", posted, TIMEOUT, on_fail=op.log_tail)


def _wait_action(slurm: FakeSlurmrestd, action: Action, op: OperatorProcess) -> None:
    wait_for(f"the operator to {action}", lambda: action in slurm.actions, TIMEOUT, on_fail=op.log_tail)


def _rounds(slurm: FakeSlurmrestd, n: int, op: OperatorProcess) -> None:
    """Wait until the sync has read Slurm's nodes ``n`` more times: whatever it was going to do about
    what it read before, it has done."""
    start = slurm.reads()
    wait_for(f"{n} more sync rounds", lambda: slurm.reads() >= start + n, TIMEOUT, on_fail=op.log_tail)


def _check_tokens(core: client.CoreV1Api, ns: str, slurm: FakeSlurmrestd, op: OperatorProcess) -> None:
    """The stand-in checks every token against the cluster's JWT key from its Secret on."""

    def key() -> bytes | None:
        data = core.read_namespaced_secret(NAMES.jwt_key, ns).data or {}
        return base64.b64decode(data[JWT_KEY]) if JWT_KEY in data else None

    slurm.jwt_key = wait_for("the cluster's JWT key Secret", key, TIMEOUT, on_fail=op.log_tail)


def _up(
    api: Any,
    ns: str,
    slurm: FakeSlurmrestd,
    op: OperatorProcess,
    states: dict[str, tuple[tuple[str, ...], str]] | None = None,
    spec: dict[str, Any] | None = None,
) -> client.CoreV1Api:
    """The example cluster (with ``spec``'s fields added), its workers registered with the stand-in
    slurmctld (IDLE unless ``states`` gives a node's state and reason), Ready."""
    core = client.CoreV1Api(api)
    example = load_example("cpu-only", ns)
    example["spec"].update(spec or {})
    apply_cluster(api, example)
    _check_tokens(core, ns, slurm, op)

    def scheduled() -> bool:
        return all(_pod(core, ns, w).spec.node_name for w in WORKERS)

    wait_for("both worker pods scheduled", scheduled, TIMEOUT, on_fail=op.log_tail)
    # their slurmd registers (after the pods exist: a node record without a pod is a ghost, deleted)
    for w in WORKERS:
        state, reason = (states or {}).get(w, (("IDLE",), ""))
        slurm.register(w, state, reason, like="dp-worker-cpu-1" if "DRAIN" in state else "dp-worker-cpu-0")
    wait_ready(api, ns, CLUSTER, op, timeout=READY_TIMEOUT)
    return core


def test_pods_and_status_carry_slurms_node_states(
    api_client: Any, cluster_namespace: str, slurm: FakeSlurmrestd, synced_operator: OperatorProcess
) -> None:
    ns, op = cluster_namespace, synced_operator
    first, second = WORKERS
    # as captured: a person drained the second node ("scontrol update state=drain reason='hands off'")
    core = _up(api_client, ns, slurm, op, {second: (("IDLE", "DRAIN"), "hands off")})

    # Ready (which waits for slurmctld's word that both registered) and what slurmctld said
    nodes = get_cluster(api_client, ns, CLUSTER)["status"]["slurmNodes"]
    assert (nodes["registered"], nodes["usable"]) == (2, 1)
    assert nodes["drained"] == [{"node": second, "reason": "hands off"}]
    assert nodes["slurmdVersions"] == {"24.11.5": 2}
    _wait_condition(core, ns, first, "True", "Idle", op)
    drained = _wait_condition(core, ns, second, "False", "Drained", op, "hands off")
    assert drained.message.startswith("IDLE+DRAIN")
    _wait_event(core, ns, "SlurmNodeDrained", f"{second}: IDLE+DRAIN", op)

    # a job runs on the first node: Allocated, and its pod is labelled busy (the PodDisruptionBudget's)
    job = slurm.run_job(first, 600)
    _wait_condition(core, ns, first, "True", "Allocated", op)
    wait_for(
        f"{first} labelled busy",
        lambda: (_pod(core, ns, first).metadata.labels or {}).get(BUSY_LABEL) == "true",
        TIMEOUT,
        on_fail=op.log_tail,
    )
    slurm.end_job(job)
    _wait_condition(core, ns, first, "True", "Idle", op)
    wait_for(
        f"{first}'s busy label gone",
        lambda: BUSY_LABEL not in (_pod(core, ns, first).metadata.labels or {}),
        TIMEOUT,
        on_fail=op.log_tail,
    )

    # the person resumes their node: usable again, said so
    slurm.set_state(second, "IDLE")
    _wait_condition(core, ns, second, "True", "Idle", op)
    _wait_event(core, ns, "SlurmNodeUsable", f"{second}: IDLE", op)
    _rounds(slurm, 2, op)
    # the operator never touched a node: a person's drain is theirs to undo
    assert slurm.actions == []
    # every request carried a token signed with the cluster's key, for this cluster's URL
    assert slurm.verified > 0 and slurm.auth_failures == [] and slurm.strays == []


def test_steady_sync_rounds_read_kubernetes_from_the_watch_caches(
    api_client: Any,
    controlplane: ControlPlane,
    cluster_namespace: str,
    slurm: FakeSlurmrestd,
    synced_operator: OperatorProcess,
) -> None:
    """What a platform team's API server sees of a quiet cluster: each sync round lists the cordoned
    Kubernetes nodes once, and asks for nothing else of Kubernetes (the cluster, its pods, WorkerSets and
    slurmrestd's Deployment come from the watch caches; four Secrets are read each round: the JWT key,
    the two tokens the round keeps fresh and the bridge's, looked for to delete it when the bridge is
    off (``warden.tokens``); Secrets are not cached: the operator also reads users' Secrets, which a
    label-selected cache would not hold)."""
    ns, op = cluster_namespace, synced_operator
    _up(api_client, ns, slurm, op)
    _rounds(slurm, 3, op)  # settled: conditions set, status written
    since, start = rfc3339(time.time()), slurm.reads()
    _rounds(slurm, 5, op)
    rounds, until, log = slurm.reads() - start, rfc3339(time.time()), controlplane.log_dir / "audit.log"
    wait_written(log, until)
    requests = audit_requests(log, ("warden-operator",), since, until, namespace=ns)
    assert rounds >= 5
    # a round is one list of the cordoned nodes (give or take the round in flight at either end) and
    # reads of the JWT key and the exporter's, read gate's and bridge's tokens; a quiet cluster needs no write
    assert rounds - 1 <= requests.by["list nodes"] <= rounds + 1, requests.by
    assert requests.by["get secrets"] <= 4 * (rounds + 1), requests.by
    others = {k: v for k, v in requests.by.items() if k not in ("list nodes", "get secrets")}
    assert others == {}, f"{rounds} rounds asked Kubernetes for more: {others}"


def test_cordon_drains_the_slurm_node_and_uncordon_resumes_it(
    api_client: Any, cluster_namespace: str, slurm: FakeSlurmrestd, synced_operator: OperatorProcess
) -> None:
    ns, op = cluster_namespace, synced_operator
    core = _up(api_client, ns, slurm, op)
    k8s_node = _pod(core, ns, WORKERS[0]).spec.node_name
    on_it = [w for w in WORKERS if _pod(core, ns, w).spec.node_name == k8s_node]
    elsewhere = [w for w in WORKERS if w not in on_it]
    reason = f"warden: Kubernetes node {k8s_node} cordoned"
    try:
        core.patch_node(k8s_node, {"spec": {"unschedulable": True}})  # kubectl cordon
        for w in on_it:
            _wait_action(slurm, Action("drain", w, reason), op)
            _wait_event(core, ns, "SlurmNodeCordoned", f"{w}: drained: {reason}", op)
            _wait_condition(core, ns, w, "False", "Drained", op, reason)

        def listed() -> bool:  # the round that sets the conditions writes status just after
            nodes = get_cluster(api_client, ns, CLUSTER)["status"]["slurmNodes"]
            return {d["node"]: d["reason"] for d in nodes["drained"]} == dict.fromkeys(on_it, reason)

        wait_for("status.slurmNodes.drained to list the cordon's drains", listed, TIMEOUT, on_fail=op.log_tail)
    finally:
        core.patch_node(k8s_node, {"spec": {"unschedulable": None}})  # kubectl uncordon
    for w in on_it:
        _wait_action(slurm, Action("resume", w), op)
        _wait_event(core, ns, "SlurmNodeUncordoned", f"{w}: resumed", op)
        _wait_condition(core, ns, w, "True", "Idle", op)
    _rounds(slurm, 2, op)
    # one drain and one resume each, for the workers on that node only
    assert slurm.actions == [Action("drain", w, reason) for w in on_it] + [Action("resume", w) for w in on_it]
    assert all(slurm.actions_on(w) == [] for w in elsewhere)


def _node_condition(core: client.CoreV1Api, k8s_node: str, condition: dict[str, str] | None, type_: str) -> None:
    """What Node Problem Detector (or ``kubectl patch node --subresource=status``) does: a condition of the
    node set, by a strategic merge on its type, or (None) deleted; the node's other conditions kept."""
    now = rfc3339(time.time())
    item: dict[str, str] = {"type": type_, "$patch": "delete"}
    if condition is not None:
        item = {"type": type_, **condition, "lastHeartbeatTime": now, "lastTransitionTime": now}
    body = {"status": {"conditions": [item]}}
    core.patch_node_status(k8s_node, body, _content_type="application/strategic-merge-patch+json")


def test_a_node_condition_drains_the_slurm_node_and_its_clearing_resumes_it(
    api_client: Any, cluster_namespace: str, slurm: FakeSlurmrestd, synced_operator: OperatorProcess
) -> None:
    ns, op = cluster_namespace, synced_operator
    first, second = WORKERS
    # a person drained the second node before: theirs, condition or not
    core = _up(api_client, ns, slurm, op, {second: (("IDLE", "DRAIN"), "hands off")},
               spec={"nodeConditionDrains": [{"type": "GpuXidError"}]})  # fmt: skip
    k8s_node = _pod(core, ns, first).spec.node_name
    on_it = [w for w in WORKERS if _pod(core, ns, w).spec.node_name == k8s_node and w != second]
    reason = f"warden-condition: GpuXidError (Xid79): GPU fell off the bus (node {k8s_node})"
    xid = {"status": "True", "reason": "Xid79", "message": "GPU fell off the bus"}
    try:
        _node_condition(core, k8s_node, xid, "GpuXidError")
        for w in on_it:
            _wait_action(slurm, Action("drain", w, reason), op)
            event = _wait_event(core, ns, "NodeConditionDrained", f"{w}: drained: {reason}", op)
            assert event.type == "Warning"
            _wait_condition(core, ns, w, "False", "Drained", op, reason)
        # the kubelet's (here kwok's) own conditions are still there beside it
        conditions = {c.type: c.status for c in core.read_node_status(k8s_node).status.conditions}
        assert conditions["GpuXidError"] == "True" and conditions["Ready"] == "True", conditions
        # cleared as Node Problem Detector clears it: the status turns False
        _node_condition(core, k8s_node, {"status": "False", "reason": "NoXid", "message": ""}, "GpuXidError")
        for w in on_it:
            _wait_action(slurm, Action("resume", w), op)
            _wait_event(core, ns, "NodeConditionCleared", f"{w}: conditions cleared on {k8s_node}: resumed", op)
            _wait_condition(core, ns, w, "True", "Idle", op)
    finally:
        _node_condition(core, k8s_node, None, "GpuXidError")
    _rounds(slurm, 2, op)
    # one drain and one resume each, for the workers on that node only; the person's drain untouched
    assert slurm.actions == [Action("drain", w, reason) for w in on_it] + [Action("resume", w) for w in on_it]
    assert slurm.actions_on(second) == []
    _wait_condition(core, ns, second, "False", "Drained", op, "hands off")
    # counted as the operator's other actions on Slurm nodes, by the Event reason that announced them
    samples = scrape(op.metrics_url)
    for action in ("NodeConditionDrained", "NodeConditionCleared"):
        counted = total(samples, "warden_slurm_actions_total", action=action, result="ok")
        assert counted == len(on_it), (action, counted)


def test_a_silent_slurmctld_is_told_and_so_is_its_return(
    api_client: Any, cluster_namespace: str, slurm: FakeSlurmrestd, synced_operator: OperatorProcess
) -> None:
    ns, op = cluster_namespace, synced_operator
    core = _up(api_client, ns, slurm, op)

    def controller() -> Any:
        status = get_cluster(api_client, ns, CLUSTER).get("status", {})
        return next(c for c in status.get("conditions", []) if c["type"] == "ControllerReady"), status

    def controller_is(reason: str) -> Any:
        found = controller()
        return found if found[0]["reason"] == reason else None

    slurm.silent = True  # slurmctld takes no request: slurmrestd answers with its timeout's words
    stuck, status = wait_for(
        "ControllerReady: SlurmctldUnresponsive",
        lambda: controller_is("SlurmctldUnresponsive"),
        TIMEOUT,
        on_fail=op.log_tail,
    )
    assert stuck["status"] == "False" and "Socket timed out on send/recv operation" in stuck["message"]
    assert status["phase"] != "Ready"
    warning = _wait_event(core, ns, "SlurmctldUnresponsive", "Socket timed out", op)
    assert warning.type == "Warning" and warning.involved_object.name == CLUSTER

    slurm.silent = False
    _wait_event(core, ns, "SlurmctldResponsive", "slurmctld answers", op)
    back, _ = wait_for(
        "ControllerReady: SlurmctldReady", lambda: controller_is("SlurmctldReady"), TIMEOUT, on_fail=op.log_tail
    )
    assert back["status"] == "True"
    wait_ready(api_client, ns, CLUSTER, op, timeout=TIMEOUT)
    assert len(_events(core, ns, "SlurmctldUnresponsive")) == 1  # told once, not every round
    assert slurm.actions == []


def test_scale_in_drains_the_node_whose_jobs_end_first_and_deletes_its_pod_once_idle(
    api_client: Any, cluster_namespace: str, slurm: FakeSlurmrestd, synced_operator: OperatorProcess
) -> None:
    ns, op = cluster_namespace, synced_operator
    core = _up(api_client, ns, slurm, op)
    first, second = WORKERS
    # both busy; the first's job ends sooner, so it leaves, not the highest ordinal
    soon = slurm.run_job(first, 600)
    slurm.run_job(second, 3600)
    for w in WORKERS:
        _wait_condition(core, ns, w, "True", "Allocated", op)

    body = load_example("cpu-only", ns)
    body["spec"]["workerGroups"][0]["replicas"] = 1
    apply_cluster(api_client, body)
    reason = f"warden: scale-in: {NAMES.worker('cpu')} shrinks to 1 nodes"
    _wait_action(slurm, Action("drain", first, reason), op)
    _wait_event(core, ns, "ScaleInDraining", f"{first}: drained: {reason}", op)
    assert LEAVING_ANNOTATION in (_pod(core, ns, first).metadata.annotations or {})

    # its job still runs: the pod stays, round after round
    _rounds(slurm, 3, op)
    pod = _pod(core, ns, first)
    assert pod.metadata.deletion_timestamp is None
    assert slurm.actions == [Action("drain", first, reason)]

    slurm.end_job(soon)  # idle now: the pod goes

    def gone() -> bool:
        try:
            _pod(core, ns, first)
        except client.ApiException as e:
            return bool(e.status == 404)
        return False

    _wait_event(core, ns, "ScaledIn", f"{first}: deleted: drained and idle", op)
    wait_for(f"pod {first} gone", gone, TIMEOUT, on_fail=op.log_tail)
    # no slurmd here deletes its own record on the way out: the sync removes the ghost
    _wait_action(slurm, Action("delete", first), op)
    _wait_event(core, ns, "GhostNodeRemoved", f"{first}: its pod is gone", op)
    wait_ready(api_client, ns, CLUSTER, op, timeout=TIMEOUT)

    def counted() -> tuple[int, int]:  # the round after the ghost's removal writes the new count
        nodes = get_cluster(api_client, ns, CLUSTER)["status"]["slurmNodes"]
        return nodes["registered"], nodes["usable"]

    wait_for("status.slurmNodes to count one node", lambda: counted() == (1, 1), TIMEOUT, on_fail=op.log_tail)
    assert _pod(core, ns, second).metadata.deletion_timestamp is None
    assert slurm.actions_on(second) == []


def test_the_exporter_has_a_token_of_its_own_written_anew_when_the_key_is_rotated(
    api_client: Any, cluster_namespace: str, slurm: FakeSlurmrestd, synced_operator: OperatorProcess
) -> None:
    """Rotating the key as docs/operations.md says (delete Secret <cluster>-jwt-key): the operator makes
    a new key, and its next sync round writes the exporter a token signed with it and marks the exporter's
    pod, so the kubelet brings the file in at once. The exporter's pod never mounts the key."""
    ns, op = cluster_namespace, synced_operator
    core = _up(api_client, ns, slurm, op)
    old_key = slurm.jwt_key
    assert old_key is not None

    def token() -> str | None:
        try:
            secret = core.read_namespaced_secret(NAMES.token("exporter"), ns)
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise
        return base64.b64decode((secret.data or {}).get(TOKEN_KEY, "")).decode() or None

    first = wait_for("the exporter's token Secret", token, TIMEOUT, on_fail=op.log_tail)
    claims = token_claims(first, old_key)
    assert claims is not None and claims["sun"] == READER_USER, first
    assert claims["exp"] - claims["iat"] == tokens.LIFETIME_S
    selector = ",".join(f"{k}={v}" for k, v in NAMES.selector("exporter").items())
    [pod] = core.list_namespaced_pod(ns, label_selector=selector).items
    mounted = {v.secret.secret_name for v in pod.spec.volumes if v.secret is not None}
    assert mounted == {NAMES.token("exporter")}, mounted

    core.delete_namespaced_secret(NAMES.jwt_key, ns)

    def new_key() -> bytes | None:
        try:
            data = core.read_namespaced_secret(NAMES.jwt_key, ns).data or {}
        except client.ApiException as e:
            if e.status == 404:
                return None
            raise
        key = base64.b64decode(data[JWT_KEY]) if JWT_KEY in data else None
        return key if key != old_key else None

    key = wait_for("a new JWT key", new_key, TIMEOUT, on_fail=op.log_tail)
    slurm.jwt_key = key  # the stand-in slurmctld takes the new key, as the controller's pod does
    renewed = wait_for("a token signed with the new key",
                       lambda: token_claims(token() or "", key), TIMEOUT, on_fail=op.log_tail)  # fmt: skip
    assert renewed["sun"] == READER_USER and token_claims(first, key) is None

    def marked() -> bool:
        annotations = _pod(core, ns, str(pod.metadata.name)).metadata.annotations or {}
        return annotations.get(TOKEN_ISSUED_ANNOTATION) == str(renewed["iat"])

    wait_for("the exporter's pod marked with the new token's time", marked, TIMEOUT, on_fail=op.log_tail)
    failures = len(slurm.auth_failures)
    _rounds(slurm, 2, op)  # the sync goes on with the new key: its own tokens are taken
    assert slurm.auth_failures[failures:] == []


BLOCK_LABEL, ZONE_LABEL = "example.com/nvlink-domain", "topology.kubernetes.io/zone"


def test_workers_are_placed_and_featured_by_their_nodes_labels_as_labels_change_and_pods_move(
    api_client: Any,
    controlplane: ControlPlane,
    cluster_namespace: str,
    slurm: FakeSlurmrestd,
    synced_operator: OperatorProcess,
) -> None:
    """spec.topology (blocks) and spec.nodeLabelFeatures: each registered worker gets the block and zone
    of the Kubernetes node its pod runs on (through slurmrestd's v0.0.44, as ``scontrol update
    Topology=... Features=...``), topology.conf names the blocks, status counts them; a label changed
    or a pod made again on another node is followed."""
    ns, op = cluster_namespace, synced_operator
    core = client.CoreV1Api(api_client)
    here = {"example.com/test": ns}  # this test's own kwok nodes; the workers are pinned to them
    [k0] = controlplane.add_fake_nodes(1, {**here, BLOCK_LABEL: "nvl1", ZONE_LABEL: "a"})
    body = load_example("cpu-only", ns)
    body["spec"]["topology"] = {"block": {"label": BLOCK_LABEL, "blockSizes": [1, 2]}}
    body["spec"]["nodeLabelFeatures"] = [{"label": ZONE_LABEL, "prefix": "zone-"}]
    body["spec"]["workerGroups"][0]["nodeSelector"] = here
    apply_cluster(api_client, body)
    _check_tokens(core, ns, slurm, op)
    wait_for("both workers on the labelled node", lambda: _nodes_of(core, ns) == dict.fromkeys(WORKERS, k0), TIMEOUT)
    for w in WORKERS:
        slurm.register(w)

    def placed(w: str, block: str, zone: str) -> bool:
        features = slurm.features_of(w) or []
        return slurm.topology.get(w) == f"default:{block}" and zone in features

    for w in WORKERS:  # the block only once topology.conf names it: the reconcile writes it first
        wait_for(f"{w} placed in nvl1, zone-a", partial(placed, w, "nvl1", "zone-a"), TIMEOUT, on_fail=op.log_tail)
        assert "warden-group-cpu" in (slurm.features_of(w) or [])  # its NodeSet's feature stays
    assert slurm.versions["v0.0.44"] > 0 and slurm.versions["v0.0.42"] == 0
    conf = core.read_namespaced_config_map(NAMES.slurm_config, ns).data
    assert "TopologyPlugin=topology/block" in conf["slurm.conf"]
    assert [line for line in conf["topology.conf"].splitlines() if line.startswith("Block")] == [
        "BlockName=nvl1", "BlockSizes=1,2"]  # fmt: skip

    def status() -> Any:
        return get_cluster(api_client, ns, CLUSTER)["status"]["slurmNodes"].get("topology")

    shown = wait_for("status to count the block", lambda: status() if (status() or {}).get("blocks") else None, TIMEOUT)
    assert shown["plugin"] == "topology/block" and shown["blocks"] == {"nvl1": 2}
    assert shown["features"] == {"zone-a": 2} and shown["unplaced"] == []
    _wait_event(core, ns, "SlurmNodesPlaced", "worker nodes given their place", op)

    # a node's label changes: its workers' features follow
    core.patch_node(k0, {"metadata": {"labels": {ZONE_LABEL: "c"}}})
    for w in WORKERS:
        wait_for(f"{w} in zone-c", partial(placed, w, "nvl1", "zone-c"), TIMEOUT, on_fail=op.log_tail)
        assert "zone-a" not in (slurm.features_of(w) or [])

    # a worker's pod is made again on another node (its own is cordoned): placed by its new node, in a
    # block topology.conf did not name until then
    first, second = WORKERS
    [k1] = controlplane.add_fake_nodes(1, {**here, BLOCK_LABEL: "nvl2", ZONE_LABEL: "b"})
    core.patch_node(k0, {"spec": {"unschedulable": True}})
    try:
        old_uid = _pod(core, ns, second).metadata.uid
        core.delete_namespaced_pod(second, ns, grace_period_seconds=0)
        slurm.unregister(second)  # its slurmd's graceful exit deletes its record
        wait_for(f"{second} made again on {k1}", lambda: _new_pod_on(core, ns, second, old_uid, k1), TIMEOUT,
                 on_fail=op.log_tail)  # fmt: skip
        slurm.register(second)
        wait_for(f"{second} placed in nvl2, zone-b", lambda: placed(second, "nvl2", "zone-b"), TIMEOUT,
                 on_fail=op.log_tail)  # fmt: skip
    finally:
        core.patch_node(k0, {"spec": {"unschedulable": None}})
    conf = core.read_namespaced_config_map(NAMES.slurm_config, ns).data
    assert [line for line in conf["topology.conf"].splitlines() if line.startswith("BlockName")] == [
        "BlockName=nvl1", "BlockName=nvl2"]  # fmt: skip

    # a label gone: the worker is left out of the topology, and status says why
    core.patch_node(k1, {"metadata": {"labels": {BLOCK_LABEL: None}}})
    wait_for(f"{second} out of the topology", lambda: slurm.topology.get(second) == "", TIMEOUT, on_fail=op.log_tail)

    def unplaced() -> Any:
        return (status() or {}).get("unplaced") or None

    assert wait_for("status to list it", unplaced, TIMEOUT, on_fail=op.log_tail) == [
        {"node": second, "reason": f"node {k1} has no label {BLOCK_LABEL}"}
    ]
    assert placed(first, "nvl1", "zone-c")


def _nodes_of(core: client.CoreV1Api, ns: str) -> dict[str, str]:
    """Worker pod -> the Kubernetes node it is scheduled to."""
    pods = {w: _pod_or_none(core, ns, w) for w in WORKERS}
    return {w: p.spec.node_name for w, p in pods.items() if p is not None and p.spec.node_name}


def _pod_or_none(core: client.CoreV1Api, ns: str, name: str) -> Any:
    try:
        return _pod(core, ns, name)
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise


def _new_pod_on(core: client.CoreV1Api, ns: str, name: str, old_uid: str, node: str) -> bool:
    pod = _pod_or_none(core, ns, name)
    return pod is not None and pod.metadata.uid != old_uid and pod.spec.node_name == node
