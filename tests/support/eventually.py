"""Waiting for a positive marker: a probe's output polled until it says what is waited for."""

from __future__ import annotations

import time
from collections.abc import Callable


def eventually(what: str, probe: Callable[[], str], ok: Callable[[str], bool], timeout: float = 30) -> str:
    """``probe()`` every second until ``ok`` holds of its output (returned), or fail after ``timeout`` s
    with the last output."""
    deadline = time.monotonic() + timeout
    out = probe()
    while not ok(out) and time.monotonic() < deadline:
        time.sleep(1)
        out = probe()
    assert ok(out), f"{what}: {out!r}"
    return out
