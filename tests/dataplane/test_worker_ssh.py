"""SSH from the login node to a worker where the user's job runs (spec.workerSsh), as a user does it: a job
on worker 0, `ssh <worker>` from a login session lands in the jail, in the job's cgroup; the session ends
when the job is cancelled; a user without a job on a node, and root, are refused.

A cluster of its own (two CPU workers, a GPU worker with two stand-in GPUs, a login node, no accounting),
not the session's: PrologFlags=Contain
gives every job an extern step, which the other dataplane tests need not run with."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import failures
from tests.support.dockerfixture import running_for_tests
from tests.support.jailuser import JailUser
from warden import naming
from warden.model import parse_spec
from warden.render import config
from warden.render import secrets as render_secrets
from warden.render.context import Cluster
from warden_dev.dockercluster import DockerCluster, wait_for

#: root's key pair for the workers (spec.workerSsh.rootAuthorizedKeys), which an admin keeps on the login node
ROOT_KEY = render_secrets.ssh_host_key()
SPEC: dict[str, Any] = {
    "login": {"replicas": 1},
    "workerGroups": [
        {"name": "cpu", "replicas": 2, "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}},
        {"name": "gpu", "replicas": 1, "gpus": {"count": 2, "type": "fake"}, "resources": {"limits": {"cpu": "2"}}},
    ],
    "accounting": {"mode": "Disabled"},
    "workerSsh": {
        "enabled": True,
        "admins": ["erin"],
        "rootAuthorizedKeys": [ROOT_KEY[f"{naming.SSH_HOST_KEY}.pub"].strip()],
    },
}
DENIED = "Access denied by pam_slurm_adopt: you have no active jobs on this node"
#: the ssh client of a login session: the worker's host key checked against the known hosts the login pod
#: shows the jail (no question asked, none accepted), keys only
SSH = "ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=10"


@pytest.fixture(scope="module")
def cluster() -> Iterator[DockerCluster]:
    with running_for_tests(DockerCluster(SPEC, name="ws"), "worker SSH cluster", failures.any_failed) as c:
        yield c


def _user(cluster: DockerCluster, name: str) -> JailUser:
    """A jail user with a key pair of their own made on the login node, its public half in their
    authorized_keys (the jail's home is the same on every node): what docs/operations.md has users do."""
    user = JailUser.added_by_root(cluster, name)
    user.ssh("test -f ~/.ssh/id_ed25519 || ssh-keygen -q -t ed25519 -N '' -f ~/.ssh/id_ed25519; "
             "cat ~/.ssh/id_ed25519.pub >> ~/.ssh/authorized_keys")  # fmt: skip
    return user


@pytest.fixture(scope="module")
def carol(cluster: DockerCluster) -> JailUser:
    return _user(cluster, "carol")


@pytest.fixture(scope="module")
def dave(cluster: DockerCluster) -> JailUser:
    return _user(cluster, "dave")


def _worker(cluster: DockerCluster, i: int) -> str:
    return f"{cluster.names.worker('cpu')}-{i}"


def _job_on(user: JailUser, node: str, options: str = "") -> str:
    """A job of ``user`` running on ``node`` (sbatch from their login session); its id."""
    job = user.ssh(f"sbatch --parsable -w {node} -t 10 {options} --wrap 'sleep 600'").strip()
    assert job.isdigit(), job
    wait_for(f"job {job} running on {node}",
             lambda: user.ssh(f"squeue -h -j {job} -o '%T %N'").split() == ["RUNNING", node], timeout=60)  # fmt: skip
    return job


def test_a_user_with_a_job_there_lands_in_the_jail_inside_the_jobs_cgroup(
    cluster: DockerCluster, carol: JailUser
) -> None:
    node = _worker(cluster, 0)
    job = _job_on(carol, node)
    try:
        out = carol.ssh(f"{SSH} {node} " + shlex.quote(
            'hostname; id -un; echo "job=$SLURM_JOB_ID"; test -f /etc/warden-jail-release && echo in-jail; '
            "for p in /etc/warden /mnt/jail /usr/local/bin/warden-worker; do [ -e $p ] && echo VISIBLE $p; done; "
            "cat /proc/self/cgroup"
        ))  # fmt: skip
        lines = out.splitlines()
        assert lines[:4] == [node, "carol", f"job={job}", "in-jail"], out
        assert "VISIBLE" not in out, "the session sees the worker container, not the jail"
        cgroups = [line for line in lines if re.match(r"^\d+:", line)]
        assert cgroups, out
        # every hierarchy the session is in is the job's extern step (cgroup v1: one line per controller;
        # v2: one line), so it has the job's cores and memory and is killed with the job
        in_job = [c for c in cgroups if f"/job_{job}/step_extern" in c]
        assert in_job, f"the session is in none of job {job}'s cgroups:\n{out}"
        v1 = any(":memory:" in c for c in cgroups)
        for controller in ("memory", "cpuset", "freezer") if v1 else ("",):
            line = next(c for c in cgroups if c.split(":")[1] == controller)
            assert f"/job_{job}/step_extern" in line, (controller, out)
        # the job's step list shows the adopted session's processes under the extern step
        assert f"{job}.extern" in carol.ssh(f"squeue -h -s -j {job} -o %i")
    finally:
        carol.ssh(f"scancel {job}", check=False)


def test_a_session_runs_under_the_job_steps_filter(cluster: DockerCluster, carol: JailUser) -> None:
    """Every process a user starts on a worker is filtered (docs/security.md, "What a job step may do"), an
    SSH session's too: one seccomp filter more than the worker container, no namespaces (`unshare -U`
    refused), without no_new_privs (setuid programs of the jail keep working); a pty and srun work."""
    node = _worker(cluster, 0)
    container = cluster.exec(node, "grep '^Seccomp_filters:' /proc/1/status").out.split()[1]
    job = _job_on(carol, node)
    try:
        out = carol.ssh(f"{SSH} -tt {node} " + shlex.quote(
            "grep -E '^(Seccomp_filters|NoNewPrivs):' /proc/self/status; unshare -U true 2>&1; echo unshare=$?; "
            "tty; srun --overlap --jobid=$SLURM_JOB_ID hostname"
        ))  # fmt: skip
        assert f"Seccomp_filters:\t{int(container) + 1}" in out and "NoNewPrivs:\t0" in out, out
        assert "Operation not permitted" in out and "unshare=1" in out, out
        assert "/dev/pts/" in out and out.rstrip().endswith(node), out
    finally:
        carol.ssh(f"scancel {job}", check=False)


def test_a_session_on_a_gpu_worker_sees_the_nodes_driver_and_the_jobs_gpus_only(
    cluster: DockerCluster, carol: JailUser
) -> None:
    """What `watch nvidia-smi` from the login node needs: the session has the node's driver (its
    `nvidia-smi`, not the jail's stub), and of the node's two GPUs the one the job got (the job's devices
    cgroup, which the session is in)."""
    node = f"{cluster.names.worker('gpu')}-0"
    job = _job_on(carol, node, "--gres=gpu:1")
    try:
        out = carol.ssh(f"{SSH} {node} 'nvidia-smi -L'")
        assert len(out.splitlines()) == 1 and out.startswith("GPU 0: "), out
        assert cluster.exec(node, "ls /dev/nvidia[0-9]*").out.split() == ["/dev/nvidia0", "/dev/nvidia1"]
    finally:
        carol.ssh(f"scancel {job}", check=False)


def test_a_user_without_a_job_on_the_node_is_refused_with_slurms_words(
    cluster: DockerCluster, carol: JailUser, dave: JailUser
) -> None:
    """dave has no job at all; carol has one, but on worker 0, not worker 1: both are refused by
    pam_slurm_adopt, saying so, while carol still gets onto worker 0."""
    job = _job_on(carol, _worker(cluster, 0))
    try:
        for user, node in ((dave, _worker(cluster, 0)), (carol, _worker(cluster, 1))):
            r = cluster.ssh(user.name, f"{SSH} {node} true 2>&1; echo rc=$?", identity=user.identity, check=False)
            assert "rc=255" in r.out, (user.name, node, r.out)
            assert DENIED in r.out, (user.name, node, r.out)
        assert carol.ssh(f"{SSH} {_worker(cluster, 0)} echo ok").strip() == "ok"
    finally:
        carol.ssh(f"scancel {job}", check=False)


def test_the_session_ends_when_the_job_is_cancelled(cluster: DockerCluster, carol: JailUser) -> None:
    """A session that would last ten minutes is killed with the job's extern step: scancel, and the
    ssh client on the login node returns (connection closed) within seconds, not at its end."""
    node = _worker(cluster, 0)
    job = _job_on(carol, node)
    script = (
        f"rm -f ~/ws-session; ({SSH} {node} 'echo started; exec sleep 600' > ~/ws-session 2>&1; "
        "echo rc=$? >> ~/ws-session) & "
        "for _ in $(seq 1 100); do grep -q started ~/ws-session 2>/dev/null && break; sleep 0.2; done; "
        f"grep -q started ~/ws-session || {{ cat ~/ws-session; exit 3; }}; scancel {job}; "
        "SECONDS=0; wait; echo waited=$SECONDS; cat ~/ws-session"
    )
    out = carol.ssh(script, timeout=120)
    waited = int(re.search(r"waited=(\d+)", out).group(1))  # type: ignore[union-attr]
    assert "started" in out and re.search(r"rc=(255|\d+)", out), out
    assert "rc=0" not in out, out
    assert waited < 60, f"the session outlived its job by {waited}s:\n{out}"
    wait_for(f"job {job} gone", lambda: carol.ssh(f"squeue -h -j {job} -o %T").strip() == "", timeout=60)


def test_root_gets_in_with_the_specs_key_only(cluster: DockerCluster) -> None:
    """root's own key, even one in the jail's /root/.ssh/authorized_keys, which every node shows, lets
    nobody in as root on a worker; the key of spec.workerSsh.rootAuthorizedKeys does, into the jail, with no
    job there (pam_slurm_adopt leaves root alone)."""
    node = _worker(cluster, 0)
    r = cluster.ssh(
        "root",
        "mkdir -p -m 700 /root/.ssh && { test -f /root/.ssh/id_ed25519 || ssh-keygen -q -t ed25519 -N '' "
        "-f /root/.ssh/id_ed25519; } && cat /root/.ssh/id_ed25519.pub >> /root/.ssh/authorized_keys; "
        f"{SSH} -i /root/.ssh/id_ed25519 {node} true 2>&1; echo rc=$?",
    )
    try:
        assert "rc=255" in r.out and "Permission denied" in r.out, r.out
        admin_key = shlex.quote(ROOT_KEY[naming.SSH_HOST_KEY])
        out = cluster.ssh(
            "root",
            f"umask 077; printf '%s' {admin_key} > /root/.ssh/id_workers; "
            f"{SSH} -i /root/.ssh/id_workers {node} "
            "'id -un; hostname; test -f /etc/warden-jail-release && echo in-jail'",
        ).out
        assert out.split() == ["root", node, "in-jail"], out
        # root's sessions are not filtered, as root's job steps are not
        filters = cluster.ssh(
            "root", f"{SSH} -i /root/.ssh/id_workers {node} \"grep '^Seccomp_filters:' /proc/self/status\""
        ).out.split()[1]
        assert filters == cluster.exec(node, "grep '^Seccomp_filters:' /proc/1/status").out.split()[1]
    finally:
        cluster.ssh("root", "rm -f /root/.ssh/authorized_keys /root/.ssh/id_ed25519* /root/.ssh/id_workers")


def test_an_admin_gets_in_without_a_job_and_the_list_follows_the_spec(cluster: DockerCluster, dave: JailUser) -> None:
    """erin (spec.workerSsh.admins) logs in to a worker where she runs nothing, in no job's cgroup; dave,
    refused, gets in once an admin adds him to the list: the worker's sshd takes the changed ConfigMap
    without a restart (and refuses him again once he is taken off)."""
    erin = _user(cluster, "erin")
    node = _worker(cluster, 1)
    out = erin.ssh(f"{SSH} {node} 'id -un; cat /proc/self/cgroup'")
    assert out.splitlines()[0] == "erin" and "/job_" not in out, out

    def admins(names: list[str]) -> None:
        spec = parse_spec({**SPEC, "workerSsh": {**SPEC["workerSsh"], "admins": names}})
        files = config.worker_ssh_files(Cluster(cluster.name, cluster.namespace, spec))
        assert cluster.update_configmap(cluster.names.worker_sshd_config, files)

    def dave_gets_in() -> bool:
        return "rc=0" in dave.ssh(f"{SSH} {node} true 2>&1; echo rc=$?", check=False)

    assert not dave_gets_in()
    admins(["erin", "dave"])
    try:
        wait_for("dave, now an admin, gets onto the worker", dave_gets_in, timeout=30)
    finally:
        admins(["erin"])
    wait_for("dave, no admin again, refused", lambda: not dave_gets_in(), timeout=30)
