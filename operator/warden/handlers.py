"""kopf handlers: thin. They orchestrate `warden.reconcile` and turn its outcome into Events.

- SlurmCluster created, spec changed, or operator (re)started: reconcile (render → apply → prune →
  status).
- A child object was deleted, or changed by someone else (a person's `kubectl edit`, another
  controller): reconcile its owner, which puts it back (self-healing, within seconds, no spec edit or
  restart needed). Who changed an object last is read from its managedFields: changes by the operator's
  own field manager and status writes are not drift. A heal that could not apply everything (an API
  error, an object still being deleted) is tried again every RETRY_DELAY_SECONDS until it does, and
  only then says `ObjectRestored`.
- A child StatefulSet/WorkerSet/Job, or the health-check report ConfigMap, changed: refresh the owner's
  status.
- A WorkerSet or one of its pods changed: the WorkerSet controller (`warden.workers`, one thread and
  a queue) looks at the set: its pods made, scaled in, upgraded, made afresh; its status. Pods are
  watched by the operator's own pod cache (`warden.kube.cache`), which tells each change, not kopf.
- Reads of the cluster and its children (pods, WorkerSets, StatefulSets, Deployments, Jobs, ConfigMaps)
  come from watch caches: an event costs no GET.
  This is how readiness reaches status without polling. There is no kopf timer or daemon on purpose:
  those would need a finalizer, and a SlurmCluster is deleted by garbage collection alone, whether
  or not the operator runs.
- Slurm's side is read every few seconds by one thread (`warden.slurmsync`) for every SlurmCluster
  the handlers above have seen: node states to pod conditions and status, cordons to drains; each round
  then goes to the WorkerSet controller, whose sets act on what Slurm said.
- A cluster's directory (spec.identity.ldap) is checked every half minute by another (`warden.directorysync`).
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import kopf

from warden import __version__, opmetrics
from warden.configcheck.render import COMPONENT as CONFIG_CHECK
from warden.directorysync import DirectorySync
from warden.directorysync import Settings as DirectorySettings
from warden.events import Event, Ref
from warden.imagepulls import PullWatch
from warden.kube import kinds, storedversions
from warden.kube.apply import Applier, ApplyResult, Owner
from warden.kube.client import Kube, api_client
from warden.kube.events import EventRecorder
from warden.kube.retention import set_jail_retention
from warden.ldapcheck import DirectoryCheck
from warden.model import (
    API_GROUP,
    API_VERSION,
    PLURAL,
    WORKER_SET_KIND,
    WORKER_SET_PLURAL,
    SlurmClusterStatus,
    SlurmNodesStatus,
    parse_spec,
    previous_status,
)
from warden.naming import BRIDGE_FIELD_MANAGER, FIELD_MANAGER
from warden.observe import health_report
from warden.reconcile import Outcome, pin_images, reconcile, refresh_status
from warden.render.context import Cluster, ServiceAccountRef
from warden.slurmactions import SlurmActions
from warden.slurmsync import Settings, SlurmSync
from warden.status import CONFIG_RUNNING, Slurmctld, new_backup_run
from warden.topology.planner import observed_blocks
from warden.upgrade import planner
from warden.workers.controller import WorkerSets

log = logging.getLogger(__name__)

MANAGED = {"app.kubernetes.io/managed-by": "warden"}
MANAGED_SELECTOR = "app.kubernetes.io/managed-by=warden"
USER_AGENT = "warden-operator"
COMPONENT, HEALTH = "app.kubernetes.io/component", "health-check"
RETRY_DELAY_SECONDS = 10
#: how soon a reconcile waiting for Slurm's check of a new configuration looks again (``warden.configcheck``)
CHECK_DELAY_SECONDS = 3


class State:
    """Process-wide handles, made once at startup (kopf passes them as `memo`)."""

    def __init__(self) -> None:
        self.kube: Kube | None = None
        self.applier: Applier | None = None
        self.events: EventRecorder | None = None
        #: one reconcile of a cluster at a time (the spec handler and child events run in parallel threads)
        self.locks: defaultdict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)
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
        #: clusters whose heal failed and is tried again soon, with what drifted (told when it succeeds)
        self.heals_due: dict[tuple[str, str], list[str]] = {}
        self.heals_lock = threading.Lock()
        #: clusters whose reconcile, set off by the Slurm sync, waits for Slurm's check of its files (looked at
        #: again soon: no spec change makes kopf retry it)
        self.rechecks: set[tuple[str, str]] = set()
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
    if not STATE.kube.use_caches(STATE.namespaces, {("v1", "Pod"): _pod_changed}):
        log.warning("the watch caches have not listed everything yet; reads go to the API server until they have")
    STATE.worker_sets.start()
    if STATE.slurm_required:
        STATE.sync = SlurmSync(STATE.kube, STATE.events, actions, STATE.worker_sets, STATE.sync_settings, _refresh)
        STATE.sync.start()
    if STATE.directory_settings.interval > 0:
        STATE.directories = DirectorySync(STATE.kube, STATE.events, STATE.directory_settings, _refresh_directory)
        STATE.directories.start()


@kopf.on.cleanup()
def stop_sync(**_: Any) -> None:
    if STATE.sync is not None:
        STATE.sync.stop()
    if STATE.directories is not None:
        STATE.directories.stop()
    if STATE.worker_sets is not None:
        STATE.worker_sets.stop()
    if STATE.kube is not None and STATE.kube.caches is not None:
        STATE.kube.caches.stop()


def _say(cluster: Mapping[str, Any], reason: str, note: str, related: Ref | None = None) -> None:
    """One Event about a SlurmCluster (``warden.events``: the reason fixes its type and action)."""
    recorder().post_event(Event(Ref.of(cluster), reason, note, related))


def _post_upgrade_events(body: Mapping[str, Any], outcome: Outcome) -> None:
    """A Normal Event per upgrade step begun or done; a Warning when a series is refused (once)."""
    plan = outcome.upgrade
    for note in planner.step_notes(plan):
        _say(body, "SlurmUpgradeStep", note)
    if plan is not None and plan.refusal is not None and outcome.new_refusal:
        if plan.refusal.reason == "DowngradeRefused":
            _say(body, "DowngradeRefused", plan.refusal.message)
        else:
            _say(body, "UpgradeTooLarge", plan.refusal.message)


def _post_config_check(body: Mapping[str, Any], outcome: Outcome) -> None:
    """A Warning Event, once, when Slurm's check refused the rendered configuration (or ended without an
    answer): nothing was applied (``warden.configcheck``)."""
    check = outcome.config_check
    if check is None or not outcome.new_config_refusal:
        return
    if check.state == "Refused":
        _say(
            body,
            "SlurmRefusedConfig",
            f"nothing applied, the last good configuration runs on; Slurm said: {check.message}",
        )
    elif check.state == "CannotCheck":
        _say(body, "SlurmConfigCheckFailed", f"nothing applied: {check.message}")


def _post_unknown(body: Mapping[str, Any], outcome: Outcome) -> None:
    if outcome.unknown:
        _say(
            body,
            "UnknownFields",
            f"this operator ({__version__}) does not know spec."
            + ", spec.".join(outcome.unknown)
            + ": left out, the cluster runs on the rest; upgrade the operator to its CRD's version",
        )


def _post_events(body: Mapping[str, Any], result: ApplyResult) -> None:
    if result.created_secrets:
        _say(body, "SecretCreated", "generated " + ", ".join(result.created_secrets))
    if result.recreated:
        _say(body, "ObjectRecreated", "immutable fields changed: " + ", ".join(result.recreated))
    for what in result.replaced:
        _say(
            body,
            "PodsReplaced",
            f"{what} (a pod's make-up cannot change live; Slurm configuration changes never replace pods)",
        )
    if result.pruned:
        _say(body, "ObjectsPruned", "no longer needed: " + ", ".join(result.pruned))
    for error in result.errors:
        _say(body, "ApplyFailed", error)


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
            _say(body, "ReconcileFailed", f"{type(e).__name__}: {e}")
            raise
    _post_unknown(body, outcome)
    if outcome.invalid is not None:
        _say(body, "InvalidSpec", outcome.invalid)
        raise kopf.PermanentError(outcome.invalid)
    _post_upgrade_events(body, outcome)
    _post_config_check(body, outcome)
    if outcome.result is None:  # a Slurm series or configuration refused: nothing applied, status says why
        return
    _post_events(body, outcome.result)
    if not outcome.result.complete:
        problems = outcome.result.errors + outcome.result.waiting
        # Slurm's check of a new configuration answers within seconds: looked at again sooner
        checking = outcome.config_check is not None and outcome.config_check.holds and not outcome.result.errors
        raise kopf.TemporaryError("; ".join(problems), delay=CHECK_DELAY_SECONDS if checking else RETRY_DELAY_SECONDS)
    _say(body, "Reconciled", f"{len(outcome.result.applied)} objects applied; phase {outcome.status.phase}")


def _refresh(
    namespace: str, name: str, slurm: SlurmNodesStatus | None = None, slurmctld: Slurmctld | None = None
) -> None:
    """Fold what is observed now into status; ``slurm``: what slurmctld said of its nodes, ``slurmctld``:
    whether it answered at all (both from the sync thread)."""
    STATE.seen(namespace, name)
    with STATE.locks[(namespace, name)]:  # read and write status in one go, not between a reconcile's
        _refresh_locked(namespace, name, slurm, slurmctld)


def _refresh_directory(namespace: str, name: str, directory: DirectoryCheck) -> None:
    """Fold a check of the cluster's directory into status (from the directory thread)."""
    with STATE.locks[(namespace, name)]:
        _refresh_locked(namespace, name, None, None, directory)


