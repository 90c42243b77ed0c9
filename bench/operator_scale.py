"""Operator scale benchmark: one SlurmCluster with 1,000 worker nodes on kwok.

Starts a throwaway control plane (tests/support/controlplane.py), adds enough kwok nodes for the pods,
runs the real operator process, applies the cluster and prints:
- time from `create SlurmCluster` to status Ready (1,000 worker pods Ready, all conditions True),
- the operator's resident memory (idle after start, peak while converging, after converging),
- the number of status refreshes the WorkerSet's watch caused (from its log),
- beside it, in the same run on the same API server: a bare client creating the same worker pods
  one after another (the operator also makes them one at a time), until they are all Ready: the limit
  the operator's convergence is measured against.
Never asserted anywhere: figures for the record. Usage: python bench/operator_scale.py [WORKERS]
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kubernetes import client  # noqa: E402

from tests.support.controlplane import ControlPlane, ensure_binaries  # noqa: E402
from tests.support.operator import OperatorProcess, crd_bodies, get_cluster  # noqa: E402


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, 0.0, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.peak = max(self.peak, rss_mib(self.pid))
            except OSError:
                return
            time.sleep(0.2)


def bare_client(api: Any, ns: str, workerset: dict[str, Any], workers: int) -> tuple[float, float]:
    """Create the WorkerSet's pods with a bare client, one POST after another, as the operator does
    (same template, its own names, no owner; raw JSON both ways, no model objects): seconds until all
    are created, and until all are Ready."""
    core = client.CoreV1Api(api)
    template = workerset["spec"]["template"]
    start = time.monotonic()
    for i in range(workers):
        name = f"bare-{i}"
        pod: Any = {  # the API client takes plain dicts as well as its models
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"bench": "bare"}},
            "spec": {**template["spec"], "hostname": name},
        }
        response: Any = core.create_namespaced_pod(ns, pod, _preload_content=False)
        response.read()
    created = time.monotonic() - start
    while time.monotonic() - start < 1800:
        listed: Any = core.list_namespaced_pod(ns, label_selector="bench=bare", _preload_content=False)
        pods = json.loads(listed.read())["items"]
        ready = sum(
            1
            for p in pods
            if any(c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions", []))
        )
        if ready >= workers:
            break
        time.sleep(1)
    return created, time.monotonic() - start


def main() -> int:
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    pods_per_node = 250
    nodes = 2 * workers // pods_per_node + 2  # room for the bare client's pods beside the operator's
    with ControlPlane(ensure_binaries(build=False)) as cp:
        cp.add_fake_nodes(nodes, pods=str(pods_per_node + 10), cpu="1000", memory="4Ti", timeout=120)
        api: Any = cp.api_client()
        ns = cp.create_namespace("bench")
        core = client.CoreV1Api(api)
        for i in range(2):
            pv: Any = {  # the API client takes plain dicts as well as its models
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"bench-pv{i}"},
                "spec": {
                    "capacity": {"storage": "1Ti"},
                    "accessModes": ["ReadWriteOnce", "ReadWriteMany"],
                    "hostPath": {"path": f"/tmp/bench-pv{i}"},
                },
            }
            core.create_persistent_volume(pv)
        for crd in crd_bodies():
            client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
        time.sleep(2)
        op = OperatorProcess(cp.kubeconfig, ns, cp.log_dir)
        op.start()
        time.sleep(5)
        assert op.proc is not None
        idle = rss_mib(op.proc.pid)
        sampler = RssSampler(op.proc.pid)
        sampler.start()
        body = {
            "apiVersion": "slurm.warden.dev/v1alpha1",
            "kind": "SlurmCluster",
            "metadata": {"name": "big", "namespace": ns},
            "spec": {"workerGroups": [{"name": "cpu", "replicas": workers}], "login": {"replicas": 1}},
        }
        start = time.monotonic()
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "slurm.warden.dev", "v1alpha1", ns, "slurmclusters", body
        )
        deadline = start + 1800
        status: dict[str, Any] = {}
        while time.monotonic() < deadline:
            status = get_cluster(api, ns, "big").get("status", {})
            if status.get("phase") == "Ready":
                break
            time.sleep(1)
        took = time.monotonic() - start
        workers_ready = took
        sampler.stop.set()
        sampler.join()
        after = rss_mib(op.proc.pid)
        log = op.log_path.read_text(errors="replace")
        refreshes = log.count("Handler 'worker_set_changed' succeeded")
        template: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
            "slurm.warden.dev", "v1alpha1", ns, "workersets", "big-worker-cpu"
        )
        op.stop()
        # the same namespace: the pods mount the cluster's jail claim
        bare_created, bare_ready = bare_client(api, ns, template, workers)
    print(f"workers (kwok pods)             {workers}")
    print(f"kwok nodes                      {nodes}")
    print(f"phase at the end                {status.get('phase')} workers {status.get('workers')}")
    print(f"time to Ready                   {took:.1f} s")
    print(f"operator RSS idle               {idle:.1f} MiB")
    print(f"operator RSS peak (converging)  {sampler.peak:.1f} MiB")
    print(f"operator RSS after Ready        {after:.1f} MiB")
    print(f"status refreshes from watches   {refreshes}")
    print(f"bare client: {workers} pods created  {bare_created:.1f} s, all Ready {bare_ready:.1f} s")
    print(f"operator / bare client (Ready)  {workers_ready / bare_ready:.2f}x")
    return 0 if status.get("phase") == "Ready" else 1


if __name__ == "__main__":
    raise SystemExit(main())
