"""VM nodes for the local cluster, first slice: a qemu VM booted from Debian's own kernel with a root built
from Debian's packages, on a bridge and a tap of its own (``python -m warden_dev vm-node boot|down``).

What a node is (docs/local-cluster.md, "VM nodes (first slice)"):

* a root filesystem debootstrapped once (Debian ``VM_SUITE``, ``--variant=minbase``) with ``ROOT_PACKAGES``
  installed by apt inside it (Debian's kernel and its initramfs, containerd, nfs-common, apparmor,
  iproute2, ...), cached under ``~/.cache/warden/vm/root``; an ext4 disk image made from it
  (``mkfs.ext4 -d``, no loop device, no mount) with ``INIT_SCRIPT`` as PID 1;
* the VM boots that kernel and initramfs (``-kernel``/``-initrd``) with the image as its disk, opened
  ``snapshot=on`` (what the VM writes goes to a temporary file qemu removes: the image stays as built),
  cgroup v2 only (``cgroup_no_v1=all``), AppArmor on (``apparmor=1 security=apparmor``);
* its network is a tap on a bridge this module makes (``BRIDGE``, ``VM_SUBNET``, apart from every range
  of the local cluster), the VM's address given on the kernel command line;
* the VM proves it booted: its init sends reports (one JSON object a line) to a port the host opens on
  the bridge address, and prints them on the serial console: kernel, cgroup v2 controllers, AppArmor
  mode, whether the NFS client loads, then AppArmor's profiles loaded and containerd answering.

KVM or TCG: ``choose_accel`` takes KVM only where a hardware-backed KVM (``kvm_intel``/``kvm_amd``) is
loaded. On a host whose ``/dev/kvm`` is served by ``kvm_pvm`` (PVM, pagetable-based virtualization, e.g.
a cloud VM without nested VMX) a stock kernel cannot run: PVM runs only guest kernels built for it
(position independent, ``CONFIG_PVM_GUEST``), and Debian's is linked in the top 2 GB, the host's half
of the address space (docs/local-cluster.md has every combination tried). ``WARDEN_VM_ACCEL=kvm|tcg``
overrides the choice.

Everything ``boot`` makes (the bridge, the tap, the qemu process, the node's directory) is written to the
node's state file before it is made; ``down`` removes exactly that, and nothing is left behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warden_dev.controlplane import SERVICE_CIDR, cache_dir

VM_SUITE = "trixie"
#: installed by apt inside the debootstrapped root (minbase has no kernel, init or network tools); pigz:
#: containerd unpacks gzip layers with unpigz when it is there (image pulls are the slowest part of a node under TCG);
#: crun: the node's OCI runtime (vmjoin.containerd_config: under TCG an exec, every exec probe, costs half runc's)
ROOT_PACKAGES = ("linux-image-amd64", "initramfs-tools", "zstd", "kmod", "containerd", "runc", "crun", "nfs-common",
                 "apparmor", "iproute2", "iptables", "tini", "procps", "ca-certificates",
                 "containernetworking-plugins", "conntrack", "ethtool", "socat", "pigz")  # fmt: skip
#: the initramfs holds only what finds and mounts the root (Debian's default, MODULES=most, is 37 MB and
#: every module udev loads from it costs seconds under TCG); zstd is initramfs-tools' own default
INITRAMFS_CONF = "MODULES=list\nCOMPRESS=zstd\n"
INITRAMFS_HOOK = """#!/bin/sh
# warden_dev VM node: the virtio disk (PCI or MMIO) and ext4, loaded at boot
case "$1" in prereqs) exit 0;; esac
. /usr/share/initramfs-tools/hook-functions
for m in virtio_pci virtio_mmio virtio_blk ext4; do force_load "$m"; done
"""
#: the disk image's size (a sparse file; the root itself is well under 1 GB)
IMAGE_SIZE = "4G"

BRIDGE = "warden-vm0"
TAP_PREFIX = "warden-vmtap"
#: the VM nodes' own network: the host's end is the first address, node i gets 10.238.0.(10+i).
#: Apart from the local cluster's node address (10.239.0.1), its pods (10.244.0.0/16), its Services
#: (SERVICE_CIDR) and Docker's 172.16.0.0/12 (``test_the_vm_network_collides_with_no_range_of_the_cluster``).
VM_SUBNET = "10.238.0.0/24"
LOCAL_CLUSTER_RANGES = ("10.239.0.1/32", "10.244.0.0/16", SERVICE_CIDR, "172.16.0.0/12")
FIRST_NODE_HOST = 10

MAX_MEMORY_MIB = 4096
#: the CPU model under TCG: a plain x86-64 one. With `-cpu max` (every feature TCG emulates) a node's kernel
#: died of a double fault in kmalloc after 88 minutes under load (register state garbled: a TCG fault);
#: WARDEN_VM_CPU overrides
TCG_CPU = "qemu64"
#: TCG's threading: one host thread runs all of a node's vCPUs in turn. With `thread=multi` (a host thread per
#: vCPU) two 2-CPU nodes put four vCPU threads on this machine's two cores, and a node's kernel died of a
#: double fault in kmalloc again, with `-cpu qemu64`, 14 minutes into the nodes tier (EFLAGS with reserved
#: bits set: a TCG fault, not the guest's). Multi-threaded TCG stops every vCPU of a node for work one
#: vCPU asks of all (TLB flushes, atomics it cannot do in place) and waits for descheduled threads there;
#: each node took most of a core either way. WARDEN_VM_TCG_THREAD overrides (``multi``)
TCG_THREAD = "single"
INIT_PATH = "/usr/local/sbin/warden-vm-init"
REPORT_MARKER = "WARDEN-VM-REPORT"


class VmNodeError(RuntimeError):
    """A VM node could not be built, booted or removed."""


def log(msg: str) -> None:
    print(f"[vmnode] {msg}", file=sys.stderr, flush=True)


def vm_dir() -> Path:
    """The root, the image, the kernel and each node's state (``$WARDEN_VM_DIR``)."""
    return Path(os.environ.get("WARDEN_VM_DIR", cache_dir() / "vm"))


