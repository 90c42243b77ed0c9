"""Scale against the peer: Warden and Slinky's slurm-operator side by side on one kwok control plane.

One throwaway control plane (dev/warden_dev/controlplane.py) with as many kwok nodes as the largest
size has workers, each node taking one pod (Slinky places one worker per node by pod anti-affinity;
Warden's workers get the same by the nodes' pod capacity), plus a few roomier nodes for everything else.
For each size (1,000 and 10,000 workers unless told otherwise), in one namespace each, one after another
(the namespace deleted in between, so every run finds the nodes empty), alternating which operator goes
first:
- Warden: the real operator process (``warden.main``) and a SlurmCluster with one worker group of that
  size (its Slurm sync off: Slinky, given no RestApi, makes no Slurm calls either);
- Slinky: its manager (hack/build-slinky.sh builds it from its source archive), its CRDs, a Controller
  and a NodeSet of that size;
- a bare client: Warden's worker pods once more, one POST after another, in the namespace of Warden's
  run (everything else the cluster holds still there, the operator stopped): the floor for these pods.
For each: seconds from the create to all worker pods Ready, the operator's resident memory (idle before
the create, peak, after), and the API requests it made per worker, from the API server's own audit log
(by user agent: reads are gets, lists and watches; writes are the rest).

Then the Slurm side at the largest size: Warden again, its Slurm sync on against a stand-in slurmrestd
(tests/support/fake_slurmrestd.py: records copied from captured real slurmrestd answers) serving a node
and a running job for every worker. Once the cluster is Ready: the sync rounds' seconds (the operator's
own histogram), the requests per round by verb and kind (audit log), a spot check of status and pod
conditions, and of ten nodes drained in Slurm showing as such.

Never asserted anywhere: figures for the record.
Usage (from the repository root): python -m bench.peer_scale [SIZE ...]
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.operator_scale import RssSampler, rss_mib
from kubernetes import client

from tests.support.fake_slurmrestd import FakeSlurmrestd
from tests.support.operator import OperatorProcess, crd_bodies, get_cluster
from warden_dev.audit import Requests, audit_requests, rfc3339
from warden_dev.controlplane import ControlPlane, ensure_binaries

SYSTEM_NODES = 4  # roomy nodes for the controllers, login, slurmrestd and the jail's Job
RUN_LIMIT_S = 1800.0  # a run that has not got every worker Ready by then is reported as it stands
WARDEN_AGENTS = ("warden-operator", "kopf/")
SLINKY_AGENTS = ("manager/",)
BARE_AGENTS = ("warden-bench-bare",)


# --- measuring ------------------------------------------------------------------------------------------
def ready_pods(api: Any, namespace: str, selector: str) -> int:
    """Worker pods Ready, counted from the API server's table of pods (a few bytes a pod, cheap at 10,000)."""
    response = api.call_api(
        *api.param_serialize(
            method="GET",
            resource_path=f"/api/v1/namespaces/{namespace}/pods",
            query_params=[("labelSelector", selector)],
            header_params={"Accept": "application/json;as=Table;g=meta.k8s.io;v=v1"},
            auth_settings=["BearerToken"],
        )[:5]
    )
    table = json.loads(response.read())
    names = [c["name"] for c in table.get("columnDefinitions", [])]
    ready = names.index("Ready") if "Ready" in names else 1
    count = 0
    for row in table.get("rows", []):
        have, _, want = str(row["cells"][ready]).partition("/")
        count += have == want and have != "0"
    return count


def running_pods(api: Any, namespace: str, selector: str) -> set[str]:
    """The names of the pods ``selector`` picks that run (the API server's table of pods: names only)."""
    response = api.call_api(
        *api.param_serialize(
            method="GET",
            resource_path=f"/api/v1/namespaces/{namespace}/pods",
            query_params=[("labelSelector", selector), ("fieldSelector", "status.phase=Running")],
            header_params={"Accept": "application/json;as=Table;g=meta.k8s.io;v=v1"},
            auth_settings=["BearerToken"],
        )[:5]
    )
    return {row["cells"][0] for row in json.loads(response.read()).get("rows", [])}


