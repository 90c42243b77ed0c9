"""Maintenance windows for worker upgrades: a pure planner (the window, the time, the nodes waiting in; whether
the rollout may act and which Slurm reservation keeps the nodes free for it, out).

With ``spec.maintenanceWindow`` (rendered into each WorkerSet's spec), a pod on an older template is not
drained while the window is closed. Instead a Slurm reservation named ``warden-maintenance-<set>`` covers
the set's nodes still to upgrade from the window's next start, for its length, with ``MAINT`` and
``IGNORE_JOBS``: Slurm starts no job there that would not end before the window opens (the backfill
scheduler sees the reservation), and jobs already running are left alone. When the window opens, the
rollout drains every node still to upgrade at once (they are idle: the reservation kept them so), the
reservation is deleted, and each pod is replaced once its node is idle — after the window too, if a job
that started before the reservation still runs: no job is killed.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from warden import kubetime
from warden.slurm.model import Reservation as Held

#: reservations Warden makes start with this (``warden-maintenance-<WorkerSet>``)
RESERVATION_PREFIX = "warden-maintenance-"
#: Slurm's flags for it: a maintenance reservation (accounted as such), made over nodes running jobs
RESERVATION_FLAGS = ("MAINT", "IGNORE_JOBS")
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")

UTC = datetime.UTC


@dataclass(frozen=True)
class Window:
    """``spec.maintenanceWindow``: opens at ``start`` (minutes after midnight, UTC) on ``days`` (0 is
    Monday; empty: every day) for ``minutes``."""

    start: int
    minutes: int
    days: frozenset[int] = frozenset()

    @classmethod
    def of(cls, raw: Mapping[str, Any] | None) -> Window | None:
        """The window a WorkerSet's spec names (``maintenanceWindow``), or None."""
        if not raw:
            return None
        hours, minutes = (int(p) for p in str(raw["start"]).split(":"))
        days = frozenset(DAYS.index(d) for d in raw.get("days") or ())
        return cls(start=hours * 60 + minutes, minutes=int(raw["durationMinutes"]), days=days)


@dataclass(frozen=True)
class Opening:
    """The window at a moment: open now (``start`` is when it opened), or the next one (``start``)."""

    open: bool
    start: datetime.datetime
    end: datetime.datetime


def opening(window: Window, now: datetime.datetime) -> Opening:
    """Whether ``window`` is open at ``now`` (aware), and the start and end of that one or of the next."""
    now = now.astimezone(UTC)
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    length = datetime.timedelta(minutes=window.minutes)
    # windows may last up to a week: those that began in the last 7 days may still be open
    starts = [
        midnight + datetime.timedelta(days=d, minutes=window.start)
        for d in range(-7, 9)
        if not window.days or (midnight + datetime.timedelta(days=d)).weekday() in window.days
    ]
    current = [s for s in starts if s <= now < s + length]
    if current:
        return Opening(True, current[-1], current[-1] + length)
    after = min(s for s in starts if s > now)
    return Opening(False, after, after + length)


@dataclass(frozen=True)
class Reservation:
    """A Slurm reservation Warden wants: its name, start, length (whole minutes) and nodes."""

    name: str
    start: datetime.datetime
    minutes: int
    nodes: tuple[str, ...]


def reservation_name(workerset: str) -> str:
    return f"{RESERVATION_PREFIX}{workerset}"


def wanted(workerset: str, now: Opening, waiting: Iterable[str]) -> Reservation | None:
    """The reservation that keeps ``waiting`` (registered Slurm nodes still to upgrade) free for the next
    window, or None: the window is open (the rollout drains them now) or nothing waits."""
    nodes = tuple(sorted(set(waiting)))
    if now.open or not nodes:
        return None
    minutes = int((now.end - now.start).total_seconds() // 60)
    return Reservation(reservation_name(workerset), now.start, minutes, nodes)


def differs(want: Reservation, have: Held) -> bool:
    """Whether the reservation slurmctld holds is not the one wanted (start, length, nodes, flags)."""
    return (
        have.start != int(want.start.timestamp())
        or have.minutes != want.minutes
        or tuple(sorted(have.nodes)) != want.nodes
        or not set(RESERVATION_FLAGS) <= have.flags
    )


def stamp(at: datetime.datetime) -> str:
    """An RFC 3339 time in UTC, to the second (status, Events)."""
    return kubetime.stamp(at)
