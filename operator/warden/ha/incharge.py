"""Which slurmctld is in charge, with backup controllers (``spec.controller.replicas`` 2-3): a pure
planner (observations in, actions out), as ``warden.nodesync`` is for the workers.

Slurm decides, not the operator: of the SlurmctldHost lines (``<cluster>-controller-0``, the primary,
then its backups, ``naming.Names.controller_pods``), the first whose slurmctld runs is in charge; a
backup takes over when the ones before it stop answering (a primary that returns meanwhile stands by
without a slurmctld until the backup stops: images/controller/warden-ctld-ha.sh). The
operator reads that from slurmrestd's ping (``SlurmRest.pings``), in the same order: the controller in
charge is the first that responds. (The ping answer's ``primary`` and ``mode`` only name the position
in the list, not who is in charge.)

Every controller pod then carries the condition ``slurm.warden.dev/SlurmctldInCharge``: True with
reason ``InCharge`` on the one in charge, False with ``Standby`` on the others that answer, False with
``NotResponding`` on the rest. Status records the one in charge (``status.slurmctldInCharge``), and an
Event ``ControllerTakeover`` says when it is another than status recorded: level-based, so an operator
restarted after a takeover it already told of says nothing twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from warden import naming
from warden.nodesync import PodCondition, PodEvent
from warden.slurm.rest import ControllerPing

#: the pod condition type that says whether a controller pod's slurmctld is the one in charge
CONDITION = f"{naming.LABEL_PREFIX}/SlurmctldInCharge"


@dataclass(frozen=True)
class ControllerPod:
    name: str  # also its SlurmctldHost name, the ``hostname`` of its ping
    condition: PodCondition | None  # what the pod carries now
    deleting: bool = False


@dataclass
class Plan:
    #: the controller in charge now; None when none answered the ping
    in_charge: str | None = None
    conditions: dict[str, PodCondition] = field(default_factory=dict)  # pod -> changed condition
    events: list[PodEvent] = field(default_factory=list)


def in_charge(pings: Iterable[ControllerPing]) -> str | None:
    """The slurmctld in charge: the first in SlurmctldHost order that responds (None: none does)."""
    return next((p.hostname for p in pings if p.responding and p.hostname), None)


def condition_of(name: str, pings: Iterable[ControllerPing], charge: str | None) -> PodCondition:
    """The condition of controller pod ``name``, given the pings and the controller in charge."""
    ping = next((p for p in pings if p.hostname == name), None)
    if ping is None:
        return PodCondition("False", "NotResponding", "slurmctld's ping does not list this controller")
    if name == charge:
        return PodCondition("True", "InCharge", "slurmctld here is in charge")
    if ping.responding:
        return PodCondition("False", "Standby", f"slurmctld here answers and stands by; {charge} is in charge")
    return PodCondition("False", "NotResponding", "slurmctld here does not answer the ping")


def plan(pods: Iterable[ControllerPod], pings: Iterable[ControllerPing], previous: str | None) -> Plan:
    """``pings``: slurmrestd's ping answer, in SlurmctldHost order; ``previous``: the controller in charge
    as status recorded it (None: none recorded yet, which is no takeover)."""
    pings = list(pings)
    out = Plan(in_charge=in_charge(pings))
    for pod in sorted(pods, key=lambda p: p.name):
        if pod.deleting:
            continue
        cond = condition_of(pod.name, pings, out.in_charge)
        if cond != pod.condition:
            out.conditions[pod.name] = cond
    if out.in_charge is not None and previous is not None and out.in_charge != previous:
        message = f"slurmctld in charge moved from {previous} to {out.in_charge}"
        out.events.append(PodEvent("ControllerTakeover", out.in_charge, message))
    return out
