"""Every few seconds, for each SlurmCluster the operator handles: keep the other components' Slurm tokens
fresh (``warden.tokens``), read the worker nodes from slurmctld
(through slurmrestd), the worker pods (from the pod cache) and which Kubernetes nodes are cordoned (one
list, however many nodes), plan (``warden.nodesync``) and
carry out what concerns the whole cluster: pod conditions, drains and resumes for cordoned Kubernetes
nodes and for the node conditions the spec names (``warden.nodeconditions``), ghost node records
deleted, Events, and the status's Slurm view. With backup controllers it also
pings them and marks the controller pods with which slurmctld is in charge (``warden.ha.sync``).
Then the round is handed to the WorkerSet controller (``warden.workers``), whose sets act on it:
scale-in, upgrades, pods that never registered.

A plain thread, not a kopf timer: a timer would need a finalizer on every SlurmCluster, and a cluster
is deleted by garbage collection alone, whether or not the operator runs. It skips a cluster until
its slurmrestd Deployment has a ready pod (so a cluster still starting, or a test tier without Slurm,
costs nothing), and one cluster's failure never stops the others.
"""

from __future__ import annotations

import base64
import datetime
import itertools
import logging
import threading
import time
from dataclasses import dataclass
from functools import partial

from kubernetes.client.exceptions import ApiException

from warden import kubetime, naming, opmetrics, tokens
from warden.clusterqueue import ClusterQueue
from warden.events import Event, Ref
from warden.ha import sync as ha_sync
from warden.kube.apply import Owner
from warden.kube.client import Kube
from warden.kube.events import EventRecorder
from warden.model import (
    API_GROUP,
    API_VERSION,
    WORKER_SET_KIND,
    SlurmClusterSpec,
    Slurmctld,
    parse_spec,
    previous_status,
)
from warden.naming import Names
from warden.nodeconditions.sync import NodeConditionDrains
from warden.nodesync import CONDITION, WorkerPod, condition_manifest, plan, pod_condition
from warden.render.context import Cluster
from warden.render.pods import Manifest
from warden.slurm.model import SlurmError
from warden.slurm.rest import SlurmRest, SlurmUnreachable, mint_token
from warden.slurmactions import SlurmActions
from warden.status import UNRESPONSIVE
from warden.topology import planner
from warden.topology.sync import NodePlacement
from warden.workers.controller import SlurmView, WorkerSets

log = logging.getLogger(__name__)

TOKEN_LIFETIME_S = 300
#: seconds to wait for slurmrestd: longer than Slurm's MessageTimeout (10 s), so that when slurmctld does
#: not answer, slurmrestd's own words say so
REST_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class Settings:
    interval: float = 5.0
    register_timeout: float = 300.0
    #: where each cluster's slurmrestd answers: a URL with ``{namespace}`` and ``{name}`` (the
    #: SlurmCluster's) in it, for an operator outside the cluster; None: the Service's in-cluster URL
    restapi_url: str | None = None

    def restapi_url_of(self, names: Names) -> str:
        if self.restapi_url is None:
            return names.restapi_url
        return self.restapi_url.replace("{namespace}", names.namespace).replace("{name}", names.cluster)


def worker_pod(pod: Manifest) -> WorkerPod:
    meta, spec = pod["metadata"], pod.get("spec") or {}
    return WorkerPod(
        name=meta["name"],
        k8s_node=spec.get("nodeName"),
        condition=pod_condition(pod, CONDITION),
        deleting=bool(meta.get("deletionTimestamp")),
        busy_label=(meta.get("labels") or {}).get(naming.BUSY_LABEL) == "true",
        group=(meta.get("labels") or {}).get(naming.WORKER_GROUP_LABEL),
    )


