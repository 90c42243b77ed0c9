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
)
from warden.model import WORKER_SET_PLURAL
from warden.naming import Names
from warden_dev.controlplane import wait_for

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

    first = wait_for("a first status", first_status, 60, on_fail=operator.log_tail)
    assert first["phase"] in ("Pending", "Provisioning", "Ready")

    obj = wait_ready(api_client, cluster_namespace, "cpu", operator)
    status = obj["status"]
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "Ready": "True",
        "ImagesPulled": "True",
        "JailPopulated": "True",
        "ControllerReady": "True",
        "RestApiReady": "True",
        "LoginReady": "True",
        "WorkersReady": "True",
        "AccountingReady": "True",
        # kwok pods run no Slurm, and this operator is told not to read it (--slurm-sync-interval=0)
        "SlurmNodesRegistered": "Unknown",
        "SlurmVersion": "True",  # every part runs spec.slurmVersion (26.05 by default)
        "SlurmConfigAccepted": "True",  # the first configuration: nothing ran it before (warden.configcheck)
    }
    assert status["workers"] == "2/2" and status["login"] == "1/1" and status["jailPopulated"] is True
    assert (status["slurm"]["version"], status["slurm"]["phase"]) == ("26.05", "Settled")

    children = owned_objects(api_client, cluster_namespace, uid)
    expected = {
        f"ConfigMap/{names.slurm_config}",
        f"ConfigMap/{names.sshd_config}",
        f"Secret/{names.slurm_key}",
        f"Secret/{names.ssh_host_keys}",
        f"Secret/{names.jwt_key}",
        f"Job/{names.populate_jail}",
        "NetworkPolicy/cpu-isolate",
        f"Service/{names.controller}",
        f"StatefulSet/{names.controller}",
        f"Service/{names.restapi}",
        f"Deployment/{names.restapi}",
        f"Service/{names.exporter}",
        f"Deployment/{names.exporter}",
        f"Service/{names.nodes_service}",
        f"Service/{names.login}",
        f"StatefulSet/{names.login}",
        f"WorkerSet/{names.worker('cpu')}",
    }
    assert expected <= set(children), sorted(expected - set(children))
    # the jail is kept by default: there, but owned by nobody
    jail = client.CoreV1Api(api_client).read_namespaced_persistent_volume_claim(names.jail, cluster_namespace)
    assert not jail.metadata.owner_references and f"PersistentVolumeClaim/{names.jail}" not in children
    for key, item in children.items():
        labels = item["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/instance") == "cpu", key
        assert labels.get("app.kubernetes.io/managed-by") == "warden", key
        (ref,) = item["metadata"]["ownerReferences"]
        assert ref["kind"] == "SlurmCluster" and ref["controller"] is True, key
    # Printer columns, as `kubectl get slurm` shows them.
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
    core = client.CoreV1Api(api_client)
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
    assert worker_set(api_client, ns, "cpu-worker-cpu")["spec"]["replicas"] == 3
    assert worker_set(api_client, ns, "cpu-worker-big")["spec"]["replicas"] == 1
    pods = {p.metadata.name for p in core.list_namespaced_pod(ns).items if not p.metadata.deletion_timestamp}
    assert {"cpu-worker-cpu-2", "cpu-worker-big-0"} <= pods
    slurm_conf = core.read_namespaced_config_map("cpu-slurm-config", ns).data["slurm.conf"]
    assert "MaxJobCount=5000" in slurm_conf and "NodeSet=ns_big Feature=warden-group-big" in slurm_conf
    assert new_key in core.read_namespaced_config_map("cpu-sshd-config", ns).data["authorized_keys"]

    def replaced() -> list[str]:
        events = core.list_namespaced_event(ns).items
        return [str(e.message) for e in events if e.reason == "PodsReplaced" and e.involved_object.name == "cpu"]

    # Scaling, a new group and Slurm config replace no pod; a controller resources change does, and says so.
    assert replaced() == []
    spec["controller"] = {"resources": {"limits": {"memory": "3Gi"}}}
    apply_cluster(api_client, changed)
    [message] = wait_for("a PodsReplaced Event", lambda: replaced() or None, 60, on_fail=operator.log_tail)
    assert message.startswith("cpu-controller: slurmctld: resources {} -> {'limits': {'memory': '3Gi'}}"), message

    # Remove the group again: its WorkerSet (and with it, its pods) goes, the rest stays.
    spec["workerGroups"] = [g for g in spec["workerGroups"] if g["name"] != "big"]
    apply_cluster(api_client, changed)

    def big_gone() -> bool:
        pods = [p for p in core.list_namespaced_pod(ns).items if p.metadata.name.startswith("cpu-worker-big-")]
        return not pods and worker_set(api_client, ns, "cpu-worker-big") is None

    wait_for("cpu-worker-big pruned", big_gone, 60, on_fail=operator.log_tail)
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
    wait_for(
        "every child garbage-collected", lambda: not owned_objects(api_client, ns, uid), 90, on_fail=operator.log_tail
    )


