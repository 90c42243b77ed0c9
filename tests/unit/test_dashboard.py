"""The Grafana dashboard the slurm-operator chart ships, and docs/observability.md, against the code.

- every metric a query of the dashboard names (panels, panels of collapsed rows, template variables)
  is one the Slurm exporter (``warden.exporter.metrics``) or the operator (``warden.opmetrics.REGISTRY``,
  process metrics included) exposes, and every query of a metric carrying ``slurm_cluster`` is
  filtered by the ``$slurm_cluster`` variable;
- the panels the dashboard is for are there (node states, drain reasons, GPU allocation, the queue,
  NCCL bandwidth), it is well-formed Grafana JSON, and the chart's ConfigMap carries the sidecar's label;
- docs/observability.md's metric tables list exactly the exposed series, with their type and labels.

The metric names of a PromQL expression come from tests/support/dashboard.py's small tokenizer
(``promql_selectors``), tested first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from prometheus_client.core import Metric
from prometheus_client.metrics import MetricWrapperBase

from tests.support.dashboard import (
    AGGREGATIONS,
    CHART,
    DASHBOARD_FILE,
    FUNCTIONS,
    GRAFANA_FUNCTIONS,
    Selector,
    dashboard_expressions,
    dashboard_panels,
    load_dashboard,
    promql_functions,
    promql_metric_names,
    promql_selectors,
)
from warden import opmetrics
from warden.exporter.metrics import JOB_EVENTS, SCHEDULER_STATS, Snapshot, families
from warden.slurm.model import Job, Node

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "observability.md"
CLUSTER_FILTER = 'slurm_cluster=~"$slurm_cluster"'

# --- the PromQL reader (tests/support/dashboard.py) ---------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (state) (slurm_nodes{slurm_cluster=~"$slurm_cluster"})', {"slurm_nodes"}),
        (
            "histogram_quantile(0.95, sum by (le) (rate(warden_reconcile_duration_seconds_bucket[$__rate_interval])))",
            {"warden_reconcile_duration_seconds_bucket"},
        ),
        (
            "process_resident_memory_bytes and on (instance, job) warden_reconcile_duration_seconds_count",
            {"process_resident_memory_bytes", "warden_reconcile_duration_seconds_count"},
        ),
        ('a * ignoring (reason, state) group_left (state, node) b{c="d"}', {"a", "b"}),
        ("sum without(instance)(rate(foo_total[5m] offset 1h)) / on() group_right() bar", {"foo_total", "bar"}),
        ('count_values("version", build_info) > bool 0', {"build_info"}),
        ('up{job="a}b", x=~"$v"} or vector(0)', {"up"}),
        ('{__name__="slurm_up", slurm_cluster="a"}', {"slurm_up"}),
        ("max_over_time(x:recorded[5m:1m]) - 1e-6 * min(y)", {"x:recorded", "y"}),
        ('label_replace(z, "dst", "$1", "src", "(.*)")', {"z"}),
        ("label_values(slurm_up, slurm_cluster)", {"slurm_up"}),
        ('label_values(slurm_nodes{slurm_cluster=~"$c"}, worker_group)', {"slurm_nodes"}),
        ("label_values(slurm_cluster)", set()),
        ("time() - timestamp(vector(1))", set()),
    ],
)
def test_promql_metric_names(expr: str, names: set[str]) -> None:
    assert promql_metric_names(expr) == names


def test_selectors_keep_their_matchers() -> None:
    (sel,) = promql_selectors('sum by (state) (slurm_nodes{slurm_cluster=~"$slurm_cluster", state!="idle"})')
    assert sel == Selector("slurm_nodes", '{slurm_cluster=~"$slurm_cluster", state!="idle"}')
    assert promql_selectors("rate(x[5m])") == [Selector("x", "")]


def test_functions_of_an_expression() -> None:
    assert promql_functions("sum by (a) (rat(x[5m])) and on (b) topk(3, y)") == {"sum", "rat", "topk"}


# --- what the code exposes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    name: str
    type: str  # gauge, counter, histogram
    exposed: frozenset[str]  # the series names (warden_reconciles → warden_reconciles_total)
    labels: frozenset[str]  # `le` included for histograms (on _bucket)


def _family(metric: Metric, labels: set[str]) -> Family:
    if metric.type == "histogram":
        labels = labels | {"le"}
    return Family(metric.name, metric.type, frozenset(opmetrics.exposed_names([metric])), frozenset(labels))


def _sample_labels(metric: Metric) -> set[str]:
    return {key for sample in metric.samples for key in sample.labels} - {"le"}


def _full_snapshot() -> Snapshot:
    """A snapshot under which every Slurm family has samples (so their labels show)."""
    node = Node(
        name="x-worker-gpu-0", state="MIXED", flags=frozenset({"DRAIN"}), reason="hands off", gres="gpu:h100:2",
        features=("warden-group-gpu",), partitions=("gpu",), cpus=8, alloc_cpus=2, gres_used="gpu:h100:1(IDX:0)",
    )  # fmt: skip
    job = Job(id=1, state="PENDING", nodes=(), end_time=None, partition="gpu", state_reason="Resources", cpus=1)
    diag = {key: 1.0 for key, *_ in SCHEDULER_STATS} | {f"jobs_{event}": 1.0 for event in JOB_EVENTS}
    return Snapshot(
        cluster="ns/x", up=True, nodes=[node], jobs=[job], diag=diag, slurmdbd_reachable=True, collect_seconds=0.1,
        errors={"jobs": 1},
    )  # fmt: skip


def slurm_families() -> list[Family]:
    full = families(_full_snapshot())
    empty = families(Snapshot(cluster="x", up=False))
    assert [f.name for f in full] == [f.name for f in empty], "a Slurm family is not always there"
    out = []
    for metric in full:
        assert metric.samples, f"{metric.name}: no sample under the full snapshot, its labels unknown"
        out.append(_family(metric, _sample_labels(metric)))
    return out


def operator_families() -> list[Family]:
    """Every family of the operator's registry, labels from the instruments' declarations (a labelled
    counter has no sample until counted) or, for the NCCL gauges, from a collector fed a report."""
    declared = {
        wrapper._name: set(wrapper._labelnames)
        for wrapper in vars(opmetrics).values()
        if isinstance(wrapper, MetricWrapperBase)
    }
    nccl = opmetrics.NcclReports(clock=lambda: 1e9)
    nccl.update("ns/x", {"lastRunTime": "2026-01-02T03:04:05Z", "nodes": [
        {"node": "n", "outcome": "passed", "busbwGBps": 100.0}]})  # fmt: skip
    declared |= {metric.name: _sample_labels(metric) for metric in nccl.collect()}
    out = []
    for metric in opmetrics.REGISTRY.collect():
        if metric.name in declared:
            out.append(_family(metric, declared[metric.name]))
        else:
            assert metric.samples, f"{metric.name}: no sample and no declaration, its labels unknown"
            out.append(_family(metric, _sample_labels(metric)))
    return out


def all_families() -> list[Family]:
    return slurm_families() + operator_families()


def exposed_labels() -> dict[str, frozenset[str]]:
    """Every exposed series name → its labels."""
    return {name: family.labels for family in all_families() for name in family.exposed}


def test_exposed_names_are_the_registrys() -> None:
    """The families above are what the exporter and the operator serve, names as ``exposed_names`` says."""
    assert set(exposed_labels()) == opmetrics.exposed_names(
        [*families(Snapshot(cluster="x", up=False)), *opmetrics.REGISTRY.collect()]
    )
    assert "process_resident_memory_bytes" in exposed_labels()


# --- the dashboard ---------------------------------------------------------------------------------------


def test_dashboard_queries_only_exposed_metrics() -> None:
    exposed = exposed_labels()
    queries = dashboard_expressions(load_dashboard())
    assert len(queries) > 20
    unknown = {(where, name) for where, expr in queries for name in promql_metric_names(expr) if name not in exposed}
    assert unknown == set(), f"metrics no exporter exposes: {sorted(unknown)}"
    known_calls = FUNCTIONS | AGGREGATIONS | GRAFANA_FUNCTIONS
    unknown_calls = {(where, f) for where, expr in queries for f in promql_functions(expr) if f not in known_calls}
    assert unknown_calls == set(), f"not PromQL functions: {sorted(unknown_calls)}"


def test_dashboard_filters_every_clustered_query_by_the_cluster_variable() -> None:
    exposed = exposed_labels()
    unfiltered = [
        (where, f"{s.name}{s.matchers}")
        for where, expr in dashboard_expressions(load_dashboard())
        if not where.startswith("variable ")
        for s in promql_selectors(expr)
        if "slurm_cluster" in exposed.get(s.name, frozenset()) and CLUSTER_FILTER not in s.matchers
    ]
    assert unfiltered == [], f"queries not filtered by {CLUSTER_FILTER}: {unfiltered}"


def test_dashboard_has_the_required_panels() -> None:
    used = {name for _, expr in dashboard_expressions(load_dashboard()) for name in promql_metric_names(expr)}
    required = {
        "slurm_up", "slurm_slurmdbd_reachable", "slurm_nodes", "slurm_node_reason", "slurm_jobs", "slurm_jobs_pending",
        "slurm_scheduler_cycle_last_seconds", "warden_nccl_bus_bandwidth_gbps", "warden_nccl_seconds_since_last_run",
        "warden_nccl_check_passed", "warden_health_check_node_actions_total", "warden_slurm_actions_total",
        "warden_reconciles_total", "warden_reconcile_duration_seconds_bucket", "warden_reconcile_step_errors_total",
        "warden_api_writes_total", "slurm_partition_cpus_allocated",
    }  # fmt: skip
    assert required - used == set()
    gpu_allocation = {"slurm_partition_gpus_allocated", "slurm_worker_group_gpus_allocated"}
    assert gpu_allocation & used, "no GPU allocation panel"
    node_states = 'sum by (state) (slurm_nodes{slurm_cluster=~"$slurm_cluster"})'
    assert node_states in {expr for _, expr in dashboard_expressions(load_dashboard())}


def test_dashboard_variables() -> None:
    variables = {v["name"]: v for v in load_dashboard()["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    cluster = variables["slurm_cluster"]
    query = cluster["query"]["query"] if isinstance(cluster["query"], dict) else cluster["query"]
    assert query == "label_values(slurm_up, slurm_cluster)"
    assert cluster["multi"] and cluster["includeAll"] and cluster["allValue"] == ".*"


def test_dashboard_is_well_formed() -> None:
    board = load_dashboard()
    assert board["uid"] == "warden-slurm" and board["title"] and 36 <= board["schemaVersion"] <= 41
    everything = list(dashboard_panels(board))
    ids = [p["id"] for p in everything]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    boxes = []
    for panel in everything:
        grid = panel["gridPos"]
        assert set(grid) == {"x", "y", "w", "h"} and grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        assert panel["title"], panel
        if panel["type"] == "row":
            assert grid["w"] == 24 and grid["h"] == 1
            assert panel["collapsed"] or panel.get("panels", []) == [], f"open row {panel['title']!r} holds panels"
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"] and target["expr"].strip(), panel["title"]
        boxes.append((panel["title"], grid))
    for i, (a, ga) in enumerate(boxes):
        for b, gb in boxes[i + 1 :]:
            apart = (ga["x"] + ga["w"] <= gb["x"] or gb["x"] + gb["w"] <= ga["x"]
                     or ga["y"] + ga["h"] <= gb["y"] or gb["y"] + gb["h"] <= ga["y"])  # fmt: skip
            assert apart, f"panels {a!r} and {b!r} overlap"


def test_chart_configmap_carries_the_sidecar_label() -> None:
    """Grafana's sidecar loads ConfigMaps labelled `grafana_dashboard: "1"` (its usual label), any key
    ending in .json being a dashboard."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())["dashboards"]
    assert values["enabled"] is True
    assert (values["label"], values["labelValue"]) == ("grafana_dashboard", "1")
    template = (CHART / "templates" / "dashboards.yaml").read_text()
    assert "kind: ConfigMap" in template and "{{- if .Values.dashboards.enabled }}" in template
    assert "(dict .Values.dashboards.label .Values.dashboards.labelValue)" in template
    assert f'warden-slurm.json: |-\n    {{{{- .Files.Get "{DASHBOARD_FILE}" | nindent 4 }}}}' in template


