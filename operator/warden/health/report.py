"""Write the NCCL check's summary into its ConfigMap (``data["report.json"]``), where the operator reads it.

Standard library only (the health-check image needs no Kubernetes client): one JSON merge patch to
``/api/v1/namespaces/<ns>/configmaps/<name>`` with the pod's service-account token. The Role the
operator renders allows exactly get/patch/update on that one ConfigMap.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["REPORT_KEY", "ApiTarget", "ReportError", "in_cluster", "write_report"]

REPORT_KEY = "report.json"
_SA = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class ReportError(Exception):
    pass


@dataclass(frozen=True)
class ApiTarget:
    base_url: str  # https://host:port
    token: str
    ssl_context: ssl.SSLContext | None


def in_cluster(sa_dir: Path = _SA) -> ApiTarget:
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ReportError("not in a pod: KUBERNETES_SERVICE_HOST is unset")
    try:
        token = (sa_dir / "token").read_text().strip()
    except OSError as e:
        raise ReportError(f"no service-account token: {e}") from e
    ctx = ssl.create_default_context(cafile=str(sa_dir / "ca.crt"))
    host = f"[{host}]" if ":" in host else host
    return ApiTarget(f"https://{host}:{port}", token, ctx)


def write_report(target: ApiTarget, config_map: str, summary: dict[str, Any], timeout: float = 15.0) -> None:
    """Merge ``summary`` (as JSON text) into ``namespace/name``'s data under ``report.json``."""
    namespace, sep, name = config_map.partition("/")
    if not sep or not namespace or not name:
        raise ReportError(f"expected NAMESPACE/NAME, got {config_map!r}")
    body = json.dumps({"data": {REPORT_KEY: json.dumps(summary, sort_keys=True)}}).encode()
    req = urllib.request.Request(
        f"{target.base_url}/api/v1/namespaces/{namespace}/configmaps/{name}",
        data=body,
        method="PATCH",
        headers={
            "Content-Type": "application/merge-patch+json",
            "Accept": "application/json",
            "Authorization": f"Bearer {target.token}",
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=target.ssl_context) as resp:
            resp.read()
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")[:300]
        raise ReportError(f"PATCH configmap {config_map}: HTTP {e.code}: {detail}") from e
    except (urllib.error.URLError, OSError) as e:
        raise ReportError(f"PATCH configmap {config_map}: {e}") from e
