"""Waiting for a positive marker: a probe's output polled until it says what is waited for (``eventually``),
or a check polled until it returns something true (``until``: the e2e tier's one way to wait)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from warden_dev.controlplane import wait_scale


def _told(explain: Callable[[], str] | None) -> str:
    """What ``explain`` adds to a wait's failure (what a person needs to see why), on a line of its own."""
    return f"\n{explain()}" if explain is not None else ""


def eventually(what: str, probe: Callable[[], str], ok: Callable[[str], bool], timeout: float = 30,
               explain: Callable[[], str] | None = None) -> str:  # fmt: skip
    """``probe()`` every second until ``ok`` holds of its output (returned), or fail after ``timeout`` s
    with the last output (``timeout`` times ``wait_scale()``: longer for tiers run side by side) and what
    ``explain()`` says then."""
    deadline = time.monotonic() + timeout * wait_scale()
    out = probe()
    while not ok(out) and time.monotonic() < deadline:
        time.sleep(1)
        out = probe()
    if not ok(out):
        raise AssertionError(f"{what}: {out!r}{_told(explain)}")
    return out


def until(what: str, check: Callable[[], Any], timeout: float = 60, interval: float = 1,
          explain: Callable[[], str] | None = None) -> Any:  # fmt: skip
    """``check()`` every ``interval`` s until it returns something true (returned), or fail after
    ``timeout`` s (times ``wait_scale()``) naming ``what``, with what ``explain()`` says then."""
    timeout *= wait_scale()
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f}s (last: {got!r}){_told(explain)}")
        time.sleep(interval)
