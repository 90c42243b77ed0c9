"""Keeping the jail: what the operator changes on the jail's claim and volume so that users' homes
outlive the SlurmCluster, its Helm release and its namespace (pure; `warden.kube.retention` does the I/O).

With `spec.jail.retainOnDelete` (the default):
- the claim has no owner reference, so deleting the SlurmCluster (or `helm uninstall`) leaves it;
- its PersistentVolume's reclaim policy is Retain (the policy it had is kept in an annotation), so
  deleting the claim, or the whole namespace, leaves the volume and its data (phase Released);
- the volume is labelled with the claim it belongs to and annotated with the UID of the SlurmCluster it
  belongs to; a claim of that name made later by that same SlurmCluster (its claim was deleted) is bound
  to it again instead of to a fresh, empty volume. A new SlurmCluster of the same namespace and name (a
  reinstall after the namespace was deleted, or anyone who makes one there) gets it only when an admin
  hands it over (the volume's annotation `slurm.warden.dev/jail-hand-over-to: <namespace>/<name>`):
  names can be copied, a UID cannot, and PersistentVolumes are no tenant's to annotate. Until then the
  new cluster waits, saying so, rather than starting on an empty jail the kept one could never replace.
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
#: on the volume: the UID of the SlurmCluster whose jail it holds (only that one gets it back by itself)
JAIL_CLUSTER_UID_ANNOTATION = f"{LABEL_PREFIX}/jail-cluster-uid"
#: on the volume, set by an admin: `<namespace>/<name>` of the SlurmCluster the kept jail goes to next
HAND_OVER_ANNOTATION = f"{LABEL_PREFIX}/jail-hand-over-to"


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


def volume_patch(volume: Manifest, namespace: str, claim: str, retain: bool, cluster_uid: str) -> Manifest | None:
    """A merge patch that makes the jail's volume kept (Retain, labelled for re-binding, annotated with
    its SlurmCluster's UID) or given back its own policy; None when nothing is to change."""
    meta = volume["metadata"]
    policy = volume["spec"].get("persistentVolumeReclaimPolicy", "Delete")
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    if retain:
        patch: Manifest = {}
        want_annotations: dict[str, str | None] = {}
        if policy != "Retain":
            patch["spec"] = {"persistentVolumeReclaimPolicy": "Retain"}
            want_annotations[RECLAIM_WAS_ANNOTATION] = policy
        if annotations.get(JAIL_CLUSTER_UID_ANNOTATION) != cluster_uid:
            want_annotations[JAIL_CLUSTER_UID_ANNOTATION] = cluster_uid
        if HAND_OVER_ANNOTATION in annotations:  # handed over: it is this cluster's now
            want_annotations[HAND_OVER_ANNOTATION] = None
        if want_annotations:
            patch["metadata"] = {"annotations": want_annotations}
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
            "annotations": {RECLAIM_WAS_ANNOTATION: None, JAIL_CLUSTER_UID_ANNOTATION: None},
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


def belongs_to(volume: Manifest, namespace: str, name: str, cluster_uid: str) -> bool:
    """Whether a kept jail goes to the SlurmCluster ``namespace/name`` of UID ``cluster_uid``: the one it
    was kept for, or the one an admin handed it over to."""
    annotations = volume["metadata"].get("annotations") or {}
    return annotations.get(JAIL_CLUSTER_UID_ANNOTATION) == cluster_uid or (
        annotations.get(HAND_OVER_ANNOTATION) == f"{namespace}/{name}"
    )


def kept_for_another(volume: Manifest, namespace: str, name: str) -> str:
    """Why a new SlurmCluster waits for a kept jail that is not its own, and what an admin does about it."""
    pv = volume["metadata"]["name"]
    owner = (volume["metadata"].get("annotations") or {}).get(JAIL_CLUSTER_UID_ANNOTATION, "unrecorded")
    return (
        f"the kept jail of an earlier SlurmCluster {namespace}/{name} (PersistentVolume {pv}, its UID {owner}) is"
        f" not handed to this one: an admin hands it over (kubectl annotate pv {pv}"
        f" {HAND_OVER_ANNOTATION}={namespace}/{name}) or lets this cluster start on an empty jail"
        f" (kubectl label pv {pv} {JAIL_CLAIM_LABEL}-)"
    )


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
