"""The Events the operator posts: what `kubectl events` and a program reading them get."""

from __future__ import annotations

import ast
import datetime
import re
from pathlib import Path
from typing import Any

import pytest

from warden.events import (
    CONTROLLER,
    NOTE_LIMIT,
    REASONS,
    SERIES_WINDOW_SECONDS,
    Event,
    Ref,
    clip_note,
    manifest,
    posted,
    series_patch,
)
from warden.nodesync import UNUSABLE

ROOT = Path(__file__).resolve().parents[2]
CLUSTER: dict[str, Any] = {
    "apiVersion": "slurm.warden.dev/v1alpha1",
    "kind": "SlurmCluster",
    "metadata": {"namespace": "team-a", "name": "demo", "uid": "0b6c-11"},
}
NOW = datetime.datetime(2026, 11, 24, 9, 30, 5, 123456, tzinfo=datetime.UTC)
# What the API accepts as reportingController: a qualified name (DNS subdomain prefix, '/', name).
QUALIFIED = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def test_a_drain_says_who_what_and_which_pod() -> None:
    event = Event(
        Ref.of(CLUSTER),
        "NodeDrained",
        "demo-worker-gpu-1: health: nccl busbw 41.2 < 80",
        Ref.pod("team-a", "demo-worker-gpu-1"),
    )
    out = manifest(event, "warden-operator-7d9f-x2", NOW)
    assert out["apiVersion"] == "events.k8s.io/v1" and out["kind"] == "Event"
    assert out["metadata"]["namespace"] == "team-a"
    assert re.fullmatch(r"demo\.[0-9a-f]+", out["metadata"]["name"])  # a DNS subdomain, as the API wants it
    again = manifest(event, "warden-operator-7d9f-x2", NOW + datetime.timedelta(microseconds=1))
    assert again["metadata"]["name"] != out["metadata"]["name"]
    other = Event(Ref.of(CLUSTER), "NodeDrained", "demo-worker-gpu-0: health: nccl busbw 40.0 < 80")
    assert manifest(other, "warden-operator-7d9f-x2", NOW)["metadata"]["name"] != out["metadata"]["name"]
    assert (out["type"], out["reason"], out["action"]) == ("Warning", "NodeDrained", "Drain")
    assert out["regarding"] == {"apiVersion": "slurm.warden.dev/v1alpha1", "kind": "SlurmCluster",
                                "namespace": "team-a", "name": "demo", "uid": "0b6c-11"}  # fmt: skip
    assert out["related"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "team-a", "name": "demo-worker-gpu-1"}
    assert out["note"] == "demo-worker-gpu-1: health: nccl busbw 41.2 < 80"
    assert out["eventTime"] == "2026-11-24T09:30:05.123456Z"
    assert (out["reportingController"], out["reportingInstance"]) == (CONTROLLER, "warden-operator-7d9f-x2")
    # events.k8s.io/v1 refuses the core/v1-only fields on create
    assert not {"deprecatedSource", "deprecatedFirstTimestamp", "deprecatedLastTimestamp", "deprecatedCount"} & set(out)


def test_an_event_about_the_cluster_alone_names_no_related_object() -> None:
    out = manifest(Event(Ref.of(CLUSTER), "Reconciled", "41 objects applied; phase Ready"), "op", NOW)
    assert "related" not in out and (out["type"], out["action"]) == ("Normal", "Reconcile")


def test_a_failed_slurm_action_names_what_it_tried() -> None:
    event = Event(Ref.of(CLUSTER), "SlurmActionFailed", "ScaleInDraining of w-3 failed: 500", action="Drain")
    out = manifest(event, "op", NOW)
    assert (out["type"], out["reason"], out["action"]) == ("Warning", "SlurmActionFailed", "Drain")


def test_a_reason_outside_the_catalogue_is_refused() -> None:
    with pytest.raises(ValueError, match="REASONS"):
        Event(Ref.of(CLUSTER), "SomethingHappened", "x")


def test_every_reason_is_a_valid_event_reason_and_action() -> None:
    assert QUALIFIED.match(CONTROLLER)
    for reason, what in REASONS.items():
        assert re.fullmatch(r"[A-Z][A-Za-z]+", reason) and len(reason) <= 128
        assert re.fullmatch(r"[A-Z][A-Za-z]+", what.action) and len(what.action) <= 128
    assert manifest(Event(Ref.of(CLUSTER), "Reconciled", "x"), "i" * 300, NOW)["reportingInstance"] == "i" * 128


