"""The node's own NVIDIA driver in every GPU job step (issue: GPUs for real, item 1).

No GPU and no NVIDIA driver exist here: each GPU pod gets fake device files and a STAND-IN driver
(hack/fakedriver: C libraries answering cuInit/cuDriverGetVersion/cuDeviceGetCount and NVML, and an
nvidia-smi that loads libnvidia-ml.so.1 through the dynamic loader), placed where GPU runtimes put
the real one. Three GPU workers: driver 550.54.15 laid out as GKE does (/usr/local/nvidia), driver
580.159.04 laid out as NVIDIA's container toolkit does (versioned files in /usr/lib/x86_64-linux-gnu,
nvidia-smi in /usr/bin, no soname links), and one given no driver at all; plus a CPU worker. Device
files are numbered as on one host (the second GPU pod holds /dev/nvidia2 and /dev/nvidia3).
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.dockerfixture import running_for_tests
from tests.support.eventually import eventually
from warden_dev.dockercluster import DockerCluster, docker, wait_for
from warden_dev.fakedriver import FakeDriver, build_all

#: What a CUDA program does first, through ctypes in the jail's own python3: load libcuda.so.1 by
#: soname (no LD_LIBRARY_PATH), ask it, and say which file the loader mapped.
PROBE = r"""
import ctypes, os
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    print("no-libcuda", e)
    raise SystemExit(0)
