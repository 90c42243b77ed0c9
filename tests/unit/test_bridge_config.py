"""The cluster side of the bridge (spec.bridge): what the spec accepts and refuses, the partition slurm.conf
gets, the Slurm user and token the bridge acts with, and the Role that lets the bridge read that token.
The chart's bridge Deployment and ClusterRole: tests/unit/test_kube_kinds.py (rules) and
tests/integration/test_charts.py (rendered by helm)."""

from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tests.cases.malformed import SHARED_RESOURCES
from warden import naming, tokens
from warden.crd import crd
from warden.main import service_account
from warden.model import BRIDGE_CEL_RULES, parse_spec
from warden.reconcile import validation_message
from warden.render.cluster import render
from warden.render.config import job_submit_lua, slurm_conf
from warden.render.context import Cluster, ServiceAccountRef
from warden.slurm.rest import token_claims

ROOT = Path(__file__).resolve().parents[2]
KEY = b"k" * 32
NOW = 1_800_000_000.0
BRIDGE_ACCOUNT = ServiceAccountRef(namespace="warden", name="warden-slurm-operator-bridge")


def _spec(bridge: dict[str, Any] | None = None, **changes: Any) -> dict[str, Any]:
    """Groups cpu (room for pods beside its workers) and gpu, a bridge on cpu unless ``bridge`` says otherwise."""
    spec: dict[str, Any] = {
        "workerGroups": [{"name": "cpu", "resources": copy.deepcopy(SHARED_RESOURCES)}, {"name": "gpu"}],
        "bridge": {"enabled": True, "workerGroups": ["cpu"]} if bridge is None else bridge,
    }
    spec.update(changes)
    return spec


def _cluster(spec: dict[str, Any], account: ServiceAccountRef | None = BRIDGE_ACCOUNT) -> Cluster:
    return Cluster(name="demo", namespace="hpc", spec=parse_spec(spec), bridge_account=account)


def _refusal(spec: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as err:
        parse_spec(spec)
    return validation_message(err.value)


# --- spec ----------------------------------------------------------------------------------------------


def test_the_bridge_is_off_unless_asked_for_and_its_defaults_are_the_documented_ones() -> None:
    assert parse_spec({"workerGroups": [{"name": "cpu"}]}).bridge is None
    off = parse_spec({"workerGroups": [{"name": "cpu"}], "bridge": {}})
    assert off.bridge is not None and off.active_bridge is None
    assert off.bridge.model_dump(by_alias=True) == {
        "enabled": False, "partition": "k8s", "workerGroups": [], "qos": "", "schedulerName": "warden-slurm",
    }  # fmt: skip
    on = parse_spec(_spec())
    assert on.active_bridge is not None and on.active_bridge.worker_groups == ["cpu"]


def test_a_disabled_bridge_is_kept_unchecked_until_it_is_enabled() -> None:
    """A bridge switched off may name what would not do when on: nothing of it reaches Slurm."""
    parse_spec(_spec({"enabled": False, "workerGroups": ["gpu"], "partition": "main"}, slurmVersion="24.11"))


REFUSALS = [
    # (spec, the field named at the head of the message, words of the fix)
    (_spec(slurmVersion="24.11"), "spec.bridge:", ["24.11 has no external jobs", "set slurmVersion 26.05"]),
    (_spec({"enabled": True}), "spec.bridge.workerGroups:", ["at least one worker group", "workerGroups: [cpu]"]),
    (_spec({"enabled": True, "workerGroups": ["cpu", "cpu"]}), "spec.bridge.workerGroups:", ["name each", "once"]),
    (
        _spec({"enabled": True, "workerGroups": ["tpu"]}),
        "spec.bridge.workerGroups:",
        ["'tpu' is not a group in spec.workerGroups", "name one of cpu, gpu"],
    ),
    (
        _spec({"enabled": True, "workerGroups": ["gpu"]}),
        "spec.workerGroups[1].resources:",
        ["group 'gpu' shares its Slurm nodes", "no resources.limits.cpu", "beside the worker pod",
         "set resources.requests.cpu and .memory below"],
    ),
    (
        _spec(workerGroups=[{"name": "cpu", "resources": {"limits": {"cpu": "2", "memory": "4Gi"}}}]),
        "spec.workerGroups[0].resources:",
        ["no resources.requests.cpu", "unset requests default to the limits"],
    ),
    (
        _spec(workerGroups=[{"name": "cpu", "resources": {"requests": {"cpu": "1", "memory": "4Gi"},
                                                          "limits": {"cpu": "2", "memory": "4Gi"}}}]),
        "spec.workerGroups[0].resources:",
        ["resources.requests.memory 4Gi is not below resources.limits.memory 4Gi", "leave room"],
    ),
    (
        _spec({"enabled": True, "workerGroups": ["cpu"], "partition": "main"}),
        "spec.bridge.partition:",
        ["'main' is already the default partition", "a name of its own"],
    ),
    (
        _spec({"enabled": True, "workerGroups": ["cpu"], "partition": "batch"},
              partitions=[{"name": "batch", "workerGroups": ["cpu", "gpu"]}]),
        "spec.bridge.partition:",
        ["'batch' is already a partition in spec.partitions", "a name of its own"],
    ),
    (
        _spec({"enabled": True, "workerGroups": ["cpu"], "partition": "Default"}),
        "spec.bridge.partition:",
        ["Slurm's keyword", "choose another"],
    ),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "field", "fix"), REFUSALS, ids=[r[1] + r[2][0] for r in REFUSALS])
