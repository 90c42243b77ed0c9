"""Jobs from the login node: srun and sbatch on both CPU workers, inside the jail, as root and as a
jail user; one home directory everywhere; GPUs by gres on the GPU group.

No GPU exists here: the GPU worker's /dev/nvidia0 and /dev/nvidia1 are /dev/null (char 1:3) passed
with `docker run --device /dev/null:/dev/nvidiaN`, standing in for the device plugin. Slurm only
needs the files named in gres.conf to exist; that is all these tests rely on.
"""

from __future__ import annotations

import base64
import re
import shlex
import uuid
from collections.abc import Callable

import pytest

from tests.support import mpi
from tests.support.jailuser import JailUser
from warden_dev.dockercluster import DockerCluster

PROBE = 'echo "host=$(hostname) user=$(id -un) jail=$(test -f /etc/warden-jail-release && echo yes || echo no)"'
q = shlex.quote


def _probes(out: str) -> list[tuple[str, str, str]]:
    return sorted(re.findall(r"^host=(\S+) user=(\S+) jail=(\S+)$", out, re.M))


def _user(cluster: DockerCluster, alice: JailUser, who: str) -> tuple[str, Callable[[str], str]]:
    """(user name, run a script in an SSH session on the login node as that user)."""
    if who == "root":
        return "root", lambda script: cluster.ssh("root", script).out
    return "alice", lambda script: alice.ssh(script)


@pytest.mark.parametrize("who", ["root", "alice"])
def test_srun_runs_on_both_cpu_workers_in_the_jail(cluster: DockerCluster, alice: JailUser, who: str) -> None:
    user, run = _user(cluster, alice, who)
    out = run(f"srun -p cpu -N2 --ntasks-per-node=1 sh -c {q(PROBE)}")
    assert _probes(out) == [(w, user, "yes") for w in cluster.worker_pods("cpu")], out


@pytest.mark.parametrize("who", ["root", "alice"])
def test_sbatch_runs_on_both_cpu_workers_in_the_jail(cluster: DockerCluster, alice: JailUser, who: str) -> None:
    """sbatch from the home directory: the output file (slurm-<id>.out, written by slurmstepd on the
    first node) is there on the login node afterwards, with a step from each node in it."""
    user, run = _user(cluster, alice, who)
    wrap = f"srun sh -c {q(PROBE)}"
    out = run(f"cd && sbatch -p cpu -N2 --ntasks-per-node=1 -W --parsable --wrap {q(wrap)}")
    job = out.strip().split(";")[0]
    assert job.isdigit(), out
    text = run(f"cat ~/slurm-{job}.out")
    assert _probes(text) == [(w, user, "yes") for w in cluster.worker_pods("cpu")], text


def test_home_is_the_same_on_every_node(cluster: DockerCluster, alice: JailUser) -> None:
    """A file alice writes in her home on one worker is there on the other worker and on login."""
    first, second = cluster.worker_pods("cpu")
    token = uuid.uuid4().hex
    alice.ssh(f"srun -p cpu -N1 -w {first} sh -c 'echo {token} from $(hostname) > ~/shared-{token}'")
    on_second = alice.ssh(f"srun -p cpu -N1 -w {second} sh -c 'cat ~/shared-{token}; stat -c %U ~/shared-{token}'")
    assert on_second.split() == [token, "from", first, "alice"]
    assert alice.ssh(f"cat ~/shared-{token}").split() == [token, "from", first]
    # and it is the jail volume's file, not something local to a container
    assert cluster.exec(f"{cluster.names.login}-0", f"cat /mnt/jail/home/alice/shared-{token}").out.split()[0] == token


def test_an_mpi_program_runs_a_rank_on_each_cpu_worker(cluster: DockerCluster, alice: JailUser) -> None:
    """A user's MPI program: alice installs mpi4py and MPICH from PyPI's wheels into a venv in her home (the
    wheels brought into her home by the test, as by her scp), and `srun --mpi=pmi2` starts a rank on each CPU
    worker inside the jail; Slurm's PMI wires them up and an allreduce goes between the two pods."""
    alice.ssh("mkdir -p ~/wheels")
    for wheel in mpi.wheels():
        alice.ssh(f"base64 -d > ~/wheels/{wheel.name}", input=base64.b64encode(wheel.read_bytes()).decode(),
                  timeout=300)  # fmt: skip
    alice.ssh(f"cat > ~/allreduce.py <<'EOF'\n{mpi.ALLREDUCE}EOF\nrm -rf ~/mpi; {mpi.INSTALL}", timeout=600)
    first, second = cluster.worker_pods("cpu")
    out = alice.ssh(f"{mpi.ENV} srun -p cpu -N2 -w {first},{second} --ntasks-per-node=1 --mpi=pmi2 "
                    "~/mpi/bin/python ~/allreduce.py", timeout=300)  # fmt: skip
    assert mpi.ranks(out) in ([("rank 0 of 2", first, "3"), ("rank 1 of 2", second, "3")],
                              [("rank 0 of 2", second, "3"), ("rank 1 of 2", first, "3")]), out  # fmt: skip


# --- GPUs (fake devices, see the module docstring) -------------------------------------------------


def test_gpu_node_registers_its_gres_and_stays_healthy(cluster: DockerCluster) -> None:
    """The GPU worker comes up with Gres=gpu:fake:2 and is not drained by warden-quickcheck (which
    counts /dev/nvidia* against the gres)."""
    (node,) = cluster.worker_pods("gpu")
    out = cluster.exec(cluster.names.controller_pod, f"scontrol show node {node}").out
    assert re.search(r"\bGres=gpu:fake:2\b", out), out
    assert re.search(r"\bState=IDLE\b", out), out
    assert "warden-quickcheck" not in out


@pytest.mark.parametrize(("request_flag", "want"), [("--gpus=1", 1), ("--gres=gpu:fake:2", 2)])
def test_gpu_job_gets_its_gres(cluster: DockerCluster, alice: JailUser, request_flag: str, want: int) -> None:
    """The job is given `want` of the node's GPUs: CUDA_VISIBLE_DEVICES names them, Slurm shows them
    allocated to the running job, and the device files are there inside the jail."""
    script = (
        'echo "CVD=${CUDA_VISIBLE_DEVICES:-unset}"; ls /dev/nvidia*; '
        "test -f /etc/warden-jail-release && echo jail; "
        'scontrol -d show job "$SLURM_JOB_ID" | grep -o "GRES=[^ ]*"'
    )
    out = alice.ssh(f"cd && sbatch -p gpu {request_flag} -W --parsable --wrap {q(script)}")
    job = out.strip().split(";")[0]
    text = alice.ssh(f"cat ~/slurm-{job}.out")
    cvd = re.search(r"^CVD=(\S+)$", text, re.M)
    assert cvd, text
    indices = cvd.group(1).split(",")
    assert len(indices) == want and set(indices) <= {"0", "1"}, text
    assert "/dev/nvidia0" in text and "/dev/nvidia1" in text and "jail" in text.split()
    gres = re.search(r"^GRES=gpu:fake:(\d+)\(IDX:([0-9,-]+)\)$", text, re.M)
    assert gres, text
    assert int(gres.group(1)) == want, text


def test_more_gpus_than_a_node_has_is_refused(cluster: DockerCluster, alice: JailUser) -> None:
    r = cluster.ssh("alice", "sbatch -p gpu --gpus-per-node=3 --wrap true", check=False, identity=alice.identity)
    assert r.rc != 0
    assert "Requested node configuration is not available" in r.err, r