version, count = ctypes.c_int(), ctypes.c_int()
init = cuda.cuInit(0)
cuda.cuDriverGetVersion(ctypes.byref(version))
cuda.cuDeviceGetCount(ctypes.byref(count))
name = (ctypes.c_char * 40).in_dll(cuda, "warden_fake_driver_version").value.decode()
path = next(l.split()[-1] for l in open("/proc/self/maps") if "libcuda.so" in l)
ld_path = os.environ.get("LD_LIBRARY_PATH", "-")
print("libcuda", os.uname().nodename, name, version.value, count.value, init, path, ld_path)
"""

SPEC: dict[str, Any] = {
    "login": {"replicas": 0},
    "workerGroups": [
        {"name": "gpu", "replicas": 3, "gpus": {"count": 2, "type": "fake"}},
        {"name": "cpu", "replicas": 1},
    ],
    "partitions": [
        {"name": "gpu", "workerGroups": ["gpu"], "default": True},
        {"name": "cpu", "workerGroups": ["cpu"]},
    ],
    "accounting": {"mode": "Disabled"},
    "healthChecks": {"quick": {"enabled": True, "intervalSeconds": 10}},
}

q = shlex.quote


@pytest.fixture(scope="module")
def drivers() -> list[FakeDriver]:
    return build_all()


@pytest.fixture(scope="module")
def dc(request: pytest.FixtureRequest, drivers: list[FakeDriver]) -> Iterator[DockerCluster]:
    failed_before = request.session.testsfailed
    failed = lambda: request.session.testsfailed > failed_before  # noqa: E731
    cluster = DockerCluster(SPEC, name="drv", drivers=[drivers[0], drivers[1], None])
    with running_for_tests(cluster, "driver cluster", failed) as c:
        yield c


def srun(dc: DockerCluster, nodes: str, command: str, partition: str = "gpu", gpus_per_node: int = 2) -> str:
    """A step on `nodes`; in the GPU partition it asks for `gpus_per_node` GPUs of each node (by default
    all: a step without GPUs cannot open any, its devices cgroup denies them; see test_isolation.py)."""
    gpus = f" --gpus-per-node={gpus_per_node}" if partition == "gpu" else ""
    nodes_flag = f"-w {nodes} -N{len(nodes.split(','))}"
    return dc.exec(dc.names.controller_pod, f"srun -p {partition} {nodes_flag}{gpus} {command}").out


def probe(dc: DockerCluster, nodes: str, partition: str = "gpu") -> dict[str, list[str]]:
    out = srun(dc, nodes, f"python3 -c {q(PROBE)}", partition)
    return {line.split()[1]: line.split() for line in out.splitlines() if line.startswith("libcuda ")}


def test_each_gpu_step_loads_its_own_nodes_driver_at_the_same_time(dc: DockerCluster) -> None:
    gpu0, gpu1, _ = dc.worker_pods("gpu")
    driver0, driver1 = dc.pod_drivers[gpu0], dc.pod_drivers[gpu1]
    assert driver0 is not None and driver1 is not None and driver0.version != driver1.version
    # one job step on both nodes at once, from one jail
    seen = probe(dc, f"{gpu0},{gpu1}")
    for node, driver in ((gpu0, driver0), (gpu1, driver1)):
        _, _, version, cuda, count, init, path, ld_path = seen[node]
        assert version == driver.version, seen
        assert int(cuda) == driver.cuda_version and int(count) == 2 and int(init) == 0, seen
        # found by the loader in the node's view of the jail, with nothing set by the user
        assert path == f"/usr/lib/warden/driver/lib/libcuda.so.{driver.version}", seen
        assert ld_path == "-", seen


def test_each_gpu_step_runs_its_own_nodes_nvidia_smi(dc: DockerCluster) -> None:
    gpu0, gpu1, _ = dc.worker_pods("gpu")
    for node in (gpu0, gpu1):
        driver = dc.pod_drivers[node]
        assert driver is not None
        out = srun(dc, node, "sh -c 'command -v nvidia-smi; nvidia-smi; nvidia-smi -L; cat /etc/warden-jail-release'")
        assert out.splitlines()[0] == "/usr/bin/nvidia-smi", out
        assert f"Driver Version: {driver.version}" in out, out
        assert "NVML: /usr/lib/warden/driver/lib/libnvidia-ml.so.1" in out, out
        assert out.count("GPU-warden-fake") == 2, out
        assert "WARDEN_JAIL_VERSION" in out, "the step ran in the jail"
        # the node's own helper libraries too (libnvidia-*), and the version for people to read
        listing = srun(dc, node, "sh -c 'ls /usr/lib/warden/driver/lib; cat /usr/lib/warden/driver/version'")
        assert f"libnvidia-ptxjitcompiler.so.{driver.version}" in listing.split(), listing
        assert listing.split()[-1] == driver.version, listing


def test_cpu_step_sees_no_driver(dc: DockerCluster) -> None:
    (cpu,) = dc.worker_pods("cpu")
    look = "ls -A /usr/lib/warden/driver | wc -l; nvidia-smi; echo rc=$?"
    step = f"srun -p cpu -w {cpu}"
    out = dc.exec(dc.names.controller_pod, f"{step} python3 -c {q(PROBE)}; {step} sh -c {q(look)} 2>&1").out
    assert "no-libcuda libcuda.so.1: cannot open shared object file" in out, out
    assert "nvidia-smi: no NVIDIA driver on" in out and "rc=9" in out, out
    lines = [line for line in out.splitlines() if not line.startswith("srun:")]  # "job queued" and such
    assert lines[1].strip() == "0", out


def test_gres_follows_the_device_files_each_pod_got(dc: DockerCluster) -> None:
    """Device plugins keep the host's numbers: the second GPU pod holds /dev/nvidia2 and /dev/nvidia3.
    Its slurmd describes exactly those (its own gres.conf line), and a `--gpus=1` step gets one of
    them, numbered for CUDA among the pod's own GPUs."""
    gpu1 = dc.worker_pods("gpu")[1]
    line = dc.exec(gpu1, "grep ^NodeName= /etc/slurm/gres.conf").out.strip()
    assert line == f"NodeName={gpu1} Name=gpu Type=fake File=/dev/nvidia2,/dev/nvidia3", line
    script = "echo CVD=$CUDA_VISIBLE_DEVICES; ls /dev | grep -E '^nvidia[0-9]+$'"
    out = srun(dc, gpu1, f"sh -c {q(script)}", gpus_per_node=1).split()
    assert out[0] in ("CVD=0", "CVD=1") and out[1:] == ["nvidia2", "nvidia3"], out
    detail = dc.exec(dc.names.controller_pod, f"scontrol show node {gpu1}").out
    assert "Gres=gpu:fake:2" in detail, detail


