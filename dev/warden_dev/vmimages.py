"""The images a VM node starts with: a disk holding containerd's store with them already pulled and unpacked,
made on the host once per set of images and attached to every VM node read-only underneath (qemu's
``snapshot=on``), mounted at ``/var/lib/containerd`` before the node's containerd starts.

Why: under TCG a VM node pulls and unpacks an image about 20 times slower than the host (measured: the
worker image, 281 MB, took over 8 minutes on a 2-CPU VM node while two other VM nodes pulled theirs), and the
nodes tier's four Slurm images were most of its time. The host pulls them from the local registry with a
containerd of its own (its store in a directory, no CRI), then ``mkfs.ext4 -d`` makes the disk from that
directory. In the VM the kubelet still asks the registry for each image (``pullPolicy: Always``) and finds
every layer there: the pull takes a manifest round trip.

The disk is named after the images' manifest digests in the local registry: images rebuilt from changed
sources get a new disk; the older disks are removed."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from warden_dev import vmnode
from warden_dev.localcluster import REGISTRY_ADDRESS, project_version
from warden_dev.vmnode import VmNodeError, log

LABEL = "warden-images"
MANIFEST_TYPES = ", ".join((
    "application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.docker.distribution.manifest.v2+json",
))  # fmt: skip


#: the images of a SlurmCluster's pods that run on VM nodes (the operator, REST API and exporter stay on the host)
SLURM_IMAGES = ("controller", "login", "worker", "populate-jail")


def slurm_images(version: str | None = None) -> list[str]:
    """The local registry's refs of ``SLURM_IMAGES`` at ``version`` (the project's)."""
    return [f"{REGISTRY_ADDRESS}/warden/{name}:{version or project_version()}" for name in SLURM_IMAGES]


def images_dir() -> Path:
    return vmnode.vm_dir() / "images"


def split_ref(ref: str) -> tuple[str, str, str]:
    """``registry/repo/path:tag`` -> (registry, repo path, tag)."""
    registry, _, rest = ref.partition("/")
    repo, sep, tag = rest.rpartition(":")
    if not registry or not sep or not repo or "/" in tag:
        raise VmNodeError(f"image {ref}: want registry/repository:tag")
    return registry, repo, tag


def disk_name(digests: Sequence[str]) -> str:
    """The disk's file name for these manifest digests (the order they are given in does not matter)."""
    return hashlib.sha256("\n".join(sorted(digests)).encode()).hexdigest()[:16] + ".img"


def disk_size_mib(used_bytes: int) -> int:
    """Room for the store (``used_bytes``) and ext4's own: a third more and 256 MiB."""
    return int(used_bytes * 4 / 3 / 2**20) + 256


def containerd_config(root: Path, state: Path, socket: Path) -> str:
    """A containerd of the host's own for making the disk: its store in ``root``, no CRI."""
    return (f'version = 2\nroot = "{root}"\nstate = "{state}"\n'
            f'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n[grpc]\n  address = "{socket}"\n')  # fmt: skip


def manifest_digest(ref: str) -> str:
    """The digest the local registry serves for ``ref`` (which must name it: ``127.0.0.1:5000/...``)."""
    registry, repo, tag = split_ref(ref)
    if registry != REGISTRY_ADDRESS:
        raise VmNodeError(f"image {ref}: only images in the local registry ({REGISTRY_ADDRESS}) are preloaded")
    req = urllib.request.Request(f"http://{registry}/v2/{repo}/manifests/{tag}", method="HEAD",
                                 headers={"Accept": MANIFEST_TYPES})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            digest = resp.headers.get("Docker-Content-Digest", "")
    except OSError as e:
        raise VmNodeError(f"image {ref}: the local registry did not answer ({e}); push the images first") from e
    if not digest.startswith("sha256:"):
        raise VmNodeError(f"image {ref}: the local registry gave no digest")
    return str(digest)


def ensure_disk(refs: Sequence[str]) -> Path:
    """The images disk for ``refs`` (images in the local registry), made when missing."""
    digests = [manifest_digest(ref) for ref in refs]
    disk = images_dir() / disk_name(digests)
    if disk.is_file():
        return disk
    for tool in ("containerd", "ctr", "mkfs.ext4"):
        if shutil.which(tool) is None:
            raise VmNodeError(f"{tool} is missing (hack/install-deps.sh nodes installs it)")
    t0 = time.monotonic()
    work = images_dir() / "build"
    if work.exists():
        vmnode.run(["rm", "-rf", "--one-file-system", str(work)])
    root, state, socket, config = work / "root", work / "state", work / "containerd.sock", work / "config.toml"
    for d in (root, state):
        d.mkdir(parents=True)
    config.write_text(containerd_config(root, state, socket))
    with (work / "containerd.log").open("wb") as out:
        daemon = subprocess.Popen(["containerd", "--config", str(config)], stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)  # fmt: skip
    try:
        ctr = ["ctr", "--address", str(socket), "--namespace", "k8s.io"]
        deadline = time.monotonic() + 60
        while subprocess.run([*ctr, "version"], capture_output=True).returncode != 0:
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise VmNodeError(f"containerd for the images disk did not start: {work / 'containerd.log'}")
            time.sleep(0.5)
        for ref in refs:
            vmnode.run([*ctr, "images", "pull", "--plain-http", ref], timeout=900)
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
    used = sum(p.lstat().st_size for p in root.rglob("*") if not p.is_symlink())
    tmp = work / "disk.img"
    vmnode.run(["mkfs.ext4", "-q", "-F", "-L", LABEL, "-E", "root_owner=0:0", "-d", str(root), str(tmp),
                f"{disk_size_mib(used)}M"], timeout=900)  # fmt: skip
    for old in images_dir().glob("*.img"):
        old.unlink()
    tmp.rename(disk)
    (images_dir() / "images.json").write_text(json.dumps(dict(zip(refs, digests, strict=True)), indent=1) + "\n")
    vmnode.run(["rm", "-rf", "--one-file-system", str(work)])
    log(f"images disk {disk.name} ({len(refs)} images, {used / 2**20:.0f} MiB) made in {time.monotonic() - t0:.0f}s")
    return disk
