"""One registry of kinds (``warden.kube.kinds``): the client's paths, pruning, the heal watches and the
chart's RBAC all come from it, so they cannot disagree."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kopf
import yaml

from warden import handlers
from warden.kube import kinds
from warden.kube.client import Kube

CHART = Path(__file__).resolve().parents[2] / "charts" / "slurm-operator" / "templates"


def _triples(rules: list[dict[str, Any]]) -> set[kinds.Rule]:
    return {
        (g, r, v, ",".join(rule.get("resourceNames", [])))
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def _defined_rules(template: str) -> set[kinds.Rule]:
    """The rules a ``define`` of _helpers.tpl holds."""
    text = (CHART / "_helpers.tpl").read_text()
    body = re.search(rf'\{{\{{- define "slurm-operator.{template}" -\}}\}}\n(.*?)\{{\{{- end -\}}\}}', text, re.S)
    assert body is not None, f"no {template} template in _helpers.tpl"
    return _triples(yaml.safe_load(body[1]))


def chart_manager_rules() -> set[kinds.Rule]:
    """The rules of the operator's Role (or ClusterRole): the ``slurm-operator.managerRules`` template."""
    return _defined_rules("managerRules")


def chart_bridge_rules() -> set[kinds.Rule]:
    """The rules of the bridge's ClusterRole (bridge.enabled): the ``slurm-operator.bridgeRules`` template,
    the only rules templates/bridge.yaml grants."""
    bridge = (CHART / "bridge.yaml").read_text()
    assert 'include "slurm-operator.bridgeRules"' in bridge and bridge.count("rules:") == 1
    return _defined_rules("bridgeRules")


def chart_discovery_rules() -> set[kinds.Rule]:
    """The rules of the cluster-wide discovery ClusterRole (rbac.yaml's first document), every
    conditional rule included."""
    first = (CHART / "rbac.yaml").read_text().split("\n---\n")[0]
    plain = "\n".join(line for line in first.splitlines() if "{{" not in line)
    return _triples(yaml.safe_load(plain)["rules"])


def test_the_charts_namespaced_rules_are_the_registrys() -> None:
    chart, registry = chart_manager_rules(), kinds.rbac_rules(namespaced=True)
    assert chart - registry == set(), "the chart grants what no kind of warden.kube.kinds needs"
    assert registry - chart == set(), "warden.kube.kinds needs what the chart does not grant"


def test_the_charts_cluster_wide_rules_are_the_registrys() -> None:
    assert chart_discovery_rules() == kinds.rbac_rules(namespaced=False)


def test_the_charts_bridge_rules_are_the_bridges() -> None:
    chart = chart_bridge_rules()
    assert chart - kinds.BRIDGE_RULES == set(), "the chart grants the bridge what warden.kube.kinds does not list"
    assert kinds.BRIDGE_RULES - chart == set(), "warden.kube.kinds lists for the bridge what the chart does not grant"
    # a scheduler of pods: it binds them and tells them why they wait, and reads no Secret but its token
    assert ("", "pods/binding", "create", "") in chart and ("", "pods/status", "patch", "") in chart
    assert not {r for r in chart if r[1] == "secrets" or "*" in r}


def test_every_watched_kind_can_be_watched_and_every_pruned_one_deleted() -> None:
    for k in kinds.REGISTRY:
        if k.watch:
            assert {"list", "watch"} <= set(k.verbs), k.kind
        if k.pruned:
            assert {"list", "delete"} <= set(k.verbs), k.kind
        if k.watch == "heal":
            assert "get" in k.verbs, k.kind  # a heal reads its owner and applies the child again


def test_the_service_monitor_is_pruned_and_put_back_alike() -> None:
    monitor = kinds.of("monitoring.coreos.com/v1", "ServiceMonitor")
    assert monitor.pruned and monitor.watch == "heal" and monitor.optional


def test_the_generic_heal_handler_watches_exactly_the_healed_kinds() -> None:
    """kopf's registry of this operator's handlers: one ``heal-<plural>`` handler per healed kind."""
    assert handlers.ON_CHANGE  # importing warden.handlers registered its handlers
    registry = kopf.get_default_registry()
    ids = {str(h.id) for h in registry._watching.get_all_handlers()}
    assert {i for i in ids if i.startswith("heal-")} == {f"heal-{k.plural}" for k in kinds.HEALED}


def test_paths_come_from_the_registry() -> None:
    assert Kube.path("v1", "Pod", "hpc", "cpu-worker-0") == "/api/v1/namespaces/hpc/pods/cpu-worker-0"
    assert Kube.path("v1", "Node", "", "n1") == "/api/v1/nodes/n1"
    assert Kube.path("batch/v1", "CronJob", "hpc") == "/apis/batch/v1/namespaces/hpc/cronjobs"
    assert (
        Kube.path("slurm.warden.dev/v1alpha1", "WorkerSet", "hpc", "cpu")
        == "/apis/slurm.warden.dev/v1alpha1/namespaces/hpc/workersets/cpu"
    )


def test_a_kind_not_served_is_asked_about_again_sooner_than_one_that_is(monkeypatch: Any) -> None:
    """API discovery: "served" is trusted a minute, "not served" 10 s (an admin installing the CRD waits)."""
    from warden.kube import client as kube_client

    now = [1000.0]
    monkeypatch.setattr("warden.kube.client.time.monotonic", lambda: now[0])
    served: list[str] = []
    asked: list[str] = []

    class Discovery(Kube):
        def call(self, method: str, path: str, *args: Any, **kwargs: Any) -> Any:
            asked.append(path)
            return {"resources": [{"name": plural} for plural in served]}

    kube = Discovery(None)  # type: ignore[arg-type]
    sm = ("monitoring.coreos.com/v1", "ServiceMonitor")
    assert not kube.serves(*sm) and len(asked) == 1
    now[0] += kube_client.NOT_SERVED_TTL_SECONDS - 1
    assert not kube.serves(*sm) and len(asked) == 1
    served.append("servicemonitors")  # the CRD installed
    now[0] += 2
    assert kube.serves(*sm) and len(asked) == 2
    now[0] += kube_client.DISCOVERY_TTL_SECONDS - 1
    served.clear()
    assert kube.serves(*sm) and len(asked) == 2
    now[0] += 2
    assert not kube.serves(*sm) and len(asked) == 3
