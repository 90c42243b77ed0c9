"""Run the real operator (`python -m warden.main`) against a test control plane, and read what it made."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from warden.model import API_GROUP, API_VERSION, PLURAL, WORKER_SET_PLURAL
from warden_dev.controlplane import wait_for

ROOT = Path(__file__).resolve().parents[2]
CRD_FILE = ROOT / "charts/slurm-operator-crds/templates/slurmclusters.yaml"
WORKER_SET_CRD_FILE = ROOT / "charts/slurm-operator-crds/templates/workersets.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def end_group(proc: subprocess.Popen[bytes] | None, sig: signal.Signals, grace: float = 10) -> None:
    """Send ``sig`` to a test's process group (started with ``start_new_session``) and wait for its end;
    SIGKILL when it outlives ``grace`` seconds. Nothing for a process that is not running."""
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, sig)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


class OperatorProcess:
    """`warden-operator` in a subprocess, watching one namespace (every one: ``namespace=""``), logging to
    a file."""

    def __init__(
        self,
        kubeconfig: Path,
        namespace: str,
        log_dir: Path,
        metrics: bool = True,
        slurm_sync_interval: float = 0,
        extra_args: Sequence[str] = (),
    ) -> None:
        """``slurm_sync_interval``: 0 (no Slurm behind the kwok pods: the sync is off) unless a test gives
        the operator a stand-in slurmrestd (``extra_args``: ``--slurmrestd-url``, tests/support/fake_slurmrestd.py)."""
        self.kubeconfig = kubeconfig
        self.slurm_sync_interval = slurm_sync_interval
        self.extra_args = list(extra_args)
        self.metrics = metrics
        self.namespace = namespace
        self.log_path = log_dir / f"operator-{namespace or 'every-namespace'}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.liveness_url = ""
        self.metrics_url = ""

    def start(self) -> None:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
        liveness = self.liveness_url = f"http://127.0.0.1:{free_port()}/healthz"
        metrics_port = free_port() if self.metrics else 0
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics" if self.metrics else ""
        log = self.log_path.open("ab")
        log.write(f"\n--- start #{self.starts + 1} ---\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            # no Slurm behind the kwok pods: the operator does not read Slurm's node states here, unless
            # a test serves it a stand-in slurmrestd
            [
                sys.executable,
                "-m",
                "warden.main",
                *(["-n", self.namespace] if self.namespace else ["--all-namespaces"]),
                "--liveness",
                liveness,
                "-v",
                f"--slurm-sync-interval={self.slurm_sync_interval:g}",
                f"--metrics-port={metrics_port}",
                *self.extra_args,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.starts += 1

    def kill(self) -> None:
        """SIGKILL: the operator dies wherever it is, like a node failure or an OOM kill."""
        end_group(self.proc, signal.SIGKILL)
        self.proc = None

    def stop(self) -> None:
        end_group(self.proc, signal.SIGTERM, grace=15)
        self.proc = None

    def log_of_this_start(self) -> str:
        """What the running process (the last start) has logged so far; "" before its first line."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        marker = f"--- start #{self.starts} ---"
        return text.rpartition(marker)[2] if self.starts and marker in text else ""

    def resumed(self) -> bool:
        """The running process's resume reconcile (every object applied) succeeded, for the one SlurmCluster
        it watches: what tells a restarted operator did its work when status cannot (Ready already)."""
        log = self.log_of_this_start()
        return "Handler 'reconcile_cluster' succeeded." in log and "Resuming is processed: 1 succeeded" in log

    def wait_resumed(self, timeout: float = 120) -> None:
        """Until the restarted process's resume reconcile succeeded (``resumed``): seconds alone, longer beside
        the dataplane tier (``wait_for`` scales its waits there)."""
        wait_for("the restarted operator's resume reconcile", self.resumed, timeout, on_fail=self.log_tail)

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no operator log)"


def load_example(name: str, namespace: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "docs/examples" / f"{name}.yaml").read_text())
    doc["metadata"]["namespace"] = namespace
    return doc


def crd_body() -> Any:
    """The chart's SlurmCluster CRD as the API client takes it (a plain dict)."""
    return yaml.safe_load(CRD_FILE.read_text())


def crd_bodies() -> list[Any]:
    """Every CRD of the chart: SlurmCluster and WorkerSet."""
    return [crd_body(), yaml.safe_load(WORKER_SET_CRD_FILE.read_text())]


#: A stand-in for the Prometheus Operator's ServiceMonitor CRD: the real group, version, kind and plural,
#: an open schema. What tests with it check is the operator following the API's discovery and its RBAC,
#: not Prometheus Operator's schema (its CRDs are not built here).
SERVICE_MONITOR_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "names": {
            "kind": "ServiceMonitor",
            "listKind": "ServiceMonitorList",
            "plural": "servicemonitors",
            "singular": "servicemonitor",
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
            }
        ],
    },
}


