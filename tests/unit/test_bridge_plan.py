"""The bridge's planner, row by row of its table (warden.bridge.plan): what a user sees happen to the
pods and to Slurm's jobs."""

from __future__ import annotations

from typing import Any

from tests.unit.test_bridge_workloads import pod
from warden.bridge.plan import Bind, Cancel, Evict, Label, Refused, Submit, Unschedulable, plan
from warden.bridge.translate import Defaults, comment
from warden.bridge.workloads import PodView, Workload
from warden.slurm.model import Job

USER = "warden-bridge"
NOW = 1_800_000_000.0
WHERE = {"worker-0": "kube-0", "worker-1": "kube-1"}


def job(id_: int, w: Workload, state: str = "PENDING", reason: str = "Resources", user: str = USER, **kw: Any) -> Job:
    return Job(id=id_, state=state, nodes=(), end_time=None, state_reason=reason, comment=comment(w), user=user,
               flags=("EXTERNAL_JOB",), **kw)  # fmt: skip


def single(p: PodView) -> Workload:
    return Workload("Pod", p.namespace, p.name, p.uid, 1, (p,))


def gang(*pods: PodView) -> Workload:
    return Workload("Job", "team", "train", "job-uid", len(pods), tuple(pods))


def run(workloads: list[Workload], jobs: list[Job], refused: dict[str, Refused] | None = None, **kw: Any) -> list[Any]:
    return plan(workloads, jobs, USER, Defaults("k8s"), {}, WHERE.get, refused or {}, NOW, **kw)


def test_a_complete_workload_without_a_job_is_submitted_and_an_incomplete_gang_waits() -> None:
    [submit] = run([gang(pod("a"), pod("b"))], [])
    assert isinstance(submit, Submit) and submit.pods == ("a", "b") and submit.description["tasks"] == 2
    waiting = run([Workload("Job", "team", "train", "job-uid", 3, (pod("a"), pod("b")))], [])
    assert {type(a) for a in waiting} == {Unschedulable}
    assert all(a.reason == "WaitingForGang" and "2 of the 3" in a.message for a in waiting)


def test_slurms_refusal_is_shown_and_tried_again_after_a_while_or_when_the_pods_change() -> None:
    w = single(pod("a"))
    refused = {w.uid: Refused(NOW - 5, "Slurm refused the job: Invalid qos", frozenset({"uid-a"}))}
    [shown] = run([w], [], refused)
    assert isinstance(shown, Unschedulable) and shown.reason == "SlurmRefused" and "Invalid qos" in shown.message
    later = {w.uid: Refused(NOW - 61, "x", frozenset({"uid-a"}))}
    assert isinstance(run([w], [], later)[0], Submit)
    other_pods = {w.uid: Refused(NOW - 5, "x", frozenset({"uid-old"}))}
    assert isinstance(run([w], [], other_pods)[0], Submit)


def test_a_pod_without_limits_is_left_pending_with_the_reason_and_no_job() -> None:
    [told] = run([single(pod("a", cpu=None))], [])
    assert isinstance(told, Unschedulable) and told.reason == "NoLimits"
    already = pod("a", cpu=None)
    said = PodView(**{**already.__dict__, "conditions": {"PodScheduled": ("False", told.reason, told.message)}})
    assert run([single(said)], []) == []  # said once, not written again every round


def test_a_pending_job_shows_slurms_reason_on_its_pods() -> None:
    w = gang(
        pod("a", labels={"slurm.warden.dev/slurm-job": "42"}), pod("b", labels={"slurm.warden.dev/slurm-job": "42"})
    )
    actions = run([w], [job(42, w, reason="Resources")])
    assert [(a.pod, a.reason, a.message) for a in actions] == [
        ("a", "SlurmPending", "Slurm job 42 is pending: Resources"),
        ("b", "SlurmPending", "Slurm job 42 is pending: Resources"),
    ]


def test_pods_of_a_job_found_by_its_comment_are_labelled_never_submitted_twice() -> None:
    w = gang(pod("a"), pod("b"))  # a restart between the submit and the labels
    actions = run([w], [job(42, w)])
    assert [a for a in actions if isinstance(a, Label)] == [Label("team", "a", 42), Label("team", "b", 42)]
    assert not any(isinstance(a, Submit) for a in actions)
    stranger = job(43, gang(pod("x")), user="alice")  # the same comment from someone else's job is not ours
    assert any(isinstance(a, Submit) for a in run([w], [stranger]))


