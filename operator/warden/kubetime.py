"""Kubernetes' two forms of a point in time, both RFC 3339 in UTC, written and read here alone (standard
library only: the worker and health-check programs use it too):

- Time, to the second (``2026-11-29T19:22:41Z``): conditions, status fields, annotations, reports;
- MicroTime, to the microsecond (``2026-11-29T19:22:41.123456Z``): Events and Leases.

A datetime without a zone is taken as UTC.
"""

from __future__ import annotations

import datetime

TIME = "%Y-%m-%dT%H:%M:%SZ"
MICRO_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"


def _utc(when: datetime.datetime | None) -> datetime.datetime:
    if when is None:
        return datetime.datetime.now(datetime.UTC)
    return when.replace(tzinfo=datetime.UTC) if when.tzinfo is None else when.astimezone(datetime.UTC)


def stamp(when: datetime.datetime | None = None) -> str:
    """``when`` (now when None) as a Time."""
    return _utc(when).strftime(TIME)


def micro_stamp(when: datetime.datetime | None = None) -> str:
    """``when`` (now when None) as a MicroTime."""
    return _utc(when).strftime(MICRO_TIME)


def parse(text: str) -> datetime.datetime:
    """A Time (ValueError when ``text`` is none)."""
    return datetime.datetime.strptime(text, TIME).replace(tzinfo=datetime.UTC)


def parse_micro(text: str) -> datetime.datetime:
    """A MicroTime (ValueError when ``text`` is none)."""
    return datetime.datetime.strptime(text, MICRO_TIME).replace(tzinfo=datetime.UTC)


def epoch(text: object) -> float | None:
    """A Time as epoch seconds; None when ``text`` is no Time (missing, empty, another form)."""
    try:
        return parse(str(text)).timestamp() if text else None
    except ValueError:
        return None


def seconds_between(earlier: str, later: str) -> float:
    """Seconds from one Time to another; 0 when either is no Time."""
    a, b = epoch(earlier), epoch(later)
    return 0.0 if a is None or b is None else b - a
