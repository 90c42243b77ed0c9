"""Operator scale benchmark: one SlurmCluster with 1,000 worker nodes on kwok.

Starts a throwaway control plane (dev/warden_dev/controlplane.py), adds enough kwok nodes for the pods,
runs the real operator process, applies the cluster and prints:
- time from `create SlurmCluster` to status Ready (1,000 worker pods Ready, all conditions True),
- the operator's resident memory (idle after start, peak while converging, after converging),
- the number of status refreshes the WorkerSet's watch caused (from its log),
- beside it, in the same run on the same API server: a bare client creating the same worker pods
  one after another, until they are all Ready: the limit
  the operator's convergence is measured against.
The operator runs twice, side by side in one run: with its /metrics on and scraped every 5 s (as a
Prometheus would), then with it off; the RSS figures are printed for both with their ratio, and the
scrapes' latency and the number of series served.
Never asserted anywhere: figures for the record.
Usage (from the repository root): python -m bench.operator_scale [WORKERS]
"""

from __future__ import annotations

import json
import statistics
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.support.operator import OperatorProcess, crd_bodies, get_cluster
from warden_dev.controlplane import ControlPlane, ensure_binaries


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
    """Create the WorkerSet's pods with a bare client, one POST after another
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


class Scraper(threading.Thread):
    """Prometheus's part: GET /metrics every ``interval`` seconds; the time each took, the series served."""

    def __init__(self, url: str, interval: float = 5.0) -> None:
        super().__init__(daemon=True)
        self.url, self.interval, self.stop = url, interval, threading.Event()
        self.seconds: list[float] = []
        self.series = 0

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            start = time.monotonic()
            try:
                with urllib.request.urlopen(self.url, timeout=30) as response:
                    text = response.read().decode()
            except OSError:
                continue
            self.seconds.append(time.monotonic() - start)
            self.series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))


@dataclass
class Run:
    ready_s: float
    idle: float
    peak: float
    after: float
    phase: str
    refreshes: int
    scrapes: list[float] = field(default_factory=list)
    series: int = 0


def converge(cp: ControlPlane, api: Any, workers: int, metrics: bool) -> tuple[Run, Any, str]:
    """A namespace, the operator (with or without its /metrics, scraped every 5 s when on), a SlurmCluster of
    ``workers`` workers until Ready: the figures, its WorkerSet and the namespace."""
    ns = cp.create_namespace(f"bench-{'on' if metrics else 'off'}")
    core = client.CoreV1Api(api)
    for i in range(2):
        pv: Any = {  # the API client takes plain dicts as well as its models
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"{ns}-pv{i}"},
            "spec": {
                "capacity": {"storage": "1Ti"},
                "accessModes": ["ReadWriteOnce", "ReadWriteMany"],
                "hostPath": {"path": f"/tmp/{ns}-pv{i}"},
            },
        }
        core.create_persistent_volume(pv)
    op = OperatorProcess(cp.kubeconfig, ns, cp.log_dir, metrics=metrics)
    op.start()
    time.sleep(5)
    assert op.proc is not None
    idle = rss_mib(op.proc.pid)
    sampler = RssSampler(op.proc.pid)
    sampler.start()
    scraper = Scraper(op.metrics_url) if metrics else None
    if scraper is not None:
        scraper.start()
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
    status: dict[str, Any] = {}
    while time.monotonic() < start + 1800:
        status = get_cluster(api, ns, "big").get("status", {})
        if status.get("phase") == "Ready":
            break
        time.sleep(1)
    took = time.monotonic() - start
    time.sleep(10)  # settled, and two more scrapes
    sampler.stop.set()
    sampler.join()
    after = rss_mib(op.proc.pid)
    if scraper is not None:
        scraper.stop.set()
        scraper.join()
    log = op.log_path.read_text(errors="replace")
    template: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "slurm.warden.dev", "v1alpha1", ns, "workersets", "big-worker-cpu"
    )
    op.stop()
    run = Run(
        ready_s=took,
        idle=idle,
        peak=sampler.peak,
        after=after,
        phase=f"{status.get('phase')} workers {status.get('workers')}",
        refreshes=log.count("Handler 'worker_set_changed' succeeded"),
        scrapes=scraper.seconds if scraper else [],
        series=scraper.series if scraper else 0,
    )
    return run, template, ns


def main() -> int:
    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    pods_per_node = 250
    nodes = 3 * workers // pods_per_node + 2  # two operator runs and the bare client's pods
    with ControlPlane(ensure_binaries(build=False)) as cp:
        cp.add_fake_nodes(nodes, pods=str(pods_per_node + 10), cpu="1000", memory="4Ti", timeout=120)
        api: Any = cp.api_client()
        for crd in crd_bodies():
            client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
        time.sleep(2)
        # side by side in one run: the operator with its /metrics scraped every 5 s, then without
        on, template, ns = converge(cp, api, workers, metrics=True)
        off, _, _ = converge(cp, api, workers, metrics=False)
        # the first namespace: the pods mount that cluster's jail claim
        bare_created, bare_ready = bare_client(api, ns, template, workers)
    print(f"workers (kwok pods)             {workers}")
    print(f"kwok nodes                      {nodes}")
    print(f"{'':32}{'metrics on':>14}{'metrics off':>14}{'on/off':>9}")
    for label, a, b in (
        ("time to Ready (s)", on.ready_s, off.ready_s),
        ("operator RSS idle (MiB)", on.idle, off.idle),
        ("operator RSS peak (MiB)", on.peak, off.peak),
        ("operator RSS after Ready (MiB)", on.after, off.after),
    ):
        print(f"{label:32}{a:>14.1f}{b:>14.1f}{a / b:>9.2f}")
    print(f"phase at the end                {on.phase} | {off.phase}")
    print(f"status refreshes from watches   {on.refreshes} | {off.refreshes}")
    if on.scrapes:
        ordered = sorted(on.scrapes)
        p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
        median = statistics.median(ordered)
        print(f"operator /metrics scrapes       {len(ordered)} (every 5 s while converging)")
        print(f"  latency median / p95          {median * 1000:.1f} ms / {p95 * 1000:.1f} ms, {on.series} series")
    print(f"bare client: {workers} pods created  {bare_created:.1f} s, all Ready {bare_ready:.1f} s")
    print(f"operator / bare client (Ready)  {on.ready_s / bare_ready:.2f}x (metrics on)")
    return 0 if "Ready" in on.phase and "Ready" in off.phase else 1


if __name__ == "__main__":
    raise SystemExit(main())
