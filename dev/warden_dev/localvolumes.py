"""A tiny dynamic volume provisioner for the local cluster: hostPath directories on the host node, and NFS
directories for every node (VM nodes included).

Every PersistentVolumeClaim of a StorageClass whose provisioner is ``PROVISIONER`` gets a PersistentVolume
``pvc-<claim uid>`` backed by the host directory ``<root>/<namespace>-<claim>-<uid>`` (created 0755,
root-owned), with the claim's access modes and size, usable on the host node only (the PV's node affinity
says so, so the scheduler never puts its pods on a VM node). On one node a host directory is genuinely
shared, so ReadWriteMany (the jail) is honoured. Claims of ``NFS_STORAGE_CLASS`` (``NFS_PROVISIONER``) get a
directory of the VM nodes' NFS export (``--nfs-root``, served by nfs-ganesha on ``--nfs-server``,
``warden_dev.vmjoin``) as an NFS volume: ReadWriteMany across nodes. When such a volume is Released and its
reclaim policy is Delete, the directory and the PV are removed; with Retain both stay.

It makes a pass when a claim or a volume changes (a watch of each wakes it) and every ``--resync`` seconds
besides (a class made later, a watch that broke), and is started and stopped by warden_dev.localcluster
(``python -m warden_dev up|down``). It used to pass every second: three cluster-wide LISTs a second, a
tenth of the e2e tier's API requests with the cluster idle.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PROVISIONER = "warden.dev/local-hostpath"
STORAGE_CLASS = "warden-local"
NFS_PROVISIONER = "warden.dev/vm-nfs"
NFS_STORAGE_CLASS = "warden-nfs"
#: node-local volumes on whichever node the claim's first pod lands (VM nodes included): a hostPath the
#: node's kubelet makes (DirectoryOrCreate) under NODE_LOCAL_ROOT, bound to that node
NODE_LOCAL_PROVISIONER = "warden.dev/node-local"
NODE_LOCAL_STORAGE_CLASS = "warden-node-local"
NODE_LOCAL_ROOT = Path("/var/lib/warden-node-volumes")
SELECTED_NODE = "volume.kubernetes.io/selected-node"
#: the path the NFS server exports ``--nfs-root`` as (vmjoin.NFS_PSEUDO)
NFS_PSEUDO = "/exports"
ANNOTATION_PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
LOG = logging.getLogger("warden-local-volumes")


def _storage_class(name: str, provisioner: str, binding: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name, "annotations": extra.pop("annotations", {})},
        "provisioner": provisioner,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": binding,
        "allowVolumeExpansion": False,
        **extra,
    }


def storage_class_manifest(default: bool = True) -> dict[str, Any]:
    """The StorageClass of host directories (the cluster's default class when ``default``)."""
    annotations = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
    return _storage_class(STORAGE_CLASS, PROVISIONER, "Immediate", annotations=annotations)


def nfs_storage_class_manifest() -> dict[str, Any]:
    """The StorageClass of NFS volumes every node mounts (VM nodes: the host node has no NFS client)."""
    return _storage_class(NFS_STORAGE_CLASS, NFS_PROVISIONER, "Immediate",
                          mountOptions=["nfsvers=4.1", "hard", "timeo=100"])  # fmt: skip


def node_local_storage_class_manifest() -> dict[str, Any]:
    """The StorageClass of node-local volumes on any node (a VM node's disk, e.g. slurmctld's state: NFS from
    a TCG guest is too slow for it), made where the claim's first pod is scheduled."""
    return _storage_class(NODE_LOCAL_STORAGE_CLASS, NODE_LOCAL_PROVISIONER, "WaitForFirstConsumer")


def volume_dir(root: Path, namespace: str, claim: str, uid: str) -> Path:
    return root / f"{namespace}-{claim}-{uid}"


def on_node(node: str) -> dict[str, Any]:
    """A PersistentVolume's nodeAffinity: that node only."""
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
    return {"required": {"nodeSelectorTerms": [term]}}


def pv_manifest(pvc: Any, storage_class: Any, root: Path, node: str | None = None,
                nfs_server: str | None = None) -> dict[str, Any]:  # fmt: skip
    """The PersistentVolume that satisfies ``pvc`` (a kubernetes client V1PersistentVolumeClaim): a hostPath
    on ``node`` under ``root``, or with ``nfs_server`` a directory of its export (``root`` is the exported
    directory)."""
    meta = pvc.metadata
    path = volume_dir(root, meta.namespace, meta.name, meta.uid)
    request = (pvc.spec.resources.requests or {}).get("storage", "1Gi")
    if storage_class.provisioner == NODE_LOCAL_PROVISIONER:
        path = volume_dir(NODE_LOCAL_ROOT, meta.namespace, meta.name, meta.uid)
        node = (meta.annotations or {}).get(SELECTED_NODE)
        source: dict[str, Any] = {"hostPath": {"path": str(path), "type": "DirectoryOrCreate"}}
        if node:
            source["nodeAffinity"] = on_node(node)
    elif nfs_server:
        source = {"nfs": {"server": nfs_server, "path": f"{NFS_PSEUDO}/{path.name}"},
                                  "mountOptions": list(storage_class.mount_options or [])}  # fmt: skip
    else:
        source = {"hostPath": {"path": str(path), "type": "Directory"}}
        if node:
            source["nodeAffinity"] = on_node(node)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": f"pvc-{meta.uid}",
            "annotations": {
                ANNOTATION_PROVISIONED_BY: storage_class.provisioner,
                "warden.dev/host-path": str(path),
            },
        },
        "spec": {
            "capacity": {"storage": request},
            "accessModes": list(pvc.spec.access_modes or ["ReadWriteOnce"]),
            "persistentVolumeReclaimPolicy": storage_class.reclaim_policy or "Delete",
            "storageClassName": storage_class.metadata.name,
            "volumeMode": "Filesystem",
            **source,
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta.namespace,
                "name": meta.name,
                "uid": meta.uid,
            },
        },
    }


