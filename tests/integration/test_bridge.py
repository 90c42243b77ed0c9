"""The bridge on a real control plane: Kubernetes pods scheduled by Slurm (warden.bridge).

The pods are real (API server, Job controller, kwok nodes that run them: kwok makes a bound pod Running
and a Job's pod Succeed). Slurm is the stand-in slurmrestd (tests/support/fake_slurmrestd.py), because
this tier runs no Slurm daemons; its nodes carry the kwok nodes' names, as external nodes do, and it
allocates CPUs first-fit. The real Slurm's side of the same facts (external jobs, their reasons, their
preemption) is pinned in tests/dataplane/test_bridge_slurm.py, and the whole path in tests/e2e.

The token the bridge acts with is written by the test into the Secret the operator keeps it in (the
operator's minting of it is unit-tested in tests/unit); the stand-in checks it against the JWT key.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests.support.bridge import CLUSTER, BridgeProcess, opt_in
from tests.support.fake_slurmrestd import FakeSlurmrestd
from warden.model import API_GROUP, API_VERSION
from warden.naming import (
    BRIDGE_ACCOUNTS_KEY,
    BRIDGE_EXTERNAL_NODE_LABEL,
    BRIDGE_JOB_LABEL,
    BRIDGE_NAMESPACE_LABEL,
    BRIDGE_USER,
    Names,
    bridge_account,
)
from warden_dev.controlplane import ControlPlane, wait_for

JWT_KEY = b"k" * 32
SCHEDULER = "warden-slurm"
TIMEOUT = 60
#: CPUs of each Slurm node the stand-in gives the test's kwok nodes (small: tests fill them)
NODE_CPUS = 4


@pytest.fixture(scope="module")
def bridge_nodes(controlplane: ControlPlane) -> list[str]:
    """Two kwok nodes of the bridge's own."""
    return controlplane.add_fake_nodes(2, prefix="bridge-node", cpu=str(NODE_CPUS), memory="16Gi")


@pytest.fixture
def slurm(api_client: Any, cluster_namespace: str, bridge_nodes: list[str]) -> Iterator[FakeSlurmrestd]:
    """The stand-in slurmrestd, its nodes the bridge's kwok nodes, which an admin labelled external nodes of
    the test's SlurmCluster (the bridge binds to no other node but its worker pods')."""
    for node in bridge_nodes:
        label = {BRIDGE_EXTERNAL_NODE_LABEL: f"{cluster_namespace}.{CLUSTER}"}
        client.CoreV1Api(api_client).patch_node(node, {"metadata": {"labels": label}})
    with FakeSlurmrestd(cluster_namespace, CLUSTER) as fake:
        fake.jwt_key = JWT_KEY
        for node in bridge_nodes:
            fake.register(node, cpus=NODE_CPUS)
        yield fake


@pytest.fixture
def workloads(controlplane: ControlPlane, cluster_namespace: str, api_client: Any) -> str:
    """A namespace opted in to the test's SlurmCluster (which has spec.bridge), with the bridge's token."""
    return opt_in(controlplane, api_client, cluster_namespace, JWT_KEY)


@pytest.fixture
def bridge(
    controlplane: ControlPlane, slurm: FakeSlurmrestd, workloads: str, request: pytest.FixtureRequest
) -> Iterator[BridgeProcess]:
    proc = BridgeProcess(controlplane.kubeconfig, controlplane.log_dir, slurm.url_template).start()
    yield proc
    proc.stop()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        print(f"\n--- bridge log ---\n{proc.log_tail(120)}\n--- jobs: {slurm.jobs_of(BRIDGE_USER)}", file=sys.stderr)


def pod_body(name: str, cpu: str = "1", memory: str = "256Mi", **meta: Any) -> dict[str, Any]:
    limits = {"cpu": cpu, "memory": memory}
    return {
        "metadata": {"name": name, **meta},
        "spec": {
            "schedulerName": SCHEDULER,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}],
        },
    }


def job_body(name: str, parallelism: int, cpu: str = "1") -> dict[str, Any]:
    template = pod_body("", cpu=cpu)
    del template["metadata"]
    return {
        "metadata": {"name": name},
        "spec": {"parallelism": parallelism, "completions": parallelism, "completionMode": "Indexed",
                 "backoffLimit": 0, "template": template},
    }  # fmt: skip


