"""Watch caches: the objects the operator reads again and again, kept in memory by list + watch.

An ``Informer`` lists one kind once (in pages), then follows a watch from the list's resourceVersion,
server-side label-selected (``app.kubernetes.io/managed-by=warden``: never every pod of the cluster),
and keeps each object as ``project`` trims it: a worker pod keeps only what the operator reads of it
(``slim_pod``), so ten thousand pods cost megabytes, not a gigabyte. ``Kube.get``/``Kube.list`` answer
from a synced informer of the kind instead of asking the API server, so an event costs no GET.

One watch per kind: the children the operator caches are watched here alone, and each change is told to
``warden.handlers`` as the API server delivered it (managedFields too: who changed it last says whether it
drifted), after the cache holds it, so whatever the change sets off reads that state, not the one before.
The SlurmClusters, which kopf watches for its handlers, are listed here once and then follow kopf's watch:
every event it delivers comes here first (``Kube.observed``, ``follow=False``).

Read your own writes: the answer of each of the operator's writes of a cached kind (create, patch,
delete) is offered to the informer (``offer``) and kept when it is newer than what the cache holds
(resourceVersions compare as integers: the API server serves etcd's revisions; a watch event older than
the object held is dropped, and an answer about an object the watch already saw deleted is not kept).
So a pod made a moment ago is there at the next look, and nobody makes it twice.

A watch that ends is resumed from the last resourceVersion seen (bookmarks keep it fresh); one the
server refuses as too old (410 Gone) lists afresh, telling every change the gap hid, deletions too.
Each change is told to ``on_change`` (from the informer's own thread; keep it quick: enqueue work), every
object of the first list as ADDED; a write of the operator's own is told when its watch event comes (its
answer was kept at once), so every change is told once, whoever made it.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes.client.exceptions import ApiException

from warden.kube import kinds
from warden.kube.manifest import Manifest
from warden.model import API_GROUP
from warden.naming import MANAGED

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)
OnChange = Callable[[str, Manifest], None]  # ("ADDED" | "MODIFIED" | "DELETED", the object as delivered)
Project = Callable[[Manifest], Manifest]

#: objects per page of the initial list (bounds the memory a list of ten thousand pods takes at once)
PAGE = 500
#: seconds a watch runs before the server ends it (then it is resumed)
WATCH_SECONDS = 290
#: deletions remembered (oldest forgotten first): far more than the answers in flight at any time
TOMBSTONES = 4096


def resource_version(obj: Manifest) -> int | None:
    text = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return int(text) if text.isdigit() else None


def newer(candidate: Manifest, held: Manifest | None) -> bool:
    """Whether ``candidate`` is a later state of the object than ``held``."""
    if held is None:
        return True
    a, b = resource_version(candidate), resource_version(held)
    return a is None or b is None or a > b


def key_of(obj: Manifest) -> Key:
    meta = obj["metadata"]
    return str(meta.get("namespace") or ""), str(meta["name"])


def matches(obj: Manifest, namespace: str, selector: dict[str, str]) -> bool:
    meta = obj["metadata"]
    if namespace and meta.get("namespace") != namespace:
        return False
    labels = meta.get("labels") or {}
    return all(labels.get(k) == v for k, v in selector.items())


def without_managed_fields(obj: Manifest) -> Manifest:
    """The object as the operator reads it: managedFields (often most of its bytes) left out."""
    meta = obj.get("metadata") or {}
    if "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def _kept_annotations(annotations: dict[str, str] | None) -> dict[str, str]:
    return {k: v for k, v in (annotations or {}).items() if k != "kubectl.kubernetes.io/last-applied-configuration"}


def slim_pod(pod: Manifest) -> Manifest:
    """A pod as the operator reads it (``warden.workers``, ``warden.slurmsync``, ``warden.observe``): its
    identity, labels, annotations, owners, node, containers' names, images and environment markers,
    phase, its address (a controller pod's verdict is asked there: ``warden.ha.verdict``), the Ready
    condition and Warden's own, container states (an init container's while it waits); its strings
    shared with every other pod's. Everything else (volumes, the full container
    specs, managedFields) stays on the API server."""
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    kept_meta = {
        k: meta[k]
        for k in ("name", "namespace", "uid", "resourceVersion", "labels", "ownerReferences", "deletionTimestamp")
        if k in meta
    }
    kept_meta["annotations"] = _kept_annotations(meta.get("annotations"))
    containers = [
        {
            "name": c.get("name"),
            "image": c.get("image"),
            "env": [e for e in c.get("env") or [] if e.get("name", "").startswith("WARDEN_")],
        }
        for c in spec.get("containers") or []
    ]
    statuses = [
        {k: cs[k] for k in ("name", "ready", "restartCount", "state", "lastState") if k in cs}
        for cs in status.get("containerStatuses") or []
    ]
    # an init container is looked at only while it waits (for its image: ``warden.observe``)
    waiting = [
        {"name": cs.get("name"), "state": cs["state"]}
        for cs in status.get("initContainerStatuses") or []
        if "waiting" in (cs.get("state") or {})
    ]
    inits = [{"name": c.get("name"), "image": c.get("image")} for c in spec.get("initContainers") or []]
    conditions = [  # Ready and Warden's own (the Slurm node's state); not the four others the kubelet sets
        {k: c[k] for k in ("type", "status", "reason", "message") if k in c}
        for c in status.get("conditions") or []
        if c.get("type") == "Ready" or str(c.get("type", "")).startswith(f"{API_GROUP}/")
    ]
    slim: Manifest = shared({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": kept_meta,
        "spec": {"nodeName": spec.get("nodeName"), "containers": containers, "initContainers": inits},
        "status": {"phase": status.get("phase"), "podIP": status.get("podIP"), "conditions": conditions,
                   "containerStatuses": statuses, "initContainerStatuses": waiting},
    })  # fmt: skip
    return slim


def shared(value: Any) -> Any:
    """``value`` rebuilt with every string interned: ten thousand pods hold one copy each of the keys,
    labels, owner, condition words and timestamps they have in common, not one each (half their memory)."""
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, dict):
        return {sys.intern(k): shared(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shared(v) for v in value]
    return value


class Gone(Exception):
    """The watch's resourceVersion is too old: list afresh."""


