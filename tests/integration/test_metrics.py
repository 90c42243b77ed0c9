"""The operator's /metrics and the exporter's ServiceMonitor, against a real kube-apiserver.

- The operator counts and times its reconciles, counts its API writes and the steps the API refused;
  scraped over HTTP and parsed with the Prometheus client's parser.
- A ServiceMonitor follows `spec.metrics.serviceMonitor.mode`: `Enabled` without the Prometheus Operator's
  CRD is an apply error naming the fix (counted as a step error), and is made without any spec change once
  the CRD is installed; `Disabled` prunes it; `Auto` makes it while the CRD is there.
  The CRD installed here is a stand-in with the real group, version, kind and plural, and an open schema:
  what is tested is the operator following the API's discovery, not Prometheus Operator's schema.
"""

from __future__ import annotations

import copy
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from tests.support.operator import (
    SERVICE_MONITOR_CRD,
    OperatorProcess,
    apply_cluster,
    get_cluster,
    load_example,
    wait_ready,
)
from warden.naming import Names
from warden_dev.controlplane import wait_for

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(samples: Samples, name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls)


def test_the_operator_counts_its_reconciles_writes_and_refused_steps(
    api_client: Any, cluster_namespace: str, operator: OperatorProcess
) -> None:
    ns = cluster_namespace
    body = load_example("cpu-only", ns)
    apply_cluster(api_client, body)
    wait_ready(api_client, ns, "cpu", operator)

    def counted() -> Samples | None:
        samples = scrape(operator.metrics_url)
        return samples if total(samples, "warden_reconciles_total", outcome="complete") else None

    samples = wait_for("a complete reconcile counted", counted, 30, on_fail=operator.log_tail)
    assert total(samples, "warden_reconciles_total", slurm_cluster=f"{ns}/cpu", outcome="complete") >= 1
    assert total(samples, "warden_reconcile_duration_seconds_count") >= 1
    # server-side applies are PATCHes; the first StatefulSets, WorkerSet and Secrets were written
    assert total(samples, "warden_api_writes_total", verb="PATCH", resource="statefulsets") >= 2
    assert total(samples, "warden_api_writes_total", verb="POST", resource="secrets") >= 3
    assert total(samples, "process_resident_memory_bytes") > 0


@pytest.fixture
def no_service_monitor_crd(api_client: Any) -> Iterator[client.ApiextensionsV1Api]:
    ext = client.ApiextensionsV1Api(api_client)
    name = SERVICE_MONITOR_CRD["metadata"]["name"]

    def delete() -> None:
        try:
            ext.delete_custom_resource_definition(name)
        except client.exceptions.ApiException as e:
            if e.status != 404:
                raise

        def gone() -> bool:
            try:
                ext.read_custom_resource_definition(name)
            except client.exceptions.ApiException as e:
                return bool(e.status == 404)
            return False

        wait_for("the ServiceMonitor CRD gone", gone, 60)

    delete()
    yield ext
    delete()


def _monitors(api_client: Any, ns: str) -> list[str]:
    custom = client.CustomObjectsApi(api_client)
    items = custom.list_namespaced_custom_object("monitoring.coreos.com", "v1", ns, "servicemonitors")["items"]
    return [i["metadata"]["name"] for i in items]


def test_a_service_monitor_follows_its_crd_and_the_mode(
    api_client: Any, cluster_namespace: str, operator: OperatorProcess, no_service_monitor_crd: Any
) -> None:
    ns = cluster_namespace
    names = Names("cpu", ns)
    body = load_example("cpu-only", ns)
    body["spec"]["metrics"] = {"serviceMonitor": {"mode": "Enabled", "labels": {"release": "prometheus"}}}
    apply_cluster(api_client, body)
    core = client.CoreV1Api(api_client)

    def warned() -> list[str] | None:
        events = core.list_namespaced_event(ns).items
        found = [str(e.message) for e in events if e.reason == "ApplyFailed" and "ServiceMonitor" in (e.message or "")]
        return found or None

    messages = wait_for("an ApplyFailed Event about the ServiceMonitor", warned, 60, on_fail=operator.log_tail)
    assert "install the Prometheus Operator's CRDs" in messages[0] and "spec.metrics.serviceMonitor.mode" in messages[0]
    assert total(scrape(operator.metrics_url), "warden_reconcile_step_errors_total", step="ServiceMonitor") >= 1
    # the rest of the cluster is made all the same
    assert client.AppsV1Api(api_client).read_namespaced_deployment(names.exporter, ns)

    def failed_events() -> list[dict[str, Any]]:
        # raw JSON: the client's model refuses the controllers' own Events, which have no eventTime
        raw: Any = client.EventsV1Api(api_client).list_namespaced_event(ns, _preload_content=False)
        return [e for e in json.loads(raw.data)["items"]
                if e["reason"] == "ApplyFailed" and "ServiceMonitor" in e.get("note", "")]  # fmt: skip

    # Retried every 10 s: one structured Event whose series counts the repeats, not one Event each
    repeated = wait_for("the failure's Event counting a repeat",
                        lambda: [e for e in failed_events() if e.get("series", {}).get("count", 0) >= 2] or None, 60,
                        on_fail=operator.log_tail)  # fmt: skip
    no_service_monitor_crd.create_custom_resource_definition(copy.deepcopy(SERVICE_MONITOR_CRD))
    # no spec change: the failed reconcile's retries find the CRD once discovery is asked again (a "not
    # served" is trusted 10 s)
    wait_for("the ServiceMonitor made", lambda: _monitors(api_client, ns) == [names.exporter], 60,
             on_fail=operator.log_tail)  # fmt: skip
    failed = failed_events()
    assert len(failed) == 1 and failed[0]["metadata"]["name"] == repeated[0]["metadata"]["name"], failed
    (event,) = failed
    assert (event["type"], event["action"], event["reportingController"]) == (
        "Warning",
        "Apply",
        "slurm.warden.dev/operator",
    )
    assert (event["regarding"]["kind"], event["regarding"]["name"]) == ("SlurmCluster", "cpu")
    monitor = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
        "monitoring.coreos.com", "v1", ns, "servicemonitors", names.exporter
    )
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    service = core.read_namespaced_service(names.exporter, ns)
    assert monitor["spec"]["selector"]["matchLabels"].items() <= (service.metadata.labels or {}).items()
    assert [p.name for p in service.spec.ports] == ["metrics"]
    assert (service.metadata.annotations or {}).get("prometheus.io/scrape") == "true"

    body["spec"]["metrics"]["serviceMonitor"]["mode"] = "Disabled"
    apply_cluster(api_client, body)
    wait_for("the ServiceMonitor pruned", lambda: _monitors(api_client, ns) == [], 60, on_fail=operator.log_tail)

    body["spec"]["metrics"]["serviceMonitor"]["mode"] = "Auto"
    apply_cluster(api_client, body)
    wait_for("the ServiceMonitor made again (Auto, CRD there)", lambda: _monitors(api_client, ns) == [names.exporter],
             60, on_fail=operator.log_tail)  # fmt: skip
    wait_ready(api_client, ns, "cpu", operator)
    assert get_cluster(api_client, ns, "cpu")["status"]["phase"] == "Ready"
