"""A job's /tmp and /dev/shm are its own (localMounts with perJob, the default): one tmpfs of the job's
memory on the node less 64 MiB (kept for its slurmstepd), shared by every step and task of the job there,
charged to the job (filling it fails that job, nobody else's) and gone with all it held when the job ends.
A user's step stops at maxUserProcesses processes and threads (RLIMIT_NPROC; 1024 on group `plain` here,
tests/dataplane/spec.py).

Before: /tmp and /dev/shm were the worker pod's emptyDirs, shared by every job on the node (df showed the
node's disk and memory) and kept whatever a job left there; a step could start processes without bound.
"""

from __future__ import annotations

import re
import shlex
import uuid

import pytest

from tests.support.eventually import eventually
from tests.support.jailuser import JailUser
from warden_dev.dockercluster import DockerCluster

q = shlex.quote
MIB = 1 << 20


@pytest.fixture(scope="module")
def erin(cluster: DockerCluster) -> JailUser:
    """Another user, for "nobody else's"."""
    return JailUser.added_by_root(cluster, "erin")


def _state(cluster: DockerCluster, job: str) -> str:
    out = cluster.exec(cluster.names.controller_pod, f"scontrol show job {job}").out
    m = re.search(r"\bJobState=(\S+)", out)
    assert m, out
    return m.group(1)


def _batch(user: JailUser, flags: str, script: str, wait: bool = True) -> str:
    """sbatch from the home directory (-W unless `wait` is False): the job id."""
    out = user.ssh(f"cd && sbatch {flags} {'-W ' if wait else ''}--parsable --wrap {q(script)}", check=False)
    job = out.strip().split(";")[0]
    assert job.isdigit(), out
    return job


def _gone_from_the_worker(cluster: DockerCluster, worker: str, job: str) -> None:
    """The job's tmpfs are unmounted and their directory removed (the epilog runs after the job ends)."""
    eventually(
        f"job {job}'s space gone from {worker}",
        lambda: (
            cluster.exec(
                worker,
                f"grep -c ' /run/warden/jobs/{job} ' /proc/self/mounts; ls -d /run/warden/jobs/{job} 2>&1",
                check=False,
            ).out
        ),
        lambda out: out.split()[0] == "0" and "No such file" in out,
        timeout=60,
    )


def test_tmp_and_shm_are_the_jobs_own_and_as_large_as_its_memory(cluster: DockerCluster, alice: JailUser) -> None:
    """--mem=200M: one tmpfs of 136 MiB holds both."""
    out = alice.ssh(
        "srun -p cpu -N1 --mem=200M sh -c "
        + q("df -B1 --output=fstype,size /tmp /dev/shm | tail -n 2; stat -c %a /tmp /dev/shm")
    )
    lines = out.split()
    assert lines == ["tmpfs", str(136 * MIB), "tmpfs", str(136 * MIB), "1777", "1777"], out


def test_what_a_job_leaves_in_tmp_and_shm_is_gone_for_the_next_job(cluster: DockerCluster, alice: JailUser) -> None:
    """64 MiB in each, left behind by one job: the next job on the node sees neither file, and the worker
    no longer holds the first job's tmpfs."""
    first = cluster.worker_pods("cpu")[0]
    token = uuid.uuid4().hex[:8]
    fill = f"head -c 64M /dev/zero > /tmp/left-{token} && head -c 64M /dev/zero > /dev/shm/left-{token} && "
    fill += f"du -sm /tmp/left-{token} /dev/shm/left-{token} && echo job=$SLURM_JOB_ID"
    out = alice.ssh(f"srun -p cpu -w {first} --mem=300M sh -c {q(fill)}")
    assert re.findall(r"^(64)\s", out, re.M) == ["64", "64"], out
    job = re.findall(r"^job=(\d+)$", out, re.M)[0]
    _gone_from_the_worker(cluster, first, job)
    after = alice.ssh(
        f"srun -p cpu -w {first} --mem=100M sh -c {q(f'ls /tmp/left-{token} /dev/shm/left-{token} 2>&1; true')}"
    )
    assert after.count("No such file or directory") == 2, after


def test_every_step_and_task_of_a_job_on_a_node_sees_the_same_tmp(cluster: DockerCluster, alice: JailUser) -> None:
    """Two tasks of one step write a file each, on the job's tmpfs; a later step of the job reads both, and
    so does the batch script."""
    first = cluster.worker_pods("cpu")[0]
    token = uuid.uuid4().hex[:8]
    script = (
        f"srun -n2 sh -c 'echo {token}-$SLURM_PROCID > /tmp/from-$SLURM_PROCID; "
        'grep -c "^warden-job-$SLURM_JOB_ID /tmp tmpfs " /proc/self/mounts\' && '
        "srun -n1 cat /tmp/from-0 /tmp/from-1 && cat /dev/null /tmp/from-1"
    )
    job = _batch(alice, f"-p cpu -w {first} -N1 -n2 --mem=200M", script)
    text = alice.ssh(f"cat ~/slurm-{job}.out")
    assert text.split() == ["1", "1", f"{token}-0", f"{token}-1", f"{token}-1"], text