def scheduled(core: Any, ns: str, name: str) -> Any:
    return next(
        (c for c in core.read_namespaced_pod(name, ns).status.conditions or [] if c.type == "PodScheduled"), None
    )


def wait_unschedulable(core: Any, ns: str, pod: str, reason: str, words: str, b: BridgeProcess) -> Any:
    def told() -> Any:
        c = scheduled(core, ns, pod)
        return (
            c if c is not None and c.status == "False" and c.reason == reason and words in (c.message or "") else None
        )

    return wait_for(f"pod {pod}: PodScheduled False {reason} saying {words!r}", told, TIMEOUT, on_fail=b.log_tail)


def wait_event(core: Any, ns: str, reason: str, pod: str, b: BridgeProcess) -> Any:
    def posted() -> Any:
        events = client.EventsV1Api(core.api_client).list_namespaced_event(ns).items
        return next((e for e in events if e.reason == reason and e.regarding.name == pod), None)

    return wait_for(f"Event {reason} about {pod}", posted, TIMEOUT, on_fail=b.log_tail)


def wait_gone(core: Any, ns: str, pod: str, b: BridgeProcess) -> None:
    def gone() -> bool:
        return not any(p.metadata.name == pod for p in core.list_namespaced_pod(ns).items)

    wait_for(f"pod {pod} deleted", gone, TIMEOUT, on_fail=b.log_tail)


def wait_running(core: Any, ns: str, pod: str, b: BridgeProcess) -> str:
    node: str = wait_for(f"{pod} Running", lambda: running_on(core, ns, pod), TIMEOUT, on_fail=b.log_tail)
    return node


def job_of(core: Any, ns: str, pod: str) -> int | None:
    label = (core.read_namespaced_pod(pod, ns).metadata.labels or {}).get(BRIDGE_JOB_LABEL)
    return int(label) if label else None


def running_on(core: Any, ns: str, pod: str) -> str | None:
    p = core.read_namespaced_pod(pod, ns)
    return str(p.spec.node_name) if p.spec.node_name and p.status.phase in ("Running", "Succeeded") else None


def test_pods_and_a_job_gang_run_where_slurm_places_them_and_a_finished_gang_ends_its_slurm_job(
    api_client: Any, workloads: str, slurm: FakeSlurmrestd, bridge_nodes: list[str], bridge: BridgeProcess
) -> None:
    core: Any = client.CoreV1Api(api_client)  # manifests as plain dicts
    batch: Any = client.BatchV1Api(api_client)
    pods = [f"single-{i}" for i in range(4)]
    for name in pods:
        core.create_namespaced_pod(workloads, pod_body(name))
    for name in pods:
        wait_running(core, workloads, name, bridge)
    for name in pods:
        job = slurm.job(job_of(core, workloads, name) or 0)
        assert job["name"] == f"k8s:{workloads}/{name}" and job["user_name"] == BRIDGE_USER
        assert "EXTERNAL_JOB" in job["flags"] and job["job_state"] == ["RUNNING"]
        assert running_on(core, workloads, name) == job["job_resources"]["nodes"]["allocation"][0]["name"]
    wait_event(core, workloads, "Scheduled", pods[0], bridge)
    # a Job of two pods that start together: one Slurm job of two tasks
    batch.create_namespaced_job(workloads, job_body("gang", parallelism=2))

    def gang_job() -> Any:
        found = [j for j in slurm.jobs_of(BRIDGE_USER) if j["name"] == f"k8s:{workloads}/gang"]
        return found[0] if found else None

    placeholder = wait_for("the gang's Slurm job", gang_job, TIMEOUT, on_fail=bridge.log_tail)
    assert len(slurm.jobs_of(BRIDGE_USER)) == len(pods) + 1
    # kwok runs the gang's pods and they Succeed: the Slurm job ends with them
    wait_for(
        "the gang's Slurm job cancelled once its pods are done",
        lambda: slurm.job(placeholder["job_id"])["job_state"] == ["CANCELLED"],
        TIMEOUT, on_fail=bridge.log_tail,
    )  # fmt: skip
    wait_for("the Job complete", lambda: batch.read_namespaced_job("gang", workloads).status.succeeded == 2, TIMEOUT)
    gang_pods = core.list_namespaced_pod(workloads, label_selector="job-name=gang").items
    assert {job_of(core, workloads, p.metadata.name) for p in gang_pods} == {placeholder["job_id"]}