def test_cluster_made_again_while_its_old_jail_claim_terminates_gets_a_new_one(
    api_client: Any, cluster_namespace: str, operator: OperatorProcess
) -> None:
    """`helm uninstall` then `helm install` at once: the old jail claim is still terminating (its
    `pvc-protection` finalizer waits for the old pods; a finalizer of the test's own holds it here). The
    new SlurmCluster must not take that claim for its own: it waits, says so, and makes a new claim once
    the old one is gone, then becomes Ready."""
    ns = cluster_namespace
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    apply_cluster(api_client, _deleting_its_jail(load_example("cpu-only", ns)))
    wait_ready(api_client, ns, "cpu", operator)
    hold = "test.warden.dev/hold"
    old = core.patch_namespaced_persistent_volume_claim("cpu-jail", ns, {"metadata": {"finalizers": [hold]}})
    custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "cpu")
    gone = lambda: not custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"]  # noqa: E731
    wait_for("the old cluster gone", gone, 60, on_fail=operator.log_tail)
    wait_for("the old jail claim terminating",
             lambda: core.read_namespaced_persistent_volume_claim("cpu-jail", ns).metadata.deletion_timestamp, 60,
             on_fail=operator.log_tail)  # fmt: skip

    apply_cluster(api_client, _deleting_its_jail(load_example("cpu-only", ns)))

    def waiting_said() -> bool:
        cond = {c["type"]: c for c in get_cluster(api_client, ns, "cpu").get("status", {}).get("conditions", [])}
        return "cpu-jail is still being deleted" in cond.get("Ready", {}).get("message", "")

    wait_for("the new cluster saying it waits for the old claim", waiting_said, 60, on_fail=operator.log_tail)
    core.patch_namespaced_persistent_volume_claim("cpu-jail", ns, {"metadata": {"finalizers": None}})
    obj = wait_ready(api_client, ns, "cpu", operator)
    claim = core.read_namespaced_persistent_volume_claim("cpu-jail", ns)
    assert claim.metadata.uid != old.metadata.uid and claim.metadata.deletion_timestamp is None
    assert claim.metadata.owner_references[0].uid == obj["metadata"]["uid"]


def _deleting_its_jail(body: dict[str, Any]) -> dict[str, Any]:
    body["spec"].setdefault("jail", {})["retainOnDelete"] = False
    return body


