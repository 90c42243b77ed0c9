"""The operator's actions on Slurm nodes (drain, resume, delete a record) and on worker pods, each
told in an Event about its SlurmCluster, counted (``warden_slurm_actions_total``), and a failure told
once per cluster and action until that action works again (not every round).

Used by the Slurm sync (cordons, ghost records) and the WorkerSet controller (scale-in, upgrades,
pods that never registered).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kubernetes.client.exceptions import ApiException

from warden import opmetrics
from warden.events import REASONS, Event, Ref
from warden.kube.events import EventRecorder
from warden.slurm.model import SlurmError

log = logging.getLogger(__name__)


class SlurmActions:
    def __init__(self, recorder: EventRecorder) -> None:
        self.recorder = recorder
        self._failed: set[tuple[str, str, str]] = set()  # (namespace, cluster, action) whose failure was told
        self._lock = threading.Lock()

    def act(
        self,
        cluster: Ref,
        pod: str,
        action: Callable[[], None],
        reason: str,
        message: str,
        related: Ref | None = None,
    ) -> bool:
        """Run one action about worker ``pod`` (its Slurm node has the same name) of ``cluster`` (a
        SlurmCluster) and say so in an Event; whether it worked. ``related``: what the Event names beside
        the cluster when it is not that pod (a WorkerSet)."""
        namespace = cluster.namespace
        key = f"{namespace}/{cluster.name}"
        related = related or Ref.pod(namespace, pod)
        told = (namespace, cluster.name, message)
        try:
            action()
        except (SlurmError, ApiException) as e:
            opmetrics.SLURM_ACTIONS.labels(key, reason, "failed").inc()
            log.warning("SlurmCluster %s: %s", key, e)
            with self._lock:
                new = told not in self._failed
                self._failed.add(told)
            if new:
                note, tried = f"{reason} of {pod} failed: {e}", REASONS[reason].action
                self.recorder.post_event(Event(cluster, "SlurmActionFailed", note, related, action=tried))
            return False
        with self._lock:
            self._failed.discard(told)
        opmetrics.SLURM_ACTIONS.labels(key, reason, "ok").inc()
        log.info("SlurmCluster %s: %s", key, message)
        self.recorder.post_event(Event(cluster, reason, message, related))
        return True