def wait_workers(api: Any, namespace: str, selector: str, workers: int, start: float) -> tuple[float, int]:
    """Seconds from ``start`` until ``workers`` pods are Ready (or RUN_LIMIT_S), and how many were."""
    ready = 0
    while time.monotonic() - start < RUN_LIMIT_S:
        ready = ready_pods(api, namespace, selector)
        if ready >= workers:
            break
        time.sleep(0.5)
    return time.monotonic() - start, ready


@dataclass
class Bare:
    """Where the bare client makes Warden's worker pods again: the namespace of Warden's run, and its WorkerSet."""

    namespace: str
    workerset: dict[str, Any]


@dataclass
class Run:
    who: str
    workers: int
    ready_s: float = 0.0
    ready: int = 0
    idle: float = 0.0
    peak: float = 0.0
    after: float = 0.0
    requests: Requests = field(default_factory=Requests)
    note: str = ""


# --- the control plane and its nodes ---------------------------------------------------------------
def add_nodes(cp: ControlPlane, count: int, prefix: str, pods: str) -> None:
    """``count`` kwok nodes at once (16 creates in flight), then wait until kwok has them all Ready and the
    node lifecycle controller has taken its not-ready taint off each (it does so at its own pace, some ten
    nodes a second: a run started before would wait on that, not on the operator)."""
    api = cp.api_client()
    core: Any = client.CoreV1Api(api)
    resources = {"cpu": "64", "memory": "512Gi", "pods": pods}

    def make(i: int) -> None:
        name = f"{prefix}-{i}"
        core.create_node({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "type": "kwok",
                                                  "bench.warden.dev/pool": prefix},
                         "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "status": {"capacity": resources, "allocatable": resources},
        })  # fmt: skip

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(make, range(count)))
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        listed = core.list_node(label_selector=f"bench.warden.dev/pool={prefix}", _preload_content=False)
        nodes = json.loads(listed.read())["items"]
        ready = sum(
            any(c["type"] == "Ready" and c["status"] == "True" for c in (n.get("status") or {}).get("conditions", []))
            and not (n.get("spec") or {}).get("taints")
            for n in nodes
        )
        if ready >= count:
            return
        time.sleep(2)
    raise RuntimeError(f"kwok did not make {count} {prefix} nodes Ready (and untainted) in 600 s")


def delete_pods(cp: ControlPlane, namespace: str, selector: str) -> None:
    """Delete the pods ``selector`` picks and wait until they are gone (their nodes are free again)."""
    core: Any = client.CoreV1Api(cp.api_client())
    core.delete_collection_namespaced_pod(namespace, label_selector=selector)
    deadline = time.monotonic() + 1200
    while time.monotonic() < deadline:
        listed = core.list_namespaced_pod(namespace, label_selector=selector, limit=1, _preload_content=False)
        if not json.loads(listed.read())["items"]:
            return
        time.sleep(2)
    raise RuntimeError(f"pods {selector} in {namespace} not gone in 1200 s")


def delete_namespace(cp: ControlPlane, namespace: str) -> None:
    """Delete the namespace and wait until it is gone with every pod in it (the nodes are free again)."""
    core: Any = client.CoreV1Api(cp.api_client())
    core.delete_namespace(namespace)
    deadline = time.monotonic() + 1200
    while time.monotonic() < deadline:
        try:
            core.read_namespace(namespace)
        except client.ApiException as e:
            if e.status == 404:
                return
            raise
        time.sleep(2)
    raise RuntimeError(f"namespace {namespace} not gone in 1200 s")


def volumes_for(cp: ControlPlane, namespace: str) -> None:
    """PersistentVolumes for the cluster's claims: the throwaway control plane has no provisioner."""
    core: Any = client.CoreV1Api(cp.api_client())
    for i in range(2):
        core.create_persistent_volume({
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"{namespace}-pv{i}"},
            "spec": {"capacity": {"storage": "1Ti"}, "accessModes": ["ReadWriteOnce", "ReadWriteMany"],
                     "hostPath": {"path": f"/tmp/{namespace}-pv{i}"}},
        })  # fmt: skip


