"""Fixtures for the dataplane tier: the project's own images in plain Docker, wired by the operator's
own renderers (dev/warden_dev/dockercluster.py), one cluster per test session.

Needs Docker and the images (`make dataplane` builds both). WARDEN_DATAPLANE_KEEP=1 leaves the
containers, network, volumes and rendered files after the run, for poking at.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from tests.dataplane.spec import SPEC
from tests.support import failures
from tests.support.dockerfixture import running_for_tests
from tests.support.jailuser import JailUser
from warden_dev.dockercluster import DockerCluster, sweep_stale


@pytest.fixture(scope="session")
def cluster() -> Iterator[DockerCluster]:
    """The session's cluster, up (workers idle, SSH answering, slurmdbd knows the cluster). Torn down
    at session end whatever happened, also on SIGTERM; a killed run's leftovers are swept by the next."""
    swept = sweep_stale()
    if swept:
        print(f"\nremoved leftovers of dead dataplane runs: {', '.join(swept)}", file=sys.stderr)
    with running_for_tests(DockerCluster(SPEC), "cluster", failures.any_failed) as c:
        yield c


@pytest.fixture(scope="session")
def alice(cluster: DockerCluster) -> JailUser:
    """`alice`, created by root in an SSH session on the login node (chrooted into the jail)."""
    return JailUser.added_by_root(cluster, "alice")
