"""Whether this host is free for the local cluster: nothing of another Kubernetes node may be here.

The local cluster (warden_dev.localcluster) runs a kubelet, kube-proxy and CNI plugins in the host's
network namespace. Beside another cluster's they would fight: two kubelets over port 10250, the
node's cgroups and /var/lib/kubelet; two kube-proxies and two CNI setups over the same iptables chains
(``KUBE-*``, ``CNI-*``), two kube-routers over the same ipsets. So ``up`` looks first
(``HostSnapshot.take``) and refuses (``check``) when it finds any of these that warden_dev did not make:

- a kubelet, kube-proxy or an all-in-one Kubernetes (k3s, k0s, rke2, microk8s' kubelite) process in
  this network namespace (a kind node's kubelet runs in its container's own namespaces: no conflict);
- a listener on a port the node's components take (kubelet 10250 and 10248, kube-proxy 10249 and
  10256, kube-router 20244, the cluster's registry 5000);
- an iptables chain named ``KUBE-*`` or ``CNI-*`` (IPv4 or IPv6, any table), an ipset named ``KUBE-*`` or
  ``kube-router-*`` (a NetworkPolicy enforcer's);
- the node address on ``lo``, the pod bridge, a CNI network namespace (``cni-*``), a ``kubepods``
  cgroup, a mount under the cluster's directories, a non-empty /var/lib/kubelet or /var/log/pods.

Everything here but ``HostSnapshot.take`` is pure: tests feed it process lists, /proc/net/tcp and
iptables-save text (tests/unit/test_warden_dev_hostcheck.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: programs that are (or embed) a kubelet, kube-proxy or a node's NetworkPolicy enforcer
KUBE_PROGRAMS = frozenset({"kubelet", "kube-proxy", "kube-router", "k3s", "k3s-server", "k3s-agent", "k0s", "rke2",
                           "kubelite"})  # fmt: skip
#: iptables chains a kubelet, kube-proxy or the CNI plugins make
CHAIN_PREFIXES = ("KUBE-", "CNI-")
IPTABLES_TOOLS = ("iptables", "ip6tables")
#: ipsets kube-router makes (its IPv6 sets carry the family first: ``inet6:KUBE-...``)
IPSET_PREFIXES = ("KUBE-", "kube-router-", "inet6:KUBE-", "inet6:kube-router-")
#: the local cluster's registry (docker-registry, on 127.0.0.1) that the node pulls Warden's images from
REGISTRY_PORT = 5000
#: ports the node's components listen on
NODE_PORTS = {10250: "kubelet", 10248: "kubelet healthz", 10249: "kube-proxy metrics", 10256: "kube-proxy healthz",
              20244: "kube-router healthz", REGISTRY_PORT: "the local cluster's registry"}  # fmt: skip
#: what to do about another listener on the registry's port
REGISTRY_REMEDY = (
    "the local cluster's registry listens there: stop that process, or move it to another port (Debian's "
    "docker-registry package runs one on :5000 under systemd: `systemctl disable --now docker-registry`)"
)
#: sysctls the cluster sets (``up`` itself) or its kubelet and kube-proxy may set; ``down`` puts back
#: what changed while the cluster ran
SYSCTLS = (
    "net.ipv4.ip_forward",
    "net.bridge.bridge-nf-call-iptables",
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.ipv4.conf.all.route_localnet",
)


@dataclass(frozen=True)
class HostLayout:
    """Where the local cluster puts things on the host (warden_dev.localcluster's constants)."""

    kubelet_root: Path = Path("/var/lib/kubelet")
    data_dir: Path = Path("/var/lib/warden-local")
    run_dir: Path = Path("/run/warden-local")
    pod_log_dirs: tuple[Path, ...] = (Path("/var/log/pods"), Path("/var/log/containers"))
    #: libcni's cache (results of each pod's network setup, named <network>-<container>-<if>)
    cni_cache: Path = Path("/var/lib/cni")
    netns_dir: Path = Path("/var/run/netns")
    netns_prefix: str = "cni-"
    cgroup_root: Path = Path("/sys/fs/cgroup")
    bridge: str = "warden-cni0"
    node_cidr: str = "10.239.0.1/32"
    ports: Mapping[int, str] = field(default_factory=lambda: dict(NODE_PORTS))

    @property
    def owned_dirs(self) -> tuple[Path, ...]:
        """Directories the cluster makes and fills (mounts under them are the cluster's)."""
        return (self.kubelet_root, self.data_dir, self.run_dir)

    @property
    def node_dirs(self) -> tuple[Path, ...]:
        """Directories a kubelet fills: another kubelet's when they hold anything warden_dev did not put there."""
        return (self.kubelet_root, *self.pod_log_dirs, self.data_dir, self.run_dir)


# ---------------------------------------------------------------------------------------------------
# what is on the host


@dataclass(frozen=True)
class Process:
    pid: int
    argv: tuple[str, ...]
    netns: str = ""  # readlink /proc/<pid>/ns/net ("net:[4026531840]"); "" when unknown

    @property
    def program(self) -> str:
        return os.path.basename(self.argv[0]) if self.argv else ""

    @property
    def cmdline(self) -> str:
        text = " ".join(self.argv)
        return text if len(text) <= 160 else text[:157] + "..."


@dataclass(frozen=True)
class Listener:
    address: str
    port: int
    inode: int
    pid: int | None = None
    program: str = ""


@dataclass(frozen=True)
class IptTable:
    """One table of iptables-save: chains (name -> policy, "-" for user chains) and rules (``-A`` lines)."""

    chains: dict[str, str] = field(default_factory=dict)
    rules: list[str] = field(default_factory=list)


def parse_iptables_save(text: str) -> dict[str, IptTable]:
    """Tables of iptables-save (or ip6tables-save) output, by table name."""
    tables: dict[str, IptTable] = {}
    current: IptTable | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("*"):
            current = tables.setdefault(line[1:], IptTable())
        elif current is None or line == "COMMIT":
            continue
        elif line.startswith(":"):
            name, _, rest = line[1:].partition(" ")
            current.chains[name] = rest.split()[0] if rest.split() else "-"
        elif line.startswith("-A "):
            current.rules.append(line)
    return tables


def prefixed_chains(tables: Mapping[str, IptTable], prefixes: Sequence[str] = CHAIN_PREFIXES) -> list[tuple[str, str]]:
    """(table, chain) of every chain whose name starts with one of ``prefixes``."""
    return sorted((t, c) for t, table in tables.items() for c in table.chains if c.startswith(tuple(prefixes)))


def parse_proc_net_tcp(text: str) -> list[tuple[str, int, int]]:
    """(address, port, socket inode) of each LISTEN socket in /proc/net/tcp or /proc/net/tcp6 text."""
    out = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != "0A":  # 0A: TCP_LISTEN
            continue
        addr_hex, _, port_hex = fields[1].partition(":")
        out.append((_hex_address(addr_hex), int(port_hex, 16), int(fields[9])))
    return out


def _hex_address(h: str) -> str:
    """The kernel's hex socket address: IPv4 one little-endian word, IPv6 four of them."""
    import ipaddress

    raw = bytes.fromhex(h)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return str(ipaddress.ip_address(words))


@dataclass
class HostSnapshot:
    """The parts of the host the local cluster would use, as they are now."""

    processes: list[Process] = field(default_factory=list)
    listeners: list[Listener] = field(default_factory=list)
    #: iptables-save output per tool (iptables, ip6tables); "" where the tool is missing
    iptables: dict[str, str] = field(default_factory=dict)
    links: set[str] = field(default_factory=set)
    lo_addresses: set[str] = field(default_factory=set)
    netns: set[str] = field(default_factory=set)  # names in the netns directory with the CNI prefix
    cgroups: set[str] = field(default_factory=set)  # kubepods cgroup directories
    mounts: list[str] = field(default_factory=list)
    #: for each of the layout's node directories (and the CNI cache): absent, empty or nonempty
    dirs: dict[str, str] = field(default_factory=dict)
    sysctls: dict[str, str] = field(default_factory=dict)
    ipsets: set[str] = field(default_factory=set)  # every ipset's name ("ipset list -n")
    own_netns: str = ""  # this process's network namespace

    def tables(self, tool: str) -> dict[str, IptTable]:
        return parse_iptables_save(self.iptables.get(tool, ""))

    @classmethod
    def take(cls, layout: HostLayout) -> HostSnapshot:
        """Read the host (root needed for iptables and other processes' details)."""
        snap = cls(own_netns=_readlink("/proc/self/ns/net"))
        sockets: dict[int, tuple[int, str]] = {}
        for p in Path("/proc").iterdir():
            if not p.name.isdigit():
                continue
            try:
                argv = tuple(a.decode(errors="replace") for a in (p / "cmdline").read_bytes().split(b"\0") if a)
            except OSError:
                continue
            if not argv:
                continue
            proc = Process(int(p.name), argv, _readlink(str(p / "ns" / "net")))
            snap.processes.append(proc)
            try:
                for fd in (p / "fd").iterdir():
                    target = _readlink(str(fd))
                    if target.startswith("socket:["):
                        sockets[int(target[8:-1])] = (proc.pid, proc.program)
            except OSError:
                continue
        for name in ("tcp", "tcp6"):
            try:
                text = Path(f"/proc/net/{name}").read_text()
            except OSError:
                continue
            for address, port, inode in parse_proc_net_tcp(text):
                if port in layout.ports:
                    pid, program = sockets.get(inode, (None, ""))
                    snap.listeners.append(Listener(address, port, inode, pid, program))
        for tool in IPTABLES_TOOLS:
            snap.iptables[tool] = iptables_save(tool)
        snap.links = {p.name for p in Path("/sys/class/net").iterdir()} if Path("/sys/class/net").is_dir() else set()
        if shutil.which("ip"):
            out = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", "lo"], capture_output=True, text=True)
            snap.lo_addresses = {f.split()[3] for f in out.stdout.splitlines() if len(f.split()) > 3}
        if layout.netns_dir.is_dir():
            snap.netns = {p.name for p in layout.netns_dir.iterdir() if p.name.startswith(layout.netns_prefix)}
        snap.cgroups = {str(p) for p in kubepods_cgroups(layout.cgroup_root)}
        snap.mounts = mountpoints(Path("/proc/self/mountinfo").read_text())
        for d in (*layout.node_dirs, layout.cni_cache):
            snap.dirs[str(d)] = dir_state(d)
        snap.sysctls = read_sysctls()
        snap.ipsets = ipset_names()
        return snap


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def iptables_save(tool: str) -> str:
    """``<tool>-save`` output ("" where the tool is missing or fails)."""
    if shutil.which(f"{tool}-save") is None:
        return ""
    proc = subprocess.run([f"{tool}-save"], capture_output=True, text=True, timeout=60)
    return proc.stdout if proc.returncode == 0 else ""


def ipset_names() -> set[str]:
    """Every ipset's name (empty where the tool is missing or fails)."""
    if shutil.which("ipset") is None:
        return set()
    proc = subprocess.run(["ipset", "list", "-n"], capture_output=True, text=True, timeout=60)
    return set(proc.stdout.split()) if proc.returncode == 0 else set()


def kubepods_cgroups(root: Path) -> list[Path]:
    """The kubelet's top cgroups (cgroupfs driver): /sys/fs/cgroup/kubepods (v2) and
    /sys/fs/cgroup/<controller>/kubepods (v1)."""
    out = []
    if (root / "kubepods").is_dir():
        out.append(root / "kubepods")
    if root.is_dir():
        for ctrl in root.iterdir():
            if ctrl.is_dir() and not ctrl.is_symlink() and (ctrl / "kubepods").is_dir():
                out.append(ctrl / "kubepods")
    return sorted(set(out))


def mountpoints(mountinfo: str) -> list[str]:
    """Mount points of /proc/<pid>/mountinfo text (octal escapes decoded)."""
    out = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4:
            out.append(fields[4].encode().decode("unicode_escape"))
    return out


def under(path: str, prefixes: Iterable[Path | str]) -> bool:
    return any(path == str(p) or path.startswith(f"{str(p).rstrip('/')}/") for p in prefixes)


def dir_state(d: Path) -> str:
    if not d.is_dir():
        return "absent"
    return "nonempty" if any(d.iterdir()) else "empty"


def read_sysctls(names: Iterable[str] = SYSCTLS) -> dict[str, str]:
    """The values of those of ``names`` this kernel has."""
    return {n: v for n in names if (v := read_sysctl(n)) is not None}


def read_sysctl(name: str) -> str | None:
    try:
        return Path("/proc/sys", *name.split(".")).read_text().strip()
    except OSError:
        return None


# ---------------------------------------------------------------------------------------------------
# the check


@dataclass(frozen=True)
class Finding:
    """Something of another cluster on this host, and what to do about it."""

    what: str
    remedy: str

    def __str__(self) -> str:
        return self.what


STOP = (
    "stop that cluster first (its own `down`, `systemctl stop kubelet`, `k3s-killall.sh`, ...) or use another "
    "machine; to test on it instead, point KUBECONFIG at it (the e2e tier takes any cluster)"
)


def _some(items: Sequence[str], n: int = 8) -> str:
    return ", ".join(items[:n]) + (f" (and {len(items) - n} more)" if len(items) > n else "")


def check(snap: HostSnapshot, layout: HostLayout, own_pids: Iterable[int] = ()) -> list[Finding]:
    """Everything of a Kubernetes node on the host that warden_dev did not make (``own_pids``: the
    processes of its own cluster, when one runs). Empty: the host is free."""
    ours = set(own_pids)
    out: list[Finding] = []
    for p in snap.processes:
        if p.pid in ours or p.program not in KUBE_PROGRAMS:
            continue
        if snap.own_netns and p.netns and p.netns != snap.own_netns:
            continue  # in a container's network namespace (a kind node): its iptables and ports are its own
        out.append(
            Finding(f"a {p.program} process not started by warden_dev runs here: pid {p.pid}: {p.cmdline}", STOP)
        )
    for lis in snap.listeners:
        if lis.pid in ours:
            continue
        who = f"pid {lis.pid} ({lis.program})" if lis.pid else "a process this user cannot see"
        port = f"TCP port {lis.port} ({layout.ports.get(lis.port, '?')})"
        remedy = REGISTRY_REMEDY if lis.port == REGISTRY_PORT else f"the local cluster's node needs it: {STOP}"
        out.append(Finding(f"{port} is in use on {lis.address} by {who}", remedy))
    for tool in IPTABLES_TOOLS:
        chains = [f"{t}/{c}" for t, c in prefixed_chains(snap.tables(tool))]
        if chains:
            out.append(
                Finding(
                    f"{tool} chains of another cluster (kubelet, kube-proxy or CNI plugins; not made by warden_dev): "
                    f"{_some(chains)}",
                    f"{STOP}. Chains left behind by a cluster that is gone: remove them by hand (`{tool} -t TABLE "
                    "-D` the rules that jump to them, then `-F` and `-X` each); warden_dev removes only chains it made",
                )
            )
    sets = sorted(n for n in snap.ipsets if n.startswith(IPSET_PREFIXES))
    if sets:
        out.append(
            Finding(
                f"ipsets of another cluster's NetworkPolicy enforcer (not made by warden_dev): {_some(sets)}",
                f"{STOP}. Sets left behind by a cluster that is gone: `kube-router --cleanup-config`, or "
                "`ipset destroy NAME` each once no iptables rule names it",
            )
        )
    if layout.node_cidr in snap.lo_addresses:
        why = f"another local cluster uses it; if none does: ip addr del {layout.node_cidr} dev lo"
        out.append(Finding(f"{layout.node_cidr} (the node address) is already on lo", why))
    if layout.bridge in snap.links:
        why = f"another local cluster uses it; if none does: ip link delete {layout.bridge}"
        out.append(Finding(f"the pod bridge {layout.bridge} exists already", why))
    if snap.netns:
        names = _some(sorted(snap.netns))
        out.append(Finding(f"pod network namespaces of another CNI setup in {layout.netns_dir}: {names}", STOP))
    if snap.cgroups:
        out.append(Finding(f"another kubelet's cgroups: {_some(sorted(snap.cgroups))}", STOP))
    mounts = sorted({m for m in snap.mounts if under(m, layout.owned_dirs)})
    if mounts:
        out.append(Finding(f"mounts under the cluster's directories: {_some(mounts, 5)}", STOP))
    full = [str(d) for d in layout.node_dirs if snap.dirs.get(str(d)) == "nonempty"]
    if full:
        out.append(
            Finding(
                f"not empty, and not made by warden_dev: {', '.join(full)}",
                f"another kubelet's (or container runtime's) files: {STOP}; if nothing uses them any more, remove them",
            )
        )
    return out


class HostInUse(RuntimeError):
    """``up`` refuses: another cluster owns parts of this host."""

    def __init__(self, findings: Sequence[Finding]) -> None:
        self.findings = list(findings)
        super().__init__(report(findings))


def report(findings: Sequence[Finding]) -> str:
    lines = ["refusing to start the local cluster: this host has parts of another Kubernetes node", ""]
    for f in findings:
        lines += [f"  - {f.what}", f"    -> {f.remedy}"]
    lines += ["", "warden_dev changes nothing it did not make (python -m warden_dev check repeats this check)."]
    return "\n".join(lines)
