"""The pure parts of the watch caches and the fan-out of writes (``warden.kube.cache``,
``warden.kube.fanout``); the informers themselves run against a real API server in
tests/integration/test_kube_cache.py."""

from __future__ import annotations

import threading
import tracemalloc
from functools import partial
from typing import Any

import pytest

from warden.imagepulls import failures as image_pull_failures
from warden.kube.cache import Informer, matches, newer, slim_pod, without_managed_fields
from warden.kube.fanout import Fanout, batches

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "big-worker-cpu-7",
        "namespace": "team-a",
        "uid": "u-7",
        "resourceVersion": "120",
        "labels": {"app.kubernetes.io/component": "worker", "slurm.warden.dev/busy": "true"},
        "annotations": {
            "slurm.warden.dev/pod-template": "abc",
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
        },
        "ownerReferences": [{"kind": "WorkerSet", "name": "big-worker-cpu"}],
        "managedFields": [{"manager": "warden-operator", "fieldsV1": {"f:spec": {}}}],
    },
    "spec": {
        "nodeName": "kwok-3",
        "volumes": [{"name": "jail", "persistentVolumeClaim": {"claimName": "big-jail"}}],
        "initContainers": [{"name": "wait", "image": "warden/worker:1", "command": ["true"]},
                           {"name": "copy", "image": "r.example.com/tools:2", "command": ["cp"]}],
        "containers": [
            {
                "name": "slurmd",
                "image": "warden/worker:1",
                "env": [{"name": "WARDEN_SLURM_SERIES", "value": "26.05"}, {"name": "PATH", "value": "/bin"}],
                "volumeMounts": [{"name": "jail", "mountPath": "/jail"}],
            }
        ],
    },
    "status": {
        "phase": "Running",
        "podIP": "10.0.0.7",
        "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": None},
                       {"type": "PodScheduled", "status": "True"},
                       {"type": "slurm.warden.dev/SlurmNode", "status": "False", "reason": "Draining", "message": "m",
                        "lastTransitionTime": "t"}],
        "containerStatuses": [
            {"name": "slurmd", "ready": True, "restartCount": 1, "state": {"running": {"startedAt": "x"}},
             "imageID": "sha256:1", "lastState": {}},
        ],
        "initContainerStatuses": [
            {"name": "wait", "state": {"terminated": {"exitCode": 0, "containerID": "containerd://1"}}},
            {"name": "copy", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off"}},
             "image": "r.example.com/tools:2"},
        ],
    },
}  # fmt: skip


def test_a_cached_pod_keeps_what_the_operator_reads_and_nothing_else() -> None:
    slim = slim_pod(POD)
    meta = slim["metadata"]
    assert meta["labels"] == POD["metadata"]["labels"]
    assert meta["annotations"] == {"slurm.warden.dev/pod-template": "abc"}
    assert meta["ownerReferences"] == POD["metadata"]["ownerReferences"]
    assert "managedFields" not in meta
    assert slim["spec"] == {
        "nodeName": "kwok-3",
        "containers": [
            {"name": "slurmd", "image": "warden/worker:1", "env": [{"name": "WARDEN_SLURM_SERIES", "value": "26.05"}]}
        ],
        "initContainers": [
            {"name": "wait", "image": "warden/worker:1"},
            {"name": "copy", "image": "r.example.com/tools:2"},
        ],
    }
    assert slim["status"]["phase"] == "Running"
    assert slim["status"]["podIP"] == "10.0.0.7"  # a controller pod's verdict is asked there (warden.ha.verdict)
    assert slim["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "slurm.warden.dev/SlurmNode", "status": "False", "reason": "Draining", "message": "m"},
    ]
    assert slim["status"]["containerStatuses"] == [
        {"name": "slurmd", "ready": True, "restartCount": 1, "state": {"running": {"startedAt": "x"}}, "lastState": {}}
    ]
    # an init container only while it waits: what ``warden.observe`` looks for (an image it cannot pull)
    assert slim["status"]["initContainerStatuses"] == [
        {"name": "copy", "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off"}}}
    ]
    assert [(f.pod, f.image, f.reason) for f in image_pull_failures(slim)] == [
        ("big-worker-cpu-7", "r.example.com/tools:2", "ImagePullBackOff")
    ]


