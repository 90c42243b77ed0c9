"""What the operator tells people through Kubernetes Events, and how each is written (pure).

Every Event the operator posts is an `events.k8s.io/v1` Event about its SlurmCluster (`regarding`; the
bridge's are about the pods it schedules),
with a reason from `REASONS` (which fixes its type and its `action`, the verb of what was done) and,
when one object is what it is about, that object as `related` (the worker pod of a drained node).
A person finds them with `kubectl events --for slurmcluster/demo`, or all drains of a namespace with
`kubectl get events --field-selector reason=NodeDrained`; a program filters on `action`,
`related.name` and `reportingComponent` instead of parsing the note.

The same Event again (same object, reason, related object and note) within `SERIES_WINDOW_SECONDS`
of the first is not a new object: its `series` count and last-observed time go up (`warden.kube.events`
keeps the names). A failure retried every 10 s is one Event counting up, not hundreds.
"""

from __future__ import annotations

import datetime
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from warden import kubetime
from warden.kube.manifest import Manifest

#: `reportingController` of every Event (the operator's name in Kubernetes' sense)
CONTROLLER = "slurm.warden.dev/operator"
#: the API's limit on `note`, in bytes
NOTE_LIMIT = 1024
#: a repeat within this many seconds of an Event's first occurrence counts up its series
SERIES_WINDOW_SECONDS = 1800.0


@dataclass(frozen=True)
class Reason:
    warning: bool
    action: str  # what the operator (or the health check) did, a verb
    means: str  # for people: docs/operations.md lists these


