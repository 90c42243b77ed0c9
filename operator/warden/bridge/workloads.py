"""The bridge's pods and the workloads they make up (pure).

``trim`` is what the bridge keeps of each pod it schedules (its watch cache holds only that); ``PodView``
reads it; ``group`` puts the pods of one namespace into workloads: the pods Slurm must place together,
as one job, a gang (``Gang``): a batch Job whose pods all run at once (``parallelism`` > 1,
``completions`` unset or at most ``parallelism``) is one gang of ``min(parallelism, completions)`` pods;
so are the pods of a PodGroup (label ``scheduling.x-k8s.io/pod-group``, scheduler-plugins' CRD), its
``minMember`` of them, and every pod of a JobSet (label ``jobset.sigs.k8s.io/jobset-name``): each of its
replicated Jobs' replicas, each as many as that Job runs at once. Every other pod is a workload of its
own (a Job that runs more completions than it runs at once goes pod by pod).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from warden import quantity
from warden.naming import BRIDGE_JOB_LABEL, BRIDGE_NODE_ANNOTATION

Manifest = dict[str, Any]

#: the extended resources counted as GPUs
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
#: the annotation a Job's controller gives each pod of an Indexed Job
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
#: phases after which a pod runs nothing again
TERMINAL = ("Succeeded", "Failed")
#: the label that puts a pod in a PodGroup (scheduler-plugins' coscheduling), in the pod's namespace
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
#: the label the JobSet controller gives every pod of a JobSet
JOB_SET_LABEL = "jobset.sigs.k8s.io/jobset-name"


def trim(pod: Manifest) -> Manifest:
    """What the bridge reads of a pod: identity, labels, annotations, owner, resources, node, where it may
    run (tolerations, nodeSelector, affinity), phase and the PodScheduled and DisruptionTarget conditions.
    Everything else stays on the API server."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    keep_meta = ("name", "namespace", "uid", "resourceVersion", "labels", "annotations", "ownerReferences",
                 "deletionTimestamp", "creationTimestamp")  # fmt: skip

    def resources(containers: Any) -> list[Manifest]:
        return [
            {k: c[k] for k in ("name", "resources", "restartPolicy") if k in c}
            for c in containers or []
            if isinstance(c, dict)
        ]

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {k: meta[k] for k in keep_meta if k in meta},
        "spec": {
            "nodeName": spec.get("nodeName"),
            "schedulerName": spec.get("schedulerName"),
            "containers": resources(spec.get("containers")),
            "initContainers": resources(spec.get("initContainers")),
            "overhead": spec.get("overhead") or {},
            "activeDeadlineSeconds": spec.get("activeDeadlineSeconds"),
            # where it may run (warden.bridge.fit), only when it says
            **{k: spec[k] for k in ("tolerations", "nodeSelector", "affinity") if spec.get(k)},
        },
        "status": {
            "phase": status.get("phase"),
            "conditions": [
                {k: c[k] for k in ("type", "status", "reason", "message") if k in c}
                for c in status.get("conditions") or []
                if c.get("type") in ("PodScheduled", "DisruptionTarget")
            ],
        },
    }


@dataclass(frozen=True)
class Size:
    """What one pod may use, by its limits, counted as the kubelet counts a pod: its containers and
    sidecars together, or its largest init container when that is larger, plus the pod's overhead."""

    cpus: Decimal  # CPUs (fractions kept: 500m is 0.5)
    memory_mib: int
    gpus: int
    #: every container (and init container) has a CPU and a memory limit
    limited: bool


def _limits(container: Manifest) -> Mapping[str, Any]:
    return ((container.get("resources") or {}).get("limits")) or {}


def size_of(spec: Manifest) -> Size:
    def amounts(c: Manifest) -> tuple[Decimal, Decimal, int]:
        limits = _limits(c)
        gpus = sum(int(quantity.parse(str(limits[g]))) for g in GPU_RESOURCES if g in limits)
        return (
            quantity.parse(str(limits.get("cpu", "0"))),
            quantity.parse(str(limits.get("memory", "0"))),
            gpus,
        )

    containers = list(spec.get("containers") or [])
    inits = list(spec.get("initContainers") or [])
    sidecars = [c for c in inits if c.get("restartPolicy") == "Always"]
    steady = [amounts(c) for c in containers + sidecars]
    cpu = sum((a[0] for a in steady), Decimal(0))
    memory = sum((a[1] for a in steady), Decimal(0))
    gpus = sum(a[2] for a in steady)
    for c in inits:
        if c.get("restartPolicy") == "Always":
            continue
        c_cpu, c_mem, c_gpu = amounts(c)
        cpu, memory, gpus = max(cpu, c_cpu), max(memory, c_mem), max(gpus, c_gpu)
    overhead = spec.get("overhead") or {}
    cpu += quantity.parse(str(overhead.get("cpu", "0")))
    memory += quantity.parse(str(overhead.get("memory", "0")))
    limited = bool(containers) and all("cpu" in _limits(c) and "memory" in _limits(c) for c in containers + inits)
    return Size(cpus=cpu, memory_mib=math.ceil(memory / quantity.MEBIBYTE), gpus=gpus, limited=limited)


@dataclass(frozen=True)
class Owner:
    kind: str
    name: str
    uid: str


@dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    uid: str
    phase: str
    node: str  # spec.nodeName; "" while unbound
    deleting: bool
    job_id: int | None  # the label: the Slurm job the pod belongs to
    pod_group: str  # the PodGroup it names; "" for none
    job_set: str  # the JobSet it belongs to; "" for none
    slurm_node: str  # the annotation set at binding: the Slurm node it took a place on
    owner: Owner | None  # its controller
    annotations: Mapping[str, str]
    size: Size
    index: int | None  # an Indexed Job's completion index
    created: str
    deadline_s: int | None  # spec.activeDeadlineSeconds
    conditions: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)  # type -> (status, reason, message)
    #: where it may run: its tolerations, nodeSelector and affinity as its spec has them (``warden.bridge.fit``)
    placement: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, pod: Manifest) -> PodView:
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
        job = str(labels.get(BRIDGE_JOB_LABEL, ""))
        index = str(annotations.get(COMPLETION_INDEX, ""))
        deadline = spec.get("activeDeadlineSeconds")
        return cls(
            namespace=str(meta.get("namespace") or ""),
            name=str(meta["name"]),
            uid=str(meta.get("uid") or ""),
            phase=str(status.get("phase") or "Pending"),
            node=str(spec.get("nodeName") or ""),
            deleting=bool(meta.get("deletionTimestamp")),
            job_id=int(job) if job.isdigit() else None,
            pod_group=str(labels.get(POD_GROUP_LABEL, "")),
            job_set=str(labels.get(JOB_SET_LABEL, "")),
            slurm_node=str(annotations.get(BRIDGE_NODE_ANNOTATION, "")),
            owner=Owner(str(owner["kind"]), str(owner["name"]), str(owner["uid"])) if owner else None,
            annotations=dict(annotations),
            size=size_of(spec),
            index=int(index) if index.isdigit() else None,
            created=str(meta.get("creationTimestamp") or ""),
            deadline_s=int(deadline) if isinstance(deadline, int) and not isinstance(deadline, bool) else None,
            conditions={
                str(c.get("type")): (str(c.get("status", "")), str(c.get("reason", "")), str(c.get("message", "")))
                for c in status.get("conditions") or []
            },
            placement={k: spec[k] for k in ("tolerations", "nodeSelector", "affinity") if spec.get(k)},
        )

    @property
    def live(self) -> bool:
        """Runs or may still run: not finished, not being deleted."""
        return self.phase not in TERMINAL and not self.deleting

    @property
    def bound(self) -> bool:
        return bool(self.node)


@dataclass(frozen=True)
class Gang:
    """Pods that start together, as the bridge read them from their Job or PodGroup."""

    kind: str  # Job, PodGroup or JobSet
    name: str
    uid: str
    size: int

    @classmethod
    def of_job(cls, name: str, uid: str, parallelism: int, completions: int | None) -> Gang:
        """A Job's pods start together when they all run at once; otherwise each goes alone (size 1)."""
        if parallelism <= 1 or (completions is not None and completions > parallelism):
            return cls("Job", name, uid, 1)
        return cls("Job", name, uid, parallelism if completions is None else min(parallelism, completions))

    @classmethod
    def of_job_set(cls, name: str, uid: str, spec: Mapping[str, Any]) -> Gang:
        """Every pod of a JobSet starts together: each replicated Job's replicas, each its pods that run at once."""
        size = 0
        for replicated in spec.get("replicatedJobs") or []:
            job = (replicated.get("template") or {}).get("spec") or {}
            parallelism, completions = int(job.get("parallelism") or 1), job.get("completions")
            runs = parallelism if completions is None else min(parallelism, int(completions))
            size += int(replicated.get("replicas") or 1) * runs
        return cls("JobSet", name, uid, max(1, size))


def gang_key(p: PodView) -> str | None:
    """What names the gang a pod may belong to (``group``'s key of ``gangs``): its PodGroup, its JobSet, or
    its Job."""
    if p.pod_group:
        return f"PodGroup/{p.namespace}/{p.pod_group}"
    if p.job_set:
        return f"JobSet/{p.namespace}/{p.job_set}"
    if p.owner is not None and p.owner.kind == "Job":
        return p.owner.uid
    return None


@dataclass(frozen=True)
class Workload:
    """Pods Slurm places together, as one job: ``kind``/``name``/``uid`` are the Job's for a gang, the
    pod's own otherwise."""

    kind: str
    namespace: str
    name: str
    uid: str
    size: int
    pods: tuple[PodView, ...]  # every pod of it the bridge sees, finished ones too, by (index, name)

    @property
    def live(self) -> tuple[PodView, ...]:
        return tuple(p for p in self.pods if p.live)

    @property
    def annotations(self) -> Mapping[str, str]:
        """The first pod's: a Job's pods share their template's."""
        return self.pods[0].annotations if self.pods else {}


def _order(p: PodView) -> tuple[int, str, str]:
    return (p.index if p.index is not None else 1 << 30, p.created, p.name)


def group(pods: Iterable[PodView], gangs: Mapping[str, Gang]) -> list[Workload]:
    """The workloads of these pods; ``gangs``: by ``gang_key``, those the bridge has read (a pod whose gang
    is not among them goes alone)."""
    members: dict[str, list[PodView]] = {}
    out: list[Workload] = []
    for p in pods:
        key = gang_key(p)
        gang = gangs.get(key) if key is not None else None
        if key is not None and gang is not None and gang.size > 1:
            members.setdefault(key, []).append(p)
        else:
            out.append(Workload("Pod", p.namespace, p.name, p.uid, 1, (p,)))
    for key, these in members.items():
        gang = gangs[key]
        out.append(Workload(gang.kind, these[0].namespace, gang.name, gang.uid, gang.size,
                            tuple(sorted(these, key=_order))))  # fmt: skip
    return sorted(out, key=lambda w: (w.namespace, w.kind, w.name, w.uid))
