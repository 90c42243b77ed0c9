"""Job isolation with cgroups (proctrack/cgroup, task/cgroup; cgroup v1 on this host): a job step gets
only its GPUs, its cores and its memory, and a job's processes all die with it.

GPUs: no GPU exists here. The GPU worker's /dev/nvidia0 and /dev/nvidia1 are STAND-IN character
devices with NVIDIA's major number and distinct minors (warden_dev.fakedriver.gpu_device): no driver
owns them, so opening one fails with ENXIO where the job's devices cgroup allows it and with EPERM
where it does not, which is exactly what a real driver's device does in a job not given it.
"""

from __future__ import annotations

import re
import shlex
import time
import uuid

import pytest

from tests.support.jailuser import JailUser
from warden_dev.dockercluster import DockerCluster

q = shlex.quote

#: open every GPU device of the step's view and say how it went
OPEN_GPUS = (
    "for d in /dev/nvidia[0-9]*; do "
    'if msg=$( (exec 3<"$d") 2>&1 ); then echo "$d open"; else echo "$d ${msg##*: }"; fi; done'
)
ALLOWED = "No such device or address"  # ENXIO: the cgroup let it through, no driver answered
DENIED = "Operation not permitted"  # EPERM: the devices cgroup refused it


def _devices(out: str) -> dict[str, str]:
    return dict(re.findall(r"^(/dev/nvidia\d+) (.+)$", out, re.M))


def _batch(user: JailUser, flags: str, script: str) -> tuple[str, str]:
    """Run `script` with sbatch -W from the home directory: (job id, its output)."""
    out = user.ssh(f"cd && sbatch {flags} -W --parsable --wrap {q(script)}", check=False)
    job = out.strip().split(";")[0]
    assert job.isdigit(), out
    return job, user.ssh(f"cat ~/slurm-{job}.out")


def _job_field(cluster: DockerCluster, job: str, field: str) -> str:
    out = cluster.exec(cluster.names.controller_pod, f"scontrol show job {job}").out
    m = re.search(rf"\b{field}=(\S+)", out)
    assert m, out
    return m.group(1)


@pytest.mark.parametrize(
    ("flags", "allowed"),
    [("--gpus=1", 1), ("--gres=gpu:fake:2", 2), ("", 0)],
    ids=["one-gpu", "both-gpus", "no-gpu"],
)
def test_a_step_can_open_only_the_gpus_it_was_given(
    cluster: DockerCluster, alice: JailUser, flags: str, allowed: int
) -> None:
    """Both device files are in every step's /dev, but only the job's GPUs open; the stand-in driver
    (which counts the GPUs it may open, as NVML does) reports that many."""
    _, text = _batch(alice, f"-p gpu {flags}", f"{OPEN_GPUS}; nvidia-smi -L | grep -c '^GPU' || true")
    devices = _devices(text)
    assert sorted(devices) == ["/dev/nvidia0", "/dev/nvidia1"], text
    assert sorted(devices.values()).count(ALLOWED) == allowed, text
    assert sorted(devices.values()).count(DENIED) == 2 - allowed, text
    assert text.strip().splitlines()[-1] == str(allowed), text


def test_a_step_past_its_memory_is_killed_and_nothing_else(cluster: DockerCluster, alice: JailUser) -> None:
    """A step that holds 400 MiB with --mem=100M is killed (OUT_OF_MEMORY); a job on the same node at
    the same time finishes, and the node stays up and takes the next job."""
    first = cluster.worker_pods("cpu")[0]
    token = uuid.uuid4().hex[:8]
    # a neighbour on the same node, running through the whole episode
    neighbour = alice.ssh(
        f"cd && sbatch -p cpu -w {first} -c1 --mem=100M --parsable --wrap "
        + q(f"sleep 15; echo neighbour-{token} done")
    ).strip()
    hog = "python3 -c 'import time; b = bytearray(400 << 20); b[::4096] = b\"x\" * len(b[::4096]); time.sleep(5)'"
    job, text = _batch(alice, f"-p cpu -w {first} -c1 --mem=100M", f"{hog} && echo hog-survived")
    assert "hog-survived" not in text, text
    assert _job_field(cluster, job, "JobState") == "OUT_OF_MEMORY", text
    # the neighbour and slurmd are unharmed
    deadline = time.monotonic() + 60
    while _job_field(cluster, neighbour, "JobState") in ("PENDING", "RUNNING", "COMPLETING"):
        assert time.monotonic() < deadline, "the neighbour job did not end"
        time.sleep(1)
    assert _job_field(cluster, neighbour, "JobState") == "COMPLETED"
    assert alice.ssh(f"cat ~/slurm-{neighbour}.out").strip() == f"neighbour-{token} done"
    assert alice.ssh(f"srun -p cpu -w {first} --mem=100M hostname").strip() == first


def test_memory_within_the_limit_runs(cluster: DockerCluster, alice: JailUser) -> None:
    """The same program with room for it completes: the limit is --mem, not something smaller."""
    hog = 'python3 -c \'b = bytearray(200 << 20); b[::4096] = b"x" * len(b[::4096]); print("ok")\''
    _, text = _batch(alice, "-p cpu -c1 --mem=400M", hog)
    assert text.strip() == "ok", text


def test_a_step_gets_only_its_cores(cluster: DockerCluster, alice: JailUser) -> None:
    """-c1 sees one CPU, -c2 both of the node's (the workers have 2)."""
    assert alice.ssh("srun -p cpu -N1 -c1 --mem=50M nproc").strip() == "1"
    assert alice.ssh("srun -p cpu -N1 -c2 --mem=50M nproc").strip() == "2"


def test_a_jobs_leftover_processes_die_with_it(cluster: DockerCluster, alice: JailUser) -> None:
    """A batch job starts a daemon that leaves its session (setsid, reparented away from the step) and
    ends; the daemon dies with the job instead of running on in the worker."""
    node = cluster.worker_pods("cpu")[1]
    marker = f"{4000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 1000}"  # a sleep nobody else runs
    _, text = _batch(
        alice, f"-p cpu -w {node} --mem=50M", f"setsid -f sleep {marker}; sleep 1; pgrep -fc 'sleep {marker}'"
    )
    assert text.strip() == "1", f"the daemon did not start: {text}"
    deadline = time.monotonic() + 30
    while True:
        sleeps = cluster.exec(node, "ps -C sleep -o args= || true").out.splitlines()
        left = [a for a in sleeps if a == f"sleep {marker}"]
        if not left:
            break
        assert time.monotonic() < deadline, f"processes of the ended job still run on {node}: {left}"
        time.sleep(1)


def test_node_local_directories_are_sticky_so_users_keep_their_files(cluster: DockerCluster, alice: JailUser) -> None:
    """/tmp and /dev/shm in job steps are the job's own tmpfs (localMounts perJob, tests/dataplane/
    test_job_space.py), sticky as /tmp always is; nothing the node's container has in its /tmp is there."""
    node = cluster.worker_pods("cpu")[0]
    assert alice.ssh(f"srun -p cpu -w {node} --mem=50M stat -c '%a %n' /tmp /dev/shm").split("\n")[:2] == [
        "1777 /tmp",
        "1777 /dev/shm",
    ]
    cluster.exec(node, "echo root > /tmp/warden-sticky && chmod 0666 /tmp/warden-sticky")
    out = alice.ssh(f"srun -p cpu -w {node} --mem=50M sh -c 'cat /tmp/warden-sticky 2>&1'", check=False)
    assert "No such file or directory" in out, out
    cluster.exec(node, "rm -f /tmp/warden-sticky")
