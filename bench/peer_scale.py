"""Scale against the peer: Warden and Slinky's slurm-operator side by side on one kwok control plane.

One throwaway control plane (dev/warden_dev/controlplane.py) with as many kwok worker nodes as the
largest size has workers, each taking one pod and tainted so that only worker pods go there (both
operators' workers carry the same nodeSelector and toleration: Slinky places one worker per node by
pod anti-affinity, Warden's workers get the same by the nodes' pod capacity), plus a few roomy system
nodes for everything else either operator runs (controllers, login, exporter, jobs). For each size
(1,000 and 10,000 workers unless told otherwise), one after another, alternating which operator goes
first:
- Warden: the real operator process (``warden.main``) and a SlurmCluster with one worker group of that
  size (its Slurm sync off: Slinky, given no RestApi, makes no Slurm calls either);
- a bare client, right after Warden: Warden's worker pods once more, one POST after another, in the
  namespace of Warden's run (everything else the cluster holds still there on the system nodes, the
  operator stopped, its worker pods gone): the floor for these pods. The namespace goes afterwards;
- Slinky: its manager (hack/build-slinky.sh builds it from its source archive), its CRDs, a Controller
  and a NodeSet of that size; the namespace goes afterwards.
Same room for every run: before each one the bench reads every node and pod and refuses the run (it is
not started, and the table says why) unless no pod of another run is left, the worker nodes have a place
for every worker under that operator's placement rules (one per node for Slinky's anti-affinity; the
free pod places for Warden's), and the system nodes have room for the rest.

For each run: seconds from the create to 50 %, 90 %, 99 % and all of the worker pods Ready (a run that
has not got them all by RUN_LIMIT_S, or sees none turn Ready for STALL_S, is stopped and reported as it
stands: its ratios say so instead of a number); the operator's resident memory (idle before the create,
peak, after); the API requests it made per worker, from the API server's own audit log (by user agent:
reads are gets, lists and watches; writes are the rest); and its pace from the same log: when its pod
creates went out and when the scheduler bound the pods (what each operator waits on).

Then the Slurm side at the largest size (WARDEN_BENCH_PEER_SLURM_SIDE=0 leaves it out): Warden again,
its Slurm sync on against a stand-in slurmrestd (tests/support/fake_slurmrestd.py: records copied from
captured real slurmrestd answers) serving a node and a running job for every worker. Once the cluster
is Ready: the sync rounds' seconds (the operator's own histogram), the requests per round by verb and
kind (audit log), a spot check of status and pod conditions, and of ten nodes drained in Slurm showing
as such.

Never asserted anywhere: figures for the record.
Usage (from the repository root): python -m bench.peer_scale [SIZE ...]
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.operator_scale import RssSampler, rss_mib
from kubernetes import client

from tests.support.fake_slurmrestd import FakeSlurmrestd
from tests.support.operator import OperatorProcess, crd_bodies, get_cluster
from warden_dev.audit import Requests, audit_requests, rfc3339, wait_written
from warden_dev.controlplane import ControlPlane, ensure_binaries

SYSTEM_NODES = 4  # roomy nodes for the controllers, login, slurmrestd and the jail's Job
SYSTEM_ROOM = 32  # pod places the system nodes must have free for a run's pods other than its workers
RUN_LIMIT_S = 1800.0  # a run that has not got every worker Ready by then is reported as it stands
STALL_S = 300.0  # ... and so is one where no worker turned Ready for this long
MARKS = (50, 90, 99, 100)  # per cent of the workers Ready: the table's columns
WARDEN_AGENTS = ("warden-operator", "kopf/")
SLINKY_AGENTS = ("manager/",)
BARE_AGENTS = ("warden-bench-bare",)

#: the worker nodes: labelled and tainted so that only worker pods (which select and tolerate them) go there
POOL = "bench.warden.dev/pool"
WORKER_SELECTOR = {POOL: "worker"}
WORKER_TAINT = {"key": POOL, "value": "worker", "effect": "NoSchedule"}
WORKER_TOLERATION = {"key": POOL, "operator": "Equal", "value": "worker", "effect": "NoSchedule"}
ENDED = ("Succeeded", "Failed")


class Refused(Exception):
    """A run that could not finish by construction: not started."""


# --- the room a run has (pure) ------------------------------------------------------------------------
def free_places(nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]],
                selector: Mapping[str, str], tolerated: frozenset[str]) -> list[int]:  # fmt: skip
    """For each node ``selector`` picks that takes pods (Ready, not cordoned, no taint whose key is not
    ``tolerated``): how many more pods it has room for (its allocatable pods less those bound to it that
    have not ended)."""
    on = Counter(
        p["spec"]["nodeName"]
        for p in pods
        if (p.get("spec") or {}).get("nodeName") and (p.get("status") or {}).get("phase") not in ENDED
    )
    out = []
    for node in nodes:
        labels = node["metadata"].get("labels") or {}
        spec, status = node.get("spec") or {}, node.get("status") or {}
        if any(labels.get(k) != v for k, v in selector.items()) or spec.get("unschedulable"):
            continue
        if any(t.get("key") not in tolerated for t in spec.get("taints") or []):
            continue
        if not any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []):
            continue
        room = int((status.get("allocatable") or {}).get("pods", "0")) - on[node["metadata"]["name"]]
        out.append(max(room, 0))
    return out


def room(nodes: Sequence[Mapping[str, Any]], pods: Sequence[Mapping[str, Any]], namespace: str, workers: int,
         one_per_node: bool) -> str:  # fmt: skip
    """Whether a run of ``workers`` in ``namespace`` can finish on these nodes: what it has, or Refused
    saying why not. Pods of another namespace (another run's, left over) refuse it whatever room is
    left; worker pods of its own namespace not yet on a node take a place each; the worker nodes must
    hold every worker by its operator's rule (``one_per_node``: at most one per node, Slinky's pod
    anti-affinity; otherwise every free pod place); the system nodes SYSTEM_ROOM more pods."""
    live = [p for p in pods if (p.get("status") or {}).get("phase") not in ENDED]
    foreign = Counter(
        p["metadata"]["namespace"] for p in live if p["metadata"]["namespace"] not in (namespace, "kube-system")
    )
    if foreign:
        left = ", ".join(f"{n} pods in {ns}" for ns, n in sorted(foreign.items()))
        raise Refused(f"the nodes are not free of other runs' pods ({left})")
    free = free_places(nodes, live, WORKER_SELECTOR, frozenset({POOL}))
    waiting = sum(
        1 for p in live
        if not (p.get("spec") or {}).get("nodeName")
        and all(((p.get("spec") or {}).get("nodeSelector") or {}).get(k) == v for k, v in WORKER_SELECTOR.items())
    )  # fmt: skip
    rule = "one per node" if one_per_node else "every free pod place"
    places = (sum(1 for f in free if f > 0) if one_per_node else sum(free)) - waiting
    if places < workers:
        raise Refused(f"{places} places for {workers} workers on {len(free)} worker nodes ({rule})")
    system = sum(free_places(nodes, live, {POOL: "system"}, frozenset()))
    if system < SYSTEM_ROOM:
        raise Refused(f"{system} pod places free on the system nodes, {SYSTEM_ROOM} wanted for the rest")
    return f"{places} places for {workers} workers ({rule}), {system} on the system nodes"


def check_room(cp: ControlPlane, namespace: str, workers: int, one_per_node: bool) -> str:
    """``room`` over every node and pod as the API server has them now."""
    core: Any = client.CoreV1Api(cp.api_client())
    nodes = json.loads(core.list_node(_preload_content=False).read())["items"]
    pods = json.loads(core.list_pod_for_all_namespaces(_preload_content=False).read())["items"]
    return room(nodes, pods, namespace, workers, one_per_node)


def mark_counts(workers: int) -> dict[int, int]:
    """How many workers Ready each of MARKS stands for (99 % of 1,000 is 990; of 10 it is all 10)."""
    return {p: max(1, math.ceil(workers * p / 100)) for p in MARKS}


# --- measuring ------------------------------------------------------------------------------------------
CPU_OF = ("kube-apiserver", "etcd", "kube-scheduler", "kwok", "kube-controller-manager")


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds the process has used so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds the run's client (``pid``; None: this process, the bare client) and the control
    plane's daemons use between ``start`` and ``stop``: on a machine of two cores, who takes them."""

    def __init__(self, cp: ControlPlane, pid: int | None) -> None:
        self.pids = {c.name: c.proc.pid for c in cp.components if c.name in CPU_OF and c.proc is not None}
        self.client = pid
        self.spent: dict[str, float] = {}

    def _now(self) -> dict[str, float]:
        own = cpu_seconds(self.client) if self.client is not None else time.process_time()
        return {"client": own, **{name: cpu_seconds(pid) for name, pid in self.pids.items()}}

    def start(self) -> None:
        self.spent = self._now()

    def stop(self) -> str:
        now = self._now()
        return ", ".join(f"{k} {now[k] - self.spent.get(k, 0.0):.0f}" for k in now)


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


