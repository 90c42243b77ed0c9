"""Scale-in that never kills a job and frees the right nodes: a pure planner (sets, pods and Slurm in,
actions out).

When a WorkerSet has more live pods than its ``replicas``, this plan, run by the Slurm sync every few
seconds, picks the pods that leave, in this order:

1. those already picked (annotated ``leaving-since``): a choice holds from one look to the next;
2. those whose slurmd never registered (no job can be there);
3. those whose node a person or a health check drained (nobody may start jobs there anyway);
4. idle nodes;
5. busy nodes, the one whose jobs end soonest first (Slurm's end time: start + time limit);
6. and among equals, the highest ordinal.

A picked pod is annotated, its node drained (reason ``reasons.SCALE_IN``), and the pod deleted once the
node runs no job, each on its own (one busy node does not hold back the others), or once it has waited
``timeout`` seconds when the set has one. Scaled back up meanwhile, the pods no longer needed to go
are un-picked and their nodes resumed: only drains with that prefix ever are.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from warden.slurm import reasons
from warden.slurm.model import Node
from warden.workers.pod import SetPod


@dataclass(frozen=True)
class Group:
    workerset: str
    desired: int
    pods: tuple[SetPod, ...]
    timeout: float | None = None  # seconds a drained, still busy leaving node may wait


@dataclass
class ScaleIn:
    pick: list[str] = field(default_factory=list)  # pods to annotate as leaving
    unpick: list[str] = field(default_factory=list)
    drains: list[tuple[str, str]] = field(default_factory=list)
    resumes: list[str] = field(default_factory=list)
    deletes: list[tuple[str, str]] = field(default_factory=list)  # (pod, why)
    waiting: dict[str, list[str]] = field(default_factory=dict)  # WorkerSet -> its leaving nodes still busy


def reason(group: Group) -> str:
    return reasons.scale_in(group.workerset, group.desired)


def ours(node: Node | None) -> bool:
    return node is not None and node.drained and node.reason.startswith(reasons.SCALE_IN)


#: the rank of a busy node not yet picked: ordered by its jobs' end
BUSY_TIER = 4


def rank(pod: SetPod, node: Node | None, ends: float | None) -> tuple[int, float, int]:
    """Sort key: lower leaves first (see the module's order)."""
    if pod.leaving_since is not None:
        tier, when = 0, pod.leaving_since
    elif node is None:
        tier, when = 1, 0.0
    elif node.drained and not ours(node):
        tier, when = 2, 0.0
    elif not node.busy:
        tier, when = 3, 0.0
    else:
        tier, when = BUSY_TIER, ends if ends is not None else math.inf
    return tier, when, -pod.ordinal


def plan(groups: Iterable[Group], nodes: Mapping[str, Node], ends: Mapping[str, float] | None, now: float) -> ScaleIn:
    """``ends``: for a node running jobs, when the last of them is due to end (epoch seconds); None when
    Slurm's jobs could not be read this round: then no busy node is picked (a pick is final, and by
    ordinal alone it could take the node of the longest job); the next round picks it."""
    out = ScaleIn()
    known = ends or {}
    for g in groups:
        live = [p for p in g.pods if not p.deleting]
        order = sorted(live, key=lambda p: rank(p, nodes.get(p.name), known.get(p.name)))
        leaving = order[: max(0, len(live) - g.desired)]
        if ends is None:
            leaving = [p for p in leaving if rank(p, nodes.get(p.name), None)[0] < BUSY_TIER]
        for p in order[len(leaving) :]:
            if p.leaving_since is not None:
                out.unpick.append(p.name)
            if ours(nodes.get(p.name)):
                out.resumes.append(p.name)
        for p in leaving:
            node = nodes.get(p.name)
            if p.leaving_since is None:
                out.pick.append(p.name)
            if node is None:
                out.deletes.append((p.name, f"not registered with Slurm, nothing to wait for: {reason(g)}"))
            elif not node.drained:
                out.drains.append((p.name, reason(g)))  # idle is only sure at the next look
            elif not node.busy:
                out.deletes.append((p.name, f"drained and idle: {reason(g)}"))
            elif g.timeout is not None and p.leaving_since is not None and now - p.leaving_since >= g.timeout:
                out.deletes.append((p.name, f"still running jobs after the {g.timeout:.0f} s bound: {reason(g)}"))
            else:
                out.waiting.setdefault(g.workerset, []).append(p.name)
    return out