# --- docs/observability.md -------------------------------------------------------------------------------

_ROW = re.compile(r"^\| ((?:`[a-z_:]+`(?:, )?)+) \| (gauge|counter|histogram) \| ([^|]*) \|", re.MULTILINE)


def documented() -> dict[str, tuple[str, frozenset[str], frozenset[str]]]:
    """First exposed name of each metric row → (type, its exposed names, its labels)."""
    out = {}
    for names, kind, labels in _ROW.findall(DOC.read_text()):
        listed = re.findall(r"`([a-z_:]+)`", names)
        out[listed[0]] = (kind, frozenset(listed), frozenset(re.findall(r"`([a-z_]+)`", labels)))
    return out


def test_docs_list_every_metric_with_its_type_and_labels() -> None:
    docs = documented()
    by_first = {sorted(f.exposed)[0]: f for f in all_families()}
    assert set(docs) == set(by_first), (
        f"missing from docs/observability.md: {sorted(set(by_first) - set(docs))}; "
        f"documented but not exposed: {sorted(set(docs) - set(by_first))}"
    )
    for first, family in by_first.items():
        assert docs[first] == (family.type, family.exposed, family.labels), f"docs/observability.md: {first}"
    text = DOC.read_text()
    for name in exposed_labels():
        assert f"`{name}`" in text
