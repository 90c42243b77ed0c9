"""The one layer that writes to the Kubernetes API.

Every rendered object goes through `Applier.apply`: server-side apply with field manager `warden`,
an owner reference to its SlurmCluster, and the immutable-field rules below. Nothing else in the
operator creates, patches or deletes objects.

Immutable fields, handled deliberately rather than by a failing retry loop:
- StatefulSet (selector, serviceName, volumeClaimTemplates...): when the API refuses an apply as
  Invalid, the StatefulSet is deleted with `propagationPolicy=Orphan` and applied again; its pods keep
  running and are adopted by the new StatefulSet (same selector), so no Slurm node goes down.
- Job (the populate-jail pod template): when the template hash annotation differs, the Job is deleted
  (with its pods) and created again, which re-runs the populate step.
- The jail's PersistentVolumeClaim (`apply_jail_claim`, not `apply`): created once, never patched
  but for its owner reference (`retainOnDelete`). Resizing or moving the jail is an operator's
  (person's) decision, see docs/operations.md.
- Secrets the operator generates: created once with generated values, never regenerated.

An object still terminating (a SlurmCluster deleted and made again under the same name: the old
jail claim waits for its pods to go, kept by its `pvc-protection` finalizer) is not counted as there:
the step waits (`RetryLater`) and the retry creates it afresh once it is gone.
"""

from __future__ import annotations

import datetime
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from warden import events, opmetrics, retention
from warden.model import API_GROUP, API_VERSION, PLURAL, WORKER_SET_KIND, WORKER_SET_PLURAL
from warden.naming import AUTOSCALED_ANNOTATION, FIELD_MANAGER
from warden.render.jail import TEMPLATE_HASH_ANNOTATION
from warden.render.pods import Manifest
from warden.render.secrets import SecretSpec

log = logging.getLogger(__name__)

# How long a reconcile waits for an orphaning delete before it leaves the rest to a retry.
ORPHAN_WAIT_SECONDS = 15.0

# (apiVersion, kind) -> (URL prefix, plural). A fixed table: no discovery round-trips.
KINDS: dict[tuple[str, str], tuple[str, str]] = {
    ("v1", "ConfigMap"): ("/api/v1", "configmaps"),
    ("v1", "Secret"): ("/api/v1", "secrets"),
    ("v1", "Service"): ("/api/v1", "services"),
    ("v1", "ServiceAccount"): ("/api/v1", "serviceaccounts"),
    ("v1", "PersistentVolumeClaim"): ("/api/v1", "persistentvolumeclaims"),
    ("v1", "PersistentVolume"): ("/api/v1", "persistentvolumes"),  # cluster-scoped: namespace ""
    ("v1", "Pod"): ("/api/v1", "pods"),
    ("apps/v1", "StatefulSet"): ("/apis/apps/v1", "statefulsets"),
    ("apps/v1", "Deployment"): ("/apis/apps/v1", "deployments"),
    ("batch/v1", "Job"): ("/apis/batch/v1", "jobs"),
    ("policy/v1", "PodDisruptionBudget"): ("/apis/policy/v1", "poddisruptionbudgets"),
    ("networking.k8s.io/v1", "NetworkPolicy"): ("/apis/networking.k8s.io/v1", "networkpolicies"),
    ("batch/v1", "CronJob"): ("/apis/batch/v1", "cronjobs"),
    ("rbac.authorization.k8s.io/v1", "Role"): ("/apis/rbac.authorization.k8s.io/v1", "roles"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): ("/apis/rbac.authorization.k8s.io/v1", "rolebindings"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): ("/apis/monitoring.coreos.com/v1", "servicemonitors"),
    (f"{API_GROUP}/{API_VERSION}", "SlurmCluster"): (f"/apis/{API_GROUP}/{API_VERSION}", PLURAL),
    (f"{API_GROUP}/{API_VERSION}", WORKER_SET_KIND): (f"/apis/{API_GROUP}/{API_VERSION}", WORKER_SET_PLURAL),
}