def test_jail_outlives_its_namespace_comes_back_to_a_cluster_of_that_name_and_goes_only_when_asked(
    api_client: Any, controlplane: Any, cluster_namespace: str, operator: OperatorProcess
) -> None:
    """Default values: the jail's claim has no owner and its volume's reclaim policy becomes Retain once
    bound, so deleting the whole namespace leaves the volume (Released), annotated with the SlurmCluster's
    UID. The same SlurmCluster made again in a namespace of the same name (which anyone could make) does
    not get it by its name: it waits, saying how an admin hands the jail over; handed over (the volume's
    annotation), it gets that volume back, not a fresh one. `retainOnDelete: false` then applies to the
    existing claim and volume: deleting the SlurmCluster deletes the claim."""
    ns = cluster_namespace
    core = client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    storage_class = f"jail-{ns}"  # only this test's volume serves it
    volume = f"{ns}-jail"
    pv: Any = {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": volume},
        "spec": {"capacity": {"storage": "3Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": storage_class,
                 "persistentVolumeReclaimPolicy": "Delete", "hostPath": {"path": f"/tmp/warden-test-pv/{volume}"}},
    }  # fmt: skip
    core.create_persistent_volume(pv)
    body = load_example("cpu-only", ns)
    body["spec"]["jail"] = {"size": "2Gi", "storageClassName": storage_class}
    try:
        apply_cluster(api_client, copy.deepcopy(body))

        def kept() -> bool:
            pv = core.read_persistent_volume(volume)
            return pv.status.phase == "Bound" and pv.spec.persistent_volume_reclaim_policy == "Retain"

        wait_for("the jail's volume bound and kept (Retain)", kept, 60, on_fail=operator.log_tail)
        first = core.read_namespaced_persistent_volume_claim("cpu-jail", ns)
        assert not first.metadata.owner_references

        core.delete_namespace(ns)
        released = lambda: core.read_persistent_volume(volume).status.phase == "Released"  # noqa: E731

        def left() -> str:
            claims = [(c.metadata.name, c.metadata.finalizers, c.status.phase)
                      for c in core.list_namespaced_persistent_volume_claim(ns).items]  # fmt: skip
            pods = [
                (p.metadata.name, p.metadata.finalizers, p.status.phase) for p in core.list_namespaced_pod(ns).items
            ]
            namespace = core.read_namespace(ns)
            return f"claims {claims}; pods {pods}; namespace {namespace.status}"

        wait_for("the namespace deleted, the volume Released", released, 180, on_fail=left)
        wait_for("the namespace gone", lambda: ns not in {n.metadata.name for n in core.list_namespace().items}, 180)

        controlplane.create_namespace(ns)
        apply_cluster(api_client, copy.deepcopy(body))

        def waits_for_an_admin() -> bool:
            ready = [c for c in (get_cluster(api_client, ns, "cpu").get("status") or {}).get("conditions", [])
                     if c["type"] == "Ready"]  # fmt: skip
            return (
                bool(ready)
                and f"kubectl annotate pv {volume} slurm.warden.dev/jail-hand-over-to={ns}/cpu" in (ready[0]["message"])
            )

        wait_for("the new cluster waiting for the kept jail's hand-over", waits_for_an_admin, 60,
                 on_fail=operator.log_tail)  # fmt: skip
        assert "cpu-jail" not in [c.metadata.name for c in core.list_namespaced_persistent_volume_claim(ns).items]
        assert core.read_persistent_volume(volume).status.phase == "Released", "not reserved for the new cluster"
        core.patch_persistent_volume(volume, {"metadata": {"annotations": {
            "slurm.warden.dev/jail-hand-over-to": f"{ns}/cpu"}}})  # fmt: skip

        def bound_again() -> bool:
            claim = core.read_namespaced_persistent_volume_claim("cpu-jail", ns)
            return claim.status.phase == "Bound" and claim.spec.volume_name == volume

        wait_for("the new claim bound to the kept volume", bound_again, 60, on_fail=operator.log_tail)
        second = core.read_namespaced_persistent_volume_claim("cpu-jail", ns)
        assert second.metadata.uid != first.metadata.uid
        assert core.read_persistent_volume(volume).spec.claim_ref.uid == second.metadata.uid
        new_uid = get_cluster(api_client, ns, "cpu")["metadata"]["uid"]

        def recorded() -> bool:
            annotations = core.read_persistent_volume(volume).metadata.annotations or {}
            return annotations.get("slurm.warden.dev/jail-cluster-uid") == new_uid and (
                "slurm.warden.dev/jail-hand-over-to" not in annotations
            )

        wait_for("the jail recorded as the new cluster's, the hand-over spent", recorded, 60, on_fail=operator.log_tail)

        body["spec"]["jail"]["retainOnDelete"] = False
        uid = apply_cluster(api_client, copy.deepcopy(body))["metadata"]["uid"]

        def given_back() -> bool:
            claim = core.read_namespaced_persistent_volume_claim("cpu-jail", ns)
            pv = core.read_persistent_volume(volume)
            return [r.uid for r in claim.metadata.owner_references or []] == [uid] and (
                pv.spec.persistent_volume_reclaim_policy == "Delete"
            )

        wait_for("retainOnDelete: false on the existing claim and volume", given_back, 60, on_fail=operator.log_tail)
        custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "cpu")

        def claim_gone() -> bool:
            return "cpu-jail" not in [c.metadata.name for c in core.list_namespaced_persistent_volume_claim(ns).items]

        wait_for("the jail's claim deleted with its SlurmCluster", claim_gone, 90, on_fail=operator.log_tail)
    finally:
        try:
            core.delete_persistent_volume(volume)
        except client.ApiException as e:
            if e.status != 404:  # 404: the volume went with its claim (policy Delete), maybe while we looked
                raise