_RECONCILE = {
    "Reconciled": Reason(False, "Reconcile", "every rendered object was applied; the note: how many, and the phase"),
    "InvalidSpec": Reason(True, "Validate", "the spec was refused; the note names the field and the fix"),
    "UnknownFields": Reason(
        True, "Validate", "the spec holds fields this operator does not know (a newer CRD): left out; the note: which"
    ),
    "ImagePullFailed": Reason(
        True, "Observe", "a pod (related) cannot pull an image; the note: the image and the kubelet's words"
    ),
    "ReconcileFailed": Reason(True, "Reconcile", "a reconcile stopped on an unexpected error; it is retried"),
    "ApplyFailed": Reason(True, "Apply", "one object could not be applied; the others were; retried every 10 s"),
    "SecretCreated": Reason(False, "Create", "Secrets generated once (JWT key, MUNGE key, database password)"),
    "ObjectRecreated": Reason(False, "Recreate", "an immutable field changed: made again, its pods kept (Orphan)"),
    "PodsReplaced": Reason(False, "Replace", "a pod's make-up changed (image, resources): its pods are replaced"),
    "ObjectsPruned": Reason(False, "Prune", "objects no longer rendered were deleted (never Secrets or PVCs)"),
    "ObjectRestored": Reason(False, "Restore", "an object deleted or changed by someone else was put back"),
}
_HEALTH = {
    "NodeDrained": Reason(True, "Drain", "the NCCL check drained the node (related); the note is the reason"),
    "NodeResumed": Reason(False, "Resume", "a node the NCCL check had drained passed again and was resumed"),
    "HealthCheckFailed": Reason(True, "HealthCheck", "an NCCL run failed the same way everywhere: nobody drained"),
}
_SLURM = {
    "SlurmNodeDrained": Reason(True, "Observe", "Slurm says the node is drained or draining, whoever did it"),
    "SlurmNodeDown": Reason(True, "Observe", "Slurm says the node is down or not responding"),
    "SlurmNodeUsable": Reason(False, "Observe", "the node takes jobs again"),
    "SlurmNodeCordoned": Reason(False, "Drain", "the node's Kubernetes node was cordoned: drained in Slurm"),
    "SlurmNodeUncordoned": Reason(False, "Resume", "uncordoned again: the cordon's drain was lifted"),
    "NodeConditionDrained": Reason(
        True, "Drain", "its Kubernetes node has a condition spec.nodeConditionDrains names: drained (the note: which)"
    ),
    "NodeConditionCleared": Reason(False, "Resume", "the condition cleared: the drain it made was lifted"),
    "GhostNodeRemoved": Reason(False, "Delete", "a Slurm node whose pod is gone was deleted from slurmctld"),
    "WorkerRecreated": Reason(True, "Delete", "a worker pod whose slurmd never registered was deleted to start afresh"),
    "ScaleInDraining": Reason(False, "Drain", "picked to leave a shrinking worker group: drained"),
    "ScaleInCancelled": Reason(False, "Resume", "the group grew back before it left: resumed, it stays"),
    "ScaledIn": Reason(False, "Delete", "a leaving worker pod ran no job any more (or its timeout passed): deleted"),
    "UpgradeDraining": Reason(False, "Drain", "its pod is to move to the new template: drained first"),
    "UpgradeReplacing": Reason(False, "Delete", "its node ran no job any more: the pod is replaced"),
    "MaintenanceReserved": Reason(
        False, "Reserve", "a worker upgrade waits for spec.maintenanceWindow: its nodes kept free for it in Slurm"
    ),
    "MaintenanceReservationEnded": Reason(
        False, "Release", "the window opened (its nodes are drained for the upgrade now) or nothing waits any more"
    ),
    "SlurmActionFailed": Reason(True, "Act", "a drain, resume or delete failed (action: which); told once, retried"),
    "SlurmNodesPlaced": Reason(
        False, "Place", "worker nodes got their place in the topology or their node-label features (the note: how many)"
    ),
    "SlurmNodePlaceFailed": Reason(
        True, "Place", "Slurm refused a worker node's place or features (the note: its words); retried each round"
    ),
    "SlurmctldUnresponsive": Reason(True, "Observe", "slurmctld answers no node or job read: users' commands hang"),
    "SlurmctldResponsive": Reason(False, "Observe", "slurmctld answers reads again"),
    "ControllerTakeover": Reason(
        True, "Observe", "with backup controllers: another slurmctld is in charge (the note: from which to which)"
    ),
}
_UPGRADE = {
    "SlurmUpgradeStep": Reason(
        False, "Upgrade", "a step of a Slurm upgrade began or is done (the note: which, and why)"
    ),
    "DowngradeRefused": Reason(True, "Validate", "spec.slurmVersion is older than the cluster runs: nothing applied"),
    "UpgradeTooLarge": Reason(True, "Validate", "spec.slurmVersion is more than 3 releases ahead: nothing applied"),
    "SlurmRefusedConfig": Reason(
        True, "Validate", "slurmctld refused the new Slurm configuration: nothing applied; the note: Slurm's words"
    ),
    "SlurmConfigCheckFailed": Reason(
        True, "Validate", "Slurm's check of a new configuration ended without an answer: nothing applied"
    ),
}
_DIRECTORY = {
    "DirectoryFailing": Reason(
        True, "Observe", "spec.identity.ldap's directory cannot be used (the note: unreachable, TLS, or bind refused)"
    ),
    "DirectoryReachable": Reason(False, "Observe", "the directory answers and accepts the bind (again)"),
    "SlurmConfigNotTaken": Reason(
        True, "Observe", "workers' slurmd still run another configuration than the ConfigMap's: a reconfigure failed"
    ),
    "SlurmConfigTaken": Reason(False, "Observe", "every worker's slurmd runs the ConfigMap's configuration again"),
}
_BACKUP = {
    "JailBackedUp": Reason(
        False, "Backup", "a run of the jail's backup saved a snapshot (the note: what it saved, how many are kept)"
    ),
    "JailBackupFailed": Reason(
        True, "Backup", "a run of the jail's backup failed (the note: why); the next schedule tries again"
    ),
}
#: the bridge's, about the pods it schedules (``warden.bridge``); the first two are kube-scheduler's words
_BRIDGE = {
    "Scheduled": Reason(False, "Bind", "Slurm's job for the pod runs: the pod was bound to a node of its allocation"),
    "FailedScheduling": Reason(True, "Submit", "Slurm refused the pod's job (the note: Slurm's words); tried again"),
    "SlurmJobPreempted": Reason(
        True, "Delete", "the pod's Slurm job is preempted: the pod is deleted within its grace time"
    ),
    "SlurmJobCancelled": Reason(True, "Delete", "the pod's Slurm job was cancelled (scancel): the pod is deleted"),
    "SlurmJobEnded": Reason(True, "Delete", "the pod's Slurm job ended otherwise (time limit, node failure): deleted"),
    "SlurmJobGone": Reason(True, "Delete", "Slurm no longer lists the bound pod's job: the pod is deleted"),
}
#: every reason the operator posts; a reason not listed here is a programming error
REASONS: dict[str, Reason] = {**_RECONCILE, **_HEALTH, **_SLURM, **_UPGRADE, **_DIRECTORY, **_BACKUP, **_BRIDGE}


