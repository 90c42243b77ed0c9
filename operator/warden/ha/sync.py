"""Who is in charge, carried out in each round of the Slurm sync (``warden.slurmsync``) of a cluster with
backup controllers: the controller pods' verdict asked (``warden.ha.verdict``: they decide, from Slurm's
heartbeat) and slurmrestd's ping (which slurmctld answers), planned against the controller pods
(``incharge.plan``), the pods' conditions written and a takeover told (an Event)."""

from __future__ import annotations

import logging

from warden import naming
from warden.events import Event, Ref
from warden.ha import incharge, verdict
from warden.ha.incharge import ControllerPod
from warden.kube.client import Kube
from warden.kube.events import EventRecorder
from warden.naming import Names
from warden.nodesync import condition_manifest, pod_condition
from warden.render.pods import Manifest
from warden.slurm.model import SlurmError
from warden.slurm.rest import ControllerPing, SlurmRest

log = logging.getLogger(__name__)


def controller_pod(pod: Manifest) -> ControllerPod:
    meta = pod["metadata"]
    return ControllerPod(
        name=meta["name"],
        condition=pod_condition(pod, incharge.CONDITION),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def ask(kube: Kube, body: Manifest, rest: SlurmRest, port: int = naming.IN_CHARGE_PORT) -> incharge.Plan | None:
    """Which slurmctld is in charge (the controller pods' verdict, asked on ``port``) and which answer
    (slurmrestd's ping), planned against the controller pods' conditions and the one status recorded.
    None when neither the ping nor any pod answered: the reads just answered, so that is a passing doubt;
    pods and status keep what they say. Either alone makes a plan of what it tells (``incharge``)."""
    meta = body["metadata"]
    who = f"SlurmCluster {meta['namespace']}/{meta['name']}"
    names = Names(cluster=meta["name"], namespace=meta["namespace"])
    raw_pods = kube.list("v1", "Pod", meta["namespace"], names.selector("controller"))
    said = verdict.ask(raw_pods, port=port, who=who)
    pings: list[ControllerPing] | None
    try:
        pings = rest.pings()
    except SlurmError as e:
        log.warning("%s: %s", who, e)
        pings = None
    if pings is None and said is None:
        return None
    previous = (body.get("status") or {}).get("slurmctldInCharge")
    return incharge.plan([controller_pod(p) for p in raw_pods], pings, said, previous)


def carry_out(kube: Kube, recorder: EventRecorder, body: Manifest, plan: incharge.Plan, stamp: str) -> None:
    """The controller pods' conditions as planned (stamped ``stamp``), and the takeover Event if any."""
    namespace = body["metadata"]["namespace"]
    for pod_name, cond in plan.conditions.items():
        kube.set_pod_condition(namespace, pod_name, condition_manifest(incharge.CONDITION, cond, stamp))
    cluster = Ref.of(body)
    for event in plan.events:
        recorder.post_event(Event(cluster, event.reason, event.message, Ref.pod(namespace, event.pod)))
