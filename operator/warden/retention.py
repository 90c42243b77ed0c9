"""Keeping the jail: what the operator changes on the jail's claim and volume so that users' homes
outlive the SlurmCluster, its Helm release and its namespace (pure; `warden.kube.retention` does the I/O).

With `spec.jail.retainOnDelete` (the default):
- the claim has no owner reference, so deleting the SlurmCluster (or `helm uninstall`) leaves it;
- its PersistentVolume's reclaim policy is Retain (the policy it had is kept in an annotation), so
  deleting the claim, or the whole namespace, leaves the volume and its data (phase Released);
- the volume is labelled with the claim it belongs to; a claim of that name made later (a reinstall
  after the namespace was deleted) is bound to it again instead of to a fresh, empty volume.
Without it the claim is owned by the SlurmCluster and the volume gets back the reclaim policy it had:
deleting the SlurmCluster deletes both. Either way the change applies to the claim that exists.
"""

from __future__ import annotations

from typing import Any

from warden.naming import LABEL_PREFIX

Manifest = dict[str, Any]

#: on the volume: the reclaim policy it had before Warden set Retain (given back when retention is off)
RECLAIM_WAS_ANNOTATION = f"{LABEL_PREFIX}/reclaim-policy-was"
#: on the volume: which claim it holds the jail of (`<namespace>.<claim>` does not fit a label value)
JAIL_NAMESPACE_LABEL = f"{LABEL_PREFIX}/jail-namespace"
JAIL_CLAIM_LABEL = f"{LABEL_PREFIX}/jail-claim"


def _is_slurm_cluster_ref(ref: Manifest) -> bool:
    return str(ref.get("apiVersion", "")).startswith(f"{LABEL_PREFIX}/") and ref.get("kind") == "SlurmCluster"


def owner_references(claim: Manifest, owner_ref: Manifest, retain: bool) -> list[Manifest] | None:
    """The claim's ownerReferences as they should be, or None when they are right already. References
    to other owners are kept; any SlurmCluster's (an earlier one of the same name included) go when the
    jail is retained, and only this SlurmCluster's stays when it is not."""
    refs: list[Manifest] = list(claim["metadata"].get("ownerReferences") or [])
    want = [r for r in refs if not _is_slurm_cluster_ref(r)]
    if not retain:
        want.append(owner_ref)
    same = [(r.get("uid"), r.get("kind")) for r in refs] == [(r.get("uid"), r.get("kind")) for r in want]
    return None if same else want


def volume_patch(volume: Manifest, namespace: str, claim: str, retain: bool) -> Manifest | None:
    """A merge patch that makes the jail's volume kept (Retain, labelled for re-binding) or given back
    its own policy; None when nothing is to change."""
    meta = volume["metadata"]
    policy = volume["spec"].get("persistentVolumeReclaimPolicy", "Delete")
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    if retain:
        patch: Manifest = {}
        if policy != "Retain":
            patch["spec"] = {"persistentVolumeReclaimPolicy": "Retain"}
            patch["metadata"] = {"annotations": {RECLAIM_WAS_ANNOTATION: policy}}
        want_labels = {JAIL_NAMESPACE_LABEL: namespace, JAIL_CLAIM_LABEL: claim}
        if any(labels.get(k) != v for k, v in want_labels.items()):
            patch.setdefault("metadata", {})["labels"] = want_labels
        return patch or None
    was = annotations.get(RECLAIM_WAS_ANNOTATION)
    if was is None:
        return None  # never changed by Warden: the volume keeps the policy its class gave it
    return {
        "spec": {"persistentVolumeReclaimPolicy": was},
        "metadata": {
            "annotations": {RECLAIM_WAS_ANNOTATION: None},
            "labels": {JAIL_NAMESPACE_LABEL: None, JAIL_CLAIM_LABEL: None},
        },
    }


def retained_volume(volumes: list[Manifest], namespace: str, claim: str) -> Manifest | None:
    """Among volumes labelled for this claim, the one a new claim should bind: a retained jail whose
    claim is gone (Released) or that waits for it (Available). The newest, when there are several."""
    candidates = [
        v
        for v in volumes
        if (v["metadata"].get("labels") or {}).get(JAIL_NAMESPACE_LABEL) == namespace
        and (v["metadata"].get("labels") or {}).get(JAIL_CLAIM_LABEL) == claim
        and (v.get("status") or {}).get("phase") in ("Released", "Available")
        and not v["metadata"].get("deletionTimestamp")
    ]
    candidates.sort(key=lambda v: v["metadata"].get("creationTimestamp", ""))
    return candidates[-1] if candidates else None


def rebind(claim: Manifest, volume: Manifest) -> tuple[Manifest, Manifest]:
    """The claim to create, naming the kept volume, and the volume patch that reserves it for that
    claim (its old claimRef, which names a claim that no longer exists, is replaced). The claim asks
    for no more than the volume holds and for its StorageClass, or binding would never happen."""
    meta = claim["metadata"]
    spec = dict(claim["spec"])
    spec["volumeName"] = volume["metadata"]["name"]
    spec["storageClassName"] = volume["spec"].get("storageClassName", "")
    capacity = (volume["spec"].get("capacity") or {}).get("storage")
    if capacity:
        spec["resources"] = {"requests": {"storage": capacity}}
    claim_ref = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": meta["namespace"],
                 "name": meta["name"], "uid": None, "resourceVersion": None}  # fmt: skip
    return {**claim, "spec": spec}, {"spec": {"claimRef": claim_ref}}
