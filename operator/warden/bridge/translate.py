"""A workload as a Slurm job (pure): the description ``POST /slurm/v0.0.44/job/submit`` takes, or why
there can be none.

One pod is one task: ``tasks`` = the workload's pods, each ``cpus_per_task`` whole CPUs (its CPU limit
rounded up) and ``memory_per_cpu`` MiB (its memory limit shared over those CPUs), GPUs as
``tres_per_task``; at most one node per task. The job is an *external job* (``EXTERNAL_JOB``): Slurm
allocates, nothing is launched. Time limit and isolation come from the first pod's annotations, else the
namespace's; partition and QoS from the namespace's (an admin's), else the cluster's ``spec.bridge``, a
pod's own only where the namespace's allowed-partitions / allowed-qos annotation lists it. On a cluster with
accounting the job's account is its namespace's (``k8s-<namespace>``): Slurm holds it to that account's
limits, QoS and fair share.

The job's ``comment`` says which workload it stands for (``warden-bridge/v1 Job/<ns>/<name>/<uid>
size=2``): a restarted bridge finds its jobs by it (``placeholder_of``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from warden.bridge.workloads import Size, Workload
from warden.naming import (
    BRIDGE_ALLOWED_PARTITIONS_ANNOTATION,
    BRIDGE_ALLOWED_QOS_ANNOTATION,
    BRIDGE_COMMENT_TAG,
    BRIDGE_ISOLATION_ANNOTATION,
    BRIDGE_PARTITION_ANNOTATION,
    BRIDGE_QOS_ANNOTATION,
    BRIDGE_TIME_LIMIT_ANNOTATION,
    bridge_account,
)


@dataclass(frozen=True)
class Defaults:
    """The cluster's ``spec.bridge`` choices a pod or its namespace may override."""

    partition: str
    qos: str = ""
    #: the cluster has accounting: each namespace's jobs go to its own account (``naming.bridge_account``)
    accounts: bool = False


@dataclass(frozen=True)
class Refusal:
    """Why a workload gets no job; ``reason`` is PodScheduled's."""

    reason: str
    message: str


@dataclass(frozen=True)
class Placeholder:
    """What a job's comment says it stands for."""

    kind: str
    namespace: str
    name: str
    uid: str
    size: int


def comment(w: Workload) -> str:
    return f"{BRIDGE_COMMENT_TAG} {w.kind}/{w.namespace}/{w.name}/{w.uid} size={w.size}"


def placeholder_of(text: str) -> Placeholder | None:
    """The workload a job's comment names; None for a job that is no placeholder of this bridge."""
    words = text.split()
    if len(words) != 3 or words[0] != BRIDGE_COMMENT_TAG or not words[2].startswith("size="):
        return None
    parts = words[1].split("/")
    size = words[2].removeprefix("size=")
    if len(parts) != 4 or not all(parts) or not size.isdigit():
        return None
    return Placeholder(parts[0], parts[1], parts[2], parts[3], int(size))


def cpus_per_task(size: Size) -> int:
    """Whole CPUs per task: the pod's CPU limit rounded up, at least one."""
    return max(1, math.ceil(size.cpus))


def _choice(key: str, pod: Mapping[str, str], namespace: Mapping[str, str], default: str) -> str:
    return str(pod.get(key) or namespace.get(key) or default).strip()


def _admitted(
    key: str, allowed_key: str, pod: Mapping[str, str], namespace: Mapping[str, str], default: str
) -> str | Refusal:
    """A partition or QoS: the namespace's (an admin's annotation) or the cluster's; a pod's own choice only
    when it is that one or the namespace's ``allowed_key`` lists it (a tenant's pod picks no partition or QoS
    of a higher priority or longer time than its admin gave it)."""
    given = str(namespace.get(key) or default).strip()
    asked = str(pod.get(key) or "").strip()
    if not asked or asked == given:
        return given
    allowed = [a.strip() for a in str(namespace.get(allowed_key) or "").split(",") if a.strip()]
    if asked in allowed:
        return asked
    return Refusal(
        "BadAnnotation",
        f"{key}={asked!r}: the namespace does not let its pods choose it (its admin lists what they may in the"
        f" namespace's annotation {allowed_key}: {', '.join(allowed) or 'nothing'}); without the annotation the"
        f" pod gets {given or 'the default'}",
    )


