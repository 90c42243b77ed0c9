"""Limits that hold (docs/operations.md, "Accounting"): with accounting on, slurmctld enforces associations,
limits and QoS (spec.accounting.enforce), and each namespace opted in to the bridge is a Slurm account of its
own that its pods' placeholder jobs are charged to: the bridge lists the namespaces in a ConfigMap only it
may write, the controller pod makes the accounts from it (images/controller/entrypoint.sh)."""

from __future__ import annotations

import copy
from typing import Any, cast

import pytest
from pydantic import ValidationError

from tests.cases.malformed import SHARED_RESOURCES
from tests.unit.test_bridge_workloads import pod
from warden import naming
from warden.bridge.controller import Bridge, Settings
from warden.bridge.plan import Refused, Submit, plan
from warden.bridge.translate import Defaults, job_description
from warden.bridge.workloads import Workload
from warden.kube.client import Kube
from warden.model import API_GROUP, API_VERSION, parse_spec
from warden.render.cluster import render
from warden.render.config import slurm_conf
from warden.render.context import Cluster, ServiceAccountRef

BRIDGE_SA = ServiceAccountRef(namespace="warden", name="warden-slurm-operator-bridge")
NOW = 1_800_000_000.0


def _spec(accounting: dict[str, Any] | None = None, bridge: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"workerGroups": [{"name": "cpu", "resources": copy.deepcopy(SHARED_RESOURCES)}]}
    if accounting is not None:
        spec["accounting"] = accounting
    if bridge:
        spec["bridge"] = {"enabled": True, "workerGroups": ["cpu"]}
    return spec


def _cluster(spec: dict[str, Any]) -> Cluster:
    return Cluster(name="demo", namespace="hpc", spec=parse_spec(spec), bridge_account=BRIDGE_SA)


def _enforce_lines(spec: dict[str, Any]) -> list[str]:
    return [line for line in slurm_conf(_cluster(spec)).splitlines() if line.startswith("AccountingStorageEnforce")]


# --- AccountingStorageEnforce ------------------------------------------------------------------------------


def test_with_accounting_slurm_enforces_associations_limits_and_qos_by_default() -> None:
    assert _enforce_lines(_spec({"mode": "InCluster"})) == ["AccountingStorageEnforce=associations,limits,qos"]
    external = {"mode": "External", "external": {"host": "db", "passwordSecretRef": {"name": "db", "key": "pw"}}}
    assert _enforce_lines(_spec(external)) == ["AccountingStorageEnforce=associations,limits,qos"]


def test_an_admin_may_choose_what_is_enforced_or_nothing_and_without_accounting_nothing_is() -> None:
    chosen = _spec({"mode": "InCluster", "enforce": ["associations", "safe"]})
    assert _enforce_lines(chosen) == ["AccountingStorageEnforce=associations,safe"]
    assert _enforce_lines(_spec({"mode": "InCluster", "enforce": []})) == []
    assert _enforce_lines(_spec({"mode": "Disabled"})) == []
    assert _enforce_lines(_spec(None)) == []


def test_enforce_takes_slurms_words_only_and_extra_lines_may_not_set_it() -> None:
    with pytest.raises(ValidationError, match="enforce"):
        parse_spec(_spec({"mode": "InCluster", "enforce": ["everything"]}))
    with pytest.raises(ValidationError, match=r"AccountingStorageEnforce is set by Warden; .*spec.accounting.enforce"):
        parse_spec({**_spec(None), "slurmConfig": {"extraLines": ["AccountingStorageEnforce=none"]}})


# --- the bridge's accounts: what is rendered ---------------------------------------------------------------


def _objects(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in render(_cluster(spec)).objects}


