"""The topology planner (``warden.topology.planner``): worker pods, their Kubernetes nodes' labels and the spec in;
each Slurm node's place and features out, and what to change of the nodes Slurm has."""

from __future__ import annotations

import pytest

from warden.model import NodeLabelFeature, Topology, TopologyStatus, parse_spec
from warden.render.config import config_blocks, slurm_config_files
from warden.render.context import Cluster
from warden.slurm.model import Node
from warden.topology.planner import (
    Update,
    keep_named_blocks,
    placing,
    plan,
    speaks_topology,
    updates,
    wanted_labels,
)

SPINE, LEAF, CLIQUE = "example.com/spine", "example.com/leaf", "nvidia.com/gpu.clique"
ZONE = "topology.kubernetes.io/zone"
TREE = Topology.model_validate({"tree": {"switchLabels": [SPINE, LEAF]}})
BLOCK = Topology.model_validate({"block": {"label": CLIQUE, "blockSizes": [2, 4]}})
ZONES = [NodeLabelFeature(label=ZONE, prefix="zone-")]
GROUP = ("warden-group-cpu",)


def _node(name: str, features: tuple[str, ...] = GROUP, topology: str = "") -> Node:
    return Node(name=name, state="IDLE", flags=frozenset(), reason="", gres="", features=features, partitions=(),
                topology=topology)  # fmt: skip


def test_a_tree_places_each_worker_under_its_nodes_switches_top_first() -> None:
    labels = {"k1": {SPINE: "s1", LEAF: "l1"}, "k2": {SPINE: "s1", LEAF: "l2"}}
    out = plan(TREE, [], (), {"w-0": "k1", "w-1": "k1", "w-2": "k2"}, labels)
    assert out.places["w-0"].topology == "default:root_:s1:l1"
    assert out.places["w-2"].topology == "default:root_:s1:l2"
    assert out.switches == {"s1": 3, "l1": 2, "l2": 1} and not out.unplaced
    status = out.status(TREE)
    assert status.plugin == "topology/tree" and status.switches == {"l1": 2, "l2": 1, "s1": 3}


def test_a_worker_on_a_node_without_a_label_is_left_out_and_status_says_why() -> None:
    labels = {"k1": {SPINE: "s1"}, "k2": {CLIQUE: "b1"}}
    tree = plan(TREE, [], (), {"w-0": "k1"}, labels)
    assert tree.places["w-0"].topology == "" and tree.unplaced == {"w-0": f"node k1 has no label {LEAF}"}
    block = plan(BLOCK, [], (), {"w-0": "k1", "w-1": "k2", "w-2": None}, labels)
    assert block.places["w-1"].topology == "default:b1" and block.places["w-0"].topology == ""
    assert "w-2" not in block.places  # unscheduled: nowhere yet
    assert [(u.node, u.reason) for u in block.status(BLOCK).unplaced] == [("w-0", f"node k1 has no label {CLIQUE}")]


def test_a_switch_name_that_means_two_switches_leaves_the_later_worker_out() -> None:
    # leaf "x" under two spines, and a spine named like another tier's leaf: one name, one switch in Slurm
    labels = {"k1": {SPINE: "s1", LEAF: "x"}, "k2": {SPINE: "s2", LEAF: "x"}, "k3": {SPINE: "x", LEAF: "l9"}}
    out = plan(TREE, [], (), {"w-0": "k1", "w-1": "k2", "w-2": "k3"}, labels)
    assert out.places["w-0"].topology == "default:root_:s1:x"
    assert out.places["w-1"].topology == "" and "switch x" in out.unplaced["w-1"] and "unique" in out.unplaced["w-1"]
    assert out.places["w-2"].topology == "" and "switch x" in out.unplaced["w-2"]
    assert out.switches == {"s1": 1, "x": 1}


