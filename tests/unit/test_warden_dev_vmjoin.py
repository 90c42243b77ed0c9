"""warden_dev.vmjoin's pure parts: what a VM node of the local cluster is told (pod subnet, taint, registry
mirror, CNI, kubelet) and the host rules it needs."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

from warden_dev import localcluster, vmjoin
from warden_dev.vmnode import BRIDGE, ROOT_PACKAGES, VM_SUBNET, Share, VmFiles, kernel_cmdline, node_layout, qemu_argv


def test_each_node_has_its_own_pod_subnet_inside_the_clusters_and_apart_from_the_host_nodes() -> None:
    subnets = [ipaddress.IPv4Network(vmjoin.pod_subnet(i)) for i in range(1, 9)]
    host = ipaddress.IPv4Network(localcluster.POD_SUBNET)
    cluster = ipaddress.IPv4Network(localcluster.CLUSTER_CIDR)
    for i, net in enumerate(subnets):
        assert net.subnet_of(cluster)
        assert not net.overlaps(host)
        assert not any(net.overlaps(other) for other in subnets[i + 1 :])


def test_the_kubelet_registers_tainted_on_cgroup_v2_with_the_nodes_address_and_subnet() -> None:
    layout = node_layout(2)
    cfg = vmjoin.kubelet_config(layout)
    assert cfg["registerWithTaints"] == [{"key": vmjoin.VM_NODE_KEY, "value": "true", "effect": "NoSchedule"}]
    assert cfg["address"] == layout.address.split("/")[0]
    assert cfg["podCIDR"] == vmjoin.pod_subnet(2)
    assert cfg["cgroupDriver"] == "cgroupfs" and "failCgroupV1" not in cfg  # v2: the kubelet's default holds
    assert cfg["authentication"]["anonymous"]["enabled"] is False


def test_pods_reach_other_nodes_pods_by_their_own_address() -> None:
    conf = json.loads(vmjoin.cni_conflist(3))
    bridge = conf["plugins"][0]
    assert bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"] == [[{"subnet": vmjoin.pod_subnet(3)}]]
    # and the host does not masquerade its own pods' traffic to them
    nat = [r for r in vmjoin.HOST_RULES if r[0] == "nat"]
    assert nat and all(r[2:4] == ("-s", localcluster.CLUSTER_CIDR) and "RETURN" in r for r in nat)


def test_images_the_charts_name_are_pulled_through_the_mirror_on_the_bridge() -> None:
    mirror = vmjoin.mirror_address()
    assert ipaddress.ip_address(mirror.split(":")[0]) in ipaddress.ip_network(VM_SUBNET)
    hosts = vmjoin.registry_hosts_toml(mirror)
    assert f'server = "http://{localcluster.REGISTRY_ADDRESS}"' in hosts
    assert f'[host."http://{mirror}"]' in hosts and '"pull", "resolve"' in hosts
    cfg = vmjoin.mirror_config(localcluster.registry_dir(), mirror)
    assert "readonly:\n      enabled: true" in cfg and f"addr: {mirror}" in cfg


def test_the_host_forwards_only_what_crosses_the_vm_bridge() -> None:
    forward = [r for r in vmjoin.HOST_RULES if r[1] == "FORWARD"]
    assert {("-i", BRIDGE), ("-o", BRIDGE)} == {tuple(r[2:4]) for r in forward}


def test_a_joining_node_mounts_its_share_and_the_init_runs_node_start() -> None:
    layout = node_layout(1)
    files = VmFiles(kernel=Path("/k"), initrd=Path("/i"),
                    disk=Path("/d"))  # fmt: skip
    shares = [Share(vmjoin.SHARE_TAG, Path("/s")),
              Share(vmjoin.LOGS_TAG, Path("/l"), readonly=False)]  # fmt: skip
    argv = qemu_argv(files, layout, "tcg", "10.238.0.1:1", Path("/n"), shares=shares)
    fsdevs = [argv[i + 1] for i, a in enumerate(argv) if a == "-fsdev"]
    assert fsdevs == ["local,id=warden,path=/s,security_model=none,readonly=on",
                      "local,id=wardenlogs,path=/l,security_model=none"]  # fmt: skip
    assert "warden.share=1" in argv[argv.index("-append") + 1]
    assert "warden.share=1" not in kernel_cmdline(layout, "x:1")
    for name in ("kubelet.yaml", "kubelet.kubeconfig", "kube-proxy.yaml", "containerd.toml", "images/pause.tar",
                 "seccomp/worker.json", "node-ip", "node-labels", "apparmor/warden-*"):  # fmt: skip
        assert name in vmjoin.NODE_START, name


def test_the_nodes_load_the_apparmor_profiles_the_chart_ships() -> None:
    names = sorted(p.name for p in vmjoin.APPARMOR_PROFILES.glob("warden-*"))
    assert names == ["warden-login", "warden-worker"]
    for name in names:
        text = (vmjoin.APPARMOR_PROFILES / name).read_text()
        assert f"profile {name} flags=" in text  # the name spec.security.appArmorProfile: Warden asks for
        assert "pivot_root," in text and "mount," in text


def test_stand_in_gpus_put_the_plugin_and_drivers_where_node_start_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The builds themselves (go build, the C stand-in driver) are the e2e tier's; here, what the share holds."""
    from warden_dev import fakedriver

    plugin = tmp_path / "plugin"
    plugin.write_text("#!/bin/true\n")
    drivers = []
    for version in ("580.1", "575.2"):
        (tmp_path / version / "lib64").mkdir(parents=True)
        (tmp_path / version / "lib64" / f"libcuda.so.{version}").write_text("x")
        (tmp_path / version / "lib64" / "libcuda.so.1").symlink_to(f"libcuda.so.{version}")
        drivers.append(fakedriver.FakeDriver(version, 13000, tmp_path / version))
    monkeypatch.setattr(localcluster, "build_fake_gpu_plugin", lambda: plugin)
    monkeypatch.setattr(fakedriver, "build_all", lambda: drivers)
    share = tmp_path / "share"
    (share / "bin").mkdir(parents=True)
    vmjoin.write_gpus(share, 2)
    assert (share / "gpus").read_text() == "2\n"
    assert (share / "gpu-drivers").read_text() == "/warden/drivers/580.1,/warden/drivers/575.2\n"
    assert (share / "bin" / "warden-fake-gpu-plugin").stat().st_mode & 0o111
    assert (share / "drivers" / "575.2" / "lib64" / "libcuda.so.1").is_symlink()
    for name in ('"$S/gpus"', '"$S/gpu-drivers"', '"$S/bin/warden-fake-gpu-plugin"', "c 195"):
        assert name in vmjoin.NODE_START, name