# ---------------------------------------------------------------------------------------------------
# pure parts: addresses, the kernel command line, qemu's command line, the accelerator


@dataclass(frozen=True)
class NodeLayout:
    """Where node ``index`` (1, 2, ...) lives on the VM network."""

    index: int
    name: str
    tap: str
    address: str  # with the prefix length, as the VM sets it
    gateway: str
    mac: str


def gateway_cidr(subnet: str = VM_SUBNET) -> str:
    """The bridge's address: the subnet's first host."""
    net = ipaddress.ip_network(subnet)
    return f"{next(net.hosts())}/{net.prefixlen}"


def node_layout(index: int, subnet: str = VM_SUBNET) -> NodeLayout:
    net = ipaddress.ip_network(subnet)
    if not 1 <= index <= min(255, net.num_addresses - FIRST_NODE_HOST - 2):
        raise VmNodeError(f"node index {index} does not fit {subnet}")
    gateway = gateway_cidr(subnet).split("/")[0]
    address = net.network_address + FIRST_NODE_HOST + index
    return NodeLayout(index=index, name=f"warden-vm-{index}", tap=f"{TAP_PREFIX}{index}",
                      address=f"{address}/{net.prefixlen}", gateway=gateway,
                      mac=f"52:54:00:ee:00:{index:02x}")  # fmt: skip


def overlapping(subnet: str, ranges: Iterable[str]) -> list[str]:
    """The ranges that share an address with ``subnet``."""
    net = ipaddress.ip_network(subnet)
    return [r for r in ranges if net.overlaps(ipaddress.ip_network(r, strict=False))]


def kernel_cmdline(layout: NodeLayout, report_to: str, console: str = "ttyS0", quiet: bool = True,
                   joins: bool = False) -> list[str]:  # fmt: skip
    """The VM's kernel command line: root on the virtio disk, our init, cgroup v2 only, AppArmor on, and
    the node's name, address and the host's report port for the init; ``warden.share=1`` when the node
    joins the local cluster (its init mounts the share and runs its ``node-start``)."""
    return [f"console={console}", "root=/dev/vda", "rw", "rootfstype=ext4", "fastboot", "noresume",
            f"init={INIT_PATH}", "panic=-1", "quiet" if quiet else "ignore_loglevel",
            "cgroup_no_v1=all", "apparmor=1", "security=apparmor",
            f"warden.name={layout.name}", f"warden.ip={layout.address}", f"warden.gw={layout.gateway}",
            f"warden.report={report_to}", *(["warden.share=1"] if joins else [])]  # fmt: skip


def choose_accel(dev_kvm: bool, modules: Iterable[str], override: str | None = None) -> str:
    """``kvm`` where the host's KVM is hardware-backed (``kvm_intel``/``kvm_amd``), else ``tcg``.

    ``kvm_pvm`` (PVM) serves ``/dev/kvm`` without VMX/SVM and runs only PVM guest kernels: Debian's
    stock kernel stalls there after its decompressor, so such a host gets TCG."""
    if override:
        if override not in ("kvm", "tcg"):
            raise VmNodeError(f"WARDEN_VM_ACCEL={override}: kvm or tcg")
        return override
    mods = set(modules)
    return "kvm" if dev_kvm and mods & {"kvm_intel", "kvm_amd"} else "tcg"


def host_accel() -> str:
    modules = {p.name for p in Path("/sys/module").iterdir()} if Path("/sys/module").is_dir() else set()
    return choose_accel(Path("/dev/kvm").exists(), modules, os.environ.get("WARDEN_VM_ACCEL") or None)


