"""Slurm's command-line client (``scontrol``, ``srun``, ``squeue``), for the programs that run beside
Slurm: the health checks in their pods, the worker's node lifecycle (``warden.node``). The operator and
the exporter talk to slurmrestd (``warden.slurm.rest``).

Everything goes through a ``CommandRunner`` so that callers can be unit-tested without Slurm; the
default runner starts the program with a timeout and, when the time is up, stops it with SIGTERM
(``srun`` then cancels its step) and, if it lingers, SIGKILL.

Facts checked against Slurm 24.11.5: ``scontrol update ... State=RESUME`` on a node that is not
drained or down fails with "Invalid node state specified"; ``srun --immediate`` on a drained,
reserved or busy node fails with "Unable to allocate resources"; a step killed by its time limit
prints "DUE TO TIME LIMIT"; a MAINT reservation on a drained node, then RESUME, lets a job with
``--reservation`` run there while every other job is kept off.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from warden.slurm.model import Node, SlurmError, SlurmNodeUnknown, parse_nodes_json

# Lines srun prints when it never got an allocation: the node was not free, not a node fault.
_NOT_ALLOCATED = ("Unable to allocate resources", "Immediate execution impossible")
# Signs that a step reached its node (a task ran or failed to launch there, slurmstepd spoke).
# A failing srun without any of them never left the machine it runs on: its own plugins, config or
# credentials failed (seen for real: plugstack.conf naming a plugin missing from the pod).
_STEP_REACHED_NODE = re.compile(r"\btask \d+|\blaunch failed\b|slurmstepd|StepId=|\bSTEP \d|TIME LIMIT", re.I)
# slurmctld busy or restarting: the same command may well work a moment later.
_TRANSIENT = ("Socket timed out on send/recv operation", "Unable to contact slurm controller",
              "Zero Bytes were transmitted or received", "Connection refused")  # fmt: skip
# one ``Key = value`` line of ``scontrol show config``
_CONFIG_LINE = re.compile(r"^(\w+)\s*=[ \t]*(.*)$", re.M)
#: waits between attempts of a command that is safe to repeat (reads, drains)
RETRY_DELAYS_S = (2.0, 5.0)


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False


class CommandRunner(Protocol):
    def __call__(self, argv: Sequence[str], timeout: float) -> CommandResult: ...


def run_command(argv: Sequence[str], timeout: float) -> CommandResult:
    """Run ``argv`` (no shell); on timeout SIGTERM, 10 s later SIGKILL, and return what it printed."""
    args = tuple(argv)
    try:
        proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
        )
    except OSError as e:
        return CommandResult(args, 127, "", f"{args[0]}: {e.strerror or e}")
    try:
        out, err = proc.communicate(timeout=timeout)
        return CommandResult(args, proc.returncode, out, err)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        return CommandResult(args, proc.returncode, out or "", err or "", timed_out=True)


class SlurmCommandError(SlurmError):
    def __init__(self, result: CommandResult) -> None:
        self.result = result
        err = result.stderr.strip() or result.stdout.strip() or "(no output)"
        super().__init__(f"`{' '.join(result.argv)}` failed with exit {result.returncode}: {err}")


class SlurmTimeout(SlurmError):
    def __init__(self, result: CommandResult, timeout: float) -> None:
        self.result = result
        super().__init__(f"`{' '.join(result.argv)}` timed out after {timeout:g}s")


@dataclass(frozen=True)
class StepResult:
    """What an ``srun`` step gave back; ``not_allocated`` means it never started (node taken, drained)."""

    command: CommandResult
    not_allocated: bool
    hit_time_limit: bool
    #: srun failed before the step reached the node (nothing about the node is known)
    launch_failed: bool = False


class Slurm:
    """Slurm side effects. Every call runs one command through ``runner`` with ``timeout`` seconds."""

    def __init__(
        self,
        runner: CommandRunner = run_command,
        *,
        scontrol: str = "scontrol",
        srun: str = "srun",
        timeout: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        squeue: str = "squeue",
    ) -> None:
        self.runner = runner
        self.scontrol = scontrol
        self.srun_path = srun
        self.squeue = squeue
        self.timeout = timeout
        self.sleep = sleep

    def _run(self, argv: Sequence[str], timeout: float | None = None, *, repeatable: bool = False) -> CommandResult:
        """Run one command. ``repeatable`` (reads, drains: the same outcome however often they run):
        when slurmctld did not answer (busy, restarting), try again after RETRY_DELAYS_S."""
        limit = self.timeout if timeout is None else timeout
        delays = list(RETRY_DELAYS_S) if repeatable else []
        while True:
            result = self.runner(argv, limit)
            transient = result.returncode != 0 and any(t in result.stderr for t in _TRANSIENT)
            if not (transient and delays):
                break
            self.sleep(delays.pop(0))
        if result.timed_out:
            raise SlurmTimeout(result, limit)
        if result.returncode != 0:
            raise SlurmCommandError(result)
        return result

    def list_nodes(self) -> list[Node]:
        return parse_nodes_json(self._run([self.scontrol, "show", "node", "--json"], repeatable=True).stdout)

    def get_node(self, name: str) -> Node:
        nodes = parse_nodes_json(self._run([self.scontrol, "show", "node", name, "--json"], repeatable=True).stdout)
        for node in nodes:
            if node.name == name:
                return node
        raise SlurmNodeUnknown(f"scontrol show node {name} did not list {name}")

    def drain(self, node: str, reason: str) -> None:
        if not reason.strip():
            raise ValueError("Slurm requires a reason to drain a node")
        self._run([self.scontrol, "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"], repeatable=True)

    def set_extra(self, node: str, extra: str) -> None:
        """The node's Extra field (free text, shown by ``scontrol show node``)."""
        self._run([self.scontrol, "update", f"NodeName={node}", f"Extra={extra}"], repeatable=True)

    def resume(self, node: str) -> None:
        self._run([self.scontrol, "update", f"NodeName={node}", "State=RESUME"])

    def delete_node(self, node: str) -> None:
        """Remove a dynamic node (``slurmd -Z``) from slurmctld; not repeated (a second delete fails)."""
        self._run([self.scontrol, "delete", f"NodeName={node}"])

    def show_config(self) -> dict[str, str]:
        """slurmctld's running configuration (``scontrol show config``): ``{"GresTypes": "gpu", ...}``."""
        out = self._run([self.scontrol, "show", "config"], repeatable=True).stdout
        return {m.group(1): m.group(2).strip() for m in _CONFIG_LINE.finditer(out)}

    def node_jobs(self, node: str, states: Sequence[str] = ("running", "completing")) -> list[str]:
        """IDs of the jobs on ``node`` in ``states`` (``squeue -h -w NODE -t STATES -o %i``)."""
        argv = [self.squeue, "-h", "-w", node, "-t", ",".join(states), "-o", "%i"]
        return [line.strip() for line in self._run(argv, repeatable=True).stdout.splitlines() if line.strip()]

    def create_reservation(self, name: str, nodes: Iterable[str], user: str, minutes: int) -> None:
        """A maintenance reservation starting now, which keeps every other job off ``nodes``."""
        self._run(
            [
                self.scontrol,
                "create",
                "reservation",
                f"ReservationName={name}",
                f"Nodes={','.join(nodes)}",
                "StartTime=now",
                f"Duration={max(1, minutes)}",
                f"Users={user}",
                "Flags=MAINT,IGNORE_JOBS",
            ]
        )

    def delete_reservation(self, name: str) -> None:
        self._run([self.scontrol, "delete", f"ReservationName={name}"])

    def run_step(
        self,
        node: str,
        command: Sequence[str],
        *,
        gpus: int,
        time_limit_s: int,
        timeout: float,
        immediate_s: int = 30,
        reservation: str | None = None,
        partition: str | None = None,
        job_name: str = "warden-health",
    ) -> StepResult:
        """``srun`` one task on ``node``, alone there (``--exclusive``), with all its ``gpus``."""
        minutes, seconds = divmod(max(1, time_limit_s), 60)
        argv = [
            self.srun_path,
            f"--nodelist={node}",
            "--nodes=1",
            "--ntasks=1",
            "--exclusive",
            f"--immediate={immediate_s}",
            f"--time={minutes}:{seconds:02d}",
            f"--job-name={job_name}",
        ]
        if gpus > 0:
            argv.append(f"--gpus-per-node={gpus}")
        if reservation:
            argv.append(f"--reservation={reservation}")
        if partition:
            argv.append(f"--partition={partition}")
        argv += list(command)
        result = self.runner(argv, timeout)
        text = result.stderr + result.stdout
        failed = result.returncode != 0 and not result.timed_out
        not_allocated = failed and any(s in result.stderr for s in _NOT_ALLOCATED)
        return StepResult(
            command=result,
            not_allocated=not_allocated,
            hit_time_limit="DUE TO TIME LIMIT" in text,
            launch_failed=failed
            and not not_allocated
            and not result.stdout.strip()
            and not _STEP_REACHED_NODE.search(result.stderr),
        )


def first_line(text: str, limit: int = 120) -> str:
    """The first non-empty line of ``text``, cut to ``limit`` characters (for short messages)."""
    for line in text.splitlines():
        if line.strip():
            line = line.strip()
            return line if len(line) <= limit else line[: limit - 3] + "..."
    return ""