def test_pods_wait_while_a_slurm_job_holds_the_nodes_and_run_when_it_ends(
    api_client: Any, workloads: str, slurm: FakeSlurmrestd, bridge_nodes: list[str], bridge: BridgeProcess
) -> None:
    core: Any = client.CoreV1Api(api_client)  # manifests as plain dicts
    held = [slurm.run_job(node, 600) for node in bridge_nodes]  # users' jobs hold every node
    core.create_namespaced_pod(workloads, pod_body("waits"))
    wait_unschedulable(core, workloads, "waits", "SlurmPending", "Resources", bridge)
    assert running_on(core, workloads, "waits") is None
    slurm.end_job(held[0])
    wait_for("the pod Running once a node is free", lambda: running_on(core, workloads, "waits"), TIMEOUT,
             on_fail=bridge.log_tail)  # fmt: skip
    assert running_on(core, workloads, "waits") == bridge_nodes[0]


def test_scancel_deletes_the_pods_and_deleting_a_pod_cancels_its_job(
    api_client: Any, workloads: str, slurm: FakeSlurmrestd, bridge: BridgeProcess
) -> None:
    core: Any = client.CoreV1Api(api_client)  # manifests as plain dicts
    core.create_namespaced_pod(workloads, pod_body("cancelled"))
    core.create_namespaced_pod(workloads, pod_body("deleted"))
    for name in ("cancelled", "deleted"):
        wait_running(core, workloads, name, bridge)
    cancelled, deleted = job_of(core, workloads, "cancelled"), job_of(core, workloads, "deleted")
    assert cancelled and deleted
    slurm.cancel(cancelled)  # scancel, as a Slurm admin would
    wait_gone(core, workloads, "cancelled", bridge)
    event = wait_event(core, workloads, "SlurmJobCancelled", "cancelled", bridge)
    assert f"Slurm job {cancelled}" in event.note
    core.delete_namespaced_pod("deleted", workloads)
    wait_for(f"Slurm job {deleted} cancelled", lambda: slurm.job(deleted)["job_state"] == ["CANCELLED"], TIMEOUT,
             on_fail=bridge.log_tail)  # fmt: skip


def test_a_preempted_job_deletes_its_pods_within_the_grace_time(
    api_client: Any, workloads: str, slurm: FakeSlurmrestd, bridge: BridgeProcess
) -> None:
    core: Any = client.CoreV1Api(api_client)  # manifests as plain dicts
    core.create_namespaced_pod(workloads, pod_body("low"))
    wait_for("low Running", lambda: running_on(core, workloads, "low"), TIMEOUT, on_fail=bridge.log_tail)
    job = job_of(core, workloads, "low")
    assert job
    slurm.preempt(job, 30)
    event = wait_event(core, workloads, "SlurmJobPreempted", "low", bridge)
    assert "grace time" in event.note
    wait_gone(core, workloads, "low", bridge)


def test_a_restarted_bridge_adopts_a_job_it_submitted_and_submits_nothing_twice(
    api_client: Any, workloads: str, slurm: FakeSlurmrestd, bridge_nodes: list[str], bridge: BridgeProcess
) -> None:
    core: Any = client.CoreV1Api(api_client)  # manifests as plain dicts
    for node in bridge_nodes:
        slurm.run_job(node, 600)  # keep it pending: nothing binds while the bridge is away
    core.create_namespaced_pod(workloads, pod_body("adopted"))
    wait_unschedulable(core, workloads, "adopted", "SlurmPending", "Resources", bridge)
    job = job_of(core, workloads, "adopted")
    bridge.kill()
    # as if it had died between the submit and the label
    core.patch_namespaced_pod("adopted", workloads, {"metadata": {"labels": {BRIDGE_JOB_LABEL: None}}})
    bridge.start()
    wait_for("the pod labelled with its job again", lambda: job_of(core, workloads, "adopted") == job, TIMEOUT,
             on_fail=bridge.log_tail)  # fmt: skip
    mine = [j for j in slurm.jobs_of(BRIDGE_USER) if j["name"] == f"k8s:{workloads}/adopted"]
    assert [j["job_id"] for j in mine] == [job]