@dataclass(frozen=True)
class VmFiles:
    kernel: Path
    initrd: Path
    disk: Path


@dataclass(frozen=True)
class Share:
    """A host directory the VM mounts over 9p (virtio), by its tag."""

    tag: str
    path: Path
    readonly: bool = True


def qemu_argv(files: VmFiles, layout: NodeLayout, accel: str, report_to: str, node_dir: Path, cpus: int = 1,
              memory_mib: int = 1536, quiet: bool = True, machine: str = "q35",
              shares: Sequence[Share] = (), disks: Sequence[Path] = ()) -> list[str]:  # fmt: skip
    """qemu's command line for a node: the disk read-only underneath (``snapshot=on``), the tap (no scripts:
    the host side is made by ``boot``), the serial console to a file, ``shares`` as 9p devices (a node
    with shares joins the local cluster), ``disks`` after the root disk, read-only underneath too (shared by
    the nodes: ``vmimages``). ``machine`` is ``q35`` (PCI, SeaBIOS) or ``microvm`` (virtio-mmio devices, no
    PCI, qboot: less to emulate under TCG)."""
    if not 1 <= cpus <= 2:
        raise VmNodeError("a VM node gets 1 or 2 CPUs here")
    if not 256 <= memory_mib <= MAX_MEMORY_MIB:
        raise VmNodeError(f"a VM node gets 256..{MAX_MEMORY_MIB} MiB here")
    if machine not in ("q35", "microvm"):
        raise VmNodeError(f"machine {machine}: q35 or microvm")
    cpu = "host" if accel == "kvm" else (os.environ.get("WARDEN_VM_CPU") or TCG_CPU)
    thread = os.environ.get("WARDEN_VM_TCG_THREAD") or TCG_THREAD
    if thread not in ("single", "multi"):
        raise VmNodeError(f"WARDEN_VM_TCG_THREAD={thread}: single or multi")
    accel_opt = "kvm" if accel == "kvm" else f"tcg,thread={thread}"
    bus = "pci" if machine == "q35" else "device"
    # microvm: without a PIT the kernel cannot calibrate the TSC under TCG and stops there
    machine_opt = "q35" if machine == "q35" else "microvm,pit=on,pic=on,rtc=on"
    share_args: list[str] = []
    for n, disk in enumerate(disks, start=1):
        share_args += ["-drive", f"id=disk{n},file={disk},if=none,format=raw,snapshot=on,cache=unsafe",
                       "-device", f"virtio-blk-{bus},drive=disk{n}"]  # fmt: skip
    for sh in shares:
        ro = ",readonly=on" if sh.readonly else ""
        share_args += ["-fsdev", f"local,id={sh.tag},path={sh.path},security_model=none{ro}",
                       "-device", f"virtio-9p-{bus},fsdev={sh.tag},mount_tag={sh.tag}"]  # fmt: skip
    return ["qemu-system-x86_64", "-name", layout.name, "-machine", machine_opt, "-accel", accel_opt, "-cpu", cpu,
            "-smp", str(cpus), "-m", str(memory_mib), "-nodefaults", "-no-user-config", "-display", "none",
            "-no-reboot", "-kernel", str(files.kernel), "-initrd", str(files.initrd),
            "-append", " ".join(kernel_cmdline(layout, report_to, quiet=quiet, joins=bool(shares))),
            "-drive", f"id=disk0,file={files.disk},if=none,format=raw,snapshot=on,cache=unsafe",
            "-device", f"virtio-blk-{bus},drive=disk0",
            "-netdev", f"tap,id=net0,ifname={layout.tap},script=no,downscript=no",
            "-device", f"virtio-net-{bus},netdev=net0,mac={layout.mac}",
            "-device", f"virtio-rng-{bus}", *share_args,
            "-serial", f"file:{node_dir / 'console.log'}",
            "-pidfile", str(node_dir / "qemu.pid")]  # fmt: skip


