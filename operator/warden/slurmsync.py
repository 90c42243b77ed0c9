"""Every few seconds, for each SlurmCluster the operator handles: read the worker nodes from slurmctld
(through slurmrestd) and the worker pods and their Kubernetes nodes, plan (``warden.nodesync``) and
carry out: pod conditions, drains and resumes, ghost node records deleted, unregistered pods
recreated, Events, and the status's Slurm view.

A plain thread, not a kopf timer: a timer would need a finalizer on every SlurmCluster, and a cluster
is deleted by garbage collection alone, whether or not the operator runs. It skips a cluster until
its slurmrestd Deployment has a ready pod (so a cluster still starting, or a test tier without Slurm,
costs nothing), and one cluster's failure never stops the others.
"""

from __future__ import annotations

import base64
import datetime
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from kubernetes.client.exceptions import ApiException

from warden import naming, opmetrics, podset, rollout, scalein
from warden.events import REASONS, Event, Ref
from warden.kube.client import Kube
from warden.kube.events import EventRecorder
from warden.model import API_GROUP, API_VERSION, WORKER_SET_KIND, SlurmNodesStatus, parse_spec
from warden.naming import Names
from warden.nodesync import CONDITION, PodCondition, WorkerPod, plan
from warden.render.pods import Manifest
from warden.slurm.model import Node, SlurmError
from warden.slurm.rest import SlurmRest, SlurmUnreachable, mint_token
from warden.status import UNRESPONSIVE, Slurmctld

log = logging.getLogger(__name__)

TOKEN_LIFETIME_S = 300
#: seconds to wait for slurmrestd: longer than Slurm's MessageTimeout (10 s), so that when slurmctld does
#: not answer, slurmrestd's own words say so
REST_TIMEOUT_S = 15.0

Refresh = Callable[[str, str, SlurmNodesStatus | None, Slurmctld | None], None]


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


def _parse_time(text: str) -> datetime.datetime:
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


def worker_pod(pod: Manifest, now: datetime.datetime) -> WorkerPod:
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    running_for = None
    for cs in status.get("containerStatuses") or []:
        started = ((cs.get("state") or {}).get("running") or {}).get("startedAt")
        if cs.get("name") == "slurmd" and started:
            running_for = (now - _parse_time(started)).total_seconds()
    condition = None
    for c in status.get("conditions") or []:
        if c.get("type") == CONDITION:
            condition = PodCondition(c.get("status", ""), c.get("reason", ""), c.get("message", ""))
    return WorkerPod(
        name=meta["name"],
        k8s_node=spec.get("nodeName"),
        running_for=running_for,
        condition=condition,
        deleting=bool(meta.get("deletionTimestamp")),
        busy_label=(meta.get("labels") or {}).get(naming.BUSY_LABEL) == "true",
    )


def _live(workerset: Manifest, pods: list[Manifest], deleting: bool = False) -> list[tuple[Manifest, podset.Pod]]:
    """The set's own pods (``<set>-<i>``) that have not ended, as read and as ``warden.podset`` sees
    them; with ``deleting``, those going too."""
    out = []
    for raw in pods:
        pod = podset.pod_of(workerset["metadata"]["name"], raw)
        if pod is not None and not pod.ended and (deleting or not pod.deleting):
            out.append((raw, pod))
    return out


def _scalein_pod(raw: Manifest, pod: podset.Pod) -> scalein.Pod:
    since = (raw["metadata"].get("annotations") or {}).get(naming.LEAVING_ANNOTATION)
    return scalein.Pod(
        name=pod.name,
        ordinal=pod.ordinal,
        deleting=pod.deleting,
        leaving_since=_parse_time(since).timestamp() if since else None,
    )


