"""warden_dev.hostcheck: `python -m warden_dev up` refuses a host where another cluster runs a node
(another kubelet, its ports, KUBE-*/CNI-* iptables chains, its bridge, cgroups, files), fed with
process lists, /proc/net/tcp and iptables-save text instead of a real host."""

from __future__ import annotations

from pathlib import Path

import pytest

from warden_dev.hostcheck import (
    HostInUse,
    HostLayout,
    HostSnapshot,
    Listener,
    Process,
    check,
    dir_state,
    kubepods_cgroups,
    mountpoints,
    parse_iptables_save,
    parse_proc_net_tcp,
    prefixed_chains,
    report,
)

HOST_NET = "net:[4026531840]"
LAYOUT = HostLayout()

#: a host with Docker only: its chains, no Kubernetes
IPTABLES = Path(__file__).parent / "fixtures" / "iptables"  # iptables-save of a host
DOCKER_ONLY = (IPTABLES / "docker-only.txt").read_text()

#: the same host with another cluster's kubelet, kube-proxy and CNI plugins at work
WITH_KUBE = (IPTABLES / "with-kube.txt").read_text()


def proc(pid: int, *argv: str, netns: str = HOST_NET) -> Process:
    return Process(pid, argv, netns)


def snapshot(**kw: object) -> HostSnapshot:
    snap = HostSnapshot(own_netns=HOST_NET, iptables={"iptables": DOCKER_ONLY, "ip6tables": ""})
    for k, v in kw.items():
        setattr(snap, k, v)
    return snap


def test_a_host_with_docker_only_is_free() -> None:
    procs = [
        proc(1, "/sbin/init"),
        proc(200, "/usr/bin/dockerd", "-H", "fd://"),
        proc(210, "/usr/bin/containerd", "--config", "/etc/containerd/config.toml"),
    ]
    assert check(snapshot(processes=procs), LAYOUT) == []


def test_another_kubelet_is_found() -> None:
    procs = [proc(1, "/sbin/init"), proc(4321, "/usr/bin/kubelet", "--kubeconfig=/etc/kubernetes/kubelet.conf")]
    (finding,) = check(snapshot(processes=procs), LAYOUT)
    assert "kubelet" in finding.what and "pid 4321" in finding.what
    assert "/usr/bin/kubelet --kubeconfig=/etc/kubernetes/kubelet.conf" in finding.what
    assert "stop that cluster" in finding.remedy


@pytest.mark.parametrize(
    "argv", [("/usr/local/bin/k3s", "server"), ("kube-proxy", "--config=x"), ("/snap/bin/kubelite",)]
)
def test_all_in_one_kubernetes_and_kube_proxy_are_found(argv: tuple[str, ...]) -> None:
    assert len(check(snapshot(processes=[proc(77, *argv)]), LAYOUT)) == 1


def test_another_enforcers_ipsets_and_process_are_found_other_sets_are_not() -> None:
    assert check(snapshot(ipsets={"blocklist", "f2b-sshd"}), LAYOUT) == []
    (finding,) = check(snapshot(ipsets={"blocklist", "KUBE-SRC-ABCD", "kube-router-local-ips"}), LAYOUT)
    assert "KUBE-SRC-ABCD" in finding.what and "kube-router-local-ips" in finding.what
    assert "ipset destroy" in finding.remedy
    assert len(check(snapshot(processes=[proc(88, "/usr/local/bin/kube-router", "--run-firewall=true")]), LAYOUT)) == 1


def test_warden_devs_own_kubelet_and_a_kind_nodes_kubelet_are_not_another_cluster() -> None:
    procs = [
        proc(500, "/root/.cache/warden/bin/v1.37.0/kubelet", "--config=x"),  # ours (own_pids)
        proc(600, "/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml", netns="net:[4026532999]"),
    ]
    assert check(snapshot(processes=procs), LAYOUT, own_pids=[500]) == []


def test_a_kubelet_whose_namespace_is_unknown_counts() -> None:
    assert len(check(snapshot(processes=[proc(600, "kubelet", netns="")]), LAYOUT)) == 1


#: /proc/net/tcp and tcp6 (trailing columns after the inode cut): 127.0.0.1:10040 and 0.0.0.0:10250 listen,
#: one connection; [::1]:10050 listens
PROC_NET_TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:2738 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 31337 1
   1: 00000000:280A 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 42424 1
   2: 0100007F:8AE0 0100007F:280A 01 00000000:00000000 00:00000000 00000000     0        0 55555 1
