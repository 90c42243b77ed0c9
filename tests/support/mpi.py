"""A user's MPI stack as PyPI serves it, for the tiers that run an MPI program across nodes: mpi4py on
MPICH's own wheel (MPICH with its process manager, libfabric and UCX inside; no system MPI: Debian's MPICH
and Open MPI both pull UCX's AMD GPU stack into the jail). The wheels are for the jail's Python (trixie's
3.13), downloaded once into the cache; users install them into a venv in their home."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from warden_dev.controlplane import cache_dir

WHEELS = ("mpi4py==4.1.2", "mpich==5.0.2")
#: the program: one number from each rank, added by an allreduce, each rank saying where it ran
ALLREDUCE = """from mpi4py import MPI
import socket
comm = MPI.COMM_WORLD
total = comm.allreduce(comm.rank + 1)
print(f"rank {comm.rank} of {comm.size} on {socket.gethostname()}: sum {total}", flush=True)
"""
#: MPICH's libfabric netmod with its TCP provider, over a pod's one interface (the wheel's default netmod is
#: UCX, which also runs; libfabric's TCP is what users on Ethernet are told to choose)
ENV = "MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp"
#: a user's install, in the login session: a venv in her home, from the wheels in ~/wheels
INSTALL = "python3 -m venv ~/mpi && ~/mpi/bin/pip install -q --no-index --find-links ~/wheels mpi4py mpich"


def wheels() -> list[Path]:
    """The wheels of WHEELS, downloaded into the cache the first time."""
    where = cache_dir() / "wheels" / "mpi"

    def found() -> list[Path]:
        return [p for spec in WHEELS for p in sorted(where.glob(f"{spec.replace('==', '-')}-*.whl"))[:1]]

    if len(found()) < len(WHEELS):
        where.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", str(where), "--no-deps",
                        "--only-binary=:all:", "--python-version", "3.13", "--platform", "manylinux_2_28_x86_64",
                        "--platform", "manylinux_2_5_x86_64", *WHEELS], check=True, timeout=600)  # fmt: skip
    return found()


def ranks(out: str) -> list[tuple[str, str, str]]:
    """(rank of size, host, sum) of each rank's line, by rank."""
    rows = []
    for line in out.splitlines():
        if line.startswith("rank ") and " on " in line and ": sum " in line:
            head, rest = line.split(" on ", 1)
            host, total = rest.split(": sum ", 1)
            rows.append((head, host, total.strip()))
    return sorted(rows)
