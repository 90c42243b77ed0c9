"""The Slurm metrics exporter (`<cluster>-exporter`, the operator's image running `warden-slurm-exporter`)
as rendered, against the real slurmctld, slurmrestd and slurmdbd of the session's cluster: scraped the way
Prometheus does (HTTP GET /metrics) and parsed with the Prometheus client's own parser.

What a person does is what the series must show: a job running on a partition, a GPU job holding a GPU,
a node a person drained with a reason, a node a health check drained. Every drain is undone and every
job ended before a test returns (the cluster is shared by the whole session).
"""

from __future__ import annotations

import shlex
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.jailuser import JailUser
from warden import naming
from warden.slurm.reasons import HEALTH_CHECK as REASON_PREFIX
from warden_dev.dockercluster import DockerCluster, wait_for

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _exporter(cluster: DockerCluster) -> str:
    (pod,) = [p.name for p in cluster.pods.values() if p.component == "exporter"]
    return pod


def scrape(cluster: DockerCluster) -> tuple[set[str], Samples]:
    """(family names, samples) of one GET /metrics, as Prometheus's text parser reads them."""
    url = f"http://{cluster.ip(_exporter(cluster))}:{naming.EXPORTER_PORT}/metrics"
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    families, samples = set(), {}
    for family in text_string_to_metric_families(text):
        families.add(family.name)
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return families, samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The sample whose labels include ``labels``; None when there is none (more than one: an error)."""
    hits = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(hits) <= 1, f"{name}{labels}: {len(hits)} samples"
    return hits[0] if hits else None


def eventually(cluster: DockerCluster, what: str, check: Callable[[Samples], bool], timeout: float = 60) -> Samples:
    last: list[Samples] = [{}]

    def look() -> bool:
        last[0] = scrape(cluster)[1]
        return check(last[0])

    try:
        wait_for(what, look, timeout=timeout, interval=2)
    except Exception as e:
        shown = sorted(f"{n}{dict(ls)} {v}" for (n, ls), v in last[0].items() if n.startswith(("slurm_nodes",
                       "slurm_jobs", "slurm_node_", "slurm_worker_group_gpus")))  # fmt: skip
        raise AssertionError(f"{e}\nlast scrape:\n" + "\n".join(shown)) from e
    return last[0]


@pytest.fixture(scope="module")
def bob(cluster: DockerCluster) -> JailUser:
    return JailUser.added_by_root(cluster, f"bob{uuid.uuid4().hex[:4]}")


def test_the_exporter_serves_slurm_as_slurmctld_sees_it(cluster: DockerCluster) -> None:
    families, samples = scrape(cluster)
    cluster_label = f"{cluster.namespace}/{cluster.name}"
    assert value(samples, "slurm_up", slurm_cluster=cluster_label) == 1
    assert value(samples, "slurm_slurmdbd_reachable") == 1  # the session's cluster keeps accounting
    workers = sorted(p.name for p in cluster.pods.values() if p.component == "worker")
    nodes = {dict(ls)["node"] for (n, ls) in samples if n == "slurm_node_state"}
    assert nodes == set(workers)
    assert value(samples, "slurm_worker_group_cpus_total", worker_group="cpu") == 4  # 2 workers x 2 CPUs
    assert value(samples, "slurm_worker_group_gpus_total", worker_group="gpu") == 2
    assert value(samples, "slurm_scheduler_threads") is not None
    assert value(samples, "process_resident_memory_bytes") is not None
    # every family is served, with or without samples (dashboards never query a missing name)
    assert {"slurm_jobs_pending", "slurm_node_reason", "slurm_backfill_cycle_last_seconds"} <= families


def test_a_running_job_and_a_gpu_job_show_in_jobs_cpus_and_gpus(cluster: DockerCluster, bob: JailUser) -> None:
    cpu_job = bob.ssh("sbatch --parsable -p cpu -N1 -n1 --wrap 'sleep 300'").strip()
    gpu_job = bob.ssh("sbatch --parsable -p gpu --gres=gpu:1 --wrap 'sleep 300'").strip()
    try:
        samples = eventually(
            cluster,
            "both jobs running, one GPU held",
            lambda s: (
                value(s, "slurm_jobs", partition="cpu", state="running") == 1
                and value(s, "slurm_jobs", partition="gpu", state="running") == 1
                and value(s, "slurm_worker_group_gpus_allocated", worker_group="gpu") == 1
            ),
        )
        assert value(samples, "slurm_partition_cpus_allocated", partition="cpu") == 1
        assert value(samples, "slurm_partition_cpus_idle", partition="cpu") == 3
        assert value(samples, "slurm_worker_group_gpus_idle", worker_group="gpu") == 1
        assert value(samples, "slurm_scheduler_jobs", event="started") is not None
    finally:
        bob.ssh(f"scancel {cpu_job} {gpu_job}")
    eventually(
        cluster,
        "no job running, the GPU free again",
        lambda s: (
            not value(s, "slurm_jobs", partition="gpu", state="running")
            and value(s, "slurm_worker_group_gpus_allocated", worker_group="gpu") == 0
        ),
    )


def test_a_pending_job_shows_why_it_waits(cluster: DockerCluster, bob: JailUser) -> None:
    """A job asking for more GPUs than are free now waits for Resources behind one holding them."""
    hold = bob.ssh("sbatch --parsable -p gpu --gres=gpu:2 --wrap 'sleep 300'").strip()
    waits = bob.ssh("sbatch --parsable -p gpu --gres=gpu:2 --wrap 'true'").strip()
    try:
        eventually(
            cluster,
            "the second job pending for Resources",
            lambda s: (
                (value(s, "slurm_jobs_pending", partition="gpu", reason="Resources") or 0) >= 1
                and value(s, "slurm_jobs", partition="gpu", state="pending") == 1
            ),
        )
    finally:
        bob.ssh(f"scancel {hold} {waits}")


@pytest.fixture
def drained(cluster: DockerCluster) -> Iterator[Callable[[str, str], None]]:
    """Drain nodes as root would; every one is resumed afterwards."""
    done: list[str] = []

    def drain(node: str, reason: str) -> None:
        cluster.ssh("root", f"scontrol update nodename={node} state=drain reason={shlex.quote(reason)}")
        done.append(node)

    yield drain
    for node in done:
        cluster.ssh("root", f"scontrol update nodename={node} state=resume", check=False)


def test_who_drained_a_node_is_a_label(cluster: DockerCluster, drained: Callable[[str, str], None]) -> None:
    person, check = cluster.worker_pods("cpu")[0], cluster.worker_pods("gpu")[0]
    drained(person, "disk swap, ticket 77")
    drained(check, f"{REASON_PREFIX} nccl all_reduce_perf busbw 20.0 GB/s < 100.0 GB/s")
    samples = eventually(
        cluster,
        "both drains in the series",
        lambda s: (
            value(s, "slurm_nodes", worker_group="cpu", state="drained", reason_class="person") == 1
            and value(s, "slurm_nodes", worker_group="gpu", state="drained", reason_class="health_check") == 1
        ),
    )
    assert value(samples, "slurm_node_reason", node=person, reason_class="person") == 1
    assert value(samples, "slurm_node_reason", node=person, reason="disk swap, ticket 77") == 1
    assert value(samples, "slurm_node_state", node=check, state="drained", reason_class="health_check") == 1
    # a drained node's free CPUs are neither allocated nor idle
    assert value(samples, "slurm_partition_cpus_idle", partition="cpu") == 2
    assert value(samples, "slurm_partition_cpus_total", partition="cpu") == 4


def test_slurmctld_away_is_slurm_up_zero_and_back(cluster: DockerCluster) -> None:
    """slurmrestd answers but slurmctld does not: the scrape still succeeds, saying so."""
    controller = cluster.names.controller_pod
    # by its command line: a reconfigured slurmctld (with accounting: at its first start) runs as /proc/self/exe
    cluster.exec(controller, "pkill -STOP -of '^slurmctld '")
    try:
        start = time.monotonic()
        _, samples = scrape(cluster)
        assert value(samples, "slurm_up") == 0
        assert value(samples, "slurm_exporter_errors", what="ping") == 1
        assert time.monotonic() - start < 60
    finally:
        cluster.exec(controller, "pkill -CONT -of '^slurmctld '")
    eventually(cluster, "slurm_up back to 1", lambda s: value(s, "slurm_up") == 1)
