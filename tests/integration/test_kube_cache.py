"""The operator's watch caches and fan-out against a real API server (``warden.kube.cache``,
``warden.kube.fanout``): what is listed and watched is only what the operator made (selected
server-side), its own writes are read back at once, others' changes arrive by the watch, and a
burst of pods is made many at a time."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from warden.kube.client import Kube
from warden_dev.controlplane import ControlPlane, wait_for

MANAGED = {"app.kubernetes.io/managed-by": "warden"}


def pod(namespace: str, name: str, labels: dict[str, str] | None = None) -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels if labels is not None else dict(MANAGED)},
        "spec": {
            "containers": [
                {"name": "c", "image": "none:1", "env": [{"name": "WARDEN_SLURM_SERIES", "value": "26.05"}]}
            ],
            # never scheduled (no node has this label): the pods stay as made, deletions are immediate
            "nodeSelector": {"test.warden.dev/none": "x"},
        },
    }


@pytest.fixture
def cached(api_client: Any, namespace: str, crd_installed: None) -> Iterator[tuple[Kube, list[tuple[str, str]]]]:
    """A Kube whose caches cover the test's namespace, and the pod changes they told, in order."""
    told: list[tuple[str, str]] = []
    lock = threading.Lock()

    def tell(type_: str, obj: dict[str, Any]) -> None:
        with lock:
            told.append((type_, obj["metadata"]["name"]))

    kube = Kube(api_client)
    assert kube.use_caches([namespace], {("v1", "Pod"): tell}, sync_timeout=30), "the caches never listed"
    yield kube, told
    assert kube.caches is not None
    kube.caches.stop()


def eventually(what: str, check: Callable[[], bool]) -> None:
    wait_for(what, check, 30)


def test_the_cache_holds_only_the_operators_objects_and_follows_others_changes(
    api_client: Any, namespace: str, cached: tuple[Kube, list[tuple[str, str]]]
) -> None:
    kube, told = cached
    core = client.CoreV1Api(api_client)
    core.create_namespaced_pod(namespace, pod(namespace, "someone-elses", labels={"app": "other"}))
    core.create_namespaced_pod(namespace, pod(namespace, "made-by-hand"))  # carries the managed-by label
    eventually(
        "the watch brings the labelled pod", lambda: kube.get("v1", "Pod", namespace, "made-by-hand") is not None
    )
    assert kube.get("v1", "Pod", namespace, "someone-elses") is None  # never listed nor watched
    assert [p["metadata"]["name"] for p in kube.list("v1", "Pod", namespace, {})] == ["made-by-hand"]
    slim = kube.get("v1", "Pod", namespace, "made-by-hand")
    assert slim is not None and "managedFields" not in slim["metadata"] and "volumes" not in slim["spec"]
    assert slim["spec"]["containers"][0]["env"] == [{"name": "WARDEN_SLURM_SERIES", "value": "26.05"}]

    # someone labels it, then deletes it: the cache follows, and says so
    core.patch_namespaced_pod("made-by-hand", namespace, {"metadata": {"labels": {"mark": "one"}}})
    eventually("the label arrives", lambda: (kube.get("v1", "Pod", namespace, "made-by-hand") or {})
               .get("metadata", {}).get("labels", {}).get("mark") == "one")  # fmt: skip
    core.delete_namespaced_pod("made-by-hand", namespace, grace_period_seconds=0)
    eventually("the deletion arrives", lambda: kube.get("v1", "Pod", namespace, "made-by-hand") is None)
    assert ("ADDED", "made-by-hand") in told and ("DELETED", "made-by-hand") in told
    assert all(name != "someone-elses" for _, name in told)


def test_the_operators_own_writes_are_read_back_at_once(
    api_client: Any, namespace: str, cached: tuple[Kube, list[tuple[str, str]]]
) -> None:
    kube, _ = cached
    for i in range(20):  # each read straight after its write: no time for a watch event in between
        assert kube.create(pod(namespace, f"own-{i}"))
        assert kube.get("v1", "Pod", namespace, f"own-{i}") is not None, f"own-{i} not read back"
        kube.set_pod_label(namespace, f"own-{i}", "mark", str(i))
        got = kube.get("v1", "Pod", namespace, f"own-{i}")
        assert got is not None and got["metadata"]["labels"]["mark"] == str(i)
    # a second create of the same name is refused by the server and changes nothing here
    assert not kube.create(pod(namespace, "own-0"))
    assert len(kube.list("v1", "Pod", namespace, MANAGED)) == 20
    # what the API server holds is what the cache says, once the watch caught up with the writes
    listed = {
        p.metadata.name: p.metadata.labels.get("mark")
        for p in client.CoreV1Api(api_client).list_namespaced_pod(namespace).items
    }
    cached_now = {
        p["metadata"]["name"]: p["metadata"]["labels"].get("mark") for p in kube.list("v1", "Pod", namespace, {})
    }
    assert cached_now == listed


