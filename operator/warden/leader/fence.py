"""Whether this process may write now: to the Kubernetes API (``Kube.call``) and to slurmrestd
(``SlurmRest``). Standard library only.

Without leader election (``hold_until`` never called: tests, an operator run by hand, the exporter and the
bridge, which share the Slurm client) every write may go. With it, a write is allowed only before the
deadline the elector set at its last successful renewal (the renewal's start plus the renew deadline,
on the monotonic clock, which runs on while the process is stopped). A write past it means this
process lost its lease without knowing (frozen by SIGSTOP, its node cut off): it must not act, because
a standby may be acting already. It exits (``lost``) and its container, restarted, waits as a standby.

A clean stop (SIGTERM) ``resign``s first: from then on no thread writes, and none exits either — a thread
about to write waits (``parked``) while the stopping thread hands the lease back and ends the process. Were
that thread's write to end the process, the lease would stay held until it ran out.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import NoReturn

log = logging.getLogger(__name__)

#: the exit status of a process that stopped because it lost its lease
EXIT_LOST = 3

_lock = threading.Lock()
#: monotonic time until which this process may write; None: no election, always
_until: float | None = None
_clock: Callable[[], float] = time.monotonic
#: set once this process resigned: every write waits for the process's end
_resigned = threading.Event()
#: set only by ``forget`` (tests): parked writers wake up and raise ``Resigned``
_unpark = threading.Event()
_parked = 0


class Resigned(RuntimeError):
    """A write refused after ``resign`` (only ever raised in tests: in the operator the process ends first)."""


def hold_until(deadline: float) -> None:
    """This process may write until ``deadline`` (monotonic seconds): the elector's last renewal."""
    global _until
    with _lock:
        if not _resigned.is_set():  # a renewal finishing after ``resign`` gives nothing back
            _until = deadline


def resign() -> None:
    """This process acts no more, for good: a write of any thread from now on waits for the process's end."""
    global _until
    with _lock:
        _resigned.set()
        _until = float("-inf")


def resigned() -> bool:
    return _resigned.is_set()


def parked() -> int:
    """How many writes wait since ``resign``."""
    with _lock:
        return _parked


def forget() -> None:
    """No election any more: every write may go (tests); writers parked by ``resign`` raise ``Resigned``."""
    global _until, _parked
    with _lock:
        _until = None
        _resigned.clear()
        _unpark.set()
        _parked = 0
    _unpark.clear()


def valid(now: float | None = None) -> bool:
    with _lock:
        until = _until
    return until is None or (now if now is not None else _clock()) < until


def lost(why: str) -> NoReturn:
    """Stop at once: no handler, thread or cleanup may write another byte (``os._exit``)."""
    log.critical("leader election: %s; exiting so that nothing is done twice (a restart waits as a standby)", why)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(EXIT_LOST)


def check(what: str) -> None:
    """Before a write (``what``): exits when this process's lease ran out; waits when it resigned."""
    global _parked
    if _resigned.is_set():
        with _lock:
            _parked += 1
        log.info("leader election: %s waits: this process hands its lease back and ends", what)
        _unpark.wait()
        raise Resigned(f"{what}: this process resigned")
    if not valid():
        lost(f"the lease ran out before {what} (was the process stopped?)")
