"""Status folded from observations: what `kubectl get slurmclusters` and its conditions say."""

from __future__ import annotations

import dataclasses
from typing import Any

from warden.ldapcheck import DirectoryCheck
from warden.model import DrainedNode, SlurmClusterSpec, SlurmClusterStatus, Slurmctld, SlurmNodesStatus, parse_spec
from warden.status import UNRESPONSIVE, Observed, Workload, fold, invalid_spec_status

SPEC = parse_spec(
    {
        "workerGroups": [{"name": "cpu", "replicas": 2}, {"name": "gpu", "replicas": 1, "gpus": {"count": 4}}],
        "accounting": {"mode": "InCluster"},
    }
)
T0, T1 = "2026-11-22T00:00:00Z", "2026-11-22T00:05:00Z"


def ready_cluster() -> Observed:
    return Observed(
        controller=Workload(True, 1, 1),
        restapi=Workload(True, 1, 1),
        login=Workload(True, 1, 1),
        workers={"cpu": Workload(True, 2, 2), "gpu": Workload(True, 1, 1)},
        jail_populated=True,
        accounting=Workload(True, 1, 1),
        slurm=SlurmNodesStatus(registered=3, usable=3),
    )


def conditions(status: SlurmClusterStatus) -> dict[str, str]:
    return {c.type: c.status for c in status.conditions}


def test_nothing_exists_yet_is_pending() -> None:
    status = fold(SPEC, 1, Observed(accounting=Workload()), None, T0)
    assert status.phase == "Pending"
    assert conditions(status) == {
        "Ready": "False",
        "ImagesPulled": "True",  # no pod, none failing
        "JailPopulated": "False",
        "ControllerReady": "False",
        "RestApiReady": "False",
        "LoginReady": "False",
        "WorkersReady": "False",
        "AccountingReady": "False",
        "SlurmNodesRegistered": "Unknown",
        "SlurmVersion": "True",  # nothing runs another series
    }
    assert status.workers == "0/3" and status.login == "0/1"


def test_everything_ready() -> None:
    status = fold(SPEC, 3, ready_cluster(), None, T0)
    assert status.phase == "Ready"
    assert set(conditions(status).values()) == {"True"}
    assert status.observed_generation == 3
    assert status.workers == "3/3" and status.login == "1/1" and status.jail_populated
    assert [(g.name, g.ready_replicas, g.replicas) for g in status.worker_groups] == [("cpu", 2, 2), ("gpu", 1, 1)]
    assert all(c.observed_generation == 3 for c in status.conditions)


def test_progress_names_what_is_missing() -> None:
    observed = Observed(
        controller=Workload(True, 1, 1),
        login=Workload(True, 1, 0),
        workers={"cpu": Workload(True, 2, 1), "gpu": Workload(True, 1, 1)},
        jail_populated=False,
        accounting=Workload(True, 1, 1),
    )
    status = fold(SPEC, 1, observed, None, T0)
    assert status.phase == "Provisioning"
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert ready.reason == "ComponentsNotReady"
    assert "JailPopulated" in ready.message and "LoginReady" in ready.message and "WorkersReady" in ready.message
    workers = next(c for c in status.conditions if c.type == "WorkersReady")
    assert workers.message == "2/3 worker nodes ready (not ready: cpu 1/2)"


def test_transition_time_moves_only_when_status_flips() -> None:
    first = fold(SPEC, 1, ready_cluster(), None, T0)
    same = fold(SPEC, 1, ready_cluster(), first, T1)
    assert {c.type: c.last_transition_time for c in same.conditions} == dict.fromkeys(conditions(first), T0)
    degraded_obs = Observed(
        **{**ready_cluster().__dict__, "workers": {"cpu": Workload(True, 2, 1), "gpu": Workload(True, 1, 1)}}
    )
    degraded = fold(SPEC, 1, degraded_obs, same, T1)
    assert degraded.phase == "Degraded", "a cluster that was Ready and lost a node is Degraded, not Provisioning"
    times = {c.type: c.last_transition_time for c in degraded.conditions}
    assert times["WorkersReady"] == T1 and times["Ready"] == T1 and times["ControllerReady"] == T0


