"""kopf handlers: thin. They orchestrate `warden.reconcile` and turn its outcome into Events.

- SlurmCluster created, spec changed, or operator (re)started: reconcile (render → apply → prune →
  status).
- A child object was deleted, or changed by someone else (a person's `kubectl edit`, another
  controller): reconcile its owner, which puts it back (self-healing, within seconds, no spec edit or
  restart needed). Who changed an object last is read from its managedFields: changes by the operator's
  own field manager and status writes are not drift. A heal that could not apply everything (an API
  error, an object still being deleted) is tried again until it does, and only then says `ObjectRestored`.
- A child StatefulSet/WorkerSet/Job, slurmrestd's Deployment or the health-check report ConfigMap
  changed: refresh the owner's status.
- One watch per kind: the children the operator caches (StatefulSets, Deployments, Jobs, ConfigMaps,
  WorkerSets, pods) are watched by their watch caches (`warden.kube.cache`), which tell each change here
  (``ON_CHANGE``); kopf watches the others (``warden.kube.kinds``: ``watch``) and the SlurmClusters,
  whose every event it delivers keeps their cache too (``cluster_observed``).
- Every handler and loop here only queues a cluster's work (``warden.clusterqueue``); one thread, the
  cluster worker (``warden.clusterwork``), decides between a status refresh and a reconcile and does it.
  Only the spec handler reconciles in kopf's own thread (kopf retries it and keeps its diff base).
- A WorkerSet or one of its pods changed: the WorkerSet controller (`warden.workers`, one thread and
  a queue) looks at the set: its pods made, scaled in, upgraded, made afresh; its status.
- Reads of the cluster and its children (pods, WorkerSets, StatefulSets, Deployments, Jobs, ConfigMaps)
  come from watch caches: an event costs no GET.
  This is how readiness reaches status without polling. There is no kopf timer or daemon on purpose:
  those would need a finalizer, and a SlurmCluster is deleted by garbage collection alone, whether
  or not the operator runs.
- Slurm's side is read every few seconds by one thread (`warden.slurmsync`) for every SlurmCluster
  the handlers above have seen: node states to pod conditions, cordons to drains, what it read queued for
  the cluster's status; each round then goes to the WorkerSet controller, whose sets act on what Slurm said.
- A cluster's directory (spec.identity.ldap) is checked every half minute by another (`warden.directorysync`).
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import kopf

from warden import opmetrics
from warden.clusterevents import ClusterEvents
from warden.clusterqueue import ClusterQueue, Told
from warden.clusterwork import CHECK_DELAY_SECONDS, RETRY_DELAY_SECONDS, ClusterWorker
from warden.configcheck.render import COMPONENT as CONFIG_CHECK
from warden.directorysync import DirectorySync
from warden.directorysync import Settings as DirectorySettings
from warden.imagepulls import PullWatch
from warden.kube import kinds, storedversions
from warden.kube.apply import Applier, Owner
from warden.kube.cache import OnChange
from warden.kube.client import Kube, api_client
from warden.kube.events import EventRecorder
from warden.kube.retention import set_jail_retention
from warden.model import (
    API_GROUP,
    API_VERSION,
    PLURAL,
    WORKER_SET_KIND,
    parse_spec,
)
from warden.naming import (
    BRIDGE_FIELD_MANAGER,
    COMPONENT_LABEL,
    FIELD_MANAGER,
    INSTANCE_LABEL,
    MANAGED,
    MANAGED_BY_LABEL,
)
from warden.observe import health_report
from warden.reconcile import reconcile
from warden.render.context import ServiceAccountRef
from warden.slurmactions import SlurmActions
from warden.slurmsync import Settings, SlurmSync
from warden.workers.controller import WorkerSets

log = logging.getLogger(__name__)

MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}=warden"
USER_AGENT = "warden-operator"
HEALTH = "health-check"


class State:
    """Process-wide handles, made once at startup (kopf passes them as `memo`)."""

    def __init__(self) -> None:
        self.kube: Kube | None = None
        self.applier: Applier | None = None
        self.events: EventRecorder | None = None
        #: one writer of a cluster at a time (the spec handler, in kopf's threads, and the cluster worker)
        self.locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
        #: every cluster's work, taken by the one cluster worker
        self.queue = ClusterQueue()
        self.work: ClusterWorker | None = None
        self.sync_settings = Settings()
        #: the namespaces the operator watches (none: every namespace)
        self.namespaces: list[str] = []
        self.sync: SlurmSync | None = None
        self.directory_settings = DirectorySettings()
        self.directories: DirectorySync | None = None
        #: the bridge's ServiceAccount (``--bridge-service-account``): clusters with an enabled bridge give
        #: it a Role to read their bridge token (``warden.render.bridge``); None: no bridge installed
        self.bridge_account: ServiceAccountRef | None = None
        self.worker_sets: WorkerSets | None = None
        #: pods that could not pull an image when last seen (their cluster's status looks again when they can)
        self.pulls = PullWatch()

    @property
    def slurm_required(self) -> bool:
        """Whether Ready waits for slurmctld's word (the operator reads Slurm unless told not to)."""
        return self.sync_settings.interval > 0

    def seen(self, namespace: str, name: str) -> None:
        """A SlurmCluster this operator handles: its Slurm side is synced from now on."""
        if self.sync is not None:
            self.sync.watch(namespace, name)
        if self.directories is not None:
            self.directories.watch(namespace, name)


