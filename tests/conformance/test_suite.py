"""SchedMD's test suite against the dataplane cluster: one test here per file of the suite, each passing
when every test of that file that ran passed (the suite's own skips are fine, and counted), skipped when
excluded.txt excludes the whole file, failing with the suite's output otherwise (docs/conformance.md)."""

from __future__ import annotations

import shlex

import pytest

from tests.conformance import suite

try:
    FILES = suite.suite_files(suite.archive_path())
    MISSING = ""
except (OSError, suite.ConformanceError) as e:
    FILES, MISSING = [], str(e)

#: the session's suite run happens in the first test's setup: give it the run's whole budget
TIER_TIMEOUT = suite.RUN_TIMEOUT + 900


def test_archive() -> None:
    """The pristine release archive is there, as pinned (its sha256)."""
    if MISSING:
        pytest.fail(MISSING, pytrace=False)
    suite.check_archive(suite.archive_path())


def test_exclusions_are_reviewed(exclusions: list[suite.Exclusion]) -> None:
    """Every line of excluded.txt names a test file of the suite, and says why (a known category)."""
    assert FILES, MISSING
    unknown = [f"excluded.txt:{e.line}: {e.target}" for e in exclusions if e.file not in FILES]
    assert not unknown, f"not a file of the suite: {unknown}"


@pytest.mark.timeout(TIER_TIMEOUT)
@pytest.mark.parametrize("name", FILES, ids=[f.removeprefix("tests/").removesuffix(".py") for f in FILES])
def test_suite_file(name: str, conformance: suite.Results, exclusions: list[suite.Exclusion]) -> None:
    whole = next((e for e in exclusions if e.target == name), None)
    if whole is not None:
        pytest.skip(f"excluded: {whole.reason}")
    if name in conformance.collect_errors:
        pytest.fail(f"{name}: collection failed:\n{conformance.collect_errors[name]}", pytrace=False)
    results = conformance.in_file(name)
    excluded = [n for n in conformance.deselected if n.startswith(f"{name}::")]
    if not results and not excluded and suite.SELECTED and name not in conformance.files:
        pytest.skip(f"not run: WARDEN_CONFORMANCE_TESTS={shlex.join(suite.SELECTED)}")
    if conformance.note(name):
        pytest.fail(f"{name}: {conformance.note(name)} (see {conformance.out_dir}/suite.log)", pytrace=False)
    if not results and not excluded:
        pytest.fail(f"{name}: the suite ran none of its tests (see {conformance.out_dir}/suite.log)", pytrace=False)
    if not results:
        pytest.skip(f"excluded: every test of {name} is in excluded.txt")
    failed = [t for t in results if t.outcome in ("failed", "error")]
    if failed:
        text = "\n\n".join(f"===== {t.outcome.upper()} {t.nodeid} ({t.seconds:.0f}s)\n{t.output}" for t in failed)
        pytest.fail(f"{len(failed)} of {len(results)} failed:\n{text}", pytrace=False)
    if results and all(t.outcome == "skipped" for t in results):
        reasons = sorted({t.reason for t in results})
        pytest.skip(f"skipped by the suite: {'; '.join(reasons)}"[:400])
