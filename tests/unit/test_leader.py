"""Leader election's decisions (warden.leader.decide), its loop against an in-memory Lease with the API
server's resourceVersion rule (warden.leader.elector), and the write fence (warden.leader.fence).
The same loop against a real kube-apiserver: tests/integration/test_leader_election.py."""

from __future__ import annotations

import copy
import datetime
import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest

from warden.leader import decide, fence
from warden.leader.decide import Record, Seen, Timing, Verdict
from warden.leader.elector import Elector
from warden.leader.lease import Taken

T = Timing(lease_duration=15, renew_deadline=10, renew=5, retry=2)
WHEN = datetime.datetime(2026, 11, 29, 7, 0, tzinfo=datetime.UTC)


def rec(holder: str, rv: str = "1", renew: str = "t0") -> Record:
    return Record(holder=holder, duration=15, renew_time=renew, transitions=0, resource_version=rv)


def test_no_lease_is_made_and_ones_own_is_renewed() -> None:
    assert decide.decide("a", Seen(None, 0), 0) is Verdict.CREATE
    assert decide.decide("a", Seen(rec("a"), 0), 100) is Verdict.RENEW


def test_a_handed_back_lease_is_taken_at_once() -> None:
    assert decide.decide("b", Seen(rec(""), 10), 10) is Verdict.TAKE


def test_anothers_lease_is_taken_only_after_its_duration_unchanged_by_the_candidates_clock() -> None:
    seen = decide.observe(None, rec("a"), now=100)
    assert decide.decide("b", seen, 114.9) is Verdict.WAIT
    assert decide.expires_in("b", seen, 110) == pytest.approx(5)
    assert decide.decide("b", seen, 115) is Verdict.TAKE


def test_a_holder_that_renews_is_never_overtaken() -> None:
    seen = None
    for i in range(20):  # renewed every 5 s: each look finds a new record
        seen = decide.observe(seen, rec("a", rv=str(i), renew=f"t{i}"), now=i * 5.0)
        assert decide.decide("b", seen, i * 5.0) is Verdict.WAIT


def test_the_same_record_keeps_its_first_sighting() -> None:
    first = decide.observe(None, rec("a"), 3)
    assert decide.observe(first, rec("a"), 9) is first
    assert decide.observe(first, rec("a", rv="2"), 9).since == 9


def test_timings_that_could_overlap_two_leaders_are_refused() -> None:
    with pytest.raises(ValueError):
        Timing(lease_duration=10, renew_deadline=10, renew=5)
    with pytest.raises(ValueError):
        Timing(lease_duration=15, renew_deadline=10, renew=10)


def test_taking_counts_a_transition_renewing_keeps_acquire_time() -> None:
    lease = decide.new_lease("ns", "warden-operator", "a", T, WHEN)
    assert lease["spec"]["leaseDurationSeconds"] == 15 and lease["spec"]["renewTime"] == "2026-11-29T07:00:00.000000Z"
    later = WHEN + datetime.timedelta(seconds=5)
    renewed = decide.claimed(lease, "a", T, later)["spec"]
    assert renewed["acquireTime"] == lease["spec"]["acquireTime"] and renewed["leaseTransitions"] == 0
    assert renewed["renewTime"] == "2026-11-29T07:00:05.000000Z"
    taken = decide.claimed(lease, "b", T, later)["spec"]
    assert (taken["holderIdentity"], taken["leaseTransitions"], taken["acquireTime"]) == ("b", 1, taken["renewTime"])
    assert decide.record_of(decide.released(lease)).holder == ""