def job_description(
    w: Workload, defaults: Defaults, namespace_annotations: Mapping[str, str], excluded: Sequence[str] = ()
) -> dict[str, Any] | Refusal:
    """The job for workload ``w`` (its pods share one template), or why it gets none. ``excluded``: Slurm
    nodes whose Kubernetes node its pods may not run on (``warden.bridge.fit``): Slurm allocates none of them."""
    pod = w.pods[0]
    unlimited = [p.name for p in w.pods if not p.size.limited]
    if unlimited:
        return Refusal(
            "NoLimits",
            f"pod {unlimited[0]} has a container without a CPU or memory limit: Slurm allocates by limits, and"
            " only limits keep a pod inside its allocation; set resources.limits (a LimitRange can set them"
            " for the namespace)",
        )
    size = pod.size
    cpus = cpus_per_task(size)
    annotations = pod.annotations
    partition = _admitted(BRIDGE_PARTITION_ANNOTATION, BRIDGE_ALLOWED_PARTITIONS_ANNOTATION, annotations,
                          namespace_annotations, defaults.partition)  # fmt: skip
    qos = _admitted(BRIDGE_QOS_ANNOTATION, BRIDGE_ALLOWED_QOS_ANNOTATION, annotations, namespace_annotations,
                    defaults.qos)  # fmt: skip
    if isinstance(partition, Refusal):
        return partition
    if isinstance(qos, Refusal):
        return qos
    desc: dict[str, Any] = {
        "name": f"k8s:{w.namespace}/{w.name}",
        "flags": ["EXTERNAL_JOB"],
        "comment": comment(w),
        "partition": partition,
        "tasks": w.size,
        "cpus_per_task": cpus,
        "memory_per_cpu": {"set": True, "number": max(1, math.ceil(size.memory_mib / cpus))},
        "minimum_nodes": 1,
        "maximum_nodes": w.size,
    }
    if qos:
        desc["qos"] = qos
    if defaults.accounts:
        desc["account"] = bridge_account(w.namespace)
    if size.gpus:
        desc["tres_per_task"] = f"gres/gpu={size.gpus}"
    # the namespace's time limit (an admin's) is the most a pod gets: one asking more is refused, one asking
    # nothing gets it
    asked, most = (str(a.get(BRIDGE_TIME_LIMIT_ANNOTATION) or "").strip() for a in (annotations, namespace_annotations))
    for limit in (asked, most):
        if limit and not limit.isdigit():
            return Refusal("BadAnnotation", f"{BRIDGE_TIME_LIMIT_ANNOTATION}={limit!r}: give whole minutes, e.g. 30")
    minutes = int(asked) if asked else (math.ceil(pod.deadline_s / 60) if pod.deadline_s else None)
    if most and (minutes is None or minutes > int(most)):
        if asked:
            return Refusal(
                "BadAnnotation",
                f"{BRIDGE_TIME_LIMIT_ANNOTATION}={asked!r} is more than the {most} minutes its namespace gives a pod"
                f" (the namespace's annotation {BRIDGE_TIME_LIMIT_ANNOTATION})",
            )
        minutes = int(most)
    if minutes:
        desc["time_limit"] = {"set": True, "number": minutes}
    isolation = _choice(BRIDGE_ISOLATION_ANNOTATION, annotations, namespace_annotations, "")
    if isolation not in ("", "user"):
        return Refusal(
            "BadAnnotation", f"{BRIDGE_ISOLATION_ANNOTATION}={isolation!r}: the one isolation there is, is `user`"
        )
    if isolation == "user":
        desc["shared"] = ["user"]
    if excluded:
        desc["excluded_nodes"] = sorted(excluded)
    return desc
