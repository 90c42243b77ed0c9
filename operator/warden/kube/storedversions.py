"""Moving Warden's stored objects onto their CRD's storage version, so that an old version can leave.

When a release of the CRD chart changes the storage version (``spec.versions[].storage``), the objects
already in etcd stay encoded in the version they were written in, and the CRD's
``status.storedVersions`` lists both. The API server refuses to drop a version from a CRD while it is
listed there, and it is listed until someone says every object was written again. At its start the
operator does that for Warden's CRDs (``warden.model.CRD_NAMES``), the way Kubernetes documents it: every object is read
and written back unchanged through the storage version (the API server then encodes it anew), and only
when every write went through is ``storedVersions`` set to the storage version alone.

An operator that watches only some namespaces rewrites the objects in those and leaves
``storedVersions`` alone: objects elsewhere may still be in an older encoding (docs/operations.md,
"Upgrading Warden", says how an administrator finishes it).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

from kubernetes.client.exceptions import ApiException

from warden.kube.client import Kube
from warden.model import CRD_NAMES

log = logging.getLogger(__name__)

CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
#: objects listed at once
PAGE = 200


def storage_version(crd: dict[str, Any]) -> str:
    """The version the API server writes the CRD's objects in (exactly one has ``storage: true``)."""
    (name,) = [v["name"] for v in crd["spec"]["versions"] if v.get("storage")]
    return str(name)


def stored_versions(crd: dict[str, Any]) -> list[str]:
    return [str(v) for v in (crd.get("status") or {}).get("storedVersions") or []]


def needs_migration(crd: dict[str, Any]) -> bool:
    """Whether objects may be stored in a version other than the storage version."""
    return stored_versions(crd) != [storage_version(crd)]


@dataclass(frozen=True)
class Migration:
    crd: str
    storage: str
    #: ``status.storedVersions`` before
    before: tuple[str, ...]
    rewritten: int
    #: ``namespace/name: why`` of each object that could not be written again
    failed: tuple[str, ...]
    #: ``status.storedVersions`` is now the storage version alone
    done: bool

    def describe(self) -> str:
        what = f"CRD {self.crd}: {self.rewritten} objects written again as {self.storage}"
        what += f" (storedVersions was {list(self.before)})"
        if self.failed:
            return f"{what}; {len(self.failed)} could not be, storedVersions left as it was: {'; '.join(self.failed)}"
        if not self.done:
            return f"{what}; storedVersions left as it was: this operator watches only some namespaces"
        return f"{what}; storedVersions is now [{self.storage}]: older versions may leave the CRD"


def migrate(kube: Kube, name: str, namespaces: Sequence[str] = ()) -> Migration | None:
    """Write every object of the CRD ``name`` again in its storage version (only in ``namespaces`` when
    given, every namespace otherwise) and then, watching every namespace and with every write through,
    set its ``storedVersions`` to the storage version. None when there is nothing to do (or no such CRD)."""
    try:
        crd: dict[str, Any] = kube.call("GET", f"{CRD_PATH}/{name}")
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    if not needs_migration(crd):
        return None
    storage, before = storage_version(crd), tuple(stored_versions(crd))
    group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
    prefix = f"/apis/{group}/{storage}"
    rewritten, failed = 0, []
    bases = [f"{prefix}/namespaces/{ns}/{plural}" for ns in namespaces] or [f"{prefix}/{plural}"]
    for obj in chain.from_iterable(kube.pages(base, PAGE) for base in bases):
        meta = obj["metadata"]
        path = f"{prefix}/namespaces/{meta['namespace']}/{plural}/{meta['name']}"
        try:
            # unchanged, resourceVersion and all: a conflict means someone wrote it since, and that write
            # was encoded in the storage version too; gone is as good
            kube.call("PUT", path, body=obj)
            rewritten += 1
        except ApiException as e:
            if e.status not in (404, 409):
                failed.append(f"{meta['namespace']}/{meta['name']}: {e.status} {e.reason}")
    done = not failed and not namespaces
    if done:
        kube.call("PATCH", f"{CRD_PATH}/{name}/status", body={"status": {"storedVersions": [storage]}},
                  content_type="application/merge-patch+json")  # fmt: skip
    return Migration(name, storage, before, rewritten, tuple(failed), done)


def migrate_all(kube: Kube, namespaces: Sequence[str] = ()) -> list[Migration]:
    """``migrate`` each of Warden's CRDs, saying what was done in the log; an API error of one CRD is
    logged and the next one tried (the operator's next start tries again)."""
    done = []
    for name in CRD_NAMES:
        try:
            migration = migrate(kube, name, namespaces)
        except ApiException as e:
            log.warning("CRD %s: its objects could not be moved onto its storage version: %s %s (tried again"
                        " at the operator's next start)", name, e.status, e.reason)  # fmt: skip
            continue
        if migration is None:
            log.info("CRD %s: every object is stored in its storage version", name)
            continue
        (log.info if migration.done else log.warning)(migration.describe())
        done.append(migration)
    return done