class MemoryLeases:
    """One Lease with the API server's rules: create fails when it exists, a write carrying an old
    resourceVersion fails (409), every write moves the resourceVersion."""

    namespace, name = "ns", "warden-operator"

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.writes: list[str] = []
        self.down = False

    def _store(self, lease: Mapping[str, Any]) -> dict[str, Any]:
        self.version += 1
        self.lease = copy.deepcopy(dict(lease))
        self.lease.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        self.writes.append(lease["spec"]["holderIdentity"])
        return copy.deepcopy(self.lease)

    def read(self) -> dict[str, Any] | None:
        if self.down:
            raise OSError("connection refused")
        return copy.deepcopy(self.lease)

    def create(self, lease: Mapping[str, Any]) -> dict[str, Any]:
        if self.lease is not None:
            raise Taken("exists")
        return self._store(lease)

    def replace(self, lease: Mapping[str, Any]) -> dict[str, Any]:
        if self.down:
            raise OSError("connection refused")
        assert self.lease is not None
        if lease["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
            raise Taken("conflict")
        return self._store(lease)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def electors(leases: MemoryLeases, clock: Clock, lost: list[str]) -> tuple[Elector, Elector]:
    def make(identity: str) -> Elector:
        return Elector(leases, identity, T, on_lost=lambda why: lost.append(f"{identity}: {why}"), clock=clock,
                       wall=lambda: WHEN)  # fmt: skip

    return make("a"), make("b")


def test_one_leads_the_other_waits_then_takes_over_a_frozen_leader_which_steps_down_on_resuming() -> None:
    leases, clock, lost = MemoryLeases(), Clock(), list[str]()
    a, b = electors(leases, clock, lost)
    assert a.step() and a.leading
    assert not b.step() and not b.leading
    for _ in range(6):  # a renews every 5 s: b never takes it
        clock.now += 5
        assert a.step() and not b.step()
    # a is frozen: it neither renews nor looks; b takes the lease once it saw no renewal for 15 s
    frozen = clock.now
    while not b.step():
        clock.now += 2
        assert clock.now - frozen <= T.lease_duration + T.retry, "b never took over"
    assert b.leading and leases.writes[-1] == "b"
    # a resumes: past its renew deadline, it steps down before any write of its own
    writes = len(leases.writes)
    assert not a.step() and not a.leading
    assert lost == ["a: a did not renew its lease within 10s"] and len(leases.writes) == writes


def test_a_leader_cut_off_from_the_api_server_stops_at_its_renew_deadline_before_the_lease_runs_out() -> None:
    leases, clock, lost = MemoryLeases(), Clock(), list[str]()
    a, _ = electors(leases, clock, lost)
    assert a.step()
    leases.down = True
    clock.now += 5
    assert not a.step() and a.leading and not lost  # one failed renewal: still within the deadline
    clock.now += 5
    assert not a.step() and not a.leading and lost  # 10 s without a renewal: stopped, 5 s before the lease's end


def test_a_leader_that_finds_another_holder_steps_down() -> None:
    leases, clock, lost = MemoryLeases(), Clock(), list[str]()
    a, _ = electors(leases, clock, lost)
    assert a.step()
    assert leases.lease is not None
    leases.replace(decide.claimed(leases.lease, "someone", T, WHEN))
    clock.now += 5
    assert not a.step() and lost == ["a: a lost the lease to someone"]


def test_a_released_lease_is_taken_at_the_standbys_next_look() -> None:
    leases, clock, lost = MemoryLeases(), Clock(), list[str]()
    a, b = electors(leases, clock, lost)
    assert a.step() and not b.step()
    assert a.release() and not a.leading
    assert b.step(), "b took the handed back lease at once"
    assert not lost


def test_the_fence_lets_writes_through_until_the_deadline_then_stops_the_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stopped: list[str] = []

    def lost(why: str) -> None:
        stopped.append(why)

    monkeypatch.setattr(fence, "lost", lost)
    monkeypatch.setattr(fence, "_clock", lambda: 100.0)
    try:
        fence.check("PATCH /api/v1/pods")  # no election: always
        fence.hold_until(100.5)
        fence.check("PATCH /api/v1/pods")
        assert not stopped
        fence.hold_until(99.0)
        fence.check("POST /api/v1/pods")
        assert stopped == ["the lease ran out before POST /api/v1/pods (was the process stopped?)"]
    finally:
        fence.forget()


def test_after_resigning_a_write_of_another_thread_waits_instead_of_ending_the_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """SIGTERM mid-change: the stopping thread hands the lease back while the worker threads go on. A worker's
    write must neither go (the process acts no more) nor end the process before the lease is handed back."""
    stopped: list[str] = []
    monkeypatch.setattr(fence, "lost", lambda why: stopped.append(why))
    monkeypatch.setattr(fence, "_clock", lambda: 100.0)
    raised: list[BaseException] = []

    def write() -> None:
        try:
            fence.check("PATCH /apis/slurm.warden.dev/v1alpha1/workersets/cpu")
        except fence.Resigned as e:
            raised.append(e)

    try:
        fence.hold_until(110.0)
        fence.resign()
        fence.hold_until(120.0)  # the elector's renewal that finished after the resignation
        assert not fence.valid()
        worker = threading.Thread(target=write, daemon=True)
        worker.start()
        deadline = time.monotonic() + 10
        while fence.parked() < 1:
            assert time.monotonic() < deadline, "the write neither waited nor went"
            time.sleep(0.01)
        assert worker.is_alive() and not stopped and not raised
    finally:
        fence.forget()
    worker.join(timeout=10)
    assert [str(e) for e in raised] == ["PATCH /apis/slurm.warden.dev/v1alpha1/workersets/cpu: this process resigned"]
    assert not stopped
