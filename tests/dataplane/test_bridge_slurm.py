"""The Slurm facts the bridge (issue 37: Slurm schedules Kubernetes pods through placeholder *external
jobs*) is built on, pinned on Warden's own 26.05 images, each with why the bridge relies on it. When a Slurm
release changes one, a test here fails before the bridge misbehaves.

On the session's cluster (what a test makes there it removes before it ends):

1. `test_an_external_job_holds_cpus_on_a_slurmd_node_and_runs_nothing`: `POST /slurm/v0.0.44/job/submit`
   with `flags: [EXTERNAL_JOB]` and no script goes RUNNING on a worker's slurmd node (shared worker
   groups); `GET job/<id>` gives back the flag, name, comment and owner (how the bridge finds its jobs and
   their pods) and `job_resources.nodes.allocation` names the node with its CPUs and memory (how it places
   the pods). No step can be made in it, by a user, by root or by its owner, and slurmd never hears of it:
   the allocation runs no code. `DELETE job/<id>` frees the node at once (the pods are gone, no epilog).
2. `test_an_external_node_takes_external_jobs_only`: `scontrol create ... State=EXTERNAL` makes a node
   without slurmd (external-node mode) that an external job runs on while ordinary jobs never do: one
   queued before the node came stays PENDING (`BadConstraints`), one submitted after is refused. It cannot
   be deleted while a job holds it and can once that ends (the bridge drains, waits, deletes).
3. `test_an_impossible_external_job_is_accepted_and_pends`: more CPUs per task than any node has is
   accepted with a warning and pends (`PartitionConfig`): the bridge shows Slurm's reason on the pod.
4. `test_an_external_job_needs_v0044_and_no_script`: Warden's pinned v0.0.42 does not know the flag (the
   bridge speaks v0.0.44); a script with the flag is refused.

On a small cluster of this module's own, with the bridge's planned slurm.conf lines (NodeSet of external
nodes by feature, partition `k8s` over the workers and them), `PreemptType=preempt/partition_prio` (the
session's cluster has no preemption) and the cluster's rendered job_submit.lua; the session's cluster is
not touched:

5. `test_a_preempted_external_job_runs_on_through_the_grace_time`: a higher partition's job preempts the
   placeholder; for the partition's GraceTime it stays RUNNING with `preempt_time` set and `end_time =
   preempt_time + GraceTime`, and the preemptor gets the node only after that: the bridge's time to delete
   the pods before the node is given away.
6. `test_job_submit_lua_holds_the_bridges_user_to_external_jobs`: job_submit.lua sees `job_desc.script` (a
   string for a batch job, nil for an external job or an allocation) and `job_desc.bitflags` (EXTERNAL_JOB
   is bit 24); Warden's rule refuses warden-bridge's batch script and allocation and takes its external
   job, so the bridge's token can never run code.
7. `test_external_nodes_and_their_jobs_outlive_a_reconfigure`: external nodes join the partition through
   the NodeSet's feature; a placeholder over a slurmd node and an external node, and the external node,
   come through `scontrol reconfigure` (what every config change does); a partition made by `scontrol
   create` does not, and its jobs die: the bridge's partition must be in slurm.conf.
8. `test_an_external_node_needs_an_address`: an external node whose name does not resolve stalls
   slurmctld about 10 s at each allocation on it; with NodeAddr it does not: the bridge sets NodeAddr.

Jobs go through slurmrestd as SlurmUser (`slurm`), or as `warden-bridge` for the job_submit.lua test, with
tokens minted from the cluster's JWT key the way the operator mints its own; ordinary jobs are root's.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.dockerfixture import running_for_tests
from tests.support.jailuser import JailUser
from warden import naming
from warden.model import parse_spec
from warden.render import cluster as render_cluster
from warden.render.config import job_submit_lua
from warden.render.context import Cluster
from warden.slurm.rest import mint_token
from warden_dev.dockercluster import DockerCluster, Exec, docker, wait_for

#: the data_parser the bridge speaks (26.05 serves v0.0.42 to v0.0.45; EXTERNAL_JOB from v0.0.43 on)
API = "/slurm/v0.0.44"


class Rest:
    """slurmrestd of a cluster as SlurmUser, each request with a fresh token of the cluster's JWT key
    (a test of the session may rotate it). Answers (HTTP status, JSON body) whatever the status."""

    def __init__(self, cluster: DockerCluster, user: str = "slurm") -> None:
        self.cluster = cluster
        self.user = user
        (pod,) = [p.name for p in cluster.pods.values() if p.component == "restapi"]
        self.url = f"http://{cluster.ip(pod)}:{naming.RESTAPI_PORT}"

    def call(self, method: str, path: str, body: dict[str, Any] | None = None, api: str = API) -> tuple[int, Any]:
        key = self.cluster.secrets[self.cluster.names.jwt_key][naming.JWT_KEY].encode()
        token = mint_token(key, self.user, lifetime_s=120)
        headers = {"X-SLURM-USER-NAME": self.user, "X-SLURM-USER-TOKEN": token}
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{api}{path}", data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def submit(self, job: dict[str, Any], script: str | None = None, api: str = API) -> tuple[int, Any]:
        body: dict[str, Any] = {"job": job}
        if script is not None:
            body["script"] = script
        return self.call("POST", "/job/submit", body, api)

    def job(self, job_id: int) -> dict[str, Any]:
        status, doc = self.call("GET", f"/job/{job_id}")
        assert status == 200 and len(doc["jobs"]) == 1, (status, doc)
        job: dict[str, Any] = doc["jobs"][0]
        return job

    def job_state(self, job_id: int) -> str:
        """The job's state, or "" while slurmctld does not answer (test_an_external_node_needs_an_address)."""
        status, doc = self.call("GET", f"/job/{job_id}")
        return state(doc["jobs"][0]) if status == 200 and len(doc.get("jobs") or []) == 1 else ""

    def cancel(self, job_id: int) -> tuple[int, Any]:
        return self.call("DELETE", f"/job/{job_id}")


