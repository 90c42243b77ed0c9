"""slurmctld's probe script (images/controller/warden-slurmctld-health) in both its forms: the reads (startup
and readiness) note the time of each answer; ``--answered-within`` (liveness) starts nothing while an answer
is recent, and asks the reads again, with a longer bound, once none is. `scontrol` is a stand-in on PATH here
(no Slurm in this tier: the dataplane tier runs the script against a real, frozen slurmctld,
tests/dataplane/test_controller_health.py)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "images" / "controller" / "warden-slurmctld-health"


def health(tmp_path: Path, *args: str, scontrol: str = "answers") -> subprocess.CompletedProcess[str]:
    """The script with a stand-in scontrol: ``answers`` (Slurm's "no such" for both reads) or ``hangs``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    body = {
        "answers": 'case "$*" in *"show job"*) echo "slurm_load_jobs error: Invalid job id specified";; '
        '*) echo "Node warden-health-no-such-node not found";; esac; exit 1',
        "hangs": "exec sleep 30",
    }[scontrol]
    stand_in = bin_dir / "scontrol"
    stand_in.write_text(f"#!/bin/sh\n{body}\n")
    stand_in.chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "WARDEN_CTLD_ANSWERED": str(tmp_path / "run" / "answered")}
    return subprocess.run(["sh", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=30)


def test_liveness_passes_while_a_check_had_its_answer_within_the_window(tmp_path: Path) -> None:
    assert health(tmp_path, "8").returncode == 0  # readiness: both reads answered, the time noted
    answered = tmp_path / "run" / "answered"
    assert health(tmp_path, "--answered-within", "60", scontrol="hangs").returncode == 0, "recent: nothing asked"
    old = time.time() - 75
    os.utime(answered, (old, old))  # 75 s without an answer since
    late = health(tmp_path, "--answered-within", "60", "1", scontrol="hangs")
    assert late.returncode == 1, late
    assert late.stdout.splitlines()[0] == "slurmctld did not answer a job read within 1s", late
    assert late.stdout.splitlines()[1].startswith("slurmctld has answered no health check for 7"), late
    # a slow slurmctld that still answers the reads asked again: alive, and the time noted anew
    assert health(tmp_path, "--answered-within", "60").returncode == 0
    assert time.time() - answered.stat().st_mtime < 30


def test_a_read_that_does_not_answer_in_time_notes_nothing(tmp_path: Path) -> None:
    out = health(tmp_path, "1", scontrol="hangs")
    assert (out.returncode, out.stdout) == (1, "slurmctld did not answer a job read within 1s\n")
    assert not (tmp_path / "run" / "answered").exists()
    never = health(tmp_path, "--answered-within", "60", "1", scontrol="hangs")
    assert never.stdout.splitlines()[-1] == "slurmctld has answered no health check yet", never


def test_a_window_that_is_not_a_number_is_refused(tmp_path: Path) -> None:
    usage = "usage: warden-slurmctld-health --answered-within SECONDS [READ_SECONDS]\n"
    for args in (["a minute"], ["60", "ten"], [""]):
        out = health(tmp_path, "--answered-within", *args)
        assert (out.returncode, out.stderr) == (2, usage), args
