"""hack/nodes-in-time.sh, `make test`'s last step: the nodes tier runs unless a run's deadline (CI's 90
minutes) would not hold it, and then the stage table says it was skipped and why.

The real script and hack/stage.sh run here; `make` on PATH is a stand-in that records its arguments and
exits as told (the nodes tier itself boots VMs: `make nodes`)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack" / "nodes-in-time.sh"


def _run(tmp_path: Path, deadline: int | None, make_rc: int = 0, need: int = 1500,
         make_takes: int = 0, stages_before: str = "") -> tuple[int, str, str, str]:  # fmt: skip
    """The script's exit code, its output, the stage log and what the stand-in make was asked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    calls = tmp_path / "make-calls"
    make = bin_dir / "make"
    make.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nsleep {make_takes}\necho ended >> {calls}\nexit {make_rc}\n')
    make.chmod(0o755)
    stage_log = tmp_path / "stages"
    stage_log.write_text(stages_before)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "WARDEN_STAGE_LOG": str(stage_log),
           "WARDEN_NODES_TIER_S": str(need)}  # fmt: skip
    env.pop("WARDEN_TEST_DEADLINE", None)
    if deadline is not None:
        env["WARDEN_TEST_DEADLINE"] = str(deadline)
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=60)
    asked = calls.read_text() if calls.exists() else ""
    return done.returncode, done.stdout + done.stderr, stage_log.read_text(), asked


def test_without_a_deadline_the_nodes_tier_runs_as_a_stage(tmp_path: Path) -> None:
    rc, _, stages, asked = _run(tmp_path, deadline=None)
    assert rc == 0
    assert asked.split() == ["--no-print-directory", "nodes", "ended"]
    assert stages.split()[:2] == ["nodes-tier", "OK"], stages


def test_with_time_enough_before_the_deadline_it_runs_and_its_failure_is_the_runs(tmp_path: Path) -> None:
    rc, _, stages, asked = _run(tmp_path, deadline=int(time.time()) + 4000, make_rc=2)
    assert rc == 2
    assert "nodes" in asked.split()
    assert stages.startswith("nodes-tier") and "FAILED (rc 2)" in stages, stages


@pytest.mark.parametrize("left", [1499, 0, -300])
def test_too_close_to_the_deadline_it_is_not_started_and_the_table_says_so(tmp_path: Path, left: int) -> None:
    rc, out, stages, asked = _run(tmp_path, deadline=int(time.time()) + left)
    assert rc == 0  # a skipped tier fails nothing; the tiers before it decided the run
    assert asked == ""
    assert stages.split()[:2] == ["nodes-tier", "SKIPPED"], stages
    assert "needs 1500s" in stages and "make nodes" in out, (stages, out)


def test_a_tier_still_running_at_the_deadline_is_stopped_there_and_fails_the_run(tmp_path: Path) -> None:
    rc, _, stages, asked = _run(tmp_path, deadline=int(time.time()) + 3, need=1, make_takes=40)
    assert "nodes" in asked.split() and "ended" not in asked, asked  # stopped, not run to its end
    assert rc == 124 and "FAILED (rc 124)" in stages, (rc, stages)


def _stage_line(name: str, verdict: str, seconds: int) -> str:
    return f"{name:<28} {verdict:<16} {seconds:5d}s\n"  # hack/stage.sh's format


@pytest.mark.parametrize("verdict", ["OK", "FAILED (rc 1)"])
def test_after_slow_lanes_it_needs_half_their_time_and_says_so_when_skipped(tmp_path: Path, verdict: str) -> None:
    before = _stage_line("tier-builds", "OK", 1200) + _stage_line("lanes", verdict, 3486)
    rc, _, stages, asked = _run(tmp_path, deadline=int(time.time()) + 1704, stages_before=before)
    assert rc == 0 and asked == ""
    skipped = stages.splitlines()[-1]
    assert skipped.split()[:2] == ["nodes-tier", "SKIPPED"], stages
    assert "needs 1743s, half of the lanes' 3486s" in skipped, skipped


def test_after_lanes_of_a_usual_day_the_floor_holds_and_it_runs(tmp_path: Path) -> None:
    before = _stage_line("lanes", "OK", 2200)
    rc, _, stages, asked = _run(tmp_path, deadline=int(time.time()) + 1600, stages_before=before)
    assert rc == 0 and "nodes" in asked.split()
    assert stages.splitlines()[-1].split()[:2] == ["nodes-tier", "OK"], stages
