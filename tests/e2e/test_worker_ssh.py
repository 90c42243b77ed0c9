"""SSH to the worker where your job runs (spec.workerSsh, issue 57), on a real cluster with its
NetworkPolicies enforced, as users do it: a key pair made on the login node, a job on worker 0, `ssh
<worker>` from the login node lands in the jail inside the job's cgroup (its extern step), the session dies
with the job (scancel), and a user without a job on that node is refused with pam_slurm_adopt's words.

Its own installation (module fixture): PrologFlags=Contain gives every job an extern step, which the main
installation's tests need not run with."""

from __future__ import annotations

import re
import shlex
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_slurmcluster import NAME, RESOURCES, Installed, _eventually, _pod_ip
from warden_dev.localcluster import Kube, install_charts, new_ssh_key, uninstall_charts, wait_slurmcluster_ready

DENIED = "Access denied by pam_slurm_adopt: you have no active jobs on this node"
#: the ssh client in a login session: the worker's host key checked against what the login pod shows the
#: jail as known hosts (no question asked, none accepted)
SSH = "ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=10"


def _values(pubkey: str) -> dict[str, Any]:
    return {
        "nameOverride": NAME,
        "jail": {"size": "2Gi", "retainOnDelete": False},
        "login": {"sshAuthorizedKeys": [pubkey], "service": {"type": "NodePort"}},
        "workerGroups": [{"name": "cpu", "replicas": 2, "resources": RESOURCES}],
        "accounting": {"mode": "Disabled"},
        "workerSsh": {"enabled": True},
    }


