"""The operator against a real control plane: objects, owner references, status, changes, deletion."""

from __future__ import annotations

import copy
from typing import Any

from kubernetes import client

from tests.support.operator import (
    CLUSTER_PATH,
    OperatorProcess,
    apply_cluster,
    get_cluster,
    load_example,
    owned_objects,
    wait_ready,
    wait_until,
)
from warden.naming import Names

GROUP, VERSION, PLURAL = CLUSTER_PATH


def test_cluster_converges_to_ready_with_owned_labelled_children(
    api_client: Any, cluster_namespace: str, operator: OperatorProcess
) -> None:
    body = load_example("cpu-only", cluster_namespace)
    created = apply_cluster(api_client, body)
    uid = created["metadata"]["uid"]
    names = Names(cluster="cpu", namespace=cluster_namespace)

    # Not ready at first: the populate Job and the pods take a moment even on kwok.
    def first_status() -> Any:
        return get_cluster(api_client, cluster_namespace, "cpu").get("status")

    first = wait_until("a first status", first_status, 60, operator.log_tail)
    assert first["phase"] in ("Pending", "Provisioning", "Ready")

    obj = wait_ready(api_client, cluster_namespace, "cpu", operator)
    status = obj["status"]
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "Ready": "True",
        "JailPopulated": "True",
        "ControllerReady": "True",
        "LoginReady": "True",
        "WorkersReady": "True",
        "AccountingReady": "True",
    }
    assert status["workers"] == "2/2" and status["login"] == "1/1" and status["jailPopulated"] is True

    children = owned_objects(api_client, cluster_namespace, uid)
    expected = {
        f"ConfigMap/{names.slurm_config}",
        f"ConfigMap/{names.sshd_config}",
        f"Secret/{names.slurm_key}",
        f"Secret/{names.ssh_host_keys}",
        f"PersistentVolumeClaim/{names.jail}",
        f"Job/{names.populate_jail}",
        f"Service/{names.controller}",
        f"StatefulSet/{names.controller}",
        f"Service/{names.nodes_service}",
        f"Service/{names.login}",
        f"StatefulSet/{names.login}",
        f"StatefulSet/{names.worker('cpu')}",
    }
    assert expected <= set(children), sorted(expected - set(children))
    for key, item in children.items():
        labels = item["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/instance") == "cpu", key
        assert labels.get("app.kubernetes.io/managed-by") == "warden", key
        (ref,) = item["metadata"]["ownerReferences"]
        assert ref["kind"] == "SlurmCluster" and ref["controller"] is True, key
    # Printer columns, as `kubectl get sc` shows them.
    events = client.CoreV1Api(api_client).list_namespaced_event(cluster_namespace)
    reasons = {e.reason for e in events.items if e.involved_object.name == "cpu"}
    assert {"SecretCreated", "Reconciled"} <= reasons, reasons


def test_spec_changes_converge_and_removed_group_is_pruned(
    api_client: Any, cluster_namespace: str, operator: OperatorProcess
) -> None:
    ns = cluster_namespace
    body = load_example("cpu-only", ns)
    apply_cluster(api_client, body)
    wait_ready(api_client, ns, "cpu", operator)
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    key_before = core.read_namespaced_secret("cpu-slurm-key", ns).data

    changed = copy.deepcopy(body)
    spec = changed["spec"]
    spec["workerGroups"][0]["replicas"] = 3
    spec["workerGroups"].append({"name": "big", "replicas": 1, "resources": {"limits": {"cpu": "8"}}})
    spec["slurmConfig"] = {"extraLines": ["MaxJobCount=5000"]}
    new_key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb bob@example"
    spec["login"]["sshAuthorizedKeys"].append(new_key)
    apply_cluster(api_client, changed)
    obj = wait_ready(api_client, ns, "cpu", operator)
    assert obj["status"]["workers"] == "4/4"
    assert apps.read_namespaced_stateful_set("cpu-worker-cpu", ns).spec.replicas == 3
    assert apps.read_namespaced_stateful_set("cpu-worker-big", ns).spec.replicas == 1
    slurm_conf = core.read_namespaced_config_map("cpu-slurm-config", ns).data["slurm.conf"]
    assert "MaxJobCount=5000" in slurm_conf and "NodeSet=ns_big Feature=warden-group-big" in slurm_conf
    assert new_key in core.read_namespaced_config_map("cpu-sshd-config", ns).data["authorized_keys"]

    # Remove the group again: its StatefulSet goes, the rest stays.
    spec["workerGroups"] = [g for g in spec["workerGroups"] if g["name"] != "big"]
    apply_cluster(api_client, changed)

    def big_gone() -> bool:
        return not [s for s in apps.list_namespaced_stateful_set(ns).items if s.metadata.name == "cpu-worker-big"]

    wait_until("cpu-worker-big pruned", big_gone, 60, operator.log_tail)
    obj = wait_ready(api_client, ns, "cpu", operator)
    assert obj["status"]["workers"] == "3/3"
    assert [g["name"] for g in obj["status"]["workerGroups"]] == ["cpu"]
    # Secrets keep their values across reconciles.
    assert core.read_namespaced_secret("cpu-slurm-key", ns).data == key_before


def test_deleting_the_cluster_garbage_collects_everything(
    api_client: Any, cluster_namespace: str, operator: OperatorProcess
) -> None:
    ns = cluster_namespace
    created = apply_cluster(api_client, load_example("cpu-only", ns))
    uid = created["metadata"]["uid"]
    wait_ready(api_client, ns, "cpu", operator)
    assert owned_objects(api_client, ns, uid)
    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "cpu")
    wait_until("every child garbage-collected", lambda: not owned_objects(api_client, ns, uid), 90, operator.log_tail)
