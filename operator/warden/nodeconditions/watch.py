"""The Kubernetes nodes' conditions, kept by a watch (list + watch of ``/api/v1/nodes``).

Started by the first Slurm sync round of a SlurmCluster that names a condition, so an operator whose
clusters name none never lists or watches a node for it. Each node is kept as its name and its
conditions' type, status, reason and message (``slim_node``): ten thousand nodes cost a few megabytes,
not their images lists. Until its first list is in, it answers None and the round neither drains nor
resumes anything for conditions (nothing is known yet, which is not "cleared").
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from warden.kube.cache import Informer, shared
from warden.kube.client import Kube
from warden.kube.manifest import Manifest
from warden.nodeconditions.plan import NodeCondition

PATH = "/api/v1/nodes"
#: seconds a round waits for the first list of the nodes (a large cluster's takes longer: the next round)
FIRST_LIST_WAIT = 5.0


def slim_node(node: Manifest) -> Manifest:
    """A node as this watch keeps it: name, resourceVersion, its conditions' words (no timestamps)."""
    meta, status = node.get("metadata") or {}, node.get("status") or {}
    conditions = [
        {k: c[k] for k in ("type", "status", "reason", "message") if k in c} for c in status.get("conditions") or []
    ]
    slim: Manifest = shared({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {k: meta[k] for k in ("name", "resourceVersion") if k in meta},
        "status": {"conditions": conditions},
    })  # fmt: skip
    return slim


def conditions_of(node: Manifest) -> list[NodeCondition]:
    out = []
    for c in (node.get("status") or {}).get("conditions") or []:
        words = [str(c.get(k) or "") for k in ("type", "status", "reason", "message")]
        out.append(NodeCondition(*words))
    return out


class NodeConditionWatch:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._informer: Informer | None = None
        self._lock = threading.Lock()

    def conditions(self, names: Iterable[str]) -> dict[str, list[NodeCondition]] | None:
        """Those Kubernetes nodes' conditions, by node name (a node the watch does not hold is left out);
        None until the watch has listed the nodes."""
        with self._lock:
            if self._informer is None:
                self._informer = Informer(self.kube.call, self.kube.stream_lines, PATH, {}, project=slim_node)
                self._informer.start()
            informer = self._informer
        if not informer.wait_synced(FIRST_LIST_WAIT):
            return None
        found = {name: informer.get("", name) for name in set(names)}
        return {name: conditions_of(node) for name, node in found.items() if node is not None}

    def stop(self) -> None:
        with self._lock:
            if self._informer is not None:
                self._informer.stop()
