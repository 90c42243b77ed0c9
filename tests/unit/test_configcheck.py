"""Slurm checks a configuration change before any daemon sees it (``warden.configcheck``): which change is
checked, the check's Job and ConfigMap, what its Job's state says, how status shows it, and that its pods
reach nothing."""

from __future__ import annotations

from typing import Any

from tests.support.netpol import Endpoint, allowed
from warden import naming
from warden.configcheck.render import (
    CHECK_SECONDS,
    COMMAND,
    FIRST,
    UNCHANGED,
    Verdict,
    check_hash,
    check_name,
    config_map,
    fold,
    job,
    needs_no_check,
)
from warden.model import parse_spec
from warden.render.cluster import render
from warden.render.context import Cluster
from warden.render.pods import Manifest
from warden.status import CONFIG_CONDITION, Observed, Workload
from warden.status import fold as fold_status

SPEC: dict[str, Any] = {
    "workerGroups": [{"name": "cpu", "replicas": 2}],
    "images": {"pullSecrets": ["regcred"]},
}


def _cluster(spec: dict[str, Any] | None = None) -> Cluster:
    return Cluster("demo", "hpc", parse_spec(spec or SPEC))


def _files(cluster: Cluster) -> dict[str, str]:
    objects = render(cluster).objects
    cm = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == cluster.names.slurm_config)
    return dict(cm["data"])


def _controller_pod(cluster: Cluster) -> Manifest:
    objects = render(cluster).objects
    sts = next(o for o in objects if o["kind"] == "StatefulSet" and o["metadata"]["name"] == cluster.names.controller)
    spec: Manifest = sts["spec"]["template"]["spec"]
    return spec


# --- which change is checked ----------------------------------------------------------------------


def test_a_changed_slurm_file_of_a_running_cluster_is_checked_and_nothing_else_is() -> None:
    files = _files(_cluster())
    live = {"data": dict(files)}
    assert needs_no_check(files, live, True) == UNCHANGED  # the same files: applied as they are
    assert needs_no_check(files, None, False) == FIRST  # a new cluster: no daemon runs them yet
    changed = _files(_cluster({**SPEC, "slurmConfig": {"extraLines": ["DefMemPerCPU=lots"]}}))
    assert needs_no_check(changed, live, True) is None  # slurm.conf differs: Slurm checks it first
    # the ConfigMap of a running cluster deleted: its pods still hold the last files, so new ones are checked
    assert needs_no_check(changed, None, True) is None
    # a change outside Slurm's files (login keys, worker resources) renders the same Slurm files
    other = _files(_cluster({**SPEC, "login": {"sshAuthorizedKeys": ["ssh-ed25519 AAAAC3Nza demo"]}}))
    other_groups = _files(_cluster({**SPEC, "workerGroups": [{"name": "cpu", "replicas": 5}]}))
    assert needs_no_check(other, live, True) == UNCHANGED
    assert needs_no_check(other_groups, live, True) == UNCHANGED


def test_the_check_answers_for_its_content_and_image() -> None:
    files = _files(_cluster())
    h = check_hash(files, "warden/controller:1")
    assert h == check_hash(dict(reversed(list(files.items()))), "warden/controller:1")
    assert h != check_hash({**files, "slurm.conf": files["slurm.conf"] + "X=1\n"}, "warden/controller:1")
    assert h != check_hash(files, "warden/controller:1-slurm24.11")  # another series reads it
    assert check_name(_cluster(), h) == f"demo-config-check-{h}"


# --- the check's objects --------------------------------------------------------------------------


def test_the_check_job_runs_slurmctld_of_the_controller_image_on_the_candidate_files_alone() -> None:
    cluster = _cluster()
    files = _files(cluster)
    digest = check_hash(files, cluster.image("controller"))
    cm = config_map(cluster, files, digest)
    assert cm["metadata"]["name"] == f"demo-config-check-{digest}" and cm["data"] == files
    j = job(cluster, digest, _controller_pod(cluster))
    assert j["metadata"]["name"] == cm["metadata"]["name"]
    spec = j["spec"]
    assert spec["backoffLimit"] == 0 and 0 < spec["activeDeadlineSeconds"] <= 600
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    # placed and pulled as the controller is
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    (container,) = pod["containers"]
    assert container["image"] == cluster.image("controller")
    assert container["command"] == [COMMAND]
    assert container["terminationMessagePath"] == naming.TERMINATION_LOG
    assert {"name": "WARDEN_CHECK_SECONDS", "value": str(CHECK_SECONDS)} in container["env"]
    # the candidate files and nothing else: no key, no jail, no state
    assert pod["volumes"] == [
        {"name": "candidate", "configMap": {"name": cm["metadata"]["name"], "defaultMode": 0o444}}
    ]
    assert container["volumeMounts"] == [{"name": "candidate", "mountPath": naming.SLURM_CONFIG_DIR, "readOnly": True}]


def test_the_check_pods_reach_nothing_and_nothing_reaches_them() -> None:
    cluster = _cluster()
    policies = [o for o in render(cluster).objects if o["kind"] == "NetworkPolicy"]
    labels = job(cluster, "abcd1234")["spec"]["template"]["metadata"]["labels"]
    ns = {"kubernetes.io/metadata.name": "hpc"}
    check = Endpoint("10.244.1.50", "hpc", labels, ns)
    controller = Endpoint("10.244.1.10", "hpc", cluster.names.labels("controller"), ns)
    worker = Endpoint("10.244.1.11", "hpc", cluster.names.labels("worker"), ns)
    dns = Endpoint("10.244.0.3", "kube-system", {"k8s-app": "kube-dns"}, {"kubernetes.io/metadata.name": "kube-system"})
    for other, port in (
        (controller, 6817),
        (worker, 6818),
        (Endpoint("172.18.0.2"), 6443),
        (Endpoint("203.0.113.7"), 443),
    ):
        assert not allowed(policies, check, other, port)
        assert not allowed(policies, other, check, 16817)
    assert not allowed(policies, check, dns, 53, "UDP")