def test_a_later_resource_version_replaces_an_earlier_one_and_never_the_reverse() -> None:
    older = {"metadata": {"resourceVersion": "99"}}
    later = {"metadata": {"resourceVersion": "120"}}
    assert newer(later, older)
    assert not newer(older, later)
    assert not newer(later, later)
    assert newer(older, None)


def test_managed_fields_are_left_out_and_selectors_match_labels_and_namespace() -> None:
    trimmed = without_managed_fields(POD)
    assert "managedFields" not in trimmed["metadata"] and trimmed["metadata"]["name"] == "big-worker-cpu-7"
    assert "managedFields" in POD["metadata"]  # the object read is left as it was
    assert matches(POD, "team-a", {"app.kubernetes.io/component": "worker"})
    assert matches(POD, "", {})
    assert not matches(POD, "team-b", {})
    assert not matches(POD, "team-a", {"app.kubernetes.io/component": "login"})


def test_slow_start_batches_double_until_everything_is_sent() -> None:
    assert batches(0) == []
    assert batches(1) == [1]
    assert batches(10) == [1, 2, 4, 3]
    assert batches(1000) == [1, 2, 4, 8, 16, 32, 64, 128, 256, 489]
    assert sum(batches(10_000)) == 10_000


def test_a_fanout_runs_every_call_with_at_most_its_limit_in_flight() -> None:
    lock = threading.Lock()
    in_flight, most = 0, 0
    gate = threading.Barrier(4, timeout=10)  # the limit's worth of calls meet: they really run together

    def call(i: int) -> int:
        nonlocal in_flight, most
        with lock:
            in_flight += 1
            most = max(most, in_flight)
        if i in range(3, 7):  # the third batch (4 calls): all four in flight at once
            gate.wait()
        with lock:
            in_flight -= 1
        return i

    out = Fanout(4).run([partial(call, i) for i in range(100)])
    assert out.error is None
    assert sorted(out.results) == list(range(100))
    assert most == 4


def test_a_fanout_stops_after_the_batch_where_a_call_failed() -> None:
    ran: list[int] = []
    lock = threading.Lock()

    def call(i: int) -> int:
        with lock:
            ran.append(i)
        if i == 4:
            raise RuntimeError("quota exceeded")
        return i

    out = Fanout(8).run([partial(call, i) for i in range(100)])
    assert isinstance(out.error, RuntimeError) and "quota" in str(out.error)
    assert sorted(ran) == list(range(7))  # batches 1, 2 and 4: the one with the failure ends the run
    assert sorted(out.results) == [0, 1, 2, 3, 5, 6]


def test_a_big_batch_is_run_without_holding_something_for_each_of_its_calls() -> None:
    calls = [partial(int, i) for i in range(10_000)]  # batches up to 4,096 calls
    fanout = Fanout(16)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        out = fanout.run(calls)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert out.error is None and out.results == list(range(10_000))
    assert peak < 1 << 20, f"{peak / 2**20:.1f} MiB held while running them"  # a future for each call: 9.5 MiB


def test_a_fanout_needs_a_positive_limit() -> None:
    with pytest.raises(ValueError, match="at least one"):
        Fanout(0)


