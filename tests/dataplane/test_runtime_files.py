"""Nothing of the pods' runtime is writable by users inside the jail: an ordinary user walks every mount
of their SSH session and of job steps on a CPU and a GPU worker (tests/support/jailmounts.py) and may
write only the reviewed places (homes, /tmp, /var/tmp, /dev/shm, /dev/mqueue, devices anyone may use).

The termination message file is bound into every container as the kubelet binds it (DockerCluster: a
world-writable file at the container's terminationMessagePath): in the container, never in the jail.
"""

from __future__ import annotations

import pytest

from tests.support import jailmounts
from tests.support.jailuser import JailUser
from warden import naming
from warden_dev.dockercluster import DockerCluster

PROBE = "mountprobe.py"


@pytest.fixture(scope="module")
def probe(alice: JailUser) -> str:
    """The probe, saved in alice's home (the jail: seen by the login node and every worker)."""
    alice.ssh(f"cat > ~/{PROBE}", input=jailmounts.PROBE)
    return jailmounts.probe_command(f"/home/{alice.name}/{PROBE}")


def _walked(out: str) -> jailmounts.Report:
    report = jailmounts.Report.parse(out)
    assert report.user != 0, "the probe ran as root"
    # a real look at the runtime's view: the pod's /dev, /proc and name files, and Slurm's auth socket dir
    assert {"/", "/dev", "/dev/pts", "/proc", "/etc/hosts", "/etc/resolv.conf", naming.SLURM_RUN_DIR} <= (
        report.mount_points()
    ), sorted(report.mount_points())
    return report


def _no_termination_log(report: jailmounts.Report) -> None:
    # absent from the jail's /dev, which users cannot create files in either
    assert report.termination_log == {"open": "No such file or directory", "create": "Permission denied"}


def test_a_users_ssh_session_can_write_no_runtime_file(cluster: DockerCluster, alice: JailUser, probe: str) -> None:
    report = _walked(alice.ssh(probe))
    assert jailmounts.problems(report) == []
    _no_termination_log(report)


@pytest.mark.parametrize("group", ["cpu", "gpu"])
def test_a_users_job_step_can_write_no_runtime_file(
    cluster: DockerCluster, alice: JailUser, probe: str, group: str
) -> None:
    """On a GPU worker too: its driver stage, nvidia-smi and loader cache are binds into the jail."""
    worker = cluster.worker_pods(group)[0]
    report = _walked(alice.ssh(f"srun -p {group} -N1 -w {worker} {probe}"))
    assert {"/tmp", "/dev/shm", naming.SLURMD_SPOOL_DIR} <= report.mount_points()
    if group == "gpu":
        assert {"/usr/lib/warden/driver", "/usr/bin/nvidia-smi", "/etc/ld.so.cache"} <= report.mount_points()
    assert jailmounts.problems(report) == []
    _no_termination_log(report)


def test_the_termination_log_is_in_the_containers_run_as_the_kubelet_binds_it(cluster: DockerCluster) -> None:
    """The file Kubernetes reports a container's end from is there (world-writable, as the kubelet makes
    it) in the login and worker containers, where no user's process runs; the jail has none."""
    for pod in (f"{cluster.names.login}-0", *cluster.worker_pods("cpu")):
        out = cluster.exec(pod, f"stat -c %a {naming.TERMINATION_LOG}; ls /mnt/jail/run /mnt/jail/dev").out
        mode, *listed = out.split()
        assert mode == "666", (pod, out)
        assert "termination-log" not in listed, (pod, out)
