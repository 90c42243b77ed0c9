"""The one module that talks to Slurm (``scontrol``, ``srun``).

Everything goes through a ``CommandRunner`` so that callers can be unit-tested without Slurm; the
default runner starts the program with a timeout and, when the time is up, stops it with SIGTERM
(``srun`` then cancels its step) and, if it lingers, SIGKILL.

Node listing reads ``scontrol show node --json`` (Slurm 24.11, data_parser v0.0.42): each node has
``state`` as a list of flags (``["IDLE", "DRAIN"]``, ``["MIXED", "PLANNED"]``, ``["DOWN",
"NOT_RESPONDING"]``), ``reason`` (kept by Slurm after a RESUME, so it only means something while the
node is drained or down), ``gres`` (``gpu:h100:8(S:0-1)``) and ``features`` (a list).

Facts checked against Slurm 24.11.5: ``scontrol update ... State=RESUME`` on a node that is not
drained or down fails with "Invalid node state specified"; ``srun --immediate`` on a drained,
reserved or busy node fails with "Unable to allocate resources"; a step killed by its time limit
prints "DUE TO TIME LIMIT"; a MAINT reservation on a drained node, then RESUME, lets a job with
``--reservation`` run there while every other job is kept off.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "BUSY_STATES",
    "CommandResult",
    "CommandRunner",
    "Job",
    "Node",
    "Slurm",
    "SlurmCommandError",
    "SlurmError",
    "SlurmNodeUnknown",
    "SlurmParseError",
    "SlurmTimeout",
    "StepResult",
    "diag_from_doc",
    "expand_hostlist",
    "first_line",
    "gpu_count",
    "jobs_from_doc",
    "nodes_from_doc",
    "parse_nodes_json",
    "run_command",
]

BASE_STATES = frozenset({"IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN"})
BUSY_STATES = frozenset({"ALLOCATED", "MIXED"})
# Flags that make a node unusable, whoever set them.
UNAVAILABLE_FLAGS = frozenset({"NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN", "POWERING_UP", "REBOOT_ISSUED"})

# Lines srun prints when it never got an allocation: the node was not free, not a node fault.
_NOT_ALLOCATED = ("Unable to allocate resources", "Immediate execution impossible")
# Signs that a step reached its node (a task ran or failed to launch there, slurmstepd spoke).
# A failing srun without any of them never left the machine it runs on: its own plugins, config or
# credentials failed (seen for real: plugstack.conf naming a plugin missing from the pod).
_STEP_REACHED_NODE = re.compile(r"\btask \d+|\blaunch failed\b|slurmstepd|StepId=|\bSTEP \d|TIME LIMIT", re.I)
# slurmctld busy or restarting: the same command may well work a moment later.
_TRANSIENT = ("Socket timed out on send/recv operation", "Unable to contact slurm controller",
              "Zero Bytes were transmitted or received", "Connection refused")  # fmt: skip
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


class SlurmError(Exception):
    """A Slurm command failed; ``str()`` names the command and what it printed on stderr."""


class SlurmCommandError(SlurmError):
    def __init__(self, result: CommandResult) -> None:
        self.result = result
        err = result.stderr.strip() or result.stdout.strip() or "(no output)"
        super().__init__(f"`{' '.join(result.argv)}` failed with exit {result.returncode}: {err}")


class SlurmTimeout(SlurmError):
    def __init__(self, result: CommandResult, timeout: float) -> None:
        self.result = result
        super().__init__(f"`{' '.join(result.argv)}` timed out after {timeout:g}s")


class SlurmParseError(SlurmError):
    pass


class SlurmNodeUnknown(SlurmParseError):
    """slurmctld does not know the node (a dynamic node that has not registered yet, or is gone)."""


_GRES_ITEM = re.compile(r"^gpu(?::[^:(]+)?:(\d+)")


def gpu_count(gres: str) -> int:
    """GPUs in a gres string: ``gpu:8``, ``gpu:h100:4(S:0),gpu:h100:4(S:1)``, ``(null)`` (0)."""
    total = 0
    # Split on commas that start a new item, not those inside "(S:0,1)".
    for item in re.split(r",(?![^(]*\))", gres):
        m = _GRES_ITEM.match(item.strip())
        if m:
            total += int(m[1])
    return total


@dataclass(frozen=True)
class Node:
    name: str
    state: str  # base state: IDLE, ALLOCATED, MIXED, DOWN, ...
    flags: frozenset[str]  # DRAIN, NOT_RESPONDING, COMPLETING, PLANNED, ...
    reason: str
    gres: str
    features: tuple[str, ...]
    partitions: tuple[str, ...]
    cpus: int = 0
    alloc_cpus: int = 0
    gres_used: str = ""  # ``gpu:h100:2(IDX:0-1)``: the GPUs jobs hold now
    version: str = ""  # the slurmd release the node registered with (``26.05.5``); "" when not reported

    @property
    def gpus(self) -> int:
        return gpu_count(self.gres)

    @property
    def gpus_used(self) -> int:
        return gpu_count(self.gres_used)

    @property
    def drained(self) -> bool:
        """Drained or draining (DRAIN flag set): no new jobs start here."""
        return "DRAIN" in self.flags

    @property
    def down(self) -> bool:
        return self.state in ("DOWN", "ERROR", "FUTURE") or bool(self.flags & UNAVAILABLE_FLAGS)

    @property
    def busy(self) -> bool:
        return self.state in BUSY_STATES or "COMPLETING" in self.flags

    @property
    def held_reason(self) -> str:
        """The reason while the node is drained or DOWN, else ``""``: Slurm keeps the text after a
        RESUME, and a node that is merely NOT_RESPONDING (as every node is for a moment after RESUME)
        still shows it."""
        return self.reason if (self.drained or self.state == "DOWN") else ""

    def describe_state(self) -> str:
        return "+".join([self.state, *sorted(self.flags)])


def _str_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(str(v) for v in value if str(v))
    if isinstance(value, str) and value not in ("", "(null)"):
        return tuple(v for v in value.split(",") if v)
    return ()


def _node_from_json(raw: dict[str, Any]) -> Node:
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise SlurmParseError(f"node without a name: {str(raw)[:200]}")
    words = [w.upper() for w in _str_list(raw.get("state"))]
    words += [w.upper() for w in _str_list(raw.get("state_flags"))]  # data_parser before v0.0.40
    base = next((w for w in words if w in BASE_STATES), "UNKNOWN")
    reason = raw.get("reason")
    gres = raw.get("gres")
    gres_used = raw.get("gres_used")
    version = raw.get("version")
    return Node(
        name=name,
        state=base,
        flags=frozenset(w for w in words if w != base),
        reason=reason if isinstance(reason, str) else "",
        gres=gres if isinstance(gres, str) and gres != "(null)" else "",
        features=_str_list(raw.get("features")),
        partitions=_str_list(raw.get("partitions")),
        cpus=_count(raw.get("cpus"), f"node {name}: cpus"),
        alloc_cpus=_count(raw.get("alloc_cpus"), f"node {name}: alloc_cpus"),
        gres_used=gres_used if isinstance(gres_used, str) and gres_used != "(null)" else "",
        version=version if isinstance(version, str) and version != "(null)" else "",
    )


def _count(raw: Any, what: str) -> int:
    """A count as data_parser writes it: a plain number or ``{"set": true, "number": n}``; absent: 0."""
    if isinstance(raw, dict):
        raw = raw.get("number", 0) if raw.get("set", True) and not raw.get("infinite") else 0
    if raw is None:
        return 0
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise SlurmParseError(f"{what} is not a count: {raw!r}")
    return raw


def parse_nodes_json(text: str) -> list[Node]:
    """Nodes from ``scontrol show node --json``."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise SlurmParseError(f"scontrol printed no JSON: {e}: {text[:200]!r}") from e
    return nodes_from_doc(doc)


