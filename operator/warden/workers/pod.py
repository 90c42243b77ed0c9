"""A worker pod as the WorkerSet's steps see it, read once per look and handed to each of them (``podset``,
``scalein``, ``rollout``, ``registration``): what its name, phase, annotations and slurmd container say."""

from __future__ import annotations

from dataclasses import dataclass

from warden import kubetime, naming
from warden.render.pods import Manifest


@dataclass(frozen=True)
class SetPod:
    name: str
    ordinal: int
    deleting: bool = False
    ended: str = ""  # "Failed" or "Succeeded": the pod will not run again
    ready: bool = False
    template: str = ""  # the hash of the set's template it was made from
    #: epoch seconds a scale-in picked it to leave (``naming.LEAVING_ANNOTATION``); None: not picked
    leaving_since: float | None = None
    #: epoch seconds its slurmd container started; None while it is not running
    slurmd_started: float | None = None


def ordinal(workerset: str, pod: str) -> int | None:
    """The ordinal of ``<workerset>-<i>``; None for a name of another shape."""
    head, sep, tail = pod.rpartition("-")
    if head != workerset or not sep or not tail.isdigit() or (tail != "0" and tail.startswith("0")):
        return None
    return int(tail)


def read(workerset: str, raw: Manifest) -> SetPod | None:
    """The view of one of the set's pods; None for a pod whose name is not ``<workerset>-<i>``."""
    meta, status = raw["metadata"], raw.get("status") or {}
    i = ordinal(workerset, meta["name"])
    if i is None:
        return None
    phase = status.get("phase", "")
    annotations = meta.get("annotations") or {}
    since = annotations.get(naming.LEAVING_ANNOTATION)
    return SetPod(
        name=meta["name"],
        ordinal=i,
        deleting=bool(meta.get("deletionTimestamp")),
        ended=phase if phase in ("Failed", "Succeeded") else "",
        ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []),
        template=annotations.get(naming.POD_TEMPLATE_ANNOTATION, ""),
        leaving_since=kubetime.parse(since).timestamp() if since else None,
        slurmd_started=_slurmd_started(status),
    )


def _slurmd_started(status: Manifest) -> float | None:
    for cs in status.get("containerStatuses") or []:
        started = ((cs.get("state") or {}).get("running") or {}).get("startedAt")
        if cs.get("name") == "slurmd" and started:
            return kubetime.parse(started).timestamp()
    return None
