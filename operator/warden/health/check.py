"""Run NCCL ``all_reduce_perf`` on GPU nodes through Slurm; drain the slow and broken ones.

Per node (in parallel, at most ``concurrency`` at once)::

    srun --nodelist=NODE --nodes=1 --ntasks=1 --exclusive --immediate=S --time=M:SS \\
         --gpus-per-node=G --partition=NODE'S PARTITIONS all_reduce_perf -b MIN -e MAX -f 2 -g G

Which nodes are tested:

* idle nodes with GPUs (or the nodes named on the command line);
* nodes this check drained itself (reason starting with ``warden-health:``): Slurm starts no job on a
  drained node, so the check takes a MAINT reservation on it, resumes it, tests it inside the
  reservation, and drains it again if it still fails (or if the test never started);
* skipped and reported with why: busy nodes (ALLOCATED/MIXED), nodes down or drained by anyone else
  (people, slurmd's own health check, ``warden-quickcheck:``), nodes whose ``srun`` found no room,
  and nodes whose ``srun`` failed before its step reached them (the check pod's own Slurm config,
  plugins or credentials; listed under ``errors`` too): that says nothing about the node.

Outcomes: ``passed``; ``slow`` (average bus bandwidth under the threshold); ``failed`` (``#wrong`` above
zero, nccl-tests failure, non-zero exit, no or truncated output); ``timedOut``; ``skipped``.

A run that failed the same way on every node it tested (two or more nodes, the same message once
node names are taken out), or that could not even start the program (not found, a library missing in
the jail), is the CHECK's failure, not the nodes': it drains nobody (nodes it had drained before keep
their drain) and says why in ``checkFailed``; the operator shows that in status and a Warning Event.

Otherwise slow, failed and timed-out nodes are drained with a reason that starts with ``warden-health:``::

    warden-health: nccl all_reduce_perf busbw 12.3 GB/s < 100.0 GB/s
    warden-health: nccl all_reduce_perf failed: 24 wrong values
    warden-health: nccl all_reduce_perf timed out after 600s

(``sinfo -R`` cuts reasons at 20 characters; ``sinfo -R -o "%100E %9u %19H %N"`` shows them whole:
they run to 100 characters.)
Before draining, the node is read again: a drain someone else placed in the meantime is left as is.
Single-GPU nodes report a bus bandwidth of 0 by definition; for them only correctness is judged.

The summary printed on stdout (JSON, one object)::

    {
      "lastRunTime": "2026-11-22T04:00:00Z",      # when the run started, UTC
      "thresholdGBps": 100.0,
      "nodesChecked": 3,                          # nodes where the test ran
      "passed": ["gpu-0"],
      "drained": [{"node": "gpu-1", "reason": "warden-health: ..."}],
      "resumed": ["gpu-2"],                       # drained by this check before, passing now
      "skipped": [{"node": "gpu-3", "why": "busy (MIXED)"}],
      "errors": ["..."],                          # Slurm calls that failed (node left as it was)
      "checkFailed": null,                        # or why the run itself failed (nobody drained)
      "nodes": [{"node": "gpu-1", "outcome": "slow", "busbwGBps": 12.3,
                 "detail": "...", "action": "drained"}]
    }
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from warden import kubetime
from warden.health.nccl import ParseStatus, parse_all_reduce_perf
from warden.slurm import reasons
from warden.slurm.cli import Slurm, StepResult, first_line
from warden.slurm.model import Node, SlurmError

__all__ = [
    "CheckConfig",
    "NodeReport",
    "Outcome",
    "Summary",
    "act",
    "check_failure",
    "measure_node",
    "run_checks",
]

_REASON_MAX = 100


class Outcome(StrEnum):
    PASSED = "passed"
    SLOW = "slow"
    FAILED = "failed"
    TIMED_OUT = "timedOut"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class CheckConfig:
    threshold_gbps: float = 100.0
    min_bytes: str = "512M"
    max_bytes: str = "8G"
    step_factor: int = 2
    time_limit_s: int = 600
    immediate_s: int = 60  # how long srun waits for the node before calling it taken
    grace_s: int = 90  # Slurm enforces time limits every ~30 s, then waits KillWait
    concurrency: int = 4
    binary: str = "all_reduce_perf"
    extra_args: tuple[str, ...] = ()
    partition: str | None = None
    reservation_user: str = "root"
    dry_run: bool = False  # test, report, but neither drain nor resume

    @property
    def step_timeout_s(self) -> float:
        return float(self.immediate_s + self.time_limit_s + self.grace_s)

    def command(self, gpus: int) -> list[str]:
        return [
            self.binary,
            "-b",
            self.min_bytes,
            "-e",
            self.max_bytes,
            "-f",
            str(self.step_factor),
            "-g",
            str(max(1, gpus)),
            *self.extra_args,
        ]


@dataclass
class NodeReport:
    node: str
    outcome: Outcome
    detail: str = ""
    busbw_gbps: float | None = None
    action: str = "none"  # none | drained | resumed | left-drained-by-other | restored-drain
    reason: str = ""  # the drain reason set, when action is drained

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "outcome": str(self.outcome),
            "busbwGBps": self.busbw_gbps,
            "detail": self.detail,
            "action": self.action,
        }


@dataclass
class Summary:
    started: datetime
    threshold_gbps: float
    reports: list[NodeReport]
    errors: list[str] = field(default_factory=list)
    check_failed: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "lastRunTime": kubetime.stamp(self.started),
            "thresholdGBps": self.threshold_gbps,
            "nodesChecked": sum(r.outcome is not Outcome.SKIPPED for r in self.reports),
            "passed": [r.node for r in self.reports if r.outcome is Outcome.PASSED],
            "drained": [{"node": r.node, "reason": r.reason} for r in self.reports if r.action == "drained"],
            "resumed": [r.node for r in self.reports if r.action == "resumed"],
            "skipped": [{"node": r.node, "why": r.detail} for r in self.reports if r.outcome is Outcome.SKIPPED],
            "errors": list(self.errors),
            "checkFailed": self.check_failed,
            "nodes": [r.to_json() for r in self.reports],
        }


def _short(text: str, limit: int = _REASON_MAX) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def drain_reason(outcome: Outcome, detail: str, busbw: float | None, cfg: CheckConfig) -> str:
    if outcome is Outcome.SLOW and busbw is not None:
        text = f"nccl all_reduce_perf busbw {busbw:.1f} GB/s < {cfg.threshold_gbps:.1f} GB/s"
    elif outcome is Outcome.TIMED_OUT:
        text = f"nccl all_reduce_perf timed out after {cfg.time_limit_s}s"
    else:
        text = f"nccl all_reduce_perf failed: {detail}"
    return _short(f"{reasons.HEALTH_CHECK} {text}")


def ours(node: Node) -> bool:
    """Drained by this check (and by nothing else since)."""
    return node.drained and node.reason.startswith(reasons.HEALTH_CHECK)


def why_skip(node: Node, explicit: bool) -> str | None:
    """Why ``node`` is not tested now, or ``None`` when it is."""
    if node.gpus == 0 and not explicit:
        return "no GPU gres"
    if node.down:
        held = f": {node.held_reason}" if node.held_reason else ""
        return f"down ({node.describe_state()}){held}"
    if node.drained and not ours(node):
        return f"drained by someone else: {node.reason or '(no reason)'}"
    if node.busy:
        return f"busy ({node.describe_state()})"
    if node.state != "IDLE":
        return f"not idle ({node.describe_state()})"
    return None


def classify(step: StepResult, gpus: int, cfg: CheckConfig) -> tuple[Outcome, str, float | None]:
    cmd = step.command
    if cmd.timed_out or step.hit_time_limit:
        return Outcome.TIMED_OUT, f"no result within {cfg.time_limit_s}s", None
    if step.not_allocated:
        return Outcome.SKIPPED, f"not allocated: {first_line(cmd.stderr)}", None
    if step.launch_failed:  # a broken check pod (config, plugins, credentials) says nothing about the node
        return Outcome.SKIPPED, f"srun failed before reaching the node: {first_line(cmd.stderr)}", None
    parsed = parse_all_reduce_perf(cmd.stdout)
    stderr_failures = parse_all_reduce_perf(cmd.stderr).errors
    errors = parsed.errors + stderr_failures
    busbw = parsed.avg_busbw_gbps
    if cmd.returncode != 0:
        why = first_line(errors[0]) if errors else first_line(cmd.stderr) or "(no message)"
        return Outcome.FAILED, _short(f"exit {cmd.returncode}: {why}", 160), busbw
    if errors:
        return Outcome.FAILED, _short(first_line(errors[0], 160), 160), busbw
    if parsed.status is ParseStatus.EMPTY:
        return Outcome.FAILED, "no all_reduce_perf output", None
    if parsed.status is ParseStatus.TRUNCATED or busbw is None:
        return Outcome.FAILED, "output truncated", busbw
    if parsed.status is ParseStatus.WRONG_VALUES:
        return Outcome.FAILED, f"{parsed.wrong} wrong values", busbw
    if gpus < 2:
        return Outcome.PASSED, "single GPU: bus bandwidth not compared", busbw
    if busbw < cfg.threshold_gbps:
        return Outcome.SLOW, f"busbw {busbw:.1f} GB/s < {cfg.threshold_gbps:.1f} GB/s", busbw
    return Outcome.PASSED, f"busbw {busbw:.1f} GB/s", busbw


def _reservation_name(node: str) -> str:
    return f"warden-health-{node}"


def measure_node(slurm: Slurm, node: Node, cfg: CheckConfig, errors: list[str]) -> NodeReport:
    """Test one node that ``why_skip`` let through (a node this check drained is resumed inside a
    reservation for it); ``act`` then drains or resumes it as the result says."""
    name = node.name
    retest = ours(node)
    reservation: str | None = None
    if retest:
        if cfg.dry_run:
            return NodeReport(name, Outcome.SKIPPED, "drained by warden-health; dry run does not re-test")
        reservation = _reservation_name(name)
        minutes = math.ceil(cfg.step_timeout_s / 60) + 1
        try:
            slurm.create_reservation(reservation, [name], cfg.reservation_user, minutes)
        except SlurmError as e:
            return NodeReport(name, Outcome.SKIPPED, _short(f"could not reserve it for a re-test: {e}"))
    try:
        if retest:
            try:
                current = slurm.get_node(name)
                if not ours(current):
                    return NodeReport(name, Outcome.SKIPPED, "its drain reason changed; left alone")
                slurm.resume(name)
            except SlurmError as e:
                return NodeReport(name, Outcome.SKIPPED, _short(f"could not resume it for a re-test: {e}"))
        gpus = node.gpus
        step = slurm.run_step(
            name,
            cfg.command(gpus),
            gpus=gpus,
            time_limit_s=cfg.time_limit_s,
            timeout=cfg.step_timeout_s,
            immediate_s=cfg.immediate_s,
            reservation=reservation,
            # a GPU node is often only in its own partition, not the default one
            partition=cfg.partition or ",".join(node.partitions) or None,
        )
    finally:
        if reservation is not None:
            try:
                slurm.delete_reservation(reservation)
            except SlurmError as e:
                errors.append(str(e))
    outcome, detail, busbw = classify(step, gpus, cfg)
    if step.launch_failed:
        errors.append(f"{name}: {detail}")
    return NodeReport(name, outcome, detail, busbw)


#: What srun or the loader print when the program cannot start at all: the jail's fault, never a node's.
_CANNOT_START = ("execve()", "command not found", "error while loading shared libraries", "No such file or directory")


def check_failure(reports: Sequence[NodeReport]) -> str | None:
    """Why the run as a whole failed, or None: every tested node failed with the same message (names
    of nodes taken out) and there were two or more of them, or the program could not start."""
    tested = [r for r in reports if r.outcome is not Outcome.SKIPPED]
    if not tested or any(r.outcome is not Outcome.FAILED for r in tested):
        return None
    messages = {r.detail.replace(r.node, "<node>") for r in tested}
    if len(messages) != 1:
        return None
    (message,) = messages
    if len(tested) < 2 and not any(m in message for m in _CANNOT_START):
        return None  # one node failing is that node's result
    count = "the only node" if len(tested) == 1 else f"all {len(tested)} nodes"
    return _short(f"all_reduce_perf failed the same way on {count} tested: {message}", 300)


def act(
    slurm: Slurm, before: Node, report: NodeReport, cfg: CheckConfig, errors: list[str], check_failed: bool = False
) -> None:
    """Drain or resume ``before`` as ``report`` says; when the whole run failed (``check_failed``),
    drain nobody and put back the drains of nodes resumed for a re-test."""
    if cfg.dry_run:
        return
    retest = ours(before)
    try:
        if check_failed and report.outcome is not Outcome.PASSED:
            if retest:
                slurm.drain(before.name, before.reason)
                report.action = "restored-drain"
            return
        if report.outcome is Outcome.PASSED:
            if retest:
                report.action = "resumed"
            return
        if report.outcome is Outcome.SKIPPED:
            if retest:  # resumed for a test that never ran: put the old drain back
                slurm.drain(before.name, before.reason)
                report.action = "restored-drain"
            return
        current = slurm.get_node(before.name)
        if current.drained and not ours(current):
            report.action = "left-drained-by-other"
            return
        reason = drain_reason(report.outcome, report.detail, report.busbw_gbps, cfg)
        slurm.drain(before.name, reason)
        report.action, report.reason = "drained", reason
    except SlurmError as e:
        errors.append(str(e))


def run_checks(
    slurm: Slurm,
    cfg: CheckConfig,
    nodes: Sequence[str] | None = None,
    *,
    now: datetime | None = None,
) -> Summary:
    """Check ``nodes`` (default: every node with GPUs) and return what happened."""
    started = now or datetime.now(UTC)
    listed = {n.name: n for n in slurm.list_nodes()}
    explicit = nodes is not None
    names = list(nodes) if nodes is not None else sorted(n for n, node in listed.items() if node.gpus > 0)
    reports: dict[str, NodeReport] = {}
    todo: list[Node] = []
    for name in names:
        node = listed.get(name)
        if node is None:
            reports[name] = NodeReport(name, Outcome.SKIPPED, "not a Slurm node")
            continue
        why = why_skip(node, explicit)
        if why is not None:
            reports[name] = NodeReport(name, Outcome.SKIPPED, why)
        else:
            todo.append(node)
    errors: list[str] = []
    with ThreadPoolExecutor(max_workers=max(1, cfg.concurrency)) as pool:
        tested = list(pool.map(lambda n: measure_node(slurm, n, cfg, errors), todo))
    failed = check_failure(tested)
    for node, report in zip(todo, tested, strict=True):
        act(slurm, node, report, cfg, errors, check_failed=failed is not None)
        reports[report.node] = report
    return Summary(started, cfg.threshold_gbps, [reports[n] for n in names], errors, failed)
