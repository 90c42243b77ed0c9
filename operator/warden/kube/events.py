"""Posts the operator's Events (``warden.events`` holds the catalogue and the manifests, pure).

The same Event again within the series window counts up the first one's series instead of making
another object. Best effort: an Event that cannot be written is logged, and nothing else fails for it.
"""

from __future__ import annotations

import datetime
import logging
import socket
import threading
import time
from collections.abc import Iterable
from typing import Any

from kubernetes.client.exceptions import ApiException

from warden import events
from warden.kube.client import Kube
from warden.kube.manifest import Manifest

log = logging.getLogger(__name__)


class EventRecorder:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        #: who posts Events (in a pod: the pod's name)
        self.instance = socket.gethostname()
        #: Event key -> (name of the Event in the API, occurrences, when first posted (monotonic)),
        #: in order of first posting
        self._events: dict[tuple[Any, ...], tuple[str, int, float]] = {}
        self._lock = threading.Lock()

    def post_event(self, event: events.Event) -> None:
        """Tell people through an `events.k8s.io/v1` Event."""
        now = datetime.datetime.now(datetime.UTC)
        key = event.key()
        with self._lock:
            self._forget_old_events(time.monotonic())
            seen = self._events.get(key)
            if seen is not None:
                name, count, first = seen
                self._events[key] = (name, count + 1, first)
        namespace = event.regarding.namespace
        try:
            if seen is not None and self._count_up(namespace, name, count + 1, now):
                return
            made = self.kube.call(
                "POST",
                Kube.path("events.k8s.io/v1", "Event", namespace),
                body=events.manifest(event, self.instance, now),
            )
        except ApiException as e:
            log.warning("Event %s about %s not posted: %s", event.reason, event.regarding.name, e.reason)
            return
        with self._lock:
            self._events.pop(key, None)  # to the end: the dict stays in order of first posting
            self._events[key] = (made["metadata"]["name"], 1, time.monotonic())

    def adopt(self, manifests: Iterable[Manifest]) -> int:
        """Remember the operator's Events already in the API (``events.posted``: a replica taking over, or
        restarting): their repeats count up their series, never a second Event saying the same. How many."""
        now = datetime.datetime.now(datetime.UTC)
        found = [p for p in (events.posted(m, now) for m in manifests) if p is not None]
        clock = time.monotonic()
        with self._lock:
            for p in sorted(found, key=lambda p: -p.age):  # oldest first: the dict keeps posting order
                if p.key not in self._events:
                    self._events[p.key] = (p.name, p.count, clock - p.age)
        return len(found)

    def adopt_posted(self, namespaces: list[str]) -> None:
        """``adopt`` the operator's Events in ``namespaces`` (none: every namespace), as read from the API."""
        paths = [Kube.path("events.k8s.io/v1", "Event", ns) for ns in namespaces or [""]]
        try:
            found = self.adopt(item for path in paths for item in self.kube.pages(path, 500))
        except ApiException as e:
            log.warning("the operator's earlier Events not read (a repeat may say the same again): %s", e.reason)
            return
        log.info("%d Events of the operator's from the last %.0f minutes: their repeats count them up", found,
                 events.SERIES_WINDOW_SECONDS / 60)  # fmt: skip

    def _count_up(self, namespace: str, name: str, count: int, now: datetime.datetime) -> bool:
        """Record one more occurrence on Event ``name``; False when it is gone (expired, deleted)."""
        path = Kube.path("events.k8s.io/v1", "Event", namespace, name)
        try:
            self.kube.call(
                "PATCH", path, body=events.series_patch(count, now), content_type="application/merge-patch+json"
            )
            return True
        except ApiException as e:
            if e.status != 404:
                raise
            return False

    def _forget_old_events(self, now: float) -> None:
        """Drop the Events first posted longer ago than the series window: the oldest come first,
        so this stops at the first one still in it (no walk over every Event at each post)."""
        while self._events:
            key, (_, _, first) = next(iter(self._events.items()))
            if now - first <= events.SERIES_WINDOW_SECONDS:
                return
            del self._events[key]
