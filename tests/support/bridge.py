"""The bridge against a throwaway control plane (the integration tier's and the bench's): a SlurmCluster
with ``spec.bridge``, the token Secret the operator would keep, a namespace opted in, and `warden-bridge`
in a subprocess logging to a file."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.support.operator import end_group, free_port, load_example
from warden.model import API_GROUP, API_VERSION
from warden.naming import BRIDGE_NAMESPACE_LABEL, BRIDGE_USER, TOKEN_KEY, Names
from warden.slurm.rest import mint_token

CLUSTER = "cpu"


def opt_in(controlplane: Any, api_client: Any, cluster_namespace: str, jwt_key: bytes) -> str:
    """SlurmCluster ``cpu`` (docs/examples/cpu-only.yaml) with ``spec.bridge`` on its worker group in
    ``cluster_namespace``, the bridge's token (signed with ``jwt_key``) in the Secret the operator keeps it
    in, and a new namespace opted in to that cluster: its name."""
    core: Any = client.CoreV1Api(api_client)  # manifests as plain dicts
    cluster = load_example("cpu-only", cluster_namespace)
    group = cluster["spec"]["workerGroups"][0]
    group["resources"] = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "2", "memory": "4Gi"}}
    cluster["spec"]["bridge"] = {"enabled": True, "workerGroups": [group["name"]]}
    client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        API_GROUP, API_VERSION, cluster_namespace, "slurmclusters", cluster
    )
    names = Names(cluster=CLUSTER, namespace=cluster_namespace)
    token = mint_token(jwt_key, BRIDGE_USER, 3600)
    core.create_namespaced_secret(cluster_namespace, {
        "metadata": {"name": names.bridge_token_secret},
        "data": {TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    })  # fmt: skip
    name: str = controlplane.create_namespace(f"w-{uuid.uuid4().hex[:8]}")
    core.patch_namespace(name, {"metadata": {"labels": {BRIDGE_NAMESPACE_LABEL: f"{cluster_namespace}.{CLUSTER}"}}})
    return name


class BridgeProcess:
    def __init__(self, kubeconfig: Path, log_dir: Path, restapi_url: str, name: str = "bridge") -> None:
        self.kubeconfig = kubeconfig
        self.restapi_url = restapi_url
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> BridgeProcess:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONUNBUFFERED": "1"}
        log = self.log_path.open("ab")
        log.write(f"\n--- start #{self.starts + 1} ---\n".encode())
        log.flush()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "warden.bridge.main", "-v", "--interval=0.5",
             f"--slurmrestd-url={self.restapi_url}", f"--liveness-port={free_port()}"],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        self.starts += 1
        return self

    def kill(self) -> None:
        """SIGKILL: dies wherever it is, as on a node failure."""
        end_group(self.proc, signal.SIGKILL)
        self.proc = None

    def stop(self) -> None:
        end_group(self.proc, signal.SIGTERM)
        self.proc = None

    def __enter__(self) -> BridgeProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no bridge log)"