def nodes_from_doc(doc: Any) -> list[Node]:
    """Nodes from a data_parser document (``scontrol ... --json``, slurmrestd's ``/nodes``)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        raise SlurmParseError(f"no 'nodes' list in Slurm's JSON: {str(doc)[:200]!r}")
    errors = doc.get("errors") or []
    if errors:
        raise SlurmParseError(f"Slurm reported errors: {errors}")
    return [_node_from_json(n) for n in doc["nodes"] if isinstance(n, dict)]


#: the most names one hostlist expression may expand to (a typo like ``n[0-99999999]`` is an error)
HOSTLIST_LIMIT = 65536
_DIGITS = re.compile(r"[0-9]+")


def _hostlist_items(expr: str) -> list[str]:
    """Split at the commas outside brackets; brackets must pair up and not nest."""
    items, depth, start = [], 0, 0
    for i, c in enumerate(expr):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(expr[start:i])
            start = i + 1
        if depth not in (0, 1):
            raise SlurmParseError(f"hostlist {expr!r}: unbalanced or nested brackets")
    if depth:
        raise SlurmParseError(f"hostlist {expr!r}: unbalanced brackets")
    items.append(expr[start:])
    if not all(items):
        raise SlurmParseError(f"hostlist {expr!r}: empty name")
    return items


def _hostlist_range(body: str, expr: str) -> list[str]:
    """``0-2,5`` -> 0 1 2 5; ``01-03`` keeps the width of its lower bound (01 02 03)."""
    out: list[str] = []
    for part in body.split(","):
        lo, dash, hi = part.partition("-")
        if not _DIGITS.fullmatch(lo) or (dash and not _DIGITS.fullmatch(hi)):
            raise SlurmParseError(f"hostlist {expr!r}: bad range {part!r}")
        first, last = int(lo), int(hi if dash else lo)
        if last < first:
            raise SlurmParseError(f"hostlist {expr!r}: range {part!r} runs backwards")
        if len(out) + last - first + 1 > HOSTLIST_LIMIT:
            raise SlurmParseError(f"hostlist {expr!r}: more than {HOSTLIST_LIMIT} names")
        out += [str(n).zfill(len(lo)) for n in range(first, last + 1)]
    return out


def expand_hostlist(expr: str) -> list[str]:
    """Node names in a Slurm hostlist: ``demo-worker-cpu-[0-2,5]``, ``a-1,b-[3-4]``, ``node[01-03]``,
    ``r[1-2]-n[1-2]`` (every combination, in order); ``""`` is none. Raises SlurmParseError."""
    expr = expr.strip()
    if not expr:
        return []
    names: list[str] = []
    for item in _hostlist_items(expr):
        # "r[1-2]-n[3]" -> [["r"], ["1", "2"], ["-n"], ["3"]]: literal text and bracket bodies alternate
        pieces = re.split(r"\[([^\]]*)\]", item)
        parts = [[p] if i % 2 == 0 else _hostlist_range(p, expr) for i, p in enumerate(pieces)]
        if len(names) + math.prod(len(p) for p in parts) > HOSTLIST_LIMIT:
            raise SlurmParseError(f"hostlist {expr!r}: more than {HOSTLIST_LIMIT} names")
        names += ["".join(combo) for combo in itertools.product(*parts)]
    return names


@dataclass(frozen=True)
class Job:
    """A job as slurmctld lists it (slurmrestd's ``/jobs``, data_parser v0.0.42)."""

    id: int
    #: base state (PENDING, RUNNING, COMPLETED, CANCELLED, ...), or COMPLETING while Slurm is still
    #: cleaning up after the job on its nodes (as squeue shows it: CG)
    state: str
    nodes: tuple[str, ...]  # the nodes allocated to it, expanded; () while pending
    #: epoch seconds: for a running job, its start plus its time limit; None when Slurm sets none
    end_time: float | None
    partition: str = ""
    #: why a pending job waits (``Resources``, ``Priority``, ``ReqNodeNotAvail...``); ``None`` otherwise
    state_reason: str = "None"
    cpus: int = 0


def _end_time(raw: Any, job_id: int) -> float | None:
    """``{"set": true, "infinite": false, "number": 1700000000}`` (data_parser v0.0.40+) or a number."""
    if raw is None:
        return None
    if isinstance(raw, dict):
        if not raw.get("set") or raw.get("infinite"):
            return None
        raw = raw.get("number")
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise SlurmParseError(f"job {job_id}: end_time is not a number: {raw!r}")
    return float(raw) if raw > 0 else None


def _job_from_json(raw: Any) -> Job:
    if not isinstance(raw, dict):
        raise SlurmParseError(f"job entry is not an object: {str(raw)[:200]!r}")
    job_id = raw.get("job_id")
    if isinstance(job_id, bool) or not isinstance(job_id, int):
        raise SlurmParseError(f"job without a numeric job_id: {str(raw)[:200]!r}")
    words = [w.upper() for w in _str_list(raw.get("job_state"))]
    if not words:
        raise SlurmParseError(f"job {job_id}: no job_state: {raw.get('job_state')!r}")
    state = "COMPLETING" if "COMPLETING" in words else words[0]
    resources = raw.get("job_resources")
    allocated = resources.get("nodes") if isinstance(resources, dict) else None
    allocation = allocated.get("allocation") if isinstance(allocated, dict) else None
    if isinstance(allocation, list) and allocation:
        names = [a.get("name") if isinstance(a, dict) else None for a in allocation]
        if not all(isinstance(n, str) and n for n in names):
            raise SlurmParseError(f"job {job_id}: an allocated node without a name: {str(allocation)[:200]!r}")
        nodes = tuple(str(n) for n in names)
    else:
        hostlist = raw.get("nodes") or ""
        if not isinstance(hostlist, str):
            raise SlurmParseError(f"job {job_id}: nodes is not a hostlist string: {hostlist!r}")
        try:
            nodes = tuple(expand_hostlist("" if hostlist == "(null)" else hostlist))
        except SlurmParseError as e:
            raise SlurmParseError(f"job {job_id}: {e}") from e
    partition, reason = raw.get("partition"), raw.get("state_reason")
    return Job(
        id=job_id,
        state=state,
        nodes=nodes,
        end_time=_end_time(raw.get("end_time"), job_id),
        partition=partition if isinstance(partition, str) else "",
        state_reason=reason if isinstance(reason, str) and reason else "None",
        cpus=_count(raw.get("cpus"), f"job {job_id}: cpus"),
    )


def jobs_from_doc(doc: Any) -> list[Job]:
    """Jobs from slurmrestd's ``GET /slurm/v0.0.42/jobs``."""
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise SlurmParseError(f"no 'jobs' list in Slurm's JSON: {str(doc)[:200]!r}")
    errors = doc.get("errors") or []
    if errors:
        raise SlurmParseError(f"Slurm reported errors: {errors}")
    return [_job_from_json(j) for j in doc["jobs"]]


def diag_from_doc(doc: Any) -> dict[str, float]:
    """The scheduler statistics of slurmrestd's ``GET /slurm/v0.0.42/diag`` (what ``sdiag`` prints):
    every number in ``statistics``, nested objects flattened with ``_`` (``schedule_exit_max_job_start``),
    booleans as 0/1; lists (RPCs by type and user) left out."""
    stats = doc.get("statistics") if isinstance(doc, dict) else None
    if not isinstance(stats, dict):
        raise SlurmParseError(f"no 'statistics' object in Slurm's diag JSON: {str(doc)[:200]!r}")
    out: dict[str, float] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, int | float):  # bool is an int
            out[prefix] = float(value)
        elif isinstance(value, dict) and "number" in value and "set" in value:
            if value.get("set") and not value.get("infinite"):
                walk(prefix, value["number"])
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}_{k}", v)

    for key, value in stats.items():
        walk(str(key), value)
    return out


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
    ) -> None:
        self.runner = runner
        self.scontrol = scontrol
        self.srun_path = srun
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

    def resume(self, node: str) -> None:
        self._run([self.scontrol, "update", f"NodeName={node}", "State=RESUME"])

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