STATE = State()


def applier() -> Applier:
    if STATE.applier is None:
        raise RuntimeError("the operator has not started: no Kubernetes client yet")
    return STATE.applier


def kube() -> Kube:
    return applier().kube


def recorder() -> EventRecorder:
    if STATE.events is None:
        raise RuntimeError("the operator has not started: no Kubernetes client yet")
    return STATE.events


def tell() -> ClusterEvents:
    return ClusterEvents(recorder())


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    prefix = API_GROUP
    settings.persistence.finalizer = f"{prefix}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=prefix)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=prefix, key="last-handled-configuration"
    )
    settings.posting.enabled = False  # every Event is the operator's own (warden.events), none kopf's
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.execution.max_workers = 8
    # every child kopf watches is selected server-side: never every ConfigMap or Secret of the cluster
    children = {(k.group, k.plural) for k in kinds.REGISTRY if k.watch in ("heal", "own") and k.kind != "SlurmCluster"}
    settings.watching.label_selectors[lambda r: (r.group, r.plural) in children] = MANAGED_SELECTOR
    STATE.kube = Kube(api_client(USER_AGENT))
    # a CRD release that changed the storage version: Warden's objects are written again in it
    storedversions.migrate_all(STATE.kube, STATE.namespaces)
    STATE.applier = Applier(STATE.kube)
    STATE.events = EventRecorder(STATE.kube)
    # the Events another replica posted before this one led: their repeats count them up, none says it twice
    STATE.events.adopt_posted(STATE.namespaces)
    actions = SlurmActions(STATE.events)
    timeout = STATE.sync_settings.register_timeout
    STATE.worker_sets = WorkerSets(STATE.kube, actions, STATE.slurm_required, timeout)
    if not STATE.kube.use_caches(STATE.namespaces, ON_CHANGE):
        log.warning("the watch caches have not listed everything yet; reads go to the API server until they have")
    STATE.worker_sets.start()
    STATE.work = ClusterWorker(
        STATE.applier, tell(), STATE.queue, STATE.slurm_required, lambda: STATE.bridge_account, STATE.locks
    )
    STATE.work.start()
    if STATE.slurm_required:
        STATE.sync = SlurmSync(STATE.kube, STATE.events, actions, STATE.worker_sets, STATE.sync_settings, STATE.queue)
        STATE.sync.start()
    if STATE.directory_settings.interval > 0:
        STATE.directories = DirectorySync(STATE.kube, STATE.events, STATE.directory_settings, STATE.queue)
        STATE.directories.start()