@dataclass
class Run:
    who: str
    workers: int
    marks: dict[int, float] = field(default_factory=dict)  # per cent Ready (MARKS) -> seconds from the create
    ready: int = 0  # workers Ready at the end
    seconds: float = 0.0  # how long the run was watched: until all were Ready, or until it was stopped
    stopped: str = ""  # why it ended with workers not Ready
    refused: str = ""  # why it was not started
    room: str = ""  # what the room check found
    idle: float = 0.0
    peak: float = 0.0
    after: float = 0.0
    requests: Requests = field(default_factory=Requests)
    pace: str = ""
    cpu: str = ""  # CPU seconds during the run: the run's client and each control-plane daemon
    note: str = ""

    @property
    def finished(self) -> bool:
        return not self.refused and 100 in self.marks

    @property
    def outcome(self) -> str:
        if self.refused:
            return f"refused, not run: {self.refused}"
        return f"{self.room}; {self.ready} Ready in {self.seconds:.1f} s"


def wait_workers(api: Any, namespace: str, selector: str, run: Run, start: float) -> None:
    """Watch the run's workers turn Ready (every half second) until all are, or RUN_LIMIT_S has passed
    since ``start``, or none turned Ready for STALL_S: the time of each of MARKS reached, how many were
    Ready, and why the watch stopped short."""
    need = mark_counts(run.workers)
    last, last_change = -1, time.monotonic()
    while True:
        now = time.monotonic()
        ready = ready_pods(api, namespace, selector)
        if ready != last:
            last, last_change = ready, now
        for p, count in need.items():
            if p not in run.marks and ready >= count:
                run.marks[p] = now - start
        run.ready, run.seconds = ready, now - start
        if ready >= run.workers:
            return
        if now - start >= RUN_LIMIT_S:
            run.stopped = f"{ready} of {run.workers} Ready at the {RUN_LIMIT_S:.0f} s limit"
            return
        if now - last_change >= STALL_S:
            run.stopped = (
                f"{ready} of {run.workers} Ready, none more for {STALL_S:.0f} s, stopped at {now - start:.0f} s"
            )
            return
        time.sleep(0.5)