def _refresh_locked(
    namespace: str,
    name: str,
    slurm: SlurmNodesStatus | None,
    slurmctld: Slurmctld | None,
    directory: DirectoryCheck | None = None,
) -> None:
    api = applier()
    body = api.kube.get(f"{API_GROUP}/{API_VERSION}", "SlurmCluster", namespace, name)
    if body is None or body["metadata"].get("deletionTimestamp"):
        return
    try:
        spec = parse_spec(body.get("spec") or {})
    except ValueError:
        return  # the reconcile handler reports invalid specs
    previous = previous_status(body)
    cluster = Cluster(name=name, namespace=namespace, spec=pin_images(spec, previous))
    generation = int(body["metadata"].get("generation", 0))
    if previous is not None and previous.observed_generation is not None:
        generation = previous.observed_generation  # only the reconcile handler moves it forward
    status = refresh_status(
        api.kube,
        cluster,
        generation,
        previous,
        slurm=slurm,
        slurm_required=STATE.slurm_required,
        slurmctld=slurmctld,
        directory=directory,
    )
    _post_config_running(body, previous, status)
    _post_jail_backup(body, previous, status)
    upgrading = status.slurm is not None and status.slurm.phase == "Upgrading"
    # A Slurm upgrade moves on when what it waits for is observed: reconcile, which releases the next
    # step once the current one runs the new series (``warden.upgrade.planner``). Workers' nodes in a block
    # topology.conf does not name yet: reconcile, which writes it (``warden.topology.planner``).
    new_blocks = spec.topology is not None and observed_blocks(status) != observed_blocks(previous)
    if upgrading or new_blocks:
        fresh = api.kube.get(f"{API_GROUP}/{API_VERSION}", "SlurmCluster", namespace, name)
        if fresh is not None and not fresh["metadata"].get("deletionTimestamp"):
            outcome = reconcile(api, fresh, STATE.slurm_required, STATE.bridge_account)
            _post_upgrade_events(fresh, outcome)
            _post_config_check(fresh, outcome)
            if outcome.result is not None:
                _post_events(fresh, outcome.result)
            if _checking(outcome):
                _recheck_later(namespace, name)


