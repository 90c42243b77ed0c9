"""One queue of work per SlurmCluster: what the operator's loops and watches saw, waiting for the cluster's
worker (``warden.clusterwork``), which alone decides what to do about it.

The watches (a child changed, a pod could not pull its image, the health report came) and the loops (the
Slurm sync's rounds, the directory checks) only put work here; none of them refreshes a status or runs a
reconcile itself. Work for a cluster already waiting is merged into what waits: many changes in a moment
cost one status refresh, and the Slurm sync's newest word on a cluster is the one its status gets.

A cluster's work has two parts, each with its own time: a *status refresh* (with what the Slurm sync or the
directory check observed, when they did, and the Events a watch has to tell about the cluster: an image
that cannot be pulled, a health check's drains, said by the worker, never from a watch's thread) and a
*reconcile* (its children put back when someone deleted or
changed them: ``heal``, what drifted, told once they are back; or asked again: ``reconcile``, a Slurm
upgrade's next step, a new topology block, Slurm's check of new files). A reconcile due later (a heal
tried again in ten seconds) waits for its time even when a refresh of the same cluster is due now.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from warden.ldapcheck import DirectoryCheck
from warden.model import Slurmctld, SlurmNodesStatus

Key = tuple[str, str]  # (namespace, SlurmCluster name)


@dataclass(frozen=True)
class Told:
    """An Event to say about the cluster (``reason``, ``note``), about one of its pods when ``pod`` names it."""

    reason: str
    note: str
    pod: str | None = None


@dataclass(frozen=True)
class Refresh:
    """A status refresh, with the newest of what the loops observed (None: nothing new; the last word stands)
    and the Events to say, in the order they came."""

    slurm: SlurmNodesStatus | None = None
    slurmctld: Slurmctld | None = None
    directory: DirectoryCheck | None = None
    tell: tuple[Told, ...] = ()

    def then(self, later: Refresh) -> Refresh:
        """This refresh and a later one in one: the later observation of each kind wins; every Event is said."""
        return Refresh(
            slurm=later.slurm if later.slurm is not None else self.slurm,
            slurmctld=later.slurmctld if later.slurmctld is not None else self.slurmctld,
            directory=later.directory if later.directory is not None else self.directory,
            tell=self.tell + later.tell,
        )


@dataclass(frozen=True)
class Reconcile:
    """A reconcile outside the spec handler: ``heal`` (what drifted, in the order it did; told as
    ``ObjectRestored`` once everything is applied), or none (asked again: no Event of its own)."""

    heal: tuple[str, ...] = ()

    def then(self, later: Reconcile) -> Reconcile:
        return Reconcile(self.heal + tuple(w for w in later.heal if w not in self.heal))


@dataclass(frozen=True)
class Work:
    """What a cluster's worker does next: a status refresh, a reconcile, or both (then the reconcile first)."""

    refresh: Refresh | None = None
    reconcile: Reconcile | None = None


@dataclass
class _Pending:
    refresh: Refresh | None = None
    refresh_at: float = 0.0
    reconcile: Reconcile | None = None
    reconcile_at: float = 0.0

    def due(self) -> float:
        times = [t for t, part in ((self.refresh_at, self.refresh), (self.reconcile_at, self.reconcile)) if part]
        return min(times)

    def take(self, now: float) -> Work:
        """The parts due by ``now``, taken out."""
        work = Work(
            refresh=self.refresh if self.refresh is not None and self.refresh_at <= now else None,
            reconcile=self.reconcile if self.reconcile is not None and self.reconcile_at <= now else None,
        )
        if work.refresh is not None:
            self.refresh = None
        if work.reconcile is not None:
            self.reconcile = None
        return work

    def empty(self) -> bool:
        return self.refresh is None and self.reconcile is None


@dataclass
class ClusterQueue:
    """The clusters with work waiting, each once; ``take`` hands out the one due first. Thread-safe."""

    clock: Callable[[], float] = time.monotonic
    _pending: dict[Key, _Pending] = field(default_factory=dict)
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _closed: bool = False

    def refresh(
        self,
        namespace: str,
        name: str,
        slurm: SlurmNodesStatus | None = None,
        slurmctld: Slurmctld | None = None,
        directory: DirectoryCheck | None = None,
        tell: tuple[Told, ...] = (),
    ) -> None:
        """Refresh the cluster's status now, with what was observed of it (if anything), and say ``tell``."""
        self._put((namespace, name), refresh=Refresh(slurm, slurmctld, directory, tell))

    def heal(self, namespace: str, name: str, what: str, after: float = 0.0) -> None:
        """Put the cluster's children back (``what`` drifted), in ``after`` seconds."""
        self._put((namespace, name), reconcile=Reconcile((what,)), after=after)

    def reconcile(self, namespace: str, name: str, after: float = 0.0) -> None:
        """Reconcile the cluster again, in ``after`` seconds."""
        self._put((namespace, name), reconcile=Reconcile(), after=after)

    def _put(
        self, key: Key, refresh: Refresh | None = None, reconcile: Reconcile | None = None, after: float = 0.0
    ) -> None:
        with self._changed:
            at = self.clock() + after
            p = self._pending.setdefault(key, _Pending())
            if refresh is not None:
                p.refresh_at = at if p.refresh is None else min(p.refresh_at, at)
                p.refresh = refresh if p.refresh is None else p.refresh.then(refresh)
            if reconcile is not None:
                p.reconcile_at = at if p.reconcile is None else min(p.reconcile_at, at)
                p.reconcile = reconcile if p.reconcile is None else p.reconcile.then(reconcile)
            self._changed.notify_all()

    def take(self, timeout: float | None = None) -> tuple[Key, Work] | None:
        """The work of the cluster due first, once due (waiting up to ``timeout`` s for it; None: forever);
        None when nothing came due in time, or the queue was closed."""
        deadline = None if timeout is None else self.clock() + timeout
        with self._changed:
            while not self._closed:
                now = self.clock()
                if self._pending:
                    key, p = min(self._pending.items(), key=lambda kv: kv[1].due())
                    if p.due() <= now:
                        work = p.take(now)
                        if p.empty():
                            del self._pending[key]
                        return key, work
                    wait = p.due() - now
                else:
                    wait = None
                if deadline is not None:
                    if now >= deadline:
                        return None
                    wait = deadline - now if wait is None else min(wait, deadline - now)
                self._changed.wait(wait)
            return None

    def waiting(self) -> dict[Key, Work]:
        """What waits, due or not (for status pages and tests)."""
        with self._changed:
            return {k: Work(p.refresh, p.reconcile) for k, p in self._pending.items()}

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