def test_gpu_worker_without_a_driver_takes_no_jobs_and_says_why(dc: DockerCluster) -> None:
    *_, bare = dc.worker_pods("gpu")
    assert dc.pod_drivers[bare] is None
    # the worker drains it once registered with its GPUs; slurmd's quick check, run at slurmd's start, may
    # have drained it first with its own reason for the same cause (the worker's replaces it)
    want = "warden-worker: no NVIDIA driver (libcuda.so.1, libnvidia-ml.so.1, nvidia-smi missing)"
    eventually(f"{bare} drained by the worker, with its reason",
               lambda: dc.exec(dc.names.controller_pod, "sinfo -R -h -N -o '%N|%100E'").out,
               lambda out: f"{bare}|{want}" in [line.strip() for line in out.splitlines()], timeout=60)  # fmt: skip
    assert dc.exec(dc.names.controller_pod, f"sinfo -h -N -n {bare} -o %t").out.strip() == "drain"
    # the quick check says the same, and leaves the drain it did not make alone
    check = dc.exec(bare, "warden-quickcheck --dry-run", check=False)
    assert check.rc == 1 and "no NVIDIA driver (libcuda.so.1, libnvidia-ml.so.1, nvidia-smi missing)" in check.out


def test_quick_check_passes_on_gpu_nodes_with_their_driver(dc: DockerCluster) -> None:
    gpu0, gpu1, _ = dc.worker_pods("gpu")
    for node in (gpu0, gpu1):
        r = dc.exec(node, "warden-quickcheck --dry-run", check=False)
        assert r.rc == 0 and "healthy" in r.out, r
    # slurmd runs it every 10 s (tests/dataplane/test_health.py shows it draining): after two rounds
    # both nodes still take jobs
    states = dc.exec(dc.names.controller_pod, f"sleep 21; sinfo -h -N -n {gpu0},{gpu1} -o %t").out.split()
    assert states == ["idle", "idle"], states


def test_the_jail_volume_gains_no_file(dc: DockerCluster) -> None:
    # everything on the shared volume is older than the populate Job's sentinel, written last (its
    # rename into place touched the jail's root directory)
    look = "cd /v && find . -xdev -newer .warden-populated ! -path . | sort"
    newer = dc.volume_sh(dc.jail_volume, look).out.split()
    assert newer == [], newer
    look = "cd /v && find . -xdev \\( -name 'libcuda*' -o -name 'libnvidia-*' \\) -print; ls -A usr/lib/warden/driver"
    driver_files = dc.volume_sh(dc.jail_volume, look).out.split()
    assert driver_files == [], driver_files


def test_loader_cache_follows_the_jails_own_changes(dc: DockerCluster, tmp_path: Path) -> None:
    """Root installs a library into the jail from a node without a driver (as apt does: ldconfig
    replaces /etc/ld.so.cache by rename): the jail's new library and the node's driver are both found."""
    (cpu,) = dc.worker_pods("cpu")
    gpu0 = dc.worker_pods("gpu")[0]
    lib = tmp_path / "libwardentest.so.7"
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libwardentest.so.7", "-o", str(lib), "-x", "c", "/dev/null"],
                   check=True)  # fmt: skip
    docker("cp", str(lib), f"{dc.container(cpu)}:/mnt/jail/usr/local/lib/libwardentest.so.7")
    dc.exec(cpu, "chroot /mnt/jail ldconfig")
    found = "import ctypes; ctypes.CDLL('libwardentest.so.7'); ctypes.CDLL('libcuda.so.1'); print('both')"

    def both() -> bool:
        r = dc.exec(dc.names.controller_pod, f"srun -p gpu -w {gpu0} python3 -c {q(found)}", check=False)
        return r.out.strip() == "both"

    wait_for("the GPU node's loader cache to include the jail's new library", both, 60, interval=2)
    assert "loader cache changed; built it again" in dc.logs(gpu0, tail=200)
    assert probe(dc, gpu0)[gpu0][2] == dc.pod_drivers[gpu0].version  # type: ignore[union-attr]