class Provisioner:
    def __init__(self, api_client: Any, root: Path, node: str | None = None, nfs_root: Path | None = None,
                 nfs_server: str | None = None) -> None:  # fmt: skip
        from kubernetes import client

        self.core: Any = client.CoreV1Api(api_client)
        self.storage: Any = client.StorageV1Api(api_client)
        self.root = root
        self.node = node
        self.nfs_root = nfs_root
        self.nfs_server = nfs_server

    def _where(self, sc: Any) -> tuple[Path, str | None]:
        """The directory a class's volumes live in, and the NFS server (None: hostPath)."""
        if sc.provisioner == NFS_PROVISIONER and self.nfs_root is not None:
            return self.nfs_root, self.nfs_server
        return self.root, None

    def once(self) -> None:
        """One pass: provision pending claims, delete released volumes."""
        from kubernetes.client.exceptions import ApiException

        served = (PROVISIONER, NODE_LOCAL_PROVISIONER, *((NFS_PROVISIONER,) if self.nfs_root is not None else ()))
        ours = {sc.metadata.name: sc for sc in self.storage.list_storage_class().items if sc.provisioner in served}
        pvs = self.core.list_persistent_volume().items
        claimed = {pv.spec.claim_ref.uid for pv in pvs if pv.spec.claim_ref is not None}
        for pvc in self.core.list_persistent_volume_claim_for_all_namespaces().items:
            sc = ours.get(pvc.spec.storage_class_name or "")
            if sc is None or pvc.status.phase != "Pending" or pvc.spec.volume_name or pvc.metadata.uid in claimed:
                continue
            if pvc.metadata.deletion_timestamp is not None:
                continue
            if sc.provisioner == NODE_LOCAL_PROVISIONER and SELECTED_NODE not in (pvc.metadata.annotations or {}):
                continue  # WaitForFirstConsumer: the scheduler names the node first
            root, server = self._where(sc)
            body = pv_manifest(pvc, sc, root, node=self.node, nfs_server=server)
            path = Path(body["metadata"]["annotations"]["warden.dev/host-path"])
            if sc.provisioner != NODE_LOCAL_PROVISIONER:  # that one the node's kubelet makes
                path.mkdir(mode=0o755, parents=True, exist_ok=True)
            try:
                self.core.create_persistent_volume(body)
            except ApiException as e:
                if e.status != 409:
                    raise
            LOG.info("provisioned %s for %s/%s at %s", body["metadata"]["name"], pvc.metadata.namespace,
                     pvc.metadata.name, path)  # fmt: skip
        for pv in pvs:
            ann = pv.metadata.annotations or {}
            if ann.get(ANNOTATION_PROVISIONED_BY) not in served:
                continue
            if pv.status.phase == "Released" and pv.spec.persistent_volume_reclaim_policy == "Delete":
                path = Path(ann.get("warden.dev/host-path", ""))
                if path.is_absolute() and path.parent in (self.root, self.nfs_root):
                    shutil.rmtree(path, ignore_errors=True)
                try:
                    self.core.delete_persistent_volume(pv.metadata.name)
                except ApiException as e:
                    if e.status != 404:
                        raise
                LOG.info("deleted %s and %s", pv.metadata.name, path)

    def _wake_on_changes(self, list_call: Any, wake: threading.Event) -> None:
        """Set ``wake`` on every change of what ``list_call`` lists (its watch; made again when it ends)."""
        from kubernetes import watch

        while True:
            try:
                for _ in watch.Watch().stream(list_call, timeout_seconds=300):  # type: ignore[no-untyped-call]
                    wake.set()
            except Exception:  # the API server may be restarting: watch again shortly
                LOG.warning("watch of %s ended; watching again", getattr(list_call, "__name__", list_call))
                time.sleep(2)

    def run(self, resync: float) -> None:
        """A pass when a claim or a volume changes, and every ``resync`` seconds besides."""
        wake = threading.Event()
        for call in (self.core.list_persistent_volume_claim_for_all_namespaces, self.core.list_persistent_volume):
            threading.Thread(target=self._wake_on_changes, args=(call, wake), daemon=True).start()
        while True:
            wake.clear()  # before the pass: a change while it runs wakes the next one
            try:
                self.once()
            except Exception:  # the API server may be restarting: log, retry on the next pass
                LOG.exception("provisioning pass failed")
            wake.wait(resync)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--root", type=Path, required=True, help="host directory holding the volumes")
    parser.add_argument("--node", help="the host node's name: hostPath volumes are bound to it")
    parser.add_argument("--nfs-root", type=Path, help="the directory the VM nodes' NFS server exports")
    parser.add_argument("--nfs-server", help="that NFS server's address")
    parser.add_argument("--resync", type=float, default=30.0, help="seconds between passes with no change seen")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from kubernetes import config

    api = config.new_client_from_config(config_file=args.kubeconfig)  # type: ignore[no-untyped-call]
    args.root.mkdir(parents=True, exist_ok=True)
    Provisioner(api, args.root, node=args.node, nfs_root=args.nfs_root, nfs_server=args.nfs_server).run(args.resync)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
