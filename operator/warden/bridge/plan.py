"""What the bridge does next (pure): the workloads it schedules and its jobs in Slurm in, actions out.

Level-based: every round looks at the whole picture, so a missed event or a restart costs nothing.

| seen | done |
| --- | --- |
| a pod labelled with a job that ended (preempted, cancelled, timed out...) | the pod is deleted, an Event says why |
| a running job being preempted (``preempt_time`` set; it runs out its grace time) | its pods are deleted in that time |
| a pod labelled with a job Slurm no longer lists | bound: deleted; not bound: unlabelled, to be submitted again |
| a workload with all its pods here and no job | submit (``translate``), then label the pods |
| ... fewer pods than the gang's size | PodScheduled False, ``WaitingForGang`` |
| ... Slurm refused it less than ``RETRY_SECONDS`` ago | PodScheduled False, ``SlurmRefused`` (Slurm's words) |
| a job of the workload, pods not labelled (a crash between submit and label; a Job's new pod) | label them |
| the job pending | PodScheduled False, ``SlurmPending``: the job and Slurm's reason |
| the job running, pods not bound | bind them (``placement``), all or none |
| a job none of whose pods is left to run (finished, deleted) | cancel it |
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from warden.bridge.placement import Place, place
from warden.bridge.translate import Defaults, Refusal, cpus_per_task, job_description, placeholder_of
from warden.bridge.workloads import PodView, Workload
from warden.slurm.model import Job

#: seconds before a workload Slurm refused is submitted again (sooner when its pods change)
RETRY_SECONDS = 60.0
#: the same when Slurm refused the namespace's account: a namespace just opted in gets it within seconds
ACCOUNT_RETRY_SECONDS = 10.0
#: what Slurm (26.05) says of a job whose account (or account and partition) has no association
INVALID_ACCOUNT = "Invalid account"
#: job states in which a placeholder still holds or waits for its nodes
ACTIVE = ("PENDING", "RUNNING", "SUSPENDED", "CONFIGURING", "REQUEUED", "RESIZING")


@dataclass(frozen=True)
class Submit:
    workload: Workload
    description: dict[str, Any]
    pods: tuple[str, ...]  # to label with the new job's id


@dataclass(frozen=True)
class Label:
    namespace: str
    pod: str
    job_id: int | None  # None: remove the label


@dataclass(frozen=True)
class Bind:
    namespace: str
    pod: str
    job_id: int
    place: Place


@dataclass(frozen=True)
class Unschedulable:
    """PodScheduled False with this reason and message (only written when it says something new)."""

    namespace: str
    pod: str
    reason: str
    message: str


@dataclass(frozen=True)
class Evict:
    """Delete the pod (DisruptionTarget first), within ``grace_s`` when given; an Event ``event``."""

    namespace: str
    pod: str
    event: str
    note: str
    grace_s: int | None = None


@dataclass(frozen=True)
class Cancel:
    job_id: int
    why: str


Action = Submit | Label | Bind | Unschedulable | Evict | Cancel


@dataclass(frozen=True)
class Refused:
    at: float
    message: str
    #: the workload's pods (uids) when Slurm refused: new pods try again at once
    pods: frozenset[str]

    @property
    def retry_s(self) -> float:
        """Seconds before it is submitted again: sooner when the account was refused, which the controller
        pod makes for a namespace once the bridge listed it (``warden.render.bridge``)."""
        return ACCOUNT_RETRY_SECONDS if INVALID_ACCOUNT in self.message else RETRY_SECONDS


def placeholders(jobs: Sequence[Job], user: str) -> dict[str, Job]:
    """The bridge's active jobs by the uid of the workload each stands for (the newest wins)."""
    out: dict[str, Job] = {}
    for j in sorted(jobs, key=lambda j: j.id):
        ph = placeholder_of(j.comment)
        if ph is not None and j.user == user and j.state in ACTIVE:
            out[ph.uid] = j
    return out


def _unschedulable(p: PodView, reason: str, message: str) -> list[Action]:
    if p.conditions.get("PodScheduled") == ("False", reason, message):
        return []
    return [Unschedulable(p.namespace, p.name, reason, message)]


def _ended(p: PodView, job: Job | None, now: float) -> Action | None:
    """What to do about a pod whose job is over (or about to be): None while its job holds its place."""
    if p.job_id is None:
        return None
    if job is None:
        if not p.bound:
            return Label(p.namespace, p.name, None)
        return Evict(p.namespace, p.name, "SlurmJobGone", f"Slurm job {p.job_id} is gone: its pods go with it")
    if job.state in ACTIVE:
        if job.state == "RUNNING" and job.preempt_time:
            grace = max(1, int((job.end_time or now) - now)) if job.end_time else None
            return Evict(
                p.namespace, p.name, "SlurmJobPreempted",
                f"Slurm job {job.id} is preempted: its pods leave within its grace time ({grace or 0} s)", grace,
            )  # fmt: skip
        return None
    note = f"Slurm job {job.id} ended {job.state}: its pods go with it"
    if job.state == "PREEMPTED":
        return Evict(p.namespace, p.name, "SlurmJobPreempted", note)
    if job.state == "CANCELLED":
        return Evict(p.namespace, p.name, "SlurmJobCancelled", note)
    return Evict(p.namespace, p.name, "SlurmJobEnded", note)


