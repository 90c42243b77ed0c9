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
from tests.support.directory import Directory
from tests.support.dockerfixture import running_for_tests
from tests.support.jailuser import JailUser
from warden_dev.dockercluster import DockerCluster, missing_images, sweep_stale


@pytest.fixture(scope="session")
def planned() -> DockerCluster:
    """The session's cluster before it starts."""
    return DockerCluster(SPEC)


@pytest.fixture(scope="session")
def directory(planned: DockerCluster) -> Directory:
    """The LDAP directory the session's cluster reads its directory users from (spec.identity.ldap):
    started beside the cluster, before its pods."""
    return Directory(planned.prefix, planned.dir)


@pytest.fixture(scope="session")
def cluster(planned: DockerCluster, directory: Directory) -> Iterator[DockerCluster]:
    """The session's cluster, up (workers idle, SSH answering, slurmdbd knows the cluster), with its
    directory. Torn down at session end whatever happened, also on SIGTERM; a killed run's leftovers are
    swept by the next."""
    swept = sweep_stale()
    if swept:
        print(f"\nremoved leftovers of dead dataplane runs: {', '.join(swept)}", file=sys.stderr)
    if missing_images([directory.image]):
        pytest.fail(f"image missing: {directory.image} (make images-test)", pytrace=False)
    planned.before_pods = directory.start_beside
    with running_for_tests(planned, "cluster", failures.any_failed) as c:
        yield c


@pytest.fixture(scope="session")
def alice(cluster: DockerCluster) -> JailUser:
    """`alice`, created by root in an SSH session on the login node (chrooted into the jail)."""
    return JailUser.added_by_root(cluster, "alice")
