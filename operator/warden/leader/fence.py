"""Whether this process may write now: to the Kubernetes API (``Kube.call``) and to slurmrestd
(``SlurmRest``). Standard library only.

Without leader election (``hold_until`` never called: tests, an operator run by hand, the exporter and the
bridge, which share the Slurm client) every write may go. With it, a write is allowed only before the
deadline the elector set at its last successful renewal (the renewal's start plus the renew deadline,
on the monotonic clock, which runs on while the process is stopped). A write past it means this
process lost its lease without knowing (frozen by SIGSTOP, its node cut off): it must not act, because
a standby may be acting already. It exits (``lost``) and its container, restarted, waits as a standby.
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


def hold_until(deadline: float) -> None:
    """This process may write until ``deadline`` (monotonic seconds): the elector's last renewal."""
    global _until
    with _lock:
        _until = deadline


def forget() -> None:
    """No election any more: every write may go (tests)."""
    global _until
    with _lock:
        _until = None


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
    """Before a write (``what``): exits when this process's lease ran out."""
    if not valid():
        lost(f"the lease ran out before {what} (was the process stopped?)")