def parse_reports(text: str) -> list[dict[str, Any]]:
    """The JSON objects of a report stream, one a line (lines that are not one are skipped)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if REPORT_MARKER in line:
            line = line.split(REPORT_MARKER, 1)[1].strip()
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                obj = json.loads(line)
                if isinstance(obj, dict):
                    out.append(obj)
    return out


def recipe_digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------------------------------
# the VM's PID 1

INIT_SCRIPT = r"""#!/bin/bash
# PID 1 of a warden_dev VM node (written by dev/warden_dev/vmnode.py into the image at build time).
# Mounts what a node needs, sets the address the kernel command line names, reports to the host
# (warden.report=ADDR:PORT, and the serial console), loads AppArmor's profiles as Debian's
# apparmor.service does, starts containerd, reports again, then lets tini reap as PID 1.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
mnt() { mountpoint -q "$3" || { mkdir -p "$3" && mount -t "$1" "$2" "$3"; }; }
mnt proc proc /proc
mnt sysfs sysfs /sys
mnt devtmpfs devtmpfs /dev
mnt devpts devpts /dev/pts
mnt tmpfs tmpfs /dev/shm
mnt tmpfs tmpfs /run
mnt tmpfs tmpfs /tmp
mnt cgroup2 cgroup2 /sys/fs/cgroup
mnt securityfs securityfs /sys/kernel/security
arg() { local a; for a in $(cat /proc/cmdline); do case "$a" in "$1="*) echo "${a#*=}";; esac; done; }
name=$(arg warden.name) report=$(arg warden.report)
hostname "$name"
ip link set lo up
# no udev on the root: load the NIC's driver here (the initramfs holds only the disk's)
modprobe -a virtio_net virtio_rng 2>/dev/null
for _ in $(seq 1 50); do
    dev=$(ls /sys/class/net | grep -v '^lo$' | head -n1)
    [ -n "$dev" ] && break
    sleep 0.2
