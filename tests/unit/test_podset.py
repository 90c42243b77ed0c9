"""A WorkerSet's pods: filled up at the lowest free ordinals, each with a stable DNS name, never
filled up behind a pod that is still going; status as an HPA reads it."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from warden import naming
from warden.model import parse_spec
from warden.render.cluster import render
from warden.render.context import Cluster
from warden.workers.controller import WorkQueue
from warden.workers.pod import SetPod, ordinal, read
from warden.workers.podset import plan, pod_manifest, status, template_hash

WS = "demo-worker-cpu"


def pod(i: int, **kw: object) -> SetPod:
    return SetPod(name=f"{WS}-{i}", ordinal=i, **kw)  # type: ignore[arg-type]


def worker_set(replicas: int = 2) -> dict:  # type: ignore[type-arg]
    spec = parse_spec({"workerGroups": [{"name": "cpu", "replicas": replicas}]})
    (ws,) = [o for o in render(Cluster(name="demo", namespace="ns", spec=spec)).objects if o["kind"] == "WorkerSet"]
    ws["metadata"]["uid"] = "u-1"
    return ws


def test_missing_pods_are_made_at_the_lowest_free_ordinals() -> None:
    assert plan(3, [], shrink=False).create == [0, 1, 2]
    assert plan(3, [pod(1), pod(4)], shrink=False).create == [0], "holes left by an idle-first scale-in fill first"
    assert plan(2, [pod(0), pod(1)], shrink=False).create == []


def test_a_pod_going_keeps_its_ordinal_and_counts_until_it_is_gone() -> None:
    out = plan(2, [pod(0), pod(1, deleting=True)], shrink=False)
    assert out.create == [] and out.delete == [], "replaced under the same name once the old one is gone"
    assert plan(2, [pod(0)], shrink=False).create == [1]


def test_ended_pods_are_cleared_and_then_made_again() -> None:
    out = plan(2, [pod(0), pod(1, ended="Failed")], shrink=False)
    assert [p for p, _ in out.delete] == [f"{WS}-1"] and out.create == []


def test_more_pods_than_wanted_are_left_to_the_scale_in_unless_told_to_shrink() -> None:
    pods = [pod(0), pod(1), pod(2)]
    assert plan(1, pods, shrink=False).delete == [], "warden.workers.scalein picks and drains them"
    assert [p for p, _ in plan(1, pods, shrink=True).delete] == [f"{WS}-2", f"{WS}-1"]


def test_a_pod_is_its_template_with_a_stable_dns_name_owned_by_its_set() -> None:
    ws = worker_set()
    p = pod_manifest(ws, 3, template_hash(ws))
    assert p["metadata"]["name"] == f"{WS}-3" and p["spec"]["hostname"] == f"{WS}-3"
    assert p["spec"]["subdomain"] == "demo-nodes", "<pod>.demo-nodes resolves, as slurmctld needs"
    assert p["metadata"]["labels"] == ws["spec"]["template"]["metadata"]["labels"]
    assert p["metadata"]["annotations"][naming.POD_TEMPLATE_ANNOTATION] == template_hash(ws)
    (owner,) = p["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("WorkerSet", WS, "u-1", True)
    assert p["spec"]["containers"] == ws["spec"]["template"]["spec"]["containers"]


def test_a_pod_is_made_with_the_configuration_its_set_was_last_applied_with() -> None:
    ws = worker_set()
    assert naming.POD_CONFIG_ANNOTATION not in pod_manifest(ws, 0, template_hash(ws))["metadata"]["annotations"]
    ws["metadata"]["annotations"] = {naming.POD_CONFIG_ANNOTATION: "cfg-1"}
    p = pod_manifest(ws, 0, template_hash(ws))
    assert p["metadata"]["annotations"][naming.POD_CONFIG_ANNOTATION] == "cfg-1"  # nothing left to mark
    assert template_hash(ws) == template_hash(worker_set())  # the set's mark is no change of make-up


def test_a_reconcile_marks_worker_sets_only_and_never_their_template() -> None:
    from warden.reconcile import stamp_config

    ws, cm = worker_set(), {"kind": "ConfigMap", "metadata": {"name": "demo-slurm"}, "data": {"a": "1"}}
    stamped = stamp_config([ws, cm], "cfg-2")
    assert stamped[0]["metadata"]["annotations"] == {naming.POD_CONFIG_ANNOTATION: "cfg-2"}
    assert stamped[0]["spec"] == ws["spec"] and stamped[1] == cm
    assert "annotations" not in ws["metadata"]  # the rendered object is left as it was


def test_the_template_hash_follows_the_pod_make_up_only() -> None:
    a, b = worker_set(2), worker_set(5)
    assert template_hash(a) == template_hash(b), "a size change is no upgrade"
    b["spec"]["template"]["spec"]["containers"][0]["image"] = "other:1"
    assert template_hash(a) != template_hash(b)


def test_status_counts_live_ready_and_up_to_date_pods_and_gives_the_selector() -> None:
    ws = worker_set()
    now = template_hash(ws)
    pods = [pod(0, ready=True, template=now), pod(1, template="old"), pod(2, deleting=True, ready=True)]
    out = status(ws, pods)
    assert (out["replicas"], out["readyReplicas"], out["updatedReplicas"]) == (2, 1, 1)
    assert "app.kubernetes.io/instance=demo" in out["selector"] and "worker-group=cpu" in out["selector"]


def test_only_the_sets_own_pod_names_have_ordinals() -> None:
    assert ordinal(WS, f"{WS}-12") == 12
    assert (
        ordinal(WS, f"{WS}-x") is None and ordinal(WS, f"{WS}-01") is None and ordinal(WS, "demo-worker-gpu-0") is None
    )
    raw: dict[str, Any] = {
        "metadata": {"name": f"{WS}-1", "annotations": {naming.POD_TEMPLATE_ANNOTATION: "h"}},
        "status": {"phase": "Failed", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    assert read(WS, raw) == SetPod(name=f"{WS}-1", ordinal=1, ended="Failed", ready=True, template="h")
    # picked by a scale-in, its slurmd running: both as epoch seconds
    raw["metadata"]["annotations"][naming.LEAVING_ANNOTATION] = "2026-11-29T10:00:00Z"
    raw["status"]["containerStatuses"] = [
        {"name": "slurmd", "state": {"running": {"startedAt": "2026-11-29T09:00:00Z"}}},
        {"name": "other", "state": {"running": {"startedAt": "2026-11-29T08:00:00Z"}}},
    ]
    seen = read(WS, raw)
    assert seen is not None and (seen.leaving_since, seen.slurmd_started) == (1795946400.0, 1795942800.0)


def read_while_closing(q: WorkQueue) -> list[object]:
    """What a reader waiting on the queue gets when the queue is closed under it."""
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(q.get()))
    t.start()
    q.close()
    t.join(5)
    return got


def test_the_queue_holds_a_set_once_however_many_events_name_it() -> None:
    q = WorkQueue()
    for _ in range(1000):
        q.add(("ns", "a"))
    q.add(("ns", "b"))
    assert [q.get(), q.get()] == [("ns", "a"), ("ns", "b")]
    q.add(("ns", "a"))
    assert q.get() == ("ns", "a"), "handled keys can come back"
    assert read_while_closing(q) == [None], "closing wakes a waiting reader"


def test_a_set_looked_at_a_moment_ago_waits_while_others_go_first() -> None:
    q = WorkQueue(gap=600.0)
    q.add(("ns", "a"))
    assert q.get() == ("ns", "a")
    q.add(("ns", "a"))  # its pods changed while it was looked at
    q.add(("ns", "b"))
    assert q.get() == ("ns", "b"), "a set just looked at does not hold up the others"
    assert read_while_closing(q) == [None], "the held set is not handed out before its time"


def test_a_held_set_is_looked_at_again_once_its_gap_has_passed() -> None:
    q = WorkQueue(gap=0.05)
    q.add(("ns", "a"))
    assert q.get() == ("ns", "a")
    q.add(("ns", "a"))
    q.add(("ns", "a"))
    assert q.get() == ("ns", "a"), "the events named it twice: one more look"


def test_a_set_never_looked_at_is_due_at_once_on_a_node_just_booted(monkeypatch: pytest.MonkeyPatch) -> None:
    """time.monotonic counts from the machine's boot: on a node up 5 s, a set never handed out is due now, not
    once the node has been up for the gap (this unit tier hung on a machine booted a few minutes before)."""
    import time

    monkeypatch.setattr(time, "monotonic", lambda: 5.0)
    q = WorkQueue(gap=600.0)
    q.add(("ns", "a"))
    assert q.get() == ("ns", "a")