class Informer:
    """One kind, list + watch, kept in memory (see the module's words)."""

    def __init__(
        self,
        call: Callable[..., Any],
        stream: Callable[[str, list[tuple[str, str]], float], Iterator[bytes]],
        path: str,
        selector: dict[str, str],
        project: Project = without_managed_fields,
        on_change: OnChange | None = None,
        field_selector: str = "",
        follow: bool = True,
    ) -> None:
        self._call = call  # Kube.call
        self._stream = stream  # Kube.stream_lines
        self.path = path
        self.selector = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        #: selects server-side too (the bridge's pods: ``spec.schedulerName=warden-slurm``)
        self.field_selector = field_selector
        self.project = project
        self.on_change = on_change
        #: False: listed once, then kept by ``observed`` alone (another watch's events: kopf's)
        self.follow = follow
        self._objects: dict[Key, Manifest] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._version = ""
        #: objects the watch saw deleted, at the resourceVersion of their deletion: a late answer to one of
        #: our own writes must not bring them back
        self._tombstones: dict[Key, int] = {}
        self._thread: threading.Thread | None = None

    # --- reads --------------------------------------------------------------------------------
    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def get(self, namespace: str, name: str) -> Manifest | None:
        with self._lock:
            return self._objects.get((namespace, name))

    def list(self, namespace: str, selector: dict[str, str]) -> list[Manifest]:
        with self._lock:
            return [o for o in self._objects.values() if matches(o, namespace, selector)]

    def __len__(self) -> int:
        with self._lock:
            return len(self._objects)

    # --- the operator's own writes ----------------------------------------------------------------
    def offer(self, obj: Manifest) -> None:
        """The API server's answer to one of the operator's writes: kept when newer than what is held."""
        if not isinstance(obj, dict) or "metadata" not in obj or obj.get("kind") == "Status":
            return
        slim = self.project(obj)
        key = key_of(slim)
        version = resource_version(slim)
        with self._lock:
            tomb = self._tombstones.get(key)
            if tomb is not None and (version is None or version <= tomb):
                return
            if not newer(slim, self._objects.get(key)):
                return
            self._objects[key] = slim

    def observed(self, type_: str, obj: Manifest) -> None:
        """A change another watch (kopf's) delivered: applied here first, so that whatever it sets off
        reads it, not the state before; with ``follow=False`` the only way a change gets here."""
        if type_ == "DELETED":
            self._apply("DELETED", self.project(obj), tell=False)
        else:
            self.offer(obj)

    # --- the thread ---------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"informer {self.path}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if not self._version:
                    self._relist()
                if not self.follow:
                    return  # listed: from now on kept by ``observed``
                self._watch()
            except Gone:
                log.info("watch of %s: resourceVersion %s too old; listing afresh", self.path, self._version)
                self._version = ""
            except ApiException as e:
                log.warning("watch of %s: %s %s; again in 2 s", self.path, e.status, e.reason)
                self._stop.wait(2)
            except Exception as e:  # a broken connection, a timeout: resume from the version seen
                log.info("watch of %s ended (%s); resuming", self.path, e)
                self._stop.wait(1)

    def _selectors(self) -> tuple[tuple[str, str], ...]:
        fields = (("fieldSelector", self.field_selector),) if self.field_selector else ()
        return (("labelSelector", self.selector), *fields)

    def _relist(self) -> None:
        fresh: dict[Key, Manifest] = {}
        delivered: dict[Key, Manifest] = {}  # as the API server sent them: what a change is told with
        token = ""
        while True:
            query = [*self._selectors(), ("limit", str(PAGE))]
            if token:
                query.append(("continue", token))
            page = self._call("GET", self.path, query=query)
            for item in page.get("items") or []:
                item.setdefault("apiVersion", _item_api_version(page))
                item.setdefault("kind", str(page.get("kind", "")).removesuffix("List"))
                slim = self.project(item)
                fresh[key_of(slim)] = slim
                if self.on_change is not None:
                    delivered[key_of(slim)] = item
            meta = page.get("metadata") or {}
            token = str(meta.get("continue") or "")
            if not token:
                self._version = str(meta.get("resourceVersion") or "")
                break
        with self._lock:
            gone = [o for k, o in self._objects.items() if k not in fresh]
            changed = [
                ("ADDED" if k not in self._objects else "MODIFIED", delivered.get(k, o))
                for k, o in fresh.items()
                if self._objects.get(k) != o
            ]
            self._objects = fresh
            self._tombstones.clear()
        self._synced.set()
        for obj in gone:
            self._tell("DELETED", obj)
        for type_, obj in changed:
            self._tell(type_, obj)

    def _watch(self) -> None:
        query = [
            *self._selectors(),
            ("watch", "1"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", self._version),
            ("timeoutSeconds", str(WATCH_SECONDS)),
        ]
        for line in self._stream(self.path, query, WATCH_SECONDS + 30):
            if self._stop.is_set():
                return
            event = json.loads(line)
            type_, obj = event.get("type"), event.get("object") or {}
            if type_ == "ERROR":
                if obj.get("code") == 410:
                    raise Gone()
                raise ApiException(status=obj.get("code"), reason=obj.get("message"))
            version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            if type_ == "BOOKMARK":
                self._version = version or self._version
                continue
            self._apply(str(type_), self.project(obj), delivered=obj)
            self._version = version or self._version

    def _apply(self, type_: str, obj: Manifest, tell: bool = True, delivered: Manifest | None = None) -> None:
        """``obj`` (as kept) into the cache; told as ``delivered`` (as the API server sent it) when it is news."""
        key = key_of(obj)
        with self._lock:
            held = self._objects.get(key)
            if type_ == "DELETED":
                self._objects.pop(key, None)
                if len(self._tombstones) >= TOMBSTONES:
                    self._tombstones.pop(next(iter(self._tombstones)))
                self._tombstones[key] = resource_version(obj) or 0
            elif newer(obj, held):
                self._objects[key] = obj
            elif held is None or resource_version(obj) != resource_version(held):
                return  # older than what an answer to one of our own writes brought: its own event follows
            # else: the event of one of our own writes, whose answer the cache holds already: told all the same
        if tell:
            self._tell(type_, obj if delivered is None else delivered)

    def _tell(self, type_: str, obj: Manifest) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change(type_, obj)
        except Exception:  # the cache must go on whatever a listener does
            log.exception("watch of %s: telling a change of %s failed", self.path, key_of(obj))


def _item_api_version(page: Manifest) -> str:
    return str(page.get("apiVersion") or "v1")


class Caches:
    """The informers of the cached kinds (``warden.kube.kinds``: ``cached``), over every namespace or
    over each of the namespaces the operator watches."""

    def __init__(
        self,
        call: Callable[..., Any],
        stream: Callable[[str, list[tuple[str, str]], float], Iterator[bytes]],
        namespaces: list[str],
        on_change: dict[tuple[str, str], OnChange] | None = None,
    ) -> None:
        on_change = on_change or {}
        self._by: dict[tuple[str, str, str], Informer] = {}
        scopes = [ns for ns in namespaces if not any(c in ns for c in "*?[]!")] if namespaces else [""]
        for kind in kinds.CACHED:
            selector = {} if kind.kind == "SlurmCluster" else dict(MANAGED)
            project = slim_pod if kind.kind == "Pod" else without_managed_fields
            follow = kind.watch != "own"  # kopf watches it: its events keep the cache (``Kube.observed``)
            for ns in scopes:
                path = f"{kind.prefix}/namespaces/{ns}/{kind.plural}" if ns else f"{kind.prefix}/{kind.plural}"
                listener = on_change.get((kind.api_version, kind.kind))
                self._by[(kind.api_version, kind.kind, ns)] = Informer(
                    call, stream, path, selector, project, listener, follow=follow
                )

    def start(self) -> None:
        for informer in self._by.values():
            informer.start()

    def stop(self) -> None:
        for informer in self._by.values():
            informer.stop()

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(i.wait_synced(max(0.0, deadline - time.monotonic())) for i in self._by.values())

    def covering(self, api_version: str, kind: str, namespace: str) -> Informer | None:
        """The synced informer that holds this kind in this namespace; None: ask the API server."""
        informer = self._by.get((api_version, kind, "")) or self._by.get((api_version, kind, namespace))
        return informer if informer is not None and informer.synced else None