@kopf.on.cleanup()
def stop_sync(**_: Any) -> None:
    if STATE.sync is not None:
        STATE.sync.stop()
    if STATE.directories is not None:
        STATE.directories.stop()
    if STATE.worker_sets is not None:
        STATE.worker_sets.stop()
    if STATE.work is not None:
        STATE.work.stop()
    if STATE.kube is not None and STATE.kube.caches is not None:
        STATE.kube.caches.stop()


@kopf.on.event(API_GROUP, API_VERSION, PLURAL)
def cluster_observed(event: kopf.RawEvent, **_: Any) -> None:
    """Every change of a SlurmCluster kopf's watch delivers, to its cache (listed once, then kept by this
    watch alone: one watch per kind, ``warden.kube.cache``)."""
    kube().observed(event.get("type"), event["object"])


@kopf.on.resume(API_GROUP, API_VERSION, PLURAL)
@kopf.on.create(API_GROUP, API_VERSION, PLURAL)
@kopf.on.update(API_GROUP, API_VERSION, PLURAL, field="spec")
def reconcile_cluster(body: kopf.Body, **_: Any) -> None:
    kube().observed("MODIFIED", body)
    STATE.seen(body["metadata"]["namespace"], body["metadata"]["name"])
    if STATE.directories is not None:
        STATE.directories.check_soon()  # the directory settings may have changed
    with STATE.locks[(body["metadata"]["namespace"], body["metadata"]["name"])]:
        try:
            outcome = reconcile(applier(), dict(body), STATE.slurm_required, STATE.bridge_account)
        except Exception as e:  # kopf logs it and retries; people see it too
            tell().say(body, "ReconcileFailed", f"{type(e).__name__}: {e}")
            raise
    tell().unknown_fields(body, outcome)
    if outcome.invalid is not None:
        tell().say(body, "InvalidSpec", outcome.invalid)
        raise kopf.PermanentError(outcome.invalid)
    tell().reconciled(body, outcome)
    if outcome.result is None:  # a Slurm series or configuration refused: nothing applied, status says why
        return
    if not outcome.result.complete:
        problems = outcome.result.errors + outcome.result.waiting
        # Slurm's check of a new configuration answers within seconds: looked at again sooner
        checking = outcome.config_check is not None and outcome.config_check.holds and not outcome.result.errors
        raise kopf.TemporaryError("; ".join(problems), delay=CHECK_DELAY_SECONDS if checking else RETRY_DELAY_SECONDS)
    tell().say(body, "Reconciled", f"{len(outcome.result.applied)} objects applied; phase {outcome.status.phase}")


def health_told(report: Mapping[str, Any]) -> tuple[Told, ...]:
    """What a check run's report says about the cluster: one Warning Event per node it drained, one Normal
    Event per node it resumed, and one Warning Event when the run failed as a whole (it drained nobody).
    Told once per change of the report ConfigMap (its watch tells each change once), so a run is announced
    once, however many status refreshes happen around it."""
    told: list[Told] = []
    if report.get("checkFailed"):
        told.append(Told("HealthCheckFailed", f"NCCL check drained nobody: {report['checkFailed']}"))
    told += [Told("NodeDrained", f"{d['node']}: {d['reason']}", d["node"]) for d in report.get("drained", [])]
    told += [Told("NodeResumed", f"{n} passed the NCCL check again", n) for n in report.get("resumed", [])]
    return tuple(told)


def _owner_name(owner_references: list[dict[str, Any]] | None) -> str | None:
    for ref in owner_references or []:
        if ref.get("kind") == "SlurmCluster" and ref.get("apiVersion", "").startswith(f"{API_GROUP}/"):
            return str(ref["name"])
    return None


def drifted(type: str | None, meta: Mapping[str, Any]) -> bool:
    """Whether a child's event means it no longer is what the operator made: deleted, or last written
    (outside its status) by another field manager than the operator's or the bridge's (which writes only
    the data of the ConfigMap of its namespaces, which the operator leaves to it)."""
    if type == "DELETED":
        return True
    if type != "MODIFIED":
        return False
    entries = [e for e in meta.get("managedFields") or [] if not e.get("subresource") and e.get("time")]
    ours = max((e["time"] for e in entries if e.get("manager") == FIELD_MANAGER), default="")
    return any(e["time"] >= ours for e in entries if e.get("manager") not in (FIELD_MANAGER, BRIDGE_FIELD_MANAGER))


