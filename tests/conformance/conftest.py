"""Fixtures for the conformance tier: SchedMD's own test suite (Slurm 24.11.5) run as an ordinary user
from an SSH session on the login node of a dataplane cluster (docs/conformance.md).

One run per session: the cluster of the dataplane tier (its BASE_SPEC: without containers, whose
`plain` group would change the suite's node counts; its own run id, so it coexists with a dataplane run),
a user `atf` made by root with warden-useradd and given an association, the suite
unpacked in the jail's /var/tmp (one volume for every node, outside /home) with its pinned wheels in a
venv, then the suite in local-config mode with every test of excluded.txt deselected. The tests of
test_suite.py read the outcome back, one per suite file; the summary line ends the tier's output.

Needs Docker and the images (`make conformance` builds both), and the release archive (suite.py).
WARDEN_DATAPLANE_KEEP=1 leaves the cluster after the run, for poking at.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conformance import suite
from tests.dataplane.spec import BASE_SPEC
from tests.support import failures
from tests.support.dockerfixture import running_for_tests
from tests.support.jailuser import JailUser
from warden_dev.dockercluster import DockerCluster, DockerError, sweep_stale

#: the suite's test user (SchedMD's own runs call it atf too)
USER = "atf"

_report: list[str] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The suite's figures at the very end of the tier's output (and in $WARDEN_TIER_SUMMARY)."""
    if not _report:
        return
    terminalreporter.section("SchedMD's test suite")
    for line in _report:
        terminalreporter.write_line(line)
    suite.write_summary(_report[:1])


@pytest.fixture(scope="session")
def exclusions() -> list[suite.Exclusion]:
    return suite.load_exclusions()


@pytest.fixture(scope="session")
def conformance(exclusions: list[suite.Exclusion]) -> Iterator[suite.Results]:
    """The suite's run against a fresh dataplane cluster, its results read back."""
    archive = suite.archive_path()
    try:
        suite.check_archive(archive)
    except suite.ConformanceError as e:
        pytest.fail(str(e), pytrace=False)
    swept = sweep_stale()
    if swept:
        print(f"\nremoved leftovers of dead dataplane runs: {', '.join(swept)}", file=sys.stderr)
    with running_for_tests(DockerCluster(BASE_SPEC), "conformance cluster", failures.any_failed) as c:
        try:
            results = _run(c, archive, exclusions)
        except (DockerError, suite.ConformanceError) as e:
            _report[:] = [f"conformance: the suite did not run ({str(e).splitlines()[0][:200]})"]
            pytest.fail(f"the suite did not run: {e}", pytrace=False)
        _report[:] = results.report_lines()
        yield results


def _run(c: DockerCluster, archive: Path, exclusions: list[suite.Exclusion]) -> suite.Results:
    t0 = time.monotonic()
    user = JailUser.added_by_root(c, USER)
    user.add_to_accounting()
    python = user.ssh("python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'").strip()
    wheels = suite.wheel_dir(python)
    layout = suite.Layout(f"/var/tmp/conformance-{c.run_id}")
    config = suite.driver_config(layout, exclusions, args=suite.EXTRA_ARGS, tests=suite.SELECTED)
    suite.stage(c, layout, archive, wheels, USER, config)
    user.ssh(suite.install_script(layout), timeout=300)
    prepared = time.monotonic() - t0
    user.ssh(suite.run_script(layout), timeout=suite.RUN_TIMEOUT + 600)
    out_dir = Path(tempfile.gettempdir()) / f"warden-conformance-{c.run_id}"
    results = suite.Results.from_report(suite.read_back(c, layout, out_dir), exclusions)
    results.out_dir = out_dir
    print(
        f"\nconformance: user {USER}, Python {python} in the jail, prepared in {prepared:.0f}s; "
        f"the suite (exit status {results.exitstatus}) took {results.seconds:.0f}s",
        file=sys.stderr,
    )
    return results


def pytest_unconfigure(config: pytest.Config) -> None:
    """The summary line once more, as the tier's very last line."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if _report and reporter is not None:
        reporter.write_line(_report[0])
