"""Idempotency under failure: the operator is SIGKILLed at random points of its reconcile, 20 times,
and restarted each time, while its children are deleted and edited by hand (with the operator alive
and dead). It must still converge to exactly what a clean run renders, make no duplicate objects, and
never regenerate a Secret."""

from __future__ import annotations

import random
import time
from typing import Any

from kubernetes import client

from tests.support.operator import OperatorProcess, apply_cluster, load_example, owned_objects, wait_ready
from warden.model import API_GROUP as GROUP
from warden.model import API_VERSION as VERSION
from warden.model import WORKER_SET_PLURAL, parse_spec
from warden.render.cluster import render
from warden.render.context import Cluster
from warden_dev.controlplane import wait_for

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

    apps, batch = client.AppsV1Api(api_client), client.BatchV1Api(api_client)
    ignore_missing = (client.ApiException,)

    def vandalise() -> str:
        """One hand-made change to a child: deleted or edited (a 404 when it is not there yet is fine)."""
        what = rng.choice(["delete-config", "edit-config", "delete-service", "edit-image", "delete-cronjob", "scale"])
        try:
            if what == "delete-config":
                core.delete_namespaced_config_map("gpu-slurm-config", ns)
            elif what == "edit-config":
                core.patch_namespaced_config_map("gpu-slurm-config", ns, {"data": {"slurm.conf": "# vandalised\n"}})
            elif what == "delete-service":
                core.delete_namespaced_service("gpu-controller", ns)
            elif what == "edit-image":
                container = {"name": "slurmctld", "image": "example.invalid/vandal:1"}
                apps.patch_namespaced_stateful_set(
                    "gpu-controller", ns, {"spec": {"template": {"spec": {"containers": [container]}}}}
                )
            elif what == "delete-cronjob":
                batch.delete_namespaced_cron_job("gpu-nccl-check", ns)
            else:
                client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
                    GROUP, VERSION, ns, WORKER_SET_PLURAL, "gpu-worker-cpu", {"spec": {"replicas": 9}}
                )
        except ignore_missing:
            pass
        return what

    secrets_seen: dict[str, Any] = {}
    for i in range(KILLS):
        operator.start()
        # Startup (imports, login, watches) takes ~1-2 s here; kill anywhere in the first reconcile.
        time.sleep(rng.uniform(0.5, 2.0))
        vandalise()  # with the operator alive
        time.sleep(rng.uniform(0.0, 2.0))
        operator.kill()
        vandalise()  # and while it is dead
        for name, data in secret_data().items():
            if name.startswith("gpu-"):
                previous = secrets_seen.setdefault(name, data)
                assert data == previous, f"Secret {name} changed after kill #{i + 1}"
        if i == KILLS // 2:
            # Change the spec halfway through: the next incarnation must pick it up.
            body["spec"]["workerGroups"][2]["replicas"] = 1
            apply_cluster(api_client, body)

    operator.start()
    obj = wait_ready(api_client, ns, "gpu", operator)
    assert operator.starts == KILLS + 1
    assert obj["status"]["workers"] == "7/7"

    # and, with the last incarnation settled (its resume reconcile done), more hand-made changes
    for _ in range(3):
        vandalise()
        time.sleep(0.5)

    # every object is what a clean run renders (the fields the operator sets; the API server adds defaults)
    cluster = Cluster(name="gpu", namespace=ns, spec=parse_spec(obj["spec"]))
    wanted = {f"{o['kind']}/{o['metadata']['name']}": o for o in render(cluster).objects}

    def differences() -> list[str]:
        live = owned_objects(api_client, ns, uid)
        jail = client.CoreV1Api(api_client).list_namespaced_persistent_volume_claim(ns).items
        live.update({f"PersistentVolumeClaim/{c.metadata.name}": {} for c in jail})  # kept: owned by nobody
        out = [f"{key}: missing" for key in wanted if key not in live]
        # a Slurm config check Job the vandalised ConfigMap asked for goes once the files are the rendered ones
        out += [f"{key}: not rendered" for key in live if key.startswith("Job/") and key not in wanted]
        for key, want in wanted.items():
            if key in live and not key.startswith("PersistentVolumeClaim/"):
                for field in ("data", "spec"):
                    if field in want and (where := _difference(want[field], live[key].get(field), field)):
                        out.append(f"{key}: {where}")
        return out

    wait_for("every child as rendered", lambda: not differences(), 30, on_fail=lambda: str(differences()))

    children = owned_objects(api_client, ns, uid)
    # No child made twice under another name: per kind, exactly the names the naming module gives.
    kinds_names = [tuple(k.split("/", 1)) for k in children]
    statefulsets = sorted(n for k, n in kinds_names if k == "StatefulSet")
    assert statefulsets == ["gpu-accounting", "gpu-controller", "gpu-login", "gpu-mariadb"]  # accounting InCluster
    worker_sets = sorted(n for k, n in kinds_names if k == "WorkerSet")
    assert worker_sets == ["gpu-worker-a100", "gpu-worker-cpu", "gpu-worker-h100"]
    secrets = sorted(n for k, n in kinds_names if k == "Secret")
    assert secrets == ["gpu-db-password", "gpu-jwt-key", "gpu-slurm-key", "gpu-ssh-host-keys"]
    for name, data in secret_data().items():
        if name in secrets_seen:
            assert data == secrets_seen[name], f"{name} regenerated"
    jobs = [n for k, n in kinds_names if k == "Job"]
    assert jobs == ["gpu-populate-jail"]


def _difference(want: Any, have: Any, path: str) -> str | None:
    """Where a value set in `want` is not in `have` (dicts by key, lists item by item), or None."""
    if isinstance(want, dict):
        if not isinstance(have, dict):
            return f"{path}: {have!r}"
        for k, v in want.items():
            if k not in have:
                if v in (0, False, "", None, {}, []):  # the API server leaves out zero values
                    continue
                return f"{path}.{k} missing"
            if where := _difference(v, have[k], f"{path}.{k}"):
                return where
        return None
    if isinstance(want, list):
        if not isinstance(have, list) or len(want) != len(have):
            return f"{path}: {have!r}"
        return next(
            (w for i, (a, b) in enumerate(zip(want, have, strict=True)) if (w := _difference(a, b, f"{path}[{i}]"))),
            None,
        )
    return None if want == have else f"{path}: {want!r} != {have!r}"