def audit_time(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def pace(
    log: Path, namespace: str, agents: tuple[str, ...], workers: set[str], begun: float
) -> tuple[list[float], list[float]]:
    """From the audit log: the seconds after ``begun`` (a wall-clock time) at which the run's client
    created pods in ``namespace``, and at which the scheduler bound the pods named in ``workers`` there (not the
    run's other pods), each sorted."""
    wait_written(log, rfc3339(time.time()))
    since = rfc3339(begun)
    created: list[float] = []
    bound: list[float] = []
    seen: set[str] = set()
    ns = f'"namespace":"{namespace}"'
    with log.open() as f:
        for line in f:
            if ns not in line or '"resource":"pods"' not in line or '"verb":"create"' not in line:
                continue
            event = json.loads(line)
            received = event.get("requestReceivedTimestamp", "")
            if received < since or event["auditID"] in seen:
                continue
            seen.add(event["auditID"])
            ref = event.get("objectRef") or {}
            at = audit_time(received) - begun
            if ref.get("subresource") == "binding":
                if ref.get("name") in workers:
                    bound.append(at)
            elif not ref.get("subresource") and str(event.get("userAgent", "")).startswith(agents):
                created.append(at)
    return sorted(created), sorted(bound)


def pace_text(created: list[float], bound: list[float], workers: int) -> str:
    """Pods created from .. to (a second), and bound (the scheduler), with the time half of them were."""

    def span(times: list[float], what: str) -> str:
        if not times:
            return f"none {what}"
        rate = len(times) / max(times[-1] - times[0], 0.1)
        half = times[min(len(times), max(1, workers // 2)) - 1]
        return f"{len(times)} {what} {times[0]:.1f}-{times[-1]:.1f} s (half by {half:.1f} s, {rate:.0f}/s)"

    return f"{span(created, 'created')}; {span(bound, 'bound by the scheduler')}"


# --- the control plane and its nodes ---------------------------------------------------------------
def add_nodes(cp: ControlPlane, count: int, pool: str, pods: str, taints: list[dict[str, str]]) -> None:
    """``count`` kwok nodes of ``pool`` at once (16 creates in flight), then wait until kwok has them all
    Ready and the node lifecycle controller has taken its not-ready taint off each (it does so at its own
    pace, some ten nodes a second: a run started before would wait on that, not on the operator)."""
    api = cp.api_client()
    core: Any = client.CoreV1Api(api)
    resources = {"cpu": "64", "memory": "512Gi", "pods": pods}

    def make(i: int) -> None:
        name = f"{pool}-{i}"
        core.create_node({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "type": "kwok", POOL: pool},
                         "annotations": {"kwok.x-k8s.io/node": "fake"}},
            "spec": {"taints": taints},
            "status": {"capacity": resources, "allocatable": resources},
        })  # fmt: skip

    with ThreadPoolExecutor(16) as pool_:
        list(pool_.map(make, range(count)))
    deadline = time.monotonic() + 600
    ours = {t["key"] for t in taints}
    while time.monotonic() < deadline:
        listed = core.list_node(label_selector=f"{POOL}={pool}", _preload_content=False)
        nodes = json.loads(listed.read())["items"]
        ready = sum(
            any(c["type"] == "Ready" and c["status"] == "True" for c in (n.get("status") or {}).get("conditions", []))
            and not [t for t in (n.get("spec") or {}).get("taints") or [] if t["key"] not in ours]
            for n in nodes
        )
        if ready >= count:
            return
        time.sleep(2)
    raise RuntimeError(f"kwok did not make {count} {pool} nodes Ready (and untainted) in 600 s")


def delete_pods(cp: ControlPlane, namespace: str, selector: str) -> None:
    """Delete the pods ``selector`` picks and wait until they are gone (their nodes are free again). A
    delete of thousands of pods can outlast the API server's request timeout on a busy machine (504: the
    deletion goes on); it is asked again while pods are left."""
    core: Any = client.CoreV1Api(cp.api_client())
    deadline = time.monotonic() + 1200
    asked = 0.0
    while time.monotonic() < deadline:
        if time.monotonic() - asked > 120:
            asked = time.monotonic()
            try:
                core.delete_collection_namespaced_pod(namespace, label_selector=selector)
            except client.ApiException as e:
                if e.status != 504:
                    raise
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
        "spec": {"workerGroups": [{"name": "cpu", "replicas": workers, "nodeSelector": WORKER_SELECTOR,
                                   "tolerations": [WORKER_TOLERATION]}],
                 "login": {"replicas": 1}},
    }  # fmt: skip


WARDEN_WORKERS = "app.kubernetes.io/instance=big,app.kubernetes.io/component=worker"


def run_warden(cp: ControlPlane, workers: int, tag: str) -> tuple[Run, Bare | None]:
    """The operator and a SlurmCluster of ``workers`` until every worker pod is Ready: the figures, and
    what the bare client needs to make the same pods: the namespace with everything else the cluster
    holds (its claims, ConfigMaps, ServiceAccount, nodes Service, and its other pods on the system nodes)
    left in place, the operator stopped and the worker pods gone."""
    api = cp.api_client()
    ns = cp.create_namespace(f"warden-{tag}")
    run = Run("Warden", workers)
    try:
        run.room = check_room(cp, ns, workers, one_per_node=False)
    except Refused as e:
        run.refused = str(e)
        delete_namespace(cp, ns)
        return run, None
    volumes_for(cp, ns)
    op = OperatorProcess(cp.kubeconfig, ns, cp.log_dir, metrics=False)
    op.start()
    assert op.proc is not None
    time.sleep(8)  # started and settled: its watches listed
    run.idle = rss_mib(op.proc.pid)
    sampler = RssSampler(op.proc.pid)
    sampler.start()
    meter = CpuMeter(cp, op.proc.pid)
    meter.start()
    begun = time.time()
    start = time.monotonic()
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "slurm.warden.dev", "v1alpha1", ns, "slurmclusters", warden_body(ns, workers)
    )
    wait_workers(api, ns, WARDEN_WORKERS, run, start)
    run.cpu = meter.stop()
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
    names = running_pods(api, ns, WARDEN_WORKERS)
    run.pace = pace_text(*pace(cp.log_dir / "audit.log", ns, WARDEN_AGENTS, names, begun), workers)
    delete_pods(cp, ns, WARDEN_WORKERS)
    return run, Bare(ns, workerset)


