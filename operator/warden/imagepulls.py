"""Pods that cannot pull their images, in one place: what a pod's container statuses say
(``failures``), the cluster's ImagesPulled condition (``condition``, folded into status by
``warden.status``), and which pod events make a cluster's status look again and which failures are told
as Events (``PullWatch``, fed by the pod cache through the handlers)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from warden.model import Condition
from warden.naming import INSTANCE_LABEL

#: the label naming a pod's SlurmCluster

#: a container's waiting reasons that mean its image cannot be had (the kubelet's words)
PULL_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
#: ImagesPulled's reason while a pod cannot pull its image
PULL_FAILED = "ImagePullFailed"


@dataclass(frozen=True)
class ImagePull:
    """A container whose image the kubelet cannot pull: its pod, the image, the kubelet's reason and words."""

    pod: str
    image: str
    reason: str
    message: str = ""


def failures(pod: Mapping[str, Any]) -> list[ImagePull]:
    """The containers of ``pod`` (init containers too) whose image the kubelet cannot pull."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}

    def named(container: str) -> str:  # a status names no image until the kubelet has it: the spec does
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            if c.get("name") == container:
                return str(c.get("image") or "")
        return ""

    out = []
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in PULL_FAILURES:
            out.append(
                ImagePull(
                    pod=pod["metadata"]["name"],
                    image=named(str(cs.get("name"))) or str(cs.get("image") or ""),
                    reason=str(waiting["reason"]),
                    message=str(waiting.get("message", "")),
                )
            )
    return out


def condition(found: tuple[ImagePull, ...], cond: Callable[[str, bool, str, str], Condition]) -> Condition:
    """ImagesPulled: False while any pod of the cluster cannot pull an image, naming each pod and image (the
    same words whether the kubelet is trying or backing off, so status does not flicker)."""
    if not found:
        return cond("ImagesPulled", True, "ImagesPulled", "every pod has its images")
    pairs = sorted({(f.pod, f.image) for f in found})
    shown = ", ".join(f"{pod} ({image})" for pod, image in pairs[:5]) + (
        f" and {len(pairs) - 5} more" if len(pairs) > 5 else ""
    )
    return cond(
        "ImagesPulled",
        False,
        PULL_FAILED,
        f"{len(pairs)} container(s) cannot pull their image: {shown}. Check the image names (spec.images, the "
        "operator's image.registry), that the registry answers, and spec.images.pullSecrets "
        "(`kubectl describe pod` has the kubelet's words)",
    )


@dataclass(frozen=True)
class PullChange:
    """A pod event that matters: its cluster's status looks again, and ``tell`` are the failures to say as
    Events (the kubelet's back-off repeats no new words, so it is never told)."""

    namespace: str
    cluster: str
    tell: tuple[ImagePull, ...]


class PullWatch:
    """Which pods of clusters could not pull when last seen: a pod event matters when its pod cannot pull
    now, or could not and now can (or is gone). Thread-safe (the pod cache's thread calls it)."""

    def __init__(self) -> None:
        self._failing: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def seen(self, type_: str, pod: Mapping[str, Any]) -> PullChange | None:
        meta = pod["metadata"]
        namespace, cluster = str(meta.get("namespace")), (meta.get("labels") or {}).get(INSTANCE_LABEL)
        key = (namespace, str(meta.get("name")))
        found = [] if type_ == "DELETED" else failures(pod)
        with self._lock:
            if cluster is None or (not found and key not in self._failing):
                return None
            if found:
                self._failing.add(key)
            else:
                self._failing.discard(key)
        return PullChange(namespace, str(cluster), tuple(f for f in found if f.reason != "ImagePullBackOff"))