def test_a_long_note_is_cut_within_the_byte_limit_on_a_character_boundary() -> None:
    assert clip_note("short") == "short"
    exact = "x" * NOTE_LIMIT
    assert clip_note(exact) == exact
    long = "ä" * 2000  # two bytes each
    cut = clip_note(long)
    assert len(cut.encode()) <= NOTE_LIMIT and cut.endswith("…") and set(cut[:-1]) == {"ä"}
    out = manifest(Event(Ref.of(CLUSTER), "ApplyFailed", long), "op", NOW)
    assert len(out["note"].encode()) <= NOTE_LIMIT


def test_the_same_event_again_is_the_same_series_and_another_is_not() -> None:
    pod = Ref.pod("team-a", "w-1")
    first = Event(Ref.of(CLUSTER), "ApplyFailed", "ServiceMonitor/demo-exporter: 404", pod)
    assert first.key() == Event(Ref.of(CLUSTER), "ApplyFailed", "ServiceMonitor/demo-exporter: 404", pod).key()
    assert first.key() != Event(Ref.of(CLUSTER), "ApplyFailed", "ServiceMonitor/demo-exporter: 403", pod).key()
    assert first.key() != Event(Ref.of(CLUSTER), "ApplyFailed", "ServiceMonitor/demo-exporter: 404").key()
    recreated = {**CLUSTER, "metadata": {**CLUSTER["metadata"], "uid": "other"}}  # deleted and made again
    assert first.key() != Event(Ref.of(recreated), "ApplyFailed", "ServiceMonitor/demo-exporter: 404", pod).key()
    assert series_patch(3, NOW) == {"series": {"count": 3, "lastObservedTime": "2026-11-24T09:30:05.123456Z"}}


def test_an_event_read_back_from_the_api_is_the_same_series_when_it_is_the_operators_and_recent() -> None:
    """What a replica taking over finds: the Events the one before it posted, known by the same key."""
    pod = Ref.pod("team-a", "w-1")
    for event in (Event(Ref.of(CLUSTER), "Reconciled", "31 objects applied; phase Ready"),
                  Event(Ref.of(CLUSTER), "NodeDrained", "warden: nccl busbw 20 < 100", pod)):  # fmt: skip
        stored = {**manifest(event, "op-a", NOW), "series": {"count": 4}}
        found = posted(stored, NOW + datetime.timedelta(seconds=90))
        assert found is not None
        assert (found.key, found.name, found.count, found.age) == (event.key(), stored["metadata"]["name"], 4, 90)
    event = Event(Ref.of(CLUSTER), "Reconciled", "31 objects applied; phase Ready")
    assert posted({**manifest(event, "op-a", NOW), "reportingController": "kubelet"}, NOW) is None
    assert posted(manifest(event, "op-a", NOW), NOW + datetime.timedelta(seconds=SERIES_WINDOW_SECONDS + 1)) is None


def _reasons_in_source() -> set[str]:
    """Every reason the operator's code passes as a literal to Event(...), say(...), act(...), _act(...),
    the bridge's _event(...) and Evict(...), a node condition plan's Action(...), a planned PodEvent(...),
    or a watch's Told(...) for the cluster worker to say."""
    found: set[str] = set(UNUSABLE.values())
    for path in (ROOT / "operator" / "warden").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name not in ("Event", "PodEvent", "say", "act", "_act", "_event", "Evict", "Action", "Told"):
                continue
            for arg in node.args:
                if (
                    isinstance(arg, ast.Constant)
                    and isinstance(arg.value, str)
                    and re.fullmatch(r"[A-Z][A-Za-z]+", arg.value)
                ):
                    found.add(arg.value)
    return found


def test_every_reason_the_code_posts_is_in_the_catalogue_and_every_listed_one_is_posted() -> None:
    posted = _reasons_in_source()
    assert posted - set(REASONS) == set()
    assert set(REASONS) - posted == set(), "listed but never posted"


def test_the_operations_guide_lists_every_event_with_its_type_and_action() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    rows = re.findall(r"^\| `([A-Za-z]+)` \| (Normal|Warning) \| `([A-Za-z]+)` \|", text, re.M)
    assert {r: (t, a) for r, t, a in rows} == {
        r: ("Warning" if what.warning else "Normal", what.action) for r, what in REASONS.items()
    }