def test_a_running_job_binds_all_its_pods_to_the_kubernetes_nodes_of_its_allocation() -> None:
    labels = {"slurm.warden.dev/slurm-job": "42"}
    w = gang(pod("a", labels=labels), pod("b", labels=labels))
    running = job(42, w, state="RUNNING", reason="None", allocation=(("worker-0", 1), ("worker-1", 1)))
    binds = run([w], [running])
    assert [(b.pod, b.place.kube_node, b.place.slurm_node) for b in binds if isinstance(b, Bind)] == [
        ("a", "kube-0", "worker-0"), ("b", "kube-1", "worker-1"),
    ]  # fmt: skip
    short = job(42, w, state="RUNNING", reason="None", allocation=(("worker-0", 1),))
    assert all(isinstance(a, Unschedulable) and a.reason == "SlurmPlacement" for a in run([w], [short]))


def test_a_preempted_job_deletes_its_pods_within_the_grace_time_and_is_not_submitted_again_meanwhile() -> None:
    labels = {"slurm.warden.dev/slurm-job": "42"}
    w = single(pod("a", labels=labels, node="kube-0", phase="Running"))
    going = job(42, w, state="RUNNING", reason="None", allocation=(("worker-0", 1),), preempt_time=NOW - 5)
    going = Job(**{**going.__dict__, "end_time": NOW + 15})
    [evict] = run([w], [going])
    assert isinstance(evict, Evict) and evict.event == "SlurmJobPreempted" and evict.grace_s == 15


def test_a_cancelled_or_ended_job_deletes_its_pods_with_the_reason() -> None:
    labels = {"slurm.warden.dev/slurm-job": "42"}
    for state, event in (("CANCELLED", "SlurmJobCancelled"), ("PREEMPTED", "SlurmJobPreempted"),
                         ("TIMEOUT", "SlurmJobEnded"), ("NODE_FAIL", "SlurmJobEnded")):  # fmt: skip
        w = single(pod("a", labels=labels, node="kube-0", phase="Running"))
        actions = run([w], [job(42, w, state=state)])
        assert [(type(a), getattr(a, "event", "")) for a in actions] == [(Evict, event)], state
        unbound = single(pod("a", labels=labels))  # a pending placeholder cancelled: its pod goes too
        assert isinstance(run([unbound], [job(42, unbound, state=state)])[0], Evict)


def test_a_job_slurm_forgot_deletes_a_bound_pod_and_resubmits_an_unbound_one() -> None:
    labels = {"slurm.warden.dev/slurm-job": "42"}
    bound = single(pod("a", labels=labels, node="kube-0", phase="Running"))
    assert [a.event for a in run([bound], []) if isinstance(a, Evict)] == ["SlurmJobGone"]
    unbound = single(pod("a", labels=labels))
    assert run([unbound], []) == [Label("team", "a", None)]
    assert run([unbound], [], submitted=frozenset({42})) == []  # just submitted: the list read before it


def test_a_job_whose_pods_are_all_done_or_gone_is_cancelled() -> None:
    labels = {"slurm.warden.dev/slurm-job": "42"}
    done = gang(pod("a", labels=labels, node="kube-0", phase="Succeeded"),
                pod("b", labels=labels, node="kube-1", phase="Succeeded"))  # fmt: skip
    running = job(42, done, state="RUNNING", reason="None", allocation=(("worker-0", 1), ("worker-1", 1)))
    assert [type(a) for a in run([done], [running])] == [Cancel]
    assert [a.job_id for a in run([], [running]) if isinstance(a, Cancel)] == [42]  # the Job was deleted
    half = gang(pod("a", labels=labels, node="kube-0", phase="Succeeded"),
                pod("b", labels=labels, node="kube-1", phase="Running"))  # fmt: skip
    assert run([half], [running]) == []


def test_a_gangs_job_holds_its_size_of_pods_and_more_wait() -> None:
    labels = {"slurm.warden.dev/slurm-job": "42"}
    w = Workload("PodGroup", "team", "ring", "pg-uid", 2, (pod("a", labels=labels), pod("b"), pod("c")))
    actions = run([w], [job(42, w)])
    assert [a for a in actions if isinstance(a, Label)] == [Label("team", "b", 42)]
    [extra] = [a for a in actions if isinstance(a, Unschedulable) and a.pod == "c"]
    assert extra.reason == "WaitingForGang"
