"""What the operator changes on the jail's claim and volume so homes outlive the SlurmCluster."""

from __future__ import annotations

from typing import Any

from warden.retention import (
    HAND_OVER_ANNOTATION,
    JAIL_CLAIM_LABEL,
    JAIL_CLUSTER_UID_ANNOTATION,
    JAIL_NAMESPACE_LABEL,
    RECLAIM_WAS_ANNOTATION,
    belongs_to,
    kept_for_another,
    owner_references,
    rebind,
    retained_volume,
    volume_patch,
)

OURS = {"apiVersion": "slurm.warden.dev/v1alpha1", "kind": "SlurmCluster", "name": "demo", "uid": "new"}
OLD = {**OURS, "uid": "old"}  # a deleted SlurmCluster of the same name
OTHER = {"apiVersion": "example.com/v1", "kind": "Backup", "name": "nightly", "uid": "b"}


def _claim(*refs: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "demo-jail", "namespace": "ns", "ownerReferences": list(refs)}, "spec": {}}


def _volume(policy: str = "Delete", phase: str = "Bound", **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "pvc-1", "creationTimestamp": "2026-11-01T00:00:00Z", **meta},
        "spec": {"persistentVolumeReclaimPolicy": policy, "storageClassName": "nfs", "capacity": {"storage": "30Gi"}},
        "status": {"phase": phase},
    }


def test_a_retained_jail_loses_every_slurmcluster_owner_and_keeps_others() -> None:
    assert owner_references(_claim(OLD, OTHER), OURS, retain=True) == [OTHER]
    assert owner_references(_claim(OTHER), OURS, retain=True) is None


def test_deletion_asked_for_makes_this_slurmcluster_the_only_slurmcluster_owner() -> None:
    assert owner_references(_claim(), OURS, retain=False) == [OURS]
    assert owner_references(_claim(OLD), OURS, retain=False) == [OURS]
    assert owner_references(_claim(OURS), OURS, retain=False) is None


def test_a_kept_volume_gets_retain_remembers_its_policy_and_names_its_claim() -> None:
    patch = volume_patch(_volume("Delete"), "ns", "demo-jail", retain=True, cluster_uid="new")
    assert patch == {
        "spec": {"persistentVolumeReclaimPolicy": "Retain"},
        "metadata": {
            "annotations": {RECLAIM_WAS_ANNOTATION: "Delete", JAIL_CLUSTER_UID_ANNOTATION: "new"},
            "labels": {JAIL_NAMESPACE_LABEL: "ns", JAIL_CLAIM_LABEL: "demo-jail"},
        },
    }
    labelled = _volume("Retain", labels={JAIL_NAMESPACE_LABEL: "ns", JAIL_CLAIM_LABEL: "demo-jail"},
                       annotations={JAIL_CLUSTER_UID_ANNOTATION: "new"})  # fmt: skip
    assert volume_patch(labelled, "ns", "demo-jail", retain=True, cluster_uid="new") is None
    # Retain already (the class's choice): only labelled and annotated, nothing to give back later
    assert volume_patch(_volume("Retain"), "ns", "demo-jail", retain=True, cluster_uid="new") == {
        "metadata": {
            "annotations": {JAIL_CLUSTER_UID_ANNOTATION: "new"},
            "labels": {JAIL_NAMESPACE_LABEL: "ns", JAIL_CLAIM_LABEL: "demo-jail"},
        }
    }


def test_a_kept_jail_goes_back_to_its_own_cluster_or_where_an_admin_hands_it() -> None:
    """Matched by the SlurmCluster's UID, which a new cluster of the same namespace and name does not have;
    an admin's annotation on the volume hands it to a named cluster, and is gone once that cluster holds it."""
    kept = _volume("Retain", "Released", annotations={JAIL_CLUSTER_UID_ANNOTATION: "old"})
    assert belongs_to(kept, "ns", "demo", "old")
    assert not belongs_to(kept, "ns", "demo", "new")
    assert "kubectl annotate pv pvc-1 slurm.warden.dev/jail-hand-over-to=ns/demo" in kept_for_another(
        kept, "ns", "demo"
    )
    assert not belongs_to(_volume("Retain", "Released"), "ns", "demo", "new"), "kept by an older operator: asked for"
    handed = _volume(
        "Retain", "Released", annotations={JAIL_CLUSTER_UID_ANNOTATION: "old", HAND_OVER_ANNOTATION: "ns/demo"}
    )
    assert belongs_to(handed, "ns", "demo", "new") and not belongs_to(handed, "ns", "other", "new")
    patch = volume_patch(handed, "ns", "demo-jail", retain=True, cluster_uid="new")
    assert patch is not None
    assert patch["metadata"]["annotations"] == {JAIL_CLUSTER_UID_ANNOTATION: "new", HAND_OVER_ANNOTATION: None}


def test_turning_retention_off_gives_the_volume_its_own_policy_back() -> None:
    kept = _volume("Retain", annotations={RECLAIM_WAS_ANNOTATION: "Delete"})
    patch = volume_patch(kept, "ns", "demo-jail", retain=False, cluster_uid="new")
    assert patch is not None and patch["spec"] == {"persistentVolumeReclaimPolicy": "Delete"}
    assert patch["metadata"]["annotations"] == {RECLAIM_WAS_ANNOTATION: None, JAIL_CLUSTER_UID_ANNOTATION: None}
    assert volume_patch(_volume("Retain"), "ns", "demo-jail", retain=False, cluster_uid="new") is None  # never ours


def test_the_newest_released_volume_of_this_claim_is_bound_again() -> None:
    labels = {JAIL_NAMESPACE_LABEL: "ns", JAIL_CLAIM_LABEL: "demo-jail"}
    older = _volume("Retain", "Released", labels=labels)
    newer = _volume("Retain", "Released", labels=labels, creationTimestamp="2026-11-20T00:00:00Z", name="pvc-2")
    bound = _volume("Retain", "Bound", labels=labels, name="pvc-3")
    elsewhere = _volume("Retain", "Released", labels={**labels, JAIL_NAMESPACE_LABEL: "other"}, name="pvc-4")
    assert retained_volume([older, newer, bound, elsewhere], "ns", "demo-jail") is newer
    assert retained_volume([bound, elsewhere], "ns", "demo-jail") is None


def test_rebinding_names_the_volume_its_class_and_no_more_than_it_holds() -> None:
    claim: dict[str, Any] = {
        "metadata": {"name": "demo-jail", "namespace": "ns"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "50Gi"}}},
    }
    made, reserve = rebind(claim, _volume("Retain", "Released"))
    assert made["spec"]["volumeName"] == "pvc-1" and made["spec"]["storageClassName"] == "nfs"
    assert made["spec"]["resources"] == {"requests": {"storage": "30Gi"}}
    assert reserve["spec"]["claimRef"]["name"] == "demo-jail" and reserve["spec"]["claimRef"]["uid"] is None
    assert claim["spec"]["resources"]["requests"]["storage"] == "50Gi"  # the rendered claim is untouched
