"""Locks that let pytest processes share one Kubernetes cluster: the e2e tier's lanes (hack/e2e-lanes.sh).

Each lane is a pytest process of its own, and every installation it makes has its own namespaces and
operator, so the lanes only meet on what is cluster-wide:

* ``node_turn``: the one node every installation runs on. A test that changes it for everyone (a cordon,
  `kubectl drain`, a NoSchedule taint: marked ``whole_node``) takes it alone, after the other lanes' running
  tests end; every other test shares it. Fair: once a whole-node test waits, no new test starts before it.
* ``exclusive``: one process at a time, for a step two lanes must not interleave (pushing the images, the
  claim of the CRDs: warden_dev.localcluster).

Both are ``flock(2)`` locks on files: the kernel drops them when their process dies, so a killed lane never
leaves the others waiting."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

# the lock directory the lanes share, set by hack/e2e-lanes.sh; unset, a pytest run has the cluster alone
LANES_ENV = "WARDEN_E2E_LANE_LOCKS"


@contextlib.contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold ``path`` (created when missing) alone for the block."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the last descriptor drops the lock


@contextlib.contextmanager
def node_turn(lock_dir: Path, whole_node: bool) -> Iterator[float]:
    """The node for one test: alone when ``whole_node``, else shared with the other lanes' tests.
    Yields the seconds spent waiting for it.

    Two files: ``node`` (shared or exclusive) and ``gate``, which every test passes through one at a
    time. A whole-node test keeps the gate while it waits for the shared holders to finish, so a lane's
    next test waits behind it instead of slipping in and starving it."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    gate = os.open(lock_dir / "gate", os.O_RDWR | os.O_CREAT, 0o644)
    node = os.open(lock_dir / "node", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(node, fcntl.LOCK_EX if whole_node else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield time.monotonic() - t0
    finally:
        os.close(node)
        os.close(gate)
