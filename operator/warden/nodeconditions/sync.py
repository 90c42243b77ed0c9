"""The Slurm sync's step for node conditions: read what it needs, plan (``plan``), carry the plan out.

Each action goes through ``SlurmActions`` as the cordon's do: an Event about the SlurmCluster, related
to the worker pod (``NodeConditionDrained`` a Warning, ``NodeConditionCleared``), counted in
``warden_slurm_actions_total{action=...}``, a failure told once and tried again the next round.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Protocol

from warden.events import Ref
from warden.kube.client import Kube
from warden.model import SlurmClusterSpec
from warden.nodeconditions.plan import NodeCondition, Plan, Worker, plan
from warden.nodeconditions.watch import NodeConditionWatch
from warden.slurm.model import Node
from warden.slurm.rest import SlurmRest


class Actions(Protocol):
    """How an action on a Slurm node is run and told (``warden.slurmactions.SlurmActions``)."""

    def act(self, cluster: Ref, pod: str, action: Callable[[], None], reason: str, message: str) -> bool: ...


class NodeConditionDrains:
    def __init__(self, kube: Kube) -> None:
        self.watch = NodeConditionWatch(kube)

    def plan(
        self, spec: SlurmClusterSpec, pods: Sequence[Worker], nodes: Mapping[str, Node], cordoned: Mapping[str, bool]
    ) -> Plan:
        """This round's drains and resumes. A spec that names no condition needs no node read: every drain
        of this kind left (the spec's conditions removed) is lifted."""
        on = {p.k8s_node for p in pods if p.k8s_node is not None}
        conditions: Mapping[str, Sequence[NodeCondition]] | None
        if spec.node_condition_drains:
            conditions = self.watch.conditions(on)
            if conditions is None:  # not listed yet: nothing is known, nothing is done
                return Plan()
        else:
            conditions = dict.fromkeys(on, ())
        return plan(spec.node_condition_drains, pods, nodes, conditions, cordoned)

    @staticmethod
    def act(todo: Plan, cluster: Ref, rest: SlurmRest, actions: Actions) -> None:
        for a in todo.actions:
            do = partial(rest.resume, a.node) if a.reason is None else partial(rest.drain, a.node, a.reason)
            actions.act(cluster, a.node, do, a.event, a.message)

    def stop(self) -> None:
        self.watch.stop()