def _heal_if_drifted(type: str | None, meta: Mapping[str, Any], namespace: str, owner: str, kind: str) -> bool:
    """Reconcile the owner when the event says the child drifted; whether it did."""
    if not drifted(type, meta):
        return False
    how = "deleted" if type == "DELETED" else "changed by someone else"
    STATE.queue.heal(namespace, owner, f"{kind}/{meta.get('name')} {how}")
    return True


def _refresh(namespace: str, name: str, told: tuple[Told, ...] = ()) -> None:
    """Queue a refresh of the cluster's status (its Slurm side synced from now on too), and the Events
    ``told`` for the cluster worker to say."""
    STATE.seen(namespace, name)
    STATE.queue.refresh(namespace, name, tell=told)


def _check_deleted(type: str | None, meta: Mapping[str, Any], namespace: str, owner: str) -> bool:
    """A config check's Job or ConfigMap (``warden.configcheck``) went: pruned once the change was applied,
    or deleted by a person to have the check made again. Nothing to put back or to tell: the owner is
    reconciled quietly, which makes the check again if its change still waits for one."""
    if type != "DELETED" or (meta.get("labels") or {}).get(COMPONENT_LABEL) != CONFIG_CHECK:
        return False
    STATE.queue.reconcile(namespace, owner)
    return True


def _refreshes_status(kind: str, labels: Mapping[str, str]) -> bool:
    """Whether a change of this child reaches its cluster's status: readiness (StatefulSets, WorkerSets,
    slurmrestd's Deployment), Jobs (the jail's populate, the config check, backups), the health report."""
    component = labels.get(COMPONENT_LABEL)
    return kind in ("StatefulSet", WORKER_SET_KIND, "Job") or (kind, component) in (
        ("Deployment", "restapi"),
        ("ConfigMap", HEALTH),
    )


def child_changed(kind: str) -> OnChange:
    """What a change of a cached child sets off, told by its watch cache (``warden.kube.cache``: one watch
    per kind; every object of its first list comes as ADDED): a WorkerSet looked at by its controller; a
    drifted child put back (its cluster healed); otherwise its cluster's status refreshed, when the child
    tells status anything. Only queues work (``warden.clusterqueue``)."""

    def changed(type_: str, obj: Mapping[str, Any]) -> None:
        meta = obj["metadata"]
        namespace, labels = meta.get("namespace"), meta.get("labels") or {}
        if kind == WORKER_SET_KIND and namespace and STATE.worker_sets is not None:
            STATE.worker_sets.enqueue(str(namespace), str(meta["name"]))
        owner = _owner_name(meta.get("ownerReferences"))
        if not namespace or owner is None or _check_deleted(type_, meta, namespace, owner):
            return
        if kind == "ConfigMap" and labels.get(COMPONENT_LABEL) == HEALTH:
            _health_report_changed(type_, obj, namespace, owner)
        elif not _heal_if_drifted(type_, meta, namespace, owner, kind) and _refreshes_status(kind, labels):
            _refresh(namespace, owner)

    return changed


def _health_report_changed(type_: str, body: Mapping[str, Any], namespace: str, owner: str) -> None:
    """The NCCL check's report: its metrics; status.healthCheck refreshed; each run announced once (a change
    of the ConfigMap: the check writes it by design, so only its deletion is drift)."""
    report = None if type_ == "DELETED" else health_report(dict(body))
    key = f"{namespace}/{owner}"
    opmetrics.NCCL.update(key, report)
    if type_ == "DELETED":
        _heal_if_drifted(type_, body["metadata"], namespace, owner, "ConfigMap")  # put back, status with it
        return
    told: tuple[Told, ...] = ()
    if type_ == "MODIFIED" and report is not None:  # a run's report (ADDED: the empty one made, or a relist)
        opmetrics.HEALTH_CHECK_ACTIONS.labels(key, "drained").inc(len(report.get("drained", [])))
        opmetrics.HEALTH_CHECK_ACTIONS.labels(key, "resumed").inc(len(report.get("resumed", [])))
        told = health_told(report)
    _refresh(namespace, owner, told)  # the report reaches status.healthCheck; the worker says the run