# --- the runs ------------------------------------------------------------------------------------------
def warden_body(namespace: str, workers: int) -> dict[str, Any]:
    return {
        "apiVersion": "slurm.warden.dev/v1alpha1",
        "kind": "SlurmCluster",
        "metadata": {"name": "big", "namespace": namespace},
        "spec": {"workerGroups": [{"name": "cpu", "replicas": workers}], "login": {"replicas": 1}},
    }


WARDEN_WORKERS = "app.kubernetes.io/instance=big,app.kubernetes.io/component=worker"


def run_warden(cp: ControlPlane, workers: int, tag: str) -> tuple[Run, Bare]:
    """The operator and a SlurmCluster of ``workers`` until every worker pod is Ready: the figures, and
    what the bare client needs to make the same pods: the namespace with everything else the cluster
    holds (its claims, ConfigMaps, ServiceAccount, nodes Service) left in place, the operator stopped
    and the worker pods gone."""
    api = cp.api_client()
    ns = cp.create_namespace(f"warden-{tag}")
    volumes_for(cp, ns)
    op = OperatorProcess(cp.kubeconfig, ns, cp.log_dir, metrics=False)
    op.start()
    assert op.proc is not None
    time.sleep(8)  # started and settled: its watches listed
    run = Run("Warden", workers, idle=rss_mib(op.proc.pid))
    sampler = RssSampler(op.proc.pid)
    sampler.start()
    begun = time.time()
    start = time.monotonic()
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "slurm.warden.dev", "v1alpha1", ns, "slurmclusters", warden_body(ns, workers)
    )
    run.ready_s, run.ready = wait_workers(api, ns, WARDEN_WORKERS, workers, start)
    time.sleep(10)  # the events of the last pods handled
    sampler.stop.set()
    sampler.join()
    run.peak, run.after = max(sampler.peak, run.idle), rss_mib(op.proc.pid)
    workerset: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
        "slurm.warden.dev", "v1alpha1", ns, "workersets", "big-worker-cpu"
    )
    phase = get_cluster(api, ns, "big").get("status", {})
    run.note = f"status: {phase.get('phase')}, workers {phase.get('workers')}"
    op.stop()
    run.requests = audit_requests(cp.log_dir / "audit.log", WARDEN_AGENTS, rfc3339(begun), rfc3339(time.time()))
    delete_pods(cp, ns, WARDEN_WORKERS)
    return run, Bare(ns, workerset)


SLINKY_WORKERS = "app.kubernetes.io/name=slurmd,app.kubernetes.io/instance=big"


