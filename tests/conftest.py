"""Every test is marked with its tier (tests/<tier>/...), so `pytest -m integration` and friends work."""

from __future__ import annotations

from pathlib import Path

import pytest

#: which tests failed, for the tiers that keep a cluster's logs then (tests/support/failures.py)
pytest_plugins = ["tests.support.failures"]

TESTS = Path(__file__).parent
TIERS = ("integration", "dataplane", "conformance", "e2e")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(str(item.fspath)).relative_to(TESTS).parts
        if parts and parts[0] in TIERS:
            item.add_marker(getattr(pytest.mark, parts[0]))
