"""Maintenance windows for worker upgrades (``warden.workers.maintenance`` and the rollout's use of it):
when a window is open, what waits for it, and the Slurm reservation that keeps the nodes free meanwhile."""

from __future__ import annotations

import datetime

import pytest

from warden.model import parse_spec
from warden.slurm.model import Node, reservations_from_doc
from warden.slurm.model import Reservation as Held
from warden.workers import maintenance
from warden.workers.maintenance import Opening, Window, opening, wanted
from warden.workers.pod import SetPod
from warden.workers.rollout import Group, plan, reason

UTC = datetime.UTC
STS = "demo-worker-cpu"
# Sunday 29 November 2026
SUNDAY_0958 = datetime.datetime(2026, 11, 29, 9, 58, tzinfo=UTC)


def at(day: int, hh: int, mm: int) -> datetime.datetime:
    return datetime.datetime(2026, 11, day, hh, mm, tzinfo=UTC)


def test_a_daily_window_is_open_from_its_start_for_its_length_and_names_the_next_one_otherwise() -> None:
    daily = Window.of({"start": "10:05", "durationMinutes": 60})
    assert daily is not None
    assert opening(daily, SUNDAY_0958) == Opening(False, at(29, 10, 5), at(29, 11, 5))
    assert opening(daily, at(29, 10, 5)) == Opening(True, at(29, 10, 5), at(29, 11, 5))
    assert opening(daily, at(29, 11, 4)).open
    assert opening(daily, at(29, 11, 5)) == Opening(False, at(30, 10, 5), at(30, 11, 5))


def test_a_window_over_midnight_and_one_on_named_days_only() -> None:
    night = Window.of({"start": "23:30", "durationMinutes": 120})
    assert night is not None
    assert opening(night, at(30, 0, 45)) == Opening(True, at(29, 23, 30), at(30, 1, 30))
    weekend = Window.of({"start": "02:00", "durationMinutes": 240, "days": ["Sat"]})
    assert weekend is not None
    # Sunday morning: the next is Saturday 5 December
    assert opening(weekend, SUNDAY_0958) == Opening(False, datetime.datetime(2026, 12, 5, 2, 0, tzinfo=UTC),
                                                    datetime.datetime(2026, 12, 5, 6, 0, tzinfo=UTC))  # fmt: skip
    assert Window.of(None) is None and Window.of({}) is None


def test_the_reservation_covers_the_nodes_waiting_from_the_next_start_and_none_once_it_opened() -> None:
    daily = Window.of({"start": "10:05", "durationMinutes": 90})
    assert daily is not None
    before = opening(daily, SUNDAY_0958)
    want = wanted(STS, before, [f"{STS}-1", f"{STS}-0", f"{STS}-1"])
    assert want == maintenance.Reservation(f"warden-maintenance-{STS}", at(29, 10, 5), 90, (f"{STS}-0", f"{STS}-1"))
    assert wanted(STS, before, []) is None, "nothing waits: no reservation"
    assert wanted(STS, opening(daily, at(29, 10, 6)), [f"{STS}-0"]) is None, "open: the rollout drains instead"

    start = int(at(29, 10, 5).timestamp())
    same = Held(want.name, start, start + 90 * 60, (f"{STS}-1", f"{STS}-0"), frozenset({"MAINT", "IGNORE_JOBS", "X"}))
    assert not maintenance.differs(want, same)
    assert maintenance.differs(want, Held(want.name, start, start + 90 * 60, (f"{STS}-0",), same.flags))
    assert maintenance.differs(want, Held(want.name, start + 60, start + 90 * 60, same.nodes, same.flags))
    assert maintenance.differs(want, Held(want.name, start, start + 90 * 60, same.nodes, frozenset({"MAINT"})))


