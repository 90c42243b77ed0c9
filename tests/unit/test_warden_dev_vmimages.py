"""The VM nodes' images disk (warden_dev.vmimages), its pure parts: which images, the disk's name and size,
the host's own containerd for making it, and how qemu attaches it behind the root disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from warden_dev.localcluster import REGISTRY_ADDRESS
from warden_dev.vmimages import containerd_config, disk_name, disk_size_mib, slurm_images, split_ref
from warden_dev.vmnode import VmFiles, VmNodeError, node_layout, qemu_argv


def test_the_slurm_pods_images_come_from_the_local_registry_at_one_version() -> None:
    refs = slurm_images("1.2.3")
    assert refs == [f"{REGISTRY_ADDRESS}/warden/{n}:1.2.3" for n in ("controller", "login", "worker", "populate-jail")]
    assert split_ref(refs[3]) == (REGISTRY_ADDRESS, "warden/populate-jail", "1.2.3")


@pytest.mark.parametrize("ref", ["warden/worker", "127.0.0.1:5000/warden/worker", "/warden/worker:1"])
def test_a_ref_without_registry_or_tag_is_refused(ref: str) -> None:
    with pytest.raises(VmNodeError, match="registry/repository:tag"):
        split_ref(ref)


def test_the_disk_is_named_by_the_images_digests_in_any_order() -> None:
    a, b = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    assert disk_name([a, b]) == disk_name([b, a])
    assert disk_name([a, b]) != disk_name([a]) and disk_name([a]).endswith(".img")


def test_the_disk_has_room_for_the_store_and_ext4() -> None:
    assert disk_size_mib(0) == 256
    assert disk_size_mib(3 * 2**30) == 4096 + 256


def test_the_hosts_containerd_for_the_disk_keeps_its_store_apart_and_runs_no_cri(tmp_path: Path) -> None:
    config = containerd_config(tmp_path / "root", tmp_path / "state", tmp_path / "sock")
    assert f'root = "{tmp_path / "root"}"' in config and f'state = "{tmp_path / "state"}"' in config
    assert f'address = "{tmp_path / "sock"}"' in config
    assert 'disabled_plugins = ["io.containerd.grpc.v1.cri"]' in config


def test_qemu_attaches_the_images_disk_after_the_root_disk_and_leaves_both_unchanged(tmp_path: Path) -> None:
    files = VmFiles(kernel=tmp_path / "vmlinuz", initrd=tmp_path / "initrd.img", disk=tmp_path / "root.img")
    argv = qemu_argv(files, node_layout(1), "tcg", "10.238.0.1:4000", tmp_path, disks=[tmp_path / "images.img"])
    drives = [argv[i + 1] for i, a in enumerate(argv) if a == "-drive"]
    assert [d.split(",")[1] for d in drives] == [f"file={tmp_path / 'root.img'}", f"file={tmp_path / 'images.img'}"]
    assert all("snapshot=on" in d for d in drives)  # root=/dev/vda stays the root disk; the nodes share the other
    blk = [argv[i + 1] for i, a in enumerate(argv) if a == "-device" and argv[i + 1].startswith("virtio-blk")]
    assert blk == ["virtio-blk-pci,drive=disk0", "virtio-blk-pci,drive=disk1"]