def external(name: str, tasks: int, cpus_per_task: int, mib_per_cpu: int, **more: Any) -> dict[str, Any]:
    """A placeholder as the bridge submits one: no script, no working directory, no environment."""
    return {
        "name": name,
        "flags": ["EXTERNAL_JOB"],
        "tasks": tasks,
        "cpus_per_task": cpus_per_task,
        "memory_per_cpu": {"set": True, "number": mib_per_cpu},
        **more,
    }


def state(job: dict[str, Any]) -> str:
    return " ".join(job["job_state"])


def allocation(job: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(node, CPUs, MiB) per node of the job's allocation: what the bridge places pods by."""
    nodes = job["job_resources"]["nodes"]["allocation"]
    return [(n["name"], n["cpus"]["count"], n["memory"]["allocated"]) for n in nodes]


def warnings(doc: dict[str, Any]) -> list[str]:
    return [str(w.get("description")) for w in doc.get("warnings", [])]


def errors(doc: dict[str, Any]) -> list[str]:
    return [str(e.get("error")) for e in doc.get("errors", [])]


def wait_for_state(rest: Rest, job_id: int, want: str, timeout: float = 60) -> dict[str, Any]:
    wait_for(f"job {job_id} {want}", lambda: rest.job_state(job_id) == want, timeout)
    return rest.job(job_id)


def show_job(cluster: DockerCluster, job_id: int) -> dict[str, str]:
    """`scontrol show job -o` as a dict (JobState, Reason, StartTime, ...)."""
    out = cluster.exec(cluster.names.controller_pod, f"scontrol show job -o {job_id}").out
    return dict(re.findall(r"(\S+?)=(\S*)", out))


def node_state(cluster: DockerCluster, node: str) -> list[str]:
    """The node's state words as slurmctld keeps them (`scontrol show node`: ["IDLE", "DYNAMIC_NORM",
    "EXTERNAL"]); [] for no such node. (After a reconfigure, `sinfo -o %t` was seen to show an external
    node `mix` for a minute and more after its job had ended, while slurmctld said IDLE, CPUAlloc=0.)"""
    shown = cluster.exec(cluster.names.controller_pod, f"scontrol show node -o {node}", check=False)
    found = re.search(r"\bState=(\S+)", shown.out) if shown.ok else None
    return found.group(1).split("+") if found else []


def idle(cluster: DockerCluster, node: str) -> bool:
    """Idle and answering (or, for an external node, nothing to answer), with nothing left to finish."""
    words = node_state(cluster, node)
    return words[:1] == ["IDLE"] and not {"COMPLETING", "NOT_RESPONDING", "DRAIN"} & set(words)


def slurmd_log(cluster: DockerCluster, worker: str) -> str:
    logs = docker("logs", cluster.container(worker), check=False)
    return logs.stdout + logs.stderr


@pytest.fixture(scope="module")
def slurm_user_association(cluster: DockerCluster) -> None:
    """The session's cluster enforces associations (spec.accounting.enforce's default): SlurmUser, whom these
    tests submit as (the bridge is `warden-bridge` with its namespaces' accounts), gets one in `root`."""
    ctl = cluster.names.controller_pod
    cluster.exec(ctl, "sacctmgr -i add user slurm account=root", check=False)  # there already: fine
    shown = "scontrol show assoc_mgr flags=assoc users=slurm"
    wait_for("slurmctld knows SlurmUser's association", lambda: "UserName=slurm(" in cluster.exec(ctl, shown).out, 60)


@pytest.fixture
def placeholders(cluster: DockerCluster, slurm_user_association: None) -> Iterator[list[int]]:
    """Ids of external jobs a test submits on the session's cluster: cancelled when it ends."""
    ids: list[int] = []
    yield ids
    rest = Rest(cluster)
    for job_id in ids:
        rest.cancel(job_id)


def sbatch(cluster: DockerCluster, options: str) -> Exec:
    """root's `sbatch --parsable` from the login node (inside the jail), a one-second job."""
    return cluster.ssh("root", f"cd && sbatch --parsable {options} --wrap 'sleep 1'", check=False)


# --- the session's cluster ------------------------------------------------------------------------


def test_an_external_job_holds_cpus_on_a_slurmd_node_and_runs_nothing(
    cluster: DockerCluster, alice: JailUser, placeholders: list[int]
) -> None:
    rest, ctl = Rest(cluster), cluster.names.controller_pod
    worker = cluster.worker_pods("cpu")[0]
    wait_for(f"{worker} idle", lambda: idle(cluster, worker), 60)
    name, comment = "k8s:default/demo", f"warden-bridge/v1 Pod/default/demo/{uuid.uuid4()} size=1"
    desc = external(name, 1, 2, 100, partition="cpu", required_nodes=[worker], comment=comment)
    status, doc = rest.submit(desc)
    assert status == 200 and errors(doc) == [] and warnings(doc) == [], (status, doc)
    job_id = int(doc["job_id"])
    placeholders.append(job_id)

    job = wait_for_state(rest, job_id, "RUNNING")
    assert "EXTERNAL_JOB" in job["flags"], job["flags"]
    assert (job["name"], job["comment"], job["user_name"], job["batch_flag"]) == (name, comment, "slurm", False)
    assert allocation(job) == [(worker, 2, 200)], job["job_resources"]
    assert job["preempt_time"]["number"] == 0, job["preempt_time"]
    # Slurm counts the node's CPUs as taken: nothing else fits beside it
    assert "CPUAlloc=2 " in cluster.exec(ctl, f"scontrol show node {worker}").out
    assert node_state(cluster, worker)[0] == "ALLOCATED"

    # no step can be made in it: a user may not, and neither root (an administrator) nor its owner can
    refused = cluster.ssh(alice.name, f"srun --jobid={job_id} hostname", check=False, identity=alice.identity)
    assert refused.rc != 0 and "Access/permission denied" in refused.err, refused
    not_supported = f"Unable to create step for job {job_id}: Requested operation not supported on this system"
    as_root = cluster.ssh("root", f"srun --jobid={job_id} --overlap hostname", check=False)
    assert as_root.rc != 0 and not_supported in as_root.err, as_root
    as_owner = cluster.exec(ctl, f"srun --jobid={job_id} true", user="slurm", check=False)
    assert as_owner.rc != 0 and not_supported in as_owner.err, as_owner

    status, doc = rest.cancel(job_id)
    assert status == 200 and errors(doc) == [], (status, doc)
    assert state(wait_for_state(rest, job_id, "CANCELLED")) == "CANCELLED"
    # no epilog to wait for: the node is free for an ordinary job that wants all its CPUs
    ordinary = sbatch(cluster, f"-p cpu -w {worker} -c 2 --mem=100M")
    assert ordinary.ok, ordinary
    launched = f"Launching batch JobId={ordinary.out.strip()} "
    wait_for(f"slurmd on {worker} to launch job {ordinary.out.strip()}",
             lambda: launched in slurmd_log(cluster, worker), 60)  # fmt: skip
    # slurmd heard of the ordinary job and never of the external one: no launch, no prolog, no kill
    log = slurmd_log(cluster, worker)
    assert not re.search(rf"\bJobId={job_id}\b", log), log[-3000:]


def test_an_external_node_takes_external_jobs_only(cluster: DockerCluster, placeholders: list[int]) -> None:
    rest, ctl = Rest(cluster), cluster.names.controller_pod
    tag = uuid.uuid4().hex[:6]
    node, partition, feature = f"k8s-{tag}", f"bridge-{tag}", f"bridge-{tag}"
    queued = ""
    try:
        # a partition with no nodes yet takes an ordinary job, which waits for a node
        cluster.exec(ctl, f"scontrol create PartitionName={partition} State=UP")
        first = sbatch(cluster, f"-p {partition} --mem=100M")
        assert first.ok, first
        queued = first.out.strip()
        wait_for(f"job {queued} PartitionConfig",
                 lambda: show_job(cluster, int(queued))["Reason"] == "PartitionConfig", 30)  # fmt: skip

        # NodeAddr: an address nothing answers on (TEST-NET-1), never contacted (test_an_external_node_needs_an_address)
        cluster.exec(ctl, f"scontrol create NodeName={node} NodeAddr=192.0.2.1 CPUs=2 RealMemory=1000 "
                          f"State=EXTERNAL Feature={feature}")  # fmt: skip
        shown = cluster.exec(ctl, f"scontrol show node {node}").out
        assert re.search(r"\bState=IDLE\+DYNAMIC_NORM\+EXTERNAL\b", shown), shown
        assert f"AvailableFeatures={feature}" in shown, shown
        cluster.exec(ctl, f"scontrol update PartitionName={partition} Nodes={node}")
        # Slurm looks at the queued job again with the external node in its partition, and keeps it off
        wait_for(f"job {queued} BadConstraints",
                 lambda: show_job(cluster, int(queued))["Reason"] == "BadConstraints", 60)  # fmt: skip

        status, doc = rest.submit(external("k8s:default/ext", 2, 1, 100, partition=partition))
        assert status == 200 and errors(doc) == [], (status, doc)
        job_id = int(doc["job_id"])
        placeholders.append(job_id)
        job = wait_for_state(rest, job_id, "RUNNING")
        assert allocation(job) == [(node, 2, 200)], job["job_resources"]
        assert show_job(cluster, int(queued))["JobState"] == "PENDING"
        assert show_job(cluster, int(queued))["Reason"] == "BadConstraints"
        # an ordinary job submitted now is refused outright
        second = sbatch(cluster, f"-p {partition} --mem=100M")
        assert not second.ok, second
        assert "Batch job submission failed: Requested node configuration is not available" in second.err, second

        busy = cluster.exec(ctl, f"scontrol delete nodename={node}", check=False)
        assert not busy.ok and "Requested nodes are busy" in busy.out + busy.err, busy
        assert rest.cancel(job_id)[0] == 200
        wait_for_state(rest, job_id, "CANCELLED")
        wait_for(f"{node} idle", lambda: idle(cluster, node), 30)
        cluster.exec(ctl, f"scontrol delete nodename={node}")
        gone = cluster.exec(ctl, f"scontrol show node {node}", check=False)
        assert not gone.ok and f"Node {node} not found" in gone.out + gone.err, gone
    finally:
        if queued:
            cluster.exec(ctl, f"scancel {queued}", check=False)
        for job_id in placeholders:
            rest.cancel(job_id)
        cluster.exec(ctl, f"scontrol delete nodename={node}", check=False)
        cluster.exec(ctl, f"scontrol delete PartitionName={partition}", check=False)
    assert partition not in cluster.exec(ctl, "sinfo -h -o %P").out


def test_an_impossible_external_job_is_accepted_and_pends(cluster: DockerCluster, placeholders: list[int]) -> None:
    rest = Rest(cluster)
    status, doc = rest.submit(external("k8s:default/huge", 1, 64, 10, partition="cpu"))
    assert status == 200 and errors(doc) == [] and doc["job_id"], (status, doc)
    placeholders.append(int(doc["job_id"]))
    assert "Requested partition configuration not available now" in warnings(doc), doc
    wait_for(f"job {doc['job_id']} PartitionConfig",
             lambda: rest.job(int(doc["job_id"]))["state_reason"] == "PartitionConfig", 30)  # fmt: skip
    assert state(rest.job(int(doc["job_id"]))) == "PENDING"


def test_an_external_job_excludes_the_nodes_the_bridge_names(cluster: DockerCluster, placeholders: list[int]) -> None:
    """``excluded_nodes`` as the bridge sends it (the Slurm nodes whose Kubernetes node the pods may not run
    on, warden.bridge.fit): a job excluding one worker runs on another; one excluding every node of its
    partition is refused at once, in Slurm's words (the bridge tells the pods, as for any refusal)."""
    rest = Rest(cluster)
    workers = cluster.worker_pods("cpu")
    assert len(workers) >= 2, workers
    # the bridge may name nodes outside the job's partition too (every worker it knows): taken alike
    outside = cluster.worker_pods("gpu")
    assert outside, "the session cluster has a gpu group"
    excluded = [workers[0], *outside]
    status, doc = rest.submit(external("k8s:default/one", 1, 1, 10, partition="cpu", excluded_nodes=excluded))
    assert status == 200 and errors(doc) == [], (status, doc)
    placeholders.append(int(doc["job_id"]))
    ran = wait_for_state(rest, int(doc["job_id"]), "RUNNING")
    assert ran["nodes"] != workers[0] and workers[0] in ran["excluded_nodes"], ran["nodes"]
    status, doc = rest.submit(external("k8s:default/none", 1, 1, 10, partition="cpu", excluded_nodes=workers))
    assert status != 200 and errors(doc) == ["Requested node configuration is not available"], (status, doc)


def test_an_external_job_needs_v0044_and_no_script(cluster: DockerCluster, slurm_user_association: None) -> None:
    rest = Rest(cluster)
    status, doc = rest.submit(external("k8s:default/old", 1, 1, 10, partition="cpu"), api="/slurm/v0.0.42")
    assert status != 200 and "job_id" not in doc, (status, doc)
    assert 'Unknown flag "EXTERNAL_JOB"' in [str(e.get("description")) for e in doc["errors"]], doc
    with_script = external("k8s:default/script", 1, 1, 10, partition="cpu", current_working_directory="/tmp")
    status, doc = rest.submit({**with_script, "environment": ["PATH=/bin"]}, script="#!/bin/sh\ntrue\n")
    assert status != 200 and errors(doc) == ["Invalid configuration for external job"], (status, doc)
    # and without the flag a job needs its script
    status, doc = rest.submit({"name": "k8s:default/bare", "partition": "cpu", "tasks": 1})
    assert status != 200 and not doc.get("job_id"), (status, doc)


# --- a cluster of this module's own ----------------------------------------------------------------

#: One CPU worker (2 CPUs), no login node, no accounting; partition-priority preemption by cancelling.
OWN_SPEC: dict[str, Any] = {
    "login": {"replicas": 0},
    "workerGroups": [{"name": "cpu", "replicas": 1, "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}],
    "partitions": [{"name": "cpu", "workerGroups": ["cpu"], "default": True}],
    "accounting": {"mode": "Disabled"},
    "slurmConfig": {"extraLines": ["PreemptType=preempt/partition_prio", "PreemptMode=CANCEL"]},
}
#: the feature external nodes carry, and the bridge's partition: the worker group's nodes and the external
#: nodes (the planned slurm.conf lines), preemptible with a grace time by partition `high` on the workers
FEATURE, BRIDGE, HIGH, GRACE_S = "warden-bridge", "k8s", "high", 10


def own_files() -> dict[str, str]:
    """OWN_SPEC's rendered slurm.conf with the bridge's NodeSet and partitions added (with the per-partition
    preemption settings spec.bridge does not render, and extraLines may not name partitions), and the
    cluster's own job_submit.lua (warden.render.config), which holds warden-bridge to external jobs."""
    cluster = Cluster(name="bridge", namespace="dataplane", spec=parse_spec(OWN_SPEC))
    (config,) = [
        o for o in render_cluster.render(cluster).objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == cluster.names.slurm_config
    ]  # fmt: skip
    conf = str(config["data"]["slurm.conf"])
    found = re.search(r"^PartitionName=cpu Nodes=(\S+) ", conf, re.M)
    assert found, conf
    workers = found.group(1)
    conf += (
        f"NodeSet=bridge-external Feature={FEATURE}\n"
        f"PartitionName={BRIDGE} Nodes={workers},bridge-external Default=NO PriorityTier=1 PreemptMode=CANCEL "
        f"GraceTime={GRACE_S} State=UP\n"
        f"PartitionName={HIGH} Nodes={workers} Default=NO PriorityTier=2 State=UP\n"
    )
    # the script as a cluster whose spec.bridge names that partition renders it (its shared group sized so)
    shared = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}
    bridged = {**OWN_SPEC, "workerGroups": [{"name": "cpu", "replicas": 1, "resources": shared}],
               "bridge": {"enabled": True, "workerGroups": ["cpu"], "partition": BRIDGE}}  # fmt: skip
    lua = job_submit_lua(Cluster(name="bridge", namespace="dataplane", spec=parse_spec(bridged)))
    return {"slurm.conf": conf, "job_submit.lua": lua}


@pytest.fixture(scope="module")
def own(request: pytest.FixtureRequest) -> Iterator[DockerCluster]:
    """This module's cluster, with `own_files()`."""
    failed_before = request.session.testsfailed
    failed = lambda: request.session.testsfailed > failed_before  # noqa: E731
    planned = DockerCluster(OWN_SPEC, name="bridge", config_overrides=own_files())
    with running_for_tests(planned, "bridge cluster", failed) as c:
        yield c


def create_external_node(cluster: DockerCluster, node: str, address: str | None) -> None:
    addr = f"NodeAddr={address} " if address else ""
    conf = f"{addr}CPUs=2 RealMemory=1000 State=EXTERNAL Feature={FEATURE}"
    cluster.exec(cluster.names.controller_pod, f"scontrol create NodeName={node} {conf}")


def delete_when_idle(cluster: DockerCluster, node: str) -> None:
    """`scontrol delete` an external node once no job holds it (before, Slurm refuses: nodes are busy)."""
    try:
        wait_for(f"{node} idle", lambda: idle(cluster, node) or not node_state(cluster, node), 60)
    finally:
        cluster.exec(cluster.names.controller_pod, f"scontrol delete nodename={node}", check=False)


def test_a_preempted_external_job_runs_on_through_the_grace_time(own: DockerCluster) -> None:
    rest, ctl = Rest(own), own.names.controller_pod
    (worker,) = own.worker_pods("cpu")
    assert "PreemptType             = preempt/partition_prio" in own.exec(ctl, "scontrol show config").out
    status, doc = rest.submit(external("k8s:default/low", 1, 2, 100, partition=BRIDGE, required_nodes=[worker]))
    assert status == 200 and errors(doc) == [], (status, doc)
    job_id = int(doc["job_id"])
    wait_for_state(rest, job_id, "RUNNING")

    # root's job in the higher partition wants the whole node
    sbatch = f"sbatch -p {HIGH} -w {worker} -c 2 --mem=100M --chdir=/tmp --parsable --wrap 'sleep 1'"
    user_job = int(own.exec(ctl, sbatch).out)
    wait_for(f"job {job_id} to be told of its preemption", lambda: rest.job(job_id)["preempt_time"]["number"] > 0, 30)
    job = rest.job(job_id)
    preempted_at, ends_at = job["preempt_time"]["number"], job["end_time"]["number"]
    # still RUNNING, with its end set GraceTime seconds on; the preemptor waits
    assert state(job) == "RUNNING" and ends_at == preempted_at + GRACE_S, job
    assert show_job(own, user_job)["JobState"] == "PENDING"

    # slurmctld ends it once the grace time is over (it looks every 30 s), then starts the preemptor
    wait_for(f"job {job_id} PREEMPTED", lambda: rest.job_state(job_id) == "PREEMPTED", GRACE_S + 60)
    assert time.time() >= ends_at - 1
    wait_for(f"job {user_job} to start", lambda: show_job(own, user_job)["JobState"] in ("RUNNING", "COMPLETED"), 30)
    assert rest.job(user_job)["start_time"]["number"] >= ends_at - 1, rest.job(user_job)


def test_job_submit_lua_holds_the_bridges_user_to_external_jobs(own: DockerCluster) -> None:
    """The cluster's job_submit.lua: warden-bridge's token (what the bridge holds) submits external jobs,
    and neither a batch script nor an allocation steps could run in; other users are not held to it."""
    rest, ctl = Rest(own, user=naming.BRIDGE_USER), own.names.controller_pod
    script = external("k8s:default/script", 1, 1, 10, current_working_directory="/tmp")
    del script["flags"]
    status, doc = rest.submit({**script, "environment": ["PATH=/bin"]}, script="#!/bin/sh\ntrue\n")
    assert status != 200 and errors(doc) == ["Access/permission denied"], (status, doc)
    # an allocation has no script; the lua tells it from an external job by EXTERNAL_JOB's bit
    key = own.secrets[own.names.jwt_key][naming.JWT_KEY].encode()
    jwt = mint_token(key, naming.BRIDGE_USER, lifetime_s=120)
    salloc = own.exec(ctl, f"SLURM_JWT={jwt} salloc --no-shell -t 1 -c 1 --mem=10M", user=naming.BRIDGE_USER,
                      check=False)  # fmt: skip
    assert not salloc.ok and "Access/permission denied" in salloc.err, salloc
    status, doc = rest.submit(external("k8s:default/ok", 1, 1, 10))
    assert status == 200 and errors(doc) == [], (status, doc)
    job_id = int(doc["job_id"])
    try:
        job = wait_for_state(rest, job_id, "RUNNING")
        assert job["user_name"] == naming.BRIDGE_USER, job
    finally:
        rest.cancel(job_id)
    log = own.logs(ctl, tail=200)
    assert log.count(f"refused a job by {naming.BRIDGE_USER} (uid {naming.BRIDGE_UID})") == 2, log
    # other users are not held to it: root's batch job is taken
    assert own.exec(ctl, "sbatch -t 1 --chdir=/tmp --parsable --wrap true").out.strip().isdigit()


def test_the_bridges_partition_takes_no_one_elses_jobs(own: DockerCluster) -> None:
    """An ordinary user's `sbatch -p k8s -t UNLIMITED` (the partition has no time limit of its own and its
    nodes run tenants' pods) is refused by job_submit.lua, saying why, as is moving a job there; the same
    user's job elsewhere is taken, and so are the bridge's placeholders (the tests above)."""
    ctl, user = own.names.controller_pod, "carol"
    # an ordinary user slurmctld knows (as it would a jail's or a directory's): nobody's uid it rejects
    own.exec(ctl, f"id {user} || useradd --uid 5001 --no-create-home --shell /bin/sh {user}")
    key = own.secrets[own.names.jwt_key][naming.JWT_KEY].encode()
    jwt = mint_token(key, user, lifetime_s=120)
    sbatch = f"SLURM_JWT={jwt} sbatch --chdir=/tmp --parsable -t UNLIMITED -o /dev/null --wrap true"
    refused = own.exec(ctl, f"{sbatch} -p {BRIDGE}", user=user, check=False)
    assert not refused.ok and f"partition {BRIDGE} takes the bridge's placeholders" in refused.err, refused
    taken = own.exec(ctl, f"{sbatch} -p cpu --hold", user=user, check=False)
    assert taken.ok and taken.out.strip().isdigit(), taken
    job = taken.out.strip()
    try:
        moved = own.exec(ctl, f"SLURM_JWT={jwt} scontrol update jobid={job} partition={BRIDGE}", user=user,
                         check=False)  # fmt: skip
        assert not moved.ok, moved
    finally:
        own.exec(ctl, f"scancel {job}", check=False)
    assert "refused a job of uid 5001 in the bridge's partition" in own.logs(ctl, tail=200)


def test_external_nodes_and_their_jobs_outlive_a_reconfigure(own: DockerCluster) -> None:
    """The operator reconfigures slurmctld on every config change: the bridge's external nodes (made at run
    time) and its placeholders must come through, and do when the partition is slurm.conf's. A partition
    made with `scontrol create` does not: it is gone, and its jobs are killed (NODE_FAIL)."""
    rest, ctl = Rest(own), own.names.controller_pod
    (worker,) = own.worker_pods("cpu")
    node, scratch = f"k8s-{uuid.uuid4().hex[:6]}", f"scratch-{uuid.uuid4().hex[:6]}"
    ids: list[int] = []
    try:
        create_external_node(own, node, "192.0.2.2")
        # it joins the bridge's partition through the NodeSet's feature
        wait_for(f"{node} in partition {BRIDGE}",
                 lambda: node in own.exec(ctl, f"sinfo -h -N -p {BRIDGE} -o %N").out.split(), 30)  # fmt: skip
        # a placeholder of two tasks, one on the worker's slurmd node, one on the external node
        spread = external("k8s:default/gang", 2, 1, 100, partition=BRIDGE, minimum_nodes=2, maximum_nodes=2,
                          required_nodes=[worker, node])  # fmt: skip
        status, doc = rest.submit(spread)
        assert status == 200 and errors(doc) == [], (status, doc)
        ids.append(int(doc["job_id"]))
        own.exec(ctl, f"scontrol create PartitionName={scratch} Nodes={worker} State=UP")
        status, doc = rest.submit(external("k8s:default/scratch", 1, 1, 100, partition=scratch))
        assert status == 200 and errors(doc) == [], (status, doc)
        ids.append(int(doc["job_id"]))
        gang = wait_for_state(rest, ids[0], "RUNNING")
        assert sorted(allocation(gang)) == sorted([(worker, 1, 100), (node, 1, 100)]), gang["job_resources"]
        wait_for_state(rest, ids[1], "RUNNING")

        own.exec(ctl, "scontrol reconfigure")
        wait_for(f"partition {scratch} gone",
                 lambda: scratch not in own.exec(ctl, "sinfo -h -o %P", check=False).out, 30)  # fmt: skip
        gone = rest.job(ids[1])
        assert (state(gone), gone["state_reason"]) == ("NODE_FAIL", "PartitionDown"), gone
        after = rest.job(ids[0])
        assert state(after) == "RUNNING" and allocation(after) == allocation(gang), after
        shown = own.exec(ctl, f"scontrol show node {node}").out
        assert "+EXTERNAL" in shown and f"Partitions={BRIDGE} " in shown, shown
    finally:
        for job_id in ids:
            rest.cancel(job_id)
        own.exec(ctl, f"scontrol delete PartitionName={scratch}", check=False)
        delete_when_idle(own, node)


def test_an_external_node_needs_an_address(own: DockerCluster) -> None:
    """slurmctld resolves an allocated node's address (NodeAddr, else its name) while it allocates, and
    answers nothing meanwhile: an external node named after a Kubernetes node that does not resolve costs
    about 10 s per placeholder, for every client. The bridge creates external nodes with NodeAddr (the
    node's InternalIP)."""
    rest, ctl = Rest(own), own.names.controller_pod
    tag = uuid.uuid4().hex[:6]
    unresolvable, addressed = f"k8s-noaddr-{tag}", f"k8s-addr-{tag}"
    took: dict[str, float] = {}  # submit to RUNNING
    slowest: dict[str, float] = {}  # the longest answer to `GET job/<id>` meanwhile
    try:
        create_external_node(own, unresolvable, None)
        create_external_node(own, addressed, "192.0.2.3")
        for node in (unresolvable, addressed):
            desc = external(f"k8s:default/{node}", 1, 2, 100, partition=BRIDGE, required_nodes=[node])
            started = time.monotonic()
            status, doc = rest.submit(desc)
            assert status == 200 and errors(doc) == [], (status, doc)
            job_id, slowest[node] = int(doc["job_id"]), 0.0
            while True:
                asked = time.monotonic()
                now = rest.job_state(job_id)
                slowest[node] = max(slowest[node], time.monotonic() - asked)
                if now == "RUNNING":
                    break
                assert time.monotonic() - started < 60, f"job {job_id} not RUNNING after 60 s: {now}"
                time.sleep(0.2)
            took[node] = time.monotonic() - started
            rest.cancel(job_id)
    finally:
        for node in (unresolvable, addressed):
            delete_when_idle(own, node)
    log = own.logs(ctl, tail=400)
    assert f'Unable to resolve "{unresolvable}"' in log and f'Unable to resolve "{addressed}"' not in log, log
    # the figures, printed (timings are the benchmarks' to judge): about 10 s per unresolvable placeholder
    print(f"external node without NodeAddr: RUNNING after {took[unresolvable]:.1f} s (slowest answer"
          f" {slowest[unresolvable]:.1f} s); with NodeAddr {took[addressed]:.1f} s"
          f" ({slowest[addressed]:.1f} s)")  # fmt: skip