SLINKY_WORKERS = "app.kubernetes.io/name=slurmd,app.kubernetes.io/instance=big"


def run_slinky(cp: ControlPlane, manager: Path, workers: int, tag: str) -> Run:
    api = cp.api_client()
    ns = cp.create_namespace(f"slinky-{tag}")
    run = Run("Slinky", workers)
    try:
        run.room = check_room(cp, ns, workers, one_per_node=True)
    except Refused as e:
        run.refused = str(e)
        delete_namespace(cp, ns)
        return run
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
        run.idle = rss_mib(proc.pid)
        sampler = RssSampler(proc.pid)
        sampler.start()
        meter = CpuMeter(cp, proc.pid)
        meter.start()
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
                     "slurmd": {"image": "slurmd:bench"}, "logfile": {"image": "logfile:bench"},
                     "template": {"spec": {"nodeSelector": WORKER_SELECTOR, "tolerations": [WORKER_TOLERATION]}}},
        })  # fmt: skip
        wait_workers(api, ns, SLINKY_WORKERS, run, start)
        run.cpu = meter.stop()
        time.sleep(10)
        sampler.stop.set()
        sampler.join()
        run.peak, run.after = max(sampler.peak, run.idle), rss_mib(proc.pid)
        run.requests = audit_requests(cp.log_dir / "audit.log", SLINKY_AGENTS, rfc3339(begun), rfc3339(time.time()))
        names = running_pods(api, ns, SLINKY_WORKERS)
        run.pace = pace_text(*pace(cp.log_dir / "audit.log", ns, SLINKY_AGENTS, names, begun), workers)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
        log.close()
    delete_namespace(cp, ns)
    return run


