"""The pure half: Kubernetes node conditions and Slurm node states in, drains and resumes out.

A worker pod's Slurm node is drained while a condition its SlurmCluster names
(``spec.nodeConditionDrains``) holds on the pod's Kubernetes node; the reason Slurm keeps starts with
``reasons.NODE_CONDITION`` and carries each holding condition's type, reason and message (``sinfo -R``).
Once no named condition holds, the drain is lifted, and only a drain of this prefix: a person's, the
health checks', a scale-in's or an upgrade's are never touched, and a node someone else drained stays
theirs while a condition holds (their reason shows; a condition still holding when they resume it drains
it again the next round).

The cordon (``warden.nodesync``) is the other operator drain that follows the Kubernetes node; the two
hand over, so that a node both want drained never takes a job in between:
- a condition holding on a cordoned node drains with the condition's reason (the cordon's drain is not
  made, or is replaced when the node is uncordoned);
- a condition clearing on a still cordoned node gives the node back to the cordon (its reason), and the
  uncordon resumes it.
The Slurm sync leaves out the cordon's drain or resume of a node this plan acts on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from warden.model import NodeConditionDrain
from warden.slurm import reasons
from warden.slurm.model import Node

#: the longest reason given to Slurm; a longer one is cut, ending in "..."
REASON_LIMIT = 256
_SPACE = re.compile(r"\s+")


class Worker(Protocol):
    """A worker pod as the plan reads it (``warden.nodesync.WorkerPod`` is one)."""

    @property
    def name(self) -> str: ...  # also its Slurm node's name
    @property
    def k8s_node(self) -> str | None: ...
    @property
    def group(self) -> str | None: ...
    @property
    def deleting(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class NodeCondition:
    """One condition of a Kubernetes node, as ``status.conditions`` holds it."""

    type: str
    status: str
    reason: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True)
class Action:
    """A drain (``reason`` set) or a resume (``reason`` None) of one Slurm node, and the Event saying so."""

    node: str
    reason: str | None
    event: str  # a reason of warden.events.REASONS
    message: str


@dataclass
class Plan:
    actions: list[Action] = field(default_factory=list)

    @property
    def nodes(self) -> set[str]:
        """The Slurm nodes this plan acts on (the cordon's plan leaves them alone this round)."""
        return {a.node for a in self.actions}


def _clean(text: str) -> str:
    """One line: Slurm keeps the reason as given, and ``sinfo -R`` prints one line per node."""
    return _SPACE.sub(" ", "".join(c if c.isprintable() else " " for c in text)).strip()


def drain_reason(k8s_node: str, holding: Sequence[NodeCondition]) -> str:
    """``warden-condition: GpuXidError (Xid79): GPU fell off the bus (node gpu-7)``; several conditions
    are joined by ``; ``, in the order of their types; a status other than True is written after the type
    (``Ready=Unknown``). At most ``REASON_LIMIT`` characters: a longer message is cut."""
    parts = []
    for c in sorted(holding, key=lambda c: (c.type, c.status)):
        what = c.type if c.status == "True" else f"{c.type}={c.status}"
        if c.reason:
            what += f" ({_clean(c.reason)})"
        message = _clean(c.message)
        parts.append(f"{what}: {message}" if message else what)
    head, tail = f"{reasons.NODE_CONDITION} {'; '.join(parts)}", f" (node {k8s_node})"
    if len(head) + len(tail) > REASON_LIMIT:
        head = head[: max(REASON_LIMIT - len(tail) - 3, len(reasons.NODE_CONDITION))].rstrip() + "..."
    return head + tail


def holding(
    rules: Sequence[NodeConditionDrain], group: str | None, conditions: Iterable[NodeCondition]
) -> list[NodeCondition]:
    """The node's conditions that drain the workers of ``group`` (a pod without a group: only rules that
    name no group)."""
    named = [r for r in rules if not r.worker_groups or (group is not None and group in r.worker_groups)]
    return [c for c in conditions if any(r.type == c.type and r.status == c.status for r in named)]


def plan(
    rules: Sequence[NodeConditionDrain],
    pods: Iterable[Worker],
    nodes: Mapping[str, Node],
    conditions: Mapping[str, Sequence[NodeCondition]],
    cordoned: Mapping[str, bool],
) -> Plan:
    """``nodes``: Slurm's nodes by name (a worker pod's Slurm node has its name); ``conditions``: each
    Kubernetes node's conditions, by node name (a pod whose node is not there is left alone: nothing is
    known of it); ``cordoned``: Kubernetes node name -> unschedulable."""
    out = Plan()
    for pod in sorted(pods, key=lambda p: p.name):
        node = nodes.get(pod.name)
        if pod.deleting or node is None or pod.k8s_node is None or pod.k8s_node not in conditions:
            continue  # a leaving pod drains itself; an unregistered one has nothing to drain
        k8s_node = pod.k8s_node
        held = holding(rules, pod.group, conditions[k8s_node])
        ours = node.drained and node.reason.startswith(reasons.NODE_CONDITION)
        is_cordoned = cordoned.get(k8s_node, False)
        # the cordon's drain on an uncordoned node: lifted this round, unless a condition holds
        lifting = node.drained and node.reason.startswith(reasons.CORDON) and not is_cordoned
        if held:
            want = drain_reason(k8s_node, held)
            # Slurm keeps a reason after RESUME: an undrained node is drained whatever its old reason says
            if not node.drained or ((ours or lifting) and node.reason != want):
                out.actions.append(Action(node.name, want, "NodeConditionDrained", f"{node.name}: drained: {want}"))
        elif ours:
            if is_cordoned:  # back to the cordon, whose drain it would have been
                why = reasons.cordon(k8s_node)
                message = f"{node.name}: conditions cleared on {k8s_node}; still drained: {why}"
                out.actions.append(Action(node.name, why, "NodeConditionCleared", message))
            else:
                message = f"{node.name}: conditions cleared on {k8s_node}: resumed"
                out.actions.append(Action(node.name, None, "NodeConditionCleared", message))
    return out
