"""Slurm checks a configuration change before any daemon sees it (``warden.configcheck``), against a real
control plane: a generation that changes the Slurm files of a running cluster is applied only once the
check Job for its content succeeded (kwok completes Job pods: the check "passes"); other changes go
through unchecked. Slurm's own verdicts (refusals with its words) are the dataplane tier's
(tests/dataplane/test_config_check.py)."""

from __future__ import annotations

import copy
from typing import Any

from kubernetes import client

from tests.support.operator import OperatorProcess, apply_cluster, get_cluster, load_example, wait_ready
from warden.naming import Names
from warden_dev.controlplane import wait_for

KEY1 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBccccccccccccccccccccccccccccccccccccccccccccccc carol@example"
KEY2 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBdddddddddddddddddddddddddddddddddddddddddddddd dave@example"
CHECK = {"app.kubernetes.io/instance": "cpu", "app.kubernetes.io/component": "config-check"}


def _condition(api: Any, ns: str, type_: str) -> dict[str, Any] | None:
    for c in get_cluster(api, ns, "cpu").get("status", {}).get("conditions", []):
        if c["type"] == type_:
            return dict(c)
    return None


def _check_jobs(api: Any, ns: str) -> list[Any]:
    selector = ",".join(f"{k}={v}" for k, v in CHECK.items())
    return list(client.BatchV1Api(api).list_namespaced_job(ns, label_selector=selector).items)


def test_a_slurm_config_change_waits_for_slurms_check_of_its_content_and_other_changes_do_not(
    api_client: Any, cluster_namespace: str, operator: OperatorProcess
) -> None:
    ns = cluster_namespace
    names = Names(cluster="cpu", namespace=ns)
    core = client.CoreV1Api(api_client)
    body = load_example("cpu-only", ns)
    apply_cluster(api_client, body)
    wait_ready(api_client, ns, "cpu", operator)

    def slurm_conf() -> str:
        return str(core.read_namespaced_config_map(names.slurm_config, ns).data["slurm.conf"])

    def authorized_keys() -> str:
        return str(core.read_namespaced_config_map(names.sshd_config, ns).data["authorized_keys"])

    # No pod may start in the namespace from now on: a check Job could never run.
    quota = client.V1ResourceQuota(metadata=client.V1ObjectMeta(name="no-new-pods"),
                                   spec=client.V1ResourceQuotaSpec(hard={"pods": "0"}))  # fmt: skip
    core.create_namespaced_resource_quota(ns, quota)
    wait_for("the quota to count the pods", lambda: (core.read_namespaced_resource_quota("no-new-pods", ns).status.used
                                                     or {}).get("pods") is not None, 30)  # fmt: skip

    # A change that leaves the Slurm files as they are is applied at once, no check asked.
    changed = copy.deepcopy(body)
    changed["spec"]["login"]["sshAuthorizedKeys"].append(KEY1)
    apply_cluster(api_client, changed)
    wait_for("the new login key applied", lambda: KEY1 in authorized_keys(), 60, on_fail=operator.log_tail)
    assert _check_jobs(api_client, ns) == []

    # A Slurm config change (and a login key with it) waits for Slurm's check of its content: nothing of
    # that generation is applied while the check's pod cannot run.
    changed["spec"]["slurmConfig"] = {"extraLines": ["MaxJobCount=5000"]}
    changed["spec"]["login"]["sshAuthorizedKeys"].append(KEY2)
    apply_cluster(api_client, changed)

    def checking() -> dict[str, Any] | None:
        c = _condition(api_client, ns, "SlurmConfigAccepted")
        return c if c is not None and c["reason"] == "SlurmCheckingConfig" else None

    held = wait_for("SlurmConfigAccepted: SlurmCheckingConfig", checking, 60, on_fail=operator.log_tail)
    assert held["status"] == "False"
    (job,) = _check_jobs(api_client, ns)
    name = job.metadata.name
    assert name.startswith("cpu-config-check-") and name in held["message"]
    (owner,) = job.metadata.owner_references
    assert owner.kind == "SlurmCluster" and owner.name == "cpu"
    assert job.spec.backoff_limit == 0 and job.spec.active_deadline_seconds
    pod = job.spec.template.spec
    assert pod.automount_service_account_token is False and pod.containers[0].command == [
        "/usr/local/bin/warden-config-check"
    ]
    assert "MaxJobCount=5000" in core.read_namespaced_config_map(name, ns).data["slurm.conf"]
    ready = _condition(api_client, ns, "Ready")
    assert ready is not None and ready["reason"] == "Waiting" and name in ready["message"]
    # held: the pods' files and the rest of the generation are as before
    assert "MaxJobCount=5000" not in slurm_conf()
    assert KEY2 not in authorized_keys()

    # The check can run: it succeeds (kwok), and the whole generation is applied. (Its Job, deleted, is made
    # again at once: the Job controller's own retries of the refused pod back off for longer and longer.)
    core.delete_namespaced_resource_quota("no-new-pods", ns)
    wait_for("the quota gone", lambda: not core.list_namespaced_resource_quota(ns).items, 30)
    client.BatchV1Api(api_client).delete_namespaced_job(name, ns, propagation_policy="Background")
    wait_for("the checked change applied", lambda: "MaxJobCount=5000" in slurm_conf(), 120, on_fail=operator.log_tail)
    assert KEY2 in authorized_keys()
    wait_for("SlurmConfigAccepted True",
             lambda: (_condition(api_client, ns, "SlurmConfigAccepted") or {}).get("status") == "True", 60,
             on_fail=operator.log_tail)  # fmt: skip
    wait_for("the check's Job and ConfigMap pruned", lambda: not _check_jobs(api_client, ns) and not [
        c for c in core.list_namespaced_config_map(ns).items if c.metadata.name == name], 60)  # fmt: skip
    wait_ready(api_client, ns, "cpu", operator)
