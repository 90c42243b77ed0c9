"""The bridge's scheduling rate (docs/bridge.md): pods per second from creation to binding, through Slurm,
beside the default scheduler's rate on the same control plane.

A throwaway control plane (dev/warden_dev/controlplane.py) with kwok nodes; the same number of
single-pod workloads is created twice, with the same client and the same fan-out of creators:
1. for kube-scheduler (the default scheduler name),
2. for the bridge (`warden-bridge` in its own process, scheduler name `warden-slurm`), whose Slurm is
   the stand-in slurmrestd (tests/support/fake_slurmrestd.py, first-fit over Slurm nodes named as the
   kwok nodes, as external nodes are): each pod is one Slurm job submitted, labelled, bound, and told
   with an Event.
For each: seconds from the first create to every pod having `spec.nodeName`, and pods per second.
The stand-in runs in this process and shares the two cores with everything else: the figure is the
bridge's own cost (Kubernetes writes, its rounds, one submit per workload), not slurmctld's.
Never asserted anywhere: figures for the record.
Usage (from the repository root): python -m bench.bridge [PODS]
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client

from tests.support.bridge import CLUSTER, BridgeProcess, opt_in
from tests.support.fake_slurmrestd import FakeSlurmrestd
from tests.support.operator import crd_bodies
from warden.naming import BRIDGE_EXTERNAL_NODE_LABEL
from warden_dev.controlplane import ControlPlane, ensure_binaries, wait_for

NODES = 10
CPUS_PER_NODE = 200
CREATORS = 8
JWT_KEY = b"b" * 32


def pod(name: str, scheduler: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "busybox",
                        "resources": {"limits": {"cpu": "1", "memory": "64Mi"}}}],
    }  # fmt: skip
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"bench": "bridge"}}, "spec": spec}


def schedule(api: Any, namespace: str, pods: int, scheduler: str | None, timeout: float = 1800) -> float:
    """Create ``pods`` pods (``CREATORS`` at once) and wait until all are bound: the seconds it took."""
    core: Any = client.CoreV1Api(api)
    start = time.monotonic()

    def create(i: int) -> None:
        response = core.create_namespaced_pod(namespace, pod(f"p-{i}", scheduler), _preload_content=False)
        response.read()

    with ThreadPoolExecutor(CREATORS) as creators:
        list(creators.map(create, range(pods)))
    while time.monotonic() - start < timeout:
        listed = core.list_namespaced_pod(namespace, label_selector="bench=bridge", _preload_content=False)
        bound = sum(1 for p in json.loads(listed.read())["items"] if (p.get("spec") or {}).get("nodeName"))
        if bound == pods:
            return time.monotonic() - start
        time.sleep(0.5)
    raise RuntimeError(f"{pods} pods not bound in {timeout:.0f} s")


def main(argv: list[str]) -> int:
    pods = int(argv[0]) if argv else 1000
    cp = ControlPlane(ensure_binaries(build=True))
    try:
        cp.start()
        nodes = cp.add_fake_nodes(NODES, prefix="bench-node", cpu=str(CPUS_PER_NODE), memory="1Ti", pods="500")
        api = cp.api_client()
        ext: Any = client.ApiextensionsV1Api(api)
        for body in crd_bodies():
            ext.create_custom_resource_definition(body)

        def established() -> bool:
            return all(
                any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])
                for crd in (ext.read_custom_resource_definition(b["metadata"]["name"]) for b in crd_bodies())
            )

        wait_for("the CRDs Established", established, 30)
        default_ns = cp.create_namespace(f"default-{uuid.uuid4().hex[:6]}")
        default_s = schedule(api, default_ns, pods, None)
        cluster_ns = cp.create_namespace(f"c-{uuid.uuid4().hex[:6]}")
        with FakeSlurmrestd(cluster_ns, CLUSTER) as slurm:
            slurm.jwt_key = JWT_KEY
            for node in nodes:
                slurm.register(node, cpus=CPUS_PER_NODE)
                # the admin's word that the node is an external node of the cluster (docs/bridge.md)
                label = {BRIDGE_EXTERNAL_NODE_LABEL: f"{cluster_ns}.{CLUSTER}"}
                client.CoreV1Api(api).patch_node(node, {"metadata": {"labels": label}})
            workloads = opt_in(cp, api, cluster_ns, JWT_KEY)
            with BridgeProcess(cp.kubeconfig, cp.log_dir, slurm.url_template, name="bench-bridge"):
                bridge_s = schedule(api, workloads, pods, "warden-slurm")
            submits = slurm.served[("POST", "job/submit")]
    finally:
        cp.stop()
    print(
        f"\n{pods} single-pod workloads on {NODES} kwok nodes, created {CREATORS} at a time, until every pod is bound:"
    )
    print(f"  kube-scheduler (default)       {default_s:7.1f} s   {pods / default_s:7.1f} pods/s")
    print(
        f"  the bridge (through Slurm)     {bridge_s:7.1f} s   {pods / bridge_s:7.1f} pods/s   ({submits} job submits)"
    )
    print(f"  bridge / default rate          {default_s / bridge_s:7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