class SlurmSync:
    def __init__(self, kube: Kube, recorder: EventRecorder, settings: Settings, refresh: Refresh) -> None:
        self.kube = kube
        self.recorder = recorder
        self.settings = settings
        self.refresh = refresh
        self.clusters: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed: set[tuple[str, str, str]] = set()  # (namespace, cluster, action) whose failure was told

    def watch(self, namespace: str, name: str) -> None:
        with self._lock:
            self.clusters.add((namespace, name))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="slurm-sync", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

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
            parse_spec(body.get("spec") or {})
        except ValueError:
            return True  # the reconcile handler reports invalid specs
        names = Names(cluster=name, namespace=namespace)
        deployment = api.get("apps/v1", "Deployment", namespace, names.restapi)
        if not deployment or int((deployment.get("status") or {}).get("readyReplicas", 0)) < 1:
            return True
        secret = api.get("v1", "Secret", namespace, names.jwt_key)
        encoded = ((secret or {}).get("data") or {}).get(naming.JWT_KEY)
        if not encoded:
            log.warning("SlurmCluster %s/%s: Secret %s has no %s", namespace, name, names.jwt_key, naming.JWT_KEY)
            return True
        key = base64.b64decode(encoded)
        rest = SlurmRest(
            self.settings.restapi_url_of(names),
            token=lambda: mint_token(key, "slurm", TOKEN_LIFETIME_S),
            timeout=REST_TIMEOUT_S,
        )
        try:
            nodes = rest.nodes()  # before the pods: see nodesync.plan
            rest.look_up_absent_job()  # the job lock users need answers too
        except SlurmUnreachable as e:
            log.warning("SlurmCluster %s/%s: %s", namespace, name, e)
            self._tell_slurmctld(body, Slurmctld(answers=False, why=str(e)))
            return True
        except SlurmError as e:
            log.warning("SlurmCluster %s/%s: %s", namespace, name, e)
            return True
        slurmctld = Slurmctld(answers=True)
        self._tell_slurmctld(body, slurmctld)
        now = datetime.datetime.now(datetime.UTC)
        raw_pods = api.list("v1", "Pod", namespace, names.selector("worker"))
        pods = [worker_pod(p, now) for p in raw_pods]
        cordoned: dict[str, bool] = {}
        for k8s_node in {p.k8s_node for p in pods if p.k8s_node}:
            node = api.get_node(k8s_node)
            cordoned[k8s_node] = bool(node and (node.get("spec") or {}).get("unschedulable"))
        todo = plan(pods, nodes, cordoned, self.settings.register_timeout)
        self._carry_out(body, rest, todo.drains, todo.resumes, todo.delete_nodes)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        for pod_name, cond in todo.conditions.items():
            api.set_pod_condition(
                namespace,
                pod_name,
                {
                    "type": CONDITION,
                    "status": cond.status,
                    "reason": cond.reason,
                    "message": cond.message,
                    "lastTransitionTime": stamp,
                },
            )
        for pod_name, busy in todo.busy.items():
            api.set_pod_label(namespace, pod_name, naming.BUSY_LABEL, "true" if busy else None)
        for pod_name, why in todo.delete_pods:
            log.info("SlurmCluster %s/%s: deleting pod %s: %s", namespace, name, pod_name, why)
            api.delete("v1", "Pod", namespace, pod_name, "Background")
            note = f"{pod_name}: {why}; its WorkerSet makes it afresh"
            self.recorder.post_event(Event(Ref.of(body), "WorkerRecreated", note, Ref.pod(namespace, pod_name)))
        for event in todo.events:
            self.recorder.post_event(Event(Ref.of(body), event.reason, event.message, Ref.pod(namespace, event.pod)))
        self.refresh(namespace, name, todo.summary, slurmctld)
        # last: the groups' sizes and templates, read once for both planners
        sets = api.list(f"{API_GROUP}/{API_VERSION}", WORKER_SET_KIND, namespace, names.selector("worker"))
        leaving = self._scale_in(body, rest, nodes, sets, raw_pods, now)
        self._roll(body, rest, nodes, sets, raw_pods, leaving)
        return True

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
            self.refresh(meta["namespace"], meta["name"], None, slurmctld)

    def _scale_in(
        self,
        body: Manifest,
        rest: SlurmRest,
        nodes: list[Node],
        sets: list[Manifest],
        pods: list[Manifest],
        now: datetime.datetime,
    ) -> set[str]:
        """Shrink worker groups: pick the pods that go, drain them, delete each once idle
        (``warden.scalein``). Returns the pods leaving."""
        api = self.kube
        namespace = body["metadata"]["namespace"]
        groups = []
        for ws in sets:
            timeout = ws["spec"].get("scaleInTimeoutSeconds")
            groups.append(
                scalein.Group(
                    workerset=ws["metadata"]["name"],
                    desired=int(ws["spec"].get("replicas", 0)),
                    pods=tuple(_scalein_pod(raw, p) for raw, p in _live(ws, pods)),
                    timeout=float(timeout) if timeout is not None else None,
                )
            )
        if not any(len(g.pods) > g.desired or any(p.leaving_since for p in g.pods) for g in groups):
            return set()  # nothing shrinks, nothing was picked: no need to ask Slurm for its jobs
        ends = self._job_ends(body, rest)
        todo = scalein.plan(groups, {n.name: n for n in nodes}, ends, now.timestamp())
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        for pod in todo.pick:
            api.set_pod_annotation(namespace, pod, naming.LEAVING_ANNOTATION, stamp)
        for pod in todo.unpick:
            api.set_pod_annotation(namespace, pod, naming.LEAVING_ANNOTATION, None)
        for node, reason in todo.drains:
            self._act(body, node, partial(rest.drain, node, reason), "ScaleInDraining", f"{node}: drained: {reason}")
        for node in todo.resumes:
            self._act(body, node, partial(rest.resume, node), "ScaleInCancelled", f"{node}: resumed, it stays")
        for pod, why in todo.deletes:
            self._act(body, pod, partial(self._delete_pod, namespace, pod), "ScaledIn", f"{pod}: deleted: {why}")
        picked = {p.name for g in groups for p in g.pods if p.leaving_since is not None}
        return (picked | set(todo.pick)) - set(todo.unpick)

    def _job_ends(self, body: Manifest, rest: SlurmRest) -> dict[str, float]:
        """For each node running jobs: when the last of them is due to end (Slurm's end time)."""
        try:
            jobs = rest.jobs()
        except SlurmError as e:  # without end times, busy nodes rank by ordinal alone
            log.warning("SlurmCluster %s: %s", body["metadata"]["name"], e)
            return {}
        ends: dict[str, float] = {}
        for job in jobs:
            if job.state == "RUNNING" and job.end_time is not None:
                for node in job.nodes:
                    ends[node] = max(ends.get(node, 0.0), job.end_time)
        return ends

    def _roll(
        self,
        body: Manifest,
        rest: SlurmRest,
        nodes: list[Node],
        sets: list[Manifest],
        pods: list[Manifest],
        leaving: set[str],
    ) -> None:
        """Move worker pods to their WorkerSet's current template without killing a job (``warden.rollout``)."""
        namespace = body["metadata"]["namespace"]
        groups = []
        for ws in sets:
            mine = [
                rollout.Pod(p.name, p.ordinal, p.template, deleting=p.deleting, leaving=p.name in leaving)
                for _, p in _live(ws, pods, deleting=True)
            ]
            groups.append(
                rollout.Group(
                    workerset=ws["metadata"]["name"],
                    update_revision=podset.template_hash(ws),
                    max_unavailable=int(ws["spec"].get("maxUnavailable", 1)),
                    pods=tuple(mine),
                )
            )
        todo = rollout.plan(groups, {n.name: n for n in nodes})
        for node, reason in todo.drains:
            self._act(body, node, partial(rest.drain, node, reason), "UpgradeDraining", f"{node}: drained: {reason}")
        for pod, why in todo.deletes:
            self._act(body, pod, partial(self._delete_pod, namespace, pod), "UpgradeReplacing", f"{pod}: {why}")

    def _delete_pod(self, namespace: str, pod: str) -> None:
        self.kube.delete("v1", "Pod", namespace, pod, "Background")

    def _carry_out(
        self, body: Manifest, rest: SlurmRest, drains: list[tuple[str, str]], resumes: list[str], ghosts: list[str]
    ) -> None:
        for node, reason in drains:
            self._act(body, node, partial(rest.drain, node, reason), "SlurmNodeCordoned", f"{node}: drained: {reason}")
        for node in resumes:
            self._act(body, node, partial(rest.resume, node), "SlurmNodeUncordoned", f"{node}: resumed")
        for node in ghosts:
            self._act(body, node, partial(rest.delete_node, node), "GhostNodeRemoved", f"{node}: its pod is gone")

    def _act(self, body: Manifest, pod: str, action: Callable[[], None], reason: str, message: str) -> None:
        """Run one Slurm action about worker ``pod`` (its Slurm node has the same name) and say so in
        an Event; a failure is told once, not every round."""
        namespace, cluster = body["metadata"]["namespace"], body["metadata"]["name"]
        related = Ref.pod(namespace, pod)
        counted = opmetrics.SLURM_ACTIONS.labels(f"{namespace}/{cluster}", reason, "failed")
        told = (namespace, cluster, message)
        try:
            action()
        except (SlurmError, ApiException) as e:
            counted.inc()
            log.warning("SlurmCluster %s/%s: %s", namespace, cluster, e)
            if told not in self._failed:
                self._failed.add(told)
                note = f"{reason} of {pod} failed: {e}"
                failed = Event(Ref.of(body), "SlurmActionFailed", note, related, action=REASONS[reason].action)
                self.recorder.post_event(failed)
            return
        self._failed.discard(told)
        opmetrics.SLURM_ACTIONS.labels(f"{namespace}/{cluster}", reason, "ok").inc()
        log.info("SlurmCluster %s/%s: %s", namespace, cluster, message)
        self.recorder.post_event(Event(Ref.of(body), reason, message, related))