def test_bad_input_is_left_pending_with_the_reason(
    controlplane: ControlPlane, api_client: Any, workloads: str, slurm: FakeSlurmrestd, bridge: BridgeProcess
) -> None:
    core: Any = client.CoreV1Api(api_client)  # manifests as plain dicts
    core.create_namespaced_pod(workloads, pod_body("huge", cpu="64"))
    wait_unschedulable(core, workloads, "huge", "SlurmPending", "PartitionConfig", bridge)
    unlimited = pod_body("unlimited")
    del unlimited["spec"]["containers"][0]["resources"]["limits"]["memory"]
    core.create_namespaced_pod(workloads, unlimited)
    wait_unschedulable(core, workloads, "unlimited", "NoLimits", "resources.limits", bridge)
    elsewhere = controlplane.create_namespace(f"x-{uuid.uuid4().hex[:8]}")
    core.create_namespaced_pod(elsewhere, pod_body("stray"))
    wait_unschedulable(core, elsewhere, "stray", "NamespaceNotOptedIn", BRIDGE_NAMESPACE_LABEL, bridge)
    # a QoS of the pod's own choosing that its namespace's admin did not list (one that preempts others)
    mine = pod_body("greedy", annotations={"slurm.warden.dev/qos": "top"})
    core.create_namespaced_pod(workloads, mine)
    wait_unschedulable(core, workloads, "greedy", "BadAnnotation", "the namespace does not let its pods choose it",
                       bridge)  # fmt: skip
    assert not [j for j in slurm.jobs_of(BRIDGE_USER) if j["name"].endswith(("/unlimited", "/greedy"))]


def test_a_thousand_single_pod_workloads_are_all_bound_through_slurm(
    controlplane: ControlPlane, api_client: Any, cluster_namespace: str
) -> None:
    """1,000 pods, each its own workload: each gets one Slurm job (none twice) and is bound to the node of
    its job's allocation. (The rate against kube-scheduler's is `make bench`'s: bench/bridge.py.)"""
    external = {BRIDGE_EXTERNAL_NODE_LABEL: f"{cluster_namespace}.{CLUSTER}"}  # the admin's word
    nodes = controlplane.add_fake_nodes(5, external, prefix="bridge-many", cpu="200", memory="1Ti", pods="250")
    pods = 1000
    core: Any = client.CoreV1Api(api_client)  # manifests as plain dicts
    with FakeSlurmrestd(cluster_namespace, CLUSTER) as slurm:
        slurm.jwt_key = JWT_KEY
        for node in nodes:
            slurm.register(node, cpus=200)
        ns = opt_in(controlplane, api_client, cluster_namespace, JWT_KEY)
        with BridgeProcess(controlplane.kubeconfig, controlplane.log_dir, slurm.url_template, name="bridge-many") as b:
            for i in range(pods):
                core.create_namespaced_pod(ns, pod_body(f"many-{i}", memory="64Mi"))

            def bound() -> list[Any] | None:
                items = core.list_namespaced_pod(ns).items
                done = [p for p in items if p.spec.node_name]
                return items if len(done) == pods else None

            items = wait_for(f"{pods} pods bound", bound, 300, on_fail=b.log_tail)
        jobs = {j["job_id"]: j for j in slurm.jobs_of(BRIDGE_USER)}
        assert len(jobs) == pods and slurm.served[("POST", "job/submit")] == pods
        for p in items:
            job = jobs[int(p.metadata.labels[BRIDGE_JOB_LABEL])]
            assert job["name"] == f"k8s:{ns}/{p.metadata.name}"
            assert p.spec.node_name == job["job_resources"]["nodes"]["allocation"][0]["name"]
    core.delete_namespace(ns)


#: scheduler-plugins' PodGroup CRD as far as the bridge reads it (spec.minMember): that project's CRD is
#: not installed here, so the test installs this stand-in of its schema under the same group and names
POD_GROUP_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "podgroups.scheduling.x-k8s.io"},
    "spec": {
        "group": "scheduling.x-k8s.io",
        "scope": "Namespaced",
        "names": {"plural": "podgroups", "singular": "podgroup", "kind": "PodGroup", "shortNames": ["pg"]},
        "versions": [{
            "name": "v1alpha1", "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"minMember": {"type": "integer"}}},
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            }}},
        }],
    },
}  # fmt: skip


