"""Smoke tests that the integration control plane is real: the upstream controllers, scheduler,
garbage collector, admission/CEL validation and RBAC all act; only the nodes are fake (kwok)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from warden_dev.controlplane import ControlPlane, pinned_versions, wait_for

IMAGE = "example.invalid/warden/smoke:1"  # never pulled: kwok nodes run nothing
TIMEOUT = 60.0


def _pod_ready(pod: Any) -> bool:
    return pod.status.phase == "Running" and any(
        c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []
    )


def _core(api_client: Any) -> Any:
    """CoreV1Api, typed loosely: these tests write manifests as plain dicts."""
    return client.CoreV1Api(api_client)


def _kwok_nodes(core: Any) -> set[str]:
    return {n.metadata.name for n in core.list_node(label_selector="type=kwok").items}


def test_kubectl_talks_to_the_pinned_apiserver(controlplane: ControlPlane) -> None:
    out = controlplane.kubectl("version", "-o", "json").stdout
    versions = json.loads(out)
    pinned = pinned_versions()["KUBERNETES_VERSION"]
    assert versions["serverVersion"]["gitVersion"] == pinned
    assert versions["clientVersion"]["gitVersion"] == pinned


def test_statefulset_pods_become_running_and_ready_on_kwok_nodes(api_client: Any, namespace: str) -> None:
    apps: Any = client.AppsV1Api(api_client)
    core: Any = client.CoreV1Api(api_client)
    labels = {"app": "smoke-sts"}
    apps.create_namespaced_stateful_set(
        namespace,
        {
            "metadata": {"name": "smoke"},
            "spec": {
                "replicas": 2,
                "serviceName": "smoke",
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "main", "image": IMAGE}]},
                },
            },
        },
    )

    def two_ready() -> list[Any] | None:
        pods = core.list_namespaced_pod(namespace, label_selector="app=smoke-sts").items
        ready = [p for p in pods if _pod_ready(p)]
        return ready if len(ready) == 2 else None

    pods = wait_for("2 ready StatefulSet pods", two_ready, TIMEOUT)
    assert sorted(p.metadata.name for p in pods) == ["smoke-0", "smoke-1"]
    assert {p.spec.node_name for p in pods} <= _kwok_nodes(core)
    wait_for(
        "StatefulSet status readyReplicas=2",
        lambda: apps.read_namespaced_stateful_set("smoke", namespace).status.ready_replicas == 2,
        TIMEOUT,
    )


def test_job_runs_to_completion(api_client: Any, namespace: str) -> None:
    batch: Any = client.BatchV1Api(api_client)
    batch.create_namespaced_job(
        namespace,
        {
            "metadata": {"name": "smoke"},
            "spec": {
                "backoffLimit": 0,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": IMAGE}]}},
            },
        },
    )

    def complete() -> Any:
        job = batch.read_namespaced_job("smoke", namespace)
        conditions = {c.type: c.status for c in job.status.conditions or []}
        return job if conditions.get("Complete") == "True" else None

    job = wait_for("Job Complete", complete, TIMEOUT)
    assert job.status.succeeded == 1
    assert not job.status.failed


def test_garbage_collector_deletes_owned_objects(api_client: Any, namespace: str) -> None:
    core: Any = client.CoreV1Api(api_client)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "owned", "ownerReferences": [ref]}})
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "bystander"}})

    core.delete_namespaced_config_map("owner", namespace)

    def owned_gone() -> bool:
        try:
            core.read_namespaced_config_map("owned", namespace)
        except ApiException as e:
            return bool(e.status == 404)
        return False

    wait_for("garbage collection of the owned ConfigMap", owned_gone, TIMEOUT)
    # only what the owner owned went away
    assert core.read_namespaced_config_map("bystander", namespace).metadata.name == "bystander"


CEL_MESSAGE = "minReplicas must not exceed maxReplicas"


@pytest.fixture
def widget_crd(api_client: Any) -> Any:
    ext: Any = client.ApiextensionsV1Api(api_client)
    name = "widgets.smoke.warden.dev"
    ext.create_custom_resource_definition(
        {
            "metadata": {"name": name},
            "spec": {
                "group": "smoke.warden.dev",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "properties": {
                                    "spec": {
                                        "type": "object",
                                        "properties": {
                                            "minReplicas": {"type": "integer"},
                                            "maxReplicas": {"type": "integer"},
                                        },
                                        "x-kubernetes-validations": [
                                            {
                                                "rule": "self.minReplicas <= self.maxReplicas",
                                                "message": CEL_MESSAGE,
                                            }
                                        ],
                                    }
                                },
                            }
                        },
                    }
                ],
            },
        }
    )

    def established() -> bool:
        crd = ext.read_custom_resource_definition(name)
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    wait_for("CRD Established", established, TIMEOUT)
    yield name
    ext.delete_custom_resource_definition(name)


def test_crd_cel_rule_rejects_bad_object_with_its_message(api_client: Any, namespace: str, widget_crd: str) -> None:
    custom: Any = client.CustomObjectsApi(api_client)

    def create(name: str, lo: int, hi: int) -> Any:
        body = {
            "apiVersion": "smoke.warden.dev/v1",
            "kind": "Widget",
            "metadata": {"name": name},
            "spec": {"minReplicas": lo, "maxReplicas": hi},
        }
        return custom.create_namespaced_custom_object("smoke.warden.dev", "v1", namespace, "widgets", body)

    # A freshly Established CRD can take a moment to be served everywhere: retry the good create only.
    good = wait_for("the good Widget to be accepted", lambda: create("good", 1, 3), TIMEOUT)
    assert good["metadata"]["name"] == "good"

    with pytest.raises(ApiException) as err:
        create("bad", 5, 2)
    assert err.value.status == 422
    assert CEL_MESSAGE in str(err.value.body)


def test_rbac_is_enforced_for_service_account_tokens(controlplane: ControlPlane, namespace: str) -> None:
    core: Any = client.CoreV1Api(controlplane.api_client())
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "nobody"}})
    token = controlplane.service_account_token(namespace, "nobody")
    with controlplane.new_api_client(token) as as_sa:
        with pytest.raises(ApiException) as err:
            _core(as_sa).list_namespaced_pod(namespace)
        assert err.value.status == 403
        assert f"system:serviceaccount:{namespace}:nobody" in str(err.value.body)

        rbac: Any = client.RbacAuthorizationV1Api(controlplane.api_client())
        rbac.create_namespaced_role(
            namespace,
            {
                "metadata": {"name": "pod-reader"},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
            },
        )
        rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": "nobody-reads-pods"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "nobody", "namespace": namespace}],
            },
        )
        pods = wait_for(
            "the RoleBinding to take effect",
            lambda: _core(as_sa).list_namespaced_pod(namespace),
            TIMEOUT,
        )
        assert pods.items == []


def test_gpu_node_takes_gpu_pod(controlplane: ControlPlane, namespace: str) -> None:
    # No GPU exists here: the fake node advertising nvidia.com/gpu is the test double for one.
    core: Any = client.CoreV1Api(controlplane.api_client())
    (gpu_node,) = controlplane.add_fake_nodes(1, {"warden.dev/smoke-gpu": "true"}, gpu=4, prefix="kwok-gpu")
    assert core.read_node(gpu_node).status.allocatable["nvidia.com/gpu"] == "4"
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "gpu"},
            "spec": {
                # Other tests add GPU nodes to the shared control plane too: pin this pod to ours.
                "nodeSelector": {"warden.dev/smoke-gpu": "true"},
                "containers": [{"name": "main", "image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
            },
        },
    )

    def ready() -> Any:
        pod = core.read_namespaced_pod("gpu", namespace)
        return pod if _pod_ready(pod) else None

    try:
        pod = wait_for("the GPU pod Ready", ready, TIMEOUT)
        assert pod.spec.node_name == gpu_node
    finally:
        core.delete_node(gpu_node)