def test_failed_populate_fails_the_cluster() -> None:
    observed = Observed(**{**ready_cluster().__dict__, "jail_populated": False, "jail_failed": True})
    status = fold(SPEC, 1, observed, None, T0)
    assert status.phase == "Failed"
    jail = next(c for c in status.conditions if c.type == "JailPopulated")
    assert jail.reason == "PopulateFailed"


def test_apply_errors_surface_in_ready() -> None:
    status = fold(SPEC, 1, ready_cluster(), None, T0, errors=["StatefulSet/x: forbidden"])
    ready = next(c for c in status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason, ready.message) == ("False", "ReconcileFailed", "StatefulSet/x: forbidden")
    assert status.phase == "Degraded"


def test_waiting_for_a_terminating_object_says_so_until_the_next_reconcile() -> None:
    observed = Observed(**{**ready_cluster().__dict__, "jail_populated": False})
    why = "PersistentVolumeClaim/x-jail: PersistentVolumeClaim x-jail is still being deleted"
    waiting = fold(SPEC, 1, observed, None, T0, errors=[], waiting=[why])
    ready = next(c for c in waiting.conditions if c.type == "Ready")
    assert (ready.status, ready.reason, ready.message) == ("False", "Waiting", f"waiting: {why}")
    assert waiting.phase == "Provisioning", "waiting is not a failure"
    # a child's change refreshes status without a reconcile: the wait still stands
    again = fold(SPEC, 1, observed, waiting, T1)
    assert next(c for c in again.conditions if c.type == "Ready").message == f"waiting: {why}"
    # the next reconcile waits for nothing: the components decide again
    done = fold(SPEC, 1, ready_cluster(), again, T1, errors=[], waiting=[])
    assert done.phase == "Ready"


def test_accounting_disabled_is_ready() -> None:
    spec = SlurmClusterSpec.model_validate({"workerGroups": [{"name": "a", "replicas": 0}], "login": {"replicas": 0}})
    observed = Observed(
        controller=Workload(True, 1, 1),
        restapi=Workload(True, 1, 1),
        workers={"a": Workload(True, 0, 0)},
        jail_populated=True,
    )
    status = fold(spec, 1, observed, None, T0)
    accounting = next(c for c in status.conditions if c.type == "AccountingReady")
    assert (accounting.status, accounting.reason) == ("True", "AccountingDisabled")
    assert status.phase == "Ready", "no login nodes and no workers asked for: nothing to wait for"


def test_health_report_is_folded_and_kept_between_reports() -> None:
    report: dict[str, Any] = {
        "lastRunTime": "2026-11-22T04:00:00Z",
        "thresholdGBps": 100.0,
        "nodesChecked": 2,
        "passed": ["c-worker-gpu-0"],
        "drained": [
            {"node": "c-worker-gpu-1", "reason": "warden-health: nccl all_reduce_perf busbw 12.3 GB/s < 100.0 GB/s"}
        ],
        "resumed": [],
        "skipped": [{"node": "c-worker-gpu-2", "why": "busy (MIXED)"}],
        "errors": [],
    }
    status = fold(SPEC, 1, Observed(**{**ready_cluster().__dict__, "health_report": report}), None, T0)
    hc = status.health_check
    assert (hc.last_run_time, hc.nodes_checked, hc.nodes_passed) == ("2026-11-22T04:00:00Z", 2, 1)
    assert [(d.node, d.reason) for d in hc.drained] == [("c-worker-gpu-1", report["drained"][0]["reason"])]
    assert [(s.node, s.reason) for s in hc.skipped] == [("c-worker-gpu-2", "busy (MIXED)")]
    later = fold(SPEC, 1, ready_cluster(), status, T1)
    assert later.health_check == hc


