"""Warden's CRDs over releases, on a real API server and etcd. A CRD release that changes the storage
version: the operator moves every SlurmCluster onto the new version at its start, so that the old version
can then leave the CRD. The previous release's CRD under this operator: clusters stay Ready and no pod
template moves. (The newer CRD under the previous release's operator: tests/e2e/test_warden_upgrade.py.)

The new version here (``v1alpha2``, the SlurmCluster schema under a second name) stands for the one a
later release will add; nothing else of Warden knows it. The test puts the session's CRD back as it
found it, by the same path the other way round (the downgrade a platform team would take).
"""

from __future__ import annotations

import copy
import json
import subprocess
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.support.operator import (
    CLUSTER_PATH,
    OperatorProcess,
    apply_cluster,
    crd_body,
    get_cluster,
    load_example,
    wait_ready,
)
from warden.kube import storedversions
from warden.kube.client import Kube
from warden.model import API_GROUP, API_VERSION, PLURAL
from warden_dev.controlplane import REPO_ROOT, ControlPlane, pinned_versions, wait_for

NEW = "v1alpha2"
CRD = f"{PLURAL}.{API_GROUP}"
ETCD_PREFIX = f"/registry/{API_GROUP}/{PLURAL}/"


def _crd_with(*versions: tuple[str, bool]) -> dict[str, Any]:
    """The chart's SlurmCluster CRD serving ``versions`` ((name, storage) pairs), each with its schema."""
    body: dict[str, Any] = crd_body()
    (original,) = body["spec"]["versions"]
    body["spec"]["versions"] = [
        {**copy.deepcopy(original), "name": name, "storage": storage} for name, storage in versions
    ]
    return body


def _replace_crd(ext: client.ApiextensionsV1Api, body: dict[str, Any]) -> None:
    """The CRD replaced, and back once each version it serves answers a list (the API server takes a moment
    to serve a version again: a list right after the replace was answered 404 once)."""
    body["metadata"]["resourceVersion"] = ext.read_custom_resource_definition(CRD).metadata.resource_version
    ext.replace_custom_resource_definition(CRD, body)  # type: ignore[arg-type]  # it takes plain dicts too
    group, _, plural = CLUSTER_PATH
    served = [str(v["name"]) for v in body["spec"]["versions"] if v.get("served")]
    custom = client.CustomObjectsApi(ext.api_client)

    def answering() -> bool:
        for version in served:
            custom.list_cluster_custom_object(group, version, plural, limit=1)
        return True

    wait_for(f"{CRD} serving {', '.join(served)}", answering, 30)


def _stored_versions(ext: client.ApiextensionsV1Api) -> list[str]:
    return list(ext.read_custom_resource_definition(CRD).status.stored_versions or [])


def _encodings(controlplane: ControlPlane) -> dict[str, str]:
    """Every SlurmCluster in etcd (key → the apiVersion it is encoded as)."""
    return {key: json.loads(value)["apiVersion"] for key, value in controlplane.etcd_values(ETCD_PREFIX).items()}


