"""Fixtures for the integration tier: a real control plane (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler) with fake kwok nodes, one per test session.

Binaries come from ``make k8s-bins`` (hack/build-k8s-bins.sh, cached under ~/.cache/warden). When
they are missing the tests fail and say so; set WARDEN_BUILD_K8S_BINS=1 to build them from here.
WARDEN_CONTROLPLANE_KEEP=1 keeps the control plane's directory (certs, etcd data, logs) after the run.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.controlplane import ControlPlane, ControlPlaneError, ensure_binaries, sigterm_as_interrupt

#: fake nodes every session starts with (tests may add their own with controlplane.add_fake_nodes)
DEFAULT_NODES = 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def controlplane() -> Iterator[ControlPlane]:
    """The session's control plane, with DEFAULT_NODES Ready kwok nodes. Torn down at session end,
    whatever the tests did, also on SIGTERM (and killed by the kernel if pytest itself dies)."""
    try:
        bins = ensure_binaries(build=os.environ.get("WARDEN_BUILD_K8S_BINS") == "1")
    except ControlPlaneError as e:
        pytest.fail(str(e), pytrace=False)
    cp = ControlPlane(bins)
    try:
        cp.start()
        cp.add_fake_nodes(DEFAULT_NODES)
    except ControlPlaneError as e:
        cp.stop()
        pytest.fail(f"control plane did not start: {e}", pytrace=False)
    except BaseException:
        cp.stop()
        raise
    print(f"\ncontrol plane up in {cp.startup_seconds:.1f}s at {cp.server} ({cp.dir})", file=sys.stderr)
    try:
        with sigterm_as_interrupt():
            yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def api_client(controlplane: ControlPlane) -> Any:
    """A ``kubernetes.client.ApiClient`` authenticated as cluster admin."""
    return controlplane.api_client()


@pytest.fixture
def namespace(controlplane: ControlPlane) -> Iterator[str]:
    """A fresh namespace (with its default ServiceAccount) per test, deleted afterwards."""
    from kubernetes import client

    name = f"t-{uuid.uuid4().hex[:10]}"
    controlplane.create_namespace(name)
    yield name
    client.CoreV1Api(controlplane.api_client()).delete_namespace(name)
