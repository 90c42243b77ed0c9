"""Rolling upgrades that never kill a job: a pure planner (pods, revisions and Slurm nodes in, actions out).

A changed pod template of a WorkerSet (image, resources...) replaces no pod by itself. The Slurm sync
runs this plan every few seconds: at most ``max_unavailable`` nodes of a group are out of service for
the upgrade at a time; each pod still on an old revision is drained (reason ``reasons.UPGRADE``), and
deleted once its node runs no job; the WorkerSet controller makes it again from the new template, and
the new slurmd registers. Pods picked to leave (scale-in) are not upgraded. A pod of the new revision that has not
registered yet still counts as unavailable, so batches do not pile up. A node someone else drained (a
person, a health check) keeps its old pod and its drain until they resume it.

With a maintenance window (``maintenance``), nothing is drained while it is closed (the pods still to
upgrade are ``waiting``); once it opens, every pod still to upgrade is drained at once: the window is the
time the group may be out of service, and the reservation before it kept the nodes free of jobs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from warden.slurm import reasons
from warden.slurm.model import Node
from warden.workers.maintenance import Opening
from warden.workers.pod import SetPod


@dataclass(frozen=True)
class Group:
    workerset: str
    update_revision: str
    max_unavailable: int
    pods: tuple[SetPod, ...]
    #: pods a scale-in picked to leave: they go, not upgraded
    leaving: frozenset[str] = frozenset()


@dataclass
class Rollout:
    drains: list[tuple[str, str]] = field(default_factory=list)
    deletes: list[tuple[str, str]] = field(default_factory=list)  # (pod, why)
    waiting: list[str] = field(default_factory=list)  # pods to upgrade once the maintenance window opens


def reason(group: Group) -> str:
    return reasons.upgrade(group.workerset, group.update_revision)


def plan(groups: Iterable[Group], nodes: Mapping[str, Node], window: Opening | None = None) -> Rollout:
    """``window``: the maintenance window now (None: upgrades need none)."""
    out = Rollout()
    for g in groups:
        pods = [p for p in g.pods if p.name not in g.leaving]
        old = sorted((p for p in pods if p.template != g.update_revision and not p.deleting), key=lambda p: -p.ordinal)
        if not old or not g.update_revision:
            continue
        # in a window, every pod still to upgrade goes at once
        limit = len(pods) if window is not None else g.max_unavailable

        def usable(p: SetPod) -> bool:
            node = nodes.get(p.name)
            return node is not None and not node.drained and not node.down

        # out of service for the upgrade: pods going, new ones not registered yet, old ones drained for it
        unavailable = sum(1 for p in pods if p.deleting or (p.template == g.update_revision and not usable(p)))
        draining = [p for p in old if (n := nodes.get(p.name)) is not None and n.drained
                    and n.reason.startswith(reasons.UPGRADE)]  # fmt: skip
        unavailable += len(draining)
        for p in draining:  # drained in a window that has closed since: replaced all the same, once idle
            if not nodes[p.name].busy:
                out.deletes.append((p.name, f"drained for the upgrade and idle: {reason(g)}"))
        if window is not None and not window.open:
            out.waiting.extend(p.name for p in old if p not in draining)
            continue
        for p in old:
            known = nodes.get(p.name)
            if known is not None and known.drained and p not in draining:
                continue  # drained by someone else (a person, a health check): theirs to resume first
            if p in draining or unavailable >= limit:
                continue
            if nodes.get(p.name) is None:
                out.deletes.append((p.name, f"not registered, nothing to wait for: {reason(g)}"))
            else:
                out.drains.append((p.name, reason(g)))
            unavailable += 1
    return out
