"""dcgm-exporter's GPU job mapping (spec.metrics.dcgmJobMapping, on in the session cluster): slurmd's
Prolog and Epilog on the GPU worker keep, in the node's mapping directory (a hostPath, here a Docker
volume), one file per GPU index naming the jobs running on that GPU. While a GPU job runs, the files
of exactly its GPUs (as Slurm allocated them) hold its ID; once it ended, the ID is gone.

The jobs wait for a stop file in alice's home, so each test decides when its jobs end normally.
"""

from __future__ import annotations

import re
import shlex
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.dataplane.spec import SPEC
from tests.support.jailuser import JailUser
from warden import naming
from warden.model import parse_spec
from warden_dev.dockercluster import DockerCluster, wait_for

q = shlex.quote
HOST_PATH = parse_spec(SPEC).metrics.dcgm_job_mapping.host_path
#: every `<index>` file of the mapping directory as `<index>:<job>,<job>...`
LIST = (
    f'cd {naming.DCGM_JOB_MAPPING_DIR} && for f in [0-9]*; do [ -f "$f" ] && echo "$f:$(paste -sd, "$f")"; done; true'
)


def mapping(cluster: DockerCluster) -> dict[str, list[str]]:
    """GPU index -> job IDs, as the GPU worker's prolog and epilog left them (in the worker container)."""
    (worker,) = cluster.worker_pods("gpu")
    out = cluster.exec(worker, LIST).out
    return {gpu: jobs.split(",") for gpu, jobs in (line.split(":", 1) for line in out.splitlines())}


def gpus_of(cluster: DockerCluster, job: str) -> set[str]:
    """The GPU indices Slurm allocated to the job (`scontrol -d show job`: GRES=gpu:fake:2(IDX:0-1))."""
    out = cluster.exec(cluster.names.controller_pod, f"scontrol -d show job {job}").out
    m = re.search(r"\bGRES=gpu:fake:\d+\(IDX:([0-9,-]+)\)", out)
    assert m, out
    found: set[str] = set()
    for part in m.group(1).split(","):
        first, _, last = part.partition("-")
        found |= {str(i) for i in range(int(first), int(last or first) + 1)}
    return found


def jobs_on(cluster: DockerCluster) -> dict[str, set[str]]:
    """job ID -> the GPUs whose file names it."""
    out: dict[str, set[str]] = {}
    for gpu, jobs in mapping(cluster).items():
        for job in jobs:
            out.setdefault(job, set()).add(gpu)
    return out


@contextmanager
def gpu_job(cluster: DockerCluster, user: JailUser, flag: str) -> Iterator[tuple[str, str]]:
    """A batch job on the GPU partition that runs until its stop file exists: (job ID, stop command)."""
    stop = f"~/stop-{uuid.uuid4().hex[:8]}"
    wrap = f"while [ ! -e {stop} ]; do sleep 0.2; done"
    job = user.ssh(f"cd && sbatch -p gpu {flag} --parsable --wrap {q(wrap)}").strip().split(";")[0]
    assert job.isdigit(), job
    try:
        wait_for(f"job {job} running", lambda: user.ssh(f"squeue -h -j {job} -o %T").strip() == "RUNNING", 60)
        yield job, f"touch {stop}"
    finally:
        user.ssh(f"touch {stop}")
        wait_for(f"job {job} to end", lambda: user.ssh(f"squeue -h -j {job} -o %T").strip() == "", 60)


@pytest.mark.parametrize(("flag", "want"), [("--gres=gpu:1", 1), ("--gres=gpu:2", 2)])
def test_a_running_gpu_job_is_in_the_files_of_its_gpus(
    cluster: DockerCluster, alice: JailUser, flag: str, want: int
) -> None:
    with gpu_job(cluster, alice, flag) as (job, _):
        gpus = gpus_of(cluster, job)
        assert len(gpus) == want
        wait_for(f"job {job} in the mapping", lambda: job in jobs_on(cluster), 30)
        assert jobs_on(cluster)[job] == gpus, mapping(cluster)
    wait_for(f"job {job} out of the mapping", lambda: job not in jobs_on(cluster), 30)
    assert mapping(cluster) == {}, "a GPU without jobs has no file"


def test_the_epilog_of_one_job_leaves_the_others(cluster: DockerCluster, alice: JailUser) -> None:
    """Two one-GPU jobs at once (prologs of both run together): each is in its own GPU's file; the
    first one ending takes itself out and leaves the second in."""
    with (
        gpu_job(cluster, alice, "--gres=gpu:1") as (first, stop_first),
        gpu_job(cluster, alice, "--gres=gpu:1") as (second, _),
    ):
        wait_for("both jobs in the mapping", lambda: {first, second} <= set(jobs_on(cluster)), 30)
        assert jobs_on(cluster) == {first: gpus_of(cluster, first), second: gpus_of(cluster, second)}
        alice.ssh(stop_first)
        wait_for(f"job {first} out of the mapping", lambda: first not in jobs_on(cluster), 60)
        assert jobs_on(cluster) == {second: gpus_of(cluster, second)}
    wait_for("no job in the mapping", lambda: mapping(cluster) == {}, 30)


def test_the_files_are_the_nodes_and_readable_by_dcgm_exporter(cluster: DockerCluster, alice: JailUser) -> None:
    """What dcgm-exporter (a DaemonSet mounting the same hostPath) reads: the node's directory, 0755,
    holding `<index>` files of mode 0644, one job ID a line; CPU workers have no such directory."""
    with gpu_job(cluster, alice, "--gres=gpu:1") as (job, _):
        (gpu,) = gpus_of(cluster, job)
        wait_for(f"job {job} in the mapping", lambda: job in jobs_on(cluster), 30)
        host = cluster.volume_sh(cluster.host_volume(HOST_PATH), f"stat -c '%a %n' /v /v/{gpu}; cat /v/{gpu}").out
        assert host.splitlines() == ["755 /v", f"644 /v/{gpu}", job], host
    for worker in cluster.worker_pods("cpu"):
        assert not cluster.exec(worker, f"test -e {naming.DCGM_JOB_MAPPING_DIR}", check=False).ok, worker


def test_the_prolog_and_epilog_are_slurmds(cluster: DockerCluster) -> None:
    """slurmd runs the operator's Prolog and Epilog, and takes each job's prolog at allocation."""
    out = cluster.exec(cluster.names.controller_pod, "scontrol show config").out
    # Slurm 24.11 lists them as Prolog[0], Epilog[0] (a key may name several programs)
    assert re.search(rf"^Prolog(\[0\])?\s*=\s*{naming.PROLOG_PROGRAM}\s*$", out, re.M), out
    assert re.search(rf"^Epilog(\[0\])?\s*=\s*{naming.EPILOG_PROGRAM}\s*$", out, re.M), out
    assert re.search(r"^PrologFlags\s*=\s*Alloc\s*$", out, re.M), out
