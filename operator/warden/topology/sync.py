"""The Slurm sync's step for topology and node-label features: read the Kubernetes nodes' labels and the
live topology.conf, plan (``planner``), give each worker node its place and features through slurmrestd,
and tell of it (``SlurmNodesPlaced``, ``SlurmNodePlaceFailed``)."""

from __future__ import annotations

import logging

from warden import naming
from warden.events import Event, Ref
from warden.kube.client import Kube
from warden.kube.events import EventRecorder
from warden.model import SlurmClusterSpec, SlurmClusterStatus, TopologyStatus
from warden.naming import Names
from warden.nodesync import WorkerPod
from warden.render import config
from warden.render.pods import Manifest
from warden.slurm.model import Node, SlurmError
from warden.slurm.rest import SlurmRest
from warden.topology import planner

log = logging.getLogger(__name__)


def live_blocks(kube: Kube, body: Manifest) -> set[str]:
    """The blocks the cluster's live topology.conf (its slurm-config ConfigMap) names."""
    meta = body["metadata"]
    names = Names(cluster=meta["name"], namespace=meta["namespace"])
    cm = kube.get("v1", "ConfigMap", meta["namespace"], names.slurm_config)
    text = str(((cm or {}).get("data") or {}).get("topology.conf", ""))
    return {line.split("=", 1)[1].split()[0] for line in text.splitlines() if line.startswith("BlockName=")}


class NodePlacement:
    def __init__(self, kube: Kube, recorder: EventRecorder) -> None:
        self.kube = kube
        self.recorder = recorder
        #: worker nodes Slurm refused a place the last round, by cluster
        self.unplaced: dict[tuple[str, str], set[str]] = {}

    def place(
        self,
        body: Manifest,
        spec: SlurmClusterSpec,
        previous: SlurmClusterStatus | None,
        pods: list[WorkerPod],
        nodes: list[Node],
        rest: SlurmRest,
        speaks: bool,
    ) -> TopologyStatus | None:
        """Give each registered worker node its place in the topology and its node-label features
        (``planner``): one read of the Kubernetes nodes' labels, then only the nodes that differ.
        What it gave, for status (None: nothing any more)."""
        keys = planner.wanted_labels(spec.topology, spec.node_label_features)
        labels = self.kube.node_labels(keys) if keys else {}
        groups = {g.name: config.group_features(g) for g in spec.worker_groups}
        workers = {p.name: p.k8s_node for p in pods if not p.deleting}
        own = {p.name: groups[p.group] for p in pods if not p.deleting and p.group in groups}
        reserved = {naming.group_feature(g.name) for g in spec.worker_groups}
        clear = spec.topology is None and speaks  # spec.topology removed: take the places back
        planned = planner.plan(spec.topology, spec.node_label_features, reserved, workers, labels, clear)
        blocks = spec.topology is not None and spec.topology.block is not None
        if blocks:
            planner.keep_named_blocks(planned, (n.topology for n in nodes if n.topology))
        # the blocks the live topology.conf names: a reconcile writes a new one there only once Slurm's check
        # of the file took it (``warden.configcheck``), not at once
        configured = live_blocks(self.kube, body) if blocks else None
        todo = planner.updates(planned, {n.name: n for n in nodes}, own, configured)
        key = (body["metadata"]["namespace"], body["metadata"]["name"])
        placed, failed = 0, dict[str, str]()
        for update in todo:
            try:
                rest.place(update.node, update.features, update.topology)
                placed += 1
            except SlurmError as e:  # level-based: tried again next round
                failed[update.node] = str(e)
        cluster = Ref.of(body)
        if placed:
            first = next(u for u in todo if u.node not in failed)
            what = ", ".join(w for w, v in (("place", first.topology), ("features", first.features)) if v is not None)
            self.recorder.post_event(Event(cluster, "SlurmNodesPlaced", f"{placed} worker nodes given their place"
                                           f" or features (first: {first.node}: {what})"))  # fmt: skip
        # a node placed in a block topology.conf has just named may fail once, before slurmctld has the
        # new file: told when it fails again the next round
        again = sorted(n for n in failed if n in self.unplaced.get(key, set()))
        self.unplaced[key] = set(failed)
        if failed:
            node = next(iter(failed))
            log.warning("SlurmCluster %s/%s: %d worker nodes not placed: %s: %s", *key, len(failed), node, failed[node])
        if again:
            self.recorder.post_event(Event(cluster, "SlurmNodePlaceFailed", f"{len(again)} worker nodes not"
                                           f" placed; {again[0]}: {failed[again[0]]}"))  # fmt: skip
        status = planned.status(spec.topology)
        cleared = {u.node for u in todo if u.topology == "" and u.node not in failed}
        if clear and any(n.topology and n.name not in cleared for n in nodes):
            status.plugin = planner.given(planner.given_topology(previous))  # places left to take back: next round
        if not status.plugin and not spec.node_label_features:
            return None
        return status