done
ip link set "$dev" up
ip addr add "$(arg warden.ip)" dev "$dev"
ip route add default via "$(arg warden.gw)"
send() {  # one JSON object: to the console and to the host's port
    echo "WARDEN-VM-REPORT $1" >/dev/console
    local i
    for i in 1 2 3 4 5; do
        if exec 3<>"/dev/tcp/${report%:*}/${report##*:}"; then
            printf '%s\n' "$1" >&3; exec 3>&-; return 0
        fi
        sleep 1
    done
}
q() { printf '"%s"' "$(printf '%s' "$1" | tr -d '"\\\n')"; }
mark() { dmesg 2>/dev/null | grep -m1 "$1" | sed 's/^\[ *\([0-9.]*\)\].*/\1/'; }  # a kernel message's time
uptime_s() { cut -d' ' -f1 /proc/uptime; }
nfs=no
if modprobe nfs && modprobe nfsv4 && grep -qw nfs /proc/filesystems && grep -qw nfs4 /proc/filesystems; then
    nfs=yes
fi
send "{\"stage\":\"boot\",\"name\":$(q "$name"),\"uptime\":$(uptime_s),\"kernel\":$(q "$(uname -r)"),\
\"initramfs_at\":$(q "$(mark 'Run /init as init')"),\"root_mounted_at\":$(q "$(mark 'EXT4-fs (vda): mounted')"),\
\"cgroup_fs\":$(q "$(stat -f -c %T /sys/fs/cgroup)"),\
\"controllers\":$(q "$(cat /sys/fs/cgroup/cgroup.controllers)"),\
\"apparmor_enabled\":$(q "$(cat /sys/module/apparmor/parameters/enabled 2>/dev/null)"),\
\"lsm\":$(q "$(cat /sys/kernel/security/lsm 2>/dev/null)"),\
\"nfs\":$(q "$nfs"),\"filesystems\":$(q "$(grep -ow 'nfs4\?' /proc/filesystems | tr '\n' ' ')"),\
\"mount_nfs\":$(q "$(test -x /sbin/mount.nfs && echo /sbin/mount.nfs)"),\
\"address\":$(q "$(ip -4 -o addr show dev "$dev" | awk '{print $4}')"),\
\"hypervisor\":$(q "$(dmesg 2>/dev/null | grep -m1 -o 'Hypervisor detected: .*')")}"
t0=$(uptime_s)
if [ -x /usr/lib/apparmor/apparmor.systemd ]; then
    /usr/lib/apparmor/apparmor.systemd reload >/run/apparmor.log 2>&1
elif [ -x /lib/apparmor/apparmor.systemd ]; then
    /lib/apparmor/apparmor.systemd reload >/run/apparmor.log 2>&1
fi
t1=$(uptime_s)
mkdir -p /var/log
joined=no
if [ "$(arg warden.share)" = 1 ]; then
    # a node of the local cluster: its share (read-only) and its log directory (read-write), over 9p
    modprobe -a 9pnet_virtio 9p
    mkdir -p /warden /var/log/warden
    mount -t 9p -o trans=virtio,version=9p2000.L,ro warden /warden
    mount -t 9p -o trans=virtio,version=9p2000.L wardenlogs /var/log/warden
    /warden/node-start >>/var/log/warden/node-start.log 2>&1 && joined=yes
else
    containerd >/var/log/containerd.log 2>&1 &
fi
for _ in $(seq 1 120); do ctr version >/dev/null 2>&1 && break; sleep 0.5; done
send "{\"stage\":\"ready\",\"name\":$(q "$name"),\"uptime\":$(uptime_s),\"joined\":$(q "$joined"),\
\"apparmor_profiles\":$(wc -l </sys/kernel/security/apparmor/profiles),\
\"apparmor_load_s\":$(q "$t0 -> $t1"),\
\"containerd\":$(q "$(ctr version 2>/dev/null | awk '/Server:/{s=1} s&&/Version:/{print $2; exit}')"),\
\"cgroup_subtree\":$(q "$(cat /sys/fs/cgroup/cgroup.subtree_control)")}"
exec tini -s -- sleep infinity
"""


# ---------------------------------------------------------------------------------------------------
# building the root and the image (once, cached)


def run(argv: Sequence[str], check: bool = True, timeout: float | None = None,
        log_to: Path | None = None) -> subprocess.CompletedProcess[bytes]:  # fmt: skip
    if log_to is not None:
        with log_to.open("ab") as f:
            proc = subprocess.run(list(argv), stdout=f, stderr=subprocess.STDOUT, timeout=timeout)
    else:
        proc = subprocess.run(list(argv), capture_output=True, timeout=timeout)
    if check and proc.returncode != 0:
        detail = f"see {log_to}" if log_to is not None else proc.stderr.decode(errors="replace").strip()
        raise VmNodeError(f"{' '.join(argv)} failed ({proc.returncode}): {detail}")
    return proc


def root_digest() -> str:
    return recipe_digest(VM_SUITE, *ROOT_PACKAGES, INITRAMFS_CONF, INITRAMFS_HOOK)


def ensure_root(base: Path | None = None) -> Path:
    """The debootstrapped root with ROOT_PACKAGES, built once (about 5 min here) and kept."""
    base = base or vm_dir()
    root = base / "root"
    stamp = base / "root.stamp"
    if root.is_dir() and stamp.is_file() and stamp.read_text().strip() == root_digest():
        return root
    for tool in ("debootstrap", "mkfs.ext4", "qemu-system-x86_64"):
        if shutil.which(tool) is None:
            raise VmNodeError(f"{tool} is missing: apt-get install debootstrap e2fsprogs qemu-system-x86")
    base.mkdir(parents=True, exist_ok=True)
    tmp = base / "root.tmp"
    buildlog = base / "build.log"
    buildlog.write_text("")
    if tmp.exists():
        run(["rm", "-rf", "--one-file-system", str(tmp)])
    t0 = time.monotonic()
    log(f"debootstrap --variant=minbase {VM_SUITE} -> {tmp} (log: {buildlog})")
    run(["debootstrap", "--variant=minbase", VM_SUITE, str(tmp)], log_to=buildlog, timeout=1800)
    # no daemon starts inside the chroot; no recommends; the kernel's postinst builds the initramfs
    (tmp / "usr/sbin/policy-rc.d").write_text("#!/bin/sh\nexit 101\n")
    (tmp / "usr/sbin/policy-rc.d").chmod(0o755)
    no_recommends = 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n'
    (tmp / "etc/apt/apt.conf.d/90warden-no-recommends").write_text(no_recommends)
    conf = tmp / "etc/initramfs-tools/conf.d/warden-vm"
    hook = tmp / "etc/initramfs-tools/hooks/warden-vm"
    hook.parent.mkdir(parents=True, exist_ok=True)
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(INITRAMFS_CONF)
    hook.write_text(INITRAMFS_HOOK)
    hook.chmod(0o755)
    log(f"apt-get install {' '.join(ROOT_PACKAGES)}")
    # a private mount namespace: /proc and /sys inside the chroot go away with it
    install = "DEBIAN_FRONTEND=noninteractive apt-get install -y -q " + " ".join(ROOT_PACKAGES)
    inner = f"mount -t proc proc /proc && mount -t sysfs sysfs /sys && apt-get update -qq && {install} && apt-get clean"
    run(["unshare", "--mount", "--propagation", "private", "--fork", "chroot", str(tmp), "/bin/sh", "-c", inner],
        log_to=buildlog, timeout=3600)  # fmt: skip
    (tmp / "usr/sbin/policy-rc.d").unlink()
    for p in (tmp / "var/lib/apt/lists").glob("*_*"):
        p.unlink()
    # the build host's name and resolver stay out
    (tmp / "etc/hostname").write_text("")
    (tmp / "etc/resolv.conf").unlink(missing_ok=True)
    (tmp / "etc/resolv.conf").write_text("")
    if root.exists():
        run(["rm", "-rf", "--one-file-system", str(root)])
    tmp.rename(root)
    stamp.write_text(root_digest() + "\n")
    log(f"root built in {time.monotonic() - t0:.0f}s")
    return root


def kernel_files(root: Path) -> tuple[Path, Path]:
    """The newest vmlinuz and its initrd.img in the root's /boot."""
    kernels = sorted(root.glob("boot/vmlinuz-*"))
    if not kernels:
        raise VmNodeError(f"no kernel in {root}/boot")
    kernel = kernels[-1]
    initrd = root / "boot" / f"initrd.img-{kernel.name.removeprefix('vmlinuz-')}"
    if not initrd.is_file():
        raise VmNodeError(f"no initramfs for {kernel.name} in {root}/boot")
    return kernel, initrd


def ensure_image(base: Path | None = None) -> VmFiles:
    """The kernel, the initramfs and the disk image, made from the root (seconds) when the root or the init
    changed."""
    base = base or vm_dir()
    root = ensure_root(base)
    digest = recipe_digest(root_digest(), INIT_SCRIPT, IMAGE_SIZE)
    files = VmFiles(kernel=base / "vmlinuz", initrd=base / "initrd.img", disk=base / "root.img")
    stamp = base / "image.stamp"
    if all(p.is_file() for p in (files.kernel, files.initrd, files.disk)) and stamp.is_file() \
            and stamp.read_text().strip() == digest:  # fmt: skip
        return files
    t0 = time.monotonic()
    init = root / INIT_PATH.lstrip("/")
    init.parent.mkdir(parents=True, exist_ok=True)
    init.write_text(INIT_SCRIPT)
    init.chmod(0o755)
    kernel, initrd = kernel_files(root)
    shutil.copyfile(kernel, files.kernel)
    shutil.copyfile(initrd, files.initrd)
    tmp = base / "root.img.tmp"
    tmp.unlink(missing_ok=True)
    run(["mkfs.ext4", "-q", "-F", "-L", "warden-vm", "-E", "root_owner=0:0", "-d", str(root), str(tmp), IMAGE_SIZE],
        timeout=900)  # fmt: skip
    tmp.rename(files.disk)
    stamp.write_text(digest + "\n")
    log(f"image {files.disk} ({kernel.name}) made in {time.monotonic() - t0:.0f}s")
    return files


# ---------------------------------------------------------------------------------------------------
# the host's side: bridge, tap, qemu; state written before each change


def node_dir(layout: NodeLayout) -> Path:
    return vm_dir() / "nodes" / layout.name


def state_file(layout: NodeLayout) -> Path:
    return node_dir(layout) / "state.json"


def link_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def routes() -> list[str]:
    """Every IPv4 destination in the host's routing tables, as a network."""
    out = run(["ip", "-4", "-j", "route", "show", "table", "all"], check=False).stdout.decode() or "[]"
    nets = []
    for r in json.loads(out):
        dst = r.get("dst", "")
        if dst in ("", "default") or (r.get("type") in ("broadcast", "local") and "/" not in dst):
            continue
        with contextlib.suppress(ValueError):
            nets.append(str(ipaddress.ip_network(dst, strict=False)))
    return nets


class NodeState:
    """The node's state file: what ``boot`` made (written before it is made) and the reports."""

    def __init__(self, layout: NodeLayout) -> None:
        self.layout = layout
        self.path = state_file(layout)
        self.data: dict[str, Any] = json.loads(self.path.read_text()) if self.path.is_file() else {}

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=2) + "\n")
        tmp.replace(self.path)

    def add(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.save()

    def running(self) -> bool:
        """The qemu this state names is alive."""
        pid = self.data.get("pid")
        return pid is not None and process_alive(int(pid), self.layout.name)


def process_alive(pid: int, marker: str) -> bool:
    """The process ``pid`` is alive and is our qemu (its command line names ``marker``)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return marker.encode() in cmdline and stat.rsplit(")", 1)[-1].split()[0] != "Z"


#: called by ``boot`` before qemu starts (the node's state, layout and directory): what the node needs from
#: the host (``vmjoin``: its share, routes, the registry mirror), recorded in the state as it is made
Prepare = Callable[["NodeState", NodeLayout, Path], Sequence[Share]]


def boot(index: int = 1, cpus: int = 1, memory_mib: int = 1536, timeout: float = 600, quiet: bool = True,
         machine: str = "q35", prepare: Prepare | None = None,
         disks: Sequence[Path] = ()) -> dict[str, Any]:  # fmt: skip
    """Build what is missing, boot node ``index`` and wait for its two reports; return them with the times.
    ``prepare`` makes what a node of the local cluster needs from the host, and names its shares; ``disks``
    are attached after the root disk."""
    if os.geteuid() != 0:
        raise VmNodeError("VM nodes need root (bridge, tap)")
    layout = node_layout(index)
    state = NodeState(layout)
    if state.running():
        raise VmNodeError(f"{layout.name} is running (pid {state.data['pid']}): python -m warden_dev vm-node down")
    if state.data:
        down(index)  # leftovers of a crash: remove them first
        state = NodeState(layout)
    clash = overlapping(VM_SUBNET, LOCAL_CLUSTER_RANGES)
    if clash:
        raise VmNodeError(f"{VM_SUBNET} overlaps the local cluster's {clash}")
    files = ensure_image()
    try:
        return _start(layout, files, cpus, memory_mib, timeout, quiet, machine, prepare, disks)
    except BaseException:
        down(index)  # a boot that fails or is stopped (SIGTERM: main) removes what it made, and only that
        raise


def _start(layout: NodeLayout, files: VmFiles, cpus: int, memory_mib: int, timeout: float, quiet: bool,
           machine: str, prepare: Prepare | None, disks: Sequence[Path] = ()) -> dict[str, Any]:  # fmt: skip
    state = NodeState(layout)
    accel = host_accel()
    ndir = node_dir(layout)
    ndir.mkdir(parents=True, exist_ok=True)
    state.add("made", [])

    def made(kind: str, name: str) -> None:
        state.data["made"].append({"kind": kind, "name": name})
        state.save()

    if not link_exists(BRIDGE):
        foreign = overlapping(VM_SUBNET, routes())
        if foreign:
            raise VmNodeError(f"{VM_SUBNET} is already routed on this host ({foreign}): pick another VM_SUBNET")
        made("bridge", BRIDGE)
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        run(["ip", "addr", "add", gateway_cidr(), "dev", BRIDGE])
        run(["ip", "link", "set", BRIDGE, "up"])
    if link_exists(layout.tap):
        raise VmNodeError(f"{layout.tap} exists and is not ours (no state names it)")
    made("tap", layout.tap)
    run(["ip", "tuntap", "add", "dev", layout.tap, "mode", "tap"])
    run(["ip", "link", "set", layout.tap, "master", BRIDGE, "up"])
    shares = prepare(state, layout, ndir) if prepare is not None else ()

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((layout.gateway, 0))
    listener.listen(4)
    report_to = f"{layout.gateway}:{listener.getsockname()[1]}"
    argv = qemu_argv(files, layout, accel, report_to, ndir, cpus=cpus, memory_mib=memory_mib, quiet=quiet,
                     machine=machine, shares=shares, disks=disks)  # fmt: skip
    (ndir / "console.log").unlink(missing_ok=True)
    qlog = (ndir / "qemu.log").open("wb")
    env = {**os.environ, "TMPDIR": str(ndir)}  # snapshot=on's temporary overlay lives here
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=qlog, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)  # fmt: skip
    state.add("pid", proc.pid)
    state.add("argv", argv)
    state.add("accel", accel)
    log(f"{layout.name}: qemu pid {proc.pid} ({accel}, {cpus} CPU, {memory_mib} MiB), reports to {report_to}")
    reports: dict[str, dict[str, Any]] = {}
    console_seen = 0.0
    try:
        while len(reports) < 2:
            left = timeout - (time.monotonic() - t0)
            if left <= 0:
                raise VmNodeError(f"{layout.name}: no report within {timeout:.0f}s; console:\n{console_tail(layout)}")
            if proc.poll() is not None:
                qemu_log = (ndir / "qemu.log").read_text(errors="replace")[-2000:]
                raise VmNodeError(f"{layout.name}: qemu exited ({proc.returncode}): {qemu_log}\n{console_tail(layout)}")
            ready, _, _ = select.select([listener], [], [], min(left, 1.0))
            if not ready:
                on_console = {str(r.get("stage")) for r in parse_reports(console_tail(layout, 200))}
                if "ready" in on_console and "ready" not in reports:
                    console_seen = console_seen or time.monotonic()
                    if time.monotonic() - console_seen > 20:
                        raise VmNodeError(f"{layout.name}: reports on the console, none on {report_to} "
                                          f"(the VM's network):\n{console_tail(layout)}")  # fmt: skip
                continue
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(10)
                data = b""
                with contextlib.suppress(OSError):
                    while chunk := conn.recv(65536):
                        data += chunk
            for rep in parse_reports(data.decode(errors="replace")):
                rep["host_seconds"] = round(time.monotonic() - t0, 2)
                reports[str(rep.get("stage"))] = rep
                log(f"{layout.name}: {rep.get('stage')} report after {rep['host_seconds']}s")
    finally:
        listener.close()
        qlog.close()
    state.add("reports", reports)
    return {"accel": accel, "reports": reports}


def console_tail(layout: NodeLayout, lines: int = 30) -> str:
    path = node_dir(layout) / "console.log"
    if not path.is_file():
        return "(no console output)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def down(index: int = 1) -> None:
    """Stop node ``index``'s qemu and remove its tap, the bridge when no other node uses it, and its
    directory. Idempotent; only what the node's state file names is touched."""
    layout = node_layout(index)
    state = NodeState(layout)
    pid = state.data.get("pid")
    if pid and process_alive(pid, layout.name):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while process_alive(pid, layout.name) and time.monotonic() < deadline:
            time.sleep(0.1)
        if process_alive(pid, layout.name):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    made = state.data.get("made", [])
    for item in reversed(made):
        if item["kind"] == "tap" and link_exists(item["name"]):
            run(["ip", "link", "del", item["name"]], check=False)
        elif item["kind"] not in SHARED_KINDS:
            undo_item(item)
    shared = [item for item in made if item["kind"] in SHARED_KINDS]
    ports = list(Path(f"/sys/class/net/{BRIDGE}/brif").glob("*")) if link_exists(BRIDGE) else []
    if shared and ports and _hand_over(shared, [p.name for p in ports]):
        # another node still up: what the nodes share stays, its state names it now
        log(f"{BRIDGE} still has {', '.join(p.name for p in ports)}: what the nodes share is left for them")
    else:
        for item in reversed(shared):
            undo_item(item)
    if node_dir(layout).exists():
        shutil.rmtree(node_dir(layout))


#: what the nodes share (made by the first, removed by the last): the bridge and what vmjoin adds for all
SHARED_KINDS = ("bridge", "mirror", "nfs", "iptables")


def undo_item(item: dict[str, Any]) -> None:
    """Remove one thing a node's state says was made (idempotent): the bridge, a route, an iptables rule,
    the registry mirror's or the NFS server's process."""
    kind, name = item["kind"], item["name"]
    if kind == "bridge" and link_exists(name):
        run(["ip", "link", "del", name], check=False)
    elif kind == "route":
        run(["ip", "route", "del", name], check=False)
    elif kind == "iptables":
        table, chain, *spec = item["rule"]
        while run(["iptables", "-w", "-t", table, "-C", chain, *spec], check=False).returncode == 0:
            run(["iptables", "-w", "-t", table, "-D", chain, *spec], check=False)
    elif kind in ("mirror", "nfs") and item.get("pid"):
        pid, program = int(item["pid"]), {"mirror": "docker-registry", "nfs": "ganesha.nfsd"}[kind]
        if process_alive(pid, program):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while process_alive(pid, program) and time.monotonic() < deadline:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                time.sleep(0.1)


def _hand_over(items: Sequence[dict[str, Any]], taps: Sequence[str]) -> bool:
    for tap in taps:
        if not tap.startswith(TAP_PREFIX):
            continue
        with contextlib.suppress(ValueError, VmNodeError):
            other = NodeState(node_layout(int(tap.removeprefix(TAP_PREFIX))))
            if other.data:
                other.data["made"] = [*items, *other.data.get("made", [])]
                other.save()
                return True
    return False


def main(argv: Sequence[str], prog: str = "python -m warden_dev vm-node") -> int:
    import argparse

    parser = argparse.ArgumentParser(prog=prog, description="a VM node from Debian's kernel (first slice)")
    parser.add_argument("command", choices=["boot", "down", "image", "join", "leave"],
                        help="join: boot it as a node of the local cluster; leave: remove it")  # fmt: skip
    parser.add_argument("--index", type=int, default=1, help="node number (1..): its tap, address and name")
    parser.add_argument("--cpus", type=int, default=1)
    parser.add_argument("--memory", type=int, default=None, help="MiB (boot 1536, join 3072)")
    parser.add_argument("--machine", choices=["q35", "microvm"], default="q35")
    parser.add_argument("--timeout", type=float, default=600, help="boot: seconds to wait for both reports")
    parser.add_argument("--once", action="store_true", help="boot: remove the VM again once it has reported")
    parser.add_argument("--verbose", action="store_true", help="every kernel message on the console (console.log)")
    parser.add_argument("--gpus", type=int, default=0, help="join: stand-in nvidia.com/gpu devices (hack/fakegpu)")
    ns = parser.parse_args(list(argv))

    def terminated(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)  # so that a killed `boot` still removes what it made

    signal.signal(signal.SIGTERM, terminated)
    try:
        if ns.command == "image":
            print(json.dumps({k: str(v) for k, v in ensure_image().__dict__.items()}))
        elif ns.command == "join":
            from warden_dev import vmjoin

            print(json.dumps(vmjoin.join(ns.index, cpus=ns.cpus, memory_mib=ns.memory or 3072,
                                         timeout=max(ns.timeout, 900), gpus=ns.gpus), indent=2))  # fmt: skip
        elif ns.command == "leave":
            from warden_dev import vmjoin

            vmjoin.leave(ns.index)
        elif ns.command == "boot":
            result = boot(ns.index, cpus=ns.cpus, memory_mib=ns.memory or 1536, quiet=not ns.verbose,
                          timeout=ns.timeout, machine=ns.machine)  # fmt: skip
            print(json.dumps(result, indent=2))
            if ns.once:
                down(ns.index)
        elif ns.command == "down":
            down(ns.index)
    except (VmNodeError, subprocess.CalledProcessError, OSError) as e:
        log(f"ERROR: {e}")
        return 1
    return 0


__all__ = ["BRIDGE", "VM_SUBNET", "NodeLayout", "VmNodeError", "boot", "choose_accel", "down", "ensure_image",
           "kernel_cmdline", "node_layout", "qemu_argv"]  # fmt: skip