def test_node_labels_become_features_with_their_prefix_never_a_groups_own() -> None:
    features = [*ZONES, NodeLabelFeature(label="node.kubernetes.io/instance-type")]
    labels = {"k1": {ZONE: "a", "node.kubernetes.io/instance-type": "m5.xlarge"}, "k2": {ZONE: ""},
              "k3": {"node.kubernetes.io/instance-type": "warden-group-gpu"}}  # fmt: skip
    out = plan(None, features, {"warden-group-gpu"}, {"w-0": "k1", "w-1": "k2", "w-2": "k3"}, labels)
    assert out.places["w-0"] == out.places["w-0"].__class__(None, ("m5.xlarge", "zone-a"))
    assert out.places["w-1"].features == () and out.places["w-2"].features == ()  # empty value; a group's feature
    assert out.features == {"m5.xlarge": 1, "zone-a": 1} and out.status(None).plugin == ""


def test_only_nodes_that_differ_are_updated_and_a_groups_features_stay() -> None:
    labels = {"k1": {CLIQUE: "b1", ZONE: "a"}, "k2": {CLIQUE: "b2", ZONE: "b"}}
    out = plan(BLOCK, ZONES, GROUP, {"w-0": "k1", "w-1": "k2", "w-2": "k1", "w-3": "k1"}, labels)
    nodes = {
        "w-0": _node("w-0", ("warden-group-cpu", "zone-a"), "default:b1"),  # as planned: nothing to do
        "w-1": _node("w-1", ("warden-group-cpu", "zone-a"), "default:b1"),  # its node's labels changed
        "w-2": _node("w-2"),  # just registered
    }  # w-3: not registered yet
    own = {pod: GROUP for pod in ("w-0", "w-1", "w-2", "w-3")}
    assert updates(out, nodes, own, {"b1", "b2"}) == [
        Update("w-1", ("warden-group-cpu", "zone-b"), "default:b2"),
        Update("w-2", ("warden-group-cpu", "zone-a"), "default:b1"),
    ]
    # a block topology.conf does not name yet: features now, the place after the reconfigure
    assert updates(out, nodes, own, {"b1"}) == [
        Update("w-1", ("warden-group-cpu", "zone-b"), None),
        Update("w-2", ("warden-group-cpu", "zone-a"), "default:b1"),
    ]
    # a pod whose group is unknown keeps its features (without its group's it would leave its NodeSet)
    assert updates(out, {"w-2": _node("w-2")}, {}, {"b1", "b2"}) == [Update("w-2", None, "default:b1")]


def test_a_node_whose_labels_went_is_taken_out_of_the_topology() -> None:
    out = plan(BLOCK, [], (), {"w-0": "k1"}, {"k1": {}})
    assert updates(out, {"w-0": _node("w-0", topology="default:b1")}, {"w-0": GROUP}, {"b1"}) == [
        Update("w-0", None, "")
    ]


def test_only_the_labels_the_spec_names_are_read() -> None:
    assert wanted_labels(None, []) == ()
    assert wanted_labels(TREE, ZONES) == (SPINE, LEAF, ZONE)
    assert wanted_labels(BLOCK, [NodeLabelFeature(label=CLIQUE)]) == (CLIQUE,)


def _files(topology: dict[str, object], blocks: tuple[str, ...] = ()) -> dict[str, str]:
    spec = parse_spec({"workerGroups": [{"name": "cpu"}], "topology": topology})
    return slurm_config_files(Cluster("demo", "hpc", spec, blocks=blocks))


