"""Two operator replicas on a real cluster (issue 54): the one acting, the holder of the chart's Lease, is
(a) deleted and (b) frozen (SIGSTOP through its host PID, the process Kubernetes still sees Running), each
time right after a `helm upgrade` that scales the worker group up and edits the Slurm config. The standby
takes over, and both changes land exactly once: no worker pod is made twice, slurmctld takes the new
file once, no Event is said twice; the frozen leader, resumed, exits before doing anything and stands by.
Prints how long the standby took to act.

Its own installation (module fixture); the tests run in file order. Freezing needs the operator's
process on this machine (the local cluster): elsewhere that test is skipped.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_slurmcluster import INSTANCE, NAME, RESOURCES, Installed, _eventually
from warden.events import CONTROLLER
from warden.leader.fence import EXIT_LOST
from warden_dev.localcluster import Kube, install_charts, new_ssh_key, uninstall_charts, wait_slurmcluster_ready

OPERATOR = "app.kubernetes.io/name=slurm-operator"
WORKERS = f"{INSTANCE},app.kubernetes.io/component=worker"
LEASE_S = 15  # the chart's leaderElection.leaseDurationSeconds


def _values(pubkey: str) -> dict[str, Any]:
    return {
        "nameOverride": NAME,
        "jail": {"size": "2Gi", "retainOnDelete": False},
        "login": {"sshAuthorizedKeys": [pubkey], "service": {"type": "NodePort"}},
        "workerGroups": [{"name": "cpu", "replicas": 1, "resources": RESOURCES}],
    }


class Handover(Installed):
    lease: str = ""


@pytest.fixture(scope="module")
def installed(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Handover]:
    tmp = tmp_path_factory.mktemp("handover")
    key = new_ssh_key(tmp / "id_ed25519", "warden-e2e")
    suffix = uuid.uuid4().hex[:6]
    namespace, operator = f"warden-ho-{suffix}", f"op-{suffix}"
    values = _values(key.with_suffix(".pub").read_text().strip())
    try:
        install_charts(kube, namespace, namespace, values, tmp / "values.json", operator_release=operator, crds="chart")
        status = wait_slurmcluster_ready(kube, namespace, NAME, timeout=600)
        done = Handover(kube, namespace, values, tmp / "values.json", key, status, False, tmp, {})
        done.lease = f"{operator}-slurm-operator"
        yield done
    finally:
        uninstall_charts(kube, namespace, NAME, operator, "slurm-operator-crds")


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def _worker_names(installed: Handover) -> set[str]:
    pods = installed.kube.json("-n", installed.namespace, "get", "pods", "-l", WORKERS)["items"]
    return {p["metadata"]["name"] for p in pods}


def _holder(installed: Handover) -> str:
    lease = installed.kube.json("-n", installed.namespace, "get", "lease", installed.lease)
    return str(lease["spec"].get("holderIdentity") or "")


def _operators(installed: Handover) -> dict[str, dict[str, Any]]:
    pods = installed.kube.json("-n", installed.namespace, "get", "pods", "-l", OPERATOR)["items"]
    return {p["metadata"]["name"]: p for p in pods if not p["metadata"].get("deletionTimestamp")}


def _lease_state(installed: Handover) -> str:
    """Who holds the Lease and what became of each operator pod, for a failed wait's first line."""
    pods = installed.kube.json("-n", installed.namespace, "get", "pods", "-l", OPERATOR)["items"]
    said = []
    for p in pods:
        statuses = p["status"].get("containerStatuses") or []
        restarts = sum(c.get("restartCount", 0) for c in statuses)
        last = next((c.get("lastState", {}).get("terminated") for c in statuses if c.get("lastState")), None) or {}
        said.append(f"{p['metadata']['name']} {p['status'].get('phase')}{' Ready' if _ready(p) else ''}"
                    f"{' deleting' if p['metadata'].get('deletionTimestamp') else ''} restarts {restarts}"
                    f"{' (last exit ' + str(last.get('exitCode')) + ')' if last else ''}")  # fmt: skip
    return f"the Lease held by {_holder(installed) or 'nobody'}; operator pods: {', '.join(said)}"


def _leader_and_standby(installed: Handover) -> tuple[str, str]:
    def both_ready() -> tuple[str, str] | None:
        pods = _operators(installed)
        ready = [n for n, p in pods.items() if _ready(p)]
        holder = _holder(installed)
        others = [n for n in ready if n != holder]
        return (holder, others[0]) if holder in ready and len(ready) == 2 else None

    found: tuple[str, str] = _eventually("a leader and a Ready standby", both_ready, timeout=180)
    return found