def _post_jail_backup(body: Mapping[str, Any], previous: SlurmClusterStatus | None, status: SlurmClusterStatus) -> None:
    """One Event per finished run of the jail's backup, once status shows it: what it saved, or why it failed."""
    run = new_backup_run(previous, status)
    if run is None:
        return
    if run.last_run_succeeded:
        _say(body, "JailBackedUp", run.last_run or "a snapshot was saved")
    else:
        _say(body, "JailBackupFailed", run.last_run or "the backup pod ended without a summary: see its log")


def _post_config_running(body: Mapping[str, Any], previous: Any, status: Any) -> None:
    """Workers whose slurmd runs another configuration than the ConfigMap's past the grace (a reconfigure that
    failed anyway): a Warning Event when SlurmConfigRunning turns to it, a Normal one when all run it again."""

    def reason(s: Any) -> str | None:
        c = next((c for c in (s.conditions if s is not None else []) if c.type == CONFIG_RUNNING), None)
        return None if c is None else str(c.reason)

    before, now = reason(previous), reason(status)
    if now == before:
        return
    condition = next(c for c in status.conditions if c.type == CONFIG_RUNNING) if now is not None else None
    if condition is not None and now == "SlurmdOnOtherConfig":
        _say(body, "SlurmConfigNotTaken", condition.message)
    elif condition is not None and now == "AllRunRendered" and before == "SlurmdOnOtherConfig":
        _say(body, "SlurmConfigTaken", condition.message)


