"""Running the NCCL check's rendered CronJob pod in a dataplane cluster (shared by the test modules)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from warden_dev.dockercluster import DockerCluster


def run_check(hc: DockerCluster, *extra: str) -> dict[str, Any]:
    """One run of the rendered CronJob's pod; its JSON summary. `--immediate 5` keeps a node that
    srun cannot have from holding the run up for the default minute."""
    cronjob = hc.manifest("CronJob", hc.names.nccl_check)
    pod = hc.job_pod(
        cronjob["spec"]["jobTemplate"]["spec"]["template"], f"{hc.names.nccl_check}-{uuid.uuid4().hex[:5]}"
    )
    at = pod.argv.index("--report-configmap")  # needs a Kubernetes API; stdout carries the same JSON
    del pod.argv[at : at + 2]
    pod.argv += ["--immediate", "5", *extra]
    r = hc.run_to_completion(pod, timeout=300)
    assert r.rc == 0, r
    summary: dict[str, Any] = json.loads(r.out)
    return summary


def by_node(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for n in summary["nodes"]}