def plan(
    workloads: Sequence[Workload],
    jobs: Sequence[Job],
    user: str,
    defaults: Defaults,
    namespace_annotations: Mapping[str, Mapping[str, str]],
    kube_node_of: Callable[[str], str | None],
    refused: Mapping[str, Refused],
    now: float,
    submitted: frozenset[int] = frozenset(),
    why_not: Callable[[PodView, str], str | None] = lambda pod, node: None,
    excluded_for: Callable[[PodView], Sequence[str]] = lambda pod: (),
) -> list[Action]:
    """``submitted``: jobs just submitted, which a job list read before may not show yet. ``why_not``: why
    a pod may not run on a Kubernetes node (``warden.bridge.fit``): no pod is bound where it may not.
    ``excluded_for``: the Slurm nodes the bridge knows whose Kubernetes node a pod may not run on, which
    its job excludes."""
    by_id = {j.id: j for j in jobs}
    active = placeholders(jobs, user)
    out: list[Action] = []
    seen: set[str] = set()
    for w in workloads:
        seen.add(w.uid)
        leaving: set[str] = set()
        for p in w.live:
            if p.job_id in submitted and p.job_id not in by_id:
                continue
            action = _ended(p, by_id.get(p.job_id) if p.job_id is not None else None, now)
            if action is not None:
                out.append(action)
                if isinstance(action, Evict):
                    leaving.add(p.name)
        live = [p for p in w.live if p.name not in leaving]
        job = active.get(w.uid)
        if job is not None and job.preempt_time:
            continue  # its pods are leaving; once the job is gone the workload is submitted again
        if not live:
            if job is not None:
                out.append(Cancel(job.id, f"no pod of {w.kind} {w.namespace}/{w.name} is left to run"))
            continue
        if job is None:
            ns_annotations = namespace_annotations.get(w.namespace, {})
            out.extend(_submit(w, live, defaults, ns_annotations, refused.get(w.uid), now, excluded_for))
        else:
            out.extend(_follow(w, live, job, kube_node_of, why_not))
    for uid, job in active.items():
        if uid not in seen:
            ph = placeholder_of(job.comment)
            name = f"{ph.kind} {ph.namespace}/{ph.name}" if ph else "its workload"
            out.append(Cancel(job.id, f"{name} has no pod left"))
    return out


def _submit(
    w: Workload, live: Sequence[PodView], defaults: Defaults, ns_annotations: Mapping[str, str],
    refused: Refused | None, now: float, excluded_for: Callable[[PodView], Sequence[str]],
) -> list[Action]:  # fmt: skip
    waiting = [p for p in live if p.job_id is None]
    out: list[Action] = []
    if len(waiting) < w.size:
        message = f"{len(waiting)} of the {w.size} pods of {w.kind} {w.name} that start together are here"
        for p in waiting:
            out += _unschedulable(p, "WaitingForGang", message)
        return out
    gang = waiting[: w.size]
    pods = frozenset(p.uid for p in gang)
    if refused is not None and now - refused.at < refused.retry_s and pods == refused.pods:
        for p in gang:
            out += _unschedulable(p, "SlurmRefused", refused.message)
        return out
    gang_workload = Workload(w.kind, w.namespace, w.name, w.uid, w.size, tuple(gang))
    desc = job_description(gang_workload, defaults, ns_annotations, excluded_for(gang[0]))
    if isinstance(desc, Refusal):
        for p in gang:
            out += _unschedulable(p, desc.reason, desc.message)
        return out
    return [Submit(w, desc, tuple(p.name for p in gang))]


def _follow(
    w: Workload, live: Sequence[PodView], job: Job, kube_node_of: Callable[[str], str | None],
    why_not: Callable[[PodView, str], str | None],
) -> list[Action]:  # fmt: skip
    held = [p for p in live if p.job_id == job.id]
    fresh = [p for p in live if p.job_id is None]
    room = max(0, w.size - len(held))  # a gang's job holds its size of pods; more wait for a later one
    taken, left = fresh[:room], fresh[room:]
    out: list[Action] = [Label(p.namespace, p.name, job.id) for p in taken]
    message = f"the {w.size} pods of {w.kind} {w.name} that start together are placed: this one waits"
    for p in left:
        out += _unschedulable(p, "WaitingForGang", message)
    live = [*held, *taken]
    unbound = [p for p in live if not p.bound]
    if not unbound:
        return out
    if job.state != "RUNNING":
        message = f"Slurm job {job.id} is {job.state.lower()}: {job.state_reason}"
        for p in unbound:
            out += _unschedulable(p, "SlurmPending", message)
        return out
    places = place(job.allocation, cpus_per_task(live[0].size), live, kube_node_of, why_not)
    if isinstance(places, str):
        for p in unbound:
            out += _unschedulable(p, "SlurmPlacement", f"Slurm job {job.id} runs, but {places}")
        return out
    return out + [Bind(w.namespace, pl.pod, job.id, pl) for pl in places]
