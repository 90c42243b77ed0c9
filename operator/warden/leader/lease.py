"""The Lease's reads and writes (``coordination.k8s.io/v1``), with a client of its own: the election runs
before the operator's Kubernetes client exists, and its requests are short (``TIMEOUT``) so that a renewal
never outlasts the renew deadline."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException

#: connect and read timeout of each request, seconds
TIMEOUT = (2.0, 4.0)


class Taken(Exception):
    """Another candidate wrote the Lease first (409 Conflict, or it exists already)."""


class LeaseStore(Protocol):
    """Where the election reads and writes its Lease (``Leases``; an in-memory one in the unit tier)."""

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...

    def read(self) -> dict[str, Any] | None: ...

    def create(self, lease: Mapping[str, Any]) -> dict[str, Any]: ...

    def replace(self, lease: Mapping[str, Any]) -> dict[str, Any]: ...


class Leases:
    def __init__(self, api: client.ApiClient, namespace: str, name: str) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name

    @property
    def _collection(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"

    def _call(self, method: str, path: str, body: Any = None) -> dict[str, Any] | None:
        method, url, headers, data, post = self.api.param_serialize(
            method=method,
            resource_path=path,
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api.call_api(
            method, url, header_params=headers, body=data, post_params=post, _request_timeout=TIMEOUT
        )
        response.read()  # type: ignore[no-untyped-call]
        text = response.data.decode() if response.data else ""
        if response.status == 404 and method == "GET":
            return None
        if response.status == 409:
            raise Taken(f"{self.namespace}/{self.name}: written by another candidate first")
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=text, data=None)
        loaded: dict[str, Any] = json.loads(text) if text else {}
        return loaded

    def read(self) -> dict[str, Any] | None:
        """The Lease, or None when there is none."""
        return self._call("GET", f"{self._collection}/{self.name}")

    def create(self, lease: Mapping[str, Any]) -> dict[str, Any]:
        return self._call("POST", self._collection, dict(lease)) or {}

    def replace(self, lease: Mapping[str, Any]) -> dict[str, Any]:
        """PUT, guarded by the ``metadata.resourceVersion`` it carries: ``Taken`` when the Lease changed since."""
        return self._call("PUT", f"{self._collection}/{self.name}", dict(lease)) or {}
