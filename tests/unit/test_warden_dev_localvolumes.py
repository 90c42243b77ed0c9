"""warden_dev.localvolumes' volumes: hostPath ones bound to the host node (so no pod that needs one lands on
a VM node), NFS ones (warden-nfs) on the VM nodes' export, mountable from every VM node."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from warden_dev import localvolumes, vmjoin


def claim(name: str = "jail", modes: tuple[str, ...] = ("ReadWriteMany",), node: str | None = None) -> Any:
    annotations = {localvolumes.SELECTED_NODE: node} if node else None
    return SimpleNamespace(
        metadata=SimpleNamespace(namespace="ns", name=name, uid="u-1", annotations=annotations),
        spec=SimpleNamespace(resources=SimpleNamespace(requests={"storage": "4Gi"}), access_modes=list(modes)),
    )


def storage_class(manifest: dict[str, Any]) -> Any:
    return SimpleNamespace(metadata=SimpleNamespace(name=manifest["metadata"]["name"]),
                           provisioner=manifest["provisioner"], reclaim_policy=manifest["reclaimPolicy"],
                           mount_options=manifest.get("mountOptions"))  # fmt: skip


def test_a_host_path_volume_is_usable_on_the_host_node_only() -> None:
    pv = localvolumes.pv_manifest(claim(), storage_class(localvolumes.storage_class_manifest()), Path("/v"),
                                  node="warden-node")  # fmt: skip
    assert pv["spec"]["hostPath"] == {"path": "/v/ns-jail-u-1", "type": "Directory"}
    terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In",
                                            "values": ["warden-node"]}]}]  # fmt: skip


def test_an_nfs_volume_is_a_directory_of_the_vm_nodes_export_shared_by_every_node() -> None:
    sc = storage_class(localvolumes.nfs_storage_class_manifest())
    pv = localvolumes.pv_manifest(claim(), sc, Path("/export"), node="warden-node", nfs_server="10.238.0.1")
    assert pv["spec"]["nfs"] == {"server": "10.238.0.1", "path": f"{vmjoin.NFS_PSEUDO}/ns-jail-u-1"}
    assert "nodeAffinity" not in pv["spec"] and "hostPath" not in pv["spec"]
    assert pv["spec"]["accessModes"] == ["ReadWriteMany"]
    assert "nfsvers=4.1" in pv["spec"]["mountOptions"]
    assert pv["metadata"]["annotations"][localvolumes.ANNOTATION_PROVISIONED_BY] == localvolumes.NFS_PROVISIONER
    # the export ganesha serves is the directory the provisioner makes volumes in
    assert f"Pseudo = {vmjoin.NFS_PSEUDO};" in vmjoin.ganesha_config(Path("/export"), "10.238.0.1")
    assert "Path = /export;" in vmjoin.ganesha_config(Path("/export"), "10.238.0.1")


def test_a_node_local_volume_is_made_by_the_kubelet_of_the_node_its_first_pod_went_to() -> None:
    sc_manifest = localvolumes.node_local_storage_class_manifest()
    assert sc_manifest["volumeBindingMode"] == "WaitForFirstConsumer"
    pv = localvolumes.pv_manifest(claim("state", ("ReadWriteOnce",), node="warden-vm-1"), storage_class(sc_manifest),
                                  Path("/v"), node="warden-node")  # fmt: skip
    assert pv["spec"]["hostPath"] == {
        "path": f"{localvolumes.NODE_LOCAL_ROOT}/ns-state-u-1",
        "type": "DirectoryOrCreate",
    }
    values = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
    assert values == ["warden-vm-1"]


def test_the_provisioners_role_lets_it_watch_the_claims_and_volumes_whose_changes_wake_it() -> None:
    """It passes when a claim or a volume changes (a watch of each) and every 30 s besides: a role without
    watch has every watch refused, and new claims would wait for the resync."""
    from warden_dev import localcluster

    role = next(o for o in localcluster.provisioner_rbac() if o["kind"] == "ClusterRole")
    verbs = {r: set(rule["verbs"]) for rule in role["rules"] for r in rule["resources"]}
    assert {"list", "watch"} <= verbs["persistentvolumeclaims"]
    assert {"list", "watch", "create", "delete"} <= verbs["persistentvolumes"]
    assert verbs["storageclasses"] == {"list"}
