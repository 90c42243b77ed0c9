"""The bridge's pure halves: pods to workloads, workloads to Slurm job descriptions, allocations to places."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from warden.bridge.placement import Place, place, slots
from warden.bridge.translate import Defaults, Refusal, comment, job_description, placeholder_of
from warden.bridge.workloads import Gang, PodView, Workload, group, size_of, trim


def pod(
    name: str,
    cpu: str | None = "1",
    memory: str | None = "100Mi",
    owner: tuple[str, str, str] | None = None,
    annotations: dict[str, str] | None = None,
    node: str = "",
    labels: dict[str, str] | None = None,
    phase: str = "Pending",
    **spec: Any,
) -> PodView:
    limits = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    meta: dict[str, Any] = {"name": name, "namespace": "team", "uid": f"uid-{name}",
                            "annotations": annotations or {}, "labels": labels or {}}  # fmt: skip
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "uid": owner[2], "controller": True}]
    manifest = {
        "metadata": meta,
        "spec": {"nodeName": node or None, "containers": [{"name": "c", "resources": {"limits": limits}}], **spec},
        "status": {"phase": phase},
    }
    return PodView.of(trim(manifest))


def test_a_pods_size_counts_containers_sidecars_the_largest_init_container_and_the_overhead() -> None:
    spec = {
        "containers": [
            {"resources": {"limits": {"cpu": "500m", "memory": "1Gi"}}},
            {"resources": {"limits": {"cpu": "1", "memory": "512Mi", "nvidia.com/gpu": "2"}}},
        ],
        "initContainers": [
            {"resources": {"limits": {"cpu": "3", "memory": "256Mi"}}},  # runs alone, before: only if larger
            {"restartPolicy": "Always", "resources": {"limits": {"cpu": "250m", "memory": "64Mi"}}},  # a sidecar
        ],
        "overhead": {"cpu": "100m", "memory": "10Mi"},
    }
    size = size_of(spec)
    assert size.cpus == Decimal("3.1") and size.memory_mib == 1024 + 512 + 64 + 10 and size.gpus == 2
    assert size.limited
    assert not size_of({"containers": [{"resources": {"limits": {"cpu": "1"}}}]}).limited
    assert not size_of({"containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}).limited


def test_a_job_whose_pods_all_run_at_once_is_one_gang_other_pods_go_alone() -> None:
    gang = ("Job", "train", "job-uid")
    pods = [pod("train-b", owner=gang, annotations={"batch.kubernetes.io/job-completion-index": "1"}),
            pod("train-a", owner=gang, annotations={"batch.kubernetes.io/job-completion-index": "0"}),
            pod("queue-x", owner=("Job", "queue", "q-uid")),
            pod("lonely")]  # fmt: skip
    gangs = {"job-uid": Gang.of_job("train", "job-uid", parallelism=2, completions=2),
             "q-uid": Gang.of_job("queue", "q-uid", parallelism=2, completions=10)}  # fmt: skip
    workloads = {w.name: w for w in group(pods, gangs)}
    assert workloads["train"].kind == "Job" and workloads["train"].size == 2
    assert [p.name for p in workloads["train"].pods] == ["train-a", "train-b"]  # by completion index
    assert workloads["queue-x"].size == 1 and workloads["queue-x"].kind == "Pod"  # more completions than run at once
    assert workloads["lonely"].uid == "uid-lonely"
    sizes = [Gang.of_job("j", "u", p, c).size for p, c in ((1, None), (4, None), (4, 3), (4, 5))]
    assert sizes == [1, 4, 3, 1]


def test_the_pods_of_a_pod_group_are_one_gang_of_its_min_member() -> None:
    pods = [pod(f"w-{i}", labels={"scheduling.x-k8s.io/pod-group": "ring"}) for i in range(3)]
    unread = group(pods, {})  # no PodGroup read (none, or no CRD): each pod alone
    assert [w.size for w in unread] == [1, 1, 1]
    [w] = group(pods, {"PodGroup/team/ring": Gang("PodGroup", "ring", "pg-uid", 3)})
    assert (w.kind, w.name, w.uid, w.size, len(w.pods)) == ("PodGroup", "ring", "pg-uid", 3, 3)


def _workload(*pods: PodView, size: int | None = None) -> Workload:
    return Workload("Job", "team", "train", "job-uid", size or len(pods), tuple(pods))


def test_one_pod_is_one_task_with_its_limits_and_the_job_is_external() -> None:
    w = _workload(pod("a", cpu="1500m", memory="3Gi"), pod("b", cpu="1500m", memory="3Gi"))
    desc = job_description(w, Defaults(partition="k8s"), {})
    assert not isinstance(desc, Refusal)
    assert desc["flags"] == ["EXTERNAL_JOB"] and "script" not in desc
    assert (desc["tasks"], desc["cpus_per_task"], desc["minimum_nodes"], desc["maximum_nodes"]) == (2, 2, 1, 2)
    assert desc["memory_per_cpu"] == {"set": True, "number": 1536}  # 3 GiB over 2 CPUs
    assert desc["name"] == "k8s:team/train" and desc["partition"] == "k8s" and "qos" not in desc
    assert placeholder_of(desc["comment"]) is not None
    assert placeholder_of(desc["comment"]).uid == "job-uid"  # type: ignore[union-attr]


def test_partition_and_qos_come_from_the_namespace_then_the_cluster_and_the_pod_where_allowed() -> None:
    """A pod's own partition or QoS only where its namespace's admin lists it: a tenant picks no QoS that
    preempts others or a partition it was not given."""
    defaults = Defaults(partition="k8s", qos="normal")
    mine = {"slurm.warden.dev/qos": "high", "slurm.warden.dev/partition": "gpu"}
    plain = job_description(_workload(pod("a")), defaults, {})
    by_ns = job_description(_workload(pod("a")), defaults, {"slurm.warden.dev/qos": "low"})
    allowed = {"slurm.warden.dev/qos": "low", "slurm.warden.dev/allowed-qos": "low,high",
               "slurm.warden.dev/allowed-partitions": "gpu"}  # fmt: skip
    by_pod = job_description(_workload(pod("a", annotations=mine)), defaults, allowed)
    assert isinstance(plain, dict) and isinstance(by_ns, dict) and isinstance(by_pod, dict)
    assert (plain["qos"], by_ns["qos"], by_pod["qos"], by_pod["partition"]) == ("normal", "low", "high", "gpu")
    refused = job_description(_workload(pod("a", annotations={"slurm.warden.dev/qos": "high"})), defaults,
                              {"slurm.warden.dev/qos": "low"})  # fmt: skip
    assert isinstance(refused, Refusal) and refused.reason == "BadAnnotation"
    assert "slurm.warden.dev/qos='high': the namespace does not let its pods choose it" in refused.message
    assert "slurm.warden.dev/allowed-qos: nothing" in refused.message
    same = job_description(_workload(pod("a", annotations={"slurm.warden.dev/qos": "low"})), defaults,
                           {"slurm.warden.dev/qos": "low"})  # fmt: skip
    assert isinstance(same, dict) and same["qos"] == "low"


def test_the_namespaces_time_limit_is_the_most_a_pod_gets() -> None:
    """An admin's namespace annotation caps the time: a pod asking less gets its own, nothing or a longer
    activeDeadlineSeconds the namespace's, more is refused (the partition itself has no time limit)."""
    ns = {"slurm.warden.dev/time-limit": "60"}

    def minutes(**spec: Any) -> Any:
        desc = job_description(_workload(pod("a", **spec)), Defaults("k8s"), ns)
        return desc if isinstance(desc, Refusal) else desc["time_limit"]["number"]

    assert minutes(annotations={"slurm.warden.dev/time-limit": "30"}) == 30
    assert minutes() == 60 and minutes(activeDeadlineSeconds=7200) == 60 and minutes(activeDeadlineSeconds=90) == 2
    refused = minutes(annotations={"slurm.warden.dev/time-limit": "600"})
    assert isinstance(refused, Refusal) and "more than the 60 minutes its namespace gives a pod" in refused.message