def test_slurms_reservations_are_read_with_their_nodes_expanded() -> None:
    doc = {
        "reservations": [
            {
                "name": "warden-maintenance-demo-worker-cpu",
                "start_time": {"set": True, "infinite": False, "number": 1795946700},
                "end_time": {"set": True, "infinite": False, "number": 1795952100},
                "node_list": "demo-worker-cpu-[0-1]",
                "flags": ["MAINT", "IGNORE_JOBS", "SPEC_NODES"],
            },
            {"name": ""},
        ]
    }
    (r,) = reservations_from_doc(doc)
    assert (r.name, r.start, r.minutes, r.nodes) == (
        "warden-maintenance-demo-worker-cpu", 1795946700, 90, ("demo-worker-cpu-0", "demo-worker-cpu-1")
    )  # fmt: skip
    assert "MAINT" in r.flags and reservations_from_doc({}) == []


def node(i: int, state: str = "IDLE", *flags: str, why: str = "") -> Node:
    return Node(name=f"{STS}-{i}", state=state, flags=frozenset(flags), reason=why, gres="", features=(), partitions=())


def pods(*templates: str) -> tuple[SetPod, ...]:
    return tuple(SetPod(f"{STS}-{i}", i, template=t) for i, t in enumerate(templates))


def test_with_the_window_closed_nothing_is_drained_and_every_old_pod_waits() -> None:
    g = Group(workerset=STS, update_revision="new", max_unavailable=1, pods=pods("old", "old", "new"))
    closed = Opening(False, at(29, 10, 5), at(29, 11, 5))
    out = plan([g], {n.name: n for n in (node(0), node(1), node(2))}, closed)
    assert out.drains == [] and out.deletes == []
    assert sorted(out.waiting) == [f"{STS}-0", f"{STS}-1"]


def test_once_it_opens_every_old_pod_is_drained_at_once_and_one_drained_in_it_is_replaced_after_it() -> None:
    g = Group(workerset=STS, update_revision="new", max_unavailable=1, pods=pods("old", "old", "old"))
    nodes = {n.name: n for n in (node(0), node(1), node(2))}
    opened = Opening(True, at(29, 10, 5), at(29, 11, 5))
    out = plan([g], nodes, opened)
    assert sorted(n for n, _ in out.drains) == [f"{STS}-0", f"{STS}-1", f"{STS}-2"], "maxUnavailable is the window's"
    assert out.waiting == []
    # the window closed while a job that began before the reservation still ran on -1: it is replaced once idle
    closed = Opening(False, at(30, 10, 5), at(30, 11, 5))
    drained = {f"{STS}-1": node(1, "IDLE", "DRAIN", why=reason(g)), f"{STS}-0": node(0), f"{STS}-2": node(2)}
    later = plan([g], drained, closed)
    assert [p for p, _ in later.deletes] == [f"{STS}-1"] and later.drains == []
    assert sorted(later.waiting) == [f"{STS}-0", f"{STS}-2"]


def _spec(**extra: object) -> dict[str, object]:
    return {"workerGroups": [{"name": "cpu", "replicas": 1}], **extra}


def test_the_window_is_validated_and_named_in_the_error() -> None:
    spec = parse_spec(_spec(maintenanceWindow={"start": "10:05", "durationMinutes": 60, "days": ["Sat", "Sun"]}))
    assert spec.maintenance_window is not None and spec.maintenance_window.days == ["Sat", "Sun"]
    with pytest.raises(ValueError, match="start"):
        parse_spec(_spec(maintenanceWindow={"start": "25:00", "durationMinutes": 60}))
    with pytest.raises(ValueError, match=r"durationMinutes|duration_minutes"):
        parse_spec(_spec(maintenanceWindow={"start": "10:05", "durationMinutes": 5}))
    with pytest.raises(ValueError, match=r"maintenanceWindow: Slurm 24\.11's REST API cannot make"):
        parse_spec(_spec(slurmVersion="24.11", maintenanceWindow={"start": "10:05", "durationMinutes": 60}))
