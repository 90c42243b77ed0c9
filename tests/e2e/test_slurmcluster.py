"""A user's path through Warden on a real cluster: the three charts installed with helm, the
SlurmCluster Ready, SSH through the login Service into the jail, a two-node batch job whose output lands
in the jail, workers scaled up joining Slurm, the controller pod deleted with jobs queued (the queue survives
and they complete), and `helm uninstall` keeping the jail when asked to.

The tests share one installation (module fixture) and run in file order: each builds on the last.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.localcluster import Kube, install_charts, wait_slurmcluster_ready

NAME = "e2e"
CONDITIONS = ("Ready", "JailPopulated", "ControllerReady", "LoginReady", "WorkersReady", "AccountingReady")
INSTANCE = f"app.kubernetes.io/instance={NAME}"


@dataclass
class Installed:
    kube: Kube
    namespace: str
    values: dict[str, Any]
    values_file: Path
    key: Path
    status: dict[str, Any]

    def ssh(self, command: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run ``command`` as root over SSH through the login Service (NodePort on the node's address)."""
        svc = self.kube.json("-n", self.namespace, "get", "service", f"{NAME}-login")
        port = next(p["nodePort"] for p in svc["spec"]["ports"] if p["name"] == "ssh")
        node = self.kube.json("get", "nodes")["items"][0]
        ip = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
        return subprocess.run(
            ["ssh", "-i", str(self.key), "-p", str(port), "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
             "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
             f"root@{ip}", command],
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip

    def helm_upgrade(self) -> None:
        self.values_file.write_text(json.dumps(self.values, indent=2) + "\n")
        self.kube.helm("upgrade", NAME, str(Path("charts/slurm-cluster").resolve()), "-n", self.namespace,
                       "-f", str(self.values_file))  # fmt: skip


def _values(pubkey: str, workers: int) -> dict[str, Any]:
    return {
        "nameOverride": NAME,
        "jail": {"size": "2Gi", "retainOnDelete": True},
        "login": {"sshAuthorizedKeys": [pubkey], "service": {"type": "NodePort"}},
        "workerGroups": [
            {
                "name": "cpu",
                "replicas": workers,
                "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
            }
        ],
    }


@pytest.fixture(scope="module")
def installed(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    tmp = tmp_path_factory.mktemp("e2e")
    key = tmp / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "warden-e2e", "-f", str(key)], check=True)
    suffix = uuid.uuid4().hex[:6]
    namespace = f"warden-e2e-{suffix}"
    operator = f"op-{suffix}"  # its cluster-wide objects are named after the release: unique per run
    crd = kube.kubectl("get", "crd", "slurmclusters.slurm.warden.dev", "--ignore-not-found", "-o", "name")
    crds = "none" if crd.strip() else "chart"  # the CRD is cluster-wide: another installation may have made it
    values = _values(key.with_suffix(".pub").read_text().strip(), workers=2)
    t0 = time.monotonic()
    try:
        install_charts(kube, namespace, namespace, values, tmp / "values.json", operator_release=operator, crds=crds)
        status = wait_slurmcluster_ready(kube, namespace, NAME, timeout=600)
        print(f"\nSlurmCluster {namespace}/{NAME} Ready {time.monotonic() - t0:.0f}s after helm install")
        yield Installed(kube, namespace, values, tmp / "values.json", key, status)
    finally:
        for release in (NAME, operator, "slurm-operator-crds"):
            kube.helm("uninstall", release, "-n", namespace, "--ignore-not-found", "--wait", check=False)
        kube.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found", check=False)