@dataclass
class Bare:
    """Where the bare client makes Warden's worker pods again: the namespace of Warden's run, and its WorkerSet."""

    namespace: str
    workerset: dict[str, Any]


def run_bare(cp: ControlPlane, bare: Bare, workers: int) -> Run:
    """Warden's worker pods made again by a bare client, one POST after another, in the namespace of
    Warden's run with the operator stopped: the same spec (volumes, init containers, labels, node
    selector and toleration: the nodes Service and the policies select them as they did), their own
    names, no owner; raw JSON both ways. The namespace goes afterwards."""
    run = Run("bare client", workers)
    try:
        run.room = check_room(cp, bare.namespace, workers, one_per_node=False)
    except Refused as e:
        run.refused = str(e)
        delete_namespace(cp, bare.namespace)
        return run
    api = cp.new_api_client()
    api.user_agent = BARE_AGENTS[0]
    core = client.CoreV1Api(api)
    template, ws_name = bare.workerset["spec"]["template"], bare.workerset["metadata"]["name"]
    meter = CpuMeter(cp, None)
    meter.start()
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
    wait_workers(cp.api_client(), bare.namespace, WARDEN_WORKERS, run, start)
    run.cpu = meter.stop()
    run.requests = audit_requests(cp.log_dir / "audit.log", BARE_AGENTS, rfc3339(begun), rfc3339(time.time()))
    names = running_pods(cp.api_client(), bare.namespace, WARDEN_WORKERS)
    run.pace = pace_text(*pace(cp.log_dir / "audit.log", bare.namespace, BARE_AGENTS, names, begun), workers)
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
    try:
        lines = [f"Slurm side: {check_room(cp, ns, workers, one_per_node=False)}"]
    except Refused as e:
        delete_namespace(cp, ns)
        return [f"Slurm side refused, not run: {e}"]
    volumes_for(cp, ns)
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
def seconds_cell(run: Run, p: int) -> str:
    return f"{run.marks[p]:.1f}" if p in run.marks else "-"


