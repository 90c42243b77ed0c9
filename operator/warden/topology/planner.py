"""Where each worker sits in the network, and what its Kubernetes node says of it, told to Slurm: a pure
planner (worker pods, their nodes' labels and the spec in; each Slurm node's place and features out).

Topology (``spec.topology``, Slurm 25.05 on). The operator writes topology.conf once: for a tree, one
empty switch ``naming.TREE_ROOT``; for blocks, one empty ``BlockName`` per block some worker's node
is labelled with (``naming.EMPTY_BLOCK`` while there is none) and ``BlockSizes``. It places every
worker node by Slurm's dynamic topology (``scontrol update NodeName=... Topology=...``, through
slurmrestd): ``default:root_:<tier 1>:...:<leaf>`` for a tree (the label values, top tier first;
Slurm makes the switches below the root as they are named), ``default:<block>`` for blocks. Nothing
restarts: a new switch needs no reconfigure, a new block one ``scontrol reconfigure`` (the ConfigMap
changes; ``warden.slurmsync`` asks the reconcile for it and places the node once the block is there).

A worker is left out of the topology (``unplaced``, with why) when its node lacks a label, or when its
switch names disagree with a worker placed before it (a value that is a switch of another tier, or a
switch under another parent): switch names are the label values themselves, so they must be unique in
the tree. Label values need no escaping: Kubernetes allows letters, digits, ``-``, ``_`` and ``.``,
at most 63 characters, all of which Slurm takes in a switch, block or feature name.

Slurm keeps each node's place in its state, and slurmctld does not start (nor take a reconfigure) with
a node placed where its topology.conf names nothing: a block stays in topology.conf while a node is in
it (``keep_named_blocks``), places are taken back when spec.topology goes (``placing``, ``clear``),
and the CRD refuses a tree swapped for blocks in one edit.

Features (``spec.nodeLabelFeatures``): each label's value, after its prefix, becomes a feature of the
workers on that node, beside the features their group registers with. A label feature equal to a
worker group's own feature (``naming.group_feature``) is never given: it would put the node in that
group's NodeSet.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from warden import naming
from warden.model import (
    DrainedNode,
    NodeLabelFeature,
    SlurmClusterSpec,
    SlurmClusterStatus,
    Topology,
    TopologyStatus,
)
from warden.slurm.model import Node

#: status lists at most this many unplaced workers
UNPLACED_SHOWN = 20
#: Slurm series whose slurmrestd cannot read or set a node's place
NO_TOPOLOGY_SERIES = ("24.11",)


@dataclass(frozen=True, slots=True)
class Placement:
    #: the node's Topology= value ("" leaves it out of the topology); None without spec.topology
    topology: str | None
    features: tuple[str, ...]  # from node labels, sorted


@dataclass
class Plan:
    places: dict[str, Placement] = field(default_factory=dict)  # by worker pod (= Slurm node) name
    unplaced: dict[str, str] = field(default_factory=dict)  # pod -> why it is outside the topology
    switches: Counter[str] = field(default_factory=Counter)
    blocks: Counter[str] = field(default_factory=Counter)
    features: Counter[str] = field(default_factory=Counter)

    def status(self, topology: Topology | None) -> TopologyStatus:
        unplaced = sorted(self.unplaced.items())[:UNPLACED_SHOWN]
        return TopologyStatus(
            plugin=topology.plugin if topology is not None else "",
            switches=dict(sorted(self.switches.items())),
            blocks=dict(sorted(self.blocks.items())),
            features=dict(sorted(self.features.items())),
            unplaced=[DrainedNode(node=pod, reason=why) for pod, why in unplaced],
        )


@dataclass(frozen=True, slots=True)
class Update:
    """What to change of one Slurm node: None leaves that part as it is."""

    node: str
    features: tuple[str, ...] | None
    topology: str | None


def wanted_labels(topology: Topology | None, features: list[NodeLabelFeature]) -> tuple[str, ...]:
    """The node labels the plan reads; empty: the cluster needs no node's labels."""
    keys: list[str] = []
    if topology is not None and topology.tree is not None:
        keys += topology.tree.switch_labels
    if topology is not None and topology.block is not None:
        keys.append(topology.block.label)
    keys += [f.label for f in features]
    return tuple(dict.fromkeys(keys))


def given(previous: TopologyStatus | None) -> str:
    """The topology plugin the sync last placed nodes for ("" for none), as status recorded it."""
    return previous.plugin if previous is not None else ""


def placing(spec: SlurmClusterSpec, previous: TopologyStatus | None, restapi_series: str) -> bool:
    """Whether the sync places nodes: the spec names node labels, or places it gave are to be taken
    back (spec.topology removed: a place Slurm keeps in its state would stop slurmctld from starting
    with another topology). Places wait while slurmrestd runs a Slurm without them (24.11, mid-upgrade);
    features alone do not."""
    wanted = bool(wanted_labels(spec.topology, spec.node_label_features)) or bool(given(previous))
    return wanted and not (speaks_topology(spec, previous) and restapi_series in NO_TOPOLOGY_SERIES)


def speaks_topology(spec: SlurmClusterSpec, previous: TopologyStatus | None) -> bool:
    """Whether the sync reads and sets places (``naming.RESTAPI_VERSION_TOPOLOGY``)."""
    return spec.topology is not None or bool(given(previous))


