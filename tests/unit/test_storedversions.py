"""Which CRDs need their objects written again, and what the operator says it did
(``warden.kube.storedversions``; the writes themselves: tests/integration/test_crd_versions.py)."""

from __future__ import annotations

from typing import Any

from warden.kube import kinds
from warden.kube.storedversions import Migration, needs_migration, storage_version
from warden.model import CRD_NAMES


def crd(versions: list[tuple[str, bool]], stored: list[str] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"spec": {"versions": [{"name": n, "served": True, "storage": s} for n, s in versions]}}
    if stored is not None:
        body["status"] = {"storedVersions": stored}
    return body


def test_only_a_crd_whose_objects_may_be_in_another_version_needs_them_written_again() -> None:
    assert storage_version(crd([("v1alpha1", False), ("v1beta1", True)], None)) == "v1beta1"
    assert not needs_migration(crd([("v1alpha1", True)], ["v1alpha1"]))
    assert needs_migration(crd([("v1alpha1", False), ("v1beta1", True)], ["v1alpha1", "v1beta1"]))
    # the storage version moved back: what was written under the other one must move too
    assert needs_migration(crd([("v1alpha1", True), ("v1beta1", False)], ["v1beta1", "v1alpha1"]))
    assert needs_migration(crd([("v1beta1", True)], []))


def test_what_the_operator_logs_says_whether_the_old_version_may_leave() -> None:
    done = Migration("slurmclusters.slurm.warden.dev", "v1beta1", ("v1alpha1", "v1beta1"), 3, (), True)
    assert done.describe().endswith("storedVersions is now [v1beta1]: older versions may leave the CRD")
    assert "3 objects written again as v1beta1" in done.describe()
    failed = Migration("slurmclusters.slurm.warden.dev", "v1beta1", ("v1alpha1",), 2, ("ns/a: 422 Invalid",), False)
    assert "1 could not be, storedVersions left as it was: ns/a: 422 Invalid" in failed.describe()
    some = Migration("workersets.slurm.warden.dev", "v1beta1", ("v1alpha1",), 2, (), False)
    assert "watches only some namespaces" in some.describe()


def test_the_operator_may_set_stored_versions_of_wardens_crds_and_no_others() -> None:
    rules = kinds.rbac_rules(namespaced=False)
    status = {r for r in rules if r[1] == "customresourcedefinitions/status"}
    assert status == {("apiextensions.k8s.io", "customresourcedefinitions/status", "patch", ",".join(CRD_NAMES))}
    namespaced = kinds.rbac_rules(namespaced=True)
    assert {("slurm.warden.dev", p, "update", "") for p in ("slurmclusters", "workersets")} <= namespaced
