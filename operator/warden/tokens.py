"""Per-purpose Slurm tokens: only slurmctld and the operator hold the cluster's JWT signing key.

Any other component that talks to slurmrestd mounts a Secret (``<cluster>-<component>-token``, file
``token``) holding a JSON Web Token for a named Slurm user with the least its job needs (``PURPOSES``).
The exporter's is for ``warden-reader`` (``naming.READER_USER``): a user slurmctld knows and no node does,
neither a Slurm operator nor an administrator, whose job submissions and changes Slurm refuses
(``job_submit.lua``, rendered by ``warden.render.config``). It reads everything through its read gate
(``warden.readgate``), the one pod with SlurmUser's token, which answers the exporter's four reads and
nothing else: Slurm has no read-only administrator, and privateData hides others' jobs from plain users.
So whoever gets into the pod Prometheus scrapes can read what the metrics show, and change nothing.
The bridge's is for ``warden-bridge`` (``naming.BRIDGE_USER``), another such user: it submits, sees and
cancels its own placeholder jobs, and no pod mounts it (the bridge reads the Secret through the API).

The operator mints each token with the key, valid ``LIFETIME_S``, and writes a new one in the first Slurm
sync round that finds the current one missing, signed with another key (the key was rotated: see
docs/operations.md), made for another user, or past half its life. The pods are marked with the time
(``Applier.mark_pods``), so their kubelet brings the new file in at once, and they read it at each
request.
"""

from __future__ import annotations

import base64
import binascii
import logging
from dataclasses import dataclass

from warden import naming
from warden.kube.apply import Applier, Owner, with_owner
from warden.kube.client import Kube
from warden.render.context import Cluster
from warden.render.pods import Manifest, meta
from warden.slurm.rest import mint_token, token_claims

log = logging.getLogger(__name__)

#: seconds a token is valid; a new one is written once half of that has passed
LIFETIME_S = 3600


@dataclass(frozen=True)
class Purpose:
    """A component that gets a token, the Slurm user it acts as, and the components whose pods mount it."""

    component: str
    user: str
    mounted_by: tuple[str, ...]


#: the exporter reads as warden-reader; its read gate checks callers against the same token
EXPORTER = Purpose(component="exporter", user=naming.READER_USER, mounted_by=("exporter", "read-gate"))
#: the exporter's reads, asked as SlurmUser (``warden.readgate``): the one token of a pod that reads everything
READ_GATE = Purpose(component="read-gate", user="slurm", mounted_by=("read-gate",))
#: the bridge's placeholder jobs (``warden.bridge``), as warden-bridge. No pod mounts it: the bridge runs in
#: the operator's namespace and reads the Secret (``Names.bridge_token_secret``) through the API, as the Role
#: of ``warden.render.bridge`` lets it
BRIDGE = Purpose(component="bridge", user=naming.BRIDGE_USER, mounted_by=())
PURPOSES = (EXPORTER, READ_GATE, BRIDGE)


def wanted(cluster: Cluster) -> tuple[Purpose, ...]:
    """The purposes this cluster has a component for: the exporter and its read gate (spec.metrics.enabled),
    the bridge (spec.bridge.enabled)."""
    out: tuple[Purpose, ...] = (EXPORTER, READ_GATE) if cluster.spec.metrics.enabled else ()
    if cluster.spec.active_bridge is not None:
        out += (BRIDGE,)
    return out


def due(token: str | None, key: bytes, user: str, now: float) -> bool:
    """Whether a new token must be written in place of ``token``: there is none, ``key`` did not sign it,
    it is not ``user``'s, or half its life has passed."""
    claims = token_claims(token, key) if token else None
    if claims is None or claims.get("sun") != user:
        return True
    issued, expires = claims.get("iat"), claims.get("exp")
    if not isinstance(issued, int) or not isinstance(expires, int):
        return True
    return now >= issued + (expires - issued) / 2


def mint(key: bytes, purpose: Purpose, now: float | None = None) -> str:
    """A new token for the purpose's user, valid LIFETIME_S from ``now``."""
    return mint_token(key, purpose.user, LIFETIME_S, now)


def token_secret(cluster: Cluster, purpose: Purpose, token: str) -> Manifest:
    name = cluster.names.token(purpose.component)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta(cluster, name, purpose.component),
        "type": "Opaque",
        "data": {naming.TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }


def held_token(secret: Manifest | None) -> str | None:
    """The token a token Secret holds; None when there is no Secret or no readable token in it."""
    encoded = ((secret or {}).get("data") or {}).get(naming.TOKEN_KEY)
    if not encoded:
        return None
    try:
        return base64.b64decode(encoded, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


def refresh(kube: Kube, cluster: Cluster, owner: Owner, key: bytes, now: float) -> list[str]:
    """Write a new token where one is ``due``; delete the token of a component the cluster no longer
    has. The names of the Secrets written."""
    written: list[str] = []
    keep = wanted(cluster)
    for purpose in PURPOSES:
        name = cluster.names.token(purpose.component)
        current = kube.get("v1", "Secret", cluster.namespace, name)
        if purpose not in keep:
            if current is not None and kube.delete("v1", "Secret", cluster.namespace, name, "Background"):
                log.info("SlurmCluster %s/%s: deleted Secret %s (no %s)", cluster.namespace, cluster.name, name,
                         purpose.component)  # fmt: skip
            continue
        if not due(held_token(current), key, purpose.user, now):
            continue
        token = mint(key, purpose, now)
        kube.server_side_apply(with_owner(token_secret(cluster, purpose, token), owner))
        written.append(name)
        # the kubelet refreshes a pod's Secret volumes at once when the pod's metadata changes
        for component in purpose.mounted_by:
            selector = cluster.names.selector(component)
            Applier(kube).mark_pods(cluster.namespace, selector, naming.TOKEN_ISSUED_ANNOTATION, str(int(now)))
    return written