def run_slinky(cp: ControlPlane, manager: Path, workers: int, tag: str) -> Run:
    api = cp.api_client()
    ns = cp.create_namespace(f"slinky-{tag}")
    core: Any = client.CoreV1Api(api)
    for secret, key in (("slurm-key", "slurm.key"), ("jwt-key", "jwt_hs256.key")):
        core.create_namespaced_secret(ns, {"metadata": {"name": secret}, "stringData": {key: os.urandom(32).hex()}})
    log = (cp.log_dir / f"slinky-{tag}.log").open("wb")
    proc = subprocess.Popen(
        [str(manager), f"--namespaces={ns}", "--metrics-addr=0", "--health-addr=127.0.0.1:0"],
        env={**os.environ, "KUBECONFIG": str(cp.kubeconfig)},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        time.sleep(8)
        run = Run("Slinky", workers, idle=rss_mib(proc.pid))
        sampler = RssSampler(proc.pid)
        sampler.start()
        custom = client.CustomObjectsApi(api)
        begun = time.time()
        start = time.monotonic()
        custom.create_namespaced_custom_object("slinky.slurm.net", "v1beta1", ns, "controllers", {
            "apiVersion": "slinky.slurm.net/v1beta1", "kind": "Controller", "metadata": {"name": "big"},
            "spec": {"slurmKeyRef": {"name": "slurm-key", "key": "slurm.key"},
                     "jwtHs256KeyRef": {"name": "jwt-key", "key": "jwt_hs256.key"},
                     # images are the user's to give (kwok pulls nothing)
                     "slurmctld": {"image": "slurmctld:bench"}, "reconfigure": {"image": "slurmctld:bench"},
                     "logfile": {"image": "logfile:bench"}},
        })  # fmt: skip
        custom.create_namespaced_custom_object("slinky.slurm.net", "v1beta1", ns, "nodesets", {
            "apiVersion": "slinky.slurm.net/v1beta1", "kind": "NodeSet", "metadata": {"name": "big"},
            "spec": {"controllerRef": {"name": "big"}, "replicas": workers,
                     "slurmd": {"image": "slurmd:bench"}, "logfile": {"image": "logfile:bench"}},
        })  # fmt: skip
        run.ready_s, run.ready = wait_workers(api, ns, SLINKY_WORKERS, workers, start)
        time.sleep(10)
        sampler.stop.set()
        sampler.join()
        run.peak, run.after = max(sampler.peak, run.idle), rss_mib(proc.pid)
        run.requests = audit_requests(cp.log_dir / "audit.log", SLINKY_AGENTS, rfc3339(begun), rfc3339(time.time()))
        if run.ready < workers:
            run.note = f"{run.ready} of {workers} Ready when stopped at {RUN_LIMIT_S:.0f} s"
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
        log.close()
    delete_namespace(cp, ns)
    return run


def run_bare(cp: ControlPlane, bare: Bare, workers: int) -> Run:
    """Warden's worker pods made again by a bare client, one POST after another, in the namespace of
    Warden's run with the operator stopped: the same spec (volumes, init containers, labels: the nodes
    Service and the policies select them as they did), their own names, no owner; raw JSON both ways.
    The namespace goes afterwards."""
    api = cp.new_api_client()
    api.user_agent = BARE_AGENTS[0]
    core = client.CoreV1Api(api)
    template, ws_name = bare.workerset["spec"]["template"], bare.workerset["metadata"]["name"]
    run = Run("bare client", workers)
    begun = time.time()
    start = time.monotonic()
    for i in range(workers):
        name = f"{ws_name}-bare-{i}"
        pod: Any = {  # the API client takes plain dicts as well as its models
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": dict(template["metadata"]["labels"]),
                         "annotations": dict(template["metadata"].get("annotations") or {})},
            "spec": {**template["spec"], "hostname": name},
        }  # fmt: skip
        response: Any = core.create_namespaced_pod(bare.namespace, pod, _preload_content=False)
        response.read()
    run.note = f"all created in {time.monotonic() - start:.1f} s"
    run.ready_s, run.ready = wait_workers(cp.api_client(), bare.namespace, WARDEN_WORKERS, workers, start)
    run.requests = audit_requests(cp.log_dir / "audit.log", BARE_AGENTS, rfc3339(begun), rfc3339(time.time()))
    delete_namespace(cp, bare.namespace)
    return run


# --- the Slurm side at size -------------------------------------------------------------------------
def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=30) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"^(warden_slurm_sync_duration_seconds_(?:sum|count|bucket)(?:\{[^}]*\})?) ([0-9.e+-]+)$", line)
        if m:
            out[m[1]] = float(m[2])
    return out


