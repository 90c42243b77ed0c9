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
from typing import Any

import pytest

from warden_dev.controlplane import ControlPlane, ControlPlaneError, ensure_binaries, sigterm_as_interrupt

#: fake nodes every session starts with (tests may add their own with controlplane.add_fake_nodes)
DEFAULT_NODES = 2


@pytest.fixture(scope="session")
def controlplane() -> Iterator[ControlPlane]:
    """The session's control plane, with DEFAULT_NODES Ready kwok nodes. Torn down at session end,
    whatever the tests did, also on SIGTERM (and killed by the kernel if pytest itself dies)."""
    try:
        bins = ensure_binaries(build=os.environ.get("WARDEN_BUILD_K8S_BINS") == "1")
    except ControlPlaneError as e:
        pytest.fail(str(e), pytrace=False)
    cp = ControlPlane(bins, audit=True)  # the operator's requests are counted (warden_dev.audit)
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


# --- Warden: the CRD, namespaces with storage, the operator ---------------------------------------

#: PersistentVolumes made for each cluster namespace: the throwaway control plane has no storage
#: provisioner, so the jail PVC and the controller's state PVC bind to these (kube-controller-manager's
#: PV binder does the binding, as on a real cluster with static volumes).
PVS_PER_NAMESPACE = 4


@pytest.fixture(scope="session")
def crd_installed(api_client: Any) -> None:
    """The generated CRDs, applied the way the chart would, and Established."""
    from kubernetes import client

    from tests.support.operator import crd_bodies
    from warden_dev.controlplane import wait_for

    ext = client.ApiextensionsV1Api(api_client)
    for body in crd_bodies():
        ext.create_custom_resource_definition(body)

        def established(name: str = body["metadata"]["name"]) -> bool:
            crd = ext.read_custom_resource_definition(name)
            return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

        wait_for(f"the CRD {body['metadata']['name']} Established", established, 30)


@pytest.fixture(scope="session")
def admission_namespace(controlplane: ControlPlane, crd_installed: None) -> str:
    """One namespace for admission tests (nothing runs there)."""
    return controlplane.create_namespace(f"admission-{uuid.uuid4().hex[:6]}")


@pytest.fixture
def cluster_namespace(controlplane: ControlPlane, crd_installed: None, api_client: Any) -> Iterator[str]:
    """A fresh namespace for one SlurmCluster, with volumes its PVCs can bind to."""
    from kubernetes import client

    name = controlplane.create_namespace(f"c-{uuid.uuid4().hex[:8]}")
    core = client.CoreV1Api(api_client)
    pvs = []
    for i in range(PVS_PER_NAMESPACE):
        pv = f"{name}-pv{i}"
        body: Any = {  # the API client takes plain dicts as well as its models
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv},
            "spec": {
                "capacity": {"storage": "1Ti"},
                "accessModes": ["ReadWriteOnce", "ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": f"/tmp/warden-test-pv/{pv}"},
            },
        }
        core.create_persistent_volume(body)
        pvs.append(pv)
    yield name
    core.delete_namespace(name)
    for pv in pvs:
        core.delete_persistent_volume(pv)


@pytest.fixture
def operator_factory(
    controlplane: ControlPlane, cluster_namespace: str, request: pytest.FixtureRequest
) -> Iterator[Any]:
    """Make the operator process for the test's namespace (started unless start=False); stopped at the end,
    with its log printed when the test failed."""
    from tests.support.operator import OperatorProcess

    made: list[OperatorProcess] = []

    def make(start: bool = True) -> OperatorProcess:
        op = OperatorProcess(controlplane.kubeconfig, cluster_namespace, controlplane.log_dir)
        if start:
            op.start()
        made.append(op)
        return op

    yield make
    for op in made:
        op.stop()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(f"\n--- operator log ({op.log_path}) ---\n{op.log_tail(120)}", file=sys.stderr)


@pytest.fixture
def operator(operator_factory: Any) -> Any:
    """The operator, running, watching the test's namespace."""
    return operator_factory()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call":
        item.rep_call = report  # type: ignore[attr-defined]