def _checking(outcome: Outcome) -> bool:
    check = outcome.config_check
    return check is not None and check.holds and not check.final


def _recheck_later(namespace: str, name: str) -> None:
    """Reconcile the cluster again in CHECK_DELAY_SECONDS, and so on while its reconcile waits for Slurm's
    check of its files (``warden.configcheck``): one set off by the Slurm sync (a topology.conf naming a new
    block, an upgrade step) has no kopf handler to retry it. One timer per cluster at a time."""
    key = (namespace, name)
    with STATE.heals_lock:
        if key in STATE.rechecks:
            return
        STATE.rechecks.add(key)

    def again() -> None:
        with STATE.heals_lock:
            STATE.rechecks.discard(key)
        api = applier()
        body = api.kube.get(f"{API_GROUP}/{API_VERSION}", "SlurmCluster", namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return
        try:
            with STATE.locks[key]:
                outcome = reconcile(api, body, STATE.slurm_required, STATE.bridge_account)
        except Exception:  # logged, and looked at again
            log.exception("SlurmCluster %s/%s: reconcile after Slurm's config check failed", namespace, name)
            _recheck_later(namespace, name)
            return
        _post_upgrade_events(body, outcome)
        _post_config_check(body, outcome)
        if outcome.result is not None:
            _post_events(body, outcome.result)
        if _checking(outcome):
            _recheck_later(namespace, name)

    timer = threading.Timer(CHECK_DELAY_SECONDS, again)
    timer.daemon = True
    timer.start()


def _announce_health(cluster: dict[str, Any], report: dict[str, Any]) -> None:
    """One Warning Event per node a check run drained, one Normal Event per node it resumed, and one
    Warning Event when the run failed as a whole (it drained nobody then).

    Called once per change of the report ConfigMap (kopf handles one object's events in order), so
    a run is announced once, however many status refreshes happen around it."""
    namespace = cluster["metadata"]["namespace"]
    key = f"{namespace}/{cluster['metadata']['name']}"
    opmetrics.HEALTH_CHECK_ACTIONS.labels(key, "drained").inc(len(report.get("drained", [])))
    opmetrics.HEALTH_CHECK_ACTIONS.labels(key, "resumed").inc(len(report.get("resumed", [])))
    if report.get("checkFailed"):
        _say(cluster, "HealthCheckFailed", f"NCCL check drained nobody: {report['checkFailed']}")
    for d in report.get("drained", []):
        _say(cluster, "NodeDrained", f"{d['node']}: {d['reason']}", Ref.pod(namespace, d["node"]))
    for node in report.get("resumed", []):
        _say(cluster, "NodeResumed", f"{node} passed the NCCL check again", Ref.pod(namespace, node))


def _owner_name(owner_references: list[dict[str, Any]] | None) -> str | None:
    for ref in owner_references or []:
        if ref.get("kind") == "SlurmCluster" and ref.get("apiVersion", "").startswith(f"{API_GROUP}/"):
            return str(ref["name"])
    return None


def drifted(type: str | None, meta: kopf.Meta) -> bool:
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


def _heal(namespace: str, name: str, what: str) -> None:
    """Reconcile a cluster whose child drifted; ``ObjectRestored`` once everything is applied, else
    (an API error, an object still being deleted) the same again in RETRY_DELAY_SECONDS: no child
    event may come to set it off again (a quota raised, a webhook back)."""
    api = applier()
    body = api.kube.get(f"{API_GROUP}/{API_VERSION}", "SlurmCluster", namespace, name)
    if body is None or body["metadata"].get("deletionTimestamp"):
        return  # going away: its children go with it
    log.info("SlurmCluster %s/%s: %s; reconciling", namespace, name, what)
    try:
        with STATE.locks[(namespace, name)]:
            outcome = reconcile(api, body, STATE.slurm_required, STATE.bridge_account)
    except Exception as e:  # said, logged and tried again, never lost
        log.exception("SlurmCluster %s/%s: putting back %s failed", namespace, name, what)
        _say(body, "ReconcileFailed", f"{type(e).__name__}: {e}")
        _heal_later(namespace, name, what)
        return
    _post_upgrade_events(body, outcome)
    _post_config_check(body, outcome)
    if outcome.result is None:
        return  # a Slurm series or configuration refused: nothing applied, status says why
    _post_events(body, outcome.result)
    if outcome.result.complete:
        _say(body, "ObjectRestored", what)
    elif not outcome.result.namespace_going:  # a namespace being deleted takes the cluster with it
        _heal_later(namespace, name, what)


def _heal_later(namespace: str, name: str, what: str) -> None:
    """Heal the cluster again in RETRY_DELAY_SECONDS (one retry at a time per cluster; what drifted
    meanwhile joins it)."""
    key = (namespace, name)
    with STATE.heals_lock:
        due = STATE.heals_due.setdefault(key, [])
        if what not in due:
            due.append(what)
        if len(due) > 1:
            return  # a retry is already due
        log.info("SlurmCluster %s/%s: %s not put back yet; again in %ss", namespace, name, what, RETRY_DELAY_SECONDS)

    def again() -> None:
        with STATE.heals_lock:
            whats = STATE.heals_due.pop(key, [])
        if whats:
            _heal(namespace, name, "; ".join(whats))

    timer = threading.Timer(RETRY_DELAY_SECONDS, again)
    timer.daemon = True
    timer.start()


def _heal_if_drifted(type: str | None, meta: kopf.Meta, namespace: str, owner: str, kind: str) -> bool:
    """Reconcile the owner when the event says the child drifted; whether it did."""
    if not drifted(type, meta):
        return False
    how = "deleted" if type == "DELETED" else "changed by someone else"
    _heal(namespace, owner, f"{kind}/{meta.get('name')} {how}")
    return True


def _on_child_event(type: str | None, body: kopf.Body, meta: kopf.Meta, namespace: str | None, kind: str) -> None:
    kube().observed(type, body)  # what the refresh below reads: this state, not the one before
    if type is None or namespace is None:  # the initial listing: resume handles those clusters
        return
    owner = _owner_name(meta.get("ownerReferences"))
    if owner is not None and _check_deleted(type, meta, namespace, owner):
        return
    if owner is not None and not _heal_if_drifted(type, meta, namespace, owner, kind):
        _refresh(namespace, owner)


def _check_deleted(type: str | None, meta: kopf.Meta, namespace: str, owner: str) -> bool:
    """A config check's Job or ConfigMap (``warden.configcheck``) went: pruned once the change was applied,
    or deleted by a person to have the check made again. Nothing to put back or to tell: the owner is
    reconciled quietly, which makes the check again if its change still waits for one."""
    if type != "DELETED" or (meta.get("labels") or {}).get(COMPONENT) != CONFIG_CHECK:
        return False
    _recheck_later(namespace, owner)
    return True


@kopf.on.event("apps", "v1", "statefulsets", labels=MANAGED)
def statefulset_changed(type: str | None, body: kopf.Body, meta: kopf.Meta, namespace: str | None, **_: Any) -> None:
    _on_child_event(type, body, meta, namespace, "StatefulSet")


@kopf.on.event("apps", "v1", "deployments", labels={**MANAGED, COMPONENT: "restapi"}, id="restapi-status")
def restapi_changed(type: str | None, body: kopf.Body, meta: kopf.Meta, namespace: str | None, **_: Any) -> None:
    """slurmrestd's pods came or went: status (and a Slurm upgrade waiting for them) looks again. Drift
    is the heal handler's (``heal-deployments``)."""
    kube().observed(type, body)
    if type is None or namespace is None or drifted(type, meta):
        return
    owner = _owner_name(meta.get("ownerReferences"))
    if owner is not None:
        _refresh(namespace, owner)


@kopf.on.event(API_GROUP, API_VERSION, WORKER_SET_PLURAL, labels=MANAGED)
def worker_set_changed(type: str | None, body: kopf.Body, meta: kopf.Meta, namespace: str | None, **_: Any) -> None:
    kube().observed(type, body)  # before the WorkerSet controller looks at it
    if namespace is not None and STATE.worker_sets is not None:
        STATE.worker_sets.enqueue(namespace, str(meta["name"]))  # the initial listing too: catch up
    _on_child_event(type, body, meta, namespace, WORKER_SET_KIND)


def _pod_images(type_: str, pod: Mapping[str, Any]) -> None:
    """A pod of a cluster cannot pull an image (or could not, and now can, or is gone): its cluster's
    status looks again (ImagesPulled), and each failed pull is told with the kubelet's words (an Event
    about the cluster, the pod related; a repeat counts up its series). ``warden.imagepulls`` decides."""
    change = STATE.pulls.seen(type_, pod)
    if change is None:
        return
    _refresh(change.namespace, change.cluster)
    if not change.tell:
        return
    body = kube().get(f"{API_GROUP}/{API_VERSION}", "SlurmCluster", change.namespace, change.cluster)
    if body is None:
        return
    for f in change.tell:
        _say(body, "ImagePullFailed", f"{f.image}: {f.reason}: {f.message}", Ref.pod(change.namespace, f.pod))


def _pod_changed(type_: str, pod: Mapping[str, Any]) -> None:
    """A worker pod came, changed (ready, ended) or went: its WorkerSet is looked at again. Told by the
    pod cache (``warden.kube.cache``), not kopf: kopf would hold and hand over every pod's full body."""
    meta = pod["metadata"]
    _pod_images(type_, pod)
    if (meta.get("labels") or {}).get(COMPONENT) != "worker" or STATE.worker_sets is None:
        return
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == WORKER_SET_KIND:
            STATE.worker_sets.enqueue(str(meta.get("namespace")), str(ref["name"]))


@kopf.on.event("", "v1", "persistentvolumeclaims", labels={**MANAGED, COMPONENT: "jail"})
def jail_claim_changed(type: str | None, body: kopf.Body, namespace: str | None, **_: Any) -> None:
    """The jail's claim got its volume: from now on the volume, not only the claim, follows
    `retainOnDelete` (Retain, so the namespace's deletion leaves the homes). A claim the operator no
    longer finds as it made it (deleted) is put back by the next reconcile of its cluster."""
    if namespace is None or type in (None, "DELETED") or (body.get("status") or {}).get("phase") != "Bound":
        return
    cluster = (body["metadata"].get("labels") or {}).get("app.kubernetes.io/instance")
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


@kopf.on.event("batch", "v1", "jobs", labels=MANAGED)
def job_changed(type: str | None, body: kopf.Body, meta: kopf.Meta, namespace: str | None, **_: Any) -> None:
    _on_child_event(type, body, meta, namespace, "Job")


# Children whose only business with the operator is to stay as rendered (``warden.kube.kinds.HEALED``).
for _healed in kinds.HEALED:
    _kind = _healed.kind

    def _child_changed(
        type: str | None, body: kopf.Body, meta: kopf.Meta, namespace: str | None, _kind: str = _kind, **_: Any
    ) -> None:
        kube().observed(type, body)
        if type is None or namespace is None:
            return
        if _kind == "ConfigMap" and type != "DELETED" and (meta.get("labels") or {}).get(COMPONENT) == HEALTH:
            return  # the health report: the check writes it by design
        owner = _owner_name(meta.get("ownerReferences"))
        if owner is not None and not _check_deleted(type, meta, namespace, owner):
            _heal_if_drifted(type, meta, namespace, owner, _kind)

    kopf.on.event(_healed.group, _healed.version, _healed.plural, labels=MANAGED, id=f"heal-{_healed.plural}")(
        _child_changed
    )


@kopf.on.event("", "v1", "configmaps", labels={**MANAGED, COMPONENT: HEALTH})
def health_report_changed(type: str | None, body: kopf.Body, meta: kopf.Meta, namespace: str | None, **_: Any) -> None:
    kube().observed(type, body)
    owner = _owner_name(meta.get("ownerReferences"))
    if namespace is None or owner is None:
        return
    key = f"{namespace}/{owner}"
    opmetrics.NCCL.update(key, None if type == "DELETED" else health_report(dict(body)))  # the initial listing too
    if type is None:
        return
    _refresh(namespace, owner)  # the report reaches status.healthCheck
    if type != "MODIFIED":
        return
    report = health_report(dict(body))
    cluster = kube().get(f"{API_GROUP}/{API_VERSION}", "SlurmCluster", namespace, owner)
    if report is not None and cluster is not None:
        _announce_health(cluster, report)
