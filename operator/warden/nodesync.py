"""Slurm and Kubernetes node state, both ways: a pure planner (observations in, actions out).

Slurm to Kubernetes: every worker pod carries the condition ``slurm.warden.dev/SlurmNode`` (True when
Slurm may start jobs there; the reason is the node's state: Idle, Allocated, Mixed, Drained,
Draining, Down, NotResponding, NotRegistered; the message Slurm's own state and reason), status
counts what registered, and Events mark nodes going down or drained.

Kubernetes to Slurm: a worker pod on a cordoned Kubernetes node (``kubectl cordon``/``drain``) gets its
Slurm node drained with a reason starting ``reasons.CORDON``; once the Kubernetes node is schedulable
again the Slurm node is resumed, and only then. A drain whose reason does not start with that prefix
(a person's, the health checks') is never undone here.

Evictions: a worker pod whose node runs a job carries the label ``slurm.warden.dev/busy=true``, which a
PodDisruptionBudget protects (``warden.render.budgets``); the label goes once the node is idle.

Housekeeping: a Slurm node record whose pod is gone is deleted (no DOWN ghosts). What happens to the
pods themselves (made, scaled in, upgraded, made afresh when slurmd never registers) is the WorkerSet
controller's (``warden.workers``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from warden.kube.manifest import Manifest
from warden.model import DrainedNode, SlurmNodesStatus
from warden.slurm import confighash, reasons
from warden.slurm.model import Node

#: the pod condition type that carries the Slurm node state
CONDITION = "slurm.warden.dev/SlurmNode"

# Reasons of a condition whose node takes no new jobs (Events on the way in).
UNUSABLE = {"Drained": "SlurmNodeDrained", "Draining": "SlurmNodeDrained", "Down": "SlurmNodeDown",
            "NotResponding": "SlurmNodeDown"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class PodCondition:
    status: str  # "True" | "False"
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class WorkerPod:
    name: str  # also its Slurm node name
    k8s_node: str | None  # spec.nodeName
    condition: PodCondition | None  # what the pod carries now
    deleting: bool = False
    busy_label: bool = False  # the pod carries slurm.warden.dev/busy=true
    group: str | None = None  # its worker group (label slurm.warden.dev/worker-group)


@dataclass(frozen=True)
class PodEvent:
    reason: str  # one of warden.events.REASONS
    pod: str  # the worker pod (and Slurm node) it is about
    message: str


@dataclass
class Plan:
    conditions: dict[str, PodCondition] = field(default_factory=dict)  # pod -> changed condition
    busy: dict[str, bool] = field(default_factory=dict)  # pod -> new value of its busy label
    drains: list[tuple[str, str]] = field(default_factory=list)  # (node, reason)
    resumes: list[str] = field(default_factory=list)
    delete_nodes: list[str] = field(default_factory=list)
    events: list[PodEvent] = field(default_factory=list)
    summary: SlurmNodesStatus = field(default_factory=SlurmNodesStatus)


def pod_condition(pod: Manifest, type_: str) -> PodCondition | None:
    """The pod's condition of that type, as it carries it now."""
    condition = None
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            condition = PodCondition(c.get("status", ""), c.get("reason", ""), c.get("message", ""))
    return condition


def condition_manifest(type_: str, cond: PodCondition, stamp: str) -> Manifest:
    return {
        "type": type_,
        "status": cond.status,
        "reason": cond.reason,
        "message": cond.message,
        "lastTransitionTime": stamp,
    }


def condition_of(node: Node | None) -> PodCondition:
    if node is None:
        return PodCondition("False", "NotRegistered", "slurmd has not registered with slurmctld")
    message = node.describe_state() + (f": {node.held_reason}" if node.held_reason else "")
    if node.drained:
        return PodCondition("False", "Draining" if node.busy else "Drained", message)
    if "NOT_RESPONDING" in node.flags:
        return PodCondition("False", "NotResponding", message)
    if node.down:
        return PodCondition("False", "Down", message)
    return PodCondition("True", node.state.capitalize(), message)


class _Conditions:
    """``condition_of``, one condition for nodes that look alike (ten thousand allocated nodes: one)."""

    def __init__(self) -> None:
        self._seen: dict[tuple[str, frozenset[str], str], PodCondition] = {}

    def __call__(self, node: Node | None) -> PodCondition:
        if node is None:
            return condition_of(None)
        look = (node.state, node.flags, node.held_reason)  # what condition_of reads of a node
        cond = self._seen.get(look)
        if cond is None:
            cond = self._seen[look] = condition_of(node)
        return cond


def plan(
    pods: Iterable[WorkerPod],
    nodes: Iterable[Node],
    cordoned: Mapping[str, bool],
) -> Plan:
    """``nodes``: what slurmctld listed, read BEFORE ``pods`` (a node listed there had its pod then, so
    one missing from ``pods`` is gone for good). ``cordoned``: Kubernetes node name -> unschedulable."""
    out = Plan()
    conditions = _Conditions()
    by_name = {n.name: n for n in nodes if n.state != "FUTURE"}  # FUTURE: slurm.conf's hidden capacity
    live = {p.name: p for p in pods}
    registered = usable = 0
    versions: dict[str, int] = {}
    configs: dict[str, int] = {}
    drained: list[DrainedNode] = []
    down: list[DrainedNode] = []

    for name in sorted(set(by_name) - set(live)):
        out.delete_nodes.append(name)

    for pod in sorted(live.values(), key=lambda p: p.name):
        if pod.deleting:
            continue  # slurmd drains and deletes its own node on the way out
        node = by_name.get(pod.name)
        cond = conditions(node)
        if cond != pod.condition:
            out.conditions[pod.name] = cond
            before = pod.condition.reason if pod.condition else None
            if cond.reason in UNUSABLE and UNUSABLE.get(before or "") != UNUSABLE[cond.reason]:
                out.events.append(PodEvent(UNUSABLE[cond.reason], pod.name, f"{pod.name}: {cond.message}"))
            elif cond.status == "True" and before in UNUSABLE:
                out.events.append(PodEvent("SlurmNodeUsable", pod.name, f"{pod.name}: {cond.message}"))
        busy = node is not None and node.busy
        if busy != pod.busy_label:
            out.busy[pod.name] = busy
        if node is None:
            continue  # a pod whose slurmd never registers: warden.workers.registration
        registered += 1
        usable += cond.status == "True"
        if node.version:
            versions[node.version] = versions.get(node.version, 0) + 1
        stamp = confighash.from_extra(node.extra)
        if stamp:
            configs[stamp] = configs.get(stamp, 0) + 1
        if node.drained:
            drained.append(DrainedNode(node=node.name, reason=node.reason))
        elif node.down:
            down.append(DrainedNode(node=node.name, reason=node.held_reason or node.describe_state()))

        is_cordoned = pod.k8s_node is not None and cordoned.get(pod.k8s_node, False)
        if is_cordoned and not node.drained:
            assert pod.k8s_node is not None
            out.drains.append((node.name, reasons.cordon(pod.k8s_node)))
        elif not is_cordoned and node.drained and node.reason.startswith(reasons.CORDON):  # only these are undone
            out.resumes.append(node.name)

    out.summary = SlurmNodesStatus(
        registered=registered,
        usable=usable,
        drained=drained,
        down=down,
        slurmd_versions=dict(sorted(versions.items())),
        slurm_configs=dict(sorted(configs.items())),
    )
    return out