def test_invalid_spec_keeps_other_conditions() -> None:
    ready = fold(SPEC, 1, ready_cluster(), None, T0)
    status = invalid_spec_status(2, "spec.workerGroups[0].replicas: must be >= 0", ready, T1)
    assert status.phase == "Failed" and status.observed_generation == 2
    first = status.conditions[0]
    assert (first.type, first.status, first.reason) == ("Ready", "False", "InvalidSpec")
    assert "WorkersReady" in conditions(status)


def test_reconcile_failure_is_not_hidden_by_a_later_child_event() -> None:
    failed = fold(SPEC, 1, ready_cluster(), None, T0, errors=["Role/x: forbidden"])
    # A StatefulSet became ready meanwhile: status is re-folded without a reconcile (errors=None).
    refreshed = fold(SPEC, 1, ready_cluster(), failed, T1)
    ready = next(c for c in refreshed.conditions if c.type == "Ready")
    assert (ready.status, ready.reason, ready.message) == ("False", "ReconcileFailed", "Role/x: forbidden")
    assert refreshed.phase == "Degraded"
    # The next reconcile that succeeds clears it.
    fixed = fold(SPEC, 1, ready_cluster(), refreshed, T1, errors=[])
    assert fixed.phase == "Ready"


def test_ready_needs_the_workers_registered_with_slurmctld_not_just_running() -> None:
    observed = ready_cluster()
    missing = Observed(**{**observed.__dict__, "slurm": SlurmNodesStatus(registered=2, usable=2)})
    status = fold(SPEC, 3, missing, None, T0)
    assert conditions(status)["SlurmNodesRegistered"] == "False"
    assert conditions(status)["Ready"] == "False"
    registered = next(c for c in status.conditions if c.type == "SlurmNodesRegistered")
    assert registered.message == "2/3 worker nodes registered with slurmctld, 2 usable"


def test_drained_nodes_are_listed_but_the_cluster_stays_ready() -> None:
    drained = [DrainedNode(node="demo-worker-cpu-1", reason="bob: disk swap")]
    view = SlurmNodesStatus(registered=3, usable=2, drained=drained)
    status = fold(SPEC, 3, Observed(**{**ready_cluster().__dict__, "slurm": view}), None, T0)
    assert status.phase == "Ready"
    assert status.slurm_nodes is not None and status.slurm_nodes.drained == drained
    registered = next(c for c in status.conditions if c.type == "SlurmNodesRegistered")
    assert registered.message == "3/3 worker nodes registered with slurmctld, 2 usable, 1 drained"


def test_a_refresh_without_slurm_keeps_what_slurm_said_last() -> None:
    first = fold(SPEC, 3, ready_cluster(), None, T0)
    again = fold(SPEC, 3, Observed(**{**ready_cluster().__dict__, "slurm": None}), first, T1)
    assert again.slurm_nodes == first.slurm_nodes and conditions(again)["SlurmNodesRegistered"] == "True"


def test_without_any_slurm_view_ready_waits_unless_the_operator_does_not_read_slurm() -> None:
    unseen = Observed(**{**ready_cluster().__dict__, "slurm": None})
    status = fold(SPEC, 3, unseen, None, T0, slurm_required=True)
    assert status.phase == "Provisioning" and conditions(status)["SlurmNodesRegistered"] == "Unknown"
    assert "SlurmNodesRegistered" in next(c for c in status.conditions if c.type == "Ready").message
    status = fold(SPEC, 3, unseen, None, T0, slurm_required=False)
    assert status.phase == "Ready"


