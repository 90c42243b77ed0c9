"""The election's loop: one thread per process, standing by or renewing (``warden.leader``)."""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from warden import opmetrics
from warden.leader import decide, fence
from warden.leader.decide import Seen, Timing, Verdict
from warden.leader.lease import LeaseStore, Taken

log = logging.getLogger(__name__)

#: what a failed request of the election raises (the API server unreachable, slow, or refusing)
FAILURES = (ApiException, HTTPError, OSError, Taken)


class Elector:
    """Stands by until it holds the Lease, then renews it. ``on_lost`` is called once it holds it no more
    (another took it, or ``renew_deadline`` went by without a renewal); in the operator that is
    ``fence.lost``, the end of the process. With ``fencing``, every renewal moves ``warden.leader.fence``'s
    deadline."""

    def __init__(
        self,
        leases: LeaseStore,
        identity: str,
        timing: Timing | None = None,
        on_lost: Callable[[str], None] = fence.lost,
        fencing: bool = False,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self.leases = leases
        self.identity = identity
        self.timing = timing or Timing()
        self.on_lost = on_lost
        self.fencing = fencing
        self.clock = clock
        self.wall = wall
        self.seen: Seen | None = None
        #: the holder last read (for logs and the standby's health answer)
        self.holder = ""
        #: monotonic time until which this candidate leads (its last renewal plus the renew deadline)
        self._until: float | None = None
        self._leading = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def leading(self) -> bool:
        return self._until is not None and self.clock() < self._until

    # --- one round -----------------------------------------------------------------------------------

    def step(self) -> bool:
        """One look at the Lease, and the write it calls for; whether this candidate leads afterwards."""
        if self._until is not None and self.clock() >= self._until:
            # stopped (SIGSTOP, a long pause) past its own deadline: a standby may act already
            self._lose(f"{self.identity} did not renew its lease within {self.timing.renew_deadline:.0f}s")
            return False
        started = self.clock()
        try:
            lease = self.leases.read()
            record = None if lease is None else decide.record_of(lease)
            self.seen = decide.observe(self.seen, record, started)
            self.holder = record.holder if record is not None else ""
            verdict = decide.decide(self.identity, self.seen, started)
            if self._until is not None and verdict is not Verdict.RENEW:
                self._lose(f"{self.identity} lost the lease to {self.holder or 'nobody'}")
                return False
            if verdict is Verdict.WAIT:
                return False
            if verdict is Verdict.CREATE:
                namespace, name = self.leases.namespace, self.leases.name
                self.leases.create(decide.new_lease(namespace, name, self.identity, self.timing, self.wall()))
            else:
                assert lease is not None
                self.leases.replace(decide.claimed(lease, self.identity, self.timing, self.wall()))
        except FAILURES as e:
            if self._until is not None:
                log.warning("leader election: %s could not renew its lease: %s", self.identity, e)
            else:
                log.debug("leader election: %s: %s", self.identity, e)
            return False
        self._renewed(started, verdict)
        return True

    def _renewed(self, started: float, verdict: Verdict) -> None:
        self._until = started + self.timing.renew_deadline
        if self.fencing:
            fence.hold_until(self._until)
        self.holder = self.identity
        if not self._leading.is_set():
            how = "made" if verdict is Verdict.CREATE else "took"
            log.info("leader election: %s leads (%s the lease %s/%s)", self.identity, how, self.leases.namespace,
                     self.leases.name)  # fmt: skip
            opmetrics.LEADING.labels(self.identity).set(1)
            self._leading.set()

    def _lose(self, why: str) -> None:
        self._until = None
        self._leading.clear()
        opmetrics.LEADING.labels(self.identity).set(0)
        self.on_lost(why)

    # --- the thread ----------------------------------------------------------------------------------

    def run(self) -> None:
        opmetrics.LEADING.labels(self.identity).set(0)
        while not self._stop.is_set():
            try:
                leading = self.step()
            except Exception:  # never a standby that stopped looking, nor a leader that stopped renewing unseen
                log.exception("leader election: %s: a round failed", self.identity)
                leading = self.leading
            if leading:
                pause = self.timing.renew
            elif self._until is not None:  # a failed renewal: try again soon, before the deadline
                pause = self.timing.retry
            else:
                left = decide.expires_in(self.identity, self.seen, self.clock()) if self.seen else None
                pause = min(self.timing.retry, left) if left else self.timing.retry
            self._stop.wait(pause)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="warden-leader-election", daemon=True)
        self._thread.start()

    def wait_leading(self, timeout: float | None = None) -> bool:
        return self._leading.wait(timeout)

    def stop(self) -> None:
        """No more rounds (the Lease stays as it is: ``release`` hands it back)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10.0)

    def release(self) -> bool:
        """Hand the Lease back if this candidate still holds it (a clean stop): a standby takes it at its
        next look instead of a lease duration later. Whether it was handed back."""
        self.stop()
        if not self.leading:
            return False
        try:
            lease = self.leases.read()
            if lease is None or decide.record_of(lease).holder != self.identity:
                return False
            self.leases.replace(decide.released(lease))
        except FAILURES as e:
            log.warning("leader election: %s could not hand its lease back (it runs out by itself): %s",
                        self.identity, e)  # fmt: skip
            return False
        self._until = None
        self._leading.clear()
        opmetrics.LEADING.labels(self.identity).set(0)
        log.info("leader election: %s handed its lease back", self.identity)
        return True