def test_a_new_storage_version_moves_every_object_at_the_operators_start_and_the_old_version_may_leave(
    controlplane: ControlPlane, api_client: Any, cluster_namespace: str
) -> None:
    ext = client.ApiextensionsV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    group, _, plural = CLUSTER_PATH
    body = load_example("cpu-only", cluster_namespace)
    apply_cluster(api_client, body)
    custom.patch_namespaced_custom_object_status(
        group, API_VERSION, cluster_namespace, plural, "cpu", {"status": {"imagesVersion": "0.1.0"}}
    )
    before = get_cluster(api_client, cluster_namespace, "cpu")
    key = f"{ETCD_PREFIX}{cluster_namespace}/cpu"
    assert _encodings(controlplane)[key] == f"{API_GROUP}/{API_VERSION}"

    # the CRD release: v1alpha2 is written from now on, v1alpha1 still served
    _replace_crd(ext, _crd_with((API_VERSION, False), (NEW, True)))
    try:
        wait_for("storedVersions lists both", lambda: set(_stored_versions(ext)) == {API_VERSION, NEW}, 30)
        # v1alpha1 cannot leave yet: objects are stored in it
        with pytest.raises(ApiException) as refused:
            _replace_crd(ext, _crd_with((NEW, True)))
        assert refused.value.status == 422 and "storedVersions" in str(refused.value.body)

        # the operator (every namespace, as the chart installs it by default) starts
        op = OperatorProcess(controlplane.kubeconfig, "", controlplane.log_dir)
        op.start()
        try:
            wait_for(f"storedVersions [{NEW}]", lambda: _stored_versions(ext) == [NEW], 60, on_fail=op.log_tail)
            assert f"storedVersions is now [{NEW}]" in op.log_of_this_start()
        finally:
            op.stop()
        encodings = _encodings(controlplane)
        assert encodings and set(encodings.values()) == {f"{API_GROUP}/{NEW}"}, encodings

        # v1alpha1 leaves the CRD; the cluster reads the same through v1alpha2, status included
        _replace_crd(ext, _crd_with((NEW, True)))
        now: Any = custom.get_namespaced_custom_object(group, NEW, cluster_namespace, plural, "cpu")
        assert now["spec"] == before["spec"]
        assert now["status"]["imagesVersion"] == "0.1.0"
        assert now["metadata"]["uid"] == before["metadata"]["uid"]
    finally:
        # back as the session had it: v1alpha1 written again (both served), every object moved back,
        # then v1alpha2 leaves
        _replace_crd(ext, _crd_with((API_VERSION, True), (NEW, False)))
        wait_for("storedVersions lists both", lambda: set(_stored_versions(ext)) == {API_VERSION, NEW}, 30)
        moved = storedversions.migrate(Kube(api_client), CRD)
        assert moved is not None and moved.done and not moved.failed, moved
        assert _stored_versions(ext) == [API_VERSION]
        _replace_crd(ext, crd_body())
    assert _encodings(controlplane)[key] == f"{API_GROUP}/{API_VERSION}"
    # nothing to do the second time, and nothing written
    assert storedversions.migrate(Kube(api_client), CRD) is None


def _previous_release_crd() -> dict[str, Any]:
    """The SlurmCluster CRD of the previous release (hack/versions.env), from its commit."""
    commit = pinned_versions()["WARDEN_PREVIOUS_RELEASE_COMMIT"]
    path = "charts/slurm-operator-crds/templates/slurmclusters.yaml"
    shown = subprocess.run(["git", "-C", str(REPO_ROOT), "show", f"{commit}:{path}"], capture_output=True, text=True)
    assert shown.returncode == 0, f"the previous release's CRD ({commit}) is not in this clone: {shown.stderr}"
    body: dict[str, Any] = yaml.safe_load(shown.stdout)
    return body


def _templates(api_client: Any, ns: str) -> dict[str, tuple[int, list[str]]]:
    """Each StatefulSet and Deployment of the namespace: its generation and its containers' images."""
    apps = client.AppsV1Api(api_client)
    found: list[Any] = [*apps.list_namespaced_stateful_set(ns).items, *apps.list_namespaced_deployment(ns).items]
    return {
        f"{type(o).__name__}/{o.metadata.name}": (
            o.metadata.generation,
            [c.image for c in o.spec.template.spec.containers],
        )
        for o in found
    }


def test_the_previous_releases_crd_under_this_operator_keeps_a_cluster_ready_with_its_pods_in_place(
    api_client: Any, cluster_namespace: str, operator: OperatorProcess
) -> None:
    ext = client.ApiextensionsV1Api(api_client)
    ns = cluster_namespace
    _replace_crd(ext, _previous_release_crd())
    try:
        apply_cluster(api_client, load_example("cpu-only", ns))
        obj = wait_ready(api_client, ns, "cpu", operator)
        # what the older CRD does not know is pruned from what the operator writes: status.imagesVersion
        assert "imagesVersion" not in obj["status"], obj["status"]
        before = _templates(api_client, ns)
        assert before and all(images for _, images in before.values())

        # the operator restarts (an upgrade of its own chart): it reads the cluster again, moves nothing
        operator.stop()
        operator.start()
        operator.wait_resumed()
        assert _templates(api_client, ns) == before
        assert wait_ready(api_client, ns, "cpu", operator)["metadata"]["uid"] == obj["metadata"]["uid"]
    finally:
        _replace_crd(ext, crd_body())