def _controller(objs: dict[str, dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    pod_spec = objs["StatefulSet/demo-controller"]["spec"]["template"]["spec"]
    ctld = next(c for c in pod_spec["containers"] if c["name"] == "slurmctld")
    return ctld, pod_spec["volumes"]


def test_with_accounting_the_bridge_may_write_only_its_namespaces_configmap_which_the_controller_reads() -> None:
    objs = _objects(_spec({"mode": "InCluster"}))
    listed = objs["ConfigMap/demo-bridge-accounts"]
    assert "data" not in listed, "the data is the bridge's: the operator's apply must not own (and wipe) it"
    rules = objs["Role/demo-bridge"]["rules"]
    assert {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["demo-bridge-accounts"],
            "verbs": ["get", "patch"]} in rules  # fmt: skip
    assert [r["resources"] for r in rules] == [["secrets"], ["configmaps"]]
    assert all(r.get("resourceNames") for r in rules), "named objects only"
    ctld, volumes = _controller(objs)
    env = {e["name"]: e.get("value") for e in ctld["env"]}
    assert env["WARDEN_BRIDGE_ACCOUNTS"] == f"{naming.BRIDGE_ACCOUNTS_DIR}/{naming.BRIDGE_ACCOUNTS_KEY}"
    mount = next(m for m in ctld["volumeMounts"] if m["mountPath"] == naming.BRIDGE_ACCOUNTS_DIR)
    volume = next(v for v in volumes if v["name"] == mount["name"])
    assert mount.get("readOnly") is True
    assert volume["configMap"] == {"name": "demo-bridge-accounts", "defaultMode": 0o444, "optional": True}


@pytest.mark.parametrize("spec", [_spec({"mode": "Disabled"}), _spec({"mode": "InCluster"}, bridge=False)])
def test_without_accounting_or_without_the_bridge_there_are_no_bridge_accounts(spec: dict[str, Any]) -> None:
    objs = _objects(spec)
    assert "ConfigMap/demo-bridge-accounts" not in objs
    ctld, volumes = _controller(objs)
    assert "WARDEN_BRIDGE_ACCOUNTS" not in {e["name"] for e in ctld["env"]}
    assert not [v for v in volumes if v.get("configMap", {}).get("name") == "demo-bridge-accounts"]
    role = objs.get("Role/demo-bridge")
    assert role is None or [r["resources"] for r in role["rules"]] == [["secrets"]]


# --- the bridge's accounts: the jobs ------------------------------------------------------------------------


def _workload(namespace: str) -> Workload:
    p = pod("a")
    p = type(p)(**{**p.__dict__, "namespace": namespace})
    return Workload("Pod", namespace, p.name, p.uid, 1, (p,))


def test_a_namespaces_placeholders_are_charged_to_its_own_account_where_the_cluster_has_accounting() -> None:
    on = job_description(_workload("team-a"), Defaults("k8s", accounts=True), {})
    other = job_description(_workload("team-b"), Defaults("k8s", accounts=True), {})
    off = job_description(_workload("team-a"), Defaults("k8s"), {})
    assert isinstance(on, dict) and isinstance(other, dict) and isinstance(off, dict)
    assert (on["account"], other["account"]) == ("k8s-team-a", "k8s-team-b")
    assert "account" not in off, "without accounting Slurm's default"


def test_a_job_refused_for_its_account_is_tried_again_within_seconds_other_refusals_after_a_minute() -> None:
    """A namespace just opted in has no account for the few seconds the controller takes to make it."""
    w = _workload("team")
    pods = frozenset({"uid-a"})

    def after(seconds: float, message: str) -> list[Any]:
        refused = {w.uid: Refused(NOW - seconds, message, pods)}
        nowhere: dict[str, str] = {}
        return plan([w], [], "warden-bridge", Defaults("k8s", accounts=True), {}, nowhere.get, refused, NOW)

    account = "Slurm refused the job: Invalid account or account/partition combination specified"
    [waits] = after(5, account)
    assert not isinstance(waits, Submit) and account in getattr(waits, "message", "")
    assert isinstance(after(11, account)[0], Submit)
    assert not isinstance(after(11, "Slurm refused the job: Invalid qos specification")[0], Submit)
    assert isinstance(after(61, "Slurm refused the job: Invalid qos specification")[0], Submit)


# --- the bridge's accounts: the bridge lists its namespaces -------------------------------------------------


class FakeApi:
    """The API server's answers the bridge's cluster read needs; every write recorded."""

    def __init__(self, clusters: list[dict[str, Any]], namespaces: dict[str, str]) -> None:
        self.clusters = clusters
        self.namespaces = namespaces  # name -> the bridge label's value
        self.writes: list[tuple[str, str, Any]] = []
        self.refuse: int | None = None

    def call(self, method: str, path: str, query: Any = None, body: Any = None, **_: Any) -> dict[str, Any]:
        if method == "GET" and path == f"/apis/{API_GROUP}/{API_VERSION}/slurmclusters":
            return {"items": self.clusters}
        if method == "GET" and path == "/api/v1/namespaces":
            return {"items": [{"metadata": {"name": n, "labels": {naming.BRIDGE_NAMESPACE_LABEL: v}}}
                              for n, v in self.namespaces.items()]}  # fmt: skip
        if self.refuse is not None:
            from kubernetes.client.exceptions import ApiException

            raise ApiException(status=self.refuse, reason="Forbidden")
        self.writes.append((method, path, body))
        return {}


def _bridge(api: FakeApi) -> Bridge:
    fake = cast(Kube, type("K", (), {"call": api.call, "stream_lines": None, "fanout": None})())
    return Bridge(fake, Settings())


def _cluster_object(namespace: str, name: str, mode: str) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name},
            "spec": {"bridge": {"enabled": True}, "accounting": {"mode": mode}}}  # fmt: skip


