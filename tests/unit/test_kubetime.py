"""Kubernetes' Time and MicroTime, written and read in one place (``warden.kubetime``)."""

from __future__ import annotations

import datetime

import pytest

from warden import kubetime

WHEN = datetime.datetime(2026, 11, 29, 19, 22, 41, 123456, tzinfo=datetime.UTC)


def test_a_time_is_utc_to_the_second_and_a_micro_time_to_the_microsecond_whatever_the_zone_given() -> None:
    assert kubetime.stamp(WHEN) == "2026-11-29T19:22:41Z"
    assert kubetime.micro_stamp(WHEN) == "2026-11-29T19:22:41.123456Z"
    berlin = WHEN.astimezone(datetime.timezone(datetime.timedelta(hours=1)))
    assert kubetime.stamp(berlin) == "2026-11-29T19:22:41Z"
    assert kubetime.stamp(WHEN.replace(tzinfo=None)) == "2026-11-29T19:22:41Z"  # no zone: UTC
    assert kubetime.parse(kubetime.stamp(WHEN)) == WHEN.replace(microsecond=0)
    assert kubetime.parse_micro(kubetime.micro_stamp(WHEN)) == WHEN


def test_what_is_no_time_reads_as_none_or_zero_seconds_and_parse_refuses_it() -> None:
    assert kubetime.epoch("2026-11-29T19:22:41Z") == WHEN.replace(microsecond=0).timestamp()
    assert [kubetime.epoch(x) for x in (None, "", "yesterday", "2026-11-29T19:22:41.5Z")] == [None] * 4
    assert kubetime.seconds_between("2026-11-29T19:22:41Z", "2026-11-29T19:24:11Z") == 90.0
    assert kubetime.seconds_between("", "2026-11-29T19:24:11Z") == 0.0
    with pytest.raises(ValueError):
        kubetime.parse("2026-11-29 19:22:41")