def ratio_cell(num: Run, den: Run, p: int) -> str:
    """``num``'s time to p % Ready over ``den``'s; a run that was refused or stopped short of it says so."""
    for r in (num, den):
        if r.refused:
            return f"none: {r.who} refused"
        if p not in r.marks:
            return f"none: {r.who} stopped ({r.stopped})" if r.stopped else f"none: {r.who} never got there"
    return f"{num.marks[p] / max(den.marks[p], 0.01):.2f}x"


def table(runs: list[Run]) -> Iterator[str]:
    heads = "".join(f"{f'{p} %' if p < 100 else 'all':>8}" for p in MARKS)
    yield f"{'':14}{'workers':>8}{heads}{'RSS idle':>10}{'peak':>7}{'after':>7}{'reads/w':>9}{'writes/w':>9}  note"
    for r in runs:
        if r.refused:
            yield f"{r.who:14}{r.workers:>8}  refused, not run: {r.refused}"
            continue
        marks = "".join(f"{seconds_cell(r, p):>8}" for p in MARKS)
        idle = f"{r.idle:.0f}" if r.idle else "-"
        peak = f"{r.peak:.0f}" if r.peak else "-"
        after = f"{r.after:.0f}" if r.after else "-"
        note = "; ".join(n for n in (r.stopped and f"STOPPED: {r.stopped}", r.note) if n)
        yield (f"{r.who:14}{r.workers:>8}{marks}{idle:>10}{peak:>7}{after:>7}"
               f"{r.requests.reads / r.workers:>9.2f}{r.requests.writes / r.workers:>9.2f}  {note}")  # fmt: skip


def ratios(runs: list[Run], size: int) -> Iterator[str]:
    """For one size: Slinky / Warden and Warden / bare client at each mark (above 1: Warden is ahead; below
    1: Warden is behind the bare client's pace)."""
    by = {r.who: r for r in runs if r.workers == size}
    for num, den in (("Slinky", "Warden"), ("Warden", "bare client")):
        if num in by and den in by:
            cells = ", ".join(f"{f'{p} %' if p < 100 else 'all'} {ratio_cell(by[num], by[den], p)}" for p in MARKS)
            yield f"{size:>6} workers  {num} / {den}: {cells}"


