"""The pure part of the jail's cost bench (bench/jobcost_figures.py, issue 58): which plugstacks are compared,
in which order, and how the figures become the ratios the README quotes. The bench itself is no test."""

from __future__ import annotations

import pytest
from bench.jobcost_figures import (
    PLAIN,
    PLAIN_TEXT,
    PYXIS,
    VARIANTS,
    WARDEN,
    Row,
    percentile,
    plugstacks,
    rounds,
    table,
    timings,
)

from warden.model import parse_spec
from warden.render.config import plugstack_conf
from warden.render.context import Cluster

SPEC = {
    "workerGroups": [{"name": "cpu", "replicas": 2}],
    "partitions": [{"name": "cpu", "workerGroups": ["cpu"], "default": True}],
    "containers": {"enabled": True},
}


def rendered() -> str:
    cluster = Cluster(name="b", namespace="ns", spec=parse_spec(SPEC))
    return plugstack_conf(cluster, cluster.spec.worker_groups[0])


def test_the_variants_are_warden_as_rendered_pyxis_alone_and_nothing() -> None:
    text = rendered()
    stacks = plugstacks(text)
    assert stacks[WARDEN] == text
    pyxis = [line for line in stacks[PYXIS].splitlines() if not line.startswith("#")]
    assert len(pyxis) == 1 and "spank_pyxis.so" in pyxis[0] and "importer=" in pyxis[0]
    assert "spank_jail" not in stacks[PYXIS]
    assert stacks[PLAIN] == PLAIN_TEXT and "required" not in stacks[PLAIN]


def test_a_plugstack_without_the_jail_or_pyxis_line_is_refused() -> None:
    with pytest.raises(ValueError, match="one pyxis and one jail"):
        plugstacks("required /usr/lib/warden/spank_jail.so root=/mnt/jail\n")


def test_every_round_has_each_variant_once_and_each_leads_in_turn() -> None:
    order = rounds(VARIANTS, 4)
    assert order == [[WARDEN, PYXIS, PLAIN], [PYXIS, PLAIN, WARDEN], [PLAIN, WARDEN, PYXIS], [WARDEN, PYXIS, PLAIN]]


def test_percentiles_interpolate_between_ranks() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == pytest.approx(50.5)
    assert percentile(values, 0.99) == pytest.approx(99.01)
    assert percentile([7.0], 0.99) == 7.0
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_timings_read_only_the_tagged_lines() -> None:
    out = "t 1500\nsrun: job 3 queued and waiting for resources\nt 2500\nrate 12000\n"
    assert timings(out) == [1.5, 2.5]
    assert timings(out, "rate") == [12.0]


def test_cost_reads_above_one_when_warden_is_slower_for_times_and_rates_alike() -> None:
    latency = Row("srun", "ms")
    latency.add(WARDEN, [110.0, 120.0, 130.0])
    latency.add(PLAIN, [100.0, 100.0, 100.0])
    assert latency.cost(WARDEN, PLAIN) == pytest.approx(1.2)
    jobs = Row("array", "jobs/s", higher_is_better=True)
    jobs.add(WARDEN, [8.0])
    jobs.add(PLAIN, [10.0])
    assert jobs.cost(WARDEN, PLAIN) == pytest.approx(1.25)
    assert jobs.cost(WARDEN, PYXIS) is None


def test_spread_is_the_ratio_of_each_round_measured_side_by_side() -> None:
    row = Row("srun", "ms")
    for warden, plain in ((120.0, 100.0), (90.0, 100.0), (150.0, 100.0)):
        row.add(WARDEN, [warden])
        row.add(PLAIN, [plain])
    assert row.spread(WARDEN, PLAIN) == pytest.approx((0.9, 1.5))
    p99 = Row("srun", "ms", stat="p99")
    p99.add(WARDEN, [float(v) for v in range(100)])
    assert p99.value(WARDEN) == pytest.approx(98.01)


def test_the_table_prints_absolute_figures_and_ratios_with_their_spread() -> None:
    row = Row("srun -N1 true, median", "ms")
    for _ in range(2):
        row.add(WARDEN, [60.0])
        row.add(PYXIS, [55.0])
        row.add(PLAIN, [50.0])
    out = table([row], notes={"FAILED (plain)": "exit 1"})
    header, line, note = out.splitlines()
    assert header.split() == ["warden", "pyxis", "plain", "warden/pyxis", "warden/plain"]
    assert line.split()[-7:] == ["60.0", "55.0", "50.0", "1.09x", "[1.09-1.09]", "1.20x", "[1.20-1.20]"]
    assert note.strip() == "FAILED (plain): exit 1"