def test_the_nodes_runtime_is_crun_from_the_nodes_own_packages_and_its_go_agents_run_on_one_thread() -> None:
    """Under TCG an exec into a container (every exec probe) took 1.8 s with runc and 0.9 s with crun; the
    kubelet's own periodic work 71% of an emulated CPU as Go's defaults run it, 53% with GOMAXPROCS=1 GOGC=400
    (docs/local-cluster.md)."""
    cri = tomllib.loads(vmjoin.containerd_config())["plugins"]["io.containerd.grpc.v1.cri"]
    runc = cri["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"]["BinaryName"] == "/usr/bin/crun" and "crun" in ROOT_PACKAGES
    start = vmjoin.NODE_START
    assert start.index("export GOMAXPROCS=1 GOGC=400") < start.index("containerd --config")


def test_the_nfs_servers_keeper_starts_it_again_when_it_exits_and_stops_it_on_sigterm(tmp_path: Path) -> None:
    """The VM nodes' NFS server (nfs-ganesha) runs under a keeper: one that crashed is back a second later
    (every NFS client of the jail hung while it was gone); stopping the keeper stops the server."""
    starts, log = tmp_path / "starts", tmp_path / "server.log"
    server = tmp_path / "server"
    # a stand-in server: its first start exits at once (a crash), the second stays up
    server.write_text(f"#!/bin/sh\necho start >> {starts}\n[ $(wc -l < {starts}) -gt 1 ] && exec sleep 600\nexit 139\n")
    server.chmod(0o755)
    keeper = subprocess.Popen(["bash", "-c", vmjoin.keeper_script([str(server)], log)], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not (starts.is_file() and len(starts.read_text().split()) == 2):
            assert time.monotonic() < deadline and keeper.poll() is None, "not started again"
            time.sleep(0.05)
        assert f"warden: {server} exited (139); starting it again" in log.read_text()
        children = subprocess.run(["pgrep", "-f", "sleep 600", "-s", str(keeper.pid)], capture_output=True,
                                  text=True).stdout.split()  # fmt: skip
        assert len(children) == 1, children
        os.kill(keeper.pid, signal.SIGTERM)
        assert keeper.wait(timeout=30) == 0
        deadline = time.monotonic() + 30
        while Path(f"/proc/{children[0]}").exists() and Path(f"/proc/{children[0]}/stat").read_text().split()[2] != "Z":
            assert time.monotonic() < deadline, "the server outlived its keeper"
            time.sleep(0.05)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(keeper.pid, signal.SIGKILL)


def test_a_node_that_never_became_ready_is_explained_by_its_logs_last_lines(tmp_path: Path) -> None:
    """The node's logs are removed with it when its test ends: the error quotes their ends, and says which
    log the guest never wrote."""
    (tmp_path / "kubelet.log").write_text("".join(f"line {i}\n" for i in range(100)))
    (tmp_path / "node-start.log").write_text("images disk mounted on /var/lib/containerd\n")
    told = vmjoin.logs_tail(tmp_path, [("kubelet.log", 3), ("containerd.log", 5), ("node-start.log", 5)])
    assert told.splitlines() == [
        "--- kubelet.log (last 3 lines):", "line 97", "line 98", "line 99",
        "--- containerd.log (last 5 lines):", "(no such log)",
        "--- node-start.log (last 5 lines):", "images disk mounted on /var/lib/containerd",
    ]  # fmt: skip
