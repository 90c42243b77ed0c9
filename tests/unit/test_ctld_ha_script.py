"""The backup controllers' pod side as the controller's entrypoint calls it (images/controller/warden-ctld-ha.sh,
each function a call of ``python -m warden.ha.ctld``), function by function: who is in charge by the
heartbeat file Slurm writes, the fence that kills a slurmctld that lost control, the handover on SIGTERM,
and a primary standing by. Each runs in bash as the entrypoint sources it, with `hostname` a shell function
and `scontrol` a stand-in on PATH (no Slurm here: the dataplane tier runs the real one,
tests/dataplane/test_controller_failover.py). Their decisions alone: tests/unit/test_ha_beat.py."""

from __future__ import annotations

import shlex
import struct
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "images" / "controller" / "warden-ctld-ha.sh"
TIMEOUT_S = 10  # SlurmctldTimeout in the test's slurm.conf


def beat(state: Path, at: int, writer: int, name: str = "heartbeat") -> Path:
    """A heartbeat file as slurmctld writes it: two big-endian 64-bit words, the time and its index."""
    path = state / name
    path.write_bytes(struct.pack(">QQ", at, writer))
    return path


def run(tmp_path: Path, body: str, me: int, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``body`` in bash after sourcing the script as controller ``me`` (pod e2e-controller-<me>); what it
    says on stderr (the Python's log lines) comes after its stdout, in ``stdout``."""
    etc = tmp_path / "etc"
    etc.mkdir(exist_ok=True)
    (etc / "slurm.conf").write_text(
        f"ClusterName=e2e\nSlurmctldHost=e2e-controller-0\nSlurmctldHost=e2e-controller-1\n"
        f"SlurmctldTimeout={TIMEOUT_S}\n"
    )
    prelude = f"""
set -u
export SLURM_ETC={shlex.quote(str(etc))}
export WARDEN_CTLD_WAITING={shlex.quote(str(tmp_path / "waiting"))}
export WARDEN_SELF_CONF={shlex.quote(str(tmp_path / "self" / "slurm.conf"))}
export WARDEN_HA_PY={shlex.quote(sys.executable + " -I")}
hostname() {{ echo e2e-controller-{me}; }}
export PATH={shlex.quote(str(tmp_path / "bin"))}:"$PATH"
. {shlex.quote(str(SCRIPT))}
"""
    done = subprocess.run(["bash", "-c", prelude + body], capture_output=True, text=True, timeout=timeout)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout + done.stderr, done.stderr)


def fake_scontrol(tmp_path: Path, ping: str) -> Path:
    """An `scontrol` on PATH (the script runs it under `timeout`): `ping` prints ``ping``, every call is
    written down in the file returned."""
    calls = tmp_path / "scontrol.calls"
    calls.touch()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "scontrol"
    script.write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$*" >>{shlex.quote(str(calls))}\n'
        f'[ "$1" = ping ] && printf "%s" {shlex.quote(ping)}\nexit 0\n'
    )
    script.chmod(0o755)
    return calls


