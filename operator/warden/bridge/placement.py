"""Where the pods of a running job go (pure).

Slurm allocated the job CPUs on some of its nodes (``Job.allocation``: node, CPUs). Each Slurm node
holds ``CPUs // cpus_per_task`` of the job's pods, in Slurm's order of the nodes; pods already bound
keep their places, the others take the free ones in completion-index, then name order. A Slurm node is
a Kubernetes node through ``kube_node_of``: the Kubernetes node of a shared worker group's worker pod
of that name, or a Kubernetes node of the same name an admin labelled an external node of the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from warden.bridge.workloads import PodView
from warden.naming import BRIDGE_EXTERNAL_NODE_LABEL


@dataclass(frozen=True)
class Place:
    pod: str
    slurm_node: str
    kube_node: str


def slots(allocation: Sequence[tuple[str, int]], cpus_per_task: int) -> list[str]:
    """One Slurm node name per task the allocation holds."""
    per = max(1, cpus_per_task)
    return [node for node, cpus in allocation for _ in range(cpus // per)]


def place(
    allocation: Sequence[tuple[str, int]],
    cpus_per_task: int,
    pods: Sequence[PodView],
    kube_node_of: Callable[[str], str | None],
    why_not: Callable[[PodView, str], str | None] = lambda pod, node: None,
) -> list[Place] | str:
    """Places for the unbound live ``pods`` (in order) beside the bound ones, or why they cannot all be
    placed (then none is: a gang starts whole). ``why_not``: why a pod may not run on a Kubernetes node
    (its taints, the pod's nodeSelector and required affinity: ``warden.bridge.fit``), None when it may."""
    free = slots(allocation, cpus_per_task)
    for p in pods:
        if p.live and p.bound and p.slurm_node in free:
            free.remove(p.slurm_node)
    waiting = [p for p in pods if p.live and not p.bound]
    if len(waiting) > len(free):
        return f"the allocation holds {len(free)} more pods, {len(waiting)} wait"
    out = []
    for p, node in zip(waiting, free, strict=False):
        kube = kube_node_of(node)
        if not kube:
            return (
                f"Slurm node {node} is no Kubernetes node the bridge may use: neither a worker pod's nor one an"
                f" admin labelled {BRIDGE_EXTERNAL_NODE_LABEL}=<cluster-namespace>.<cluster>"
            )
        if (why := why_not(p, kube)) is not None:
            return f"Slurm node {node} is Kubernetes node {kube}, where pod {p.name} may not run: {why}"
        out.append(Place(p.name, node, kube))
    return out
