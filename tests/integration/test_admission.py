"""The real kube-apiserver, with the generated CRD installed, refuses malformed SlurmClusters at
admission (OpenAPI schema + CEL rules), naming the field at fault."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.cases.malformed import BASE, CASES, Case, bridge_spec
from tests.support.operator import CLUSTER_PATH

GROUP, VERSION, PLURAL = CLUSTER_PATH


def create(api: Any, namespace: str, name: str, spec: dict[str, Any]) -> Any:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "SlurmCluster", "metadata": {"name": name}, "spec": spec}
    return client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, body, field_validation="Strict"
    )


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_apiserver_rejects_malformed_spec_naming_the_field(
    api_client: Any, crd_installed: None, admission_namespace: str, case: Case
) -> None:
    with pytest.raises(ApiException) as err:
        create(api_client, admission_namespace, f"bad-{case.id}"[:24].rstrip("-"), case.spec)
    assert err.value.status in (400, 422), err.value.body
    message = json.loads(err.value.body or "{}")["message"]
    assert case.field in message, message


def test_a_valid_spec_is_accepted_and_defaulted(api_client: Any, crd_installed: None, admission_namespace: str) -> None:
    obj = create(api_client, admission_namespace, "good", BASE)
    spec = obj["spec"]
    # Defaults come from the schema, so `kubectl get -o yaml` shows what the operator will use.
    assert spec["login"]["replicas"] == 1
    assert spec["jail"]["size"] == "20Gi"
    assert spec["accounting"]["mode"] == "Disabled"
    assert spec["workerGroups"][0]["gpus"]["count"] == 0


def test_a_bridge_with_room_on_its_groups_is_accepted_and_defaulted(
    api_client: Any, crd_installed: None, admission_namespace: str
) -> None:
    """The bridge's CEL rules refuse only what the operator refuses: a shared group with requests below its
    limits, a partition of its own; a disabled bridge is not checked."""
    on = create(
        api_client,
        admission_namespace,
        "bridge-on",
        bridge_spec(partitions=[{"name": "batch", "workerGroups": ["cpu"]}]),
    )
    assert on["spec"]["bridge"] == {
        "enabled": True, "workerGroups": ["cpu"], "partition": "k8s", "qos": "", "schedulerName": "warden-slurm"
    }  # fmt: skip
    off = bridge_spec(slurmVersion="24.11", bridge={"enabled": False, "workerGroups": ["gpu"], "partition": "main"})
    create(api_client, admission_namespace, "bridge-off", off)


def test_names_longer_than_children_allow_are_refused(
    api_client: Any, crd_installed: None, admission_namespace: str
) -> None:
    with pytest.raises(ApiException) as err:
        create(api_client, admission_namespace, "a-name-that-is-far-too-long-for-warden", BASE)
    assert "metadata.name must be at most 24 characters" in json.loads(err.value.body or "{}")["message"]


def test_controller_replicas_cannot_change_after_the_cluster_is_made(
    api_client: Any, crd_installed: None, admission_namespace: str
) -> None:
    create(api_client, admission_namespace, "onectl", BASE)
    api = client.CustomObjectsApi(api_client)
    with pytest.raises(ApiException) as err:
        api.patch_namespaced_custom_object(
            GROUP, VERSION, admission_namespace, PLURAL, "onectl", {"spec": {"controller": {"replicas": 2}}}
        )
    message = json.loads(err.value.body or "{}")["message"]
    assert "spec.controller.replicas" in message and "fixed when the cluster is made" in message, message
    # what may change with backups still changes
    api.patch_namespaced_custom_object(
        GROUP, VERSION, admission_namespace, PLURAL, "onectl", {"spec": {"controller": {"takeoverSeconds": 30}}}
    )
