"""The docs say what the code does, where a number or a name in them can be checked mechanically."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TIERS = ("unit", "integration", "dataplane", "conformance", "e2e", "nodes")


def _collected() -> Counter[str]:
    """Tests per tier, as pytest collects them (one process per tier, as `make test` runs them: test
    modules of the same name live in several tiers)."""
    procs = {
        tier: subprocess.Popen(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", f"tests/{tier}"],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for tier in TIERS
    }
    counts: Counter[str] = Counter()
    for tier, proc in procs.items():
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"collecting tests/{tier}:\n{out[-3000:]}"
        counts[tier] = sum(1 for line in out.splitlines() if line.startswith(f"tests/{tier}/") and "::" in line)
    return counts


def test_readme_test_counts_are_what_pytest_collects() -> None:
    readme = (REPO / "README.md").read_text()
    counts = _collected()
    stated = re.search(
        r"unit (\d+), integration (\d+),\s+dataplane (\d+), conformance (\d+) \([^)]*\), e2e (\d+),"
        r"\s+nodes (\d+) tests",
        readme,
    )
    assert stated, "README: the line with the test counts per tier is gone"
    assert dict(zip(TIERS, map(int, stated.groups()), strict=True)) == {t: counts[t] for t in TIERS}
    # the sample of `make test` output: the unit tier's "N passed", and e2e's, summed over its lanes
    unit = re.search(r"==> unit\n(?:\[unit\] )?(\d+) passed", readme)
    e2e = re.findall(r"\n\[e2e\] \[(?:cluster|others|alone)\] (\d+) passed in [\d.]+s \([\d:]+\)\n", readme)
    assert unit and len(e2e) == 3, "README: the sample of make test's output changed shape"
    assert (int(unit.group(1)), sum(map(int, e2e))) == (counts["unit"], counts["e2e"])


def test_no_other_doc_states_a_test_count() -> None:
    """Counts live in the README only (checked above); elsewhere they go stale."""
    for doc in (REPO / "docs").glob("*.md"):
        found = re.findall(r"\(\d+ tests\)|\b\d+ (?:unit|integration|dataplane|e2e|nodes) tests\b", doc.read_text())
        assert not found, f"{doc.relative_to(REPO)}: {found}"
