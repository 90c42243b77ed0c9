"""Where the bridge may bind a pod (warden.bridge.fit, warden.bridge.placement): Kubernetes' own rules, which
kube-scheduler would hold the pod to, hold for the node Slurm chose. The real API server and kwok nodes:
tests/integration/test_bridge.py (`test_a_pod_is_never_bound_to_a_node_whose_taint_it_does_not_tolerate`)."""

from __future__ import annotations

from typing import Any

import pytest

from warden.bridge.fit import tolerates, why_not
from warden.bridge.placement import place
from warden.bridge.translate import Defaults, Refusal, job_description
from warden.bridge.workloads import PodView, Workload, trim


def node(name: str = "n1", labels: dict[str, str] | None = None, *taints: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {"taints": list(taints)}}


CONTROL_PLANE = {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}
GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoExecute"}


@pytest.mark.parametrize(
    ("toleration", "taint", "tolerated"),
    [
        ({"key": "nvidia.com/gpu", "operator": "Exists"}, GPU, True),
        ({"key": "nvidia.com/gpu", "value": "present", "effect": "NoExecute"}, GPU, True),
        ({"key": "nvidia.com/gpu", "value": "absent"}, GPU, False),
        ({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, GPU, False),
        ({"operator": "Exists"}, CONTROL_PLANE, True),  # no key, Exists: every taint
        ({"key": "other", "operator": "Exists"}, CONTROL_PLANE, False),
    ],
)
def test_tolerations_match_taints_as_kubernetes_matches_them(
    toleration: dict[str, str], taint: dict[str, str], tolerated: bool
) -> None:
    assert tolerates(toleration, taint) is tolerated


def test_a_taint_a_nodeselector_and_required_affinity_each_keep_a_pod_off_a_node() -> None:
    assert why_not({}, node()) is None
    assert "node-role.kubernetes.io/control-plane:NoSchedule" in str(why_not({}, node("cp", {}, CONTROL_PLANE)))
    assert why_not({}, node("n", {}, {"key": "soft", "effect": "PreferNoSchedule"})) is None
    assert why_not({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}, node("g", {}, GPU)) is None
    assert "nodeSelector zone=a" in str(why_not({"nodeSelector": {"zone": "a"}}, node("n", {"zone": "b"})))
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["special"]}]},
    ]}}}  # fmt: skip
    assert why_not({"affinity": affinity}, node("n", {"zone": "a"})) is None
    assert why_not({"affinity": affinity}, node("special", {"zone": "b"})) is None
    assert "required node affinity" in str(why_not({"affinity": affinity}, node("n", {"zone": "b"})))


def _pod(name: str, **spec: Any) -> PodView:
    body = {"metadata": {"name": name, "namespace": "t", "uid": name},
            "spec": {"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}], **spec}}  # fmt: skip
    return PodView.of(body)


def test_no_pod_of_a_gang_is_bound_where_one_may_not_run() -> None:
    """Slurm's allocation on a tainted node: the gang waits, saying which node and why, none is bound."""
    nodes = {"a": node("a"), "b": node("b", {}, CONTROL_PLANE)}
    pods = [_pod("p0"), _pod("p1")]
    answer = place([("a", 1), ("b", 1)], 1, pods, lambda n: n, lambda p, n: why_not(p.placement, nodes[n]))
    assert isinstance(answer, str) and "Kubernetes node b, where pod p1 may not run: its taint" in answer
    tolerant = [_pod(f"p{i}", tolerations=[{"key": CONTROL_PLANE["key"], "operator": "Exists"}]) for i in (0, 1)]
    placed = place([("a", 1), ("b", 1)], 1, tolerant, lambda n: n, lambda p, n: why_not(p.placement, nodes[n]))
    assert not isinstance(placed, str) and [pl.kube_node for pl in placed] == ["a", "b"]


def test_the_pod_cache_keeps_what_says_where_a_pod_may_run() -> None:
    """The bridge caches trimmed pods: their tolerations, nodeSelector and affinity stay, or every pod would
    look like one that tolerates nothing."""
    spec = {"tolerations": [{"key": "dedicated", "operator": "Exists"}], "nodeSelector": {"zone": "a"},
            "affinity": {"nodeAffinity": {}}, "containers": []}  # fmt: skip
    pod = PodView.of(trim({"metadata": {"name": "p"}, "spec": spec}))
    assert pod.placement == {k: spec[k] for k in ("tolerations", "nodeSelector", "affinity")}
    assert "tolerations" not in trim({"metadata": {"name": "p"}, "spec": {"containers": []}})["spec"]


def test_the_job_asks_slurm_for_none_of_the_nodes_its_pods_may_not_run_on() -> None:
    """``excluded_nodes`` only when there are some: a job whose pods may run anywhere reads as it did."""
    w = Workload("Pod", "team", "p", "uid", 1, (_pod("p"),))
    desc = job_description(w, Defaults(partition="k8s"), {}, ["n2", "n1"])
    assert not isinstance(desc, Refusal) and desc["excluded_nodes"] == ["n1", "n2"]
    plain = job_description(w, Defaults(partition="k8s"), {})
    assert not isinstance(plain, Refusal) and "excluded_nodes" not in plain
