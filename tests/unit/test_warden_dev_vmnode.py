"""warden_dev.vmnode's pure parts: the VM network's addresses, the kernel's and qemu's command lines, the
choice between KVM and TCG, and the reports a VM node sends back."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
from pathlib import Path

import pytest

from warden_dev import localcluster
from warden_dev.controlplane import SERVICE_CIDR
from warden_dev.vmnode import (
    BRIDGE,
    INIT_PATH,
    INIT_SCRIPT,
    INITRAMFS_CONF,
    INITRAMFS_HOOK,
    LOCAL_CLUSTER_RANGES,
    MAX_MEMORY_MIB,
    TCG_CPU,
    VM_SUBNET,
    VmFiles,
    VmNodeError,
    choose_accel,
    gateway_cidr,
    kernel_cmdline,
    node_layout,
    overlapping,
    parse_reports,
    qemu_argv,
)


def test_the_vm_network_collides_with_no_range_of_the_cluster() -> None:
    # the local cluster's own constants, so a change there that runs into the VM network fails here
    cluster = [f"{localcluster.NODE_IP}/32", localcluster.CLUSTER_CIDR, localcluster.POD_SUBNET, SERVICE_CIDR]
    assert set(cluster) - {localcluster.POD_SUBNET} <= set(LOCAL_CLUSTER_RANGES)
    assert overlapping(VM_SUBNET, [*cluster, *LOCAL_CLUSTER_RANGES]) == []
    assert ipaddress.ip_network(VM_SUBNET).is_private
    assert BRIDGE != localcluster.BRIDGE


def test_overlapping_names_the_ranges_that_share_an_address() -> None:
    assert overlapping("10.238.0.0/24", ["10.238.0.128/25", "10.0.0.0/8", "10.239.0.0/24", "192.168.0.1"]) == [
        "10.238.0.128/25",
        "10.0.0.0/8",
    ]


def test_nodes_get_distinct_addresses_taps_and_macs_behind_the_bridge_address() -> None:
    assert gateway_cidr() == "10.238.0.1/24"
    nodes = [node_layout(i) for i in range(1, 6)]
    assert [n.address for n in nodes] == [f"10.238.0.{10 + i}/24" for i in range(1, 6)]
    assert {n.gateway for n in nodes} == {"10.238.0.1"}
    for field in ("name", "tap", "address", "mac"):
        assert len({getattr(n, field) for n in nodes}) == 5, field
    assert nodes[0].tap == "warden-vmtap1" and len(nodes[-1].tap) <= 15  # IFNAMSIZ
    assert nodes[2].mac == "52:54:00:ee:00:03"


@pytest.mark.parametrize("index", [0, -1, 256])
def test_a_node_index_outside_the_network_is_refused(index: int) -> None:
    with pytest.raises(VmNodeError):
        node_layout(index)


def test_kernel_cmdline_boots_cgroup_v2_only_with_apparmor_and_our_init() -> None:
    args = kernel_cmdline(node_layout(2), "10.238.0.1:41000")
    assert {"cgroup_no_v1=all", "apparmor=1", "security=apparmor", "root=/dev/vda", "rw"} <= set(args)
    assert f"init={INIT_PATH}" in args
    assert "warden.ip=10.238.0.12/24" in args and "warden.gw=10.238.0.1" in args
    assert "warden.report=10.238.0.1:41000" in args and "warden.name=warden-vm-2" in args
    assert all(" " not in a for a in args)


@pytest.mark.parametrize(
    ("dev_kvm", "modules", "override", "want"),
    [
        (True, {"kvm", "kvm_intel"}, None, "kvm"),
        (True, {"kvm", "kvm_amd"}, None, "kvm"),
        # PVM serves /dev/kvm without VMX/SVM: a stock kernel runs only in its instruction emulator
        (True, {"kvm", "kvm_pvm"}, None, "tcg"),
        (False, {"kvm_intel"}, None, "tcg"),
        (True, {"kvm", "kvm_pvm"}, "kvm", "kvm"),
        (True, {"kvm_intel"}, "tcg", "tcg"),
    ],
)
def test_choose_accel_takes_kvm_only_where_it_is_hardware_backed(
    dev_kvm: bool, modules: set[str], override: str | None, want: str
) -> None:
    assert choose_accel(dev_kvm, modules, override) == want


def test_choose_accel_refuses_an_unknown_override() -> None:
    with pytest.raises(VmNodeError):
        choose_accel(True, {"kvm_intel"}, "hvf")


def _files(tmp_path: Path) -> VmFiles:
    return VmFiles(kernel=tmp_path / "vmlinuz", initrd=tmp_path / "initrd.img", disk=tmp_path / "root.img")


def _opt(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_qemu_argv_keeps_the_image_unchanged_and_uses_the_nodes_tap(tmp_path: Path) -> None:
    layout = node_layout(1)
    argv = qemu_argv(_files(tmp_path), layout, "tcg", "10.238.0.1:4000", tmp_path, cpus=2, memory_mib=2048)
    assert argv[0] == "qemu-system-x86_64"
    (drive,) = _opt(argv, "-drive")
    assert f"file={tmp_path / 'root.img'}" in drive and "snapshot=on" in drive
    (netdev,) = _opt(argv, "-netdev")
    assert f"ifname={layout.tap}" in netdev and "script=no" in netdev and "downscript=no" in netdev
    assert any(layout.mac in d for d in _opt(argv, "-device"))
    assert _opt(argv, "-append") == [" ".join(kernel_cmdline(layout, "10.238.0.1:4000"))]
    assert _opt(argv, "-accel") == ["tcg,thread=single"] and _opt(argv, "-cpu") == [TCG_CPU]
    assert _opt(argv, "-smp") == ["2"] and _opt(argv, "-m") == ["2048"]
    assert _opt(argv, "-serial") == [f"file:{tmp_path / 'console.log'}"]
    kvm = qemu_argv(_files(tmp_path), layout, "kvm", "10.238.0.1:4000", tmp_path)
    assert _opt(kvm, "-accel") == ["kvm"] and _opt(kvm, "-cpu") == ["host"]


@pytest.mark.parametrize(("cpus", "memory"), [(3, 1024), (0, 1024), (1, MAX_MEMORY_MIB + 1), (1, 128)])
def test_qemu_argv_stays_within_what_this_machine_shares(tmp_path: Path, cpus: int, memory: int) -> None:
    with pytest.raises(VmNodeError):
        qemu_argv(_files(tmp_path), node_layout(1), "tcg", "10.238.0.1:1", tmp_path, cpus=cpus, memory_mib=memory)


def test_parse_reports_reads_the_port_stream_and_the_console() -> None:
    console = (
        "[    2.1] random: crng init done\n"
        'WARDEN-VM-REPORT {"stage":"boot","kernel":"6.12.117+deb13-amd64","apparmor_enabled":"Y"}\n'
        "WARDEN-VM-REPORT {broken\n"
        '{"stage":"ready","apparmor_profiles":31}\n'
        "[1, 2]\n"
    )
    assert parse_reports(console) == [
        {"stage": "boot", "kernel": "6.12.117+deb13-amd64", "apparmor_enabled": "Y"},
        {"stage": "ready", "apparmor_profiles": 31},
    ]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_the_vms_init_is_valid_bash_and_reports_what_the_brief_asks() -> None:
    proc = subprocess.run(["bash", "-n"], input=INIT_SCRIPT, text=True, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    for needle in ("/sys/module/apparmor/parameters/enabled", "cgroup.controllers", "modprobe nfs", "uname -r"):
        assert needle in INIT_SCRIPT


@pytest.mark.skipif(shutil.which("sh") is None, reason="no sh")
def test_the_slim_initramfs_still_loads_what_finds_and_mounts_the_root() -> None:
    proc = subprocess.run(["sh", "-n"], input=INITRAMFS_HOOK, text=True, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    assert "MODULES=list" in INITRAMFS_CONF
    # the root is a virtio disk (q35: PCI, microvm: MMIO) with ext4 (kernel_cmdline's root= and rootfstype=)
    for module in ("virtio_pci", "virtio_mmio", "virtio_blk", "ext4"):
        assert module in INITRAMFS_HOOK
    assert "force_load" in INITRAMFS_HOOK


def test_tcg_threading_is_single_unless_told_and_a_wrong_word_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    layout = node_layout(1)
    monkeypatch.setenv("WARDEN_VM_TCG_THREAD", "multi")
    argv = qemu_argv(_files(tmp_path), layout, "tcg", "10.238.0.1:4000", tmp_path, cpus=2)
    assert _opt(argv, "-accel") == ["tcg,thread=multi"]
    monkeypatch.setenv("WARDEN_VM_TCG_THREAD", "many")
    with pytest.raises(VmNodeError, match="WARDEN_VM_TCG_THREAD=many: single or multi"):
        qemu_argv(_files(tmp_path), layout, "tcg", "10.238.0.1:4000", tmp_path, cpus=2)
