"""Slurm's state as Prometheus metric families: pure functions of what slurmrestd answered.

``warden.exporter.main`` reads a ``Snapshot`` (nodes, jobs, scheduler statistics, slurmdbd's reachability)
at each scrape and serves ``families(snapshot)``. Every family is always there (with no samples when
Slurm did not answer), so a dashboard's query never names a metric that is missing.

Labels: ``slurm_cluster`` is ``<namespace>/<name>`` of the SlurmCluster on every series (one Prometheus,
many clusters). Node states are one word (``node_state``) and a drain's reason one class
(``warden.slurm.reasons.reason_class``), so "drained by a health check" is a label match, not a regular expression.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily, Metric

from warden import naming
from warden.slurm.model import Job, Node
from warden.slurm.reasons import reason_class

CLUSTER_LABEL = "slurm_cluster"

#: ``sdiag`` figures served, as (diag key, metric name, help, factor): times in microseconds become seconds
SCHEDULER_STATS: tuple[tuple[str, str, str, float], ...] = (
    ("server_thread_count", "slurm_scheduler_threads", "slurmctld server threads now", 1.0),
    ("agent_queue_size", "slurm_scheduler_agent_queue_size", "RPCs queued for slurmctld's agent", 1.0),
    ("dbd_agent_queue_size", "slurm_scheduler_dbd_agent_queue_size",
     "Messages queued for slurmdbd (grows while slurmdbd is unreachable)", 1.0),
    ("schedule_queue_length", "slurm_scheduler_queue_length", "Jobs the main scheduler looked at last", 1.0),
    ("schedule_cycle_last", "slurm_scheduler_cycle_last_seconds", "Last main scheduling cycle", 1e-6),
    ("schedule_cycle_mean", "slurm_scheduler_cycle_mean_seconds", "Mean main scheduling cycle", 1e-6),
    ("schedule_cycle_max", "slurm_scheduler_cycle_max_seconds", "Longest main scheduling cycle", 1e-6),
    ("schedule_cycle_total", "slurm_scheduler_cycles", "Main scheduling cycles since sdiag's last reset", 1.0),
    ("bf_active", "slurm_backfill_active", "1 while the backfill scheduler runs", 1.0),
    ("bf_backfilled_jobs", "slurm_backfill_jobs", "Jobs started by backfill since sdiag's last reset", 1.0),
    ("bf_cycle_last", "slurm_backfill_cycle_last_seconds", "Last backfill cycle", 1e-6),
    ("bf_cycle_mean", "slurm_backfill_cycle_mean_seconds", "Mean backfill cycle", 1e-6),
    ("bf_queue_len", "slurm_backfill_queue_length", "Jobs the last backfill cycle looked at", 1.0),
    ("bf_last_depth", "slurm_backfill_last_depth", "Jobs the last backfill cycle tried", 1.0),
)  # fmt: skip
#: sdiag's job counters (since its last reset: midnight or slurmctld's start), by event
JOB_EVENTS = ("submitted", "started", "completed", "canceled", "failed")


@dataclass(frozen=True)
class Snapshot:
    """What one scrape read. ``up``: slurmctld answered slurmrestd's ping and its node and job reads
    (else the families of nodes, jobs and the scheduler have no samples)."""

    cluster: str  # <namespace>/<name>
    up: bool
    nodes: list[Node] = field(default_factory=list)
    jobs: list[Job] = field(default_factory=list)
    diag: Mapping[str, float] = field(default_factory=dict)
    #: None: the cluster keeps no accounting (no slurmdbd to reach)
    slurmdbd_reachable: bool | None = None
    collect_seconds: float = 0.0
    errors: Mapping[str, int] = field(default_factory=dict)  # what failed this scrape: "nodes", "jobs", ...


def node_state(node: Node) -> str:
    """One word per node: ``down``, ``drained`` (drained and idle), ``draining`` (drained, jobs still on
    it), ``allocated``, ``mixed``, ``completing``, ``idle`` or ``unknown``."""
    if node.down:
        return "down"
    if node.drained:
        return "draining" if node.busy else "drained"
    if node.state in ("ALLOCATED", "MIXED"):
        return node.state.lower()
    if "COMPLETING" in node.flags:
        return "completing"
    return "idle" if node.state == "IDLE" else "unknown"


def worker_group(node: Node) -> str:
    """The worker group a node registered for (its ``warden-group-<name>`` feature); ``""`` if none."""
    prefix = naming.group_feature("")
    return next((f.removeprefix(prefix) for f in node.features if f.startswith(prefix)), "")


def _usable(node: Node) -> bool:
    return not (node.down or node.drained)


class _Capacity:
    """CPUs and GPUs: total, held by jobs, and free on nodes that take jobs (drained and down nodes'
    free ones are neither allocated nor idle)."""

    def __init__(self) -> None:
        self.values: defaultdict[tuple[str, str, str], float] = defaultdict(float)

    def add(self, key: str, node: Node) -> None:
        for what, total, used in (("cpus", node.cpus, node.alloc_cpus), ("gpus", node.gpus, node.gpus_used)):
            self.values[(key, what, "total")] += total
            self.values[(key, what, "allocated")] += used
            self.values[(key, what, "idle")] += max(total - used, 0) if _usable(node) else 0


def _gauge(name: str, help: str, labels: Iterable[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help, labels=[CLUSTER_LABEL, *labels])


def _node_families(snap: Snapshot) -> list[Metric]:
    c = snap.cluster
    counts = _gauge("slurm_nodes", "Slurm nodes by worker group, state and reason class",
                    ["worker_group", "state", "reason_class"])  # fmt: skip
    per_node = _gauge("slurm_node_state", "1 per Slurm node, labelled with its state and reason class",
                      ["node", "worker_group", "state", "reason_class"])  # fmt: skip
    reasons = _gauge("slurm_node_reason", "1 per drained or down node, labelled with the reason Slurm keeps "
                     "(as `sinfo -R` shows it)", ["node", "reason_class", "reason"])  # fmt: skip
    tally: Counter[tuple[str, str, str]] = Counter()
    by_partition, by_group = _Capacity(), _Capacity()
    for node in snap.nodes:
        group, state, cls = worker_group(node), node_state(node), reason_class(node)
        tally[(group, state, cls)] += 1
        per_node.add_metric([c, node.name, group, state, cls], 1)
        if node.held_reason:
            reasons.add_metric([c, node.name, cls, node.held_reason], 1)
        by_group.add(group, node)
        for partition in node.partitions:
            by_partition.add(partition, node)
    for (group, state, cls), n in sorted(tally.items()):
        counts.add_metric([c, group, state, cls], n)
    out: list[Metric] = [counts, per_node, reasons]
    for scope, label, capacity in (("partition", "partition", by_partition), ("worker_group", "worker_group",
                                                                            by_group)):  # fmt: skip
        for what in ("cpus", "gpus"):
            for status in ("total", "allocated", "idle"):
                family = _gauge(f"slurm_{scope}_{what}_{status}", f"{what.upper()} {status} per {label}", [label])
                for (key, w, s), value in sorted(capacity.values.items()):
                    if w == what and s == status:
                        family.add_metric([c, key], value)
                out.append(family)
    return out


def _job_families(snap: Snapshot) -> list[Metric]:
    c = snap.cluster
    by_state = _gauge("slurm_jobs", "Jobs slurmctld lists, by partition and state (ended jobs stay listed "
                      "for MinJobAge)", ["partition", "state"])  # fmt: skip
    cpus = _gauge("slurm_jobs_cpus", "CPUs of the jobs slurmctld lists, by partition and state",
                  ["partition", "state"])  # fmt: skip
    pending = _gauge("slurm_jobs_pending", "Pending jobs by partition and the reason they wait",
                     ["partition", "reason"])  # fmt: skip
    jobs: Counter[tuple[str, str]] = Counter()
    job_cpus: Counter[tuple[str, str]] = Counter()
    waits: Counter[tuple[str, str]] = Counter()
    for job in snap.jobs:
        key = (job.partition, job.state.lower())
        jobs[key] += 1
        job_cpus[key] += job.cpus
        if job.state == "PENDING":
            waits[(job.partition, job.state_reason)] += 1
    for (partition, state), n in sorted(jobs.items()):
        by_state.add_metric([c, partition, state], n)
        cpus.add_metric([c, partition, state], job_cpus[(partition, state)])
    for (partition, reason), n in sorted(waits.items()):
        pending.add_metric([c, partition, reason], n)
    return [by_state, cpus, pending]


def _scheduler_families(snap: Snapshot) -> list[Metric]:
    c = snap.cluster
    out: list[Metric] = []
    for key, name, help, factor in SCHEDULER_STATS:
        family = _gauge(name, help, [])
        if key in snap.diag:
            family.add_metric([c], snap.diag[key] * factor)
        out.append(family)
    events = _gauge("slurm_scheduler_jobs", "Jobs by event since sdiag's last reset (midnight or slurmctld's start)",
                    ["event"])  # fmt: skip
    for event in JOB_EVENTS:
        if f"jobs_{event}" in snap.diag:
            events.add_metric([c, event], snap.diag[f"jobs_{event}"])
    return [*out, events]


def families(snap: Snapshot) -> list[Metric]:
    """Every family the exporter serves, for one snapshot."""
    c = snap.cluster
    up = _gauge("slurm_up", "1 when slurmctld answered a ping, a node read and a job read at this scrape", [])
    up.add_metric([c], 1 if snap.up else 0)
    dbd = _gauge("slurm_slurmdbd_reachable", "1 when slurmdbd's port answers (clusters with accounting only)", [])
    if snap.slurmdbd_reachable is not None:
        dbd.add_metric([c], 1 if snap.slurmdbd_reachable else 0)
    took = _gauge("slurm_exporter_collect_seconds", "Time this scrape took to read Slurm", [])
    took.add_metric([c], snap.collect_seconds)
    errors = _gauge("slurm_exporter_errors", "Reads of Slurm that failed at this scrape, by what was read", ["what"])
    for what, n in sorted(snap.errors.items()):
        errors.add_metric([c, what], n)
    return [up, dbd, took, errors, *_node_families(snap), *_job_families(snap), *_scheduler_families(snap)]