@dataclass(frozen=True)
class Ref:
    """An object an Event is about, as `regarding` or `related` name it."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str | None = None

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Ref:
        """The object as read from the API."""
        meta = obj["metadata"]
        return cls(obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"], meta.get("uid"))

    @classmethod
    def pod(cls, namespace: str, name: str) -> Ref:
        return cls("v1", "Pod", namespace, name)

    def manifest(self) -> dict[str, str]:
        out = {"apiVersion": self.api_version, "kind": self.kind, "namespace": self.namespace, "name": self.name}
        if self.uid:
            out["uid"] = self.uid
        return out


@dataclass(frozen=True)
class Event:
    regarding: Ref
    reason: str
    note: str
    related: Ref | None = None
    #: the reason's own action unless given (a failed action names what it tried: `Drain`)
    action: str = ""

    def __post_init__(self) -> None:
        if self.reason not in REASONS:
            raise ValueError(f"Event reason {self.reason!r} is not in warden.events.REASONS")
        if not self.action:
            object.__setattr__(self, "action", REASONS[self.reason].action)

    @property
    def warning(self) -> bool:
        return REASONS[self.reason].warning

    def key(self) -> tuple[Any, ...]:
        """What makes two Events the same one happening again."""
        related = (self.related.kind, self.related.name) if self.related else None
        return (self.regarding.namespace, self.regarding.kind, self.regarding.name, self.regarding.uid,
                self.reason, related, self.note)  # fmt: skip


@dataclass(frozen=True)
class Posted:
    """An Event of the operator's as read back from the API: another replica's before a handover, or this
    one's before a restart. A repeat of it counts up its series instead of making another object."""

    key: tuple[Any, ...]
    name: str
    count: int
    age: float  # seconds since its first occurrence


def posted(manifest: Mapping[str, Any], now: datetime.datetime) -> Posted | None:
    """``manifest`` (an `events.k8s.io/v1` Event) as ``Posted``; None when it is not the operator's or its
    first occurrence is older than ``SERIES_WINDOW_SECONDS``."""
    if manifest.get("reportingController") != CONTROLLER:
        return None
    try:
        first = kubetime.parse_micro(str(manifest.get("eventTime")))
    except ValueError:
        return None
    age = (now - first).total_seconds()
    if not 0 <= age <= SERIES_WINDOW_SECONDS:
        return None
    regarding = manifest.get("regarding") or {}
    related = manifest.get("related")
    key = (regarding.get("namespace"), regarding.get("kind"), regarding.get("name"), regarding.get("uid"),
           manifest.get("reason"), (related.get("kind"), related.get("name")) if related else None,
           manifest.get("note"))  # fmt: skip
    count = int((manifest.get("series") or {}).get("count") or 1)
    return Posted(key, str((manifest.get("metadata") or {}).get("name")), count, age)


def clip_note(note: str) -> str:
    """``note`` within the API's byte limit, cut on a character boundary, marked when cut."""
    raw = note.encode()
    if len(raw) <= NOTE_LIMIT:
        return note
    return raw[: NOTE_LIMIT - len("…".encode())].decode(errors="ignore") + "…"


def name(event: Event, now: datetime.datetime) -> str:
    """The Event's object name: its object's name, the time in µs and a hash of what it says (hex).
    (`generateName` is refused here: events.k8s.io/v1 validates it as a whole name, and `x.` is none.)"""
    micros = int(now.timestamp() * 1_000_000)
    said = zlib.crc32(repr(event.key()).encode())
    return f"{event.regarding.name[:200]}.{micros:x}{said:08x}"


def manifest(event: Event, instance: str, now: datetime.datetime) -> Manifest:
    """The `events.k8s.io/v1` Event to create; ``instance``: who posts it (the operator's pod name)."""
    out: Manifest = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name(event, now), "namespace": event.regarding.namespace},
        "eventTime": kubetime.micro_stamp(now),
        "reportingController": CONTROLLER,
        "reportingInstance": instance[:128],
        "action": event.action,
        "reason": event.reason,
        "type": "Warning" if event.warning else "Normal",
        "regarding": event.regarding.manifest(),
        "note": clip_note(event.note),
    }
    if event.related is not None:
        out["related"] = event.related.manifest()
    return out


def series_patch(count: int, now: datetime.datetime) -> Manifest:
    """The merge patch that records the ``count``-th occurrence of an Event, at ``now``."""
    return {"series": {"count": count, "lastObservedTime": kubetime.micro_stamp(now)}}