def row(run: Run) -> str:
    """The run's line of the table, for the log as it ends (a later failure loses nothing measured)."""
    return list(table([run]))[1]


def main(argv: list[str]) -> int:
    sizes = [int(a) for a in argv] or [1000, 10000]
    manager = Path(
        subprocess.run(["bash", "hack/build-slinky.sh"], check=True, capture_output=True, text=True).stdout.strip()
    )
    crds = manager.parent / "crds"
    runs: list[Run] = []
    sync_lines: list[str] = []
    say: Callable[[str], None] = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    with ControlPlane(ensure_binaries(build=False), audit=True, quiet_nodes=True) as cp:
        begun = time.monotonic()
        add_nodes(cp, SYSTEM_NODES, "system", "100", [])
        add_nodes(cp, max(sizes), "worker", "1", [WORKER_TAINT])
        say(f"{SYSTEM_NODES} + {max(sizes)} kwok nodes Ready in {time.monotonic() - begun:.0f} s")
        api = cp.api_client()
        for crd in crd_bodies():
            client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
        subprocess.run([cp.binary("kubectl"), "apply", "--server-side", "-f", str(crds)], env=cp.env(), check=True,
                       capture_output=True)  # fmt: skip
        time.sleep(3)
        for k, size in enumerate(sizes):
            for who in ["Warden", "Slinky"] if k % 2 == 0 else ["Slinky", "Warden"]:
                say(f"{who}: {size} workers ...")
                if who == "Slinky":
                    run = run_slinky(cp, manager, size, f"{size}")
                    runs.append(run)
                    say(f"  {run.outcome}\n  {row(run)}")
                    continue
                run, bare = run_warden(cp, size, f"{size}")
                runs.append(run)
                say(f"  {run.outcome}\n  {row(run)}")
                if bare is None:
                    runs.append(Run("bare client", size, refused="Warden's run was refused"))
                    continue
                say(f"bare client: {size} workers ...")
                runs.append(run_bare(cp, bare, size))
                say(f"  {runs[-1].outcome}\n  {row(runs[-1])}")
        if os.environ.get("WARDEN_BENCH_PEER_SLURM_SIDE", "1") != "0":
            say(f"Slurm side: {max(sizes)} nodes ...")
            sync_lines = slurm_side(cp, max(sizes))
    print(f"kwok nodes: {max(sizes)} worker nodes taking one pod each, tainted for the workers alone, "
          f"+{SYSTEM_NODES} system nodes for every other pod; one control plane, runs in order (the bare client "
          f"right after Warden), who goes first alternating by size; seconds from the create to that share "
          f"of the workers Ready")  # fmt: skip
    for line in table(runs):
        print(line)
    print("ratios (Slinky / Warden above 1: Warden ahead; Warden / bare client: Warden against the floor):")
    for size in sizes:
        for line in ratios(runs, size):
            print(line)
    print(
        "room checked before each run; pace (audit log: the run's pod creates, the scheduler's bindings); CPU "
        "seconds of the run's client (the bench itself for the bare client) and of the control plane"
    )
    for r in runs:
        print(f"  {r.who} {r.workers}: {r.outcome}")
        if r.pace:
            print(f"    {r.pace}")
        if r.cpu:
            print(f"    CPU seconds until all Ready: {r.cpu}")
    print("requests per worker, the most made (audit log, by user agent):")
    for r in runs:
        if not r.refused:
            top = ", ".join(f"{k} {v / r.workers:.2f}" for k, v in r.requests.by.most_common(5))
            print(f"  {r.who} {r.workers}: {top}")
    for line in sync_lines:
        print(line)
    return 1 if any(r.refused for r in runs) else 0  # a run stopped short is a figure; one refused is not


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
