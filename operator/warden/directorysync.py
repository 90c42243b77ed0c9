"""Every half minute, for each SlurmCluster with a directory (spec.identity.ldap): check it the way the
cluster's SSSD will use it (``warden.ldapcheck``: reached, TLS verified with the CA Secret, the bind Secret's
bind accepted), put the outcome into status (condition ``DirectoryReachable``) and say when it changes: a
Warning ``DirectoryFailing`` naming what fails, a Normal ``DirectoryReachable`` when it works again.

The directory's trouble never makes the cluster not Ready: the jail's own users keep working, and SSSD
serves directory users from its cache meanwhile. A plain thread like ``warden.slurmsync`` (no finalizer);
the checks of one cluster never hold up another's beyond their timeout.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from warden import naming
from warden.clusterqueue import ClusterQueue
from warden.events import Event, Ref
from warden.kube.client import Kube
from warden.kube.events import EventRecorder
from warden.ldapcheck import SECRET_MISSING, DirectoryCheck, check
from warden.model import API_GROUP, API_VERSION, Ldap, parse_spec

log = logging.getLogger(__name__)

#: the status condition this thread keeps
CONDITION = "DirectoryReachable"


@dataclass(frozen=True)
class Settings:
    interval: float = 30.0
    timeout: float = 5.0


def _secret_value(kube: Kube, namespace: str, name: str, key: str, field: str) -> tuple[str | None, str]:
    """(value, "") or (None, what is missing, for the condition)."""
    secret = kube.get("v1", "Secret", namespace, name)
    if secret is None:
        return None, f"Secret {namespace}/{name} ({field}) does not exist"
    encoded = (secret.get("data") or {}).get(key)
    if encoded is None:
        return None, f"Secret {namespace}/{name} ({field}) has no key {key!r}"
    return base64.b64decode(encoded).decode(errors="replace").strip(), ""


def check_cluster(kube: Kube, namespace: str, ldap: Ldap, timeout: float) -> DirectoryCheck:
    """Read the bind and CA Secrets and check the directory with them."""
    dn = password = ""
    if ldap.bind_secret:
        dn_value, missing = _secret_value(
            kube, namespace, ldap.bind_secret, naming.IDENTITY_BIND_DN_KEY, "spec.identity.ldap.bindSecret"
        )
        if dn_value is None:
            return DirectoryCheck(False, SECRET_MISSING, missing)
        pw_value, missing = _secret_value(
            kube, namespace, ldap.bind_secret, naming.IDENTITY_PASSWORD_KEY, "spec.identity.ldap.bindSecret"
        )
        if pw_value is None:
            return DirectoryCheck(False, SECRET_MISSING, missing)
        dn, password = dn_value, pw_value
    ca: str | None = None
    if ldap.ca_secret_ref:
        ref = ldap.ca_secret_ref
        ca, missing = _secret_value(kube, namespace, ref.name, ref.key, "spec.identity.ldap.caSecretRef")
        if ca is None:
            return DirectoryCheck(False, SECRET_MISSING, missing)
    return check(ldap, dn, password, ca, timeout)


def previous_condition(body: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for c in (body.get("status") or {}).get("conditions") or []:
        if c.get("type") == CONDITION:
            found: Mapping[str, Any] = c
            return found
    return None


class DirectorySync:
    def __init__(self, kube: Kube, recorder: EventRecorder, settings: Settings, queue: ClusterQueue) -> None:
        self.kube = kube
        self.recorder = recorder
        self.settings = settings
        #: where each check goes, for the cluster's status (``warden.clusterwork`` takes it)
        self.queue = queue
        self.clusters: set[tuple[str, str]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()

    def watch(self, namespace: str, name: str) -> None:
        with self._lock:
            if (namespace, name) not in self.clusters:
                self.clusters.add((namespace, name))
                self._wake.set()  # a cluster seen for the first time is checked at once

    def check_soon(self) -> None:
        """A spec changed: check every cluster now rather than at the next round."""
        self._wake.set()

    def start(self) -> None:
        threading.Thread(target=self._run, name="directory-sync", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.settings.interval)
            self._wake.clear()
            with self._lock:
                clusters = sorted(self.clusters)
            for namespace, name in clusters:
                try:
                    if not self.sync(namespace, name):
                        with self._lock:
                            self.clusters.discard((namespace, name))
                except Exception:  # one cluster's trouble must not stop the others
                    log.exception("SlurmCluster %s/%s: directory check failed", namespace, name)

    def sync(self, namespace: str, name: str) -> bool:
        """One check of one cluster; False when the SlurmCluster is gone (stop watching it)."""
        body = self.kube.get(f"{API_GROUP}/{API_VERSION}", "SlurmCluster", namespace, name)
        if body is None or body["metadata"].get("deletionTimestamp"):
            return False
        try:
            ldap = parse_spec(body.get("spec") or {}).identity.ldap
        except ValueError:
            return True  # the reconcile handler reports invalid specs
        if ldap is None:
            return True
        result = check_cluster(self.kube, namespace, ldap, self.settings.timeout)
        before = previous_condition(body)
        was = (before.get("status"), before.get("reason")) if before else None
        now = ("True" if result.ok else "False", result.reason)
        if was != now:
            cluster = Ref.of(body)
            if not result.ok:
                self.recorder.post_event(Event(cluster, "DirectoryFailing", f"{result.reason}: {result.message}"))
            elif was is not None and was[0] == "False":
                self.recorder.post_event(Event(cluster, "DirectoryReachable", result.message))
            log.info("SlurmCluster %s/%s: directory %s: %s", namespace, name, result.reason, result.message)
        self.queue.refresh(namespace, name, directory=result)
        return True
