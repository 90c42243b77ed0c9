"""A WorkerSet's pods, pure: which to make, which failed ones to clear, the set's status.

A WorkerSet (one per worker group, rendered by the SlurmCluster reconcile) holds the group's pod
template and size. Its pods are ``<workerset>-<ordinal>``, each with a stable DNS name under the
nodes Service (``hostname``/``subdomain``), like a StatefulSet's, but the operator makes and deletes
them itself: a StatefulSet always removes its highest ordinals, and a scale-in must be free to remove
the idle nodes, or those whose jobs end soonest (``warden.workers.scalein`` picks them, from Slurm's word).

This module only fills the set up to its size, at the lowest free ordinals, and clears pods that
ended (evicted, their node lost): everything that removes a live pod is decided elsewhere, with Slurm
in view (scale-in, upgrades), or, when the operator does not read Slurm, by ``plan(shrink=True)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from warden import naming
from warden.render.pods import Manifest, content_hash
from warden.workers.pod import SetPod


@dataclass
class PodSetPlan:
    create: list[int] = field(default_factory=list)  # ordinals
    delete: list[tuple[str, str]] = field(default_factory=list)  # (pod, why)


def template_hash(workerset: Manifest) -> str:
    return content_hash(workerset["spec"]["template"])


def plan(desired: int, pods: Iterable[SetPod], shrink: bool) -> PodSetPlan:
    """Pods to make and to delete so the set has ``desired`` of them.

    A pod being deleted still holds its ordinal (its name comes back only once it is gone), and still
    counts: the set is not filled up behind a pod that is leaving. With ``shrink`` (nobody reads Slurm)
    the highest ordinals above ``desired`` are deleted at once."""
    pods = sorted(pods, key=lambda p: p.ordinal)
    out = PodSetPlan()
    for p in pods:
        if p.ended and not p.deleting:
            out.delete.append((p.name, f"its pod {p.ended.lower()} and will not run again; a new one replaces it"))
    taken = {p.ordinal for p in pods}
    free = (i for i in range(desired + len(taken)) if i not in taken)
    out.create = [next(free) for _ in range(max(0, desired - len(pods)))]
    live = [p for p in pods if not p.deleting and not p.ended]
    if shrink and len(live) > desired:
        for p in sorted(live, key=lambda p: -p.ordinal)[: len(live) - desired]:
            out.delete.append((p.name, f"the group shrinks to {desired}"))
    return out


def pod_manifest(workerset: Manifest, i: int, template: str) -> Manifest:
    """Pod ``i`` of a WorkerSet: its template, a stable DNS name, owned by the set (garbage collection
    removes the pods with it), marked with the configuration the set was last applied with."""
    meta, spec = workerset["metadata"], workerset["spec"]
    name = f"{meta['name']}-{i}"
    tmeta = spec["template"].get("metadata") or {}
    annotations = {**(tmeta.get("annotations") or {}), naming.POD_TEMPLATE_ANNOTATION: template}
    config = (meta.get("annotations") or {}).get(naming.POD_CONFIG_ANNOTATION)
    if config:  # made with the current configuration: nothing to tell its kubelet (Applier.mark_pods)
        annotations[naming.POD_CONFIG_ANNOTATION] = config
    owner = {
        "apiVersion": workerset["apiVersion"],
        "kind": workerset["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": dict(tmeta.get("labels") or {}),
            "annotations": annotations,
            "ownerReferences": [owner],
        },
        "spec": {**spec["template"]["spec"], "hostname": name},
    }


def selector_text(selector: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items()))


def status(workerset: Manifest, pods: Iterable[SetPod]) -> Manifest:
    """``status`` of a WorkerSet: what its scale subresource (an HPA) and `kubectl get` read."""
    current = template_hash(workerset)
    live = [p for p in pods if not p.deleting and not p.ended]
    return {
        "replicas": len(live),
        "readyReplicas": sum(1 for p in live if p.ready),
        "updatedReplicas": sum(1 for p in live if p.template == current),
        "updateRevision": current,
        "selector": selector_text(workerset["spec"]["selector"]["matchLabels"]),
        "observedGeneration": int(workerset["metadata"].get("generation", 0)),
    }
