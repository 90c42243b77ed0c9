"""Whether a test of this pytest session has failed yet: the dataplane and conformance tiers print their
cluster's container logs at the end when one has (tests/support/dockerfixture.py, running_for_tests).
The failed tests' names also go to $WARDEN_TIER_SUMMARY, so .ci/run's last lines name them (a tier's
own output can scroll out of what CI keeps). Loaded for every tier by tests/conftest.py."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

_failed: list[str] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if getattr(report, "failed", False) and item.nodeid not in _failed:
        _failed.append(item.nodeid)
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get("WARDEN_TIER_SUMMARY")
    if path and _failed:
        with open(path, "a") as f:
            f.writelines(f"FAILED {nodeid}\n" for nodeid in _failed)


def any_failed() -> bool:
    return bool(_failed)
