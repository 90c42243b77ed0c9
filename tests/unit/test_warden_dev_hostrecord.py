"""warden_dev.hostrecord: what `up` changed on the host is recorded before it is changed, and `down`
undoes exactly that: chains, rules, namespaces, bridge, address, cgroups, directories and sysctls that
were there before stay as they were."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from tests.unit.test_warden_dev_hostcheck import DOCKER_ONLY, IPTABLES
from warden_dev.hostcheck import HostLayout, HostSnapshot, parse_iptables_save
from warden_dev.hostrecord import (
    Change,
    HostRecord,
    iptables_undo,
    mounts_to_undo,
    remove_cgroup_tree,
    rule_target,
    undo_plan,
)

LAYOUT = HostLayout()

#: DOCKER_ONLY once the local cluster ran: kube-proxy's, the kubelet's and the CNI plugins' chains and
#: the jumps into them, beside Docker's (and one rule Docker added meanwhile, which stays)
AFTER_UP = (IPTABLES / "after-up.txt").read_text()


def snap(iptables: str = DOCKER_ONLY, **kw: object) -> HostSnapshot:
    s = HostSnapshot(iptables={"iptables": iptables, "ip6tables": ""})
    for k, v in kw.items():
        setattr(s, k, v)
    return s


def test_the_record_is_on_disk_before_each_change(tmp_path: Path) -> None:
    path = tmp_path / "state" / "host-record.json"
    record = HostRecord.start(path, snap(sysctls={"net.ipv4.ip_forward": "0"}, netns={"cni-theirs"}))
    assert json.loads(path.read_text())["baseline"]["netns"] == ["cni-theirs"]
    record.add(Change("sysctl", "net.ipv4.ip_forward", before="0", after="1"))
    record.add(Change("address", "10.239.0.1/32", after="lo"))
    loaded = HostRecord.load(path)
    assert loaded is not None
    assert loaded.changes == record.changes
    assert loaded.baseline == record.baseline
    assert [p.name for p in path.parent.iterdir()] == ["host-record.json"]  # written whole, no temp file left
    assert HostRecord.load(tmp_path / "nothing.json") is None


def test_a_change_is_recorded_once_with_the_hosts_own_value(tmp_path: Path) -> None:
    record = HostRecord.start(tmp_path / "r.json", snap())
    record.add(Change("sysctl", "net.ipv4.ip_forward", before="0", after="1"))
    record.add(Change("sysctl", "net.ipv4.ip_forward", before="1", after="1"))  # a second `up` step
    assert record.of_kind("sysctl") == [Change("sysctl", "net.ipv4.ip_forward", before="0", after="1")]
    with pytest.raises(ValueError, match="unknown change kind"):
        record.add(Change("route", "10.0.0.0/8"))


def test_observe_records_the_sysctls_the_kubelet_changed(tmp_path: Path) -> None:
    baseline = {"vm.overcommit_memory": "0", "kernel.panic": "0", "vm.panic_on_oom": "0", "net.ipv4.ip_forward": "0"}
    record = HostRecord.start(tmp_path / "r.json", snap(sysctls=baseline))
    record.add(Change("sysctl", "net.ipv4.ip_forward", before="0", after="1"))
    after = {**baseline, "vm.overcommit_memory": "1", "kernel.panic": "10", "net.ipv4.ip_forward": "1"}
    added = record.observe(HostSnapshot(sysctls=after))
    assert [(c.target, c.before, c.after, c.by) for c in added] == [
        ("vm.overcommit_memory", "0", "1", "kubelet/kube-proxy"),
        ("kernel.panic", "0", "10", "kubelet/kube-proxy"),
    ]
    assert record.observe(HostSnapshot(sysctls=after)) == []  # once


def test_rule_targets() -> None:
    assert rule_target(["-A", "FORWARD", "-j", "CNI-FORWARD"]) == "CNI-FORWARD"
    assert rule_target(["-A", "X", "-g", "KUBE-SEP-1"]) == "KUBE-SEP-1"
    assert rule_target(["-A", "X", "-p", "tcp"]) == ""


def _iptables(*commands: str) -> list[list[str]]:
    """``iptables -w -t <table> ...`` for each command, written as a shell would split it."""
    return [["iptables", "-w", "-t", *shlex.split(c)] for c in commands]


def test_iptables_undo_removes_only_the_chains_and_jumps_that_appeared() -> None:
    cmds = iptables_undo("iptables", parse_iptables_save(DOCKER_ONLY), parse_iptables_save(AFTER_UP))
    assert cmds == _iptables(
        # filter: the jump from FORWARD, then the chains (a rule inside one of ours goes with it)
        "filter -D FORWARD -m comment --comment 'CNI firewall plugin rules' -j CNI-FORWARD",
        "filter -F CNI-FORWARD",
        "filter -F CNI-ADMIN",
        "filter -X CNI-FORWARD",
        "filter -X CNI-ADMIN",
        "mangle -F KUBE-IPTABLES-HINT",
        "mangle -F KUBE-KUBELET-CANARY",
        "mangle -X KUBE-IPTABLES-HINT",
        "mangle -X KUBE-KUBELET-CANARY",
        "nat -D PREROUTING -m comment --comment 'kubernetes service portals' -j KUBE-SERVICES",
        "nat -D OUTPUT -m comment --comment 'kubernetes service portals' -j KUBE-SERVICES",
        'nat -D POSTROUTING -s 10.244.0.7/32 -m comment --comment \'name: "warden-pods" id: "abc"\''
        " -j CNI-4f1b2c3d4e5f",
        "nat -F KUBE-SERVICES",
        "nat -F KUBE-SVC-ABCDEF",
        "nat -F CNI-4f1b2c3d4e5f",
        "nat -X KUBE-SERVICES",
        "nat -X KUBE-SVC-ABCDEF",
        "nat -X CNI-4f1b2c3d4e5f",
    )
    assert not any("DOCKER" in " ".join(c) for c in cmds)  # Docker's chains and rules, old and new, stay


def test_iptables_undo_leaves_what_was_there_before() -> None:
    before = "*filter\n:FORWARD ACCEPT [0:0]\n:CNI-ADMIN - [0:0]\n-A FORWARD -j CNI-ADMIN\nCOMMIT\n"
    now = (
        "*filter\n:FORWARD ACCEPT [0:0]\n:CNI-ADMIN - [0:0]\n:CNI-FORWARD - [0:0]\n-A FORWARD -j CNI-ADMIN\n"
        "-A FORWARD -j CNI-FORWARD\n-A FORWARD -j CNI-FORWARD\nCOMMIT\n"
    )
    cmds = iptables_undo("ip6tables", parse_iptables_save(before), parse_iptables_save(now))
    assert cmds == [
        ["ip6tables", "-w", "-t", "filter", "-D", "FORWARD", "-j", "CNI-FORWARD"],
        ["ip6tables", "-w", "-t", "filter", "-D", "FORWARD", "-j", "CNI-FORWARD"],
        ["ip6tables", "-w", "-t", "filter", "-F", "CNI-FORWARD"],
        ["ip6tables", "-w", "-t", "filter", "-X", "CNI-FORWARD"],
    ]
    assert iptables_undo("iptables", parse_iptables_save(now), parse_iptables_save(now)) == []


def recorded(tmp_path: Path) -> HostRecord:
    """What `up` records on a host with Docker, one netns and one kubepods cgroup of its own."""
    before = snap(
        netns={"cni-theirs"},
        cgroups=set(),
        sysctls={"net.ipv4.ip_forward": "1", "net.bridge.bridge-nf-call-iptables": "0", "vm.overcommit_memory": "0"},
    )
    record = HostRecord.start(tmp_path / "host-record.json", before)
    record.add(Change("sysctl", "net.bridge.bridge-nf-call-iptables", before="0", after="1"))
    record.add(Change("address", "10.239.0.1/32", after="lo"))
    record.add(Change("link", "warden-cni0", by="CNI bridge plugin"))
    record.add(Change("dir", "/var/lib/kubelet", before="absent"))
    record.add(Change("dir", "/var/log/pods", before="empty"))
    record.add(
        Change(
            "dir", "/var/lib/cni", before="nonempty", pattern="results/warden-pods-* results/cni-loopback-{container}-*"
        )
    )
    record.add(Change("mkdir", "/var/run/netns", before="absent"))
    record.observe(HostSnapshot(sysctls={**before.sysctls, "vm.overcommit_memory": "1"}))
    return record


def test_undo_plan_undoes_the_record(tmp_path: Path) -> None:
    now = snap(
        AFTER_UP,
        links={"lo", "eth0", "docker0", "warden-cni0", "veth1234"},
        lo_addresses={"127.0.0.1/8", "10.239.0.1/32"},
        netns={"cni-theirs", "cni-ours-1", "cni-ours-2"},
        cgroups={"/sys/fs/cgroup/memory/kubepods", "/sys/fs/cgroup/cpu/kubepods"},
        sysctls={"net.ipv4.ip_forward": "1", "net.bridge.bridge-nf-call-iptables": "1", "vm.overcommit_memory": "1"},
    )
    plan = undo_plan(recorded(tmp_path), now, LAYOUT, container_ids=["c1", "c2"])
    assert plan.unmount_under == ["/var/lib/kubelet", "/var/log/pods"]
    assert plan.netns == ["/var/run/netns/cni-ours-1", "/var/run/netns/cni-ours-2"]  # not cni-theirs
    assert plan.commands[:2] == [
        ["ip", "link", "delete", "warden-cni0"],
        ["ip", "addr", "del", "10.239.0.1/32", "dev", "lo"],
    ]
    assert plan.commands[2:] == iptables_undo(
        "iptables", parse_iptables_save(DOCKER_ONLY), parse_iptables_save(AFTER_UP)
    )
    assert plan.cgroups == ["/sys/fs/cgroup/cpu/kubepods", "/sys/fs/cgroup/memory/kubepods"]
    assert plan.remove == ["/var/lib/kubelet"]
    assert plan.empty == ["/var/log/pods"]
    assert plan.remove_matching == [  # others' CNI results stay
        "/var/lib/cni/results/warden-pods-*",
        "/var/lib/cni/results/cni-loopback-c1-*",
        "/var/lib/cni/results/cni-loopback-c2-*",
    ]
    assert plan.rmdir == ["/var/run/netns"]
    assert plan.sysctls == {"net.bridge.bridge-nf-call-iptables": "0", "vm.overcommit_memory": "0"}


def test_kube_routers_ipsets_go_after_the_rules_naming_them_and_others_sets_stay(tmp_path: Path) -> None:
    record = recorded(tmp_path)  # the baseline had no ipsets
    record.baseline.ipsets = ["KUBE-SRC-THEIRS", "blocklist"]
    now = snap(AFTER_UP, ipsets={"KUBE-SRC-THEIRS", "blocklist", "KUBE-DST-ABC", "kube-router-local-ips", "mine"})
    plan = undo_plan(record, now, LAYOUT)
    rules = iptables_undo("iptables", parse_iptables_save(DOCKER_ONLY), parse_iptables_save(AFTER_UP))
    assert plan.commands[-len(rules) - 2 :] == [  # every iptables rule first: a set named by a rule stays
        *rules,
        ["ipset", "destroy", "KUBE-DST-ABC"],
        ["ipset", "destroy", "kube-router-local-ips"],
    ]


def test_undo_plan_after_a_partial_up_or_a_second_down(tmp_path: Path) -> None:
    record = recorded(tmp_path)
    # the bridge never came, the address is gone, someone else set the sysctl since: nothing to do there
    now = snap(DOCKER_ONLY, sysctls={"net.bridge.bridge-nf-call-iptables": "0", "vm.overcommit_memory": "2"})
    plan = undo_plan(record, now, LAYOUT)
    assert plan.commands == [] and plan.netns == [] and plan.cgroups == [] and plan.sysctls == {}
    assert plan.remove == ["/var/lib/kubelet"]  # removing what is already gone is harmless


def test_mounts_are_undone_deepest_first_and_only_under_the_clusters_directories() -> None:
    mounts = [
        "/",
        "/var/lib/kubelet/pods/a/volumes/x",
        "/var/lib/kubelet/pods/a/volumes/x/sub",
        "/var/lib/kubelet",
        "/var/lib/kubelet-other/m",
        "/var/lib/docker/overlay2/z/merged",
        "/var/lib/kubelet/pods/a/volumes/x",
    ]
    assert mounts_to_undo(mounts, ["/var/lib/kubelet"]) == [
        "/var/lib/kubelet/pods/a/volumes/x/sub",
        "/var/lib/kubelet/pods/a/volumes/x",
        "/var/lib/kubelet",
    ]


def test_remove_cgroup_tree(tmp_path: Path) -> None:
    top = tmp_path / "kubepods"
    (top / "burstable" / "pod1" / "c1").mkdir(parents=True)
    (top / "besteffort").mkdir()
    remove_cgroup_tree(top)
    assert not top.exists()