def test_the_pods_of_a_pod_group_start_together_as_one_slurm_job(
    api_client: Any, workloads: str, slurm: FakeSlurmrestd, bridge_nodes: list[str], bridge: BridgeProcess
) -> None:
    ext: Any = client.ApiextensionsV1Api(api_client)
    if not any(
        c.metadata.name == POD_GROUP_CRD["metadata"]["name"] for c in ext.list_custom_resource_definition().items
    ):
        ext.create_custom_resource_definition(POD_GROUP_CRD)
    custom: Any = client.CustomObjectsApi(api_client)

    def served() -> bool:
        try:
            custom.list_namespaced_custom_object("scheduling.x-k8s.io", "v1alpha1", workloads, "podgroups")
            return True
        except client.ApiException:
            return False

    wait_for("the PodGroup CRD served", served, TIMEOUT)
    custom.create_namespaced_custom_object("scheduling.x-k8s.io", "v1alpha1", workloads, "podgroups", {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "ring"}, "spec": {"minMember": 3},
    })  # fmt: skip
    core: Any = client.CoreV1Api(api_client)  # manifests as plain dicts
    members = [f"ring-{i}" for i in range(3)]
    for name in members[:2]:
        core.create_namespaced_pod(workloads, pod_body(name, labels={"scheduling.x-k8s.io/pod-group": "ring"}))
    wait_unschedulable(core, workloads, members[0], "WaitingForGang", "2 of the 3", bridge)
    assert not slurm.jobs_of(BRIDGE_USER)
    core.create_namespaced_pod(workloads, pod_body(members[2], labels={"scheduling.x-k8s.io/pod-group": "ring"}))
    for name in members:
        wait_running(core, workloads, name, bridge)
    [job] = slurm.jobs_of(BRIDGE_USER)
    assert job["name"] == f"k8s:{workloads}/ring" and {job_of(core, workloads, n) for n in members} == {job["job_id"]}


def _stand_in_crd(group: str, version: str, kind: str, plural: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
                 "versions": [{"name": version, "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
    }  # fmt: skip


def test_every_pod_of_a_job_set_starts_together_as_one_slurm_job(
    api_client: Any, workloads: str, slurm: FakeSlurmrestd, bridge_nodes: list[str], bridge: BridgeProcess
) -> None:
    """A JobSet of a leader Job (1 pod) and 2 worker Jobs of 2 pods: 5 pods, one Slurm job. The JobSet API is
    not installed here: the test installs a stand-in CRD under its group and names, and makes the pods the
    JobSet controller would (labelled with the JobSet's name)."""
    ext: Any = client.ApiextensionsV1Api(api_client)
    crd = _stand_in_crd("jobset.x-k8s.io", "v1alpha2", "JobSet", "jobsets")
    if not any(c.metadata.name == crd["metadata"]["name"] for c in ext.list_custom_resource_definition().items):
        ext.create_custom_resource_definition(crd)
    custom: Any = client.CustomObjectsApi(api_client)

    def created() -> bool:
        try:
            custom.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", workloads, "jobsets", {
                "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "train"},
                "spec": {"replicatedJobs": [
                    {"name": "leader", "replicas": 1, "template": {"spec": {"parallelism": 1, "completions": 1}}},
                    {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 2, "completions": 2}}},
                ]},
            })  # fmt: skip
            return True
        except client.ApiException as e:
            if e.status != 404:  # the CRD not served yet
                raise
            return False

    wait_for("a JobSet made (its CRD served)", created, TIMEOUT)
    core: Any = client.CoreV1Api(api_client)  # manifests as plain dicts
    members = ["train-leader-0-0", "train-workers-0-0", "train-workers-0-1", "train-workers-1-0", "train-workers-1-1"]
    for name in members:
        core.create_namespaced_pod(workloads, pod_body(name, labels={"jobset.sigs.k8s.io/jobset-name": "train"}))
    for name in members:
        wait_running(core, workloads, name, bridge)
    [job] = slurm.jobs_of(BRIDGE_USER)
    assert job["name"] == f"k8s:{workloads}/train" and {job_of(core, workloads, n) for n in members} == {job["job_id"]}