# Kinds the operator prunes when they are no longer rendered (a removed worker group, accounting
# switched off). Secrets and PVCs are never pruned: they hold data a person would not want lost.
PRUNABLE = [
    ("v1", "ConfigMap"),
    ("v1", "Service"),
    ("v1", "ServiceAccount"),
    ("apps/v1", "StatefulSet"),
    (f"{API_GROUP}/{API_VERSION}", WORKER_SET_KIND),
    ("apps/v1", "Deployment"),
    ("batch/v1", "Job"),
    ("batch/v1", "CronJob"),
    ("policy/v1", "PodDisruptionBudget"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),  # skipped where the API does not serve it
]
#: how long an answer of API discovery (``Applier.serves``) is trusted
DISCOVERY_TTL_SECONDS = 60.0


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

    @property
    def complete(self) -> bool:
        return not self.errors and not self.waiting


def describe(obj: Manifest) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


class Applier:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self._served: dict[tuple[str, str], tuple[float, bool]] = {}
        #: who posts Events (in a pod: the pod's name)
        self.instance = socket.gethostname()
        #: Event key -> (name of the Event in the API, occurrences, when first posted (monotonic)),
        #: in order of first posting
        self._events: dict[tuple[Any, ...], tuple[str, int, float]] = {}
        self._events_lock = threading.Lock()

    def serves(self, api_version: str, kind: str) -> bool:
        """Whether the API serves this kind now (a CRD installed), asked at most once a minute."""
        now = time.monotonic()
        cached = self._served.get((api_version, kind))
        if cached is not None and now - cached[0] < DISCOVERY_TTL_SECONDS:
            return cached[1]
        prefix, plural = KINDS[(api_version, kind)]
        try:
            resources = self._call("GET", prefix).get("resources", [])
            served = any(r.get("name") == plural for r in resources)
        except ApiException as e:
            if e.status != 404:
                raise
            served = False
        self._served[(api_version, kind)] = (now, served)
        return served

    # --- low level ------------------------------------------------------------------------------
    def _path(self, api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
        prefix, plural = KINDS[(api_version, kind)]
        path = f"{prefix}/namespaces/{namespace}/{plural}" if namespace else f"{prefix}/{plural}"
        return f"{path}/{name}" if name else path

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        # apply-patch+yaml goes as text (JSON is YAML); the JSON types as objects.
        payload = json.dumps(body) if content_type.endswith("yaml") else body
        method, url, headers, data, post = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            body=payload,
            auth_settings=["BearerToken"],
        )
        if method != "GET":
            opmetrics.API_WRITES.labels(method, opmetrics.api_resource(path)).inc()
        response = self.api.call_api(method, url, header_params=headers, body=data, post_params=post)
        response.read()  # type: ignore[no-untyped-call]
        text = response.data.decode() if response.data else ""
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=text, data=None)
        return json.loads(text) if text else {}

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> Manifest | None:
        try:
            out: Manifest = self._call("GET", self._path(api_version, kind, namespace, name))
            return out
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str, selector: dict[str, str]) -> list[Manifest]:
        query = [("labelSelector", ",".join(f"{k}={v}" for k, v in sorted(selector.items())))]
        out = self._call("GET", self._path(api_version, kind, namespace), query=query)
        items: list[Manifest] = out.get("items", [])
        return items

    def delete(self, api_version: str, kind: str, namespace: str, name: str, propagation: str) -> bool:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        try:
            self._call("DELETE", self._path(api_version, kind, namespace, name), body=body)
            return True
        except ApiException as e:
            if e.status == 404:
                return False
            raise

    def merge_patch(self, api_version: str, kind: str, namespace: str, name: str, patch: Manifest) -> None:
        self._call("PATCH", self._path(api_version, kind, namespace, name), body=patch,
                   content_type="application/merge-patch+json")  # fmt: skip

    def server_side_apply(self, obj: Manifest) -> Manifest:
        meta = obj["metadata"]
        path = self._path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        out: Manifest = self._call("PATCH", path, body=obj, query=query, content_type="application/apply-patch+yaml")
        return out

    def patch_status(self, name: str, namespace: str, status: Manifest, kind: str = "SlurmCluster") -> None:
        path = self._path(f"{API_GROUP}/{API_VERSION}", kind, namespace, name) + "/status"
        self._call("PATCH", path, body={"status": status}, content_type="application/merge-patch+json")

    def create(self, obj: Manifest) -> bool:
        """Create an object as given (worker pods: made once, never applied again); False when one of
        that name exists already."""
        meta = obj["metadata"]
        path = self._path(obj["apiVersion"], obj["kind"], meta["namespace"])
        try:
            self._call("POST", path, body=obj, query=[("fieldManager", FIELD_MANAGER)])
            return True
        except ApiException as e:
            if e.status == 409:
                return False
            raise

    def get_node(self, name: str) -> Manifest | None:
        """A Kubernetes Node (cluster-scoped)."""
        try:
            out: Manifest = self._call("GET", f"/api/v1/nodes/{name}")
            return out
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def set_pod_condition(self, namespace: str, pod: str, condition: Manifest) -> None:
        """Add or replace one condition of a pod's status (conditions merge by type; the kubelet keeps
        types it does not own, as it does for readiness gates)."""
        path = self._path("v1", "Pod", namespace, pod) + "/status"
        self._patch_pod(path, {"status": {"conditions": [condition]}}, "application/strategic-merge-patch+json")

    def set_pod_label(self, namespace: str, pod: str, key: str, value: str | None) -> None:
        """Set (or, with None, remove) one label of a pod; a pod gone meanwhile needs nothing."""
        self._patch_pod(self._path("v1", "Pod", namespace, pod), {"metadata": {"labels": {key: value}}})

    def set_pod_annotation(self, namespace: str, pod: str, key: str, value: str | None) -> None:
        """Set (or, with None, remove) one annotation of a pod; a pod gone meanwhile needs nothing."""
        self._patch_pod(self._path("v1", "Pod", namespace, pod), {"metadata": {"annotations": {key: value}}})

    def _patch_pod(self, path: str, body: Manifest, content_type: str = "application/merge-patch+json") -> bool:
        """PATCH a pod (or its status); False when it is gone meanwhile, which then needs nothing."""
        try:
            self._call("PATCH", path, body=body, content_type=content_type)
            return True
        except ApiException as e:
            if e.status != 404:
                raise
            return False

    def post_event(self, event: events.Event) -> None:
        """Tell people through an `events.k8s.io/v1` Event (``warden.events``). The same Event again
        within the series window counts up the first one's series instead of making another. Best
        effort: an Event that cannot be written is logged, and nothing else fails for it."""
        now = datetime.datetime.now(datetime.UTC)
        key = event.key()
        with self._events_lock:
            self._forget_old_events(time.monotonic())
            seen = self._events.get(key)
            if seen is not None:
                name, count, first = seen
                self._events[key] = (name, count + 1, first)
        try:
            if seen is not None and self._count_up(event.regarding.namespace, name, count + 1, now):
                return
            made = self._call(
                "POST",
                f"/apis/events.k8s.io/v1/namespaces/{event.regarding.namespace}/events",
                body=events.manifest(event, self.instance, now),
            )
        except ApiException as e:
            log.warning("Event %s about %s not posted: %s", event.reason, event.regarding.name, e.reason)
            return
        with self._events_lock:
            self._events.pop(key, None)  # to the end: the dict stays in order of first posting
            self._events[key] = (made["metadata"]["name"], 1, time.monotonic())

    def _count_up(self, namespace: str, name: str, count: int, now: datetime.datetime) -> bool:
        """Record one more occurrence on Event ``name``; False when it is gone (expired, deleted)."""
        path = f"/apis/events.k8s.io/v1/namespaces/{namespace}/events/{name}"
        try:
            self._call("PATCH", path, body=events.series_patch(count, now), content_type="application/merge-patch+json")
            return True
        except ApiException as e:
            if e.status != 404:
                raise
            return False

    def _forget_old_events(self, now: float) -> None:
        """Drop the Events first posted longer ago than the series window: the oldest come first,
        so this stops at the first one still in it (no walk over every Event at each post)."""
        while self._events:
            key, (_, _, first) = next(iter(self._events.items()))
            if now - first <= events.SERIES_WINDOW_SECONDS:
                return
            del self._events[key]

    # --- what reconciles use --------------------------------------------------------------------
    def mark_pods(self, namespace: str, selector: dict[str, str], key: str, value: str) -> None:
        """Set annotation `key` to `value` on every live pod matching `selector` that lacks it. A pod's
        metadata change makes its kubelet sync the pod at once, which refreshes its ConfigMap and Secret
        volumes (otherwise they follow within the kubelet's sync period, about a minute). The pod is
        not restarted: only its template, not its own annotations, could do that."""
        for pod in self.list("v1", "Pod", namespace, selector):
            meta = pod["metadata"]
            if meta.get("deletionTimestamp") or (meta.get("annotations") or {}).get(key) == value:
                continue
            path = self._path("v1", "Pod", namespace, meta["name"])
            if self._patch_pod(path, {"metadata": {"annotations": {key: value}}}):
                log.info("pod %s: marked with configuration %s", meta["name"], value)

    def apply(self, obj: Manifest, owner: Owner | None, result: ApplyResult) -> None:
        obj = with_owner(obj, owner)
        kind = obj["kind"]
        meta = obj["metadata"]
        if kind == "Job":
            self._replace_job_if_changed(obj, result)
        if kind == "ServiceMonitor" and not self.serves(obj["apiVersion"], kind):
            raise ApiException(
                status=404,
                reason="the API serves no monitoring.coreos.com/v1 ServiceMonitor: install the Prometheus Operator's "
                "CRDs, or set spec.metrics.serviceMonitor.mode to Auto (made once the CRD is there) or Disabled",
            )
        if (meta.get("annotations") or {}).get(AUTOSCALED_ANNOTATION) == "true":
            obj = self._without_replicas(obj)
        try:
            applied = self.server_side_apply(obj)
        except ApiException as e:
            if kind == "StatefulSet" and e.status == 422:
                log.info("StatefulSet %s: immutable field changed, re-creating (pods orphaned)", meta["name"])
                self.delete(obj["apiVersion"], kind, meta["namespace"], meta["name"], "Orphan")
                result.recreated.append(describe(obj))
                # The garbage collector orphans the pods, then lets the object go; until then an
                # apply would patch the old, terminating object and fail the same way.
                if not self._wait_gone(obj, ORPHAN_WAIT_SECONDS):
                    raise RetryLater(f"StatefulSet {meta['name']} is still being deleted") from e
                applied = self.server_side_apply(obj)
            else:
                raise
        _not_terminating(applied)
        result.applied.append(describe(obj))

    def apply_jail_claim(self, obj: Manifest, owner: Owner, retain: bool, result: ApplyResult) -> None:
        """The jail's claim: created once (bound again to the volume a deleted claim of the same name
        left, when the jail is retained), then only its ownership and its volume's reclaim policy follow
        `retainOnDelete` (``warden.retention``)."""
        meta = obj["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        current = self.get("v1", "PersistentVolumeClaim", namespace, name)
        if current is None:
            if retain:
                selector = {retention.JAIL_NAMESPACE_LABEL: namespace, retention.JAIL_CLAIM_LABEL: name}
                kept = retention.retained_volume(self.list("v1", "PersistentVolume", "", selector), namespace, name)
                if kept is not None:
                    obj, reserve = retention.rebind(obj, kept)
                    self.merge_patch("v1", "PersistentVolume", "", kept["metadata"]["name"], reserve)
                    log.info("jail %s/%s: binding the kept volume %s", namespace, name, kept["metadata"]["name"])
                    result.applied.append(f"PersistentVolume/{kept['metadata']['name']} (the kept jail, bound again)")
            self._create_if_absent(with_owner(obj, None if retain else owner), result)
            return
        _not_terminating(current)
        self.set_jail_retention(current, owner, retain)

    def set_jail_retention(self, claim: Manifest, owner: Owner, retain: bool) -> None:
        """Make an existing jail claim, and its volume once bound, follow `retainOnDelete`."""
        meta = claim["metadata"]
        refs = retention.owner_references(claim, owner.reference(), retain)
        if refs is not None:
            self.merge_patch("v1", "PersistentVolumeClaim", meta["namespace"], meta["name"],
                             {"metadata": {"ownerReferences": refs}})  # fmt: skip
        volume_name = (claim.get("spec") or {}).get("volumeName")
        if not volume_name:
            return  # not bound yet: the claim's event handler comes back once it is
        volume = self.get("v1", "PersistentVolume", "", volume_name)
        patch = retention.volume_patch(volume, meta["namespace"], meta["name"], retain) if volume else None
        if patch is not None:
            self.merge_patch("v1", "PersistentVolume", "", volume_name, patch)

    def _without_replicas(self, obj: Manifest) -> Manifest:
        """An autoscaled group's WorkerSet: created (a plain create, so the apply below never owns
        the field) with the rendered `replicas` as its first size; applied without `replicas` ever
        after, which stays whatever the scale subresource (HPA, KEDA, `kubectl scale`) sets."""
        meta = obj["metadata"]
        if self.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]) is None:
            try:
                self._call("POST", self._path(obj["apiVersion"], obj["kind"], meta["namespace"]), body=obj,
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
            if self.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"]) is None:
                return True
            time.sleep(0.2)
        return False

    def _create_if_absent(self, obj: Manifest, result: ApplyResult) -> bool:
        meta = obj["metadata"]
        current = self.get(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        if current is not None:
            _not_terminating(current)
            return False
        try:
            self._call("POST", self._path(obj["apiVersion"], obj["kind"], meta["namespace"]), body=obj)
        except ApiException as e:
            if e.status == 409:  # made by a concurrent or earlier, interrupted reconcile
                return False
            raise
        result.applied.append(describe(obj))
        return True

    def _replace_job_if_changed(self, obj: Manifest, result: ApplyResult) -> None:
        meta = obj["metadata"]
        current = self.get(obj["apiVersion"], "Job", meta["namespace"], meta["name"])
        if current is None:
            return
        want = meta.get("annotations", {}).get(TEMPLATE_HASH_ANNOTATION)
        have = current["metadata"].get("annotations", {}).get(TEMPLATE_HASH_ANNOTATION)
        if want == have:
            return
        if current["metadata"].get("deletionTimestamp"):
            raise RetryLater(f"Job {meta['name']} is still being deleted")
        self.delete(obj["apiVersion"], "Job", meta["namespace"], meta["name"], "Background")
        result.recreated.append(describe(obj))
        raise RetryLater(f"Job {meta['name']} replaced; re-creating it once the old one is gone")

    def ensure_secret(self, spec: SecretSpec, owner: Owner | None, result: ApplyResult) -> None:
        """Create the Secret with freshly generated values if, and only if, it does not exist."""
        obj = with_owner(spec.manifest, owner)
        meta = obj["metadata"]
        current = self.get("v1", "Secret", meta["namespace"], meta["name"])
        if current is not None:
            _not_terminating(current)
            return
        body = {**obj, "stringData": spec.generate()}
        try:
            self._call("POST", self._path("v1", "Secret", meta["namespace"]), body=body)
        except ApiException as e:
            if e.status == 409:
                return
            raise
        result.created_secrets.append(meta["name"])

    def prune(self, owner: Owner, selector: dict[str, str], keep: Iterable[Manifest], result: ApplyResult) -> None:
        """Delete objects this cluster owns that are no longer rendered."""
        wanted = {(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in keep}
        for api_version, kind in PRUNABLE:
            if api_version == "monitoring.coreos.com/v1" and not self.serves(api_version, kind):
                continue
            for item in self.list(api_version, kind, owner.namespace, selector):
                name = item["metadata"]["name"]
                if (api_version, kind, name) in wanted or not owned_by(item, owner):
                    continue
                if self.delete(api_version, kind, owner.namespace, name, "Background"):
                    result.pruned.append(f"{kind}/{name}")


class RetryLater(Exception):
    """A step must wait for the API to catch up (e.g. an object still being deleted)."""


def _not_terminating(current: Manifest) -> None:
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
            opmetrics.STEP_ERRORS.labels(cluster, label.split("/")[0]).inc()


def _api_error_message(e: ApiException) -> str:
    try:
        body = json.loads(e.body or "{}")
        return str(body.get("message") or e.reason)
    except (ValueError, TypeError):
        return str(e.reason)
