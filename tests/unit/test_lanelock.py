"""warden_dev.lanelock: the e2e lanes' turns on the node they share, with real processes and flock(2).

Each holder is a process of its own (flock locks belong to open files, as the lanes' pytest processes hold
them). A waiter is known to be waiting when /proc/locks lists its pid as blocked (``->``). The holders
report to a file they append to with one write(2) each, before they let go: a multiprocessing queue sends
from a thread of its own, so a holder's report could arrive after the next holder's."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import pytest

from warden_dev import lanelock

CTX = multiprocessing.get_context("fork")


class Log:
    """What the holders did, in the order they did it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.touch()
        self.read = 0

    def put(self, event: str, name: str) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, f"{event} {name}\n".encode())
        finally:
            os.close(fd)

    def lines(self) -> list[str]:
        return self.path.read_text().splitlines()


def _hold(lock_dir: Path, name: str, whole_node: bool, go: Event, log: Log) -> None:
    with lanelock.node_turn(lock_dir, whole_node):
        log.put("acquired", name)
        go.wait(30)
        log.put("releasing", name)


class Holder:
    def __init__(self, lock_dir: Path, name: str, whole_node: bool, log: Log) -> None:
        self.go = CTX.Event()
        self.proc = CTX.Process(target=_hold, args=(lock_dir, name, whole_node, self.go, log), daemon=True)
        self.proc.start()

    def blocked(self) -> bool:
        """/proc/locks lists this process as waiting for a lock."""
        pid = str(self.proc.pid)
        return any("->" in line and pid in line.split() for line in Path("/proc/locks").read_text().splitlines())


def _until(what: str, check: Any, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


@pytest.fixture
def log(tmp_path: Path) -> Log:
    return Log(tmp_path / "log")


def _next(log: Log) -> tuple[str, str]:
    """The next thing a holder did, waiting up to 10 s for it."""
    _until(f"a report after {log.read} of them", lambda: len(log.lines()) > log.read)
    event, name = log.lines()[log.read].split()
    log.read += 1
    return event, name


def test_tests_that_share_the_node_hold_it_together(tmp_path: Path, log: Log) -> None:
    first = Holder(tmp_path, "first", False, log)
    assert _next(log) == ("acquired", "first")
    second = Holder(tmp_path, "second", False, log)
    assert _next(log) == ("acquired", "second"), "a shared test waited for another shared one"
    for holder in (first, second):
        holder.go.set()
        holder.proc.join(10)


def test_a_whole_node_test_waits_for_the_running_test_and_the_next_test_waits_behind_it(
    tmp_path: Path, log: Log
) -> None:
    running = Holder(tmp_path, "running", False, log)
    assert _next(log) == ("acquired", "running")
    alone = Holder(tmp_path, "alone", True, log)
    _until("the whole-node test waits", alone.blocked)
    later = Holder(tmp_path, "later", False, log)
    _until("the next shared test waits", later.blocked)

    running.go.set()
    assert _next(log) == ("releasing", "running")
    assert _next(log) == ("acquired", "alone"), "the shared test that came later went first"
    _until("the next shared test still waits behind the whole-node one", later.blocked)
    alone.go.set()
    assert [_next(log), _next(log)] == [("releasing", "alone"), ("acquired", "later")]
    later.go.set()
    for holder in (running, alone, later):
        holder.proc.join(10)


def test_a_killed_lane_leaves_no_one_waiting(tmp_path: Path, log: Log) -> None:
    killed = Holder(tmp_path, "killed", True, log)
    assert _next(log) == ("acquired", "killed")
    waiting = Holder(tmp_path, "waiting", False, log)
    _until("the other lane's test waits", waiting.blocked)
    assert killed.proc.pid is not None
    os.kill(killed.proc.pid, signal.SIGKILL)
    assert _next(log) == ("acquired", "waiting")
    waiting.go.set()
    waiting.proc.join(10)


def test_exclusive_is_one_process_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "push.lock"
    held = CTX.Event()
    # started before the lock is taken: a forked child would share the parent's open lock file
    child = CTX.Process(target=_exclusive_once, args=(path, held), daemon=True)
    child.start()
    with lanelock.exclusive(path):
        held.set()
        _until(
            "the second process waits",
            lambda: any(
                "->" in line and str(child.pid) in line.split() for line in Path("/proc/locks").read_text().splitlines()
            ),
        )
    child.join(10)
    assert child.exitcode == 0, "the second process never got the lock once the first let go"


def _exclusive_once(path: Path, held: Event) -> None:
    held.wait(10)
    with lanelock.exclusive(path):
        pass