def test_a_pod_is_never_bound_to_a_node_whose_taint_it_does_not_tolerate(
    api_client: Any, workloads: str, slurm: FakeSlurmrestd, bridge_nodes: list[str], bridge: BridgeProcess
) -> None:
    """The bridge binds pods itself, so it holds them to the rules kube-scheduler would: with a node tainted
    NoSchedule, a pod without the toleration gets a Slurm job that excludes that node and runs on the other;
    one that tolerates it may go there (warden.bridge.fit). A pod Slurm placed where it may not run anyway
    waits, saying why (tests/unit/test_bridge_fit.py)."""
    core: Any = client.CoreV1Api(api_client)  # manifests as plain dicts
    tainted, free = bridge_nodes  # the stand-in places first-fit: its first node, were it not excluded
    taint = {"key": "dedicated", "value": "infra", "effect": "NoSchedule"}
    core.patch_node(tainted, {"spec": {"taints": [taint]}})
    try:
        core.create_namespaced_pod(workloads, pod_body("plain"))
        assert wait_running(core, workloads, "plain", bridge) == free
        assert slurm.job(job_of(core, workloads, "plain") or 0)["excluded_nodes"] == tainted
        tolerant = pod_body("tolerant")
        tolerant["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "infra"}]
        core.create_namespaced_pod(workloads, tolerant)
        bound = lambda: core.read_namespaced_pod("tolerant", workloads).spec.node_name  # noqa: E731
        assert wait_for("the tolerant pod bound", bound, TIMEOUT, on_fail=bridge.log_tail) == tainted
    finally:
        core.patch_node(tainted, {"spec": {"taints": None}})


def test_a_kubernetes_node_is_an_external_node_only_when_an_admin_says_so(
    api_client: Any, workloads: str, slurm: FakeSlurmrestd, bridge_nodes: list[str], bridge: BridgeProcess
) -> None:
    """A Slurm node of a Kubernetes node's name is not enough: without the admin's label naming this cluster,
    no pod is bound there (any node of the cluster, control-plane nodes included, could otherwise be named)."""
    core: Any = client.CoreV1Api(api_client)  # manifests as plain dicts
    node = bridge_nodes[0]  # the stand-in places first-fit: its first node
    core.patch_node(node, {"metadata": {"labels": {BRIDGE_EXTERNAL_NODE_LABEL: "another.cluster"}}})
    core.create_namespaced_pod(workloads, pod_body("p"))
    wait_unschedulable(core, workloads, "p", "SlurmPlacement", f"Slurm node {node} is no Kubernetes node the bridge"
                       f" may use: neither a worker pod's nor one an admin labelled {BRIDGE_EXTERNAL_NODE_LABEL}",
                       bridge)  # fmt: skip
    assert not core.read_namespaced_pod("p", workloads).spec.node_name
    core.patch_node(node, {"metadata": {"labels": {BRIDGE_EXTERNAL_NODE_LABEL: f"{slurm.namespace}.{CLUSTER}"}}})
    assert wait_running(core, workloads, "p", bridge) == node


def test_with_accounting_a_namespaces_pods_are_charged_to_its_own_account_once_it_is_made(
    api_client: Any, cluster_namespace: str, workloads: str, slurm: FakeSlurmrestd, bridge: BridgeProcess
) -> None:
    """On a cluster with accounting, the bridge lists the namespaces opted in to it in the ConfigMap the
    operator made for it, and submits each namespace's jobs with its own account (k8s-<namespace>). Until
    that account is made (by slurmctld's pod, from the list: images/controller), Slurm refuses the job and
    the pod says so in Slurm's words; once it is, the pod runs within seconds, its job in that account."""
    core: Any = client.CoreV1Api(api_client)  # manifests as plain dicts
    names = Names(cluster=CLUSTER, namespace=cluster_namespace)
    core.create_namespaced_config_map(cluster_namespace, {"metadata": {"name": names.bridge_accounts}})
    slurm.accounts = set()  # accounting enforced, and no account made yet
    client.CustomObjectsApi(api_client).patch_namespaced_custom_object(
        API_GROUP,
        API_VERSION,
        cluster_namespace,
        "slurmclusters",
        CLUSTER,
        {"spec": {"accounting": {"mode": "InCluster"}}},
    )

    def listed() -> bool:
        data = core.read_namespaced_config_map(names.bridge_accounts, cluster_namespace).data or {}
        return bool(data.get(BRIDGE_ACCOUNTS_KEY) == f"{workloads}\n")

    wait_for("the bridge lists the opted-in namespace", listed, TIMEOUT, on_fail=bridge.log_tail)
    core.create_namespaced_pod(workloads, pod_body("p"))
    wait_unschedulable(core, workloads, "p", "SlurmRefused",
                       "Invalid account or account/partition combination specified", bridge)  # fmt: skip
    slurm.accounts.add(bridge_account(workloads))  # what slurmctld's pod does with the list
    wait_running(core, workloads, "p", bridge)
    assert slurm.job(job_of(core, workloads, "p") or 0)["account"] == f"k8s-{workloads}"
