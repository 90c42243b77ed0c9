"""What a candidate does with the Lease it read (pure: no clock, no I/O).

Expiry is judged the way client-go judges it: never by comparing the holder's ``renewTime`` with the
candidate's wall clock (the two machines' clocks may differ), but by how long the candidate itself has
seen the same record unchanged (``Seen.since``, its monotonic clock). A holder that renews changes its
record (``renewTime`` and ``resourceVersion``); one that stopped renewing (frozen, its node gone) leaves it
as it was, and ``leaseDurationSeconds`` after the candidate first saw it so, the candidate takes it.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from warden import kubetime
from warden.naming import MANAGED

#: the Lease's time format (``metav1.MicroTime``)


@dataclass(frozen=True)
class Timing:
    """Seconds. A leader that has not renewed for ``renew_deadline`` stops acting, before a standby may
    take the lease (``lease_duration`` after it last saw a renewal): never two leaders acting at once."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    renew: float = 5.0  # between the leader's renewals
    retry: float = 2.0  # between a standby's looks, and the leader's retries of a failed renewal

    @classmethod
    def for_lease(cls, duration: float) -> Timing:
        """Timings in the proportions of the defaults (15 s: renewed every 5 s, given up after 10 s)."""
        return cls(duration, duration * 2 / 3, duration / 3, min(2.0, duration / 5))

    def __post_init__(self) -> None:
        if not 0 < self.renew < self.renew_deadline < self.lease_duration:
            raise ValueError(f"want 0 < renew < renew deadline < lease duration: {self}")
        if not 0 < self.retry < self.renew_deadline:
            raise ValueError(f"want 0 < retry < renew deadline: {self}")


@dataclass(frozen=True)
class Record:
    """A Lease as far as the election is concerned."""

    holder: str  # "": nobody (handed back)
    duration: float  # leaseDurationSeconds
    renew_time: str
    transitions: int
    resource_version: str


def record_of(lease: Mapping[str, Any]) -> Record:
    spec = lease.get("spec") or {}
    return Record(
        holder=str(spec.get("holderIdentity") or ""),
        duration=float(spec.get("leaseDurationSeconds") or 0),
        renew_time=str(spec.get("renewTime") or ""),
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=str((lease.get("metadata") or {}).get("resourceVersion") or ""),
    )


@dataclass(frozen=True)
class Seen:
    """The record a candidate read last (None: no Lease) and since when (its monotonic clock) it has
    read that same record."""

    record: Record | None
    since: float


def observe(previous: Seen | None, record: Record | None, now: float) -> Seen:
    """The record just read: the same as before keeps its first sighting, any change starts the count again."""
    if previous is not None and previous.record == record:
        return previous
    return Seen(record, now)


class Verdict(enum.Enum):
    CREATE = "create"  # no Lease yet: make it, held by this candidate
    TAKE = "take"  # free, or its holder stopped renewing: write this candidate in
    RENEW = "renew"  # this candidate holds it
    WAIT = "wait"  # another holds it and renews


def decide(identity: str, seen: Seen, now: float) -> Verdict:
    record = seen.record
    if record is None:
        return Verdict.CREATE
    if record.holder == identity:
        return Verdict.RENEW
    if not record.holder:
        return Verdict.TAKE
    if now - seen.since >= record.duration:
        return Verdict.TAKE
    return Verdict.WAIT


def expires_in(identity: str, seen: Seen, now: float) -> float | None:
    """Seconds until another holder's lease runs out by this candidate's clock (None: not another's)."""
    record = seen.record
    if record is None or not record.holder or record.holder == identity:
        return None
    return max(0.0, record.duration - (now - seen.since))


def claimed(lease: Mapping[str, Any], identity: str, timing: Timing, when: datetime.datetime) -> dict[str, Any]:
    """``lease`` (as read: its ``resourceVersion`` guards the write) written over to ``identity``: taken,
    or renewed when ``identity`` holds it already (then ``acquireTime`` and the transitions stay)."""
    spec = dict(lease.get("spec") or {})
    stamp = kubetime.micro_stamp(when)
    if spec.get("holderIdentity") != identity:
        spec["acquireTime"] = stamp
        spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
    spec.update(holderIdentity=identity, leaseDurationSeconds=int(timing.lease_duration), renewTime=stamp)
    return {**lease, "spec": spec}


def new_lease(namespace: str, name: str, identity: str, timing: Timing, when: datetime.datetime) -> dict[str, Any]:
    stamp = kubetime.micro_stamp(when)
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED)},
        "spec": {
            "holderIdentity": identity,
            "leaseDurationSeconds": int(timing.lease_duration),
            "acquireTime": stamp,
            "renewTime": stamp,
            "leaseTransitions": 0,
        },
    }


def released(lease: Mapping[str, Any]) -> dict[str, Any]:
    """``lease`` handed back: nobody holds it, and a standby takes it at its next look."""
    spec = dict(lease.get("spec") or {})
    spec.update(holderIdentity="", leaseDurationSeconds=1)
    return {**lease, "spec": spec}
