"""Read the state of a cluster's children from the API (through the apply layer's reader)."""

from __future__ import annotations

import json
from typing import Any

from warden import imagepulls
from warden.kube.client import Kube
from warden.model import API_GROUP, API_VERSION, WORKER_SET_KIND
from warden.naming import COMPONENT_LABEL, SLURM_SERIES_ENV
from warden.render.backup import COMPONENT as BACKUP_COMPONENT
from warden.render.context import Cluster
from warden.render.health import REPORT_KEY
from warden.render.pods import Manifest
from warden.slurm import confighash
from warden.status import Observed, Workload, backup_status
from warden.upgrade import planner

#: the pods whose Slurm series an upgrade follows, by their component label
SLURM_PARTS = ("accounting", "controller", "restapi", "worker", "login")


def workload(sts: Manifest | None) -> Workload:
    """A StatefulSet, Deployment or WorkerSet: how many pods it wants, how many are ready."""
    if sts is None:
        return Workload()
    desired = int(sts.get("spec", {}).get("replicas", 1))
    status = sts.get("status", {})
    # Pods of an older revision count: a rolling restart does not make the cluster "not ready".
    return Workload(
        exists=True,
        desired=desired,
        ready=int(status.get("readyReplicas", 0)),
        waits_for_window=str(status.get("upgradeWaitsForWindow") or ""),
    )


def job_outcome(job: Manifest | None) -> tuple[bool, bool]:
    """(succeeded, failed) of a Job."""
    if job is None:
        return False, False
    conditions = job.get("status", {}).get("conditions", [])
    done = {c["type"] for c in conditions if c.get("status") == "True"}
    return "Complete" in done or job.get("status", {}).get("succeeded", 0) > 0, "Failed" in done


def container_series(pod_spec: Manifest) -> tuple[str | None, str | None]:
    """(container name, series) of the first container that was given ``WARDEN_SLURM_SERIES``."""
    for c in pod_spec.get("containers") or []:
        for env in c.get("env") or []:
            if env.get("name") == SLURM_SERIES_ENV:
                return c.get("name"), env.get("value")
    return None, None


def pod_series(pod: Manifest) -> planner.PodSeries:
    """A pod as an upgrade sees it: its series, Ready, and whether its Slurm container ever ran."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    container, series = container_series(spec)
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    ran = False
    for cs in status.get("containerStatuses") or []:
        if container is not None and cs.get("name") != container:
            continue
        state, last = cs.get("state") or {}, cs.get("lastState") or {}
        ran = ran or bool(state.get("running") or state.get("terminated") or last.get("terminated"))
        ran = ran or int(cs.get("restartCount", 0)) > 0
    return planner.PodSeries(
        name=pod["metadata"]["name"],
        series=series,
        ready=ready,
        ran=ran,
        deleting=bool(pod["metadata"].get("deletionTimestamp")),
    )


def slurm_parts(
    pods: list[Manifest], job: Manifest | None, desired: dict[str, int], slurmd_versions: dict[str, int]
) -> planner.Observation:
    """What a Slurm upgrade looks at: every Slurm pod's series, the populate Job's."""
    by_part: dict[str, list[planner.PodSeries]] = {part: [] for part in SLURM_PARTS}
    for pod in pods:
        part = (pod["metadata"].get("labels") or {}).get(COMPONENT_LABEL, "")
        phase = (pod.get("status") or {}).get("phase")
        if part in by_part and phase not in ("Succeeded", "Failed"):
            by_part[part].append(pod_series(pod))
    jail_series = None
    if job is not None:
        _, jail_series = container_series(((job.get("spec") or {}).get("template") or {}).get("spec") or {})
    return planner.Observation(
        pods={part: tuple(sorted(p, key=lambda x: x.name)) for part, p in by_part.items()},
        desired=desired,
        jail_series=jail_series,
        jail_complete=job_outcome(job)[0],
        slurmd_versions=slurmd_versions,
    )


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


def observe(kube: Kube, cluster: Cluster, slurmd_versions: dict[str, int] | None = None) -> Observed:
    """``slurmd_versions``: registered worker nodes by slurmd version, as slurmrestd last said."""
    slurmd_versions = slurmd_versions or {}
    names = cluster.names
    ns = cluster.namespace

    def sts(name: str) -> Manifest | None:
        return kube.get("apps/v1", "StatefulSet", ns, name)

    def worker_set(name: str) -> Manifest | None:
        return kube.get(f"{API_GROUP}/{API_VERSION}", WORKER_SET_KIND, ns, name)

    job = kube.get("batch/v1", "Job", ns, names.populate_jail)
    populated, failed = job_outcome(job)
    accounting = None
    if cluster.spec.accounting.mode != "Disabled":
        dbd = workload(sts(names.accounting))
        if cluster.spec.accounting.mode == "InCluster":
            db = workload(sts(names.mariadb))
            dbd = Workload(exists=dbd.exists and db.exists, desired=dbd.desired, ready=min(dbd.ready, db.ready))
        accounting = dbd
    report = None
    if cluster.spec.health_checks.nccl.enabled and cluster.gpu_groups:
        report = health_report(kube.get("v1", "ConfigMap", ns, names.nccl_check))
    controller = workload(sts(names.controller))
    restapi = workload(kube.get("apps/v1", "Deployment", ns, names.restapi))
    login = workload(sts(names.login))
    workers = {g.name: workload(worker_set(names.worker(g.name))) for g in cluster.spec.worker_groups}
    desired = {
        "accounting": workload(sts(names.accounting)).desired if accounting is not None else 0,
        "controller": controller.desired,
        "restapi": restapi.desired,
        "worker": sum(w.desired for w in workers.values()),
        "login": login.desired,
    }
    pods = kube.list("v1", "Pod", ns, names.instance_selector())
    slurm_config = kube.get("v1", "ConfigMap", ns, names.slurm_config)
    jail_backup = None
    if cluster.spec.jail.backup.enabled:
        runs = [p for p in pods if (p["metadata"].get("labels") or {}).get(COMPONENT_LABEL) == BACKUP_COMPONENT]
        jail_backup = backup_status(kube.get("batch/v1", "CronJob", ns, names.jail_backup), runs)
    return Observed(
        controller=controller,
        restapi=restapi,
        login=login,
        workers=workers,
        jail_populated=populated,
        jail_failed=failed and not populated,
        accounting=accounting,
        health_report=report,
        parts=slurm_parts(pods, job, desired, slurmd_versions),
        image_pulls=tuple(f for pod in pods for f in imagepulls.failures(pod)),
        jail_backup=jail_backup,
        config_stamp=confighash.of_text(((slurm_config or {}).get("data") or {}).get(confighash.SLURM_CONF, "")),
    )