def test_a_bridge_that_cannot_work_is_refused_naming_the_field_and_the_fix(
    spec: dict[str, Any], field: str, fix: list[str]
) -> None:
    message = _refusal(spec)
    assert message.startswith(field), message
    for words in fix:
        assert words in message, message


def test_the_api_server_checks_what_the_operator_checks() -> None:
    """Each cross-field check has its CEL twin in the CRD (run by the API server: tests/integration/
    test_admission.py, with the bridge cases of tests/cases/malformed.py)."""
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rules = schema["x-kubernetes-validations"]
    for rule in BRIDGE_CEL_RULES:
        assert rule in rules
    by_field = {r["fieldPath"]: r for r in BRIDGE_CEL_RULES}
    assert "self.slurmVersion != '24.11'" in by_field[".bridge"]["rule"]
    assert "set slurmVersion 26.05" in by_field[".bridge"]["message"]
    assert "self.bridge.partition != 'main'" in by_field[".bridge.partition"]["rule"]
    shared = [r["rule"] for r in BRIDGE_CEL_RULES if r["fieldPath"] == ".bridge.workerGroups"]
    assert any("self.workerGroups.exists(g, g.name == w)" in r for r in shared)
    assert any("compareTo(quantity(string(g.resources.limits[r]))) < 0" in r for r in shared)
    bridge = schema["properties"]["bridge"]
    assert [r["fieldPath"] for r in bridge["x-kubernetes-validations"]] == [".workerGroups", ".partition"]
    assert bridge["properties"]["workerGroups"]["x-kubernetes-list-type"] == "set"


# --- slurm.conf ----------------------------------------------------------------------------------------


def _partition_lines(cluster: Cluster) -> list[str]:
    return [line for line in slurm_conf(cluster).splitlines() if line.startswith("PartitionName=")]


def test_slurm_conf_gets_the_bridges_partition_of_its_groups_nodesets() -> None:
    assert _partition_lines(_cluster(_spec())) == [
        "PartitionName=main Nodes=ns_cpu,ns_gpu Default=YES MaxTime=UNLIMITED State=UP",
        "PartitionName=k8s Nodes=ns_cpu Default=NO MaxTime=UNLIMITED State=UP",
    ]
    two = _spec({"enabled": True, "workerGroups": ["cpu", "gpu-a"], "partition": "pods"},
                workerGroups=[{"name": "cpu", "resources": SHARED_RESOURCES},
                              {"name": "gpu-a", "resources": SHARED_RESOURCES}])  # fmt: skip
    assert _partition_lines(_cluster(two))[-1] == "PartitionName=pods Nodes=ns_cpu,ns_gpu_a Default=NO" \
        " MaxTime=UNLIMITED State=UP"  # fmt: skip


def test_job_submit_lua_keeps_the_bridges_partition_to_the_bridge() -> None:
    """The partition (no time limit of its own, tenants' pods on its nodes) takes the bridge's placeholders;
    root and SlurmUser may, nobody else (the real slurmctld runs it: tests/dataplane/test_bridge_slurm.py)."""
    script = job_submit_lua(_cluster(_spec(bridge={"enabled": True, "workerGroups": ["cpu"], "partition": "pods"})))
    assert 'local BRIDGE_PARTITION = "pods"\n' in script and "local SLURM_UID = 64030\n" in script
    assert script.count("if outside_bridge(") == 2  # submissions and changes
    assert 'local BRIDGE_PARTITION = ""\n' in job_submit_lua(_cluster(_spec(bridge={"enabled": False})))


def test_without_an_enabled_bridge_slurm_conf_is_what_it_was() -> None:
    without_flag = _cluster(_spec(), account=None)
    plain = Cluster(name="demo", namespace="hpc", spec=parse_spec({"workerGroups": _spec()["workerGroups"]}))
    off = _cluster(_spec({"enabled": False, "workerGroups": ["cpu"]}))
    assert slurm_conf(off) == slurm_conf(plain)
    assert [line for line in slurm_conf(without_flag).splitlines() if "k8s" in line]
    assert not [line for line in slurm_conf(plain).splitlines() if "k8s" in line]


# --- the Slurm user and its token -----------------------------------------------------------------------


