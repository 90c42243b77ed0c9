"""How a cluster's rendered objects reach the API.

Every rendered object goes through `Applier.apply`: server-side apply with field manager `warden`,
an owner reference to its SlurmCluster, and the immutable-field rules below; what is no longer
rendered is pruned (the kinds ``warden.kube.kinds`` marks ``pruned``). Writes of other kinds are the
client's (``warden.kube.client``: worker pods, their conditions, status), the Events' recorder's
(``warden.kube.events``) and the jail's (``warden.kube.retention``).

Immutable fields, handled deliberately rather than by a failing retry loop:
- StatefulSet (selector, serviceName, volumeClaimTemplates...): when the API refuses an apply as
  Invalid, the StatefulSet is deleted with `propagationPolicy=Orphan` and applied again; its pods keep
  running and are adopted by the new StatefulSet (same selector), so no Slurm node goes down.
- Job (the populate-jail pod template): when the template hash annotation differs, the Job is deleted
  (with its pods) and created again, which re-runs the populate step.
- The jail's PersistentVolumeClaim (`warden.kube.retention.apply_jail_claim`, not `apply`): created once, never patched
  but for its owner reference (`retainOnDelete`). Resizing or moving the jail is an operator's
  (person's) decision, see docs/operations.md.
- Secrets the operator generates: created once with generated values, never regenerated.

An object still terminating (a SlurmCluster deleted and made again under the same name: the old
jail claim waits for its pods to go, kept by its `pvc-protection` finalizer) is not counted as there:
the step waits (`RetryLater`) and the retry creates it afresh once it is gone.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kubernetes.client.exceptions import ApiException

from warden import opmetrics
from warden.kube import kinds
from warden.kube.client import Kube
from warden.kube.manifest import Manifest, SecretSpec
from warden.model import API_GROUP, API_VERSION
from warden.naming import AUTOSCALED_ANNOTATION, FIELD_MANAGER, TEMPLATE_HASH_ANNOTATION

log = logging.getLogger(__name__)

# How long a reconcile waits for an orphaning delete before it leaves the rest to a retry.
ORPHAN_WAIT_SECONDS = 15.0


@dataclass(frozen=True)
class Owner:
    """The SlurmCluster every child object belongs to."""

    name: str
    namespace: str
    uid: str

    def reference(self) -> Manifest:
        return {
            "apiVersion": f"{API_GROUP}/{API_VERSION}",
            "kind": "SlurmCluster",
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


@dataclass
class ApplyResult:
    """What one reconcile did, for Events and logs."""

    applied: list[str] = field(default_factory=list)
    created_secrets: list[str] = field(default_factory=list)
    recreated: list[str] = field(default_factory=list)
    #: StatefulSets whose pods the apply replaces (a pod template change), with what changed
    replaced: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    #: the API refused to make objects because the namespace is being deleted (the cluster goes with it)
    namespace_going: bool = False

    @property
    def complete(self) -> bool:
        return not self.errors and not self.waiting


def describe(obj: Manifest) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


class Applier:
    """Server-side apply of a cluster's rendered objects, with the rules above, and pruning."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    def mark_pods(self, namespace: str, selector: dict[str, str], key: str, value: str) -> None:
        """Set annotation `key` to `value` on every live pod matching `selector` that lacks it. A pod's
        metadata change makes its kubelet sync the pod at once, which refreshes its ConfigMap and Secret
        volumes (otherwise they follow within the kubelet's sync period, about a minute). The pod is
        not restarted: only its template, not its own annotations, could do that."""
        for pod in self.kube.list("v1", "Pod", namespace, selector):
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") or (meta.get("annotations") or {}).get(key) == value:
                continue
            path = Kube.path("v1", "Pod", namespace, meta["name"])
            if self.kube.patch_pod(path, {"metadata": {"annotations": {key: value}}}):
                log.info("pod %s: marked with configuration %s", meta["name"], value)

    def apply(self, obj: Manifest, owner: Owner | None, result: ApplyResult) -> None:
        obj = with_owner(obj, owner)
        kind = obj["kind"]
        meta = obj["metadata"]
        if kind == "Job":
            self._replace_job_if_changed(obj, result)
        if kind == "ServiceMonitor" and not self.kube.serves(obj["apiVersion"], kind):
            raise ApiException(
                status=404,
                reason="the API serves no monitoring.coreos.com/v1 ServiceMonitor: install the Prometheus Operator's "
                "CRDs, or set spec.metrics.serviceMonitor.mode to Auto (made once the CRD is there) or Disabled",
            )
        if (meta.get("annotations") or {}).get(AUTOSCALED_ANNOTATION) == "true":
            obj = self._without_replicas(obj)
        try:
            applied = self.kube.server_side_apply(obj)
        except ApiException as e:
            if kind == "StatefulSet" and e.status == 422:
                log.info("StatefulSet %s: immutable field changed, re-creating (pods orphaned)", meta["name"])
                self.kube.delete(obj["apiVersion"], kind, meta["namespace"], meta["name"], "Orphan")
                result.recreated.append(describe(obj))
                # The garbage collector orphans the pods, then lets the object go; until then an
                # apply would patch the old, terminating object and fail the same way.
                if not self._wait_gone(obj, ORPHAN_WAIT_SECONDS):
                    raise RetryLater(f"StatefulSet {meta['name']} is still being deleted") from e
                applied = self.kube.server_side_apply(obj)
            else:
                raise
        not_terminating(applied)
        result.applied.append(describe(obj))

    def _without_replicas(self, obj: Manifest) -> Manifest:
        """An autoscaled group's WorkerSet: created (a plain create, so the apply below never owns
        the field) with the rendered `replicas` as its first size; applied without `replicas` ever
        after, which stays whatever the scale subresource (HPA, KEDA, `kubectl scale`) sets."""
        meta = obj["metadata"]
        if self.kube.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]) is None:
            try:
                self.kube.call("POST", Kube.path(obj["apiVersion"], obj["kind"], meta["namespace"]), body=obj,
                           query=[("fieldManager", FIELD_MANAGER)])  # fmt: skip
            except ApiException as e:
                if e.status != 409:  # made meanwhile: fine
                    raise
        spec = {k: v for k, v in obj["spec"].items() if k != "replicas"}
        return {**obj, "spec": spec}

    def _wait_gone(self, obj: Manifest, timeout: float) -> bool:
        meta = obj["metadata"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.kube.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]) is None:
                return True
            time.sleep(0.2)
        return False

    def create_if_absent(self, obj: Manifest, result: ApplyResult) -> bool:
        meta = obj["metadata"]
        current = self.kube.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        if current is not None:
            not_terminating(current)
            return False
        try:
            self.kube.call("POST", Kube.path(obj["apiVersion"], obj["kind"], meta["namespace"]), body=obj)
        except ApiException as e:
            if e.status == 409:  # made by a concurrent or earlier, interrupted reconcile
                return False
            raise
        result.applied.append(describe(obj))
        return True

    def _replace_job_if_changed(self, obj: Manifest, result: ApplyResult) -> None:
        meta = obj["metadata"]
        current = self.kube.get(obj["apiVersion"], "Job", meta["namespace"], meta["name"])
        if current is None:
            return
        want = meta.get("annotations", {}).get(TEMPLATE_HASH_ANNOTATION)
        have = current["metadata"].get("annotations", {}).get(TEMPLATE_HASH_ANNOTATION)
        if want == have:
            return
        if current["metadata"].get("deletionTimestamp"):
            raise RetryLater(f"Job {meta['name']} is still being deleted")
        self.kube.delete(obj["apiVersion"], "Job", meta["namespace"], meta["name"], "Background")
        result.recreated.append(describe(obj))
        raise RetryLater(f"Job {meta['name']} replaced; re-creating it once the old one is gone")

    def ensure_secret(self, spec: SecretSpec, owner: Owner | None, result: ApplyResult) -> None:
        """Create the Secret with freshly generated values if, and only if, it does not exist."""
        obj = with_owner(spec.manifest, owner)
        meta = obj["metadata"]
        current = self.kube.get("v1", "Secret", meta["namespace"], meta["name"])
        if current is not None:
            not_terminating(current)
            return
        body = {**obj, "stringData": spec.generate()}
        try:
            self.kube.call("POST", Kube.path("v1", "Secret", meta["namespace"]), body=body)
        except ApiException as e:
            if e.status == 409:
                return
            raise
        result.created_secrets.append(meta["name"])

    def prune(self, owner: Owner, selector: dict[str, str], keep: Iterable[Manifest], result: ApplyResult) -> None:
        """Delete objects this cluster owns that are no longer rendered."""
        wanted = {(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in keep}
        for k in kinds.PRUNED:
            if k.optional and not self.kube.serves(k.api_version, k.kind):
                continue
            for item in self.kube.list(k.api_version, k.kind, owner.namespace, selector):
                name = item["metadata"]["name"]
                if (k.api_version, k.kind, name) in wanted or not owned_by(item, owner):
                    continue
                if self.kube.delete(k.api_version, k.kind, owner.namespace, name, "Background"):
                    result.pruned.append(f"{k.kind}/{name}")


class RetryLater(Exception):
    """A step must wait for the API to catch up (e.g. an object still being deleted)."""


def not_terminating(current: Manifest) -> None:
    """Raise RetryLater when the object is being deleted: it will be gone, not kept."""
    meta = current.get("metadata", {})
    if meta.get("deletionTimestamp"):
        finalizers = ", ".join(meta.get("finalizers", [])) or "none"
        raise RetryLater(
            f"{current.get('kind', 'object')} {meta.get('name')} is still being deleted (finalizers: {finalizers});"
            " it is made again once it is gone"
        )


def with_owner(obj: Manifest, owner: Owner | None) -> Manifest:
    if owner is None:
        return obj
    meta = {**obj["metadata"], "ownerReferences": [owner.reference()]}
    return {**obj, "metadata": meta}


def owned_by(obj: Manifest, owner: Owner) -> bool:
    return any(ref.get("uid") == owner.uid for ref in obj["metadata"].get("ownerReferences", []))


def run_steps(steps: Iterable[tuple[str, Callable[[], None]]], result: ApplyResult, cluster: str = "") -> None:
    """Run every step even when some fail; failures are collected for one Warning Event each and
    counted by step kind (``warden_reconcile_step_errors_total``)."""
    for label, step in steps:
        try:
            step()
        except RetryLater as e:
            result.waiting.append(f"{label}: {e}")
        except ApiException as e:
            reason = _api_error_message(e)
            log.warning("%s failed: %s", label, reason)
            result.errors.append(f"{label}: {reason}")
            result.namespace_going |= e.status == 403 and "because it is being terminated" in reason
            opmetrics.STEP_ERRORS.labels(cluster, label.split("/")[0]).inc()


def _api_error_message(e: ApiException) -> str:
    try:
        body = json.loads(e.body or "{}")
        return str(body.get("message") or e.reason)
    except (ValueError, TypeError):
        return str(e.reason)