def test_an_autoscaled_group_wants_what_its_statefulset_says_now() -> None:
    spec = parse_spec({"workerGroups": [{"name": "cpu", "replicas": 2, "autoscaled": True}]})
    observed = Observed(
        controller=Workload(True, 1, 1),
        restapi=Workload(True, 1, 1),
        login=Workload(True, 1, 1),
        workers={"cpu": Workload(True, 0, 0)},  # scaled to zero by its autoscaler
        jail_populated=True,
        slurm=SlurmNodesStatus(registered=0, usable=0),
    )
    status = fold(spec, 1, observed, None, T0, slurm_required=True)
    assert status.phase == "Ready" and status.workers == "0/0"
    grown = Observed(**{**observed.__dict__, "workers": {"cpu": Workload(True, 5, 3)}})
    status = fold(spec, 1, grown, None, T0)
    assert status.workers == "3/5" and status.worker_groups[0].replicas == 5


def test_a_slurmctld_that_answers_no_reads_is_not_ready_until_it_answers_again() -> None:
    """Its pod is Ready (a stuck slurmctld still listens): the Slurm sync's finding decides, and stands
    across the refreshes in between (observed None) until the sync asks again."""
    first = fold(SPEC, 3, ready_cluster(), None, T0)
    stuck = Observed(**{**ready_cluster().__dict__, "slurmctld": Slurmctld(False, "list nodes: Socket timed out")})
    status = fold(SPEC, 3, stuck, first, T1)
    controller = next(c for c in status.conditions if c.type == "ControllerReady")
    assert (controller.status, controller.reason) == ("False", UNRESPONSIVE)
    assert "list nodes: Socket timed out" in controller.message and controller.last_transition_time == T1
    assert status.phase == "Degraded" and "ControllerReady" in status.conditions[0].message
    # a child changed meanwhile: no new finding, the last one stands (even once the pod is not Ready)
    between = Observed(**{**ready_cluster().__dict__, "controller": Workload(True, 1, 0)})
    still = fold(SPEC, 3, between, status, "2026-11-22T00:06:00Z")
    again = next(c for c in still.conditions if c.type == "ControllerReady")
    assert (again.reason, again.message, again.last_transition_time) == (UNRESPONSIVE, controller.message, T1)
    # the sync finds it answering: back to the pod's own readiness
    answers = Observed(**{**ready_cluster().__dict__, "slurmctld": Slurmctld(True)})
    back = fold(SPEC, 3, answers, still, "2026-11-22T00:07:00Z")
    assert conditions(back)["ControllerReady"] == "True" and back.phase == "Ready"


def test_the_status_patch_names_with_null_what_the_previous_status_had_and_this_one_lacks() -> None:
    """A merge patch keeps keys it does not name: without nulls a slurmd version no node reports any
    more stayed in status.slurmNodes.slurmdVersions for good (and held a Slurm upgrade's Workers step)."""
    from warden.model import SlurmVersionStatus
    from warden.reconcile import status_patch

    def status(versions: dict[str, int], step: str | None) -> SlurmClusterStatus:
        return SlurmClusterStatus(
            slurm_nodes=SlurmNodesStatus(registered=2, usable=2, slurmd_versions=versions),
            slurm=SlurmVersionStatus(version="24.11", target="26.05", phase="Upgrading", step=step),
        )

    before = status({"24.11.5": 1, "26.05.5": 1}, "Workers")
    after = status({"26.05.5": 2}, None)
    patch = status_patch(before, after)
    assert patch["slurmNodes"]["slurmdVersions"] == {"24.11.5": None, "26.05.5": 2}
    assert patch["slurm"]["step"] is None
    assert status_patch(None, after) == after.model_dump(by_alias=True, exclude_none=True)