"""
PROC_NET_TCP6 = (
    "  sl  local_address                         remote_address                        st tx_queue rx_queue ...\n"
    "   0: 00000000000000000000000001000000:2742 00000000000000000000000000000000:0000 0A 00000000:00000000 "
    "00:00000000 00000000     0        0 777 1\n"
)


def test_proc_net_tcp_listeners() -> None:
    assert parse_proc_net_tcp(PROC_NET_TCP) == [("127.0.0.1", 10040, 31337), ("0.0.0.0", 10250, 42424)]
    assert parse_proc_net_tcp(PROC_NET_TCP6) == [("::1", 10050, 777)]
    assert parse_proc_net_tcp("") == []


def test_a_port_of_the_node_in_use_is_found() -> None:
    snap = snapshot(listeners=[Listener("0.0.0.0", 10250, 42424, 4321, "kubelet")])
    (finding,) = check(snap, LAYOUT)
    assert finding.what == "TCP port 10250 (kubelet) is in use on 0.0.0.0 by pid 4321 (kubelet)"
    assert check(snap, LAYOUT, own_pids=[4321]) == []
    (unknown,) = check(snapshot(listeners=[Listener("127.0.0.1", 10256, 1, None)]), LAYOUT)
    assert "10256 (kube-proxy healthz)" in unknown.what


def test_a_listener_on_the_registry_port_is_found_with_its_own_remedy() -> None:
    snap = snapshot(listeners=[Listener("0.0.0.0", 5000, 7, 900, "docker-registry")])
    (finding,) = check(snap, LAYOUT)
    assert (
        finding.what == "TCP port 5000 (the local cluster's registry) is in use on 0.0.0.0 by pid 900 (docker-registry)"
    )
    assert "systemctl disable --now docker-registry" in finding.remedy
    assert check(snap, LAYOUT, own_pids=[900]) == []  # the cluster's own registry


def test_iptables_save_is_read_by_table() -> None:
    tables = parse_iptables_save(WITH_KUBE)
    assert sorted(tables) == ["filter", "mangle", "nat"]
    assert tables["filter"].chains == {"FORWARD": "DROP", "CNI-FORWARD": "-", "KUBE-FIREWALL": "-"}
    assert tables["nat"].rules[3] == (
        '-A POSTROUTING -s 10.244.0.7/32 -m comment --comment "name: \\"other-pods\\" id: \\"abc\\"" '
        "-j CNI-4f1b2c3d4e5f"
    )
    assert prefixed_chains(parse_iptables_save(DOCKER_ONLY)) == []
    assert prefixed_chains(tables) == [
        ("filter", "CNI-FORWARD"),
        ("filter", "KUBE-FIREWALL"),
        ("mangle", "KUBE-IPTABLES-HINT"),
        ("mangle", "KUBE-KUBELET-CANARY"),
        ("nat", "CNI-4f1b2c3d4e5f"),
        ("nat", "KUBE-POSTROUTING"),
        ("nat", "KUBE-SERVICES"),
    ]


def test_chains_of_another_cluster_are_found_for_ipv4_and_ipv6() -> None:
    findings = check(
        snapshot(iptables={"iptables": WITH_KUBE, "ip6tables": "*filter\n:KUBE-FIREWALL - [0:0]\nCOMMIT\n"}), LAYOUT
    )
    assert [f.what.split(" ")[0] for f in findings] == ["iptables", "ip6tables"]
    assert "filter/CNI-FORWARD" in findings[0].what and "(and" not in findings[0].what
    assert "warden_dev removes only chains it made" in findings[0].remedy


def test_many_chains_are_summed_up() -> None:
    text = "*nat\n" + "".join(f":KUBE-SVC-{i:04d} - [0:0]\n" for i in range(20)) + "COMMIT\n"
    (finding,) = check(snapshot(iptables={"iptables": text}), LAYOUT)
    assert finding.what.endswith("(and 12 more)")


def test_leftovers_of_a_local_cluster_are_found() -> None:
    snap = snapshot(
        lo_addresses={"127.0.0.1/8", "10.239.0.1/32"},
        links={"lo", "eth0", "docker0", "warden-cni0"},
        netns={"cni-0b6e3d2a"},
        cgroups={"/sys/fs/cgroup/memory/kubepods"},
        mounts=["/", "/var/lib/kubelet/pods/x/volumes/kubernetes.io~empty-dir/y", "/var/lib/docker/overlay2/z/merged"],
        dirs={"/var/lib/kubelet": "nonempty", "/var/log/pods": "empty", "/var/lib/cni": "nonempty"},
    )
    whats = [f.what for f in check(snap, LAYOUT)]
    assert whats == [
        "10.239.0.1/32 (the node address) is already on lo",
        "the pod bridge warden-cni0 exists already",
        "pod network namespaces of another CNI setup in /var/run/netns: cni-0b6e3d2a",
        "another kubelet's cgroups: /sys/fs/cgroup/memory/kubepods",
        "mounts under the cluster's directories: /var/lib/kubelet/pods/x/volumes/kubernetes.io~empty-dir/y",
        "not empty, and not made by warden_dev: /var/lib/kubelet",  # the CNI cache may hold others' entries
    ]


def test_the_refusal_names_what_was_found_and_how_to_proceed() -> None:
    findings = check(snapshot(processes=[proc(9, "kubelet")], iptables={"iptables": WITH_KUBE}), LAYOUT)
    err = HostInUse(findings)
    text = str(err)
    assert text.startswith("refusing to start the local cluster")
    assert "pid 9" in text and "nat/KUBE-SERVICES" in text and "->" in text
    assert text == report(findings) and err.findings == findings


def test_snapshot_helpers(tmp_path: Path) -> None:
    assert mountpoints("36 35 98:0 / /mnt/with\\040space rw - ext3 /dev/root rw\n") == ["/mnt/with space"]
    assert dir_state(tmp_path / "nope") == "absent"
    assert dir_state(tmp_path) == "empty"
    (tmp_path / "f").touch()
    assert dir_state(tmp_path) == "nonempty"
    (tmp_path / "memory" / "kubepods").mkdir(parents=True)
    (tmp_path / "cpu").mkdir()
    (tmp_path / "kubepods").mkdir()
    assert kubepods_cgroups(tmp_path) == [tmp_path / "kubepods", tmp_path / "memory" / "kubepods"]
