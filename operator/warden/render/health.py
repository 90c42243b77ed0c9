"""The NCCL health check: a CronJob running `warden-health-check` against Slurm.

The check's summary goes into the ConfigMap `<cluster>-nccl-check` (made empty here, written by the
Job through its own ServiceAccount, limited to that one object); the operator folds it into status.
"""

from __future__ import annotations

import math

from warden.render.context import Cluster
from warden.render.pods import (
    POD_DEFAULTS,
    Manifest,
    dns_config,
    meta,
    runtime_files_outside_jail,
    slurm_container,
    slurm_mounts,
    slurm_volumes,
)

COMPONENT = "health-check"
REPORT_KEY = "report.json"


def report_config_map(cluster: Cluster) -> Manifest:
    # No `data`: server-side apply then never owns (and never resets) what the Job writes.
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(cluster, cluster.names.nccl_check, COMPONENT)}


def service_account(cluster: Cluster) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": meta(cluster, cluster.names.health_check_account, COMPONENT),
        "automountServiceAccountToken": True,
    }


def role(cluster: Cluster) -> Manifest:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": meta(cluster, cluster.names.health_check_account, COMPONENT),
        "rules": [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [cluster.names.nccl_check],
                "verbs": ["get", "patch", "update"],
            }
        ],
    }


def role_binding(cluster: Cluster) -> Manifest:
    name = cluster.names.health_check_account
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": meta(cluster, name, COMPONENT),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": cluster.namespace}],
    }


def deadline_seconds(cluster: Cluster) -> int:
    """Upper bound of one run: every GPU node checked in waves of `concurrency`, plus slack."""
    nccl = cluster.spec.health_checks.nccl
    gpu_nodes = sum(g.replicas for g in cluster.spec.worker_groups if g.gpus.count > 0)
    waves = max(1, math.ceil(gpu_nodes / nccl.concurrency))
    return waves * nccl.time_limit_minutes * 60 + 300


def args(cluster: Cluster) -> list[str]:
    nccl = cluster.spec.health_checks.nccl
    return [
        "--min-busbw",
        f"{nccl.min_bus_bandwidth_gbps:g}",
        "--min-bytes",
        nccl.min_bytes,
        "--max-bytes",
        nccl.max_bytes,
        "--time-limit",
        str(nccl.time_limit_minutes),
        "--concurrency",
        str(nccl.concurrency),
        "--report-configmap",
        f"{cluster.namespace}/{cluster.names.nccl_check}",
    ]


def cronjob(cluster: Cluster) -> Manifest:
    names = cluster.names
    spec = cluster.spec
    nccl = spec.health_checks.nccl
    container: Manifest = {
        **slurm_container(cluster, "nccl-check", "healthCheck"),
        "command": ["warden-health-check"],
        "args": args(cluster),
        "volumeMounts": slurm_mounts(),
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": meta(cluster, names.nccl_check, COMPONENT),
        "spec": {
            "schedule": nccl.schedule,
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 600,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": names.labels(COMPONENT)},
                "spec": {
                    "backoffLimit": 0,
                    "activeDeadlineSeconds": deadline_seconds(cluster),
                    "template": {
                        "metadata": {"labels": names.labels(COMPONENT)},
                        "spec": runtime_files_outside_jail(
                            {
                                "restartPolicy": "Never",
                                "serviceAccountName": names.health_check_account,
                                "dnsConfig": dns_config(cluster),
                                "enableServiceLinks": False,
                                # its API token stays (it writes the report); the runtime's seccomp profile
                                "securityContext": dict(POD_DEFAULTS["securityContext"]),
                                "containers": [container],
                                "volumes": slurm_volumes(cluster),
                            }
                        ),
                    },
                },
            },
        },
    }


def render(cluster: Cluster) -> list[Manifest]:
    if not (cluster.spec.health_checks.nccl.enabled and cluster.gpu_groups):
        return []
    return [
        report_config_map(cluster),
        service_account(cluster),
        role(cluster),
        role_binding(cluster),
        cronjob(cluster),
    ]
