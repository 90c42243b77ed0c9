"""The jail's kept volume bound again (``warden.kube.retention``): reserved for the new claim only if the
claim can be made. The API is an in-memory stand-in that refuses the claim as a namespace being deleted
does (tests/integration/test_operator.py binds a kept volume for real)."""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest
from kubernetes.client.exceptions import ApiException

from warden.kube.apply import Applier, ApplyResult, Owner, run_steps
from warden.kube.client import Kube
from warden.kube.retention import apply_jail_claim
from warden.retention import HAND_OVER_ANNOTATION, JAIL_CLAIM_LABEL, JAIL_CLUSTER_UID_ANNOTATION, JAIL_NAMESPACE_LABEL

OLD_REF: dict[str, Any] = {"kind": "PersistentVolumeClaim", "namespace": "hpc", "name": "demo-jail", "uid": "old-uid",
           "resourceVersion": "41"}  # fmt: skip
VOLUME: dict[str, Any] = {
    "metadata": {"name": "pv-jail", "labels": {JAIL_NAMESPACE_LABEL: "hpc", JAIL_CLAIM_LABEL: "demo-jail"},
                 "annotations": {JAIL_CLUSTER_UID_ANNOTATION: "cluster-uid"}},
    "spec": {"capacity": {"storage": "10Gi"}, "storageClassName": "nfs", "persistentVolumeReclaimPolicy": "Retain",
             "claimRef": OLD_REF},
    "status": {"phase": "Released"},
}  # fmt: skip
CLAIM: dict[str, Any] = {
    "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "demo-jail", "namespace": "hpc"},
    "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "10Gi"}}},
}  # fmt: skip


class TerminatingNamespace:
    """No claim yet, the kept volume, and a namespace that refuses new objects."""

    def __init__(self, refuse: bool, annotations: dict[str, str] | None = None) -> None:
        self.volume: dict[str, Any] = copy.deepcopy(VOLUME)
        if annotations is not None:
            self.volume["metadata"]["annotations"] = annotations
        self.refuse = refuse
        self.created: list[str] = []

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return None  # no claim of that name (yet)

    def list(self, api_version: str, kind: str, namespace: str, selector: dict[str, str]) -> list[dict[str, Any]]:
        return [copy.deepcopy(self.volume)]

    def merge_patch(self, api_version: str, kind: str, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.volume["spec"].update(patch["spec"])

    def call(self, method: str, path: str, body: Any = None, **_: Any) -> Any:
        if self.refuse:
            message = (
                'persistentvolumeclaims "demo-jail" is forbidden: unable to create new content in namespace hpc'
                " because it is being terminated"
            )
            raise ApiException(status=403, reason=message)
        self.created.append(body["metadata"]["name"])
        return body


def _apply(kube: TerminatingNamespace) -> ApplyResult:
    result = ApplyResult()
    applier = Applier(cast(Kube, kube))
    owner = Owner(name="demo", namespace="hpc", uid="cluster-uid")
    run_steps(
        [("PersistentVolumeClaim/demo-jail", lambda: apply_jail_claim(applier, CLAIM, owner, True, result))], result
    )
    return result


def test_a_kept_volume_is_reserved_for_the_new_claim_and_the_claim_names_it() -> None:
    kube = TerminatingNamespace(refuse=False)
    result = _apply(kube)
    assert result.complete and kube.created == ["demo-jail"]
    ref = kube.volume["spec"]["claimRef"]
    assert (ref["name"], ref["namespace"], ref["uid"]) == ("demo-jail", "hpc", None)


def test_a_claim_that_cannot_be_made_leaves_the_kept_volume_as_it_was() -> None:
    kube = TerminatingNamespace(refuse=True)
    result = _apply(kube)
    assert kube.created == [] and not result.complete
    assert kube.volume["spec"]["claimRef"] == OLD_REF, "still Released for a later claim, not reserved"
    assert result.namespace_going, "a namespace being deleted: no heal is tried again"


@pytest.mark.parametrize("status", [403, 409, 500])
def test_only_a_namespace_being_deleted_counts_as_going(status: int) -> None:
    result = ApplyResult()

    def refused() -> None:
        raise ApiException(status=status, reason="quota exceeded" if status == 403 else "conflict")

    run_steps([("ConfigMap/x", refused)], result)
    assert not result.complete and not result.namespace_going


def test_a_kept_jail_of_another_cluster_of_that_name_waits_for_an_admin() -> None:
    """A SlurmCluster made again in a namespace of the same name (by anyone) has another UID: the kept jail
    is neither reserved nor bound, and the cluster waits, saying how an admin hands it over."""
    kube = TerminatingNamespace(refuse=False, annotations={JAIL_CLUSTER_UID_ANNOTATION: "an-earlier-uid"})
    result = _apply(kube)
    assert kube.created == [] and kube.volume["spec"]["claimRef"] == OLD_REF
    (waiting,) = result.waiting
    assert f"{HAND_OVER_ANNOTATION}=hpc/demo" in waiting and "an-earlier-uid" in waiting


def test_a_kept_jail_handed_over_by_an_admin_is_bound() -> None:
    kube = TerminatingNamespace(refuse=False, annotations={JAIL_CLUSTER_UID_ANNOTATION: "an-earlier-uid",
                                                           HAND_OVER_ANNOTATION: "hpc/demo"})  # fmt: skip
    result = _apply(kube)
    assert result.complete and kube.created == ["demo-jail"]