def _pod_images(type_: str, pod: Mapping[str, Any]) -> None:
    """A pod of a cluster cannot pull an image (or could not, and now can, or is gone): its cluster's
    status looks again (ImagesPulled), and each failed pull is told with the kubelet's words (an Event
    about the cluster, the pod related; a repeat counts up its series). ``warden.imagepulls`` decides."""
    change = STATE.pulls.seen(type_, pod)
    if change is None:
        return
    told = tuple(Told("ImagePullFailed", f"{f.image}: {f.reason}: {f.message}", f.pod) for f in change.tell)
    _refresh(change.namespace, change.cluster, told)


def pod_changed(type_: str, pod: Mapping[str, Any]) -> None:
    """A worker pod came, changed (ready, ended) or went: its WorkerSet is looked at again. Told by the
    pod cache (``warden.kube.cache``), not kopf: kopf would hold and hand over every pod's full body."""
    meta = pod["metadata"]
    _pod_images(type_, pod)
    if (meta.get("labels") or {}).get(COMPONENT_LABEL) != "worker" or STATE.worker_sets is None:
        return
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == WORKER_SET_KIND:
            STATE.worker_sets.enqueue(str(meta.get("namespace")), str(ref["name"]))


#: what each cached kind's changes set off (one watch per kind: its watch cache's)
ON_CHANGE: dict[tuple[str, str], OnChange] = {
    (k.api_version, k.kind): (pod_changed if k.kind == "Pod" else child_changed(k.kind))
    for k in kinds.REGISTRY
    if k.watch == "cache"
}


@kopf.on.event("", "v1", "persistentvolumeclaims", labels={**MANAGED, COMPONENT_LABEL: "jail"})
def jail_claim_changed(type: str | None, body: kopf.Body, namespace: str | None, **_: Any) -> None:
    """The jail's claim got its volume: from now on the volume, not only the claim, follows
    `retainOnDelete` (Retain, so the namespace's deletion leaves the homes). A claim the operator no
    longer finds as it made it (deleted) is put back by the next reconcile of its cluster."""
    if namespace is None or type in (None, "DELETED") or (body.get("status") or {}).get("phase") != "Bound":
        return
    cluster = (body["metadata"].get("labels") or {}).get(INSTANCE_LABEL)
    owner_body = kube().get(f"{API_GROUP}/{API_VERSION}", "SlurmCluster", namespace, str(cluster)) if cluster else None
    if owner_body is None or owner_body["metadata"].get("deletionTimestamp"):
        return
    try:
        spec = parse_spec(owner_body.get("spec") or {})
    except ValueError:
        return  # InvalidSpec: reported by its reconcile
    meta = owner_body["metadata"]
    owner = Owner(name=meta["name"], namespace=namespace, uid=meta["uid"])
    with STATE.locks[(namespace, meta["name"])]:
        set_jail_retention(kube(), dict(body), owner, spec.jail.retain_on_delete)


# Children whose only business with the operator is to stay as rendered (``warden.kube.kinds.HEALED``).
for _healed in kinds.HEALED:
    _kind = _healed.kind

    def _child_changed(
        type: str | None, body: kopf.Body, meta: kopf.Meta, namespace: str | None, _kind: str = _kind, **_: Any
    ) -> None:
        if type is None or namespace is None:
            return
        owner = _owner_name(meta.get("ownerReferences"))
        if owner is not None:
            _heal_if_drifted(type, meta, namespace, owner, _kind)

    kopf.on.event(_healed.group, _healed.version, _healed.plural, labels=MANAGED, id=f"heal-{_healed.plural}")(
        _child_changed
    )
