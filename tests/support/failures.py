"""Whether a test of this pytest session has failed yet: the dataplane and conformance tiers print their
cluster's container logs at the end when one has (tests/support/dockerfixture.py, running_for_tests).
Loaded for every tier by tests/conftest.py."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

_failed: list[str] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if getattr(report, "failed", False):
        _failed.append(item.nodeid)
    return report


def any_failed() -> bool:
    return bool(_failed)
