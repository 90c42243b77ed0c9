"""Scale-in that never kills a job: a pure planner (groups and Slurm nodes in, actions out).

When a worker group's `replicas` goes down, the reconcile keeps its StatefulSet at the size it has
(``hold_replicas``) and this plan, run by the Slurm sync every few seconds, drains the Slurm nodes of
the pods that will go (a StatefulSet removes its highest ordinals) with a reason starting
``SCALE_IN_PREFIX``. Once every one of them is drained and runs no job (or never registered), it
scales the StatefulSet down; the pods then leave Slurm themselves (their node records deleted).
Scaled back up before that, the nodes that stay are resumed: only drains with that prefix ever are.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from warden.slurm import Node

SCALE_IN_PREFIX = "warden: scale-in"


@dataclass(frozen=True)
class Group:
    statefulset: str
    desired: int  # spec.workerGroups[].replicas
    current: int  # the live StatefulSet's replicas


@dataclass
class ScaleIn:
    drains: list[tuple[str, str]] = field(default_factory=list)
    resumes: list[str] = field(default_factory=list)
    scale: list[tuple[str, int]] = field(default_factory=list)  # (StatefulSet, replicas)
    waiting: dict[str, list[str]] = field(default_factory=dict)  # StatefulSet -> its leaving nodes still busy


def reason(group: Group) -> str:
    return f"{SCALE_IN_PREFIX}: {group.statefulset} goes from {group.current} to {group.desired} nodes"


def plan(groups: Iterable[Group], nodes: Mapping[str, Node]) -> ScaleIn:
    out = ScaleIn()
    for g in groups:
        for i in range(min(g.desired, g.current)):
            node = nodes.get(f"{g.statefulset}-{i}")
            if node is not None and node.drained and node.reason.startswith(SCALE_IN_PREFIX):
                out.resumes.append(node.name)
        leaving = [f"{g.statefulset}-{i}" for i in range(g.desired, g.current)]
        if not leaving:
            continue
        ready = True
        for name in leaving:
            node = nodes.get(name)
            if node is None:
                continue  # not registered: no job can run there
            if not node.drained:
                out.drains.append((name, reason(g)))
                ready = False  # drained this round: idle is only sure at the next look
            elif node.busy:
                out.waiting.setdefault(g.statefulset, []).append(name)
                ready = False
        if ready:
            out.scale.append((g.statefulset, g.desired))
    return out