def test_a_batch_job_may_write_its_output_to_tmp(cluster: DockerCluster, alice: JailUser) -> None:
    """slurmstepd opens --output in the job's view, so the script finds it in its own /tmp."""
    token = uuid.uuid4().hex[:8]
    script = f"echo out-{token}; cat /tmp/out-$SLURM_JOB_ID.txt > ~/copy-{token}"
    job = _batch(alice, "-p cpu --mem=100M --output=/tmp/out-%j.txt", script)
    assert _state(cluster, job) == "COMPLETED"
    assert alice.ssh(f"cat ~/copy-{token}").strip() == f"out-{token}"


def test_a_job_that_fills_its_space_fails_and_nobody_else(
    cluster: DockerCluster, alice: JailUser, erin: JailUser
) -> None:
    """alice writes 400 MiB into /dev/shm with --mem=150M: her job fails, with no space left after 86 MiB.
    erin's job on the same node, running all along, completes; the node takes the next job."""
    first = cluster.worker_pods("cpu")[0]
    token = uuid.uuid4().hex[:8]
    neighbour = _batch(
        erin, f"-p cpu -w {first} -c1 --mem=100M", f"sleep 15; echo {token} > /tmp/n; cat /tmp/n", wait=False
    )
    eventually("erin's job runs", lambda: _state(cluster, neighbour), lambda s: s == "RUNNING", timeout=60)
    job = _batch(
        alice, f"-p cpu -w {first} -c1 --mem=150M", "head -c 400M /dev/zero > /dev/shm/fill && echo fill-survived"
    )
    text = alice.ssh(f"cat ~/slurm-{job}.out")
    assert "fill-survived" not in text and "No space left on device" in text, text
    assert _state(cluster, job) == "FAILED", text
    eventually("erin's job ends", lambda: _state(cluster, neighbour), lambda s: s not in ("RUNNING", "COMPLETING"), 60)
    assert _state(cluster, neighbour) == "COMPLETED"
    assert erin.ssh(f"cat ~/slurm-{neighbour}.out").strip() == token
    assert alice.ssh(f"srun -p cpu -w {first} --mem=100M hostname").strip() == first


#: start threads (they count as processes) until the limit, then try to fork; report; hold them until
#: the test says so
HOG = """
import errno, os, threading, time
threading.stack_size(65536)
stop = threading.Event()
n = 0
try:
    while n < LIMIT:
        threading.Thread(target=stop.wait, daemon=True).start()
        n += 1
except RuntimeError:
    pass
try:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    print("fork-ok", n, flush=True)
except OSError as e:
    print("fork-failed", errno.errorcode.get(e.errno), n, flush=True)
deadline = time.monotonic() + 120
while not os.path.exists(os.path.expanduser("~/release-TOKEN")) and time.monotonic() < deadline:
    time.sleep(0.5)
stop.set()
"""


def test_a_step_past_the_process_limit_fails_with_eagain_and_others_go_on(
    cluster: DockerCluster, alice: JailUser, erin: JailUser
) -> None:
    """On group `plain` (maxUserProcesses 1024) alice's step starts threads until it can start no more,
    then fork fails with EAGAIN; while her step holds them, erin's step on the same node starts 200
    processes."""
    (node,) = cluster.worker_pods("plain")
    token = uuid.uuid4().hex[:8]
    alice.ssh(f"cat > ~/hog-{token}.py", input=HOG.replace("TOKEN", token).replace("LIMIT", "4000"))
    job = _batch(alice, "-p plain -c1 --mem=300M", f"python3 ~/hog-{token}.py", wait=False)
    try:
        out = eventually(
            "alice's step reports",
            lambda: alice.ssh(f"cat ~/slurm-{job}.out 2>/dev/null; true"),
            lambda o: "fork-" in o,
            timeout=90,
        )
        m = re.search(r"fork-failed EAGAIN (\d+)", out)
        assert m, out
        assert 0 < int(m.group(1)) < 1024, out  # the limit, less what alice already runs on the machine
        many = "for i in $(seq 200); do sleep 5 & done; wait; echo erin-done"
        assert erin.ssh(f"srun -p plain -w {node} --mem=100M sh -c {q(many)}").strip() == "erin-done"
    finally:
        alice.ssh(f"touch ~/release-{token}")
    eventually("alice's job ends", lambda: _state(cluster, job), lambda s: s not in ("RUNNING", "COMPLETING"), 150)


def test_a_step_under_the_default_limit_starts_3000_threads(cluster: DockerCluster, alice: JailUser) -> None:
    """On group `cpu` (maxUserProcesses at its default, 8192) a step starts 3,000 threads and still forks."""
    token = uuid.uuid4().hex[:8]
    alice.ssh(
        f"cat > ~/many-{token}.py && touch ~/release-{token}",
        input=HOG.replace("TOKEN", token).replace("LIMIT", "3000"),
    )
    out = alice.ssh(f"srun -p cpu -N1 --mem=300M python3 ~/many-{token}.py")
    assert out.split() == ["fork-ok", "3000"], out