# --- what the Job's state says --------------------------------------------------------------------


def _job(*conditions: tuple[str, str], **status: Any) -> Manifest:
    return {"status": {"conditions": [{"type": t, "status": "True", "reason": r} for t, r in conditions], **status}}


def _pod(state: Manifest) -> Manifest:
    return {
        "metadata": {"name": "demo-config-check-1-x"},
        "status": {"containerStatuses": [{"name": "config-check", "state": state}]},
    }


WORDS = (
    "slurm-wlm 26.05.5 refused the configuration (exit 1):\nerror: DefMemPerCPU value (lots) is not a valid number\n"
    "fatal: Unable to process configuration file"
)


def test_a_job_not_made_or_running_holds_the_change_and_is_looked_at_again() -> None:
    for j, pods in ((None, []), (_job(), []), (_job(), [_pod({"running": {}})])):
        v = fold("c", j, pods)
        assert v.state == "Checking" and v.holds and not v.final


def test_a_succeeded_job_lets_the_change_through() -> None:
    v = fold("c", _job(("Complete", ""), succeeded=1), [])
    assert v.state == "Accepted" and not v.holds


def test_a_refusal_carries_slurms_words_from_the_termination_message() -> None:
    ended = _pod({"terminated": {"exitCode": 1, "reason": "Error", "message": WORDS}})
    v = fold("c", _job(("Failed", "BackoffLimitExceeded"), failed=1), [ended])
    assert v == Verdict("Refused", WORDS, "c", True)
    assert v.holds and v.final


def test_a_check_that_could_not_answer_is_not_a_refusal_and_holds_the_change() -> None:
    deadline = fold("c", _job(("Failed", "DeadlineExceeded")), [])
    assert deadline.state == "CannotCheck" and deadline.holds and deadline.final
    assert "DeadlineExceeded" in deadline.message
    killed = fold("c", _job(("Failed", "BackoffLimitExceeded"), failed=1),
                  [_pod({"terminated": {"exitCode": 137, "reason": "OOMKilled"}})])  # fmt: skip
    assert killed.state == "CannotCheck" and "OOMKilled" in killed.message


def test_a_check_whose_image_cannot_be_pulled_says_so_and_holds_the_change() -> None:
    pulling = _pod({"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "x"'}})
    v = fold("c", _job(), [pulling])
    assert v.state == "CannotCheck" and v.holds and not v.final  # still looked at: it may yet pull
    assert "ImagePullBackOff" in v.message and 'pulling image "x"' in v.message


# --- status ---------------------------------------------------------------------------------------


def _ready() -> Observed:
    return Observed(controller=Workload(True, 1, 1), restapi=Workload(True, 1, 1), login=Workload(True, 1, 1),
                    workers={"cpu": Workload(True, 2, 2)}, jail_populated=True)  # fmt: skip


def _conditions(observed: Observed, previous: Any = None, waiting: list[str] | None = None) -> Any:
    return fold_status(parse_spec(SPEC), 2, observed, previous, "2026-11-29T00:00:00Z", [], waiting or [])


def test_a_refusal_is_a_condition_with_slurms_words_and_holds_ready_back() -> None:
    refused = Verdict("Refused", WORDS, "demo-config-check-1", True)
    status = _conditions(Observed(**{**_ready().__dict__, "config_check": refused}))
    c = {c.type: c for c in status.conditions}
    assert c[CONFIG_CONDITION].status == "False" and c[CONFIG_CONDITION].reason == "SlurmRefusedConfig"
    assert "DefMemPerCPU value (lots) is not a valid number" in c[CONFIG_CONDITION].message
    assert "demo-config-check-1" in c[CONFIG_CONDITION].message
    assert c["Ready"].status == "False" and c["Ready"].reason == "SlurmRefusedConfig"
    # a refresh that asked nothing (a child changed) keeps it
    again = _conditions(_ready(), previous=status)
    assert {c.type: c for c in again.conditions}[CONFIG_CONDITION] == c[CONFIG_CONDITION]
    # the fix, accepted: True, and Ready follows the cluster again
    fixed = _conditions(Observed(**{**_ready().__dict__, "config_check": UNCHANGED}), previous=status)
    f = {c.type: c for c in fixed.conditions}
    assert f[CONFIG_CONDITION].status == "True" and f[CONFIG_CONDITION].reason == "SlurmAcceptedConfig"
    assert f["Ready"].reason != "SlurmRefusedConfig"


def test_a_check_under_way_is_what_ready_waits_for() -> None:
    checking = Verdict("Checking", "waiting for Slurm's check of the new configuration (Job demo-config-check-1)",
                       "demo-config-check-1", False)  # fmt: skip
    status = _conditions(Observed(**{**_ready().__dict__, "config_check": checking}), waiting=[checking.message])
    c = {c.type: c for c in status.conditions}
    assert c[CONFIG_CONDITION].reason == "SlurmCheckingConfig" and c[CONFIG_CONDITION].status == "False"
    assert c["Ready"].reason == "Waiting" and "demo-config-check-1" in c["Ready"].message