CLUSTER_PATH = (API_GROUP, API_VERSION, PLURAL)
GROUP, VERSION = API_GROUP, API_VERSION


def get_cluster(api: Any, ns: str, name: str) -> dict[str, Any]:
    obj: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
    return dict(obj)


def condition(obj: dict[str, Any], type_: str) -> str | None:
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == type_:
            return str(c["status"])
    return None


def owned_objects(api: Any, ns: str, uid: str) -> dict[str, dict[str, Any]]:
    """Every object in the namespace whose owner is the SlurmCluster with `uid`."""
    core, apps, batch, rbac = (
        client.CoreV1Api(api),
        client.AppsV1Api(api),
        client.BatchV1Api(api),
        client.RbacAuthorizationV1Api(api),
    )
    listers: dict[str, Callable[..., Any]] = {
        "ConfigMap": core.list_namespaced_config_map,
        "Secret": core.list_namespaced_secret,
        "Service": core.list_namespaced_service,
        "ServiceAccount": core.list_namespaced_service_account,
        "PersistentVolumeClaim": core.list_namespaced_persistent_volume_claim,
        "StatefulSet": apps.list_namespaced_stateful_set,
        "Deployment": apps.list_namespaced_deployment,
        "Job": batch.list_namespaced_job,
        "CronJob": batch.list_namespaced_cron_job,
        "Role": rbac.list_namespaced_role,
        "RoleBinding": rbac.list_namespaced_role_binding,
        "PodDisruptionBudget": client.PolicyV1Api(api).list_namespaced_pod_disruption_budget,
        "NetworkPolicy": client.NetworkingV1Api(api).list_namespaced_network_policy,
        "WorkerSet": partial(client.CustomObjectsApi(api).list_namespaced_custom_object, GROUP, VERSION),
    }
    out: dict[str, dict[str, Any]] = {}
    for kind, lister in listers.items():
        args = (ns, WORKER_SET_PLURAL) if kind == "WorkerSet" else (ns,)
        for item in api.sanitize_for_serialization(lister(*args))["items"]:
            refs = item["metadata"].get("ownerReferences", [])
            if any(r["uid"] == uid for r in refs):
                out[f"{kind}/{item['metadata']['name']}"] = item
    return out


def apply_cluster(api: Any, body: dict[str, Any], attempts: int = 5) -> dict[str, Any]:
    """Create the SlurmCluster, or replace the one there with ``body``. The operator writes the object
    too (status, kopf's annotations): a replace that lost that race (409) is tried again on the
    newer version, as `kubectl replace` would have to be."""
    ns = body["metadata"]["namespace"]
    name = body["metadata"]["name"]
    custom = client.CustomObjectsApi(api)
    for attempt in range(attempts):
        try:
            current: Any = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
        except client.exceptions.ApiException as e:
            if e.status != 404:
                raise
            created: Any = custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)
            return dict(created)
        version = current["metadata"]["resourceVersion"]
        newer = {**body, "metadata": {**body["metadata"], "resourceVersion": version}}
        try:
            replaced: Any = custom.replace_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name, newer)
            return dict(replaced)
        except client.exceptions.ApiException as e:
            if e.status != 409 or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def wait_ready(api: Any, ns: str, name: str, operator: OperatorProcess, timeout: float = 120) -> dict[str, Any]:
    """The cluster Ready at its current generation: within seconds alone. Beside the dataplane tier it has
    taken over two minutes: ``wait_for`` allows three times as long there (``WARDEN_WAIT_SCALE``)."""

    def ready() -> dict[str, Any] | None:
        obj = get_cluster(api, ns, name)
        status = obj.get("status", {})
        if status.get("phase") == "Ready" and status.get("observedGeneration") == obj["metadata"]["generation"]:
            return obj
        return None

    def last_status() -> str:
        conditions = get_cluster(api, ns, name).get("status", {}).get("conditions", [])
        told = "; ".join(f"{c['type']}={c['status']} ({c.get('message', '')})" for c in conditions)
        # what the fake nodes (kwok) and the controllers made of the pods: a pod never Running is not the operator's
        pods = client.CoreV1Api(api).list_namespaced_pod(ns).to_dict()["items"]
        seen = "; ".join(
            f"{p['metadata']['name']} {(p.get('status') or {}).get('phase')} on "
            f"{(p.get('spec') or {}).get('node_name') or '-'} ready="
            + ",".join(str(bool(c.get("ready"))) for c in (p.get("status") or {}).get("container_statuses") or [])
            for p in pods
        )
        return f"last conditions: {told}\npods: {seen or 'none'}\n{operator.log_tail()}"

    return dict(wait_for(f"SlurmCluster {ns}/{name} Ready", ready, timeout, on_fail=last_status))