def slurm_side(cp: ControlPlane, workers: int) -> list[str]:
    """Warden with its Slurm sync on, against a stand-in slurmrestd with a node and a running job per worker."""
    api = cp.api_client()
    ns = cp.create_namespace("warden-sync")
    volumes_for(cp, ns)
    lines: list[str] = []
    with FakeSlurmrestd(ns, "big") as fake:
        op = OperatorProcess(cp.kubeconfig, ns, cp.log_dir, metrics=True, slurm_sync_interval=5,
                             extra_args=["--slurmrestd-url", fake.url_template])  # fmt: skip
        op.start()
        assert op.proc is not None
        sampler = RssSampler(op.proc.pid)
        sampler.start()
        start = time.monotonic()
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            "slurm.warden.dev", "v1alpha1", ns, "slurmclusters", warden_body(ns, workers)
        )
        # a slurmd registers once its pod runs: a node Slurm lists before its pod exists is a ghost record
        # (the sync deletes it), a pod running five minutes unregistered is made afresh
        status: dict[str, Any] = {}
        in_slurm: set[str] = set()
        while time.monotonic() - start < RUN_LIMIT_S:
            for pod in running_pods(api, ns, WARDEN_WORKERS) - in_slurm:
                fake.register(pod)
                fake.run_job(pod, 3600)
                in_slurm.add(pod)
            status = get_cluster(api, ns, "big").get("status", {})
            if status.get("phase") == "Ready":
                break
            time.sleep(2)
        took = time.monotonic() - start
        registered = (status.get("slurmNodes") or {}).get("registered")
        lines.append(f"SlurmCluster Ready (Slurm sync on)  {took:.1f} s: {status.get('phase')}, "
                     f"workers {status.get('workers')}, Slurm registered {registered}")  # fmt: skip
        # steady rounds: nothing changes; what does a round cost
        time.sleep(12)
        before, since = scrape(op.metrics_url), time.time()
        time.sleep(60)
        after, until = scrape(op.metrics_url), time.time()
        rounds = after["warden_slurm_sync_duration_seconds_count"] - before["warden_slurm_sync_duration_seconds_count"]
        seconds = after["warden_slurm_sync_duration_seconds_sum"] - before["warden_slurm_sync_duration_seconds_sum"]
        requests = audit_requests(cp.log_dir / "audit.log", WARDEN_AGENTS, rfc3339(since), rfc3339(until))
        within = slowest_bucket(before, after, rounds)
        lines.append(f"steady sync rounds over {workers} nodes  {rounds:.0f} in 60 s, mean "
                     f"{seconds / max(rounds, 1):.2f} s, all within {within} s")  # fmt: skip
        lists = Counter({k: v for k, v in requests.by.items() if k.startswith("list ")})
        per_round = ", ".join(f"{k} {v / max(rounds, 1):.1f}" for k, v in sorted(requests.by.items()))
        lines.append(f"  requests per round: {per_round or 'none'}")
        lines.append(f"  lists per round by kind: max {max(lists.values(), default=0) / max(rounds, 1):.1f}")
        # spot checks: a sample of pods carries its node's state; ten nodes drained in Slurm show as such
        core: Any = client.CoreV1Api(api)
        sample = [f"big-worker-cpu-{i}" for i in (0, workers // 2, workers - 1)]

        def condition(pod: str) -> str:
            got = json.loads(core.read_namespaced_pod(pod, ns, _preload_content=False).read())
            for c in got["status"].get("conditions", []):
                if c["type"] == "slurm.warden.dev/SlurmNode":
                    busy = got["metadata"].get("labels", {}).get("slurm.warden.dev/busy")
                    return f"{c['status']}/{c['reason']} busy={busy}"
            return "none"

        lines.append("  sample pods: " + ", ".join(f"{p} {condition(p)}" for p in sample))
        drained = [f"big-worker-cpu-{i}" for i in range(0, workers, max(1, workers // 10))][:10]
        for node in drained:
            fake.set_state(node, "ALLOCATED", "DRAIN", reason="bench: drained by hand")
        marked = time.monotonic()
        while time.monotonic() - marked < 120:
            slurm = get_cluster(api, ns, "big").get("status", {}).get("slurmNodes", {})
            if len(slurm.get("drained") or []) >= len(drained) and all(
                condition(p).startswith("False/Draining") for p in drained[:3]
            ):
                break
            time.sleep(1)
        slurm = get_cluster(api, ns, "big").get("status", {}).get("slurmNodes", {})
        lines.append(f"  10 nodes drained in Slurm: status.slurmNodes.drained lists {len(slurm.get('drained') or [])} "
                     f"after {time.monotonic() - marked:.1f} s; {drained[0]} {condition(drained[0])}")  # fmt: skip
        sampler.stop.set()
        sampler.join()
        lines.append(f"  operator RSS peak with the sync on: {sampler.peak:.0f} MiB")
        op.stop()
    delete_namespace(cp, ns)
    return lines


def slowest_bucket(before: dict[str, float], after: dict[str, float], rounds: float) -> str:
    """The smallest histogram bound that every round between the two scrapes stayed within."""
    bounds = []
    for key, value in after.items():
        m = re.search(r'_bucket\{le="([^"]+)"\}', key)
        if m:
            bounds.append((float(m[1]), m[1], value - before.get(key, 0.0)))
    return next((text for _, text, count in sorted(bounds) if count >= rounds), "?")


# --- the table ------------------------------------------------------------------------------------------
def table(runs: list[Run]) -> Iterator[str]:
    yield (f"{'':14}{'workers':>8}{'Ready s':>9}{'RSS idle':>10}{'peak':>7}{'after':>7}{'reads/w':>9}"
           f"{'writes/w':>9}  note")  # fmt: skip
    for r in runs:
        idle = f"{r.idle:.0f}" if r.idle else "-"
        peak = f"{r.peak:.0f}" if r.peak else "-"
        after = f"{r.after:.0f}" if r.after else "-"
        yield (f"{r.who:14}{r.workers:>8}{r.ready_s:>9.1f}{idle:>10}{peak:>7}{after:>7}"
               f"{r.requests.reads / r.workers:>9.2f}{r.requests.writes / r.workers:>9.2f}  {r.note}")  # fmt: skip


def main(argv: list[str]) -> int:
    sizes = [int(a) for a in argv] or [1000, 10000]
    manager = Path(
        subprocess.run(["bash", "hack/build-slinky.sh"], check=True, capture_output=True, text=True).stdout.strip()
    )
    crds = manager.parent / "crds"
    runs: list[Run] = []
    say: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    with ControlPlane(ensure_binaries(build=False), audit=True, quiet_nodes=True) as cp:
        begun = time.monotonic()
        add_nodes(cp, SYSTEM_NODES, "system", "100")
        add_nodes(cp, max(sizes), "worker", "1")
        say(f"{SYSTEM_NODES} + {max(sizes)} kwok nodes Ready in {time.monotonic() - begun:.0f} s")
        api = cp.api_client()
        for crd in crd_bodies():
            client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
        subprocess.run([cp.binary("kubectl"), "apply", "--server-side", "-f", str(crds)], env=cp.env(), check=True,
                       capture_output=True)  # fmt: skip
        time.sleep(3)
        for k, size in enumerate(sizes):
            order = ["Warden", "Slinky"] if k % 2 == 0 else ["Slinky", "Warden"]
            bare: Bare | None = None
            for who in order:
                say(f"{who}: {size} workers ...")
                if who == "Warden":
                    run, bare = run_warden(cp, size, f"{size}")
                else:
                    run = run_slinky(cp, manager, size, f"{size}")
                say(f"  Ready in {run.ready_s:.1f} s ({run.ready} Ready)")
                runs.append(run)
            assert bare is not None
            say(f"bare client: {size} workers ...")
            runs.append(run_bare(cp, bare, size))
            say(f"  Ready in {runs[-1].ready_s:.1f} s")
        say(f"Slurm side: {max(sizes)} nodes ...")
        sync_lines = slurm_side(cp, max(sizes))
    print(f"kwok nodes: {max(sizes)} taking one pod each (+{SYSTEM_NODES} for the rest); one control plane, "
          f"runs in order, who goes first alternating by size")  # fmt: skip
    for line in table(runs):
        print(line)
    for size in sizes:
        by = {r.who: r for r in runs if r.workers == size}
        w, s, b = by.get("Warden"), by.get("Slinky"), by.get("bare client")
        if w and s and b:
            print(f"{size:>6} workers: Warden / bare client {w.ready_s / b.ready_s:.2f}x, "
                  f"Slinky / Warden {s.ready_s / w.ready_s:.1f}x")  # fmt: skip
    print("requests per worker, the most made (audit log, by user agent):")
    for r in runs:
        top = ", ".join(f"{k} {v / r.workers:.2f}" for k, v in r.requests.by.most_common(5))
        print(f"  {r.who} {r.workers}: {top}")
    for line in sync_lines:
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