class Watch:
    """`kubectl get --watch` of the cluster's worker pods in the background: every (name, uid) seen."""

    def __init__(self, installed: Handover) -> None:
        kube = installed.kube
        self.seen: dict[str, set[str]] = {}
        self.first: dict[str, float] = {}
        self.proc = subprocess.Popen(
            [str(kube.bins / "kubectl"), f"--kubeconfig={kube.kubeconfig}", "-n", installed.namespace, "get", "pods",
             "-l", WORKERS, "--watch", "-o", "jsonpath={.metadata.name} {.metadata.uid}{'\\n'}"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if " " in line.strip():
                name, uid = line.split()
                self.seen.setdefault(name, set()).add(uid)
                self.first.setdefault(name, time.monotonic())

    def stop(self) -> dict[str, set[str]]:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.thread.join(timeout=10)
        return self.seen


def _said_twice(installed: Handover) -> list[tuple[str, str, str]]:
    """The operator's Events that exist as more than one object saying the same (reason, note, related)."""
    items = installed.kube.json("-n", installed.namespace, "get", "events.v1.events.k8s.io")["items"]
    said = [(str(e.get("reason")), str(e.get("note")), str((e.get("related") or {}).get("name")))
            for e in items if e.get("reportingController") == CONTROLLER]  # fmt: skip
    return sorted({k for k in said if said.count(k) > 1})


def _reconfigured(installed: Handover) -> list[str]:
    """The controller's log lines saying slurmctld took a changed configuration."""
    log = installed.kube.kubectl("-n", installed.namespace, "logs", f"{NAME}-controller-0", "-c", "slurmctld")
    return re.findall(r"config: slurmctld reconfigured \(hash \w+\)", log)


def _scale_and_edit_then(installed: Handover, act: Callable[[], None], what: str) -> None:
    """helm upgrade: one worker more and a new MessageTimeout; then ``act`` on the leader at once. Waits for
    the standby to lead and for both changes to land, checks each landed once, prints the times."""
    kube, ns = installed.kube, installed.namespace
    leader, standby = _leader_and_standby(installed)
    group = installed.values["workerGroups"][0]
    group["replicas"] += 1
    reconfigured = len(_reconfigured(installed))
    message_timeout = 11 + reconfigured
    installed.values["slurmConfig"] = {"extraLines": [f"MessageTimeout={message_timeout}"]}
    pods = _worker_names(installed)
    watch = Watch(installed)
    try:
        installed.helm_upgrade()
        t0 = time.monotonic()
        act()
        _eventually(f"{standby} holding the Lease", lambda: _holder(installed) == standby,
                    timeout=LEASE_S + 15, interval=0.2, explain=lambda: _lease_state(installed))  # fmt: skip
        leads = time.monotonic() - t0
        new = f"{NAME}-worker-cpu-{group['replicas'] - 1}"
        _eventually(f"{new} made", lambda: new in watch.first, timeout=120, interval=0.2)
        scaled = watch.first[new] - t0

        def runs_it() -> bool:
            config = kube.kubectl("-n", ns, "exec", f"{NAME}-controller-0", "-c", "slurmctld", "--", "scontrol", "show",
                                  "config")  # fmt: skip
            return f"= {message_timeout} sec" in config.partition("MessageTimeout")[2][:40]

        _eventually(f"slurmctld running MessageTimeout={message_timeout}", runs_it, timeout=180, interval=0.5)
        configured = time.monotonic() - t0
        _eventually(f"{new} Ready", lambda: _ready(kube.json("-n", ns, "get", "pod", new)), timeout=180)
        # the controller's entrypoint says so once slurmctld's "Configuration data as of" moved (it looks each
        # second after `scontrol reconfigure`): a moment after slurmctld answers with the new value
        _eventually("the controller's log: slurmctld reconfigured",
                    lambda: len(_reconfigured(installed)) > reconfigured, timeout=60)  # fmt: skip
    finally:
        seen = watch.stop()
    print(f"\nleader {what}: {standby} held the Lease after {leads:.1f}s, made {new} after {scaled:.1f}s, slurmctld"
          f" ran the edited config after {configured:.1f}s")  # fmt: skip
    twice = {n: uids for n, uids in seen.items() if len(uids) > 1}
    assert not twice, f"worker pods made more than once: {twice}"
    assert set(seen) == pods | {new}, seen
    assert len(_reconfigured(installed)) == reconfigured + 1, "slurmctld took the edited config more than once"
    assert _said_twice(installed) == []
    assert leader not in _operators(installed) or _holder(installed) != leader


def test_the_leaders_pod_deleted_mid_change_the_standby_finishes_it_once(installed: Handover) -> None:
    leader, _ = _leader_and_standby(installed)

    def delete() -> None:
        installed.kube.kubectl("-n", installed.namespace, "delete", "pod", leader, "--wait=false")

    _scale_and_edit_then(installed, delete, "pod deleted")
    # the Deployment's new pod stands by
    _leader_and_standby(installed)


def _host_pids(container_id: str) -> list[int]:
    """The processes on this machine of a container (its ID in their cgroup), the operator's command."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if container_id in (entry / "cgroup").read_text() and b"warden" in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_the_leader_frozen_mid_change_is_replaced_and_resumed_exits_and_stands_by(installed: Handover) -> None:
    kube, ns = installed.kube, installed.namespace
    leader, _ = _leader_and_standby(installed)
    status = _operators(installed)[leader]["status"]["containerStatuses"][0]
    pids = _host_pids(status["containerID"].rpartition("//")[2])
    if not pids:
        pytest.skip("the operator's process is not on this machine (a cluster other than the local one)")
    restarts = status.get("restartCount", 0)
    frozen: list[int] = []

    def freeze() -> None:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
            frozen.append(pid)

    try:
        _scale_and_edit_then(installed, freeze, "frozen (SIGSTOP)")
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)

    def exited() -> dict[str, Any] | None:
        c = _operators(installed)[leader]["status"]["containerStatuses"][0]
        return c if c.get("restartCount", 0) > restarts else None

    c = _eventually(f"{leader} exited once resumed", exited, timeout=60)
    assert c["lastState"]["terminated"]["exitCode"] == EXIT_LOST, c
    previous = kube.kubectl("-n", ns, "logs", leader, "--previous")
    assert "exiting so that nothing is done twice" in previous, previous[-3000:]
    assert _leader_and_standby(installed)[1] == leader, "the resumed replica stands by"
