"""Which slurmctld is in charge, with backup controllers (``spec.controller.replicas`` 2-3): a pure
planner (observations in, actions out), as ``warden.nodesync`` is for the workers.

The controller pods decide, from Slurm's heartbeat, and the operator relays: the one in charge is the
writer of the heartbeat file in the StateSaveLocation they share while its beat is at most
SlurmctldTimeout old; nobody is when it is older (the one that was hangs or died and no backup took over
yet). Each controller pod serves that verdict (``warden.ha.ctld``, ``GET /in-charge``) and the operator
asks it (``warden.ha.verdict``); it never decides again, from slurmrestd's ping or otherwise: the first
controller to answer a ping is not the one in charge when, say, backup 1 is back in standby while
backup 2 holds control, or while a hung controller's beat is not stale yet.

slurmrestd's ping (``SlurmRest.pings``) still says which slurmctld answers. Every controller pod then
carries the condition ``slurm.warden.dev/SlurmctldInCharge``: True with reason ``InCharge`` on the one
the verdict names, False with ``Standby`` on the others that answer the ping, False with
``NotResponding`` on the rest. When the verdict is that nobody is in charge, every pod's message says so
and why (``Verdict.nobody``: whose beat, how old, against which SlurmctldTimeout).

What a round does not know it leaves as it is (a passing doubt: the next round asks again):

- no verdict (no pod answered): the pods that do not answer the ping are marked ``NotResponding``; the
  others keep their condition, and nothing is recorded;
- no ping (slurmrestd's failed): no pod's condition changes; the verdict is still recorded and a
  takeover told.

Status records the one in charge (``status.slurmctldInCharge``), and an Event ``ControllerTakeover``
says when the verdict names another than status recorded: level-based, so an operator restarted after a
takeover it already told of says nothing twice. When nobody is in charge, ``Plan.in_charge`` is None,
which status takes as "not asked" (``warden.model.Slurmctld``): it keeps the last one that was in
charge rather than recording nobody. That is deliberate: the pods' conditions tell of the gap, and the
takeover that ends it is told against the one that was in charge before it (recording nobody would
make the next one in charge a first sight, never told).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from warden import naming
from warden.ha.verdict import Verdict
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
    #: the controller in charge now, as the pods' verdict says; None when nobody is, or no pod said
    in_charge: str | None = None
    conditions: dict[str, PodCondition] = field(default_factory=dict)  # pod -> changed condition
    events: list[PodEvent] = field(default_factory=list)


def in_charge(verdict: Verdict | None) -> str | None:
    """The slurmctld in charge, as the pods' verdict says (None: nobody is, or no pod said)."""
    return verdict.in_charge if verdict is not None else None


def condition_of(name: str, pings: Sequence[ControllerPing], verdict: Verdict | None) -> PodCondition | None:
    """The condition of controller pod ``name``, given the pings and the pods' verdict; None: this round
    cannot tell (no verdict and its slurmctld answers: in charge or standing by), it keeps its own."""
    ping = next((p for p in pings if p.hostname == name), None)
    if verdict is not None and name == verdict.in_charge:
        return PodCondition("True", "InCharge", "slurmctld here is in charge")
    if verdict is None:
        if ping is not None and ping.responding:
            return None
        tail = ""
    else:
        tail = f"; {verdict.in_charge} is in charge" if verdict.in_charge else f"; {verdict.nobody()}"
    if ping is None:
        return PodCondition("False", "NotResponding", f"slurmctld's ping does not list this controller{tail}")
    if ping.responding:
        return PodCondition("False", "Standby", f"slurmctld here answers and stands by{tail}")
    return PodCondition("False", "NotResponding", f"slurmctld here does not answer the ping{tail}")


def plan(
    pods: Iterable[ControllerPod],
    pings: Sequence[ControllerPing] | None,
    verdict: Verdict | None,
    previous: str | None,
) -> Plan:
    """``pings``: slurmrestd's ping answer (None: it failed); ``verdict``: the controller pods' (None: no
    pod gave one); ``previous``: the controller in charge as status recorded it (None: none recorded
    yet, which is no takeover)."""
    out = Plan(in_charge=in_charge(verdict))
    if pings is not None:
        for pod in sorted(pods, key=lambda p: p.name):
            if pod.deleting:
                continue
            cond = condition_of(pod.name, pings, verdict)
            if cond is not None and cond != pod.condition:
                out.conditions[pod.name] = cond
    if out.in_charge is not None and previous is not None and out.in_charge != previous:
        message = f"slurmctld in charge moved from {previous} to {out.in_charge}"
        out.events.append(PodEvent("ControllerTakeover", out.in_charge, message))
    return out