def test_the_bridge_lists_the_namespaces_of_each_cluster_with_accounting_once_per_change() -> None:
    api = FakeApi([_cluster_object("hpc", "a", "InCluster"), _cluster_object("hpc", "b", "Disabled")],
                  {"team-2": "hpc.a", "team-1": "hpc.a", "other": "hpc.b"})  # fmt: skip
    bridge = _bridge(api)
    bridge._read_clusters()
    path = "/api/v1/namespaces/hpc/configmaps/a-bridge-accounts"
    assert api.writes == [("PATCH", path, {"data": {naming.BRIDGE_ACCOUNTS_KEY: "team-1\nteam-2\n"}})]
    assert [t.defaults.accounts for t in bridge.targets] == [True, False]
    bridge._read_clusters()
    assert len(api.writes) == 1, "unchanged: not written again"
    del api.namespaces["team-2"]
    bridge._read_clusters()
    assert api.writes[-1] == ("PATCH", path, {"data": {naming.BRIDGE_ACCOUNTS_KEY: "team-1\n"}})


def test_a_list_not_written_is_tried_again_at_the_next_read() -> None:
    api = FakeApi([_cluster_object("hpc", "a", "InCluster")], {"team": "hpc.a"})
    bridge = _bridge(api)
    api.refuse = 404  # an operator that has not made the ConfigMap yet
    bridge._read_clusters()
    assert api.writes == []
    api.refuse = None
    bridge._read_clusters()
    assert api.writes == [("PATCH", "/api/v1/namespaces/hpc/configmaps/a-bridge-accounts",
                           {"data": {naming.BRIDGE_ACCOUNTS_KEY: "team\n"}})]  # fmt: skip


def test_the_bridges_list_is_no_drift_for_the_operator_to_put_back_a_persons_edit_is() -> None:
    """The operator reconciles a cluster whose child someone else changed; the bridge writing its namespaces
    into the ConfigMap the operator made for it is not such a change (no reconcile at each opt-in)."""
    from warden.handlers import drifted

    def fields(*writers: tuple[str, str]) -> Any:  # kopf.Meta: the object's metadata
        return {"managedFields": [{"manager": m, "operation": "Update", "time": t} for m, t in writers]}

    made = ("warden", "2026-11-29T10:00:00Z")
    assert not drifted("MODIFIED", fields(made, (naming.BRIDGE_FIELD_MANAGER, "2026-11-29T10:00:05Z")))
    assert drifted("MODIFIED", fields(made, ("kubectl-edit", "2026-11-29T10:00:05Z")))
    assert drifted("DELETED", fields(made))
