"""The operator's client of the Kubernetes API: plain reads and writes of objects by kind and name.

Paths come from ``warden.kube.kinds`` (a fixed table: no discovery round trips), and every write is
counted (``warden_api_writes_total``). API discovery is asked only for kinds served where a CRD is
installed (``serves``). Server-side apply with its rules is ``warden.kube.apply``'s; Events are
``warden.kube.events``'s.
"""

from __future__ import annotations

import json
import time
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from warden import opmetrics
from warden.kube import kinds
from warden.model import API_GROUP, API_VERSION
from warden.naming import FIELD_MANAGER
from warden.render.pods import Manifest

#: how long an answer of API discovery (``Kube.serves``) is trusted
DISCOVERY_TTL_SECONDS = 60.0


class Kube:
    def __init__(self, api: client.ApiClient) -> None:
        self.api = api
        self._served: dict[tuple[str, str], tuple[float, bool]] = {}

    def serves(self, api_version: str, kind: str) -> bool:
        """Whether the API serves this kind now (a CRD installed), asked at most once a minute."""
        now = time.monotonic()
        cached = self._served.get((api_version, kind))
        if cached is not None and now - cached[0] < DISCOVERY_TTL_SECONDS:
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
            out: Manifest = self.call("GET", self.path(api_version, kind, namespace, name))
            return out
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def list(self, api_version: str, kind: str, namespace: str, selector: dict[str, str]) -> list[Manifest]:
        query = [("labelSelector", ",".join(f"{k}={v}" for k, v in sorted(selector.items())))]
        out = self.call("GET", self.path(api_version, kind, namespace), query=query)
        items: list[Manifest] = out.get("items", [])
        return items

    def delete(self, api_version: str, kind: str, namespace: str, name: str, propagation: str) -> bool:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        try:
            self.call("DELETE", self.path(api_version, kind, namespace, name), body=body)
            return True
        except ApiException as e:
            if e.status == 404:
                return False
            raise

    def merge_patch(self, api_version: str, kind: str, namespace: str, name: str, patch: Manifest) -> None:
        self.call("PATCH", self.path(api_version, kind, namespace, name), body=patch,
                  content_type="application/merge-patch+json")  # fmt: skip

    def server_side_apply(self, obj: Manifest) -> Manifest:
        meta = obj["metadata"]
        path = self.path(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        out: Manifest = self.call("PATCH", path, body=obj, query=query, content_type="application/apply-patch+yaml")
        return out

    def patch_status(self, name: str, namespace: str, status: Manifest, kind: str = "SlurmCluster") -> None:
        path = self.path(f"{API_GROUP}/{API_VERSION}", kind, namespace, name) + "/status"
        self.call("PATCH", path, body={"status": status}, content_type="application/merge-patch+json")

    def create(self, obj: Manifest) -> bool:
        """Create an object as given (worker pods: made once, never applied again); False when one of
        that name exists already."""
        meta = obj["metadata"]
        path = self.path(obj["apiVersion"], obj["kind"], meta["namespace"])
        try:
            self.call("POST", path, body=obj, query=[("fieldManager", FIELD_MANAGER)])
            return True
        except ApiException as e:
            if e.status == 409:
                return False
            raise

    def get_node(self, name: str) -> Manifest | None:
        """A Kubernetes Node (cluster-scoped)."""
        return self.get("v1", "Node", "", name)

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
            self.call("PATCH", path, body=body, content_type=content_type)
            return True
        except ApiException as e:
            if e.status != 404:
                raise
            return False