def test_helm_install_makes_a_ready_slurmcluster(installed: Installed) -> None:
    status = installed.status["status"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert {t: conditions.get(t) for t in CONDITIONS} == dict.fromkeys(CONDITIONS, "True")
    assert status["observedGeneration"] == installed.status["metadata"]["generation"]
    groups = {g["name"]: (g["readyReplicas"], g["replicas"]) for g in status["workerGroups"]}
    assert groups == {"cpu": (2, 2)}
    assert (status["workers"], status["login"], status["jailPopulated"]) == ("2/2", "1/1", True)


def test_ssh_through_login_service_lands_in_the_jail(installed: Installed) -> None:
    out = installed.ssh("cat /etc/warden-jail-release; id -un")
    assert out.returncode == 0, out.stderr
    assert "WARDEN_JAIL_VERSION=" in out.stdout
    assert out.stdout.splitlines()[-1] == "root"
    # the file is the jail's, not the login image's: the session is chrooted
    probe = "test -e /etc/warden-jail-release && echo image || echo absent"
    pod = installed.kube.kubectl("-n", installed.namespace, "exec", f"{NAME}-login-0", "-c", "sshd", "--",
                                 "sh", "-c", probe)  # fmt: skip
    assert pod.strip() == "absent"


def _wait_job(installed: Installed, job: str, timeout: float = 180) -> str:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        out = installed.ssh(f"scontrol show job -o {job}")
        fields = dict(f.split("=", 1) for f in out.stdout.split() if "=" in f)
        state = fields.get("JobState", "")
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            return state
        time.sleep(2)
    raise AssertionError(f"job {job} still {state or 'unknown'} after {timeout}s")


def test_sbatch_on_two_nodes_writes_its_output_into_the_jail(installed: Installed) -> None:
    out = installed.ssh("sbatch --parsable -N2 -o /root/e2e-%j.out --wrap 'srun hostname'")
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    assert _wait_job(installed, job) == "COMPLETED"
    # read through a worker pod's jail volume: the output is on the shared jail, not on one node
    text = installed.kube.kubectl("-n", installed.namespace, "exec", f"{NAME}-worker-cpu-0", "-c", "slurmd", "--",
                                  "cat", f"/mnt/jail/root/e2e-{job}.out")  # fmt: skip
    assert sorted(text.split()) == [f"{NAME}-worker-cpu-0", f"{NAME}-worker-cpu-1"]


def test_scaled_up_workers_join_slurm(installed: Installed) -> None:
    installed.values["workerGroups"][0]["replicas"] = 3
    installed.helm_upgrade()
    want = {f"{NAME}-worker-cpu-{i}" for i in range(3)}
    deadline = time.monotonic() + 300
    idle: set[str] = set()
    while time.monotonic() < deadline:
        out = installed.ssh("sinfo -h -N -o '%N %t'")
        idle = {line.split()[0] for line in out.stdout.splitlines() if line.split()[1:] == ["idle"]}
        if idle == want:
            break
        time.sleep(3)
    assert idle == want
    out = installed.ssh("srun -N3 hostname")
    assert out.returncode == 0, out.stderr
    assert set(out.stdout.split()) == want


def _job_states(installed: Installed) -> dict[str, str]:
    """Every job slurmctld knows, finished ones included (kept MinJobAge, 300 s), by id."""
    out = installed.ssh("squeue -h -t all -o '%i %T'")
    return dict(line.split() for line in out.stdout.splitlines()) if out.returncode == 0 else {}


def test_controller_pod_deleted_keeps_the_queue_and_jobs_complete(installed: Installed) -> None:
    """slurmctld's pod deleted with jobs running and queued: the StatefulSet makes a new one, whose
    slurmctld reads its saved state (StateSaveLocation on its PVC) and has the same jobs; all complete."""
    kube, ns = installed.kube, installed.namespace
    jobs = []
    for _ in range(5):  # three one-CPU workers: three run, two wait
        out = installed.ssh("sbatch --parsable -o /root/requeue-%j.out --wrap 'sleep 20; echo done'")
        assert out.returncode == 0, out.stderr
        jobs.append(out.stdout.strip().split(";")[0])
    deadline = time.monotonic() + 60
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        out = installed.ssh(f"squeue -h -o '%i %T' -j {','.join(jobs)}")
        states = dict(line.split() for line in out.stdout.splitlines())
        if "RUNNING" in states.values():
            break
        time.sleep(1)
    assert set(states) == set(jobs) and "RUNNING" in states.values() and "PENDING" in states.values(), states

    pod = f"{NAME}-controller-0"
    old_uid = kube.json("-n", ns, "get", "pod", pod)["metadata"]["uid"]
    kube.kubectl("-n", ns, "delete", "pod", pod, "--wait=false")
    deadline = time.monotonic() + 180
    ready = False
    while time.monotonic() < deadline and not ready:
        obj = json.loads(kube.kubectl("-n", ns, "get", "pod", pod, "-o", "json", "--ignore-not-found") or "{}")
        conds = {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions", [])}
        ready = obj.get("metadata", {}).get("uid", old_uid) != old_uid and conds.get("Ready") == "True"
        if not ready:
            time.sleep(1)
    assert ready, f"{pod} not regenerated and Ready within 180s"

    # the new slurmctld answers with the same jobs (from its saved state: none lost, none under a new id)
    deadline = time.monotonic() + 60
    known: dict[str, str] = {}
    while time.monotonic() < deadline and not known:
        known = _job_states(installed)
        time.sleep(1)
    assert set(jobs) <= set(known), known

    deadline = time.monotonic() + 240
    final: dict[str, str] = {}
    while time.monotonic() < deadline:
        final = {j: s for j, s in _job_states(installed).items() if j in jobs}
        if set(final) == set(jobs) and all(s not in ("PENDING", "RUNNING", "CONFIGURING") for s in final.values()):
            break
        time.sleep(3)
    assert final == dict.fromkeys(jobs, "COMPLETED")
    out = installed.ssh(" ".join(f"cat /root/requeue-{j}.out;" for j in jobs))
    assert out.stdout.split() == ["done"] * len(jobs), out.stderr


def test_helm_uninstall_keeps_only_the_jail_claim(installed: Installed) -> None:
    kube, ns = installed.kube, installed.namespace
    kube.helm("uninstall", NAME, "-n", ns, "--wait")
    kinds = "slurmclusters,statefulsets,pods,jobs,services,configmaps,secrets"
    deadline = time.monotonic() + 180
    left: list[str] = []
    while time.monotonic() < deadline:
        left = kube.kubectl("-n", ns, "get", kinds, "-l", INSTANCE, "-o", "name").split()
        left += [n for n in kube.kubectl("-n", ns, "get", "slurmclusters", "-o", "name").split()]
        if not left:
            break
        time.sleep(2)
    assert left == []
    pvcs = kube.json("-n", ns, "get", "pvc")["items"]
    jail = [p for p in pvcs if p["metadata"]["name"] == f"{NAME}-jail"]
    assert len(jail) == 1 and jail[0]["status"]["phase"] == "Bound"
    assert not jail[0]["metadata"].get("ownerReferences")
    # besides the jail only StatefulSet volume claims stay (Kubernetes keeps those by default)
    others = {p["metadata"]["name"] for p in pvcs} - {f"{NAME}-jail"}
    assert all(n.startswith(f"state-{NAME}-controller-") or "-mariadb-" in n for n in others), others
