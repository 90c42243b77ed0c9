"""The Slurm metrics (``warden.exporter.metrics``) from slurmrestd's real answers (fixtures captured from
Slurm 24.11.5's slurmrestd in the dataplane cluster: three workers, one drained by root with "hands off",
one GPU worker with one of its two GPUs held), read back through Prometheus's own text parser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from warden import naming
from warden.exporter.metrics import Snapshot, families, node_state
from warden.slurm import reasons
from warden.slurm.model import Job, Node, diag_from_doc, jobs_from_doc, nodes_from_doc
from warden.slurm.reasons import reason_class

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"


def _doc(name: str) -> object:
    return json.loads((FIXTURES / name).read_text())


def _snapshot(**overrides: object) -> Snapshot:
    fields: dict[str, object] = {
        "cluster": "hpc/dp",
        "up": True,
        "nodes": nodes_from_doc(_doc("slurmrestd_nodes_three.json")),
        "jobs": jobs_from_doc(_doc("slurmrestd_jobs_four.json")),
        "diag": diag_from_doc(_doc("slurmrestd_diag.json")),
        "slurmdbd_reachable": True,
    }
    fields.update(overrides)
    return Snapshot(**fields)  # type: ignore[arg-type]


class _Fixed(Collector):
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def collect(self):  # type: ignore[no-untyped-def]
        return families(self.snap)


def scrape(snap: Snapshot) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The snapshot as Prometheus would read it: exposition text, parsed by the client's parser."""
    registry = CollectorRegistry()
    registry.register(_Fixed(snap))
    text = generate_latest(registry).decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _value(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str) -> float:
    key = (name, tuple(sorted({"slurm_cluster": "hpc/dp", **labels}.items())))
    assert key in samples, f"no {name}{labels}; have {sorted(k for k in samples if k[0] == name)}"
    return samples[key]


def test_nodes_by_state_and_who_drained_them() -> None:
    samples = scrape(_snapshot())
    assert _value(samples, "slurm_nodes", worker_group="cpu", state="mixed", reason_class="none") == 1
    assert _value(samples, "slurm_nodes", worker_group="cpu", state="drained", reason_class="person") == 1
    assert _value(samples, "slurm_nodes", worker_group="gpu", state="mixed", reason_class="none") == 1
    assert _value(samples, "slurm_node_reason", node="dp-worker-cpu-1", reason_class="person", reason="hands off") == 1
    assert not [k for k in samples if k[0] == "slurm_node_reason" and ("node", "dp-worker-cpu-0") in k[1]]


def test_cpus_and_gpus_per_partition_and_group() -> None:
    samples = scrape(_snapshot())
    # cpu-0: 2 CPUs, 1 held; cpu-1: 2 CPUs, drained (its free CPUs are not idle); gpu-0: 2 CPUs, 1 held
    assert _value(samples, "slurm_partition_cpus_total", partition="cpu") == 4
    assert _value(samples, "slurm_partition_cpus_allocated", partition="cpu") == 1
    assert _value(samples, "slurm_partition_cpus_idle", partition="cpu") == 1
    assert _value(samples, "slurm_worker_group_gpus_total", worker_group="gpu") == 2
    assert _value(samples, "slurm_worker_group_gpus_allocated", worker_group="gpu") == 1
    assert _value(samples, "slurm_worker_group_gpus_idle", worker_group="gpu") == 1
    assert _value(samples, "slurm_partition_gpus_total", partition="cpu") == 0


def test_jobs_by_partition_and_state_and_why_they_wait() -> None:
    pending = Job(id=9, state="PENDING", nodes=(), end_time=None, partition="gpu", state_reason="Resources", cpus=8)
    samples = scrape(_snapshot(jobs=[*jobs_from_doc(_doc("slurmrestd_jobs_four.json")), pending]))
    assert _value(samples, "slurm_jobs", partition="cpu", state="running") == 1
    assert _value(samples, "slurm_jobs", partition="cpu", state="completed") == 1
    assert _value(samples, "slurm_jobs", partition="cpu", state="failed") == 1
    assert _value(samples, "slurm_jobs", partition="gpu", state="running") == 1
    assert _value(samples, "slurm_jobs_pending", partition="gpu", reason="Resources") == 1
    assert _value(samples, "slurm_jobs_cpus", partition="gpu", state="pending") == 8