def test_the_heartbeat_names_who_is_in_charge_while_it_is_fresh(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    s = str(state)
    assert run(tmp_path, f"ha_in_charge {s}; echo end", me=0).stdout == "end\n", "no file: nobody"
    now = int(time.time())
    beat(state, now, 1)
    assert run(tmp_path, f"ha_index; ha_in_charge {s}", me=0).stdout.split("\n")[:2] == ["0", "1"]
    beat(state, now - TIMEOUT_S - 5, 1)  # the one in charge stopped beating (hung or gone)
    assert run(tmp_path, f"ha_in_charge {s}; echo end", me=2).stdout == "end\n", "a stale beat: nobody"


def test_a_backup_that_stopped_in_charge_dates_its_beat_back_and_a_primary_leaves_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    now = int(time.time())
    beat(state, now, 1)
    out = run(tmp_path, f"ha_stopped {state}", me=1)
    assert "heartbeat dated back for the primary standing by" in out.stdout, out
    assert struct.unpack(">QQ", (state / "heartbeat").read_bytes()) == (1, 1)
    beat(state, now, 0)
    run(tmp_path, f"ha_stopped {state}", me=0)
    assert struct.unpack(">QQ", (state / "heartbeat").read_bytes()) == (now, 0), "the primary's beat stays"


def _slurmctld(seconds: int) -> str:
    """A stand-in slurmctld for the fence (a process that ends by itself after ``seconds``)."""
    return f"sleep {seconds} & pid=$!; "


def test_the_fence_kills_a_slurmctld_whose_control_another_took(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    beat(state, int(time.time()) + 1, 1)  # this controller (1) in charge, beating after the fence started
    body = (
        _slurmctld(60)
        + f"ha_fence $pid {state} & fence=$!; "
        # the fence saw this one's beat; then controller 0 took control while this one still runs
        + f"sleep 3; cp {beat(state, int(time.time()) + 60, 0, 'taken')} {state}/heartbeat; "
        + "wait $pid; echo status=$?; wait $fence"
    )
    out = run(tmp_path, body, me=1)
    assert "fence: slurmctld 0 took control from this one; killing it" in out.stdout, out
    assert "status=137" in out.stdout, "killed with SIGKILL: it writes nothing"


def test_the_fence_leaves_alone_a_slurmctld_that_never_was_in_charge(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    beat(state, int(time.time()) + 60, 0)  # controller 0 in charge all along: this backup stands by
    out = run(tmp_path, _slurmctld(3) + f"ha_fence $pid {state} & wait $pid; echo status=$?", me=1)
    assert "status=0" in out.stdout and "fence:" not in out.stdout, out


def test_on_sigterm_control_goes_to_the_first_backup_after_this_one_that_answers(tmp_path: Path) -> None:
    calls = fake_scontrol(
        tmp_path,
        "Slurmctld(primary) at e2e-controller-0 is UP\n"
        "Slurmctld(backup1) at e2e-controller-1 is DOWN\n"
        "Slurmctld(backup2) at e2e-controller-2 is UP\n",
    )
    out = run(tmp_path, "ha_hand_over; echo rc=$?", me=0)
    assert "handing control to backup controller 2 (scontrol takeover 2)" in out.stdout, out
    assert "controller 2 took control" in out.stdout and "rc=0" in out.stdout
    assert calls.read_text().splitlines() == ["ping", "takeover 2"]


def test_with_no_backup_answering_it_stops_without_handing_over(tmp_path: Path) -> None:
    calls = fake_scontrol(tmp_path, "Slurmctld(backup1) at e2e-controller-1 is DOWN\n")
    out = run(tmp_path, "ha_hand_over; echo rc=$?", me=0)
    assert "no backup controller answers" in out.stdout and "rc=1" in out.stdout, out
    assert calls.read_text().splitlines() == ["ping"]


def test_a_primary_stands_by_while_a_backup_is_in_charge_and_takes_control_once_it_stops(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    beat(state, int(time.time()) + 30, 1)  # backup 1 in charge, fresh
    body = (
        f"ha_wait_for_turn {state} & waiter=$!; "
        f'until [ "$(cat {tmp_path}/waiting 2>/dev/null)" = 1 ]; do sleep 0.2; done; echo standing-by; '
        # the backup stops in charge: it dates its beat back (ha_stopped), the primary goes at once
        f"cp {beat(state, 1, 1, 'dated-back')} {state}/heartbeat; wait $waiter; echo rc=$?"
    )
    out = run(tmp_path, body, me=0)
    assert "controller 1 is in charge: standing by until it stops" in out.stdout, out
    assert out.stdout.index("standing-by") < out.stdout.index("no controller is in charge any more: taking control")
    assert "rc=0" in out.stdout and not (tmp_path / "waiting").exists()
