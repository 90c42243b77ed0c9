"""The WorkerSet controller: keeps each WorkerSet's pods made (``warden.podset`` plans) and its status.

Events of WorkerSets and their pods only name a set to look at (``enqueue``); one thread looks at each
named set in turn. A burst of events about one set (a thousand pods starting) is one look, not a
thousand: a set named again while it waits is not queued twice. Every look lists the set's pods
afresh, so a lost event costs nothing but delay: the next one about that set puts all of it right.
"""

from __future__ import annotations

import logging
import threading

from kubernetes.client.exceptions import ApiException

from warden import podset
from warden.kube.client import Kube
from warden.model import API_GROUP, API_VERSION, WORKER_SET_KIND

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, WorkerSet)


class WorkQueue:
    """Keys to handle, each at most once in the queue; FIFO."""

    def __init__(self) -> None:
        self._order: list[Key] = []
        self._queued: set[Key] = set()
        self._cond = threading.Condition()
        self._closed = False

    def add(self, key: Key) -> None:
        with self._cond:
            if key not in self._queued:
                self._queued.add(key)
                self._order.append(key)
                self._cond.notify()

    def get(self) -> Key | None:
        """The next key (waiting for one); None once closed."""
        with self._cond:
            while not self._order and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            key = self._order.pop(0)
            self._queued.discard(key)
            return key

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


def sync_set(api: Kube, namespace: str, name: str, shrink: bool) -> None:
    """One look at one WorkerSet: make missing pods, clear ended ones, write its status."""
    ws = api.get(f"{API_GROUP}/{API_VERSION}", WORKER_SET_KIND, namespace, name)
    if ws is None or ws["metadata"].get("deletionTimestamp"):
        return  # garbage collection takes its pods
    raw = api.list("v1", "Pod", namespace, ws["spec"]["selector"]["matchLabels"])
    pods = [p for p in (podset.pod_of(name, r) for r in raw) if p is not None]
    current = podset.template_hash(ws)
    todo = podset.plan(int(ws["spec"].get("replicas", 0)), pods, shrink)
    for pod, why in todo.delete:
        log.info("WorkerSet %s/%s: deleting pod %s: %s", namespace, name, pod, why)
        api.delete("v1", "Pod", namespace, pod, "Background")
    for i in todo.create:
        if api.create(podset.pod_manifest(ws, i, current)):
            log.info("WorkerSet %s/%s: made pod %s-%d", namespace, name, name, i)
    if todo.create or todo.delete:
        raw = api.list("v1", "Pod", namespace, ws["spec"]["selector"]["matchLabels"])
        pods = [p for p in (podset.pod_of(name, r) for r in raw) if p is not None]
    status = podset.status(ws, pods)
    if ws.get("status") != status:
        api.patch_status(name, namespace, status, kind=WORKER_SET_KIND)


class WorkerPods:
    """One thread that handles the queue of WorkerSets to look at.

    ``shrink``: delete pods above a set's size at once (the operator does not read Slurm; with Slurm
    read, ``warden.scalein`` drains and picks the pods that go)."""

    def __init__(self, kube: Kube, shrink: bool) -> None:
        self.kube = kube
        self.shrink = shrink
        self.queue = WorkQueue()
        self._thread: threading.Thread | None = None

    def enqueue(self, namespace: str, name: str) -> None:
        self.queue.add((namespace, name))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="worker-pods", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.queue.close()

    def _run(self) -> None:
        while (key := self.queue.get()) is not None:
            try:
                sync_set(self.kube, key[0], key[1], self.shrink)
            except ApiException as e:
                log.warning("WorkerSet %s/%s: %s %s; trying again shortly", key[0], key[1], e.status, e.reason)
                self._retry(key)
            except Exception:  # one set's trouble must not stop the others
                log.exception("WorkerSet %s/%s: sync failed; trying again shortly", *key)
                self._retry(key)

    def _retry(self, key: Key, delay: float = 5.0) -> None:
        timer = threading.Timer(delay, self.queue.add, args=(key,))
        timer.daemon = True
        timer.start()
