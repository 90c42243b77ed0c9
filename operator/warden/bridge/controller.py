"""The bridge's I/O: the pods it schedules, each SlurmCluster's slurmrestd, and what the plan says to do.

One loop: a round every ``interval`` seconds, sooner when a pod of the bridge changes. Each round, for
each SlurmCluster with ``spec.bridge.enabled`` (and this bridge's scheduler name):

1. the pods of the namespaces opted in to it (``slurm.warden.dev/bridge: <namespace>.<cluster>``), from
   the watch cache (selected server-side by ``spec.schedulerName``), grouped into workloads;
2. the bridge's jobs, read only when slurmctld says something changed (``update_time``);
3. ``plan``, then its actions: submits and cancels through slurmrestd, labels, bindings, conditions
   and deletions through the API server (many at once: ``warden.kube.fanout``), Events about the pods.

A pod with the bridge's scheduler name in a namespace no cluster took is told so (PodScheduled False,
``NamespaceNotOptedIn``). Nothing here is state that a restart loses: pods carry their job's id, jobs
name their workload, and what is kept in memory (the last job list, Slurm's recent refusals, Jobs'
parallelism) is read again.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from kubernetes.client.exceptions import ApiException

from warden import kubetime, naming
from warden.bridge import fit
from warden.bridge import plan as planner
from warden.bridge.plan import Bind, Cancel, Evict, Label, Refused, Submit, Unschedulable
from warden.bridge.translate import Defaults
from warden.bridge.workloads import Gang, PodView, gang_key, group, trim
from warden.events import Event, Ref
from warden.kube.cache import Informer
from warden.kube.client import Kube
from warden.kube.events import EventRecorder
from warden.kube.fanout import Fanout
from warden.model import API_GROUP, API_VERSION
from warden.naming import Names
from warden.slurm.model import Job, SlurmError
from warden.slurm.rest import SlurmRest, SlurmRestError, SlurmSubmitError, SlurmUnreachable
from warden.tokens import held_token

Manifest = dict[str, Any]

log = logging.getLogger(__name__)

#: slurmrestd requests in flight at once (submits, cancels)
SUBMITTERS = 8
#: seconds a token read from its Secret is used before the Secret is read again
TOKEN_REREAD_S = 60.0
#: seconds slurmrestd has to answer
REST_TIMEOUT_S = 10.0
#: seconds between reads of the SlurmClusters and the opted-in namespaces
CLUSTERS_REREAD_S = 5.0
#: scheduler-plugins' PodGroup (coscheduling) and the JobSet API, read where their CRDs are installed
POD_GROUP_API = "scheduling.x-k8s.io/v1alpha1"
JOB_SET_API = "jobset.x-k8s.io/v1alpha2"
#: seconds between reads of every job, whatever ``update_time`` says (slurmctld's clock is not ours)
FULL_READ_S = 30.0


@dataclass(frozen=True)
class Settings:
    scheduler_name: str = "warden-slurm"
    interval: float = 1.0
    #: where each cluster's slurmrestd answers, ``{namespace}``/``{name}`` standing for the cluster's;
    #: None: the Service's in-cluster URL
    restapi_url: str | None = None

    def restapi_url_of(self, names: Names) -> str:
        if self.restapi_url is None:
            return names.restapi_url
        return self.restapi_url.replace("{namespace}", names.namespace).replace("{name}", names.cluster)


@dataclass
class ClusterState:
    """What the bridge keeps about one SlurmCluster between rounds (all of it can be read again)."""

    rest: SlurmRest
    jobs: list[Job] = field(default_factory=list)
    jobs_read: float | None = None  # slurmctld's clock is not ours: a read's start, less a margin
    full_read: float = -math.inf  # monotonic time of the last read of every job (none yet: due at once)
    refused: dict[str, Refused] = field(default_factory=dict)
    #: jobs this process submitted, by id, and when: a label may come before a job list that shows them
    submitted: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Target:
    """A SlurmCluster the bridge schedules for, as its spec says."""

    namespace: str
    name: str
    defaults: Defaults


def bridge_spec(cluster: dict[str, Any]) -> dict[str, Any]:
    raw = (cluster.get("spec") or {}).get("bridge") or {}
    return raw if isinstance(raw, dict) else {}


class Bridge:
    def __init__(self, kube: Kube, settings: Settings) -> None:
        self.kube = kube
        self.settings = settings
        self.recorder = EventRecorder(kube)
        self.submitters = Fanout(SUBMITTERS)
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.pods = Informer(
            kube.call,
            kube.stream_lines,
            "/api/v1/pods",
            {},
            project=trim,
            on_change=lambda _t, _o: self.wake.set(),
            field_selector=f"spec.schedulerName={settings.scheduler_name}",
        )
        self.states: dict[tuple[str, str], ClusterState] = {}
        self.tokens: dict[tuple[str, str], tuple[str, float]] = {}  # cluster -> (token, monotonic time read)
        self.gangs: dict[str, Gang] = {}
        self.targets: list[Target] = []
        self.opted_in: dict[str, tuple[str, dict[str, str]]] = {}  # namespace -> (cluster key, annotations)
        #: per cluster (namespace, name): the namespaces last written into its ConfigMap, and why the last
        #: write failed
        self.listed: dict[tuple[str, str], str] = {}
        self.listing_errors: dict[tuple[str, str], str] = {}
        self.read_at = -math.inf  # monotonic: since boot, so a 0 would not be due on a node up a few seconds
        #: monotonic time of the last round that ran to its end (the liveness probe's)
        self.last_round = time.monotonic()

    # --- the loop -----------------------------------------------------------------------------
    def start(self, sync_timeout: float = 60.0) -> None:
        self.pods.start()
        if not self.pods.wait_synced(sync_timeout):
            raise RuntimeError("the bridge's pods were not listed in time")

    def run(self) -> None:
        while not self.stopping.is_set():
            self.wake.wait(self.settings.interval)
            self.wake.clear()
            try:
                self.round()
            except Exception:  # the next round tries again; nothing is lost (level-based)
                log.exception("bridge round failed")
            self.last_round = time.monotonic()

    def stop(self) -> None:
        self.stopping.set()
        self.wake.set()
        self.pods.stop()

    def round(self) -> None:
        if time.monotonic() - self.read_at > CLUSTERS_REREAD_S:
            self._read_clusters()
        pods = [PodView.of(p) for p in self.pods.list("", {})]
        by_cluster: dict[str, list[PodView]] = {}
        for p in pods:
            taken = self.opted_in.get(p.namespace)
            if taken is None:
                self._not_opted_in(p)
            else:
                by_cluster.setdefault(taken[0], []).append(p)
        for target in self.targets:
            self._round(target, by_cluster.get(f"{target.namespace}.{target.name}", []))

    # --- what the bridge reads ------------------------------------------------------------------
    def _read_clusters(self) -> None:
        clusters = self.kube.call("GET", f"/apis/{API_GROUP}/{API_VERSION}/slurmclusters").get("items") or []
        targets = []
        for c in clusters:
            spec = bridge_spec(c)
            if not spec.get("enabled") or spec.get("schedulerName", "warden-slurm") != self.settings.scheduler_name:
                continue
            meta = c["metadata"]
            accounting = (c.get("spec") or {}).get("accounting") or {}
            accounts = isinstance(accounting, dict) and accounting.get("mode", "Disabled") != "Disabled"
            defaults = Defaults(partition=str(spec.get("partition") or "k8s"), qos=str(spec.get("qos") or ""),
                                accounts=accounts)  # fmt: skip
            targets.append(Target(str(meta["namespace"]), str(meta["name"]), defaults))
        self.targets = targets
        keys = {f"{t.namespace}.{t.name}" for t in targets}
        query = [("labelSelector", naming.BRIDGE_NAMESPACE_LABEL)]
        opted: dict[str, tuple[str, dict[str, str]]] = {}
        for ns in self.kube.call("GET", "/api/v1/namespaces", query=query).get("items") or []:
            meta = ns["metadata"]
            key = str((meta.get("labels") or {}).get(naming.BRIDGE_NAMESPACE_LABEL, ""))
            if key in keys:
                opted[str(meta["name"])] = (key, dict(meta.get("annotations") or {}))
        self.opted_in = opted
        self.read_at = time.monotonic()
        for t in targets:
            if t.defaults.accounts:
                self._list_namespaces(
                    t, sorted(ns for ns, (key, _) in opted.items() if key == f"{t.namespace}.{t.name}")
                )

    def _list_namespaces(self, target: Target, namespaces: list[str]) -> None:
        """The namespaces opted in to a cluster with accounting, written into its ConfigMap
        ``<cluster>-bridge-accounts`` (when they changed): its controller pod makes each one's Slurm account
        (``naming.bridge_account``), which the namespace's jobs are submitted with."""
        key, text = (target.namespace, target.name), "".join(f"{ns}\n" for ns in namespaces)
        if self.listed.get(key) == text:
            return
        names = Names(cluster=target.name, namespace=target.namespace)
        try:
            self.kube.call(
                "PATCH", Kube.path("v1", "ConfigMap", target.namespace, names.bridge_accounts),
                body={"data": {naming.BRIDGE_ACCOUNTS_KEY: text}}, content_type="application/merge-patch+json",
                query=[("fieldManager", naming.BRIDGE_FIELD_MANAGER)],
            )  # fmt: skip
        except ApiException as e:  # tried again next read; said once
            said = f"ConfigMap {target.namespace}/{names.bridge_accounts} not written: {e.status} {e.reason}"
            if self.listing_errors.get(key) != said:
                log.warning("SlurmCluster %s/%s: its namespaces get no Slurm account yet: %s", *key, said)
                self.listing_errors[key] = said
            return
        self.listed[key] = text
        self.listing_errors.pop(key, None)
        log.info("SlurmCluster %s/%s: namespaces with a Slurm account: %s", *key, ", ".join(namespaces) or "none")

    def _state(self, target: Target) -> ClusterState:
        key = (target.namespace, target.name)
        state = self.states.get(key)
        if state is None:
            state = self.states[key] = ClusterState(self._client(target))
        return state

    def _client(self, target: Target) -> SlurmRest:
        """A client of the cluster's slurmrestd with connections of its own. After a failed read the round
        makes a new one and reads the token again: a bridge started before the cluster's slurmrestd was
        seen to get HTTP 404 with no text for good while a new process got answers (CI's e2e run)."""
        names = Names(cluster=target.name, namespace=target.namespace)
        return SlurmRest(
            self.settings.restapi_url_of(names),
            token=partial(self._token, names),
            user=naming.BRIDGE_USER,
            timeout=REST_TIMEOUT_S,
            api_version=naming.RESTAPI_VERSION_2605,
        )

    def _token(self, names: Names) -> str:
        """The bridge's token for the cluster, from the Secret the operator keeps fresh (read again
        every ``TOKEN_REREAD_S``)."""
        key, now = (names.namespace, names.cluster), time.monotonic()
        held = self.tokens.get(key)
        if held is not None and now - held[1] < TOKEN_REREAD_S:
            return held[0]
        try:
            secret = self.kube.call("GET", Kube.path("v1", "Secret", names.namespace, names.bridge_token_secret))
        except ApiException as e:
            raise SlurmError(
                f"Secret {names.namespace}/{names.bridge_token_secret} not read: {e.status} {e.reason}"
            ) from e
        token = held_token(secret)
        if token is None:
            raise SlurmError(f"Secret {names.namespace}/{names.bridge_token_secret} holds no token yet")
        self.tokens[key] = (token, now)
        return token

    def _gang(self, p: PodView) -> tuple[str, Gang] | None:
        """The gang the pod belongs to, read once (a Job's parallelism, a PodGroup's minMember); None: alone."""
        key = gang_key(p)
        if key is None:
            return None
        gang = self.gangs.get(key)
        if gang is None:
            if p.pod_group:
                path = f"/apis/{POD_GROUP_API}/namespaces/{p.namespace}/podgroups/{p.pod_group}"
            elif p.job_set:
                path = f"/apis/{JOB_SET_API}/namespaces/{p.namespace}/jobsets/{p.job_set}"
            elif p.owner is not None:
                path = Kube.path("batch/v1", "Job", p.namespace, p.owner.name)
            try:
                found = self.kube.call("GET", path)
            except ApiException as e:
                if e.status != 404:  # no such Job, PodGroup or JobSet (or no such CRD): the pod goes alone
                    raise
                return None
            meta, spec = found["metadata"], found.get("spec") or {}
            if p.pod_group:
                gang = Gang("PodGroup", str(meta["name"]), str(meta["uid"]), int(spec.get("minMember") or 1))
            elif p.job_set:
                gang = Gang.of_job_set(str(meta["name"]), str(meta["uid"]), spec)
            else:
                if str(meta.get("uid")) != key:
                    return None
                completions = spec.get("completions")
                gang = Gang.of_job(str(meta["name"]), key, int(spec.get("parallelism") or 1),
                                   int(completions) if completions is not None else None)  # fmt: skip
            self.gangs[key] = gang
        return key, gang

    def _jobs(self, state: ClusterState) -> list[Job]:
        """The bridge's jobs: read again only when slurmctld says something changed since the last read,
        and in full every ``FULL_READ_S`` (the two clocks may disagree)."""
        started, now = time.time(), time.monotonic()
        full = now - state.full_read > FULL_READ_S
        changed = state.rest.jobs_since(None if full else state.jobs_read)
        if changed is not None:
            state.jobs = [j for j in changed if j.user == naming.BRIDGE_USER]
        state.jobs_read = started - 2  # Slurm compares whole seconds: read the second we read in again
        if full:
            state.full_read = now
        return state.jobs

    # --- one cluster's round ----------------------------------------------------------------------
    def _round(self, target: Target, pods: list[PodView]) -> None:
        state = self._state(target)
        gangs = dict(g for g in (self._gang(p) for p in pods) if g is not None)
        workloads = group(pods, gangs)
        try:
            jobs = self._jobs(state)
        except SlurmError as e:
            said = "" if isinstance(e, SlurmUnreachable) else "jobs not read: "
            log.warning("SlurmCluster %s/%s: %s%s", target.namespace, target.name, said, e)
            state.rest.http.clear()
            state.rest = self._client(target)
            self.tokens.pop((target.namespace, target.name), None)  # and the token read again
            return
        nodes = KubeNodes(self.kube, target)
        annotations = {ns: ann for ns, (_, ann) in self.opted_in.items()}
        now = time.time()
        state.refused = {uid: r for uid, r in state.refused.items() if now - r.at < planner.RETRY_SECONDS}
        state.submitted = {i: t for i, t in state.submitted.items() if now - t < planner.RETRY_SECONDS}
        actions = planner.plan(
            workloads, jobs, naming.BRIDGE_USER, target.defaults, annotations, nodes.of, state.refused, now,
            frozenset(state.submitted), nodes.why_not, nodes.excluded_for,
        )  # fmt: skip
        if actions:
            self._carry_out(target, state, actions)

    # --- what the bridge does -----------------------------------------------------------------------
    def _carry_out(self, target: Target, state: ClusterState, actions: list[planner.Action]) -> None:
        submits = [a for a in actions if isinstance(a, Submit)]
        cancels = [a for a in actions if isinstance(a, Cancel)]
        slurm_calls: list[Callable[[], None]] = [partial(self._submit, state, a) for a in submits]
        slurm_calls += [partial(self._cancel, state, a) for a in cancels]
        done = self.submitters.run(slurm_calls)
        if done.error is not None:
            log.warning("SlurmCluster %s/%s: %s", target.namespace, target.name, done.error)
        kube_calls: list[Callable[[], None]] = []
        for a in actions:
            if isinstance(a, Label):
                kube_calls.append(partial(self._label, a.namespace, a.pod, a.job_id))
            elif isinstance(a, Bind):
                kube_calls.append(partial(self._bind, a))
            elif isinstance(a, Unschedulable):
                kube_calls.append(partial(self._unschedulable, a.namespace, a.pod, a.reason, a.message))
            elif isinstance(a, Evict):
                kube_calls.append(partial(self._evict, a))
        written = self.kube.fanout.run(kube_calls)
        if written.error is not None:  # the rest next round: the plan is level-based
            log.warning("bridge: %s of %s pod writes done: %s", len(written.results), len(kube_calls), written.error)

    def _submit(self, state: ClusterState, a: Submit) -> None:
        w = a.workload
        try:
            submitted = state.rest.submit_job(a.description)
        except SlurmRestError as e:
            message = f"Slurm refused the job: {'; '.join(e.errors) or e}"
            made = e.job_id if isinstance(e, SlurmSubmitError) else None
            if made is not None:  # made without a field slurmrestd could not read: not the job asked for
                state.rest.cancel_job(made)
            state.refused[w.uid] = Refused(time.time(), message, frozenset(p.uid for p in w.pods if p.name in a.pods))
            log.info("%s %s/%s: %s", w.kind, w.namespace, w.name, message)
            for pod in a.pods:
                self._unschedulable(w.namespace, pod, "SlurmRefused", message)
                self._event(w.namespace, pod, "FailedScheduling", message)
            return
        log.info("%s %s/%s: Slurm job %s submitted", w.kind, w.namespace, w.name, submitted.job_id)
        state.submitted[submitted.job_id] = time.time()
        for pod in a.pods:
            self._label(w.namespace, pod, submitted.job_id)
            if submitted.warnings:
                warned = f"Slurm job {submitted.job_id} pending: {'; '.join(submitted.warnings)}"
                self._unschedulable(w.namespace, pod, "SlurmPending", warned)
        self.wake.set()  # its state next round

    def _cancel(self, state: ClusterState, a: Cancel) -> None:
        log.info("Slurm job %s cancelled: %s", a.job_id, a.why)
        state.rest.cancel_job(a.job_id)

    def _label(self, namespace: str, pod: str, job_id: int | None) -> None:
        value = str(job_id) if job_id is not None else None
        self._offer(self.kube.call(
            "PATCH", Kube.path("v1", "Pod", namespace, pod),
            body={"metadata": {"labels": {naming.BRIDGE_JOB_LABEL: value}}},
            content_type="application/merge-patch+json",
        ))  # fmt: skip

    def _bind(self, a: Bind) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": a.pod, "annotations": {naming.BRIDGE_NODE_ANNOTATION: a.place.slurm_node}},
            "target": {"apiVersion": "v1", "kind": "Node", "name": a.place.kube_node},
        }
        try:
            self.kube.call("POST", Kube.path("v1", "Pod", a.namespace, a.pod) + "/binding", body=body)
        except ApiException as e:
            if e.status in (404, 409):  # gone, or bound already (a round before this one's answer came)
                return
            raise
        self._event(
            a.namespace, a.pod, "Scheduled",
            f"Slurm job {a.job_id} placed it on {a.place.kube_node} (Slurm node {a.place.slurm_node})",
        )  # fmt: skip

    def _unschedulable(self, namespace: str, pod: str, reason: str, message: str) -> None:
        condition = {"type": "PodScheduled", "status": "False", "reason": reason, "message": message,
                     "lastTransitionTime": _stamp()}  # fmt: skip
        self._patch_status(namespace, pod, condition)

    def _evict(self, a: Evict) -> None:
        why = "PreemptionByScheduler" if a.event == "SlurmJobPreempted" else "DeletionBySlurm"
        disruption = {"type": "DisruptionTarget", "status": "True", "reason": why, "message": a.note,
                      "lastTransitionTime": _stamp()}  # fmt: skip
        self._patch_status(a.namespace, a.pod, disruption)
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if a.grace_s is not None:
            body["gracePeriodSeconds"] = a.grace_s
        try:
            self._offer(self.kube.call("DELETE", Kube.path("v1", "Pod", a.namespace, a.pod), body=body))
        except ApiException as e:
            if e.status != 404:
                raise
            return
        log.info("pod %s/%s deleted: %s", a.namespace, a.pod, a.note)
        self._event(a.namespace, a.pod, a.event, a.note)

    def _not_opted_in(self, p: PodView) -> None:
        if not p.live or p.bound:
            return
        message = (
            f"namespace {p.namespace} is not opted in to a Slurm cluster: a cluster admin labels it"
            f" {naming.BRIDGE_NAMESPACE_LABEL}=<cluster-namespace>.<cluster> (a SlurmCluster with spec.bridge)"
        )
        if p.conditions.get("PodScheduled") != ("False", "NamespaceNotOptedIn", message):
            self._unschedulable(p.namespace, p.name, "NamespaceNotOptedIn", message)

    # --- plumbing -----------------------------------------------------------------------------------
    def _patch_status(self, namespace: str, pod: str, condition: dict[str, Any]) -> None:
        try:
            self._offer(self.kube.call(
                "PATCH", Kube.path("v1", "Pod", namespace, pod) + "/status",
                body={"status": {"conditions": [condition]}},
                content_type="application/strategic-merge-patch+json",
            ))  # fmt: skip
        except ApiException as e:
            if e.status != 404:
                raise

    def _offer(self, answer: Any) -> None:
        """Our own write's answer to the pod cache: the next round reads what it did."""
        if isinstance(answer, dict) and answer.get("kind") == "Pod":
            self.pods.offer(answer)

    def _event(self, namespace: str, pod: str, reason: str, note: str) -> None:
        self.recorder.post_event(Event(Ref.pod(namespace, pod), reason, note))


