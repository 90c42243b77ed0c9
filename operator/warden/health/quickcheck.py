"""``warden-quickcheck``: slurmd's HealthCheckProgram on worker nodes (a few seconds, every few minutes).

Checks, in order, each bounded so the whole run stays under 10 s:

1. the GPU device files ``/dev/nvidia[0-9]*`` number exactly the GPUs in the node's gres (the count
   comes from Slurm itself, or ``--expected-gpus`` / ``WARDEN_EXPECTED_GPUS``);
2. on a node with GPUs, the driver job steps get is there: the worker entrypoint stages the node's
   driver in ``--driver-dir`` (``/run/warden/driver``: ``lib/libcuda.so.1``, ``lib/libnvidia-ml.so.1``,
   ``bin/nvidia-smi``; see images/worker/warden-driver.sh). A missing file is a failure, not a skip;
3. that ``nvidia-smi -L``, run with those libraries, answers within 5 s and lists that many GPUs;
4. the jail is mounted: ``/mnt/jail/etc/warden-jail-release`` exists.

On failure the node is drained with ``warden-quickcheck: <what failed>`` (unless it is already drained
or DOWN with another reason, which is left alone); once the checks pass again, a node whose current
reason starts with ``warden-quickcheck:`` is resumed. Exit status: 0 healthy, 1 unhealthy, 2 when Slurm
could not be asked (nothing changed). The node name is ``--node``, else ``SLURMD_NODENAME``, else the
short host name (worker pods are named like their Slurm node).
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from warden.slurm import reasons
from warden.slurm.cli import CommandRunner, Slurm, first_line, run_command
from warden.slurm.model import SlurmError, SlurmNodeUnknown

__all__ = ["DRIVER_DIR", "Settings", "find_problems", "main"]

#: Where the worker entrypoint stages the node's driver (WARDEN_DRIVER_STAGE in warden-driver.sh).
DRIVER_DIR = "/run/warden/driver"
#: The driver's files without which CUDA programs or nvidia-smi cannot run.
DRIVER_LIBRARIES = ("libcuda.so.1", "libnvidia-ml.so.1")
_DEVICE = re.compile(r"^nvidia\d+$")
_SMI_GPU = re.compile(r"^GPU \d+:", re.MULTILINE)


@dataclass(frozen=True)
class Settings:
    node: str
    expected_gpus: int | None  # None: take it from the node's gres in Slurm
    dev_dir: Path = Path("/dev")
    jail: Path = Path("/mnt/jail")
    release_file: str = "etc/warden-jail-release"
    driver_dir: Path = Path(DRIVER_DIR)
    smi_timeout_s: float = 5.0
    dry_run: bool = False


def gpu_device_files(dev_dir: Path) -> list[str]:
    try:
        return sorted(p.name for p in dev_dir.iterdir() if _DEVICE.match(p.name))
    except OSError:
        return []


def find_problems(settings: Settings, expected_gpus: int, runner: CommandRunner = run_command) -> list[str]:
    """Everything wrong with this node, each in a few words (they become the drain reason)."""
    problems: list[str] = []
    devices = gpu_device_files(settings.dev_dir)
    if len(devices) != expected_gpus:
        problems.append(f"{len(devices)} of {expected_gpus} GPU device files")
    if expected_gpus > 0:
        problems += _driver_problems(settings, expected_gpus, runner)
    if not (settings.jail / settings.release_file).is_file():
        problems.append(f"jail not mounted ({settings.jail}/{settings.release_file} missing)")
    return problems


def _driver_problems(settings: Settings, expected_gpus: int, runner: CommandRunner) -> list[str]:
    lib, smi = settings.driver_dir / "lib", settings.driver_dir / "bin" / "nvidia-smi"
    missing = [name for name in DRIVER_LIBRARIES if not (lib / name).exists()]
    if not os.access(smi, os.X_OK):
        missing.append("nvidia-smi")
    if missing:
        return [f"no NVIDIA driver ({', '.join(missing)} missing)"]
    # the libraries job steps load, not whatever this container's loader would find
    result = runner(["env", f"LD_LIBRARY_PATH={lib}", str(smi), "-L"], settings.smi_timeout_s)
    if result.timed_out:
        return [f"nvidia-smi hung for {settings.smi_timeout_s:g}s"]
    if result.returncode != 0:
        why = first_line(result.stderr or result.stdout, 60) or "no message"
        return [f"nvidia-smi exit {result.returncode}: {why}"]
    if (listed := len(_SMI_GPU.findall(result.stdout))) != expected_gpus:
        return [f"nvidia-smi lists {listed} of {expected_gpus} GPUs"]
    return []


def reason_for(problems: Sequence[str]) -> str:
    text = f"{reasons.QUICK_CHECK} {'; '.join(problems)}"
    return text if len(text) <= 100 else text[:97] + "..."


def settle(slurm: Slurm, settings: Settings, runner: CommandRunner = run_command) -> tuple[int, str]:
    """Run the checks and drain/resume the node; return (exit status, one line for slurmd's log)."""
    node = slurm.get_node(settings.node)
    expected = settings.expected_gpus if settings.expected_gpus is not None else node.gpus
    problems = find_problems(settings, expected, runner)
    ours = node.drained and node.reason.startswith(reasons.QUICK_CHECK)
    if problems:
        reason = reason_for(problems)
        if settings.dry_run:
            return 1, f"unhealthy (dry run): {reason}"
        if node.held_reason and not ours:
            return 1, f"unhealthy, already held by someone else ({node.held_reason}): {reason}"
        if node.reason != reason or not node.drained:
            slurm.drain(settings.node, reason)
        return 1, f"drained: {reason}"
    if ours and not settings.dry_run:
        slurm.resume(settings.node)
        return 0, f"healthy again: resumed (was: {node.reason})"
    return 0, "healthy"


def _node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="warden-quickcheck", description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--node", default=_node_name())
    env_gpus = os.environ.get("WARDEN_EXPECTED_GPUS", "")
    p.add_argument("--expected-gpus", type=int, default=int(env_gpus) if env_gpus.strip() else None)
    p.add_argument("--dev-dir", type=Path, default=Path("/dev"))
    p.add_argument("--jail", type=Path, default=Path(os.environ.get("WARDEN_JAIL", "/mnt/jail")))
    p.add_argument("--driver-dir", type=Path, default=Path(os.environ.get("WARDEN_DRIVER_STAGE", DRIVER_DIR)))
    p.add_argument("--dry-run", action="store_true")
    return p


def main(argv: Sequence[str] | None = None, slurm: Slurm | None = None, runner: CommandRunner = run_command) -> int:
    args = build_parser().parse_args(argv)
    settings = Settings(
        node=str(args.node),
        expected_gpus=args.expected_gpus,
        dev_dir=args.dev_dir,
        jail=args.jail,
        driver_dir=args.driver_dir,
        dry_run=bool(args.dry_run),
    )
    try:
        status, line = settle(slurm or Slurm(runner, timeout=3.0), settings, runner)
    except SlurmNodeUnknown:
        # slurmd runs its HealthCheckProgram once before a dynamic node registers: nothing to drain
        # yet (the next run, HealthCheckInterval later, checks the registered node)
        print(f"warden-quickcheck: {settings.node}: not registered with slurmctld yet; nothing to do")
        return 0
    except SlurmError as e:
        print(f"warden-quickcheck: {settings.node}: cannot ask Slurm: {e}", file=sys.stderr)
        return 2
    print(f"warden-quickcheck: {settings.node}: {line}")
    return status


if __name__ == "__main__":
    sys.exit(main())