def test_topology_conf_holds_the_root_switch_or_the_blocks_seen_and_slurm_conf_the_plugin() -> None:
    tree = _files({"tree": {"switchLabels": [SPINE, LEAF]}})
    assert "TopologyPlugin=topology/tree" in tree["slurm.conf"].splitlines()
    assert [line for line in tree["topology.conf"].splitlines() if not line.startswith("#")] == ["SwitchName=root_"]
    block = _files({"block": {"label": CLIQUE, "blockSizes": [2, 4]}}, blocks=("b2", "b1"))
    assert "TopologyPlugin=topology/block" in block["slurm.conf"].splitlines()
    lines = [line for line in block["topology.conf"].splitlines() if not line.startswith("#")]
    assert lines == ["BlockName=b1", "BlockName=b2", "BlockSizes=2,4"]
    # no worker's node has a block label yet: Slurm needs one block to start
    none = _files({"block": {"label": CLIQUE, "blockSizes": [2]}})
    assert [line for line in none["topology.conf"].splitlines() if line.startswith("BlockName")] == ["BlockName=none_"]
    assert config_blocks(()) == ("none_",)
    plain = slurm_config_files(Cluster("demo", "hpc", parse_spec({"workerGroups": [{"name": "cpu"}]})))
    assert "topology.conf" not in plain and "TopologyPlugin" not in plain["slurm.conf"]


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"topology": {}}, "give exactly one of tree and block"),
        ({"topology": {"tree": {"switchLabels": [SPINE]}, "block": {"label": CLIQUE, "blockSizes": [2]}}}, "one of"),
        ({"topology": {"block": {"label": CLIQUE, "blockSizes": [4, 6]}}}, "6 is not 4"),
        ({"topology": {"block": {"label": CLIQUE, "blockSizes": [4, 16, 8]}}}, "smallest first"),
        ({"topology": {"tree": {"switchLabels": [SPINE, SPINE]}}}, "each tier needs its own label"),
        ({"topology": {"tree": {"switchLabels": [SPINE]}}, "slurmVersion": "24.11"}, "set slurmVersion 26.05"),
        ({"nodeLabelFeatures": [{"label": ZONE}, {"label": ZONE, "prefix": "z"}]}, "name each label once"),
        ({"nodeLabelFeatures": [{"label": ZONE, "prefix": "a,b"}]}, "nodeLabelFeatures.0.prefix"),
    ],
)
def test_a_topology_slurm_would_refuse_is_refused_naming_the_field(spec: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_spec({"workerGroups": [{"name": "cpu"}], **spec})


def test_places_are_taken_back_after_the_topology_is_removed_and_named_blocks_stay_until_then() -> None:
    # spec.topology removed: every place goes back to none, label features stay
    out = plan(None, ZONES, GROUP, {"w-0": "k1"}, {"k1": {ZONE: "a"}}, clear=True)
    assert updates(out, {"w-0": _node("w-0", ("warden-group-cpu", "zone-a"), "default:b1")}, {"w-0": GROUP}, None) == [
        Update("w-0", None, "")
    ]
    # a block a node is still in stays in topology.conf (0 workers to be there) until the node is moved
    moved = plan(BLOCK, [], (), {"w-0": "k1"}, {"k1": {CLIQUE: "b2"}})
    keep_named_blocks(moved, ["default:b1", "default:b2"])
    assert moved.blocks == {"b2": 1, "b1": 0}
    assert config_blocks(moved.blocks) == ("b1", "b2")


def test_nodes_are_placed_only_while_slurmrest_can_and_the_spec_or_a_past_place_asks() -> None:
    spec = parse_spec({"workerGroups": [{"name": "cpu"}], "topology": {"tree": {"switchLabels": [SPINE]}}})
    plain = parse_spec({"workerGroups": [{"name": "cpu"}]})
    was = TopologyStatus(plugin="topology/tree")
    assert placing(spec, None, "26.05") and speaks_topology(spec, None)
    assert not placing(spec, None, "24.11")  # slurmrestd not upgraded yet: it has no places
    assert not placing(plain, None, "26.05") and not speaks_topology(plain, None)
    assert placing(plain, was, "26.05") and speaks_topology(plain, was)  # removed: places to take back
    labels = parse_spec({"workerGroups": [{"name": "cpu"}], "nodeLabelFeatures": [{"label": ZONE}]})
    assert placing(labels, None, "24.11") and not speaks_topology(labels, None)  # features: any Slurm
