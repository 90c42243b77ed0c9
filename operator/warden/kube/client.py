"""The operator's client of the Kubernetes API: plain reads and writes of objects by kind and name.

Paths come from ``warden.kube.kinds`` (a fixed table: no discovery round trips), and every write is
counted (``warden_api_writes_total``). API discovery is asked only for kinds served where a CRD is
installed (``serves``). Server-side apply with its rules is ``warden.kube.apply``'s; Events are
``warden.kube.events``'s.

Reads of the cached kinds come from memory once their watch caches run (``use_caches``; see
``warden.kube.cache``): what they return is shared, read it and never change it. The answers to
writes of those kinds go to the caches, so the operator reads what it wrote.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from warden import opmetrics
from warden.kube import kinds
from warden.kube.cache import Caches, Informer, OnChange
from warden.kube.fanout import Fanout
from warden.kube.manifest import Manifest
from warden.leader import fence
from warden.model import API_GROUP, API_VERSION
from warden.naming import FIELD_MANAGER

#: how long API discovery's "served" (``Kube.serves``) is trusted
DISCOVERY_TTL_SECONDS = 60.0
#: how long its "not served" is: an admin who installs the missing CRD is waiting for what needs it, and
#: asking again costs one GET every few reconciles (the answer is shared by every cluster)
NOT_SERVED_TTL_SECONDS = 10.0
#: writes in flight at once when many go together (``Kube.fanout``: pods made, pod conditions set)
WRITERS = 16
#: HTTP connections kept to the API server: the writers', the watch caches' and a few more
CONNECTIONS = 48
#: Kubernetes nodes read in one page by ``Kube.node_labels``
NODE_PAGE = 500
#: what an object's metadata alone is asked for as (``kubectl get --raw`` with this Accept header)
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json"


def api_client(user_agent: str) -> client.ApiClient:
    """A client of the API server: the pod's ServiceAccount in a cluster, else the kubeconfig; a pool of
    ``CONNECTIONS``; ``user_agent`` is what the API server's audit log and metrics call the caller."""
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = CONNECTIONS
    api = client.ApiClient(configuration)
    api.user_agent = user_agent
    return api