def test_scheduler_statistics_as_sdiag_shows_them() -> None:
    samples = scrape(_snapshot())
    # the fixture's sdiag: 4 submitted, 3 started, 1 completed; last cycle 37 µs, max 2066 µs
    assert _value(samples, "slurm_scheduler_jobs", event="submitted") == 4
    assert _value(samples, "slurm_scheduler_jobs", event="started") == 3
    assert _value(samples, "slurm_scheduler_cycle_last_seconds") == pytest.approx(37e-6)
    assert _value(samples, "slurm_scheduler_cycle_max_seconds") == pytest.approx(2066e-6)
    assert _value(samples, "slurm_scheduler_dbd_agent_queue_size") == 0
    assert _value(samples, "slurm_backfill_active") == 0


def test_slurm_away_is_slurm_up_zero_and_no_stale_series() -> None:
    samples = scrape(Snapshot(cluster="hpc/dp", up=False, slurmdbd_reachable=False, errors={"ping": 1}))
    assert _value(samples, "slurm_up") == 0
    assert _value(samples, "slurm_slurmdbd_reachable") == 0
    assert _value(samples, "slurm_exporter_errors", what="ping") == 1
    assert not [k for k in samples if k[0] in ("slurm_nodes", "slurm_jobs", "slurm_scheduler_threads")]


def test_no_accounting_no_slurmdbd_series() -> None:
    samples = scrape(_snapshot(slurmdbd_reachable=None))
    assert not [k for k in samples if k[0] == "slurm_slurmdbd_reachable"]
    assert _value(samples, "slurm_up") == 1


def _node(state: str, flags: tuple[str, ...] = (), reason: str = "") -> Node:
    return Node(name="n", state=state, flags=frozenset(flags), reason=reason, gres="", features=(), partitions=())


@pytest.mark.parametrize(
    ("node", "state", "cls"),
    [
        (_node("IDLE"), "idle", "none"),
        (_node("IDLE", reason="old reason kept after a resume"), "idle", "none"),
        (_node("MIXED"), "mixed", "none"),
        (_node("ALLOCATED", ("DRAIN",), reasons.HEALTH_CHECK + " nccl busbw 3.0 < 100"), "draining", "health_check"),
        (_node("IDLE", ("DRAIN",), reasons.QUICK_CHECK + " nvidia-smi failed"), "drained", "health_check"),
        (_node("IDLE", ("DRAIN",), reasons.cordon("kube-node-3")), "drained", "kubernetes"),
        (_node("IDLE", ("DRAIN",), reasons.scale_in("cpu", 2)), "drained", "scale_in"),
        (_node("MIXED", ("DRAIN",), reasons.upgrade("cpu", "5f1c")), "draining", "upgrade"),
        # the worker image's own drains (images/worker/entrypoint.sh), as Slurm keeps them
        (
            _node("IDLE", ("DRAIN",), "warden-worker: no NVIDIA driver (libcuda.so.1 missing)"),
            "drained",
            "health_check",
        ),
        (_node("ALLOCATED", ("DRAIN",), "warden: pod terminating"), "draining", "kubernetes"),
        (_node("IDLE", ("DRAIN",), "bad DIMM, ticket 4411"), "drained", "person"),
        (_node("DOWN", ("NOT_RESPONDING",), "Not responding"), "down", "slurm"),
        (_node("IDLE", ("NOT_RESPONDING",)), "down", "slurm"),
        (_node("IDLE", ("COMPLETING",)), "completing", "none"),
        (_node("ALLOCATED", ("COMPLETING",)), "allocated", "none"),
    ],
)
def test_one_word_state_and_reason_class(node: Node, state: str, cls: str) -> None:
    assert (node_state(node), reason_class(node)) == (state, cls)


def test_a_nodes_group_is_its_group_feature() -> None:
    node = nodes_from_doc(_doc("slurmrestd_nodes_three.json"))[2]
    assert naming.group_feature("gpu") in node.features
    samples = scrape(_snapshot(nodes=[node]))
    assert _value(samples, "slurm_node_state", node=node.name, worker_group="gpu", state="mixed", reason_class="none")


def test_diag_flattens_numbers_and_skips_lists() -> None:
    stats = diag_from_doc({"statistics": {"a": 1, "b": {"c": 2, "d": {"set": True, "infinite": False, "number": 5}},
                                          "e": [1, 2], "f": True, "g": {"set": False, "number": 9}}})  # fmt: skip
    assert stats == {"a": 1.0, "b_c": 2.0, "b_d": 5.0, "f": 1.0}