def test_a_cache_kopf_keeps_lists_once_and_then_holds_what_kopfs_events_bring() -> None:
    """The SlurmClusters' cache (``follow=False``): one list at start, no watch of its own; each event kopf's
    watch delivers (``observed``) changes it, a deletion included, and an older event never undoes a newer."""
    listed: list[str] = []

    def call(method: str, path: str, query: list[tuple[str, str]] | None = None) -> dict[str, Any]:
        listed.append(f"{method} {path}")
        item = {"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "5"}, "spec": {"x": 1}}
        return {"kind": "SlurmClusterList", "apiVersion": "slurm.warden.dev/v1alpha1", "metadata":
                {"resourceVersion": "7"}, "items": [item]}  # fmt: skip

    def stream(path: str, query: list[tuple[str, str]], timeout: float) -> Any:
        raise AssertionError(f"a watch of its own: {path}")

    informer = Informer(call, stream, "/apis/slurm.warden.dev/v1alpha1/namespaces/ns/slurmclusters", {}, follow=False)
    informer.start()
    assert informer.wait_synced(10)
    assert informer._thread is not None
    informer._thread.join(timeout=10)
    assert not informer._thread.is_alive() and listed == [
        "GET /apis/slurm.warden.dev/v1alpha1/namespaces/ns/slurmclusters"
    ]
    assert informer.get("ns", "a")["spec"] == {"x": 1}  # type: ignore[index]

    def cluster(name: str, version: str, x: int) -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": version}, "spec": {"x": x}}

    informer.observed("MODIFIED", cluster("a", "9", 2))
    informer.observed("MODIFIED", cluster("a", "8", 3))  # late: the cache keeps the newer
    informer.observed("ADDED", cluster("b", "10", 1))
    assert informer.get("ns", "a")["spec"] == {"x": 2}  # type: ignore[index]
    assert sorted(o["metadata"]["name"] for o in informer.list("ns", {})) == ["a", "b"]
    informer.observed("DELETED", cluster("a", "11", 2))
    informer.observed("MODIFIED", cluster("a", "9", 2))  # an answer to a write that the deletion overtook
    assert informer.get("ns", "a") is None and len(informer) == 1


def test_a_fresh_read_asks_the_api_server_and_brings_the_cache_up_to_its_answer() -> None:
    """The cluster worker reads a cluster fresh before a reconcile makes children: one deleted a moment ago
    (its deletion not yet in the cache) is gone for it, and for the cache from then on."""
    from kubernetes.client.exceptions import ApiException

    from warden.kube.cache import Caches
    from warden.kube.client import Kube
    from warden.model import API_GROUP, API_VERSION

    answers: dict[str, Any] = {}
    asked: list[str] = []

    def call(method: str, path: str, query: list[tuple[str, str]] | None = None) -> Any:
        asked.append(path)
        answer = answers[path]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def cluster(name: str, version: str) -> dict[str, Any]:
        return {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": "SlurmCluster",
                "metadata": {"name": name, "namespace": "ns", "resourceVersion": version}}  # fmt: skip

    kube = Kube(None)  # type: ignore[arg-type]
    kube.call = call  # type: ignore[method-assign,assignment]
    kube.caches = Caches(call, lambda *_: iter(()), ["ns"])
    informer = kube.caches._by[(f"{API_GROUP}/{API_VERSION}", "SlurmCluster", "ns")]
    informer._synced.set()
    informer.offer(cluster("gone", "5"))
    informer.offer(cluster("kept", "5"))
    prefix = f"/apis/{API_GROUP}/{API_VERSION}/namespaces/ns/slurmclusters"
    answers[f"{prefix}/gone"] = ApiException(status=404, reason="Not Found")
    answers[f"{prefix}/kept"] = cluster("kept", "9")

    api_version = f"{API_GROUP}/{API_VERSION}"
    assert kube.get(api_version, "SlurmCluster", "ns", "gone") is not None and asked == []  # the cache answers
    assert kube.get(api_version, "SlurmCluster", "ns", "gone", fresh=True) is None
    assert kube.get(api_version, "SlurmCluster", "ns", "gone") is None  # the cache knows it now
    informer.offer(cluster("gone", "5"))  # a late answer to an earlier write does not bring it back
    assert kube.get(api_version, "SlurmCluster", "ns", "gone") is None
    fresh = kube.get(api_version, "SlurmCluster", "ns", "kept", fresh=True)
    assert fresh is not None and fresh["metadata"]["resourceVersion"] == "9"
    assert kube.get(api_version, "SlurmCluster", "ns", "kept")["metadata"]["resourceVersion"] == "9"  # type: ignore[index]