class SlurmSync:
    def __init__(
        self,
        kube: Kube,
        recorder: EventRecorder,
        actions: SlurmActions,
        workers: WorkerSets,
        settings: Settings,
        queue: ClusterQueue,
    ) -> None:
        self.kube = kube
        self.recorder = recorder
        self.actions = actions
        self.workers = workers
        self.settings = settings
        #: where what a round read goes, for the cluster's status (``warden.clusterwork`` takes it)
        self.queue = queue
        self.clusters: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rounds = itertools.count(1)
        self.placement = NodePlacement(kube, recorder)
        self.node_conditions = NodeConditionDrains(kube)

    def watch(self, namespace: str, name: str) -> None:
        with self._lock:
            self.clusters.add((namespace, name))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="slurm-sync", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.node_conditions.stop()

    def _run(self) -> None:
        while not self._stop.wait(self.settings.interval):
            with self._lock:
                clusters = sorted(self.clusters)
            for namespace, name in clusters:
                start = time.monotonic()
                try:
                    if not self.sync(namespace, name):
                        with self._lock:
                            self.clusters.discard((namespace, name))
                except Exception:  # one cluster's trouble must not stop the others
                    log.exception("SlurmCluster %s/%s: Slurm state sync failed", namespace, name)
                opmetrics.SLURM_SYNC_SECONDS.observe(time.monotonic() - start)

    def sync(self, namespace: str, name: str) -> bool:
        """One round for one cluster; False when the SlurmCluster is gone (stop watching it)."""
        api = self.kube
        body = api.get(f"{API_GROUP}/{API_VERSION}", "SlurmCluster", namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return False
        try:
            spec = parse_spec(body.get("spec") or {})
        except ValueError:
            return True  # the reconcile handler reports invalid specs
        names = Names(cluster=name, namespace=namespace)
        secret = api.get("v1", "Secret", namespace, names.jwt_key)
        encoded = ((secret or {}).get("data") or {}).get(naming.JWT_KEY)
        if not encoded:
            log.warning("SlurmCluster %s/%s: Secret %s has no %s", namespace, name, names.jwt_key, naming.JWT_KEY)
            return True
        key = base64.b64decode(encoded)
        # the other components' tokens, fresh and signed with this key (a rotated key: new tokens at once)
        owner = Owner(name=name, namespace=namespace, uid=str(body["metadata"].get("uid", "")))
        try:
            tokens.refresh(api, Cluster(name=name, namespace=namespace, spec=spec), owner, key, time.time())
        except ApiException as e:  # the exporter reads nothing until they are written; the round goes on
            log.warning("SlurmCluster %s/%s: Slurm tokens not written: %s %s", namespace, name, e.status, e.reason)
        previous = previous_status(body)
        given = planner.given_topology(previous)
        restapi_series = previous.slurm.restapi if previous is not None and previous.slurm is not None else ""
        placing = planner.placing(spec, given, restapi_series)
        speaks = planner.speaks_topology(spec, given)
        deployment = api.get("apps/v1", "Deployment", namespace, names.restapi)
        if not deployment or int((deployment.get("status") or {}).get("readyReplicas", 0)) < 1:
            return True
        rest = SlurmRest(
            self.settings.restapi_url_of(names),
            token=lambda: mint_token(key, "slurm", TOKEN_LIFETIME_S),
            timeout=REST_TIMEOUT_S,
            # a node's place in the topology is read and set from v0.0.44 on (spec.topology: Slurm 25.05 on)
            api_version=naming.RESTAPI_VERSION_TOPOLOGY if placing and speaks else naming.RESTAPI_VERSION,
        )
        self.workers.forget(namespace, name)  # the last round's nodes go before this round's come
        try:
            nodes = rest.nodes()  # before the pods: see nodesync.plan
            rest.look_up_absent_job()  # the job lock users need answers too
        except SlurmUnreachable as e:
            log.warning("SlurmCluster %s/%s: %s", namespace, name, e)
            # with backups, this is when who is in charge matters most (the one that was hangs or died and no
            # backup took over yet): the controller pods say it without slurmctld
            charge = self._in_charge(body, spec, rest)
            self._tell_slurmctld(body, Slurmctld(answers=False, why=str(e), in_charge=charge))
            return True
        except SlurmError as e:
            log.warning("SlurmCluster %s/%s: %s", namespace, name, e)
            return True
        slurmctld = Slurmctld(answers=True, in_charge=self._in_charge(body, spec, rest))
        self._tell_slurmctld(body, slurmctld)
        now = datetime.datetime.now(datetime.UTC)
        stamp = kubetime.stamp(now)
        cluster = Ref.of(body)
        pods = [worker_pod(p) for p in api.list("v1", "Pod", namespace, names.selector("worker"))]
        cordoned = dict.fromkeys(api.cordoned_nodes(), True)
        todo = plan(pods, nodes, cordoned)
        # node conditions (spec.nodeConditionDrains): the nodes they act on are theirs this round, not the cordon's
        conditioned = self.node_conditions.plan(spec, pods, {n.name: n for n in nodes}, cordoned)
        todo.drains = [(n, why) for n, why in todo.drains if n not in conditioned.nodes]
        todo.resumes = [n for n in todo.resumes if n not in conditioned.nodes]
        self.node_conditions.act(conditioned, cluster, rest, self.actions)
        for node_name, why in todo.drains:
            drain = partial(rest.drain, node_name, why)
            self.actions.act(cluster, node_name, drain, "SlurmNodeCordoned", f"{node_name}: drained: {why}")
        for node_name in todo.resumes:
            resume = partial(rest.resume, node_name)
            self.actions.act(cluster, node_name, resume, "SlurmNodeUncordoned", f"{node_name}: resumed")
        for node_name in todo.delete_nodes:
            ghost = partial(rest.delete_node, node_name)
            self.actions.act(cluster, node_name, ghost, "GhostNodeRemoved", f"{node_name}: its pod is gone")
        manifests = {cond: condition_manifest(CONDITION, cond, stamp) for cond in set(todo.conditions.values())}
        writes = [  # one manifest per condition, shared by its pods (the plan has one condition per node state)
            partial(api.set_pod_condition, namespace, pod_name, manifests[cond])
            for pod_name, cond in todo.conditions.items()
        ] + [
            partial(api.set_pod_label, namespace, pod_name, naming.BUSY_LABEL, "true" if busy else None)
            for pod_name, busy in todo.busy.items()
        ]
        written = api.fanout.run(writes)
        if written.error is not None:  # the rest next round: the plan is level-based
            log.warning("SlurmCluster %s/%s: %s of %s pod updates written: %s", namespace, name,
                        len(written.results), len(writes), written.error)  # fmt: skip
        for event in todo.events:
            self.recorder.post_event(Event(cluster, event.reason, event.message, Ref.pod(namespace, event.pod)))
        summary = todo.summary
        if placing:
            placed = self.placement.place(body, spec, previous, pods, nodes, rest, speaks)
            summary = summary.model_copy(update={"topology": placed})
        self.queue.refresh(namespace, name, slurm=summary, slurmctld=slurmctld)
        # last: the round goes to the WorkerSet controller, whose sets act on it
        sets = api.list(f"{API_GROUP}/{API_VERSION}", WORKER_SET_KIND, namespace, names.selector("worker"))
        view = SlurmView(next(self._rounds), cluster, {n.name: n for n in nodes}, rest, now)
        self.workers.observed(view, [ws["metadata"]["name"] for ws in sets])
        return True

    def _in_charge(self, body: Manifest, spec: SlurmClusterSpec, rest: SlurmRest) -> str | None:
        """With backup controllers: who is in charge as the controller pods say it (``warden.ha.sync``), their
        conditions and a takeover Event carried out; None when there are no backups, nobody is in charge, or
        neither the pods nor the ping answered (status keeps the last one)."""
        if not spec.controller.has_backup:
            return None
        charge = ha_sync.ask(self.kube, body, rest)
        if charge is None:
            return None
        ha_sync.carry_out(self.kube, self.recorder, body, charge, kubetime.stamp(datetime.datetime.now(datetime.UTC)))
        return charge.in_charge

    def _tell_slurmctld(self, body: Manifest, slurmctld: Slurmctld) -> None:
        """An Event when slurmctld stopped or started answering again, as told by the status this round
        changes (level-based: an operator restarted mid-hang says nothing twice); the status of a hang."""
        conditions = (body.get("status") or {}).get("conditions") or []
        was_stuck = any(c.get("type") == "ControllerReady" and c.get("reason") == UNRESPONSIVE for c in conditions)
        if not slurmctld.answers and not was_stuck:
            self.recorder.post_event(Event(Ref.of(body), "SlurmctldUnresponsive", slurmctld.why))
        elif slurmctld.answers and was_stuck:
            self.recorder.post_event(Event(Ref.of(body), "SlurmctldResponsive", "slurmctld answers node and job reads"))
        if not slurmctld.answers:
            meta = body["metadata"]
            self.queue.refresh(meta["namespace"], meta["name"], slurmctld=slurmctld)
