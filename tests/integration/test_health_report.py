"""The NCCL check's report reaches the SlurmCluster: the check writes it into its ConfigMap with the
ServiceAccount the operator rendered for it (and nothing more), the operator folds it into status and
posts one Event per drained node. The report itself is the runner's real output shape; no GPU or
Slurm is involved at this tier (the data-plane tier runs the check against real Slurm)."""

from __future__ import annotations

import ssl
from typing import Any

import pytest
from kubernetes import client

from tests.support.operator import OperatorProcess, apply_cluster, get_cluster, wait_ready
from warden.health.report import ApiTarget, ReportError, write_report
from warden_dev.controlplane import wait_for

SPEC = {
    "workerGroups": [{"name": "gpu", "replicas": 2, "gpus": {"count": 4}}],
    "healthChecks": {"nccl": {"enabled": True, "minBusBandwidthGbps": 100}},
}
REASON = "warden-health: nccl all_reduce_perf busbw 12.3 GB/s < 100.0 GB/s"


def report(drained: list[str], resumed: list[str] | None = None, check_failed: str | None = None) -> dict[str, Any]:
    return {
        "checkFailed": check_failed,
        "lastRunTime": "2026-11-22T04:00:00Z",
        "thresholdGBps": 100.0,
        "nodesChecked": 2,
        "passed": [n for n in ("hc-worker-gpu-0", "hc-worker-gpu-1") if n not in drained],
        "drained": [{"node": n, "reason": REASON} for n in drained],
        "resumed": resumed or [],
        "skipped": [],
        "errors": [],
    }


def test_health_report_written_by_the_checks_account_lands_in_status_and_events(
    api_client: Any, controlplane: Any, cluster_namespace: str, operator: OperatorProcess
) -> None:
    ns = cluster_namespace
    controlplane.add_fake_nodes(2, gpu=4, prefix="kwok-hc")
    body = {
        "apiVersion": "slurm.warden.dev/v1alpha1",
        "kind": "SlurmCluster",
        "metadata": {"name": "hc", "namespace": ns},
        "spec": SPEC,
    }
    apply_cluster(api_client, body)
    wait_ready(api_client, ns, "hc", operator)

    # What the CronJob's pod would hold: a token of the ServiceAccount the operator rendered.
    token = controlplane.service_account_token(ns, "hc-health-check")
    ctx = ssl.create_default_context(cafile=str(controlplane.pki.ca_crt))
    target = ApiTarget(controlplane.server, token, ctx)
    write_report(target, f"{ns}/hc-nccl-check", report(["hc-worker-gpu-1"]))

    def drained_in_status() -> list[Any] | None:
        hc = get_cluster(api_client, ns, "hc").get("status", {}).get("healthCheck", {})
        return hc.get("drained") or None

    drained = wait_for("the drained node in status", drained_in_status, 60, on_fail=operator.log_tail)
    assert drained == [{"node": "hc-worker-gpu-1", "reason": REASON}]
    status = get_cluster(api_client, ns, "hc")["status"]["healthCheck"]
    assert (status["nodesChecked"], status["nodesPassed"], status["lastRunTime"]) == (2, 1, "2026-11-22T04:00:00Z")

    core = client.CoreV1Api(api_client)

    def event(reason: str) -> Any:
        return [
            e for e in core.list_namespaced_event(ns).items if e.reason == reason and e.involved_object.name == "hc"
        ]

    (drained_event,) = wait_for(
        "a NodeDrained Event", lambda: event("NodeDrained") or None, 30, on_fail=operator.log_tail
    )
    assert drained_event.type == "Warning" and REASON in drained_event.message
    # structured: what was done, to which pod, by whom (events.k8s.io/v1 fields, in core/v1's view too)
    assert (drained_event.action, drained_event.reporting_component) == ("Drain", "slurm.warden.dev/operator")
    assert (drained_event.related.kind, drained_event.related.name) == ("Pod", "hc-worker-gpu-1")

    # The node passes again: the next report has no drain, status empties, NodeResumed is posted.
    write_report(target, f"{ns}/hc-nccl-check", report([], resumed=["hc-worker-gpu-1"]))
    wait_for("the node gone from status", lambda: drained_in_status() is None, 60, on_fail=operator.log_tail)
    (resumed,) = wait_for("a NodeResumed Event", lambda: event("NodeResumed") or None, 30, on_fail=operator.log_tail)
    assert "hc-worker-gpu-1" in resumed.message
    assert len(event("NodeDrained")) == 1, "each run is announced once"

    # A run that failed the same way everywhere drained nobody: status and a Warning Event say why.
    why = "all_reduce_perf failed the same way on all 2 nodes tested: exit 2: execve(): all_reduce_perf: No such file"
    write_report(target, f"{ns}/hc-nccl-check", report([], check_failed=why))

    def check_failed() -> str | None:
        value = get_cluster(api_client, ns, "hc").get("status", {}).get("healthCheck", {}).get("checkFailed")
        return str(value) if value else None

    assert wait_for("checkFailed in status", check_failed, 60, on_fail=operator.log_tail) == why
    (failed,) = wait_for(
        "a HealthCheckFailed Event", lambda: event("HealthCheckFailed") or None, 30, on_fail=operator.log_tail
    )
    assert failed.type == "Warning" and failed.message == f"NCCL check drained nobody: {why}"
    assert len(event("NodeDrained")) == 1

    # The account may write its report, and nothing else.
    with pytest.raises(ReportError):
        write_report(target, f"{ns}/hc-slurm-config", report([]))