class Kube:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self._served: dict[tuple[str, str], tuple[float, bool]] = {}
        self.caches: Caches | None = None
        #: many independent writes at once (``warden.kube.fanout``)
        self.fanout = Fanout(WRITERS)

    def use_caches(
        self, namespaces: list[str], on_change: dict[tuple[str, str], OnChange], sync_timeout: float = 120.0
    ) -> bool:
        """Start the watch caches of the cached kinds (over ``namespaces``; none: every namespace) and
        wait for their first lists; whether all were listed in ``sync_timeout`` (reads of a kind not
        listed yet go to the API server until it is)."""
        self.caches = Caches(self.call, self.stream_lines, namespaces, on_change)
        self.caches.start()
        return self.caches.wait_synced(sync_timeout)

    def _cache(self, api_version: str, kind: str, namespace: str) -> Informer | None:
        return self.caches.covering(api_version, kind, namespace) if self.caches is not None else None

    def observed(self, type_: str | None, obj: Any) -> None:
        """An object as a kopf handler was given it (event ``type_``; None: kopf's first listing): to the
        cache of its kind, if any, before the handler reads anything (``warden.kube.cache``)."""
        meta = obj.get("metadata") or {}
        informer = self._cache(
            str(obj.get("apiVersion", "")), str(obj.get("kind", "")), str(meta.get("namespace") or "")
        )
        if informer is not None:
            informer.observed(type_ or "ADDED", dict(obj))

    def _offer(self, api_version: str, kind: str, namespace: str, answer: Any) -> None:
        """The API server's answer to a write: to the cache of its kind, if any."""
        informer = self._cache(api_version, kind, namespace)
        if informer is not None:
            informer.offer(answer)

    def serves(self, api_version: str, kind: str) -> bool:
        """Whether the API serves this kind now (a CRD installed): asked at most once a minute while it
        is, every ``NOT_SERVED_TTL_SECONDS`` while it is not."""
        now = time.monotonic()
        cached = self._served.get((api_version, kind))
        if cached is not None and now - cached[0] < (DISCOVERY_TTL_SECONDS if cached[1] else NOT_SERVED_TTL_SECONDS):
            return cached[1]
        k = kinds.of(api_version, kind)
        try:
            resources = self.call("GET", k.prefix).get("resources", [])
            served = any(r.get("name") == k.plural for r in resources)
        except ApiException as e:
            if e.status != 404:
                raise
            served = False
        self._served[(api_version, kind)] = (now, served)
        return served

    @staticmethod
    def path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
        k = kinds.of(api_version, kind)
        path = f"{k.prefix}/namespaces/{namespace}/{k.plural}" if namespace else f"{k.prefix}/{k.plural}"
        return f"{path}/{name}" if name else path

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> Any:
        # apply-patch+yaml goes as text (JSON is YAML); the JSON types as objects.
        payload = json.dumps(body) if content_type.endswith("yaml") else body
        method, url, headers, data, post = self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params={"Content-Type": content_type, "Accept": accept},
            body=payload,
            auth_settings=["BearerToken"],
        )
        if method != "GET":
            fence.check(f"{method} {path}")  # a replica whose lease ran out writes nothing (warden.leader)
            opmetrics.API_WRITES.labels(method, opmetrics.api_resource(path)).inc()
        response = self.api.call_api(method, url, header_params=headers, body=data, post_params=post)
        response.read()  # type: ignore[no-untyped-call]
        text = response.data.decode() if response.data else ""
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=text, data=None)
        return json.loads(text) if text else {}

    def stream_lines(self, path: str, query: list[tuple[str, str]], timeout: float) -> Iterator[bytes]:
        """GET ``path`` and yield its body line by line as it comes (a watch)."""
        method, url, headers, data, post = self.api.param_serialize(
            method="GET",
            resource_path=path,
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(method, url, header_params=headers, body=data, post_params=post,
                                     _request_timeout=(10, timeout))  # fmt: skip
        raw = response.response
        try:
            if not 200 <= response.status <= 299:
                text = raw.read().decode(errors="replace")
                raise ApiException(status=response.status, reason=f"{response.reason}: {text[:300]}")
            pending = b""
            for chunk in raw.stream(65536):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                yield from (line for line in lines if line.strip())
        finally:
            raw.release_conn()

    def get(self, api_version: str, kind: str, namespace: str, name: str, fresh: bool = False) -> Manifest | None:
        """The object (None: there is none), from its kind's cache when it has one; ``fresh``: from the API
        server all the same, the cache brought up to what it answered (a deletion included)."""
        informer = self._cache(api_version, kind, namespace)
        if informer is not None and not fresh:
            return informer.get(namespace, name)
        try:
            out: Manifest = self.call("GET", self.path(api_version, kind, namespace, name))
        except ApiException as e:
            if e.status != 404:
                raise
            if informer is not None and (held := informer.get(namespace, name)) is not None:
                informer.observed("DELETED", held)  # gone: the cache knows it from now on
            return None
        if informer is not None:
            informer.offer(out)
        return out

    def list(self, api_version: str, kind: str, namespace: str, selector: dict[str, str]) -> list[Manifest]:
        informer = self._cache(api_version, kind, namespace)
        if informer is not None:
            return informer.list(namespace, selector)
        query = [("labelSelector", ",".join(f"{k}={v}" for k, v in sorted(selector.items())))]
        out = self.call("GET", self.path(api_version, kind, namespace), query=query)
        items: list[Manifest] = out.get("items", [])
        return items

    def cordoned_nodes(self) -> set[str]:
        """The Kubernetes nodes marked unschedulable (``kubectl cordon``): one list, selected server-side,
        however many nodes the cluster has."""
        query = [("fieldSelector", "spec.unschedulable=true")]
        out = self.call("GET", self.path("v1", "Node", ""), query=query)
        return {str(n["metadata"]["name"]) for n in out.get("items", [])}

    def node_labels(self, keys: Sequence[str]) -> dict[str, dict[str, str]]:
        """Those labels of every Kubernetes node (each node's dict holds the ones it has): the nodes'
        metadata alone, ``NODE_PAGE`` at a time, so that ten thousand nodes are never held whole."""
        out: dict[str, dict[str, str]] = {}
        for item in self.pages(self.path("v1", "Node", ""), NODE_PAGE, accept=METADATA_ONLY):
            labels = item["metadata"].get("labels") or {}
            out[sys.intern(str(item["metadata"]["name"]))] = {k: labels[k] for k in keys if k in labels}
        return out

    def pages(self, path: str, limit: int, accept: str = "application/json") -> Iterator[Manifest]:
        """Every item a list at ``path`` holds, asked for ``limit`` at a time (the API server's continue
        tokens), so that a long list is never held whole."""
        query: list[tuple[str, str]] = [("limit", str(limit))]
        while True:
            page = self.call("GET", path, query=query, accept=accept)
            yield from page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return
            query = [("limit", str(limit)), ("continue", token)]

    def delete(self, api_version: str, kind: str, namespace: str, name: str, propagation: str) -> bool:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        try:
            out = self.call("DELETE", self.path(api_version, kind, namespace, name), body=body)
            if isinstance(out, dict) and (out.get("metadata") or {}).get("deletionTimestamp"):
                self._offer(api_version, kind, namespace, out)  # being deleted (graceful): seen so at once
            return True
        except ApiException as e:
            if e.status == 404:
                return False
            raise

    def merge_patch(self, api_version: str, kind: str, namespace: str, name: str, patch: Manifest) -> None:
        out = self.call("PATCH", self.path(api_version, kind, namespace, name), body=patch,
                        content_type="application/merge-patch+json")  # fmt: skip
        self._offer(api_version, kind, namespace, out)

    def server_side_apply(self, obj: Manifest) -> Manifest:
        meta = obj["metadata"]
        path = self.path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        out: Manifest = self.call("PATCH", path, body=obj, query=query, content_type="application/apply-patch+yaml")
        self._offer(obj["apiVersion"], obj["kind"], meta["namespace"], out)
        return out

    def patch_status(self, name: str, namespace: str, status: Manifest, kind: str = "SlurmCluster") -> None:
        path = self.path(f"{API_GROUP}/{API_VERSION}", kind, namespace, name) + "/status"
        out = self.call("PATCH", path, body={"status": status}, content_type="application/merge-patch+json")
        self._offer(f"{API_GROUP}/{API_VERSION}", kind, namespace, out)

    def create(self, obj: Manifest) -> bool:
        """Create an object as given (worker pods: made once, never applied again); False when one of
        that name exists already."""
        meta = obj["metadata"]
        path = self.path(obj["apiVersion"], obj["kind"], meta["namespace"])
        try:
            out = self.call("POST", path, body=obj, query=[("fieldManager", FIELD_MANAGER)])
            self._offer(obj["apiVersion"], obj["kind"], meta["namespace"], out)
            return True
        except ApiException as e:
            if e.status == 409:
                return False
            raise

    def set_pod_condition(self, namespace: str, pod: str, condition: Manifest) -> None:
        """Add or replace one condition of a pod's status (conditions merge by type; the kubelet keeps
        types it does not own, as it does for readiness gates)."""
        path = self.path("v1", "Pod", namespace, pod) + "/status"
        self.patch_pod(path, {"status": {"conditions": [condition]}}, "application/strategic-merge-patch+json")

    def set_pod_label(self, namespace: str, pod: str, key: str, value: str | None) -> None:
        """Set (or, with None, remove) one label of a pod; a pod gone meanwhile needs nothing."""
        self.patch_pod(self.path("v1", "Pod", namespace, pod), {"metadata": {"labels": {key: value}}})

    def set_pod_annotation(self, namespace: str, pod: str, key: str, value: str | None) -> bool:
        """Set (or, with None, remove) one annotation of a pod; False when the pod is gone meanwhile,
        which then needs nothing."""
        return self.patch_pod(self.path("v1", "Pod", namespace, pod), {"metadata": {"annotations": {key: value}}})

    def patch_pod(self, path: str, body: Manifest, content_type: str = "application/merge-patch+json") -> bool:
        """PATCH a pod (or its status); False when it is gone meanwhile, which then needs nothing."""
        try:
            out = self.call("PATCH", path, body=body, content_type=content_type)
            namespace = str((out.get("metadata") or {}).get("namespace") or "") if isinstance(out, dict) else ""
            self._offer("v1", "Pod", namespace, out)
            return True
        except ApiException as e:
            if e.status != 404:
                raise
            return False
