"""Idempotency under failure: the operator is SIGKILLed at random points of its reconcile, 20 times,
and restarted each time. It must still converge, make no duplicate objects, and never regenerate a
Secret."""

from __future__ import annotations

import random
import time
from typing import Any

from kubernetes import client

from tests.support.operator import OperatorProcess, apply_cluster, load_example, owned_objects, wait_ready

KILLS = 20


def test_operator_killed_twenty_times_still_converges(
    api_client: Any, controlplane: Any, cluster_namespace: str, operator_factory: Any
) -> None:
    ns = cluster_namespace
    # kwok nodes that advertise GPUs stand in for GPU machines (none here); sized for the example:
    # each GPU group's pods take whole 8-GPU nodes of their type (nodeSelector), tainted for GPU work.
    taint = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    for gpu_type, count, memory in (("h100", 4, "2Ti"), ("a100", 2, "1Ti")):
        labels = {"node.kubernetes.io/instance-type": f"gpu-{gpu_type}x8"}
        controlplane.add_fake_nodes(
            count, labels=labels, gpu=8, prefix=f"kwok-{gpu_type}", cpu="128", memory=memory, taints=taint
        )
    rng = random.Random(20261122)  # fixed seed: a failure can be replayed
    operator: OperatorProcess = operator_factory(start=False)
    body = load_example("gpu-two-groups", ns)
    body["spec"]["jail"].pop("storageClassName")  # the test control plane binds PVs without a class
    created = apply_cluster(api_client, body)
    uid = created["metadata"]["uid"]
    core = client.CoreV1Api(api_client)

    def secret_data() -> dict[str, Any]:
        return {str(s.metadata.name): s.data for s in core.list_namespaced_secret(ns).items}

    secrets_seen: dict[str, Any] = {}
    for i in range(KILLS):
        operator.start()
        # Startup (imports, login, watches) takes ~1-2 s here; kill anywhere in the first reconcile.
        time.sleep(rng.uniform(0.5, 4.0))
        operator.kill()
        for name, data in secret_data().items():
            if name.startswith("gpu-"):
                previous = secrets_seen.setdefault(name, data)
                assert data == previous, f"Secret {name} changed after kill #{i + 1}"
        if i == KILLS // 2:
            # Change the spec halfway through: the next incarnation must pick it up.
            body["spec"]["workerGroups"][2]["replicas"] = 1
            apply_cluster(api_client, body)

    operator.start()
    obj = wait_ready(api_client, ns, "gpu", operator, timeout=180)
    assert operator.starts == KILLS + 1
    assert obj["status"]["workers"] == "7/7"

    children = owned_objects(api_client, ns, uid)
    # No duplicates: every child name is the one the naming module gives, exactly once per kind.
    kinds_names = [tuple(k.split("/", 1)) for k in children]
    assert len(kinds_names) == len(set(kinds_names))
    statefulsets = sorted(n for k, n in kinds_names if k == "StatefulSet")
    assert statefulsets == ["gpu-controller", "gpu-login", "gpu-worker-a100", "gpu-worker-cpu", "gpu-worker-h100"]
    secrets = sorted(n for k, n in kinds_names if k == "Secret")
    assert secrets == ["gpu-slurm-key", "gpu-ssh-host-keys"]
    for name, data in secret_data().items():
        if name in secrets_seen:
            assert data == secrets_seen[name], f"{name} regenerated"
    jobs = [n for k, n in kinds_names if k == "Job"]
    assert jobs == ["gpu-populate-jail"]