def test_the_directory_check_is_a_condition_of_its_own_that_never_holds_ready_back() -> None:
    spec = parse_spec(
        {
            "workerGroups": [{"name": "cpu", "replicas": 2}, {"name": "gpu", "replicas": 1, "gpus": {"count": 4}}],
            "accounting": {"mode": "InCluster"},
            "identity": {"ldap": {"uris": ["ldaps://ldap"], "searchBase": "dc=x"}},
        }
    )
    assert "DirectoryReachable" not in conditions(fold(SPEC, 1, ready_cluster(), None, T0))
    unchecked = fold(spec, 1, ready_cluster(), None, T0)
    assert conditions(unchecked)["DirectoryReachable"] == "Unknown" and unchecked.phase == "Ready"
    bad = DirectoryCheck(False, "BindFailed", "ldaps://ldap: invalid credentials for cn=reader")
    failing = fold(spec, 1, dataclasses.replace(ready_cluster(), directory=bad), unchecked, T1)
    (cond,) = [c for c in failing.conditions if c.type == "DirectoryReachable"]
    assert (cond.status, cond.reason, cond.message) == ("False", "BindFailed", bad.message)
    assert failing.phase == "Ready" and conditions(failing)["Ready"] == "True"  # local users keep working
    # a refresh that did not check the directory keeps what the last check said
    later = fold(spec, 1, ready_cluster(), failing, T1)
    assert [c for c in later.conditions if c.type == "DirectoryReachable"] == [cond]


def test_with_backup_controllers_status_records_the_one_in_charge_and_keeps_it_until_asked_again() -> None:
    from warden.reconcile import status_patch

    spec = SPEC.model_copy(update={"controller": SPEC.controller.model_copy(update={"replicas": 2})})
    assert spec.controller.has_backup
    ready = Observed(**{**ready_cluster().__dict__, "controller": Workload(True, 2, 2)})
    unknown = fold(spec, 3, ready, None, T0)  # not asked yet: nothing recorded
    assert unknown.slurmctld_in_charge is None
    assert "in charge" not in next(c for c in unknown.conditions if c.type == "ControllerReady").message

    asked = Observed(**{**ready.__dict__, "slurmctld": Slurmctld(True, in_charge="demo-controller-1")})
    status = fold(spec, 3, asked, unknown, T1)
    controller = next(c for c in status.conditions if c.type == "ControllerReady")
    assert status.slurmctld_in_charge == "demo-controller-1"
    assert (controller.status, controller.message) == ("True", "slurmctld is ready; in charge: demo-controller-1")
    assert controller.last_transition_time == T0  # a new message is no transition
    assert status_patch(unknown, status)["slurmctldInCharge"] == "demo-controller-1"

    # a refresh that did not ask (a child changed; a ping that failed) keeps the last answer
    for not_asked in (ready, Observed(**{**ready.__dict__, "slurmctld": Slurmctld(True)})):
        kept = fold(spec, 3, not_asked, status, "2026-11-22T00:06:00Z")
        assert kept.slurmctld_in_charge == "demo-controller-1"
        assert next(c for c in kept.conditions if c.type == "ControllerReady").message == controller.message
    # a pod not ready says so, and still who is in charge
    one_down = Observed(**{**ready.__dict__, "controller": Workload(True, 2, 1)})
    degraded = next(c for c in fold(spec, 3, one_down, status, T1).conditions if c.type == "ControllerReady")
    assert degraded.message == "slurmctld is not ready yet; in charge: demo-controller-1"


def test_one_controller_writes_no_in_charge_and_says_nothing_of_it() -> None:
    from warden.reconcile import status_patch

    asked = Observed(**{**ready_cluster().__dict__, "slurmctld": Slurmctld(True, in_charge="demo-controller-0")})
    status = fold(SPEC, 3, asked, None, T0)
    assert status.slurmctld_in_charge is None
    assert next(c for c in status.conditions if c.type == "ControllerReady").message == "slurmctld is ready"
    assert "slurmctldInCharge" not in status_patch(None, status)
    # a status written while the cluster had backups: the field goes (named with null)
    before = status.model_copy(update={"slurmctld_in_charge": "demo-controller-1"})
    assert status_patch(before, fold(SPEC, 3, ready_cluster(), before, T1))["slurmctldInCharge"] is None