def test_the_bridge_acts_as_warden_bridge_whom_only_slurmctld_knows() -> None:
    assert (naming.BRIDGE_USER, naming.BRIDGE_UID) == ("warden-bridge", 64998)
    assert naming.BRIDGE_UID != naming.READER_UID
    dockerfile = (ROOT / "images" / "controller" / "Dockerfile").read_text()
    assert f"--uid {naming.BRIDGE_UID} " in dockerfile and f"nologin {naming.BRIDGE_USER}\n" in dockerfile
    for image in ("worker", "login"):  # no node knows the user: no job step can ever run as it
        assert naming.BRIDGE_USER not in (ROOT / "images" / image / "Dockerfile").read_text()


def test_an_enabled_bridge_gets_a_token_of_its_own_that_no_pod_mounts() -> None:
    cluster = _cluster(_spec())
    assert tokens.wanted(cluster) == (tokens.EXPORTER, tokens.READ_GATE, tokens.BRIDGE)
    assert tokens.BRIDGE.user == naming.BRIDGE_USER and tokens.BRIDGE.mounted_by == ()
    assert tokens.wanted(_cluster(_spec(metrics={"enabled": False}))) == (tokens.BRIDGE,)
    assert tokens.BRIDGE not in tokens.wanted(_cluster(_spec({"enabled": False})))
    token = tokens.mint(KEY, tokens.BRIDGE, NOW)
    secret = tokens.token_secret(cluster, tokens.BRIDGE, token)
    assert secret["metadata"]["name"] == cluster.names.bridge_token_secret == "demo-bridge-token"
    assert secret["metadata"]["namespace"] == "hpc"
    assert tokens.held_token(secret) == token
    assert token_claims(token, KEY) == {
        "iat": int(NOW), "exp": int(NOW) + tokens.LIFETIME_S, "sun": "warden-bridge"
    }  # fmt: skip
    for obj in render(cluster).objects:
        pod = (obj.get("spec") or {}).get("template", {}).get("spec") or {}
        secrets = {v["secret"]["secretName"] for v in pod.get("volumes", []) if "secret" in v}
        assert cluster.names.bridge_token_secret not in secrets, obj["metadata"]["name"]


# --- the Role that lets the bridge read its token -------------------------------------------------------


def _rbac(cluster: Cluster) -> list[dict[str, Any]]:
    return [
        o for o in render(cluster).objects if o["kind"] in ("Role", "RoleBinding") and "bridge" in o["metadata"]["name"]
    ]


def test_the_bridges_service_account_may_get_exactly_the_bridge_token() -> None:
    role, binding = _rbac(_cluster(_spec()))
    assert role["kind"] == "Role" and role["metadata"]["name"] == "demo-bridge"
    assert role["metadata"]["namespace"] == "hpc"
    assert role["metadata"]["labels"]["app.kubernetes.io/component"] == "bridge"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["demo-bridge-token"], "verbs": ["get"]}
    ]
    assert binding["kind"] == "RoleBinding" and binding["metadata"] == {**role["metadata"]}
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "demo-bridge"}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "warden-slurm-operator-bridge", "namespace": "warden"}
    ]


def test_no_role_without_an_enabled_bridge_or_without_the_operators_flag() -> None:
    assert _rbac(_cluster(_spec({"enabled": False, "workerGroups": ["cpu"]}))) == []
    assert _rbac(_cluster(_spec(), account=None)) == []
    assert _rbac(Cluster(name="demo", namespace="hpc", spec=parse_spec({"workerGroups": [{"name": "cpu"}]}),
                         bridge_account=BRIDGE_ACCOUNT)) == []  # fmt: skip


def test_the_operator_flag_names_the_bridges_service_account() -> None:
    assert service_account("warden/warden-slurm-operator-bridge") == BRIDGE_ACCOUNT
    assert str(BRIDGE_ACCOUNT) == "warden/warden-slurm-operator-bridge"
    for bad in ("warden-slurm-operator-bridge", "Warden/bridge", "warden/", "/bridge", "warden/a b"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"bridge|ServiceAccount"):
            service_account(bad)


def test_a_cluster_enabling_the_bridge_without_the_flag_is_told_once_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from warden import reconcile

    cluster = _cluster(_spec(), account=None)
    reconcile._TOLD_NO_BRIDGE_ACCOUNT.discard(("hpc", "demo"))
    with caplog.at_level("WARNING", logger="warden.reconcile"):
        reconcile.tell_no_bridge_account(cluster)
        reconcile.tell_no_bridge_account(cluster)
        reconcile.tell_no_bridge_account(_cluster(_spec()))
    told = [r.getMessage() for r in caplog.records if "--bridge-service-account" in r.getMessage()]
    assert len(told) == 1 and "hpc/demo" in told[0] and "demo-bridge-token" in told[0], told