class KubeNodes:
    """The Kubernetes node of a Slurm node, read once per round when a binding asks: the node of the
    shared worker group's worker pod of that name, else the Kubernetes node of the same name if an admin
    labelled it an external node of this cluster (``naming.BRIDGE_EXTERNAL_NODE_LABEL``)."""

    def __init__(self, kube: Kube, target: Target) -> None:
        self.kube = kube
        self.names = Names(cluster=target.name, namespace=target.namespace)
        self.workers: dict[str, str] | None = None
        self.known: dict[str, Manifest | None] = {}
        self.candidates: dict[str, str] | None = None

    def _workers(self) -> dict[str, str]:
        """Each worker pod's Slurm node (its name) and Kubernetes node, read once a round."""
        if self.workers is None:
            selector = ",".join(f"{k}={v}" for k, v in sorted(self.names.selector("worker").items()))
            path = Kube.path("v1", "Pod", self.names.namespace)
            items = self.kube.call("GET", path, query=[("labelSelector", selector)]).get("items") or []
            self.workers = {str(w["metadata"]["name"]): str((w.get("spec") or {}).get("nodeName") or "") for w in items}
        return self.workers

    def of(self, slurm_node: str) -> str | None:
        workers = self._workers()
        if slurm_node in workers:
            return workers[slurm_node] or None
        node = self.node(slurm_node)
        labels = (node or {}).get("metadata", {}).get("labels") or {}
        return slurm_node if labels.get(naming.BRIDGE_EXTERNAL_NODE_LABEL) == self._mine else None

    @property
    def _mine(self) -> str:
        return f"{self.names.namespace}.{self.names.cluster}"

    def _candidates(self) -> dict[str, str]:
        """Every Slurm node the bridge could bind to and its Kubernetes node: the worker pods', and the
        external nodes an admin labelled for this cluster (listed once a round)."""
        if self.candidates is None:
            self.candidates = {s: k for s, k in self._workers().items() if k}
            selector = [("labelSelector", f"{naming.BRIDGE_EXTERNAL_NODE_LABEL}={self._mine}")]
            for node in self.kube.call("GET", Kube.path("v1", "Node", ""), query=selector).get("items") or []:
                name = str(node["metadata"]["name"])
                self.known[name] = node
                self.candidates[name] = name
        return self.candidates

    def excluded_for(self, pod: PodView) -> list[str]:
        """The Slurm nodes the bridge could bind to whose Kubernetes node ``pod`` may not run on
        (``warden.bridge.fit``): its job asks Slurm for none of them."""
        return sorted(s for s, k in self._candidates().items() if self.why_not(pod, k) is not None)

    def node(self, name: str) -> Manifest | None:
        """The Kubernetes node ``name`` (read once a round), None when there is none."""
        if name not in self.known:
            try:
                self.known[name] = self.kube.call("GET", Kube.path("v1", "Node", "", name))
            except ApiException as e:
                if e.status != 404:
                    raise
                self.known[name] = None
        return self.known[name]

    def why_not(self, pod: PodView, kube_node: str) -> str | None:
        """Why ``pod`` may not run on ``kube_node`` (``warden.bridge.fit``); a node gone says so."""
        node = self.node(kube_node)
        return "the node is gone" if node is None else fit.why_not(pod.placement, node)


def _stamp() -> str:
    return kubetime.stamp()