def test_immutable_statefulset_change_recreates_it_without_killing_pods(
    api_client: Any, cluster_namespace: str, operator: OperatorProcess
) -> None:
    """A bigger controller state volume changes volumeClaimTemplates, which Kubernetes refuses to
    patch. The operator re-creates the StatefulSet (orphaning, then adopting its pods) instead of
    failing forever: the controller pod is the same pod before and after."""
    ns = cluster_namespace
    body = load_example("cpu-only", ns)
    apply_cluster(api_client, body)
    wait_ready(api_client, ns, "cpu", operator)
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    pod_uid = core.read_namespaced_pod("cpu-controller-0", ns).metadata.uid
    sts_uid = apps.read_namespaced_stateful_set("cpu-controller", ns).metadata.uid

    body["spec"]["controller"] = {"stateVolume": {"size": "2Gi"}}
    apply_cluster(api_client, body)

    def recreated() -> bool:
        sts = apps.read_namespaced_stateful_set("cpu-controller", ns)
        size = sts.spec.volume_claim_templates[0].spec.resources.requests["storage"]
        return bool(sts.metadata.uid != sts_uid and size == "2Gi")

    wait_for("controller StatefulSet re-created with the new template", recreated, 60, on_fail=operator.log_tail)
    wait_ready(api_client, ns, "cpu", operator)
    assert core.read_namespaced_pod("cpu-controller-0", ns).metadata.uid == pod_uid, "the pod was not restarted"

    def said() -> bool:  # kopf posts Events in the background
        events = core.list_namespaced_event(ns).items
        return any(e.reason == "ObjectRecreated" and "StatefulSet/cpu-controller" in (e.message or "") for e in events)

    wait_for("an ObjectRecreated Event", said, 15, on_fail=operator.log_tail)


def test_operator_liveness_endpoint_answers(operator: OperatorProcess) -> None:
    import urllib.request

    def healthy() -> bool:
        with urllib.request.urlopen(operator.liveness_url, timeout=2) as resp:
            return bool(resp.status == 200)

    assert wait_for("the operator's /healthz", healthy, 30, on_fail=operator.log_tail)


def test_json_logs_on_request(controlplane: Any, cluster_namespace: str, tmp_path: Any) -> None:
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "KUBECONFIG": str(controlplane.kubeconfig)}
    cmd = [sys.executable, "-m", "warden.main", "-n", cluster_namespace, "--log-format", "json", "--liveness", "",
           "--metrics-port=0"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    record = json.loads(line)
    assert record.get("message") and record.get("severity")


def test_autoscaled_group_is_sized_by_its_scale_subresource_and_the_operator_never_fights_it(
    api_client: Any, cluster_namespace: str, operator: OperatorProcess
) -> None:
    """What an HPA or KEDA does to a group marked `autoscaled`: scale its WorkerSet through the scale
    subresource, to zero and back. Reconciles (a spec change, the operator restarting) keep that size;
    status follows it."""
    ns = cluster_namespace
    body = load_example("cpu-only", ns)
    body["spec"]["workerGroups"][0]["autoscaled"] = True
    apply_cluster(api_client, body)
    obj = wait_ready(api_client, ns, "cpu", operator)
    sts = "cpu-worker-cpu"
    assert worker_set(api_client, ns, sts)["spec"]["replicas"] == 2, "created with spec replicas"
    assert obj["status"]["workers"] == "2/2"

    def sized(n: int) -> Any:
        def check() -> Any:
            got = get_cluster(api_client, ns, "cpu")
            status = got.get("status", {})
            ok = status.get("workers") == f"{n}/{n}" and status.get("phase") == "Ready"
            scale = custom.get_namespaced_custom_object_scale(GROUP, VERSION, ns, WORKER_SET_PLURAL, sts)
            # (a Scale's replicas are left out when 0)
            ok = ok and scale["spec"].get("replicas", 0) == n and scale["status"].get("replicas", 0) == n
            return got if ok and len(worker_pods(api_client, ns, sts)) == n else None

        return check

    custom = client.CustomObjectsApi(api_client)
    custom.patch_namespaced_custom_object_scale(GROUP, VERSION, ns, WORKER_SET_PLURAL, sts, {"spec": {"replicas": 0}})
    wait_for("scaled to zero, status 0/0", sized(0), 60, on_fail=operator.log_tail)

    changed = copy.deepcopy(body)
    changed["spec"]["slurmConfig"] = {"extraLines": ["MaxJobCount=7000"]}
    apply_cluster(api_client, changed)
    wait_ready(api_client, ns, "cpu", operator)
    operator.stop()
    operator.start()

    # The cluster is Ready at its generation already: status cannot tell whether the new process did
    # anything. Its own log can. (It watches this namespace only, whose one SlurmCluster is this one.)
    operator.wait_resumed()
    assert worker_set(api_client, ns, sts)["spec"]["replicas"] == 0, "the operator scaled it back"
    assert sized(0)(), "after the restarted operator's reconcile: status 0/0, no pod, scale 0"

    custom.patch_namespaced_custom_object_scale(GROUP, VERSION, ns, WORKER_SET_PLURAL, sts, {"spec": {"replicas": 3}})
    wait_for("scaled to three, status 3/3", sized(3), 60, on_fail=operator.log_tail)


def worker_set(api: Any, ns: str, name: str) -> dict[str, Any] | None:
    try:
        obj: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
            GROUP, VERSION, ns, WORKER_SET_PLURAL, name
        )
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise
    return dict(obj)


