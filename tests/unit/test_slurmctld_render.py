"""slurmctld as rendered with one controller (today's shape) and with backups (spec.controller.replicas 2-3):
what a platform engineer reviewing a highly available cluster checks."""

from __future__ import annotations

from typing import Any

from warden import naming
from warden.model import parse_spec
from warden.render import config
from warden.render.cluster import render
from warden.render.context import Cluster
from warden.render.slurmctld import state_class_problem


def cluster(**controller: Any) -> Cluster:
    spec: dict[str, Any] = {"workerGroups": [{"name": "cpu", "replicas": 2}]}
    if controller:
        spec["controller"] = controller
    return Cluster(name="hpc", namespace="lab", spec=parse_spec(spec))


def objects(c: Cluster, kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in render(c).objects if o["kind"] == kind}


def conf_lines(c: Cluster, key: str) -> list[str]:
    return [line for line in config.slurm_conf(c).splitlines() if line.startswith(f"{key}=")]


def test_one_controller_keeps_its_own_claim_and_no_backup_settings() -> None:
    c = cluster()
    sts = objects(c, "StatefulSet")["hpc-controller"]
    assert sts["spec"]["replicas"] == 1
    assert [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]] == ["state"]
    assert "affinity" not in sts["spec"]["template"]["spec"]
    env = {e["name"] for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "WARDEN_CONTROLLERS" not in env
    assert conf_lines(c, "SlurmctldHost") == [
        "SlurmctldHost=hpc-controller-0(hpc-controller-0.hpc-controller.lab.svc.cluster.local)"
    ]
    assert conf_lines(c, "SlurmctldTimeout") == []
    assert "hpc-controller-state" not in objects(c, "PersistentVolumeClaim")
    assert "hpc-controller-0" not in objects(c, "Service")
    assert objects(c, "PodDisruptionBudget")["hpc-controller"]["spec"]["maxUnavailable"] == 0


def test_backups_are_listed_in_pod_order_and_share_one_read_write_many_claim() -> None:
    c = cluster(replicas=3, takeoverSeconds=20, stateVolume={"size": "5Gi", "storageClassName": "nfs"})
    # each by its own Service: an address that outlives the pod's IP
    assert conf_lines(c, "SlurmctldHost") == [
        f"SlurmctldHost=hpc-controller-{i}(hpc-controller-{i}.lab.svc.cluster.local)" for i in range(3)
    ]
    services = objects(c, "Service")
    for i in range(3):
        svc = services[f"hpc-controller-{i}"]["spec"]
        assert svc["selector"]["statefulset.kubernetes.io/pod-name"] == f"hpc-controller-{i}"
        assert svc["publishNotReadyAddresses"] is True and "clusterIP" not in svc
    assert conf_lines(c, "SlurmctldTimeout") == ["SlurmctldTimeout=20"]
    claim = objects(c, "PersistentVolumeClaim")["hpc-controller-state"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["storageClassName"] == "nfs"
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    sts = objects(c, "StatefulSet")["hpc-controller"]
    pod = sts["spec"]["template"]["spec"]
    assert sts["spec"]["replicas"] == 3
    assert "volumeClaimTemplates" not in sts["spec"]
    state = next(v for v in pod["volumes"] if v["name"] == "state")
    assert state == {"name": "state", "persistentVolumeClaim": {"claimName": "hpc-controller-state"}}
    assert {"name": "WARDEN_CONTROLLERS", "value": "3"} in pod["containers"][0]["env"]
    spread = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert spread["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    # all but one may be evicted at a time: an evicted controller in charge hands over first
    assert objects(c, "PodDisruptionBudget")["hpc-controller"]["spec"]["maxUnavailable"] == 2


def test_a_storage_class_of_single_node_volumes_is_refused_naming_the_fields() -> None:
    c = cluster(replicas=2, stateVolume={"storageClassName": "gp3"})
    ebs = {"metadata": {"name": "gp3"}, "provisioner": "ebs.csi.aws.com"}
    problem = state_class_problem(c, ebs)
    assert problem is not None
    assert "controller.replicas" in problem and "controller.stateVolume.storageClassName" in problem
    assert "ebs.csi.aws.com" in problem
    nfs = {"metadata": {"name": "nfs"}, "provisioner": "nfs.csi.k8s.io"}
    assert state_class_problem(c, nfs) is None
    assert "does not exist" in (state_class_problem(c, None) or "")
    # one controller needs no shared volume, whatever its class
    assert state_class_problem(cluster(stateVolume={"storageClassName": "gp3"}), ebs) is None
    # no class named and no default class: the claim waits, shown in ControllerReady
    assert state_class_problem(cluster(replicas=2), None) is None


def test_with_backups_each_controller_serves_its_in_charge_verdict_on_the_operators_port() -> None:
    """warden.ha.verdict asks each controller pod on naming.IN_CHARGE_PORT; one controller has none."""
    one = objects(cluster(), "StatefulSet")["hpc-controller"]["spec"]["template"]["spec"]["containers"][0]
    assert "WARDEN_IN_CHARGE_PORT" not in {e["name"] for e in one["env"]}
    assert [p["name"] for p in one["ports"]] == ["slurmctld"]
    for replicas in (2, 3):
        sts = objects(cluster(replicas=replicas), "StatefulSet")["hpc-controller"]
        container = sts["spec"]["template"]["spec"]["containers"][0]
        assert {"name": "WARDEN_IN_CHARGE_PORT", "value": str(naming.IN_CHARGE_PORT)} in container["env"]
        assert {"name": "in-charge", "containerPort": naming.IN_CHARGE_PORT, "protocol": "TCP"} in container["ports"]
    assert naming.IN_CHARGE_PORT == 6827