@pytest.fixture(scope="module")
def installed(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    tmp = tmp_path_factory.mktemp("worker-ssh")
    key = new_ssh_key(tmp / "id_ed25519", "warden-e2e")
    suffix = uuid.uuid4().hex[:6]
    namespace, operator = f"warden-ws-{suffix}", f"op-{suffix}"
    values = _values(key.with_suffix(".pub").read_text().strip())
    t0 = time.monotonic()
    try:
        install_charts(kube, namespace, namespace, values, tmp / "values.json", operator_release=operator, crds="chart")
        status = wait_slurmcluster_ready(kube, namespace, NAME, timeout=600)
        print(f"\nSlurmCluster {namespace}/{NAME} Ready {time.monotonic() - t0:.0f}s after helm install")
        yield Installed(kube, namespace, values, tmp / "values.json", key, status, False, tmp, {})
    finally:
        uninstall_charts(kube, namespace, NAME, operator, "slurm-operator-crds")


class User:
    """A jail user (warden-useradd) with a key pair of their own made in a login session, its public half
    in their authorized_keys: what docs/operations.md has users do once."""

    def __init__(self, installed: Installed, name: str) -> None:
        self.installed, self.name = installed, name
        self.key: Path = installed.make_user(name)
        self.run(
            "ssh-keygen -q -t ed25519 -N '' -f ~/.ssh/id_ed25519 && cat ~/.ssh/id_ed25519.pub >> ~/.ssh/authorized_keys"
        )

    def run(self, command: str, timeout: float = 90, check: bool = True) -> str:
        r = self.installed.ssh(command, key=self.key, user=self.name, timeout=timeout)
        assert r.returncode == 0 or not check, f"{self.name}: {command}\n{r.stdout}{r.stderr}"
        return r.stdout

    def job_on(self, node: str) -> str:
        job = self.run(f"sbatch --parsable -w {node} -t 10 --wrap 'sleep 600'").strip()
        assert job.isdigit(), job
        _eventually(f"job {job} running on {node}",
                    lambda: self.run(f"squeue -h -j {job} -o '%T %N'").split() == ["RUNNING", node] or None,
                    timeout=120)  # fmt: skip
        return job


@pytest.fixture(scope="module")
def carol(installed: Installed) -> User:
    return User(installed, "carol")


@pytest.fixture(scope="module")
def dave(installed: Installed) -> User:
    return User(installed, "dave")


def _worker(i: int) -> str:
    return f"{NAME}-worker-cpu-{i}"


def test_ssh_to_the_worker_of_your_job_lands_in_the_jail_inside_the_jobs_cgroup(carol: User) -> None:
    node = _worker(0)
    job = carol.job_on(node)
    try:
        out = carol.run(f"{SSH} {node} " + shlex.quote(
            'hostname; id -un; echo "job=$SLURM_JOB_ID"; test -f /etc/warden-jail-release && echo in-jail; '
            "for p in /etc/warden /mnt/jail; do [ -e $p ] && echo VISIBLE $p; done; cat /proc/self/cgroup; "
            "unshare -U true 2>&1; echo unshare=$?"
        ))  # fmt: skip
        lines = out.splitlines()
        assert lines[:4] == [node, "carol", f"job={job}", "in-jail"], out
        assert "VISIBLE" not in out, out
        # under the job steps' seccomp filter: no namespaces
        assert "Operation not permitted" in out and "unshare=1" in out, out
        cgroups = [line for line in lines if re.match(r"^\d+:", line)]
        assert any(f"/job_{job}/step_extern" in c for c in cgroups), f"not in job {job}'s cgroup:\n{out}"
        if any(":memory:" in c for c in cgroups):  # cgroup v1: the job's memory and cores
            for controller in ("memory", "cpuset"):
                line = next(c for c in cgroups if c.split(":")[1] == controller)
                assert f"/job_{job}/step_extern" in line, (controller, out)
    finally:
        carol.run(f"scancel {job}", check=False)


def test_a_user_without_a_job_on_the_node_is_refused(carol: User, dave: User) -> None:
    job = carol.job_on(_worker(0))
    try:
        for user, node in ((dave, _worker(0)), (carol, _worker(1))):
            out = user.run(f"{SSH} {node} true 2>&1; echo rc=$?")
            assert "rc=255" in out and DENIED in out, (user.name, node, out)
    finally:
        carol.run(f"scancel {job}", check=False)


def test_the_session_dies_with_the_job(carol: User) -> None:
    node = _worker(0)
    job = carol.job_on(node)
    out = carol.run(
        f"rm -f ~/ws-session; ({SSH} {node} 'echo started; exec sleep 600' > ~/ws-session 2>&1; "
        "echo rc=$? >> ~/ws-session) & "
        "for _ in $(seq 1 150); do grep -q started ~/ws-session 2>/dev/null && break; sleep 0.2; done; "
        f"grep -q started ~/ws-session || {{ cat ~/ws-session; exit 3; }}; scancel {job}; "
        "SECONDS=0; wait; echo waited=$SECONDS; cat ~/ws-session",
        timeout=150,
    )
    waited = re.search(r"waited=(\d+)", out)
    assert waited is not None and "started" in out and "rc=0" not in out, out
    assert int(waited.group(1)) < 60, f"the session outlived its job:\n{out}"


def test_another_workload_cannot_reach_the_workers_sshd(installed: Installed, carol: User) -> None:
    """No Service, and the NetworkPolicies: a pod of another workload in the namespace gets no connection
    to a worker's port 22, which the login node's sessions reach (the tests above)."""
    ns, node = installed.namespace, _worker(0)
    operator = installed.kube.json("-n", ns, "get", "deploy", "-l", "app.kubernetes.io/name=slurm-operator")
    image = operator["items"][0]["spec"]["template"]["spec"]["containers"][0]["image"]
    container = {"name": "main", "image": image, "imagePullPolicy": "IfNotPresent",
                 "command": ["python3", "-c", "import time; time.sleep(3600)"]}  # fmt: skip
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stranger", "namespace": ns, "labels": {"app": "x"}},
           "spec": {"containers": [container], "terminationGracePeriodSeconds": 0}}  # fmt: skip
    installed.kube.apply([pod])
    try:
        installed.kube.kubectl("-n", ns, "wait", "--for=condition=Ready", "pod/stranger", "--timeout=120s",
                               timeout=150)  # fmt: skip
        probe = (
            "import socket, sys\n"
            "try:\n"
            "    socket.create_connection((sys.argv[1], 22), timeout=1).close(); print('open')\n"
            "except OSError as e:\n"
            "    print(type(e).__name__)\n"
        )
        out = installed.kube.kubectl(
            "-n", ns, "exec", "stranger", "--", "python3", "-c", probe, _pod_ip(installed, node)
        )
        assert out.strip() in ("ConnectionRefusedError", "TimeoutError"), out
        # while from the login node the same port answers
        assert "SSH-2.0-OpenSSH" in carol.run(f"timeout 5 bash -c 'exec 3<>/dev/tcp/{node}/22; head -c 20 <&3'")
    finally:
        installed.kube.kubectl("-n", ns, "delete", "pod", "stranger", "--wait=false", check=False)