def test_time_limit_gpus_and_isolation_are_translated() -> None:
    p = pod("a", annotations={"slurm.warden.dev/isolation": "user"}, activeDeadlineSeconds=90)
    gpu = PodView.of(trim({"metadata": {"name": "g", "namespace": "team"}, "spec": {"containers": [
        {"resources": {"limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}}}]}}))  # fmt: skip
    desc = job_description(_workload(p), Defaults("k8s"), {})
    assert isinstance(desc, dict)
    assert desc["time_limit"] == {"set": True, "number": 2} and desc["shared"] == ["user"]
    gpu_desc = job_description(_workload(gpu), Defaults("k8s"), {})
    assert isinstance(gpu_desc, dict) and gpu_desc["tres_per_task"] == "gres/gpu=1"


def test_pods_without_limits_or_with_bad_annotations_are_refused_with_the_fix() -> None:
    refusal = job_description(_workload(pod("a", memory=None)), Defaults("k8s"), {})
    assert isinstance(refusal, Refusal) and refusal.reason == "NoLimits" and "resources.limits" in refusal.message
    bad = job_description(_workload(pod("a", annotations={"slurm.warden.dev/time-limit": "1h"})), Defaults("k8s"), {})
    assert isinstance(bad, Refusal) and "whole minutes" in bad.message
    worse = job_description(
        _workload(pod("a", annotations={"slurm.warden.dev/isolation": "core"})), Defaults("k8s"), {}
    )
    assert isinstance(worse, Refusal) and "`user`" in worse.message


def test_a_comment_that_is_not_the_bridges_names_no_workload() -> None:
    w = _workload(pod("a"))
    assert placeholder_of(comment(w)) is not None
    for text in ("", "hello", "warden-bridge/v1 Job/team/train size=1", "warden-bridge/v2 Job/a/b/c size=1",
                 "warden-bridge/v1 Job/a/b/c size=x"):  # fmt: skip
        assert placeholder_of(text) is None


def test_pods_fill_the_allocation_node_by_node_keeping_the_places_already_taken() -> None:
    allocation = [("worker-0", 2), ("worker-1", 1)]
    assert slots(allocation, 1) == ["worker-0", "worker-0", "worker-1"]
    assert slots(allocation, 2) == ["worker-0"]
    bound = pod("a", node="kube-1", annotations={"slurm.warden.dev/slurm-node": "worker-0"}, phase="Running")
    waiting = [pod("b"), pod("c")]
    where = {"worker-0": "kube-1", "worker-1": "kube-2"}
    assert place(allocation, 1, [bound, *waiting], where.get) == [
        Place("b", "worker-0", "kube-1"), Place("c", "worker-1", "kube-2"),
    ]  # fmt: skip
    assert isinstance(place(allocation, 2, [bound, *waiting], where.get), str)  # two pods, one place: none goes
    nowhere: dict[str, str] = {}
    assert "no Kubernetes node" in str(place(allocation, 1, waiting, nowhere.get))


def test_every_pod_of_a_job_set_starts_together() -> None:
    spec = {"replicatedJobs": [
        {"name": "leader", "replicas": 1, "template": {"spec": {"parallelism": 1, "completions": 1}}},
        {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 3}}},
    ]}  # fmt: skip
    gang = Gang.of_job_set("train", "js-uid", spec)
    assert (gang.kind, gang.size) == ("JobSet", 1 + 2 * 3)
    labels = {"jobset.sigs.k8s.io/jobset-name": "train"}
    pods = [pod(f"train-{i}", labels=labels, owner=("Job", f"train-workers-{i}", f"j{i}")) for i in range(7)]
    [w] = group(pods, {"JobSet/team/train": gang})
    assert (w.kind, w.uid, w.size, len(w.pods)) == ("JobSet", "js-uid", 7, 7)
