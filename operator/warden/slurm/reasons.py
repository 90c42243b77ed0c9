"""Warden's drain reasons: every reason a Warden part gives Slurm when it drains a node, and who it was.

Slurm keeps one free-text reason per drained or down node (``sinfo -R``). Warden's parts start theirs
with a prefix of their own, so that each part undoes only its own drains (the operator resumes a node
it drained for a cordon, the health checks resume what they drained) and the exporter can say who
took a node out of service (its ``reason_class`` label, docs/observability.md). This module is the one
list of those prefixes; the worker's node lifecycle (``warden.node``) gives two of them, and a unit test
holds it, and any drain in the repository's shell, to this list.
"""

from __future__ import annotations

from dataclasses import dataclass

from warden.slurm.model import Node

__all__ = [
    "CLASSES",
    "CORDON",
    "DRAINERS",
    "HEALTH_CHECK",
    "NODE_CONDITION",
    "POD_TERMINATING",
    "QUICK_CHECK",
    "SCALE_IN",
    "UPGRADE",
    "WORKER",
    "Drainer",
    "cordon",
    "drainer_of",
    "reason_class",
    "scale_in",
    "upgrade",
]

#: the NCCL health check (``warden.health.check``)
HEALTH_CHECK = "warden-health:"
#: slurmd's HealthCheckProgram (``warden.health.quickcheck``)
QUICK_CHECK = "warden-quickcheck:"
#: the worker image at start: a GPU worker whose job steps cannot get the NVIDIA driver
WORKER = "warden-worker:"
#: the worker image on SIGTERM: the pod is going (deleted, evicted, its node drained by Kubernetes)
POD_TERMINATING = "warden: pod terminating"
#: the operator: the worker pod's Kubernetes node is cordoned
CORDON = "warden: Kubernetes node "
#: the operator: the worker pod's Kubernetes node has a condition spec.nodeConditionDrains names
#: (``warden.nodeconditions``)
NODE_CONDITION = "warden-condition:"
#: the operator: the node's worker group shrinks and this pod leaves
SCALE_IN = "warden: scale-in"
#: the operator: the pod moves to its WorkerSet's new template
UPGRADE = "warden: upgrade"


@dataclass(frozen=True)
class Drainer:
    prefix: str
    #: the exporter's ``reason_class`` label
    reason_class: str
    who: str


DRAINERS: tuple[Drainer, ...] = (
    Drainer(HEALTH_CHECK, "health_check", "the NCCL health check (docs/health-checks.md)"),
    Drainer(QUICK_CHECK, "health_check", "the quick check, slurmd's HealthCheckProgram (docs/health-checks.md)"),
    Drainer(WORKER, "health_check", "the worker pod at start: a GPU worker without the NVIDIA driver"),
    Drainer(POD_TERMINATING, "kubernetes", "the worker pod leaving: Kubernetes stops it"),
    Drainer(CORDON, "kubernetes", "the operator: the pod's Kubernetes node is cordoned"),
    Drainer(NODE_CONDITION, "node_condition", "the operator: the pod's Kubernetes node has a named condition"),
    Drainer(SCALE_IN, "scale_in", "the operator: the worker group shrinks"),
    Drainer(UPGRADE, "upgrade", "the operator: the pod moves to a new template"),
)

#: every ``reason_class``: in service, one per drainer class, a person's drain, Slurm's own (down)
CLASSES = ("none", *dict.fromkeys(d.reason_class for d in DRAINERS), "person", "slurm")


def drainer_of(reason: str) -> Drainer | None:
    """The Warden part whose drain this reason is; None for anyone else's."""
    return next((d for d in DRAINERS if reason.startswith(d.prefix)), None)


def reason_class(node: Node) -> str:
    """Who took the node out of service: ``none`` (in service), a Warden part's class (``DRAINERS``),
    ``slurm`` (down with Slurm's own reason, not drained), ``person`` (drained by anyone else)."""
    reason = node.held_reason
    if not reason and not (node.drained or node.down):
        return "none"
    drainer = drainer_of(reason)
    if drainer is not None:
        return drainer.reason_class
    return "person" if node.drained else "slurm"


def cordon(k8s_node: str) -> str:
    return f"{CORDON}{k8s_node} cordoned"


def scale_in(workerset: str, desired: int) -> str:
    return f"{SCALE_IN}: {workerset} shrinks to {desired} nodes"


def upgrade(workerset: str, revision: str) -> str:
    return f"{UPGRADE}: {workerset} moves to revision {revision}"