def worker_pods(api: Any, ns: str, name: str) -> list[str]:
    """The live pods of a WorkerSet (not those being deleted)."""
    pods = client.CoreV1Api(api).list_namespaced_pod(ns).items
    names = [str(p.metadata.name) for p in pods if not p.metadata.deletion_timestamp]
    return sorted(n for n in names if n.startswith(f"{name}-"))


def test_applied_network_policies_carry_slurms_traffic_and_keep_jobs_from_the_api_and_the_database(
    api_client: Any, cluster_namespace: str, operator: OperatorProcess
) -> None:
    """The NetworkPolicies as the apiserver stored them, against the cluster's live pods (their labels,
    namespace and addresses): what Slurm, SSH and the database need passes; a job step reaching the
    Kubernetes API or the database does not. (No network plugin here enforces policies: the check is
    tests/support/netpol.py's reading of the API's rules; docs/security.md.)"""
    from tests.support.netpol import Endpoint, allowed, slurm_traffic

    ns = cluster_namespace
    body = load_example("cpu-only", ns)
    body["spec"]["workerGroups"][0]["replicas"] = 2
    body["spec"]["accounting"] = {"mode": "InCluster"}
    apply_cluster(api_client, body)
    wait_ready(api_client, ns, "cpu", operator)
    core = client.CoreV1Api(api_client)
    net = client.NetworkingV1Api(api_client)
    policies = [api_client.sanitize_for_serialization(p) for p in net.list_namespaced_network_policy(ns).items]
    assert {p["metadata"]["name"] for p in policies} >= {"cpu-isolate", "cpu-slurm", "cpu-ssh", "cpu-database"}
    ns_labels: dict[str, str] = core.read_namespace(ns).metadata.labels or {}
    pods: dict[str, Endpoint] = {}
    for pod in core.list_namespaced_pod(ns).items:
        component = str(pod.metadata.labels.get("app.kubernetes.io/component"))
        key = "worker2" if component == "worker" and "worker" in pods else component
        pods.setdefault(key, Endpoint(pod.status.pod_ip or "10.244.200.1", ns, pod.metadata.labels, ns_labels))
    names = Names("cpu", ns)
    pods.setdefault("populate", Endpoint("10.244.200.2", ns, names.labels("jail"), ns_labels))  # finished
    outside = {
        "apiserver": Endpoint("127.0.0.1"),
        "dns": Endpoint("10.96.0.10"),
        "internet": Endpoint("203.0.113.7"),
        "client": Endpoint("198.51.100.20"),
        "stranger": Endpoint("10.244.9.9", "default", {"app": "web"}, {"kubernetes.io/metadata.name": "default"}),
    }
    needed, forbidden = slurm_traffic(pods, outside)
    assert [c for c in needed if not allowed(policies, *c)] == []
    assert [c for c in forbidden if allowed(policies, *c)] == []


def test_backup_controllers_on_a_class_of_single_node_volumes_are_refused_before_anything_is_made(
    api_client: Any, cluster_namespace: str, operator: OperatorProcess
) -> None:
    """`controller.replicas: 2` needs a state volume both controllers mount (ReadWriteMany): on a
    StorageClass whose provisioner gives single-node volumes the cluster is Failed at once, naming the
    fields and the fix, and no child is made."""
    ns = cluster_namespace
    storage = client.StorageV1Api(api_client)
    sc = client.V1StorageClass(metadata=client.V1ObjectMeta(name=f"ebs-{ns}"), provisioner="ebs.csi.aws.com")
    storage.create_storage_class(sc)
    try:
        body = load_example("cpu-only", ns)
        body["spec"]["controller"] = {"replicas": 2, "stateVolume": {"storageClassName": f"ebs-{ns}"}}
        uid = apply_cluster(api_client, body)["metadata"]["uid"]

        def failed() -> dict[str, Any] | None:
            status = get_cluster(api_client, ns, "cpu").get("status") or {}
            return status if status.get("phase") == "Failed" else None

        wait_for("the cluster Failed", failed, 60, on_fail=operator.log_tail)
        ready = next(c for c in (failed() or {})["conditions"] if c["type"] == "Ready")
        assert ready["reason"] == "InvalidSpec"
        assert "controller.stateVolume.storageClassName" in ready["message"], ready
        assert "ebs.csi.aws.com" in ready["message"], ready
        assert owned_objects(api_client, ns, uid) == {}, "something was made for a refused spec"
    finally:
        storage.delete_storage_class(f"ebs-{ns}")
