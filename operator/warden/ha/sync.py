"""Who is in charge, carried out in each round of the Slurm sync (``warden.slurmsync``) of a cluster with
backup controllers: slurmrestd's ping asked, planned against the controller pods (``incharge.plan``), the
pods' conditions written and a takeover told (an Event)."""

from __future__ import annotations

import logging

from warden.events import Event, Ref
from warden.ha import incharge
from warden.ha.incharge import ControllerPod
from warden.kube.client import Kube
from warden.kube.events import EventRecorder
from warden.naming import Names
from warden.nodesync import condition_manifest, pod_condition
from warden.render.pods import Manifest
from warden.slurm.model import SlurmError
from warden.slurm.rest import SlurmRest

log = logging.getLogger(__name__)


def controller_pod(pod: Manifest) -> ControllerPod:
    meta = pod["metadata"]
    return ControllerPod(
        name=meta["name"],
        condition=pod_condition(pod, incharge.CONDITION),
        deleting=bool(meta.get("deletionTimestamp")),
    )


def ask(kube: Kube, body: Manifest, rest: SlurmRest) -> incharge.Plan | None:
    """Which slurmctld is in charge (slurmrestd's ping), planned against the controller pods' conditions
    and the one status recorded. None when the ping itself failed: the reads just answered, so that is a
    passing doubt; pods and status keep what they say."""
    meta = body["metadata"]
    try:
        pings = rest.pings()
    except SlurmError as e:
        log.warning("SlurmCluster %s/%s: %s", meta["namespace"], meta["name"], e)
        return None
    names = Names(cluster=meta["name"], namespace=meta["namespace"])
    raw_pods = kube.list("v1", "Pod", meta["namespace"], names.selector("controller"))
    previous = (body.get("status") or {}).get("slurmctldInCharge")
    return incharge.plan([controller_pod(p) for p in raw_pods], pings, previous)


def carry_out(kube: Kube, recorder: EventRecorder, body: Manifest, plan: incharge.Plan, stamp: str) -> None:
    """The controller pods' conditions as planned (stamped ``stamp``), and the takeover Event if any."""
    namespace = body["metadata"]["namespace"]
    for pod_name, cond in plan.conditions.items():
        kube.set_pod_condition(namespace, pod_name, condition_manifest(incharge.CONDITION, cond, stamp))
    cluster = Ref.of(body)
    for event in plan.events:
        recorder.post_event(Event(cluster, event.reason, event.message, Ref.pod(namespace, event.pod)))
