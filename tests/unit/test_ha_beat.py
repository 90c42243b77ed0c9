"""Who is in charge among backup controllers, as the controller pods decide it (warden.ha.beat) and serve it to
the operator (warden.ha.ctld's GET /in-charge): the heartbeat file Slurm writes, read as Slurm reads it."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from warden.ha import beat, ctld

CONF = (
    "ClusterName=c\n"
    "SlurmctldHost=c-controller-0(10.0.0.1)\n"
    "SlurmctldHost=c-controller-1\n"
    "SlurmctldHost=c-controller-2\n"
    "SlurmctldTimeout=30\n"
    "SlurmdTimeout=300\n"
)


def write_beat(state: Path, at: int, writer: int) -> None:
    (state / beat.HEARTBEAT).write_bytes(struct.pack(">QQ", at, writer))


def test_a_beat_reads_as_slurm_writes_it_and_a_torn_one_is_none(tmp_path: Path) -> None:
    assert beat.read(tmp_path) is None, "no file yet"
    write_beat(tmp_path, 1_700_000_000, 2)
    assert beat.read(tmp_path) == beat.Beat(1_700_000_000, 2)
    (tmp_path / beat.HEARTBEAT).write_bytes(b"\0" * 9)
    assert beat.read(tmp_path) is None, "a file being written is no beat"
    assert beat.parse(beat.dated_back(1)) == beat.Beat(1, 1)


def test_the_writer_of_a_fresh_beat_is_in_charge_and_nobody_once_it_is_older_than_the_timeout() -> None:
    b = beat.Beat(1000, 1)
    assert beat.in_charge(b, 1030, 30) == 1
    assert beat.in_charge(b, 1031, 30) is None, "the one in charge hangs or died; no backup took over yet"
    assert beat.in_charge(None, 1000, 30) is None


def test_slurm_conf_gives_the_timeout_and_the_controllers_in_order() -> None:
    assert beat.ctld_timeout(CONF) == 30
    assert beat.ctld_timeout("ClusterName=c\n") == beat.DEFAULT_TIMEOUT_S
    assert beat.controllers(CONF) == ["c-controller-0", "c-controller-1", "c-controller-2"]
    assert beat.index_of("c-controller-2") == 2 and beat.index_of("c-controller-1.c-controller.ns.svc") == 1
    assert beat.index_of("login") is None


def test_the_fence_trips_only_after_this_slurmctld_was_in_charge_and_another_writes() -> None:
    fence = beat.Fence(me=1, started=1000)
    assert not fence.lost_control(beat.Beat(900, 0)), "controller 0 in charge before: this one stands by"
    assert not fence.lost_control(beat.Beat(950, 1)), "a beat an earlier run of this pod left is not this one's"
    assert not fence.lost_control(beat.Beat(1500, 0)), "never in charge: nothing to fence"
    assert not fence.lost_control(beat.Beat(1001, 1)), "now in charge"
    assert not fence.lost_control(None)
    assert fence.lost_control(beat.Beat(1100, 2)), "another took control while it runs"


def test_the_handover_goes_to_the_first_backup_after_this_one_that_is_up() -> None:
    ping = (
        "Slurmctld(primary) at c-controller-0 is UP\n"
        "Slurmctld(backup1) at c-controller-1 is DOWN\n"
        "Slurmctld(backup2) at c-controller-2 is UP\n"
    )
    assert beat.takeover_target(ping, 0) == 2
    assert beat.takeover_target(ping, 2) is None, "none after the last"
    assert beat.takeover_target("", 0) is None


def test_the_probes_slurm_conf_names_this_controller_alone_by_loopback() -> None:
    out = beat.self_conf(CONF, "c-controller-1")
    assert [x for x in out.splitlines() if x.startswith("SlurmctldHost")] == ["SlurmctldHost=c-controller-1(localhost)"]
    assert "SlurmctldTimeout=30" in out
    with pytest.raises(ValueError, match=r"c-controller-7 is not in slurm\.conf's SlurmctldHost list"):
        beat.self_conf(CONF, "c-controller-7")


@pytest.fixture
def pod(tmp_path: Path) -> ctld.Pod:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "slurm.conf").write_text(CONF)
    return ctld.Pod(
        host="c-controller-0",
        slurm_conf=etc / "slurm.conf",
        self_conf=tmp_path / "self" / "slurm.conf",
        waiting=tmp_path / "waiting",
    )


@pytest.fixture
def served(pod: ctld.Pod, tmp_path: Path) -> Iterator[str]:
    """The verdict's server of a controller pod on a free port: its base URL."""
    state = tmp_path / "state"
    state.mkdir()
    srv = ctld.server(pod, state, 0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def get(url: str) -> dict[str, object]:
    with urllib.request.urlopen(url, timeout=5) as answer:
        assert answer.headers["Content-Type"] == "application/json"
        doc: dict[str, object] = json.load(answer)
        return doc


def test_the_pod_serves_who_is_in_charge_by_name_as_the_heartbeat_says(served: str, tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert get(served + "/in-charge") == {
        "inCharge": None,
        "writer": None,
        "beatAgeSeconds": None,
        "slurmctldTimeout": 30,
    }, "no heartbeat yet: nobody"
    now = int(time.time())
    write_beat(state, now, 2)
    doc = get(served + "/in-charge")
    assert doc["inCharge"] == "c-controller-2" and doc["writer"] == "c-controller-2"
    assert isinstance(doc["beatAgeSeconds"], int) and doc["beatAgeSeconds"] <= 5
    write_beat(state, now - 100, 2)
    doc = get(served + "/in-charge")
    assert (doc["inCharge"], doc["writer"]) == (None, "c-controller-2"), "stale: its writer, nobody in charge"
    with pytest.raises(urllib.error.HTTPError, match="404"):
        get(served + "/metrics")


def test_a_backup_dates_its_beat_back_when_it_stops_in_charge_and_the_primary_leaves_its_own(
    pod: ctld.Pod, tmp_path: Path
) -> None:
    write_beat(tmp_path, 5000, 1)
    backup = ctld.Pod(host="c-controller-1", slurm_conf=pod.slurm_conf, self_conf=pod.self_conf, waiting=pod.waiting)
    ctld.stopped(backup, tmp_path)
    assert beat.read(tmp_path) == beat.Beat(1, 1)
    write_beat(tmp_path, 5000, 0)
    ctld.stopped(pod, tmp_path)
    assert beat.read(tmp_path) == beat.Beat(5000, 0), "the primary's beat stays"


def test_a_primary_stands_by_while_the_beat_is_fresh_and_says_so_to_its_probe(pod: ctld.Pod, tmp_path: Path) -> None:
    write_beat(tmp_path, int(time.time()), 1)
    seen: list[str] = []

    def sleep(_: float) -> None:
        seen.append(pod.waiting.read_text())
        write_beat(tmp_path, 1, 1)  # the backup stopped in charge: its beat dated back

    assert ctld.wait_for_turn(pod, tmp_path, sleep=sleep) == 0
    assert seen == ["1\n"] and not pod.waiting.exists()


def test_a_caller_that_gave_up_leaves_no_traceback_and_a_real_error_still_does(
    pod: ctld.Pod, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The operator asks with a 2-s timeout: on a starved node it hangs up before the answer, and the
    server's write finds a closed socket. That is the caller's choice, not the server's error (each one
    printed a traceback into the controller pod's log on a slow VM node); any other error still prints."""
    state = tmp_path / "state"
    state.mkdir()
    srv = ctld.server(pod, state, 0)
    caller = socket.socket()
    try:
        for gone in (BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "Connection reset by peer")):
            try:
                raise gone
            except ConnectionError:
                srv.handle_error(caller, ("127.0.0.1", 1))
        assert capsys.readouterr().err == ""
        try:
            raise ValueError("a bug of the server's own")
        except ValueError:
            srv.handle_error(caller, ("127.0.0.1", 1))
        err = capsys.readouterr().err
        assert "Traceback" in err and "a bug of the server's own" in err
    finally:
        caller.close()
        srv.server_close()
