"""The WorkerSet controller: each WorkerSet's pods, from made to gone, in ordered steps (``warden.workers``).

Events of WorkerSets and their pods, and each round of the Slurm sync, only name a set to look at
(``enqueue``); one thread looks at each named set in turn. A burst of events about one set (a thousand
pods starting) is a look a second, not a thousand: a set named again while it waits is not queued twice,
and a set looked at less than ``LOOK_GAP_S`` ago waits that long.
Every look reads the set's pods afresh (from the pod cache, ``warden.kube.cache``: no request), so a
lost event costs nothing but delay. Missing pods are made many at a time (``warden.kube.fanout``).
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from kubernetes.client.exceptions import ApiException

from warden import kubetime, naming
from warden.events import Ref
from warden.kube.client import Kube
from warden.model import API_GROUP, API_VERSION, WORKER_SET_KIND
from warden.render.pods import Manifest
from warden.slurm.model import Job, Node, Reservation, SlurmError
from warden.slurm.rest import SlurmRest
from warden.slurmactions import SlurmActions
from warden.workers import maintenance, podset, registration, rollout, scalein
from warden.workers.pod import SetPod
from warden.workers.pod import read as read_pod

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, WorkerSet)
Live = list[SetPod]  # a set's pods, as every step sees them (``warden.workers.pod``)

#: the least time between two looks at one set: each look reads all its pods and may write its status,
#: so a burst of pod events (10,000 pods turning Ready) costs a look a second, not a look per event
LOOK_GAP_S = 1.0


@dataclass
class SlurmView:
    """What one round of the Slurm sync read of a cluster: its nodes (read before the pods, see
    ``warden.nodesync.plan``), the client that read them, and the round (each set acts on a round
    once). The jobs are read only when a scale-in needs their end times, once per round."""

    round: int
    cluster: Ref
    nodes: dict[str, Node]
    rest: SlurmRest
    read_at: datetime.datetime
    _ends: dict[str, float] | None = field(default=None, repr=False)
    _read: bool = field(default=False, repr=False)
    _resv: list[Reservation] | None = field(default=None, repr=False)
    _resv_read: bool = field(default=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def job_ends(self) -> dict[str, float] | None:
        """For each node running jobs: when the last of them is due to end (Slurm's end time); None when
        Slurm's jobs could not be read this round (no busy node is then picked: ``scalein.plan``)."""
        with self._lock:
            if not self._read:
                self._read = True
                try:
                    jobs: list[Job] = self.rest.jobs()
                except SlurmError as e:
                    log.warning("SlurmCluster %s/%s: %s (busy nodes are picked next round)",
                                self.cluster.namespace, self.cluster.name, e)  # fmt: skip
                    return None
                ends: dict[str, float] = {}
                for job in jobs:
                    if job.state == "RUNNING" and job.end_time is not None:
                        for node in job.nodes:
                            ends[node] = max(ends.get(node, 0.0), job.end_time)
                self._ends = ends
            return self._ends

    def reservations(self) -> list[Reservation] | None:
        """Slurm's reservations, read once per round when a set with a maintenance window asks; None when
        they could not be read (nothing is reserved or deleted this round)."""
        with self._lock:
            if not self._resv_read:
                self._resv_read = True
                try:
                    self._resv = self.rest.reservations()
                except SlurmError as e:
                    log.warning("SlurmCluster %s/%s: %s (maintenance reservations next round)",
                                self.cluster.namespace, self.cluster.name, e)  # fmt: skip
            return self._resv


class WorkQueue:
    """Keys to handle, each at most once in the queue, in the order first named. A key handed out less
    than ``gap`` seconds ago is held until then: the events that name one set while it is looked at
    (a thousand pods turning Ready) make one more look a moment later, not one look each."""

    def __init__(self, gap: float = 0.0) -> None:
        self.gap = gap
        self._due: dict[Key, float] = {}  # queued keys (in the order named) -> when each may be handed out
        self._last: dict[Key, float] = {}  # keys handed out within ``gap`` -> when
        self._cond = threading.Condition()
        self._closed = False

    def add(self, key: Key) -> None:
        with self._cond:
            if key not in self._due:
                now = time.monotonic()  # seconds since boot: a key never handed out is due now, not at gap
                last = self._last.get(key)
                self._due[key] = now if last is None else max(now, last + self.gap)
                self._cond.notify()

    def get(self) -> Key | None:
        """The next key that is due (waiting for one); None once closed."""
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                key = next((k for k, due in self._due.items() if due <= now), None)
                if key is not None:
                    del self._due[key]
                    self._last = {k: t for k, t in self._last.items() if t > now - self.gap}
                    self._last[key] = now
                    return key
                self._cond.wait(min(self._due.values()) - now if self._due else None)
            return None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


def _owner(workerset: Manifest) -> Ref | None:
    """The SlurmCluster a WorkerSet belongs to (its Events are about it)."""
    namespace = workerset["metadata"]["namespace"]
    for ref in workerset["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == "SlurmCluster" and str(ref.get("apiVersion", "")).startswith(f"{API_GROUP}/"):
            return Ref(ref["apiVersion"], "SlurmCluster", namespace, ref["name"], ref.get("uid"))
    return None


class WorkerSets:
    """One thread that looks at the WorkerSets named in its queue, each in the steps of ``warden.workers``.

    ``slurm``: whether the operator reads Slurm (the Slurm sync runs). Without it nobody drains, and a
    shrinking set loses its highest ordinals at once; with it, steps 2-4 wait for the sync's first round.
    """

    def __init__(self, kube: Kube, actions: SlurmActions, slurm: bool, register_timeout: float = 300.0) -> None:
        self.kube = kube
        self.actions = actions
        self.slurm = slurm
        self.register_timeout = register_timeout
        self.queue = WorkQueue(gap=LOOK_GAP_S)
        self._views: dict[tuple[str, str], SlurmView] = {}  # (namespace, cluster) -> the latest round
        self._acted: dict[Key, int] = {}  # set -> the round its Slurm steps last ran on
        self._window_waits: dict[Key, str] = {}  # set -> when the maintenance window its upgrade waits for opens
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # --- who names sets to look at ------------------------------------------------------------
    def enqueue(self, namespace: str, name: str) -> None:
        self.queue.add((namespace, name))

    def observed(self, view: SlurmView, sets: list[str]) -> None:
        """A round of the Slurm sync read this cluster: its sets act on it."""
        with self._lock:
            self._views[(view.cluster.namespace, view.cluster.name)] = view
        for name in sets:
            self.enqueue(view.cluster.namespace, name)

    def forget(self, namespace: str, cluster: str) -> None:
        """The cluster's next round is being read: its last one (ten thousand nodes at scale) need not be
        held meanwhile. A set that had not acted on it acts on the next."""
        with self._lock:
            self._views.pop((namespace, cluster), None)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="worker-sets", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.queue.close()

    def _run(self) -> None:
        while (key := self.queue.get()) is not None:
            try:
                self.sync(*key)
            except ApiException as e:
                log.warning("WorkerSet %s/%s: %s %s; trying again shortly", key[0], key[1], e.status, e.reason)
                self._retry(key)
            except Exception:  # one set's trouble must not stop the others
                log.exception("WorkerSet %s/%s: sync failed; trying again shortly", *key)
                self._retry(key)

    def _retry(self, key: Key, delay: float = 5.0) -> None:
        timer = threading.Timer(delay, self.queue.add, args=(key,))
        timer.daemon = True
        timer.start()

    # --- one look at one set: the steps in order --------------------------------------------------
    def sync(self, namespace: str, name: str) -> None:
        ws = self.kube.get(f"{API_GROUP}/{API_VERSION}", WORKER_SET_KIND, namespace, name)
        if ws is None or ws["metadata"].get("deletionTimestamp"):
            with self._lock:
                self._acted.pop((namespace, name), None)
            return  # garbage collection takes its pods
        view = self._new_view(namespace, name, _owner(ws))
        pods = self._read_pods(ws)
        if self._pods(ws, pods, shrink=not self.slurm):  # 1
            pods = self._read_pods(ws)
        changed = False
        if view is not None:
            live = _live(pods)
            leaving = self._scale_in(ws, view, live)  # 2
            changed |= self._roll(ws, view, _live(pods, deleting=True), leaving)  # 3
            changed |= self._registration(ws, view, live)  # 4
            changed |= bool(leaving)
            with self._lock:
                self._acted[(namespace, name)] = view.round
        self._status(ws, self._read_pods(ws) if changed else pods)  # 5

    def _new_view(self, namespace: str, name: str, cluster: Ref | None) -> SlurmView | None:
        """The cluster's latest Slurm round, if this set has not acted on it yet."""
        if cluster is None:
            return None
        with self._lock:
            view = self._views.get((namespace, cluster.name))
            if view is None or self._acted.get((namespace, name)) == view.round:
                return None
            return view

    def _read_pods(self, ws: Manifest) -> Live:
        """The set's own pods (``<set>-<i>``, ended and leaving ones too), each read once for every step."""
        name = ws["metadata"]["name"]
        raw = self.kube.list("v1", "Pod", ws["metadata"]["namespace"], ws["spec"]["selector"]["matchLabels"])
        return [p for p in (read_pod(name, r) for r in raw) if p is not None]

    def _pods(self, ws: Manifest, read: Live, shrink: bool) -> bool:
        """Step 1: make missing pods, clear ended ones (and, with ``shrink``, those above the size)."""
        namespace, name = ws["metadata"]["namespace"], ws["metadata"]["name"]
        todo = podset.plan(int(ws["spec"].get("replicas", 0)), read, shrink)
        for pod, why in todo.delete:
            log.info("WorkerSet %s/%s: deleting pod %s: %s", namespace, name, pod, why)
            self.kube.delete("v1", "Pod", namespace, pod, "Background")
        current = podset.template_hash(ws)
        # each pod's manifest is made as its call runs: ten thousand made at once held 25 MiB
        made = self.kube.fanout.run([partial(self._create_pod, ws, i, current) for i in todo.create])
        if any(made.results):
            log.info("WorkerSet %s/%s: made %d pods", namespace, name, sum(made.results))
        if made.error is not None:
            raise made.error  # the rest at the next look, shortly
        return bool(todo.create or todo.delete)

    def _create_pod(self, ws: Manifest, i: int, template: str) -> bool:
        return self.kube.create(podset.pod_manifest(ws, i, template))

    def _delete_pod(self, namespace: str, pod: str) -> None:
        self.kube.delete("v1", "Pod", namespace, pod, "Background")

    def _act(
        self, view: SlurmView, pod: str, action: Callable[[], None], reason: str, message: str, about: Ref | None = None
    ) -> bool:
        return self.actions.act(view.cluster, pod, action, reason, message, about)

    def _scale_in(self, ws: Manifest, view: SlurmView, live: Live) -> set[str]:
        """Step 2: pick the pods that leave a shrinking set, drain them, delete each once idle
        (``scalein``). Returns the pods leaving."""
        namespace = ws["metadata"]["namespace"]
        timeout = ws["spec"].get("scaleInTimeoutSeconds")
        group = scalein.Group(
            workerset=ws["metadata"]["name"],
            desired=int(ws["spec"].get("replicas", 0)),
            pods=tuple(live),
            timeout=float(timeout) if timeout is not None else None,
        )
        if len(group.pods) <= group.desired and not any(p.leaving_since for p in group.pods):
            return set()  # nothing shrinks, nothing was picked: no need to ask Slurm for its jobs
        todo = scalein.plan([group], view.nodes, view.job_ends(), view.read_at.timestamp())
        stamp = kubetime.stamp(view.read_at)
        for pod in todo.pick:
            self.kube.set_pod_annotation(namespace, pod, naming.LEAVING_ANNOTATION, stamp)
        for pod in todo.unpick:
            self.kube.set_pod_annotation(namespace, pod, naming.LEAVING_ANNOTATION, None)
        for node, why in todo.drains:
            self._act(view, node, partial(view.rest.drain, node, why), "ScaleInDraining", f"{node}: drained: {why}")
        for node in todo.resumes:
            self._act(view, node, partial(view.rest.resume, node), "ScaleInCancelled", f"{node}: resumed, it stays")
        for pod, why in todo.deletes:
            self._act(view, pod, partial(self._delete_pod, namespace, pod), "ScaledIn", f"{pod}: deleted: {why}")
        picked = {p.name for p in group.pods if p.leaving_since is not None}
        return (picked | set(todo.pick)) - set(todo.unpick)

    def _roll(self, ws: Manifest, view: SlurmView, live: Live, leaving: set[str]) -> bool:
        """Step 3: move pods to the set's current template without killing a job (``rollout``)."""
        namespace = ws["metadata"]["namespace"]
        group = rollout.Group(
            workerset=ws["metadata"]["name"],
            update_revision=podset.template_hash(ws),
            max_unavailable=int(ws["spec"].get("maxUnavailable", 1)),
            pods=tuple(live),
            leaving=frozenset(leaving),
        )
        window = maintenance.Window.of(ws["spec"].get("maintenanceWindow"))
        now = maintenance.opening(window, view.read_at) if window is not None else None
        todo = rollout.plan([group], view.nodes, now)
        for node, why in todo.drains:
            self._act(view, node, partial(view.rest.drain, node, why), "UpgradeDraining", f"{node}: drained: {why}")
        key = (namespace, group.workerset)
        if now is not None:
            self._reserve(view, group.workerset, now, [p for p in todo.waiting if p in view.nodes])
        with self._lock:
            if now is not None and todo.waiting:
                self._window_waits[key] = maintenance.stamp(now.start)
            else:
                self._window_waits.pop(key, None)
        for pod, why in todo.deletes:
            self._act(view, pod, partial(self._delete_pod, namespace, pod), "UpgradeReplacing", f"{pod}: {why}")
        return bool(todo.deletes)

    def _reserve(self, view: SlurmView, workerset: str, now: maintenance.Opening, waiting: list[str]) -> None:
        """Step 3, with a maintenance window: the Slurm reservation that keeps the nodes still to upgrade
        free for the window's start (made, changed, or deleted once the window opened or nothing waits)."""
        name = maintenance.reservation_name(workerset)
        about = Ref(f"{API_GROUP}/{API_VERSION}", WORKER_SET_KIND, view.cluster.namespace, workerset)
        want = maintenance.wanted(workerset, now, waiting)
        have = next((r for r in view.reservations() or [] if r.name == name), None)
        if want is not None and (have is None or maintenance.differs(want, have)):
            put = partial(
                view.rest.put_reservation,
                want.name,
                int(want.start.timestamp()),
                want.minutes,
                want.nodes,
                maintenance.RESERVATION_FLAGS,
                ["root"],
            )
            note = (
                f"{name}: {', '.join(want.nodes)} kept free from {maintenance.stamp(want.start)} for {want.minutes} min"
            )
            self._act(view, workerset, put, "MaintenanceReserved", note, about)
        elif want is None and have is not None:
            gone = partial(view.rest.delete_reservation, name)
            why = "the window opened" if now.open else "no node waits for it"
            self._act(view, workerset, gone, "MaintenanceReservationEnded", f"{name}: deleted: {why}", about)

    def _registration(self, ws: Manifest, view: SlurmView, live: Live) -> bool:
        """Step 4: make afresh the pods whose slurmd never registered (``registration``)."""
        namespace = ws["metadata"]["namespace"]
        registered = {n.name for n in view.nodes.values() if n.state != "FUTURE"}  # FUTURE: slurm.conf's, unseen
        todo = registration.overdue(live, registered, self.register_timeout, view.read_at.timestamp())
        for pod, why in todo:
            note = f"{pod}: {why}; its WorkerSet makes it afresh"
            self._act(view, pod, partial(self._delete_pod, namespace, pod), "WorkerRecreated", note)
        return bool(todo)

    def _status(self, ws: Manifest, read: Live) -> None:
        """Step 5: the set's status, from its pods as they are after the steps above (and, with a maintenance
        window, when the one its upgrade waits for opens)."""
        status = podset.status(ws, read)
        with self._lock:
            waits = self._window_waits.get((ws["metadata"]["namespace"], ws["metadata"]["name"]))
        if waits is not None and status["updatedReplicas"] < status["replicas"]:
            status["upgradeWaitsForWindow"] = waits
        before = ws.get("status") or {}
        if before != status:
            # a merge patch: a field status had and has no more is named with null
            patch = {**status, **{k: None for k in before if k not in status}}
            self.kube.patch_status(ws["metadata"]["name"], ws["metadata"]["namespace"], patch, kind=WORKER_SET_KIND)


def _live(read: Live, deleting: bool = False) -> Live:
    """The pods that have not ended; with ``deleting``, those going too."""
    return [pod for pod in read if not pod.ended and (deleting or not pod.deleting)]
