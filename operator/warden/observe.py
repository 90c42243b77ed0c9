"""Read the state of a cluster's children from the API (through the apply layer's reader)."""

from __future__ import annotations

import json
from typing import Any

from warden.apply import Applier
from warden.model import API_GROUP, API_VERSION, WORKER_SET_KIND
from warden.render.context import Cluster
from warden.render.health import REPORT_KEY
from warden.render.pods import Manifest
from warden.status import Observed, Workload


def workload(sts: Manifest | None) -> Workload:
    """A StatefulSet, Deployment or WorkerSet: how many pods it wants, how many are ready."""
    if sts is None:
        return Workload()
    desired = int(sts.get("spec", {}).get("replicas", 1))
    status = sts.get("status", {})
    # Pods of an older revision count: a rolling restart does not make the cluster "not ready".
    return Workload(exists=True, desired=desired, ready=int(status.get("readyReplicas", 0)))


def job_outcome(job: Manifest | None) -> tuple[bool, bool]:
    """(succeeded, failed) of a Job."""
    if job is None:
        return False, False
    conditions = job.get("status", {}).get("conditions", [])
    done = {c["type"] for c in conditions if c.get("status") == "True"}
    return "Complete" in done or job.get("status", {}).get("succeeded", 0) > 0, "Failed" in done


def health_report(cm: Manifest | None) -> dict[str, Any] | None:
    if cm is None:
        return None
    text = (cm.get("data") or {}).get(REPORT_KEY)
    if not text:
        return None
    try:
        report = json.loads(text)
    except ValueError:
        return None
    return report if isinstance(report, dict) else None


def observe(applier: Applier, cluster: Cluster) -> Observed:
    names = cluster.names
    ns = cluster.namespace

    def sts(name: str) -> Manifest | None:
        return applier.get("apps/v1", "StatefulSet", ns, name)

    def worker_set(name: str) -> Manifest | None:
        return applier.get(f"{API_GROUP}/{API_VERSION}", WORKER_SET_KIND, ns, name)

    populated, failed = job_outcome(applier.get("batch/v1", "Job", ns, names.populate_jail))
    accounting = None
    if cluster.spec.accounting.mode != "Disabled":
        dbd = workload(sts(names.accounting))
        if cluster.spec.accounting.mode == "InCluster":
            db = workload(sts(names.mariadb))
            dbd = Workload(exists=dbd.exists and db.exists, desired=dbd.desired, ready=min(dbd.ready, db.ready))
        accounting = dbd
    report = None
    if cluster.spec.health_checks.nccl.enabled and cluster.gpu_groups:
        report = health_report(applier.get("v1", "ConfigMap", ns, names.nccl_check))
    return Observed(
        controller=workload(sts(names.controller)),
        restapi=workload(applier.get("apps/v1", "Deployment", ns, names.restapi)),
        login=workload(sts(names.login)),
        workers={g.name: workload(worker_set(names.worker(g.name))) for g in cluster.spec.worker_groups},
        jail_populated=populated,
        jail_failed=failed and not populated,
        accounting=accounting,
        health_report=report,
    )
