"""dcgm-exporter's GPU job mapping (spec.metrics.dcgmJobMapping).

Rendered: GPU workers mount the node's mapping directory (a hostPath) and slurm.conf names the
operator's Prolog and Epilog, only when the mapping is on. Run: the worker image's script itself
(images/worker/warden-job-mapping, as slurmd runs it: under the names warden-prolog and warden-epilog,
with only Slurm's variables in its environment) against a temporary directory, checked against the
format dcgm-exporter reads: one file per GPU index, named by the index, one job ID a line.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.examples import EXAMPLES, load
from tests.support.slurmconf import parse
from warden import naming
from warden.model import parse_spec
from warden.render import config, nodes
from warden.render.context import Cluster

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "images" / "worker" / "warden-job-mapping"
DOCKERFILE = REPO / "images" / "worker" / "Dockerfile"


# --- rendered -----------------------------------------------------------------------------------


def cluster(mapping: Mapping[str, Any] | None) -> Cluster:
    spec: dict[str, Any] = {
        "workerGroups": [
            {"name": "cpu", "replicas": 2},
            {"name": "gpu", "replicas": 2, "gpus": {"count": 4, "type": "h100"}},
        ],
    }
    if mapping is not None:
        spec["metrics"] = {"dcgmJobMapping": dict(mapping)}
    return Cluster(name="c", namespace="ns", spec=parse_spec(spec))


def worker_pod(c: Cluster, group: str) -> dict[str, Any]:
    (g,) = [g for g in c.spec.worker_groups if g.name == group]
    pod: dict[str, Any] = nodes.worker_set(c, g)["spec"]["template"]["spec"]
    return pod


def host_paths(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [v for v in pod["volumes"] if "hostPath" in v]


def mounts(pod: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [m for m in mounts_all(pod) if m["name"] == name]


def mounts_all(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for c in pod["containers"] for m in c["volumeMounts"]]


@pytest.mark.parametrize("host_path", [None, "/run/dcgm/jobs"])
def test_gpu_workers_mount_the_nodes_mapping_directory_when_on(host_path: str | None) -> None:
    mapping: dict[str, Any] = {"enabled": True}
    if host_path:
        mapping["hostPath"] = host_path
    pod = worker_pod(cluster(mapping), "gpu")
    want = host_path or "/var/lib/dcgm-exporter/job-mapping"
    (volume,) = host_paths(pod)
    assert volume["hostPath"] == {"path": want, "type": "DirectoryOrCreate"}
    (m,) = mounts(pod, volume["name"])
    assert m == {"name": volume["name"], "mountPath": naming.DCGM_JOB_MAPPING_DIR}
    # slurmd's container only (where slurmd runs its prolog and epilog as root), read-write
    assert [c["name"] for c in pod["containers"] if m in c["volumeMounts"]] == ["slurmd"]
    assert all(m not in c.get("volumeMounts", []) for c in pod["initContainers"])


def test_cpu_workers_never_mount_it() -> None:
    assert host_paths(worker_pod(cluster({"enabled": True}), "cpu")) == []


@pytest.mark.parametrize("mapping", [None, {"enabled": False}, {"enabled": False, "hostPath": "/x"}])
def test_off_no_worker_mounts_a_host_directory(mapping: Mapping[str, Any] | None) -> None:
    c = cluster(mapping)
    for group in ("cpu", "gpu"):
        pod = worker_pod(c, group)
        assert host_paths(pod) == [], group
        assert not any(m["mountPath"] == naming.DCGM_JOB_MAPPING_DIR for m in mounts_all(pod)), group


def test_slurm_conf_names_the_prolog_and_epilog_when_on() -> None:
    conf = parse(config.slurm_conf(cluster({"enabled": True})))
    assert conf.get("Prolog") == naming.PROLOG_PROGRAM
    assert conf.get("Epilog") == naming.EPILOG_PROGRAM
    # the prolog runs when the job is allocated, not at its first step on the node
    assert conf.get("PrologFlags") == "Alloc"


@pytest.mark.parametrize("mapping", [None, {"enabled": False}])
def test_slurm_conf_has_no_prolog_or_epilog_when_off(mapping: Mapping[str, Any] | None) -> None:
    conf = parse(config.slurm_conf(cluster(mapping)))
    assert (conf.get("Prolog"), conf.get("Epilog"), conf.get("PrologFlags")) == (None, None, None)


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_examples_leave_it_off(example: str) -> None:
    c = load(example)
    assert not c.spec.metrics.dcgm_job_mapping.enabled
    assert parse(config.slurm_conf(c)).get("Prolog") is None


def test_the_image_installs_the_programs_slurm_conf_names() -> None:
    """slurm.conf's paths are the worker image's, and the script's default directory is the mount's."""
    dockerfile = DOCKERFILE.read_text()
    assert "COPY images/worker/warden-job-mapping /usr/lib/warden/warden-job-mapping" in dockerfile
    for program in (naming.PROLOG_PROGRAM, naming.EPILOG_PROGRAM):
        assert f"ln -s warden-job-mapping {program}" in dockerfile, program
    assert f'dir="${{WARDEN_DCGM_JOB_MAPPING_DIR:-{naming.DCGM_JOB_MAPPING_DIR}}}"' in SCRIPT.read_text()
    assert os.access(SCRIPT, os.X_OK)


# --- the script ---------------------------------------------------------------------------------


@dataclass
class Node:
    """A GPU worker's view: the mapping directory, its /dev (GPU device files), and the two programs."""

    root: Path

    @property
    def dir(self) -> Path:
        return self.root / "mapping"

    @property
    def dev(self) -> Path:
        return self.root / "dev"

    @property
    def pod_log(self) -> Path:
        """Stands in for the worker entrypoint's stderr (the pod's log)."""
        return self.root / "pod.log"

    def env(self, **extra: str) -> dict[str, str]:
        # slurmd gives its prolog and epilog no PATH and only its own variables
        return {
            "WARDEN_DCGM_JOB_MAPPING_DIR": str(self.dir),
            "WARDEN_GPU_DEVICE_DIR": str(self.dev),
            "WARDEN_JOB_MAPPING_LOG": str(self.pod_log),
            **extra,
        }

    def argv(self, program: str, *args: str) -> list[str]:
        """bash running the script as slurmd does (its links warden-prolog, warden-epilog), or with an
        action (`reset`)."""
        if program in ("warden-prolog", "warden-epilog"):
            return ["/bin/bash", str(self.root / program), *args]
        return ["/bin/bash", str(SCRIPT), program, *args]

    def start(self, program: str, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            self.argv(program), env=self.env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def run(self, program: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(program, *args), env=self.env(**env), capture_output=True, text=True, timeout=60
        )

    def hook(self, program: str, job: int, gpus: str | None, **env: str) -> subprocess.CompletedProcess[str]:
        """Run the prolog or epilog as slurmd does for ``job``; it must succeed."""
        if gpus is not None:
            env["SLURM_JOB_GPUS"] = gpus
        r = self.run(program, SLURM_JOB_ID=str(job), **env)
        assert r.returncode == 0, r
        return r

    def prolog(self, job: int, gpus: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
        return self.hook("warden-prolog", job, gpus, **env)

    def epilog(self, job: int, gpus: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
        return self.hook("warden-epilog", job, gpus, **env)

    def mapping(self) -> dict[int, list[str]]:
        """What dcgm-exporter reads: files whose name is a number (others it skips), a job a line."""
        out: dict[int, list[str]] = {}
        for f in sorted(self.dir.iterdir()):
            if not f.name.isdigit():
                continue
            text = f.read_text()
            assert text.endswith("\n") and "\n\n" not in text and text.strip(), f"{f.name}: {text!r}"
            assert stat.S_IMODE(f.stat().st_mode) == 0o644, f.name
            out[int(f.name)] = text.splitlines()
        return out

    def leftovers(self) -> list[str]:
        """Entries that are neither a GPU's file nor the lock: temporary files left behind."""
        return sorted(p.name for p in self.dir.iterdir() if not p.name.isdigit() and p.name != ".lock")


@pytest.fixture
def node(tmp_path: Path) -> Node:
    n = Node(tmp_path)
    n.dir.mkdir(mode=0o755)
    n.dev.mkdir()
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):  # this pod's two GPUs, and others
        (n.dev / name).touch()
    for program in ("warden-prolog", "warden-epilog"):
        (tmp_path / program).symlink_to(SCRIPT)
    return n


def test_the_prolog_puts_the_job_in_the_file_of_each_of_its_gpus(node: Node) -> None:
    node.prolog(7, "0,2")
    assert node.mapping() == {0: ["7"], 2: ["7"]}
    node.prolog(7, "0,2")  # a prolog run twice changes nothing
    assert node.mapping() == {0: ["7"], 2: ["7"]}
    assert node.leftovers() == []


def test_jobs_sharing_a_gpu_each_leave_with_their_own_epilog(node: Node) -> None:
    node.prolog(5, "0,1")
    node.prolog(6, "1")
    node.prolog(8, "1,3")
    assert node.mapping() == {0: ["5"], 1: ["5", "6", "8"], 3: ["8"]}
    node.epilog(6, "1")
    assert node.mapping() == {0: ["5"], 1: ["5", "8"], 3: ["8"]}
    node.epilog(5, "0,1")
    assert node.mapping() == {1: ["8"], 3: ["8"]}
    node.epilog(5, "0,1")  # an epilog run twice changes nothing
    node.epilog(8, "1,3")
    assert node.mapping() == {}, "a GPU without jobs has no file"
    assert node.leftovers() == []


def test_job_ids_are_whole_lines(node: Node) -> None:
    """Job 1 is not job 10 or 21: membership and removal go by whole lines."""
    node.prolog(10, "0")
    node.prolog(21, "0")
    node.prolog(1, "0")
    node.epilog(1, "0")
    assert node.mapping() == {0: ["10", "21"]}


@pytest.mark.parametrize(
    ("env", "want"),
    [
        ({"SLURM_JOB_GPUS": "1", "SLURM_STEP_GPUS": "2", "CUDA_VISIBLE_DEVICES": "3"}, [1]),
        ({"SLURM_STEP_GPUS": "2", "CUDA_VISIBLE_DEVICES": "3"}, [2]),
        ({"SLURM_JOB_GPUS": "", "CUDA_VISIBLE_DEVICES": "3,4"}, [3, 4]),
        ({"SLURM_JOB_GPUS": "0-2,5"}, [0, 1, 2, 5]),
        ({"SLURM_JOB_GPUS": "00,07"}, [0, 7]),
        # Slurm 25.11 puts GPU UUIDs in CUDA_VISIBLE_DEVICES; a MIG device is no GPU index either
        ({"CUDA_VISIBLE_DEVICES": "GPU-8d6a1b2c-0000-1111-2222-333344445555,1"}, [1]),
        ({"CUDA_VISIBLE_DEVICES": "MIG-0c3f6d4e-1111-2222-3333-444455556666"}, []),
    ],
)
def test_where_the_prolog_finds_the_jobs_gpus(node: Node, env: dict[str, str], want: list[int]) -> None:
    r = node.prolog(3, **env)
    assert node.mapping() == {gpu: ["3"] for gpu in want}
    if "GPU-" in str(env) or "MIG-" in str(env):
        assert "is not a GPU index; skipped" in r.stderr
    else:
        assert not node.pod_log.exists(), "a job's GPUs found: nothing in the pod's log"


def test_a_job_without_gpus_changes_nothing(node: Node) -> None:
    r = node.prolog(4)
    assert node.mapping() == {} and node.leftovers() == []
    assert r.stdout == ""
    node.epilog(4)
    assert node.mapping() == {}


def test_an_epilog_without_the_jobs_gpus_looks_through_this_pods_gpus(node: Node) -> None:
    """GPUs 0 and 1 are this pod's (/dev/nvidia0, /dev/nvidia1); GPU 4 is another pod's on the same
    node, whose job of the same ID (another cluster's) stays."""
    node.prolog(9, "0,1")
    node.prolog(9, "4")
    node.epilog(9)
    assert node.mapping() == {4: ["9"]}


def test_no_mapping_directory_nothing_to_do(node: Node) -> None:
    node.dir.rmdir()
    for program in ("warden-prolog", "warden-epilog"):
        r = node.run(program, SLURM_JOB_ID="3", SLURM_JOB_GPUS="0")
        assert (r.returncode, r.stdout, r.stderr) == (0, "", ""), r
    r = node.run("reset")
    assert (r.returncode, r.stderr) == (0, ""), r
    assert not node.dir.exists() and not node.pod_log.exists()


@pytest.mark.parametrize("program", ["warden-prolog", "warden-epilog"])
def test_a_failure_is_logged_and_never_fails_the_job(node: Node, program: str) -> None:
    """A prolog or epilog that fails drains the node: every failure is reported, the status is 0."""
    r = node.run(program, SLURM_JOB_ID="not-a-job", SLURM_JOB_GPUS="0")
    assert r.returncode == 0 and "not a job ID" in r.stderr and "not updated" in r.stderr, r
    # slurmd shows none of its prolog's output: the pod's log has it
    assert f"[{program}] error: SLURM_JOB_ID is 'not-a-job', not a job ID" in node.pod_log.read_text()
    node.prolog(3, "1")
    (node.dir / "0").mkdir()  # GPU 0's file cannot be written or read
    r = node.run(program, SLURM_JOB_ID="3", SLURM_JOB_GPUS="0,1")
    assert r.returncode == 0 and "error:" in r.stderr and "not updated" in r.stderr, r
    assert node.leftovers() == []


def test_a_held_lock_is_waited_for_then_given_up(node: Node) -> None:
    # flock holds the lock itself (-o: its command does not inherit it) until it is killed
    holder = subprocess.Popen(
        ["flock", "-o", str(node.dir / ".lock"), "sh", "-c", "echo locked; exec sleep 30"],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        r = node.run("warden-prolog", SLURM_JOB_ID="3", SLURM_JOB_GPUS="0", WARDEN_JOB_MAPPING_LOCK_TIMEOUT="1")
        assert r.returncode == 0 and "still held after 1s" in r.stderr, r
        assert node.mapping() == {}
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    node.prolog(3, "0")
    assert node.mapping() == {0: ["3"]}


def test_concurrent_prologs_and_epilogs_lose_no_update(node: Node) -> None:
    """40 jobs on the same two GPUs start at once; then the first 20 end while 20 more start."""

    def together(runs: list[tuple[str, int]]) -> None:
        procs = [node.start(p, SLURM_JOB_ID=str(job), SLURM_JOB_GPUS="0,1") for p, job in runs]
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            assert "error" not in err, err

    def jobs() -> dict[int, list[int]]:
        return {gpu: sorted(map(int, jobs)) for gpu, jobs in node.mapping().items()}

    together([("warden-prolog", j) for j in range(1, 41)])
    assert jobs() == {0: list(range(1, 41)), 1: list(range(1, 41))}
    together([("warden-epilog", j) for j in range(1, 21)] + [("warden-prolog", j) for j in range(41, 61)])
    assert jobs() == {0: list(range(21, 61)), 1: list(range(21, 61))}
    together([("warden-epilog", j) for j in range(21, 61)])
    assert node.mapping() == {} and node.leftovers() == []


def test_reset_at_worker_start_clears_this_pods_gpus(node: Node) -> None:
    """A new worker pod: jobs of the previous one on its GPUs are gone, other pods' GPUs keep theirs;
    the directory becomes 0755."""
    node.prolog(11, "0,1,4")
    node.dir.chmod(0o700)
    r = node.run("reset")
    assert r.returncode == 0, r
    assert node.mapping() == {4: ["11"]}
    assert stat.S_IMODE(node.dir.stat().st_mode) == 0o755
    r = node.run("reset", "4")
    assert r.returncode == 0 and node.mapping() == {}, r


def test_unknown_action_is_a_usage_error(node: Node) -> None:
    r = node.run("frobnicate")
    assert r.returncode == 2 and "usage:" in r.stderr