def plan(
    topology: Topology | None,
    label_features: list[NodeLabelFeature],
    reserved: Collection[str],
    workers: Mapping[str, str | None],
    labels: Mapping[str, Mapping[str, str]],
    clear: bool = False,
) -> Plan:
    """Each worker pod's place and label features. ``workers``: pod -> the Kubernetes node it runs on
    (None while unscheduled: no place yet); ``labels``: node -> its labels (only those the plan reads
    are needed); ``reserved``: features labels may not give (the groups' own); ``clear``: without a
    topology, take every place back ("")."""
    out = Plan()
    tree = _Tree()
    for pod in sorted(workers):
        node = workers[pod]
        if node is None:
            continue
        on = labels.get(node, {})
        features = tuple(sorted({f.prefix + on[f.label] for f in label_features if on.get(f.label)} - set(reserved)))
        out.features.update(features)
        place: str | None = "" if clear else None
        if topology is not None and topology.tree is not None:
            path, why = tree.path(node, on, topology.tree.switch_labels)
            if why:
                out.unplaced[pod] = why
                place = ""
            else:
                out.switches.update(path)
                place = ":".join([naming.SLURM_TOPOLOGY, naming.TREE_ROOT, *path])
        elif topology is not None and topology.block is not None:
            block = on.get(topology.block.label)
            if not block:
                out.unplaced[pod] = f"node {node} has no label {topology.block.label}"
                place = ""
            else:
                out.blocks[block] += 1
                place = f"{naming.SLURM_TOPOLOGY}:{block}"
        out.places[pod] = Placement(place, features)
    return out


class _Tree:
    """The switches placed so far: each name's tier and parent, so that a name means one switch."""

    def __init__(self) -> None:
        self.where: dict[str, tuple[int, str]] = {}  # switch -> (tier, parent)
        self.first: dict[str, str] = {}  # switch -> the node that placed it

    def path(self, node: str, on: Mapping[str, str], tiers: list[str]) -> tuple[list[str], str]:
        """The switches above ``node``, top first, or why it cannot be placed."""
        path: list[str] = []
        for label in tiers:
            value = on.get(label)
            if not value:
                return [], f"node {node} has no label {label}"
            path.append(value)
        parent = naming.TREE_ROOT
        for tier, switch in enumerate(path):
            seen = self.where.get(switch)
            if seen is not None and seen != (tier, parent):
                return [], (f"switch {switch} (label {tiers[tier]}) is also a switch elsewhere in the tree"
                            f" (as on node {self.first[switch]}): switch names must be unique")  # fmt: skip
            parent = switch
        parent = naming.TREE_ROOT
        for tier, switch in enumerate(path):
            self.where.setdefault(switch, (tier, parent))
            self.first.setdefault(switch, node)
            parent = switch
        return path, ""


def keep_named_blocks(planned: Plan, placed: Iterable[str]) -> None:
    """A block some Slurm node is still placed in (``placed``: nodes' Topology= values) stays in
    topology.conf, counted 0, until the node is moved: slurmctld does not start (nor reconfigure) with a
    node in a block its topology.conf does not name."""
    for place in placed:
        name, _, unit = place.partition(":")
        if name == naming.SLURM_TOPOLOGY and unit and ":" not in unit:
            planned.blocks.setdefault(unit, 0)


def updates(
    planned: Plan,
    nodes: Mapping[str, Node],
    own_features: Mapping[str, tuple[str, ...]],
    configured_blocks: Collection[str] | None,
) -> list[Update]:
    """What to change so that each registered worker node has its group's features and its label
    features (``own_features``: pod -> the features its group registers with), and its place.
    ``configured_blocks``: the blocks topology.conf names now (None for a tree or no topology): a node
    whose block is not there yet is placed once it is."""
    out: list[Update] = []
    for pod, place in sorted(planned.places.items()):
        node = nodes.get(pod)
        if node is None:  # not registered (yet): its slurmd brings its group's features when it does
            continue
        own = own_features.get(pod)  # unknown: leave its features (without its group's it leaves its NodeSet)
        want = tuple(dict.fromkeys([*own, *place.features])) if own is not None else None
        features = want if want is not None and set(want) != set(node.features) else None
        topology = place.topology if place.topology is not None and place.topology != node.topology else None
        if topology and configured_blocks is not None and topology.split(":", 1)[1] not in configured_blocks:
            topology = None  # its block is not in topology.conf yet: after the reconfigure
        if features is not None or topology is not None:
            out.append(Update(pod, features, topology))
    return out


def given_topology(previous: SlurmClusterStatus | None) -> TopologyStatus | None:
    """What the last round recorded of the places and features it gave (status.slurmNodes.topology)."""
    return previous.slurm_nodes.topology if previous is not None and previous.slurm_nodes is not None else None


def observed_blocks(status: SlurmClusterStatus | None) -> tuple[str, ...]:
    """The blocks the Slurm sync last saw workers' nodes in (topology.conf names them)."""
    topology = status.slurm_nodes.topology if status is not None and status.slurm_nodes is not None else None
    return tuple(sorted(topology.blocks)) if topology is not None else ()
