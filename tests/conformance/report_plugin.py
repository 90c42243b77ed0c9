"""A pytest plugin loaded into SchedMD's test suite run (`-p report_plugin`, in the jail, by the jail's
own Python and the suite's pinned pytest): it writes one JSON file, the run's outcome, for the tier to
read back. Nothing of the suite is changed: this is an observer of pytest's hooks only.

The file (path in $WARDEN_CONFORMANCE_REPORT) holds
  collected: items collected (before deselection), selected and deselected: node ids (run, excluded),
  tests: {node id: {outcome: passed|failed|error|skipped, seconds, reason, output}},
  collect_errors: {node id: text}, exitstatus, seconds (the session's wall time).
A test failing in setup or teardown is an `error`; an expected failure (`xfail`) counts as skipped.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest

#: The most characters of a failure's text kept per test (the whole log is written beside it).
MAX_OUTPUT = 6000

_state: dict[str, Any] = {
    "collected": 0,
    "selected": [],
    "deselected": [],
    "tests": {},
    "collect_errors": {},
    "exitstatus": None,
    "seconds": 0.0,
}
_start = time.monotonic()


def _text(report: pytest.TestReport | pytest.CollectReport) -> str:
    parts = [report.longreprtext]
    for name, content in report.sections:
        if content.strip():
            parts.append(f"----- {name}\n{content}")
    text = "\n".join(parts)
    # the end of a failure says most (the assertion, the log's last lines)
    return text if len(text) <= MAX_OUTPUT else "...\n" + text[-MAX_OUTPUT:]


def _skip_reason(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        return f"xfail: {report.wasxfail}".strip()
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.failed:
        _state["collect_errors"][report.nodeid] = _text(report)


def pytest_deselected(items: list[pytest.Item]) -> None:
    _state["deselected"].extend(item.nodeid for item in items)


def pytest_collection_finish(session: pytest.Session) -> None:
    _state["selected"] = [item.nodeid for item in session.items]
    _state["collected"] = len(session.items) + len(_state["deselected"])


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    tests: dict[str, dict[str, Any]] = _state["tests"]
    entry = tests.setdefault(report.nodeid, {"outcome": "passed", "seconds": 0.0, "reason": "", "output": ""})
    entry["seconds"] = round(entry["seconds"] + report.duration, 3)
    if report.failed:
        # a failure of the test itself wins over one in its teardown; setup/teardown failures are errors
        if entry["outcome"] != "failed":
            entry["outcome"] = "failed" if report.when == "call" else "error"
            entry["output"] = _text(report)
    elif report.skipped and entry["outcome"] == "passed":
        entry["outcome"] = "skipped"
        entry["reason"] = _skip_reason(report)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _state["exitstatus"] = int(exitstatus)
    _state["seconds"] = round(time.monotonic() - _start, 1)
    path = os.environ.get("WARDEN_CONFORMANCE_REPORT")
    if path:
        tmp = f"{path}.tmp"
        with open(tmp, "w") as f:
            json.dump(_state, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
