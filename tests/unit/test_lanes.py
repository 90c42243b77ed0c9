"""hack/lanes.sh, how `make test` runs its tiers side by side: each lane's tiers one after the other, the lanes
at once, and a lane marked `after:STAGE` only once that stage of an earlier lane has ended (or every earlier
lane has), so that it fills the cores an early-ending sub-lane leaves idle.

The real script and hack/stage.sh run here; `make` on PATH is a stand-in that logs when each target starts
and ends, sleeping as told (the tiers themselves are the other tiers' business)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _lanes(tmp_path: Path, *lanes: str, sleeps: dict[str, float], fail: str = "") -> tuple[int, list[str], str]:
    """lanes.sh's exit code, the stand-in make's log (`start T` / `end T` in order) and the stage log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    events = tmp_path / "events"
    cases = "".join(f"    {t}) sleep {s} ;;\n" for t, s in sleeps.items())
    make = bin_dir / "make"
    make.write_text(
        "#!/bin/bash\n"
        "t=${@: -1}\n"
        f'echo "start $t" >> {events}\n'
        f'case "$t" in\n{cases}esac\n'
        f'echo "end $t" >> {events}\n'
        f'[ "$t" != "{fail}" ]\n'
    )
    make.chmod(0o755)
    stage_log = tmp_path / "stages"
    stage_log.write_text("")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "WARDEN_STAGE_LOG": str(stage_log)}
    done = subprocess.run(["bash", str(REPO / "hack" / "lanes.sh"), *lanes], env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    return done.returncode, events.read_text().splitlines(), stage_log.read_text()


def test_a_lane_after_a_stage_starts_when_that_stage_ends_while_the_other_lane_still_runs(tmp_path: Path) -> None:
    rc, events, stages = _lanes(tmp_path, "early", "long", "after:early-tier late more",
                                sleeps={"early": 0.5, "long": 6, "late": 0.5, "more": 0.2})  # fmt: skip
    assert rc == 0
    assert events.index("start late") > events.index("end early")
    assert events.index("start late") < events.index("end long"), events
    assert events.index("start more") > events.index("end late")
    assert [line.split()[0] for line in stages.splitlines()] == [
        "early-tier", "late-tier", "more-tier", "long-tier"], stages  # fmt: skip


def test_a_lane_after_a_stage_that_never_ends_starts_once_the_lanes_before_it_have_ended(tmp_path: Path) -> None:
    rc, events, _ = _lanes(tmp_path, "first", "after:no-such-stage late", sleeps={"first": 1, "late": 0.1})
    assert rc == 0
    assert events == ["start first", "end first", "start late", "end late"]


def test_a_failed_tier_fails_the_run_and_stops_its_lane_only(tmp_path: Path) -> None:
    rc, events, stages = _lanes(tmp_path, "bad next", "good", "after:bad-tier late",
                                sleeps={"bad": 0.2, "good": 2, "late": 0.2}, fail="bad")  # fmt: skip
    assert rc == 1
    assert "start next" not in events  # its lane stopped at the failure
    assert "end good" in events and "end late" in events  # the others went on, the after-lane too
    assert "bad-tier" in stages and "FAILED" in stages
