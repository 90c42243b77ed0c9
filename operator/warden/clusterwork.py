"""The cluster worker: one thread that takes each SlurmCluster's work from the queue (``warden.clusterqueue``)
and decides what it takes: a status refresh, a reconcile, or a reconcile then a refresh.

- **Reconcile** (children that drifted put back, or a reconcile asked again): ``ObjectRestored`` once every
  object is applied; a reconcile that could not apply everything (an API error, an object still being
  deleted) is queued again in RETRY_DELAY_SECONDS, and one waiting for Slurm's check of its files
  (``warden.configcheck``) in CHECK_DELAY_SECONDS: no spec change would set it off again.
- **Status refresh**: what is observed now (the watch caches; what the Slurm sync and the directory check
  said) folded into status, and the Events the watches had to tell about the cluster said. A Slurm upgrade
  moves on when what it waits for is observed, and workers in a block topology.conf does not name yet need
  it written: both queue a reconcile, taken next.

The spec handler (kopf's create/update/resume) reconciles in kopf's own threads; the same per-cluster lock
keeps it and this worker from writing one cluster's objects or status at once.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from warden.clusterevents import ClusterEvents
from warden.clusterqueue import ClusterQueue, Key, Reconcile, Refresh
from warden.events import Ref
from warden.kube.apply import Applier
from warden.kube.manifest import Manifest
from warden.model import (
    API_GROUP,
    API_VERSION,
    SlurmClusterSpec,
    SlurmClusterStatus,
    parse_spec,
    previous_status,
)
from warden.reconcile import Outcome, pin_images, reconcile, refresh_status
from warden.render.context import Cluster, ServiceAccountRef
from warden.topology.planner import observed_blocks

log = logging.getLogger(__name__)

#: how soon a reconcile that could not apply everything is tried again
RETRY_DELAY_SECONDS = 10
#: how soon a reconcile waiting for Slurm's check of a new configuration looks again (``warden.configcheck``)
CHECK_DELAY_SECONDS = 3


def checking(outcome: Outcome) -> bool:
    """Whether the reconcile waits for Slurm's check of its files (asked, not answered yet)."""
    check = outcome.config_check
    return check is not None and check.holds and not check.final


@dataclass
class ClusterWorker:
    applier: Applier
    events: ClusterEvents
    queue: ClusterQueue
    #: whether Ready waits for slurmctld's word (``State.slurm_required``)
    slurm_required: bool
    #: the bridge's ServiceAccount, when one is installed (``State.bridge_account``)
    bridge_account: Callable[[], ServiceAccountRef | None] = lambda: None
    #: one writer of a cluster at a time: shared with the spec handler
    locks: defaultdict[Key, threading.Lock] = field(default_factory=lambda: defaultdict(threading.Lock))
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="cluster-work", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.queue.close()

    def _run(self) -> None:
        while (taken := self.queue.take()) is not None:
            (namespace, name), work = taken
            try:
                if work.reconcile is not None:
                    self.reconcile(namespace, name, work.reconcile)
                if work.refresh is not None:
                    self.refresh(namespace, name, work.refresh)
            except Exception:  # one cluster's trouble must not stop the others; its next work tries again
                log.exception("SlurmCluster %s/%s: work failed", namespace, name)

    def _cluster(self, namespace: str, name: str, fresh: bool = False) -> Manifest | None:
        """The cluster, unless it is gone or going; ``fresh``: asked of the API server, not the cache (before a
        reconcile makes children: a cluster deleted a moment ago must not get them back)."""
        body = self.applier.kube.get(f"{API_GROUP}/{API_VERSION}", "SlurmCluster", namespace, name, fresh=fresh)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return None  # going away: its children go with it
        return body

    def reconcile(self, namespace: str, name: str, asked: Reconcile) -> None:
        body = self._cluster(namespace, name, fresh=True)
        if body is None:
            return
        what = "; ".join(asked.heal)
        if what:
            log.info("SlurmCluster %s/%s: %s; reconciling", namespace, name, what)
        try:
            with self.locks[(namespace, name)]:
                outcome = reconcile(self.applier, body, self.slurm_required, self.bridge_account())
        except Exception as e:  # said, logged and tried again, never lost
            log.exception("SlurmCluster %s/%s: reconcile (%s) failed", namespace, name, what or "asked again")
            if what:
                self.events.say(body, "ReconcileFailed", f"{type(e).__name__}: {e}")
            self._again(namespace, name, asked, RETRY_DELAY_SECONDS)
            return
        self.events.reconciled(body, outcome)
        if outcome.result is None:
            return  # a Slurm series or configuration refused: nothing applied, status says why
        if checking(outcome):
            self._again(namespace, name, asked, CHECK_DELAY_SECONDS)
        elif outcome.result.complete:
            if what:
                self.events.say(body, "ObjectRestored", what)
        elif what and not outcome.result.namespace_going:  # a namespace being deleted takes the cluster along
            log.info(
                "SlurmCluster %s/%s: %s not put back yet; again in %ss", namespace, name, what, RETRY_DELAY_SECONDS
            )
            self._again(namespace, name, asked, RETRY_DELAY_SECONDS)

    def _again(self, namespace: str, name: str, asked: Reconcile, after: float) -> None:
        if not asked.heal:
            self.queue.reconcile(namespace, name, after)
        for what in asked.heal:
            self.queue.heal(namespace, name, what, after)

    def refresh(self, namespace: str, name: str, seen: Refresh) -> None:
        with self.locks[(namespace, name)]:  # read and write status in one go, not between a reconcile's
            folded = self._fold(namespace, name, seen)
        about = folded[0] if folded is not None else self._cluster(namespace, name) if seen.tell else None
        if about is not None:
            for told in seen.tell:
                self.events.say(about, told.reason, told.note, Ref.pod(namespace, told.pod) if told.pod else None)
        if folded is None:
            return
        body, spec, previous, status = folded
        self.events.status_changed(body, previous, status)
        upgrading = status.slurm is not None and status.slurm.phase == "Upgrading"
        new_blocks = spec.topology is not None and observed_blocks(status) != observed_blocks(previous)
        if upgrading or new_blocks:
            # the upgrade's next step once the current one runs the new series (``warden.upgrade.planner``);
            # topology.conf written with the new block (``warden.topology.planner``)
            self.queue.reconcile(namespace, name)

    def _fold(
        self, namespace: str, name: str, seen: Refresh
    ) -> tuple[Manifest, SlurmClusterSpec, SlurmClusterStatus | None, SlurmClusterStatus] | None:
        """What is observed now, written into status: the cluster, its spec, its status before and now."""
        body = self._cluster(namespace, name)
        if body is None:
            return None
        try:
            spec = parse_spec(body.get("spec") or {})
        except ValueError:
            return None  # the spec handler reports invalid specs
        previous = previous_status(body)
        cluster = Cluster(name=name, namespace=namespace, spec=pin_images(spec, previous))
        generation = int(body["metadata"].get("generation", 0))
        if previous is not None and previous.observed_generation is not None:
            generation = previous.observed_generation  # only a reconcile moves it forward
        status = refresh_status(
            self.applier.kube,
            cluster,
            generation,
            previous,
            slurm=seen.slurm,
            slurm_required=self.slurm_required,
            slurmctld=seen.slurmctld,
            directory=seen.directory,
        )
        return body, spec, previous, status