def test_a_deleted_pod_does_not_come_back_from_a_late_answer(
    api_client: Any, namespace: str, cached: tuple[Kube, list[tuple[str, str]]]
) -> None:
    kube, _ = cached
    core = client.CoreV1Api(api_client)
    made: Any = core.create_namespaced_pod(namespace, pod(namespace, "brief"), _preload_content=False)
    answer = json.loads(made.data)  # the answer to a create, as it would reach the cache late
    eventually("the watch brings it", lambda: kube.get("v1", "Pod", namespace, "brief") is not None)
    core.delete_namespaced_pod("brief", namespace, grace_period_seconds=0)
    eventually("the deletion arrives", lambda: kube.get("v1", "Pod", namespace, "brief") is None)
    informer = kube._cache("v1", "Pod", namespace)
    assert informer is not None
    informer.offer(answer)
    assert kube.get("v1", "Pod", namespace, "brief") is None


def test_a_burst_of_pods_is_made_many_at_a_time_and_a_refusal_stops_it(
    api_client: Any, namespace: str, controlplane: ControlPlane, cached: tuple[Kube, list[tuple[str, str]]]
) -> None:
    kube, _ = cached

    def make(name: str) -> Callable[[], bool]:
        return lambda: kube.create(pod(namespace, name))

    start = time.monotonic()
    out = kube.fanout.run([make(f"burst-{i}") for i in range(200)])
    took = time.monotonic() - start
    assert out.error is None and out.results == [True] * 200, out.error
    assert len(kube.list("v1", "Pod", namespace, MANAGED)) == 200
    print(f"200 pods made in {took:.2f} s")
    # a pod the server refuses (an invalid name) ends the run after its batch: nothing after it is sent
    names = [f"more-{i}" for i in range(3)] + ["Not_A_Valid_Name"] + [f"more-{i}" for i in range(3, 40)]
    out = kube.fanout.run([make(name) for name in names])
    assert isinstance(out.error, ApiException) and out.error.status == 422, out.error
    made = {p["metadata"]["name"] for p in kube.list("v1", "Pod", namespace, MANAGED)}
    assert {f"more-{i}" for i in range(6)} <= made  # batches of 1, 2 and 4: the third had the refusal
    assert not any(f"more-{i}" in made for i in range(6, 40))


def test_cordoned_nodes_are_listed_in_one_request(api_client: Any, controlplane: ControlPlane) -> None:
    nodes = controlplane.add_fake_nodes(2, prefix="cordon-test")
    core = client.CoreV1Api(api_client)
    core.patch_node(nodes[0], {"spec": {"unschedulable": True}})
    try:
        cordoned = Kube(api_client).cordoned_nodes()
        assert nodes[0] in cordoned and nodes[1] not in cordoned
    finally:
        for node in nodes:
            core.delete_node(node)


def test_a_change_is_told_as_delivered_saying_who_made_it_and_the_first_list_as_added(
    api_client: Any, namespace: str, crd_installed: None
) -> None:
    """One watch per kind: the operator's drift handlers hear of a ConfigMap from its cache alone, so what
    is told must say who wrote it last (managedFields), though the cache keeps it without them."""
    core = client.CoreV1Api(api_client)
    made: Any = {"metadata": {"name": "conf", "labels": dict(MANAGED)}, "data": {"a": "1"}}
    core.create_namespaced_config_map(namespace, made)
    told: list[tuple[str, dict[str, Any]]] = []
    lock = threading.Lock()

    def tell(type_: str, obj: dict[str, Any]) -> None:
        with lock:
            told.append((type_, obj))

    kube = Kube(api_client)
    assert kube.use_caches([namespace], {("v1", "ConfigMap"): tell}, sync_timeout=30), "the caches never listed"
    try:
        assert [(t, o["metadata"]["name"]) for t, o in told] == [("ADDED", "conf")]  # the first list
        core.patch_namespaced_config_map("conf", namespace, {"data": {"a": "2"}}, field_manager="kubectl-edit")

        def edit_told() -> dict[str, Any] | None:
            with lock:
                return next((o for t, o in told if t == "MODIFIED" and o["data"] == {"a": "2"}), None)

        edited = wait_for("the edit told", edit_told, 30)
        managers = {e["manager"] for e in edited["metadata"]["managedFields"]}
        assert "kubectl-edit" in managers, edited["metadata"]["managedFields"]
        held = kube.get("v1", "ConfigMap", namespace, "conf")
        assert held is not None and held["data"] == {"a": "2"} and "managedFields" not in held["metadata"]
    finally:
        assert kube.caches is not None
        kube.caches.stop()
