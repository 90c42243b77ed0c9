"""The operator's own Prometheus metrics (``warden-operator --metrics-port``, path ``/metrics``).

One registry, ``REGISTRY``; the instruments below are what the code counts, each where the thing
happens: reconciles in ``warden.handlers``, leadership in
``warden.leader.elector``, failed steps in ``warden.kube.apply.run_steps``, API writes in
``Kube.call``, Slurm actions in ``warden.slurmsync``. The NCCL figures are read from the health
reports the operator already watches (``NcclReports``), computed at scrape time so that "seconds
since the last run" is true when Prometheus asks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from warden import kubetime

CLUSTER_LABEL = "slurm_cluster"

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)

RECONCILES = Counter(
    "warden_reconciles", "Reconciles of a SlurmCluster by outcome: complete, incomplete (retried), invalid",
    [CLUSTER_LABEL, "outcome"], registry=REGISTRY,
)  # fmt: skip
RECONCILE_SECONDS = Histogram(
    "warden_reconcile_duration_seconds", "Time one reconcile took (render, apply, prune, status)",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120), registry=REGISTRY,
)  # fmt: skip
STEP_ERRORS = Counter(
    "warden_reconcile_step_errors", "Reconcile steps the API refused, by step (the kind applied, or prune)",
    [CLUSTER_LABEL, "step"], registry=REGISTRY,
)  # fmt: skip
API_WRITES = Counter(
    "warden_api_writes", "Writes to the Kubernetes API by verb and resource", ["verb", "resource"], registry=REGISTRY
)
SLURM_ACTIONS = Counter(
    "warden_slurm_actions",
    "Actions the operator took on Slurm nodes, by the Event reason that announces them (SlurmNodeCordoned, "
    "ScaleInDraining, UpgradeDraining, GhostNodeRemoved...) and result",
    [CLUSTER_LABEL, "action", "result"], registry=REGISTRY,
)  # fmt: skip
SLURM_SYNC_SECONDS = Histogram(
    "warden_slurm_sync_duration_seconds", "Time one look at a cluster's Slurm side took",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=REGISTRY,
)  # fmt: skip
LEADING = Gauge(
    "warden_operator_leading", "1 on the operator replica that holds the leader Lease and acts, 0 on a standby;"
    " the label is the replica's identity (its pod's name)", ["identity"], registry=REGISTRY,
)  # fmt: skip
HEALTH_CHECK_ACTIONS = Counter(
    "warden_health_check_node_actions", "Nodes the NCCL health check drained or resumed, as its reports announce",
    [CLUSTER_LABEL, "action"], registry=REGISTRY,
)  # fmt: skip


def api_resource(path: str) -> str:
    """The resource an API path names: ``/apis/apps/v1/namespaces/x/statefulsets/y`` → ``statefulsets``,
    ``.../pods/p/status`` → ``pods/status``."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if "namespaces" in parts and parts.index("namespaces") + 2 < len(parts):
        parts = parts[parts.index("namespaces") + 2 :]
    elif parts[:1] == ["api"]:
        parts = parts[2:]
    elif parts[:1] == ["apis"]:
        parts = parts[3:]
    if not parts:
        return "unknown"
    return f"{parts[0]}/{parts[2]}" if len(parts) >= 3 else parts[0]


class NcclReports(Collector):
    """The last NCCL health report of each cluster (its ConfigMap's JSON, as ``warden.health.check``
    writes it), served per node: when it was last run, its bus bandwidth, and how long ago that was."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._reports: dict[str, dict[str, Any]] = {}

    def update(self, cluster: str, report: dict[str, Any] | None) -> None:
        with self._lock:
            if report is None:
                self._reports.pop(cluster, None)
            else:
                self._reports[cluster] = report

    def forget(self, cluster: str) -> None:
        self.update(cluster, None)

    def collect(self) -> Iterable[Metric]:
        def gauge(name: str, help: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, help, labels=[CLUSTER_LABEL, "node"])

        last = gauge("warden_nccl_last_run_timestamp_seconds", "When the last NCCL check of the node ran (Unix time)")
        age = gauge("warden_nccl_seconds_since_last_run", "Seconds since the last NCCL check of the node")
        busbw = gauge("warden_nccl_bus_bandwidth_gbps", "all_reduce_perf's bus bandwidth at the node's last check")
        passed = gauge("warden_nccl_check_passed", "1 when the node passed its last NCCL check, 0 when it did not")
        now = self.clock()
        with self._lock:
            reports = dict(self._reports)
        for cluster, report in sorted(reports.items()):
            when = kubetime.epoch(report.get("lastRunTime"))
            for node in report.get("nodes") or []:
                if not isinstance(node, dict) or not node.get("node") or node.get("outcome") == "skipped":
                    continue
                key = [cluster, str(node["node"])]
                if when is not None:
                    last.add_metric(key, when)
                    age.add_metric(key, max(now - when, 0.0))
                if isinstance(node.get("busbwGBps"), int | float):
                    busbw.add_metric(key, float(node["busbwGBps"]))
                passed.add_metric(key, 1 if node.get("outcome") == "passed" else 0)
        return [last, age, busbw, passed]


NCCL = NcclReports()
REGISTRY.register(NCCL)


#: the sample names a family of each type is exposed under, in Prometheus's text format
EXPOSED_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


def exposed_names(families: Iterable[Metric]) -> set[str]:
    """Every series name the families are exposed under (``warden_reconciles`` → ``warden_reconciles_total``),
    whether or not they have samples yet: what a dashboard's query may name."""
    names: set[str] = set()
    for family in families:
        suffixes = EXPOSED_SUFFIXES.get(family.type, ("",))
        names.update(family.name + suffix for suffix in suffixes)
    return names
