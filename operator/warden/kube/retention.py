"""The jail's claim and volume in the API, as ``warden.retention`` (pure) plans them: created once,
bound again to the volume a deleted claim of the same name left, then only its ownership and its
volume's reclaim policy follow `retainOnDelete`, so homes can outlive the SlurmCluster, its Helm
release and its namespace."""

from __future__ import annotations

import logging

from kubernetes.client.exceptions import ApiException

from warden import retention
from warden.kube.apply import Applier, ApplyResult, Owner, RetryLater, not_terminating, with_owner
from warden.kube.client import Kube
from warden.kube.manifest import Manifest

log = logging.getLogger(__name__)


def apply_jail_claim(applier: Applier, obj: Manifest, owner: Owner, retain: bool, result: ApplyResult) -> None:
    """The jail's claim: created once (bound to the kept volume when the jail is retained), then it and
    its volume follow `retainOnDelete`."""
    kube = applier.kube
    meta = obj["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    current = kube.get("v1", "PersistentVolumeClaim", namespace, name)
    if current is None:
        if retain:
            selector = {retention.JAIL_NAMESPACE_LABEL: namespace, retention.JAIL_CLAIM_LABEL: name}
            kept = retention.retained_volume(kube.list("v1", "PersistentVolume", "", selector), namespace, name)
            if kept is not None:
                if not retention.belongs_to(kept, namespace, owner.name, owner.uid):
                    raise RetryLater(retention.kept_for_another(kept, namespace, owner.name))
                _rebind(applier, kept, obj, result)
                return
        applier.create_if_absent(with_owner(obj, None if retain else owner), result)
        return
    not_terminating(current)
    set_jail_retention(kube, current, owner, retain)


def _rebind(applier: Applier, kept: Manifest, claim: Manifest, result: ApplyResult) -> None:
    """Reserve the kept volume for a new claim of its old name, then make the claim. When the claim
    cannot be made (its namespace being deleted, a quota), the volume gets its old claimRef back: it
    stays Released, kept for a later claim, not reserved for one that never came."""
    kube, volume = applier.kube, kept["metadata"]["name"]
    claim, reserve = retention.rebind(claim, kept)
    kube.merge_patch("v1", "PersistentVolume", "", volume, reserve)
    try:
        applier.create_if_absent(claim, result)
    except ApiException:
        kube.merge_patch("v1", "PersistentVolume", "", volume, {"spec": {"claimRef": kept["spec"].get("claimRef")}})
        raise
    meta = claim["metadata"]
    log.info("jail %s/%s: binding the kept volume %s", meta["namespace"], meta["name"], volume)
    result.applied.append(f"PersistentVolume/{volume} (the kept jail, bound again)")


def set_jail_retention(kube: Kube, claim: Manifest, owner: Owner, retain: bool) -> None:
    """Make an existing jail claim, and its volume once bound, follow `retainOnDelete`."""
    meta = claim["metadata"]
    refs = retention.owner_references(claim, owner.reference(), retain)
    if refs is not None:
        kube.merge_patch("v1", "PersistentVolumeClaim", meta["namespace"], meta["name"],
                         {"metadata": {"ownerReferences": refs}})  # fmt: skip
    volume_name = (claim.get("spec") or {}).get("volumeName")
    if not volume_name:
        return  # not bound yet: the claim's event handler comes back once it is
    volume = kube.get("v1", "PersistentVolume", "", volume_name)
    patch = retention.volume_patch(volume, meta["namespace"], meta["name"], retain, owner.uid) if volume else None
    if patch is not None:
        kube.merge_patch("v1", "PersistentVolume", "", volume_name, patch)
