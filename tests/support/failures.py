"""Whether a test of this pytest session has failed yet: the dataplane and conformance tiers print their
cluster's container logs at the end when one has (tests/support/dockerfixture.py, running_for_tests).
The failed tests' names, each with the first line of why (its assertion's message, cut at 400 characters),
also go to $WARDEN_TIER_SUMMARY, so .ci/run's last lines name them and say why (a tier's own output can
scroll out of what CI keeps). Loaded for every tier by tests/conftest.py."""

from __future__ import annotations

import os
import re
from collections.abc import Generator

import pytest

_failed: list[str] = []
#: nodeid -> the first line of why it failed
_why: dict[str, str] = {}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if getattr(report, "failed", False) and item.nodeid not in _failed:
        _failed.append(item.nodeid)
        _why[item.nodeid] = _first_line(report)
    return report


def _first_line(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    return first_line(str(getattr(crash, "message", "") or report.longreprtext or ""))


def first_line(message: str) -> str:
    """Why a test failed, in one line: its message's first line, with the next one when the first is only the
    exception's name ("AssertionError:" of an assertion whose message begins with a newline)."""
    lines = [x.strip() for x in message.splitlines() if x.strip()]
    line = lines[0] if lines else ""
    if re.fullmatch(r"\w+:", line) and len(lines) > 1:
        line = f"{line} {lines[1]}"
    return line if len(line) <= 400 else line[:399] + "…"


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get("WARDEN_TIER_SUMMARY")
    if path and _failed:
        with open(path, "a") as f:
            f.writelines(f"FAILED {nodeid}" + (f" — {_why[nodeid]}" if _why.get(nodeid) else "") + "\n"
                         for nodeid in _failed)  # fmt: skip


def any_failed() -> bool:
    return bool(_failed)
