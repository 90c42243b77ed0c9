"""A real single-node Kubernetes on this machine, from upstream binaries: `make up` / `make down`
(``python -m warden_dev up|down``, warden_dev.__main__).

etcd, kube-apiserver, kube-controller-manager and kube-scheduler come from ``ControlPlane``
(warden_dev.controlplane, the integration tier's control plane), started with a few changes so
pods can reach the API server; this module adds the node:

* containerd (Debian's package) with its own config, socket and state (not Docker's), cgroupfs,
  the CNI plugins of Debian's ``containernetworking-plugins`` (bridge + host-local + portmap + loopback)
  and a pause image compiled here from the Kubernetes module's ``build/pause/linux/pause.c``;
* kubelet (cgroup v1 host, no systemd, no swap: see docs/local-cluster.md for every setting and why);
* kube-proxy in iptables mode (ClusterIP and NodePort Services);
* kube-router, its firewall alone (``--run-firewall``, no routing, no service proxy): it enforces the
  NetworkPolicies with iptables and ipsets, beside the bridge CNI (which enforces none), so packets the
  policies refuse are dropped here as on a production cluster (docs/security.md: which enforcers work);
* CoreDNS, built from its Go module, as a host process behind the Service ``kube-system/kube-dns``;
* a StorageClass ``warden-local`` (the default) served by warden_dev.localvolumes (hostPath
  directories; ReadWriteMany works because there is one node);
* STAND-IN GPUs: hack/fakegpu (a kubelet device plugin built from its Go module) advertises
  ``FAKE_GPUS`` ``nvidia.com/gpu`` devices, each a stand-in character device (195, N) at /dev/nvidiaN (no
  GPU exists here; ``WARDEN_LOCAL_FAKE_GPUS=0`` turns it off), and gives every GPU container a STAND-IN
  driver (warden_dev.fakedriver), two versions in turn;
* a registry beside the node (Debian's ``docker-registry``, plain HTTP on ``REGISTRY_ADDRESS``, its storage
  under the cache dir, kept by ``down``): ``make up`` and the e2e tier push Warden's images and charts there
  (hack/push.sh) and install the charts from it, so the kubelet pulls them as a real node does; only the
  pause image and the tests' own images are imported from Docker into containerd's ``k8s.io`` namespace.

The node is ``warden-node`` with the address ``NODE_IP`` (put on ``lo``), pods get ``POD_SUBNET`` on the
bridge ``warden-cni0``.

The host is shared: ``up`` refuses to start where another cluster owns parts of it (warden_dev.hostcheck:
another kubelet, its ports, ``KUBE-*``/``CNI-*`` iptables chains, ...), records every change it makes
before making it (warden_dev.hostrecord, ``<state dir>/host-record.json``), and ``down`` undoes those
changes and nothing else.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from warden_dev import fakedriver, lanelock
from warden_dev.controlplane import (
    REPO_ROOT,
    SERVICE_CIDR,
    ControlPlane,
    Pki,
    _kill_group,
    cache_dir,
    pinned_versions,
    wait_for,
    write_kubeconfig,
)
from warden_dev.hostcheck import (
    REGISTRY_PORT,
    HostInUse,
    HostLayout,
    HostSnapshot,
    check,
    dir_state,
    mountpoints,
    read_sysctl,
    read_sysctls,
)
from warden_dev.hostrecord import (
    RECORD_NAME,
    Change,
    HostRecord,
    mounts_to_undo,
    remove_cgroup_tree,
    undo_plan,
)
from warden_dev.localvolumes import (
    nfs_storage_class_manifest,
    node_local_storage_class_manifest,
    storage_class_manifest,
)
from warden_dev.vmnode import gateway_cidr, vm_dir

NODE_NAME = "warden-node"
NODE_IP = "10.239.0.1"  # on lo: a stable address for the node, the API server's endpoint and NodePorts
CLUSTER_CIDR = "10.244.0.0/16"
POD_SUBNET = "10.244.0.0/24"  # the one node's pods; docker uses 172.17.0.0/16 here
BRIDGE = "warden-cni0"
CNI_NETWORK = "warden-pods"
DNS_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
CNI_BIN_DIR = Path("/usr/lib/cni")
KUBELET_ROOT = Path("/var/lib/kubelet")  # the default: Localhost seccomp profiles live under its seccomp/
DATA_DIR = Path("/var/lib/warden-local")  # containerd root, CNI IPAM state, volumes
RUN_DIR = Path("/run/warden-local")  # containerd state + socket, runc state
POD_LOG_DIRS = (Path("/var/log/pods"), Path("/var/log/containers"))
CNI_CACHE = Path("/var/lib/cni")  # libcni's results/<network>-<container>-<interface>
NETNS_DIR = Path("/var/run/netns")  # the pods' network namespaces (cni-<uuid>), made by containerd
SECCOMP_PROFILE = "warden/worker.json"
PAUSE_TAG = "3.10.2"  # build/pause/Makefile's TAG in the pinned Kubernetes module
PAUSE_IMAGE = f"warden/pause:{PAUSE_TAG}"
NAMESPACE_OPERATOR = "warden-system"
NAMESPACE_DEMO = "slurm"
DEMO_NAME = "demo"
DEMO_NODE_PORT = 30022
#: images the charts run (warden/<name>:<version>); build-only images (slurm-base, spank, jail) stay out
#: stand-in GPUs the node advertises (hack/fakegpu); WARDEN_LOCAL_FAKE_GPUS overrides, 0 turns them off
FAKE_GPUS = 8
FAKE_GPU_RESOURCE = "nvidia.com/gpu"
KUBE_ROUTER_HEALTH_PORT = 20244  # kube-router's default, on loopback only
#: the iptables chain kube-router's firewall hooks into FORWARD: there, its policies are in force
KUBE_ROUTER_FORWARD_CHAIN = "KUBE-ROUTER-FORWARD"
#: the local cluster's registry (docker-registry, plain HTTP, loopback only: the kubelet and containerd run on
#: the host); Docker Engine pushes to 127.0.0.0/8 over plain HTTP by itself, containerd is told (certs.d)
REGISTRY_ADDRESS = f"127.0.0.1:{REGISTRY_PORT}"
#: where `make up` and the e2e tier push Warden's images and charts (hack/push.sh REGISTRY)
REGISTRY = f"{REGISTRY_ADDRESS}/warden"
REGISTRY_BIN = Path("/usr/bin/docker-registry")  # Debian's docker-registry package
#: what the host check looks at and `down` may undo
LAYOUT = HostLayout(
    kubelet_root=KUBELET_ROOT,
    data_dir=DATA_DIR,
    run_dir=RUN_DIR,
    pod_log_dirs=POD_LOG_DIRS,
    cni_cache=CNI_CACHE,
    netns_dir=NETNS_DIR,
    bridge=BRIDGE,
    node_cidr=f"{NODE_IP}/32",
)
CHART_IMAGES = (
    "operator", "controller", "worker", "login", "populate-jail", "accounting", "mariadb", "health-check", "backup",
)  # fmt: skip


class LocalClusterError(RuntimeError):
    """The local cluster could not be built, started or reached."""


def log(msg: str) -> None:
    print(f"[localcluster] {msg}", file=sys.stderr, flush=True)


def state_dir() -> Path:
    return Path(os.environ.get("WARDEN_LOCALCLUSTER_DIR", cache_dir() / "localcluster"))


def registry_dir() -> Path:
    """The registry's storage: outside the state dir, so `make down` keeps what was pushed and the next
    `make up` finds it there (delete it to start cold)."""
    return cache_dir() / "registry"


def ssh_key() -> Path:
    """The demo's SSH key pair (kept across `make down`, so known keys stay valid)."""
    return cache_dir() / "ssh" / "id_ed25519"


def project_version() -> str:
    import tomllib

    data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    return str(data["project"]["version"])


def run(argv: Sequence[str], check: bool = True, input: bytes | None = None, timeout: float | None = None,
        quiet: bool = False) -> subprocess.CompletedProcess[bytes]:  # fmt: skip
    proc = subprocess.run(list(argv), input=input, capture_output=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise LocalClusterError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}")
    if not quiet and proc.returncode != 0:
        log(f"(ignored) {' '.join(argv)}: {proc.stderr.decode(errors='replace').strip()}")
    return proc


# ---------------------------------------------------------------------------------------------------
# the control plane, reachable from pods


class NodeControlPlane(ControlPlane):
    """ControlPlane with an API server that pods can reach: it listens on every address, advertises
    ``NODE_IP`` (the ``kubernetes`` Service's endpoint; its serving cert already names 10.96.0.1) and
    authenticates to kubelets with the admin client cert (logs, exec). kwok is not started: the node
    is real."""

    def _spawn(self, name: str, argv: list[str]) -> None:
        if name == "kwok":
            return
        if name == "kube-apiserver":
            pki = self.pki
            drop = ("--bind-address=", "--advertise-address=", "--endpoint-reconciler-type=")
            argv = [a for a in argv if not a.startswith(drop)]
            argv += [
                "--bind-address=0.0.0.0",
                f"--advertise-address={NODE_IP}",
                f"--kubelet-client-certificate={pki.crt('admin')}",
                f"--kubelet-client-key={pki.key('admin')}",
                "--kubelet-preferred-address-types=InternalIP",
            ]
        super()._spawn(name, argv)

    def spawn(self, name: str, argv: list[str]) -> None:
        """Start one more detached component, logged and stopped like the control plane's own."""
        self._spawn(name, argv)

    def check_alive(self) -> None:
        self._check_alive()


# ---------------------------------------------------------------------------------------------------
# configuration files


def vmjoin_nfs_export() -> Path:
    """The directory the VM nodes' NFS server exports (warden_dev.vmjoin.nfs_dir)."""
    return vm_dir() / "nfs" / "export"


def vmnode_gateway() -> str:
    return gateway_cidr().split("/")[0]


def containerd_config(state: Path) -> str:
    runc_root = RUN_DIR / "runc"
    return f"""version = 2
root = "{DATA_DIR / "containerd"}"
state = "{RUN_DIR / "containerd"}"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs",
                    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{containerd_socket()}"

[ttrpc]
  address = "{RUN_DIR / "containerd" / "containerd.sock.ttrpc"}"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{DATA_DIR / "opt"}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  enable_selinux = false
  disable_apparmor = true
  # this host's root lacks CAP_SYS_RESOURCE: lowering oom_score_adj (-998 for pause) fails in runc init
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    discard_unpacked_layers = false
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{runc_root}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN_DIR}"
    conf_dir = "{state / "cni"}"
    max_conf_num = 1
  # one directory per registry host (<host:port>/hosts.toml): the local registry is plain HTTP
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{state / "certs.d"}"
"""


def registry_hosts_toml(address: str = REGISTRY_ADDRESS) -> str:
    """containerd's hosts.toml for the registry at ``address`` (its ``certs.d/<address>/``): plain HTTP."""
    return f"""server = "http://{address}"

[host."http://{address}"]
  capabilities = ["pull", "resolve"]
"""


def registry_config(storage: Path, address: str = REGISTRY_ADDRESS, secret: str = "") -> str:
    """docker-registry's configuration: filesystem storage in ``storage``, plain HTTP on ``address``, no
    authentication, no redis cache, no notifications, no storage health check, no access log."""
    return f"""version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {storage}
  cache:
    blobdescriptor: inmemory
  delete:
    enabled: true
http:
  addr: {address}
  secret: {secret or secrets.token_hex(16)}
"""


def plain_http(registry: str) -> bool:
    """Whether helm talks plain HTTP to ``registry`` (host[:port]/path): a loopback host, or everywhere with
    WARDEN_REGISTRY_PLAIN_HTTP=1 (as hack/push.sh decides)."""
    host = registry.split("/", 1)[0].rsplit(":", 1)[0]
    return host == "localhost" or host.startswith("127.") or os.environ.get("WARDEN_REGISTRY_PLAIN_HTTP") == "1"


def containerd_socket() -> Path:
    return RUN_DIR / "containerd" / "containerd.sock"


def cni_conflist(subnet: str = POD_SUBNET, host_node: bool = True) -> str:
    """A node's pod network: a bridge on ``subnet``. The host node's (``host_node``) masquerades what leaves the
    subnet, keeps its IPAM state in DATA_DIR and needs the firewall plugin (below); a VM node's
    (warden_dev.vmjoin) routes 10.244.0.0/16 through the host with the pods' own addresses."""
    ipam: dict[str, Any] = {"type": "host-local", "ranges": [[{"subnet": subnet}]], "routes": [{"dst": "0.0.0.0/0"}]}
    if host_node:
        ipam["dataDir"] = str(DATA_DIR / "cni-ipam")
    plugins: list[dict[str, Any]] = [
        {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": host_node, "hairpinMode": True,
         "ipam": ipam},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ]  # fmt: skip
    if host_node:
        # Docker sets the FORWARD policy to DROP; bridged pod traffic passes FORWARD (br_netfilter):
        # the firewall plugin accepts what goes to and from each pod's address (chain CNI-FORWARD)
        plugins.append({"type": "firewall", "backend": "iptables"})
    return json.dumps({"cniVersion": "1.0.0", "name": CNI_NETWORK, "plugins": plugins}, indent=2) + "\n"


def kubelet_config(pki: Pki) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_IP,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki.ca_crt)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{containerd_socket()}",
        # cgroup v1 host without systemd
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "failSwapOn": False,
        "protectKernelDefaults": False,
        "clusterDNS": [DNS_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": "/etc/resolv.conf",
        "podCIDR": POD_SUBNET,
        "maxPods": 110,
        "serializeImagePulls": False,
        # the pause image and the tests' images are imported, not pulled: an image GC would delete images
        # that can never be pulled again
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        # a shared development disk: evict only when really full
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "containerLogMaxSize": "10Mi",
        "containerLogMaxFiles": 3,
    }


def kube_proxy_config(kubeconfig: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "iptables",
        "clusterCIDR": CLUSTER_CIDR,
        "hostnameOverride": NODE_NAME,
        "bindAddress": NODE_IP,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "nodePortAddresses": [f"{NODE_IP}/32"],
        # leave nf_conntrack_max and its timeouts as the host has them
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


def corefile(kubeconfig: Path) -> str:
    return f""".:53 {{
    bind {NODE_IP}
    errors
    ready 127.0.0.1:18181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        kubeconfig {kubeconfig} warden-test
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    forward . /etc/resolv.conf
    cache 30
    loop
    loadbalance
}}
"""


def dns_manifests() -> list[dict[str, Any]]:
    """RBAC for CoreDNS (user warden:coredns) and the kube-dns Service pointing at it on the host."""
    labels = {"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}
    ports = [
        {"name": "dns", "port": 53, "protocol": "UDP"},
        {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
    ]
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "warden:coredns"},
            "rules": [
                {"apiGroups": [""], "resources": ["services", "pods", "namespaces"], "verbs": ["list", "watch"]},
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "warden:coredns"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "warden:coredns"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "warden:coredns"}],
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": labels},
            "spec": {"clusterIP": DNS_IP, "ports": ports},  # no selector: CoreDNS runs on the host
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "kube-dns-host",
                "namespace": "kube-system",
                "labels": {
                    "kubernetes.io/service-name": "kube-dns",
                    "endpointslice.kubernetes.io/managed-by": "warden",
                },
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [NODE_IP], "conditions": {"ready": True}, "nodeName": NODE_NAME}],
            "ports": ports,
        },
    ]


def kube_router_rbac() -> list[dict[str, Any]]:
    """What kube-router's firewall reads (user warden:kube-router): the pods, namespaces and policies it
    turns into rules, the node it runs on, the Services whose cluster IPs it lets through."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "warden:kube-router"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["namespaces", "pods", "services", "nodes", "endpoints"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "apiGroups": ["networking.k8s.io"],
                    "resources": ["networkpolicies"],
                    "verbs": ["get", "list", "watch"],
                },
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["get", "list", "watch"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "warden:kube-router"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "warden:kube-router"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "warden:kube-router"}],
        },
    ]


def kube_router_argv(bins: Path, kubeconfig: Path) -> list[str]:
    return [
        str(bins / "kube-router"),
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={NODE_NAME}",
        "--run-firewall=true",
        "--run-router=false",
        "--run-service-proxy=false",
        "--enable-cni=false",
        "--enable-ipv6=false",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--health-addr=127.0.0.1",
        f"--health-port={KUBE_ROUTER_HEALTH_PORT}",
        "--v=1",
    ]


def provisioner_rbac() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "warden:local-volumes"},
            "rules": [
                # watch: a change wakes its pass (warden_dev.localvolumes)
                {"apiGroups": [""], "resources": ["persistentvolumes"], "verbs": ["list", "watch", "create", "delete"]},
                {"apiGroups": [""], "resources": ["persistentvolumeclaims"], "verbs": ["list", "watch"]},
                {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": ["list"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "warden:local-volumes"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "warden:local-volumes"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "warden:local-volumes"}],
        },
    ]


# ---------------------------------------------------------------------------------------------------
# host preparation and cleanup


def fake_gpu_count() -> int:
    value = os.environ.get("WARDEN_LOCAL_FAKE_GPUS", str(FAKE_GPUS))
    if not value.isdigit() or int(value) > 64:
        raise LocalClusterError(f"WARDEN_LOCAL_FAKE_GPUS must be a number of GPUs from 0 to 64, got {value!r}")
    return int(value)


def build_fake_gpu_plugin() -> Path:
    """go build hack/fakegpu (the stand-in device plugin) into the cache; Go's build cache makes a
    rebuild of unchanged sources take about a second."""
    out = cache_dir() / "bin" / "warden-fake-gpu-plugin"
    env = {
        **os.environ,
        "GOMODCACHE": str(cache_dir() / "go" / "mod"),
        "GOCACHE": str(cache_dir() / "go" / "build"),
        "GOTOOLCHAIN": "local",
        "GOFLAGS": "-mod=readonly -buildvcs=false",
        "CGO_ENABLED": "0",
    }
    proc = subprocess.run(["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(out), "."],
                          cwd=REPO_ROOT / "hack" / "fakegpu", env=env, capture_output=True, text=True)  # fmt: skip
    if proc.returncode != 0:
        raise LocalClusterError(f"building hack/fakegpu failed: {proc.stderr.strip()}")
    return out


def preflight() -> None:
    if os.geteuid() != 0:
        raise LocalClusterError("the local cluster needs root (kubelet, containerd, iptables, mounts)")
    missing = [b for b in ("containerd", "containerd-shim-runc-v2", "runc", "ctr", "iptables", "iptables-save", "ip",
                           "ipset", "docker") if shutil.which(b) is None]  # fmt: skip
    if not REGISTRY_BIN.is_file():
        missing.append(f"{REGISTRY_BIN} (docker-registry)")
    missing += [f"{CNI_BIN_DIR}/{p}" for p in ("bridge", "host-local", "portmap", "firewall", "loopback")
                if not (CNI_BIN_DIR / p).is_file()]  # fmt: skip
    if missing:
        raise LocalClusterError(f"missing: {', '.join(missing)} (python -m warden_dev deps installs them)")


def write_sysctl(name: str, value: str) -> None:
    path = Path("/proc/sys") / name.replace(".", "/")
    try:
        if path.read_text().strip() != value:
            path.write_text(value)
    except OSError as e:
        raise LocalClusterError(f"cannot set {name}={value}: {e}") from e


def set_sysctl(record: HostRecord, name: str, value: str) -> None:
    """Set a sysctl, recording the value it had (``down`` puts it back)."""
    before = read_sysctl(name)
    if before is not None and before != value:
        record.add(Change("sysctl", name, before=before, after=value))
    write_sysctl(name, value)


def lo_addresses() -> set[str]:
    out = run(["ip", "-4", "-o", "addr", "show", "dev", "lo"]).stdout.decode()
    return {line.split()[3] for line in out.splitlines() if len(line.split()) > 3}


def prepare_host(record: HostRecord) -> None:
    """Every change to the host that ``up`` makes itself or has its components make, each recorded before
    it is made."""
    set_sysctl(record, "net.ipv4.ip_forward", "1")
    # bridged pod-to-pod traffic must pass iptables, or Service DNAT replies bypass conntrack
    set_sysctl(record, "net.bridge.bridge-nf-call-iptables", "1")
    if LAYOUT.node_cidr not in lo_addresses():
        record.add(Change("address", LAYOUT.node_cidr, after="lo"))
        run(["ip", "addr", "add", LAYOUT.node_cidr, "dev", "lo"])
    record.add(Change("link", BRIDGE, by="CNI bridge plugin"))
    for d in (KUBELET_ROOT, DATA_DIR, RUN_DIR, *POD_LOG_DIRS):
        record.add(Change("dir", str(d), before=dir_state(d)))
    # libcni caches each pod's network setup here; where the directory holds others', only ours go
    record.add(Change("dir", str(CNI_CACHE), before=dir_state(CNI_CACHE),
                      pattern=f"results/{CNI_NETWORK}-* results/cni-loopback-{{container}}-*"))  # fmt: skip
    record.add(Change("mkdir", str(NETNS_DIR), before=dir_state(NETNS_DIR), by="containerd"))
    seccomp = KUBELET_ROOT / "seccomp" / SECCOMP_PROFILE
    seccomp.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO_ROOT / "images" / "worker" / "seccomp.json", seccomp)
    for d in (DATA_DIR, RUN_DIR / "containerd", DATA_DIR / "volumes"):
        d.mkdir(parents=True, exist_ok=True)


def firewall_hooked() -> bool:
    """kube-router's firewall is in the path of forwarded packets (FORWARD jumps to its chain)."""
    rules = run(["iptables", "-w", "-S", "FORWARD"], check=False, quiet=True).stdout.decode()
    return f"-j {KUBE_ROUTER_FORWARD_CHAIN}" in rules


def _pids_with_cmdline(fragment: bytes) -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if fragment in (p / "cmdline").read_bytes():
                pids.append(int(p.name))
        except OSError:
            continue
    return pids


def start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, /proc/<pid>/stat field 22): with the pid, it
    names one process; a pid reused later has another. None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def kill_containers() -> list[str]:
    """Kill every container this cluster's containerd started (runc state under our own root), then
    the shims serving our containerd socket. Returns the containers' ids."""
    root = RUN_DIR / "runc" / "k8s.io"
    listed: list[str] = []
    if root.is_dir() and shutil.which("runc"):
        listed = run(["runc", "--root", str(root), "list", "-q"], check=False, quiet=True).stdout.decode().split()
        for cid in listed:
            run(["runc", "--root", str(root), "kill", "--all", cid, "KILL"], check=False, quiet=True)
        for cid in listed:
            run(["runc", "--root", str(root), "delete", "--force", cid], check=False, quiet=True)
    for pid in _pids_with_cmdline(f"-address\x00{containerd_socket()}\x00".encode()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return listed


def undo_host(record: HostRecord, container_ids: Sequence[str] = ()) -> None:
    """Undo what ``record`` says the cluster changed (warden_dev.hostrecord.undo_plan), nothing else."""
    plan = undo_plan(record, HostSnapshot.take(LAYOUT), LAYOUT, container_ids)
    for _ in range(3):
        mounts = mounts_to_undo(mountpoints(Path("/proc/self/mountinfo").read_text()), plan.unmount_under)
        if not mounts:
            break
        for m in mounts:
            if run(["umount", m], check=False, quiet=True).returncode != 0:
                run(["umount", "-l", m], check=False, quiet=True)
    for ns in plan.netns:
        run(["umount", ns], check=False, quiet=True)
        Path(ns).unlink(missing_ok=True)
    for argv in plan.commands:
        run(argv, check=False, quiet=argv[0] != "ip", timeout=60)
    for cg in plan.cgroups:
        remove_cgroup_tree(Path(cg))
    for d in plan.remove:
        shutil.rmtree(d, ignore_errors=True)
    for d in plan.empty:
        for child in Path(d).iterdir() if Path(d).is_dir() else ():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)
    for pattern in plan.remove_matching:
        for match in Path("/").glob(pattern.lstrip("/")):
            if match.is_dir() and not match.is_symlink():
                shutil.rmtree(match, ignore_errors=True)
            else:
                match.unlink(missing_ok=True)
    for d in plan.rmdir:
        with contextlib.suppress(OSError):
            Path(d).rmdir()
    for name, value in plan.sysctls.items():
        try:
            write_sysctl(name, value)
        except LocalClusterError as e:
            log(f"(ignored) {e}")
    if plan.commands or plan.sysctls:
        log(f"host: {len(plan.commands)} network/iptables change(s) and {len(plan.sysctls)} sysctl(s) undone")


# ---------------------------------------------------------------------------------------------------
# the cluster


@dataclass
class LocalCluster:
    state: Path = field(default_factory=state_dir)

    @property
    def kubeconfig(self) -> Path:
        return self.state / "controlplane" / "admin.kubeconfig"

    @property
    def state_file(self) -> Path:
        return self.state / "state.json"

    @property
    def record_file(self) -> Path:
        return self.state / RECORD_NAME

    @property
    def registry_config(self) -> Path:
        return self.state / "registry.yml"

    def registry(self) -> str | None:
        """Where Warden's images and charts go for this cluster (``REGISTRY``, hack/push.sh) while its registry
        runs; None when it does not (no cluster, or one an older checkout started without a registry)."""
        return REGISTRY if "registry" in self.own_pids() else None

    def saved(self) -> dict[str, Any] | None:
        if not self.state_file.is_file():
            return None
        data: dict[str, Any] = json.loads(self.state_file.read_text())
        return data

    def foreign(self) -> bool:
        """The state dir holds a cluster that warden_dev did not start (no host record): an older
        checkout's, whose changes to the host nobody recorded. It is left alone."""
        return self.state_file.is_file() and not self.record_file.is_file()

    def own_pids(self) -> dict[str, int]:
        """The cluster's processes that still run (a pid whose start time differs is another process)."""
        st = self.saved() or {}
        starts = st.get("starts", {})
        out = {}
        for name, pid in st.get("pids", {}).items():
            now = start_time(int(pid))
            if now is not None and starts.get(name, now) == now:
                out[name] = int(pid)
        return out

    def running(self) -> bool:
        st = self.saved()
        if st is None or self.foreign():
            return False
        alive = self.own_pids()
        for name, pid in st["pids"].items():
            if name not in alive:
                log(f"{name} (pid {pid}) is gone")
                return False
        return True

    def check_host(self) -> None:
        """Raise HostInUse when another cluster owns parts of this host (warden_dev.hostcheck)."""
        findings = check(HostSnapshot.take(LAYOUT), LAYOUT, own_pids=self.own_pids().values())
        if findings:
            raise HostInUse(findings)

    def bin_dir(self) -> Path:
        return pinned_bin_dir()

    def kube(self, registry: str | None = None) -> Kube:
        """kubectl/helm against this cluster; with ``registry`` (``self.registry()``, pushed to), install_charts
        installs the charts from it and points the operator's images there."""
        return Kube(self.kubeconfig, self.bin_dir(), registry)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> str:
        return self.kube().kubectl(*args, input=input, check=check, timeout=timeout)

    def apply(self, objs: Sequence[dict[str, Any]]) -> None:
        self.kube().apply(objs)

    # -- up -----------------------------------------------------------------------------------------
    def up(self, timeout: float = 300) -> None:
        if self.running():
            log(f"already up ({self.state}); KUBECONFIG={self.kubeconfig}")
            return
        if self.foreign():
            raise LocalClusterError(
                f"{self.state} holds a local cluster that warden_dev did not start (no {RECORD_NAME}: an older "
                "checkout's?); it is left alone: take it down with the code that started it, or set "
                "WARDEN_LOCALCLUSTER_DIR to another directory"
            )
        if self.state_file.is_file() or self.record_file.is_file():
            log("a previous cluster is half gone: cleaning it up first")
            self.down()
        t0 = time.monotonic()
        preflight()
        bins = self.bin_dir()
        for b in ("kubelet", "kube-proxy", "coredns", "kube-router", "kubectl"):
            if not (bins / b).is_file():
                raise LocalClusterError(f"{bins / b} missing: run hack/build-k8s-bins.sh cluster")
        snapshot = HostSnapshot.take(LAYOUT)
        findings = check(snapshot, LAYOUT)
        if findings:
            raise HostInUse(findings)
        self.state.mkdir(parents=True, exist_ok=True)
        record = HostRecord.start(self.record_file, snapshot)
        prepare_host(record)
        for d in ("cni", "kubelet", "kube-proxy", "kube-router", "coredns"):
            (self.state / d).mkdir(exist_ok=True)
        (self.state / "cni" / "10-warden.conflist").write_text(cni_conflist())
        (self.state / "containerd.toml").write_text(containerd_config(self.state))
        hosts = self.state / "certs.d" / REGISTRY_ADDRESS / "hosts.toml"
        hosts.parent.mkdir(parents=True, exist_ok=True)
        hosts.write_text(registry_hosts_toml())
        registry_dir().mkdir(parents=True, exist_ok=True)
        self.registry_config.write_text(registry_config(registry_dir()))

        cp = NodeControlPlane(bins, work_dir=self.state / "controlplane", detach=True)
        try:
            log("control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler")
            cp.start()
            log(f"control plane up in {cp.startup_seconds:.1f}s")
            self._certs(cp)
            self.apply([*dns_manifests(), *kube_router_rbac(), *provisioner_rbac(), storage_class_manifest(),
                        nfs_storage_class_manifest(), node_local_storage_class_manifest()])  # fmt: skip

            log(f"registry on {REGISTRY_ADDRESS} (storage {registry_dir()})")
            cp.spawn("registry", [str(REGISTRY_BIN), "serve", str(self.registry_config)])

            def registry_ready() -> bool:
                cp.check_alive()  # it exited (its port taken after all?): waiting cannot help
                return registry_answers()

            wait_for(f"the registry answering on {REGISTRY_ADDRESS}", registry_ready, 30, on_fail=cp.failure_report)

            log("containerd")
            cp.spawn("containerd", ["containerd", f"--config={self.state / 'containerd.toml'}"])
            wait_for("containerd", self._containerd_ready, 30, on_fail=cp.failure_report)
            self.import_images([PAUSE_IMAGE])

            log("kubelet, kube-proxy, CoreDNS, local volume provisioner")
            kcfg = self.state / "kubelet" / "config.yaml"
            kcfg.write_text(json.dumps(kubelet_config(cp.pki), indent=2) + "\n")
            cp.spawn("kubelet", [
                str(bins / "kubelet"),
                f"--config={kcfg}",
                f"--kubeconfig={self.state / 'kubelet' / 'kubeconfig'}",
                f"--root-dir={KUBELET_ROOT}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={NODE_IP}",
                f"--volume-plugin-dir={KUBELET_ROOT / 'volumeplugins'}",
                f"--cert-dir={KUBELET_ROOT / 'pki'}",
                "--v=1",
            ])  # fmt: skip
            pcfg = self.state / "kube-proxy" / "config.yaml"
            pcfg.write_text(json.dumps(kube_proxy_config(self.state / "kube-proxy" / "kubeconfig"), indent=2) + "\n")
            cp.spawn("kube-proxy", [str(bins / "kube-proxy"), f"--config={pcfg}", "--v=1"])
            (self.state / "coredns" / "Corefile").write_text(corefile(self.state / "coredns" / "kubeconfig"))
            cp.spawn("coredns", [str(bins / "coredns"), "-conf", str(self.state / "coredns" / "Corefile")])
            cp.spawn("local-volumes", [
                sys.executable, "-m", "warden_dev.localvolumes",
                f"--kubeconfig={self.state / 'local-volumes.kubeconfig'}",
                f"--root={DATA_DIR / 'volumes'}",
                f"--node={NODE_NAME}",
                # warden-nfs volumes: directories of the VM nodes' NFS export (vmjoin), once nodes join
                f"--nfs-root={vmjoin_nfs_export()}",
                f"--nfs-server={vmnode_gateway()}",
            ])  # fmt: skip
            gpus = fake_gpu_count()
            if gpus:
                drivers = ",".join(str(d.path) for d in fakedriver.build_all())
                devices = {fakedriver.gpu_device(i).parent for i in range(gpus)}.pop()
                cp.spawn("fake-gpu-plugin", [str(build_fake_gpu_plugin()), f"-count={gpus}", f"-device-dir={devices}",
                                             f"-resource={FAKE_GPU_RESOURCE}", f"-drivers={drivers}"])  # fmt: skip
            self._save(cp, bins)
            deadline = time.monotonic() + timeout
            wait_for(f"node {NODE_NAME} Ready", self._node_ready, deadline - time.monotonic(), interval=1,
                     on_fail=cp.failure_report)  # fmt: skip
            # kube-router reads its Node at start: once the kubelet has registered it
            cp.spawn("kube-router", kube_router_argv(bins, self.state / "kube-router" / "kubeconfig"))
            self._save(cp, bins)
            if gpus:

                def gpus_allocatable() -> bool:
                    cp.check_alive()  # the plugin (or the kubelet) exited: waiting cannot help
                    return self._gpus() == gpus

                wait_for(f"{gpus} stand-in {FAKE_GPU_RESOURCE} allocatable", gpus_allocatable,
                         deadline - time.monotonic(), interval=1, on_fail=cp.failure_report)  # fmt: skip
            wait_for("CoreDNS ready", self._coredns_ready, deadline - time.monotonic(), interval=1,
                     on_fail=cp.failure_report)  # fmt: skip
            wait_for("kube-router's firewall in FORWARD", firewall_hooked, deadline - time.monotonic(), interval=1,
                     on_fail=cp.failure_report)  # fmt: skip
            cp.check_alive()
            for change in record.observe(HostSnapshot(sysctls=read_sysctls())):
                log(f"recorded: {change.by} set {change.target} from {change.before} to {change.after}")
        except BaseException:
            record.observe(HostSnapshot(sysctls=read_sysctls()))
            log("start failed: stopping what was started (logs stay in " + str(cp.log_dir) + ")")
            for comp in reversed(cp.components):
                if comp.proc is not None:
                    _kill_group(comp.proc.pid, functools.partial(lambda p: p.poll() is not None, comp.proc))
            self.down(keep_logs=True)
            raise
        log(f"cluster up in {time.monotonic() - t0:.0f}s; export KUBECONFIG={self.kubeconfig}")

    def _certs(self, cp: NodeControlPlane) -> None:
        pki = cp.pki
        users = {
            "kubelet": (f"/O=system:nodes/CN=system:node:{NODE_NAME}", self.state / "kubelet" / "kubeconfig"),
            "kube-proxy": ("/CN=system:kube-proxy", self.state / "kube-proxy" / "kubeconfig"),
            "coredns": ("/CN=warden:coredns", self.state / "coredns" / "kubeconfig"),
            "kube-router": ("/CN=warden:kube-router", self.state / "kube-router" / "kubeconfig"),
            "local-volumes": ("/CN=warden:local-volumes", self.state / "local-volumes.kubeconfig"),
        }
        for name, (subj, kubeconfig) in users.items():
            pki._leaf(name, subj, "clientAuth", None)
            pki.key(name).chmod(0o600)
            write_kubeconfig(kubeconfig, cp.server, pki.ca_crt, name, pki.crt(name), pki.key(name))

    def _save(self, cp: NodeControlPlane, bins: Path) -> None:
        state = {
            "bin_dir": str(bins),
            "kubeconfig": str(self.kubeconfig),
            "server": cp.server,
            "log_dir": str(cp.log_dir),
            "node_ip": NODE_IP,
            "pids": {c.name: c.proc.pid for c in cp.components if c.proc is not None},
            "starts": {c.name: start_time(c.proc.pid) for c in cp.components if c.proc is not None},
        }
        self.state_file.write_text(json.dumps(state, indent=2) + "\n")

    def _ctr(self, *args: str, input: bytes | None = None, timeout: float = 600) -> str:
        return run(["ctr", f"--address={containerd_socket()}", "--namespace=k8s.io", *args],
                   input=input, timeout=timeout).stdout.decode()  # fmt: skip

    def _containerd_ready(self) -> bool:
        return containerd_socket().exists() and "Server" in self._ctr("version", timeout=10)

    def _node_ready(self) -> bool:
        out = self.kubectl("get", "node", NODE_NAME, "-o",
                           'jsonpath={.status.conditions[?(@.type=="Ready")].status}', check=False)  # fmt: skip
        return out.strip() == "True"

    def _gpus(self) -> int:
        """The node's allocatable stand-in GPUs (0 until the device plugin registered)."""
        out = self.kubectl("get", "node", NODE_NAME, "-o", "json", check=False)
        alloc = json.loads(out).get("status", {}).get("allocatable", {}) if out.strip() else {}
        return int(alloc.get(FAKE_GPU_RESOURCE, "0"))

    def _coredns_ready(self) -> bool:
        import urllib.request

        with urllib.request.urlopen("http://127.0.0.1:18181/ready", timeout=2) as r:
            return bool(r.status == 200)

    # -- images ---------------------------------------------------------------------------------------
    def ensure_pause_image(self) -> None:
        if run(["docker", "image", "inspect", PAUSE_IMAGE], check=False, quiet=True).returncode == 0:
            return
        k8s = pinned_versions()["KUBERNETES_VERSION"]
        gomodcache = cache_dir() / "go" / "mod"
        src = gomodcache / f"k8s.io/kubernetes@{k8s}" / "build" / "pause" / "linux" / "pause.c"
        if not src.is_file():
            raise LocalClusterError(f"{src} missing: run hack/build-k8s-bins.sh (it downloads the module)")
        work = cache_dir() / "pause"
        shutil.rmtree(work, ignore_errors=True)
        (work / "root").mkdir(parents=True)
        run(["gcc", "-Os", "-Wall", "-Werror",  # upstream source, its own flags
             "-static", f"-DVERSION=v{PAUSE_TAG}-warden",
             "-o", str(work / "root" / "pause"), str(src)])  # fmt: skip
        run(["strip", str(work / "root" / "pause")])
        tar = run(["tar", "-C", str(work / "root"), "-c", "pause"]).stdout
        run(["docker", "import", "--change", 'ENTRYPOINT ["/pause"]', "--change", "USER 65535:65535", "-",
             PAUSE_IMAGE], input=tar)  # fmt: skip
        log(f"built {PAUSE_IMAGE} from {src}")

    def publish(self, refs: Sequence[str]) -> str:
        """Push ``refs`` and the charts to this cluster's registry (``push_images``) and make the kubelet
        pull again what changed under the same tag: containerd forgets each image of the registry whose
        digest there is no longer the one it pulled (pods running it keep running), so `IfNotPresent`
        pulls the new one. The registry, for ``kube``."""
        registry = self.registry()
        if registry is None:
            raise LocalClusterError(
                "the local cluster runs no registry (an older checkout started it): make down, make up"
            )
        push_images(refs, registry)
        listed = self._ctr("images", "ls")
        stale = []
        for line in listed.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 3 or not fields[0].startswith(f"{REGISTRY_ADDRESS}/") or "@" in fields[0]:
                continue
            if registry_digest(fields[0]) not in (None, fields[2]):
                stale.append(fields[0])
        if stale:
            self._ctr("images", "rm", *stale)
            log(f"changed in the registry, pulled again when next used: {' '.join(stale)}")
        return registry

    def import_images(self, refs: Sequence[str]) -> None:
        """Import Docker images into containerd's k8s.io namespace, skipping those already there
        with the same image id."""
        stamp_file = DATA_DIR / "imported.json"
        stamps: dict[str, str] = json.loads(stamp_file.read_text()) if stamp_file.is_file() else {}
        present = set(self._ctr("images", "ls", "-q").split())
        todo = []
        for ref in refs:
            proc = run(["docker", "image", "inspect", "-f", "{{.Id}}", ref], check=False, quiet=True)
            if proc.returncode != 0:
                raise LocalClusterError(f"image {ref} is not in Docker: run make images")
            image_id = proc.stdout.decode().strip()
            # containerd lists images under their normalized names (a default domain put in front)
            if stamps.get(ref) == image_id and any(name == ref or name.endswith(f"/{ref}") for name in present):
                continue
            todo.append((ref, image_id))
        if not todo:
            return
        t0 = time.monotonic()
        names = [r for r, _ in todo]
        log(f"importing into containerd: {' '.join(names)}")
        saver = subprocess.Popen(["docker", "save", *names], stdout=subprocess.PIPE)
        importer = subprocess.run(
            ["ctr", f"--address={containerd_socket()}", "--namespace=k8s.io", "images", "import", "-"],
            stdin=saver.stdout, capture_output=True, timeout=1800,
        )  # fmt: skip
        if saver.wait() != 0:
            raise LocalClusterError(f"docker save {' '.join(names)} failed")
        if importer.returncode != 0:
            raise LocalClusterError(f"ctr images import failed: {importer.stderr.decode(errors='replace')}")
        for ref, image_id in todo:
            stamps[ref] = image_id
        stamp_file.write_text(json.dumps(stamps, indent=2) + "\n")
        log(f"imported {len(todo)} image(s) in {time.monotonic() - t0:.0f}s")

    # -- down ---------------------------------------------------------------------------------------
    def down(self, keep_logs: bool = False) -> None:
        """Stop the cluster's processes and containers and undo what its host record says it changed;
        nothing else. A cluster that warden_dev did not start (no record) is left alone."""
        if self.foreign():
            log(f"{self.state} holds a local cluster that warden_dev did not start (no {RECORD_NAME}): left alone; "
                "take it down with the code that started it")  # fmt: skip
            return
        record = HostRecord.load(self.record_file)
        if record is None:
            log(f"no local cluster of warden_dev's in {self.state}")
            return
        for name, pid in reversed(list(self.own_pids().items())):
            _kill_group(pid, functools.partial(_gone, pid))
            log(f"stopped {name} (pid {pid})")
        # a containerd that outlived its state file (crash during up) is found by its config
        for pid in _pids_with_cmdline(f"--config={self.state / 'containerd.toml'}".encode()):
            _kill_group(pid, functools.partial(_gone, pid))
        # as is a registry (its storage, outside the state dir, stays: the next `up` finds the images there)
        for pid in _pids_with_cmdline(f"serve\x00{self.registry_config}\x00".encode()):
            _kill_group(pid, functools.partial(_gone, pid))
        undo_host(record, kill_containers())
        if keep_logs:
            self.state_file.unlink(missing_ok=True)
            self.record_file.unlink(missing_ok=True)
        else:
            shutil.rmtree(self.state, ignore_errors=True)
        log("down")


@functools.cache
def pinned_bin_dir() -> Path:
    """Where hack/build-k8s-bins.sh keeps the binaries of the pinned versions."""
    out = subprocess.run(["bash", str(REPO_ROOT / "hack" / "build-k8s-bins.sh"), "--print-dir"],
                         check=True, capture_output=True, text=True)  # fmt: skip
    return Path(out.stdout.strip())


def registry_answers(address: str = REGISTRY_ADDRESS) -> bool:
    """``GET /v2/`` of the registry answers 200 (no proxy: it is on loopback)."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{address}/v2/", timeout=2) as r:
        return bool(r.status == 200)


#: what a registry may answer a manifest request with (single images and multi-platform indexes)
MANIFEST_TYPES = ", ".join([
    "application/vnd.docker.distribution.manifest.v2+json", "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json", "application/vnd.oci.image.index.v1+json",
])  # fmt: skip


def registry_digest(ref: str) -> str | None:
    """The digest the local registry holds for ``ref`` (``<address>/<path>:<tag>``); None when it has none."""
    import urllib.error
    import urllib.request

    address, _, rest = ref.partition("/")
    path, _, tag = rest.rpartition(":")
    request = urllib.request.Request(f"http://{address}/v2/{path}/manifests/{tag}", method="HEAD",
                                     headers={"Accept": MANIFEST_TYPES})  # fmt: skip
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as r:
            digest = r.headers.get("Docker-Content-Digest")
            return str(digest) if digest else None
    except urllib.error.HTTPError:
        return None


def push_images(refs: Sequence[str], registry: str = REGISTRY) -> None:
    """hack/push.sh: tag Docker's ``refs`` (warden/<name>:<tag>) as ``registry``/<name>:<tag> and push them
    (those pushed before with the same image id are skipped), then the three charts (oci://registry/charts)."""
    t0 = time.monotonic()
    log(f"pushing {len(refs)} image(s) and the charts to {registry}")
    proc = subprocess.run(["bash", str(REPO_ROOT / "hack" / "push.sh"), registry, *refs], stdout=sys.stderr,
                          timeout=3600)  # fmt: skip
    if proc.returncode != 0:
        raise LocalClusterError(f"hack/push.sh {registry} failed ({proc.returncode}; its output above)")
    log(f"pushed to {registry} in {time.monotonic() - t0:.0f}s")


def _gone(pid: int) -> bool:
    """The process has exited (or is a zombie nobody reaps: we are not its parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


# ---------------------------------------------------------------------------------------------------
# the demo: the three charts and a SlurmCluster you can SSH into


def ensure_ssh_key() -> Path:
    key = ssh_key()
    if not key.is_file():
        key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "warden-local", "-f", str(key)])
    return key


def demo_values(pubkey: str, workers: int = 2) -> dict[str, Any]:
    """slurm-cluster values that fit one small node (2 CPUs): small requests, a 5 GiB jail."""
    return {
        "nameOverride": DEMO_NAME,
        "jail": {"size": "5Gi"},
        "login": {"sshAuthorizedKeys": [pubkey], "service": {"type": "NodePort", "nodePort": DEMO_NODE_PORT}},
        "workerGroups": [
            {
                "name": "cpu",
                "replicas": workers,
                "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
            }
        ],
    }


@dataclass(frozen=True)
class Kube:
    """kubectl and helm (the pinned builds) against one kubeconfig: the local cluster or any other.
    ``registry``: where Warden's images and charts were pushed (hack/push.sh; the local cluster's own
    registry): install_charts then installs from there, and the operator's images come from there."""

    kubeconfig: Path
    bins: Path
    registry: str | None = None

    def _run(self, tool: str, args: Sequence[str], input: str | None, check: bool, timeout: float) -> str:
        proc = subprocess.run([str(self.bins / tool), f"--kubeconfig={self.kubeconfig}", *args], input=input,
                              capture_output=True, text=True, timeout=timeout)  # fmt: skip
        if check and proc.returncode != 0:
            raise LocalClusterError(f"{tool} {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc.stdout

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> str:
        return self._run("kubectl", args, input, check, timeout)

    def kubectl_result(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        """kubectl's whole outcome (exit status, stdout, stderr), for commands expected to fail."""
        return subprocess.run([str(self.bins / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
                              capture_output=True, text=True, timeout=timeout)  # fmt: skip

    def helm(self, *args: str, check: bool = True, timeout: float = 600) -> str:
        return self._run("helm", args, None, check, timeout)

    def json(self, *args: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.kubectl(*args, "-o", "json"))
        return data

    def json_if_found(self, *args: str) -> dict[str, Any]:
        """``json`` of a ``get`` whose object may be gone ({} then): a pod deleted and not yet made again."""
        out = self.kubectl(*args, "-o", "json", "--ignore-not-found")
        data: dict[str, Any] = json.loads(out) if out.strip() else {}
        return data

    def apply(self, objs: Sequence[dict[str, Any]]) -> None:
        doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)})
        self.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=warden-localcluster",
                     "-f", "-", input=doc)  # fmt: skip


CRD_NAMES = ("slurmclusters.slurm.warden.dev", "workersets.slurm.warden.dev")


def claim_crd(kube: Kube, release: str, namespace: str) -> bool:
    """Make the CRDs (SlurmCluster, WorkerSet) installable by the Helm ``release`` in ``namespace``.

    The CRDs carry ``helm.sh/resource-policy: keep``: ``helm uninstall`` leaves them behind, still
    annotated with the release that is gone, and Helm refuses to install them under any other release.
    True when ``release`` may install them: absent, already that release's, or their release no longer
    exists (the ownership annotations are then handed over, the way Helm adopts an object). False when
    another live release owns one: that release keeps them and the caller must not install them."""
    adopt = []
    for name in CRD_NAMES:
        out = kube.kubectl("get", "crd", name, "--ignore-not-found", "-o", "json")
        if not out.strip():
            continue
        annotations = json.loads(out)["metadata"].get("annotations", {})
        owner = (annotations.get("meta.helm.sh/release-name"), annotations.get("meta.helm.sh/release-namespace"))
        if owner == (release, namespace):
            continue
        if owner[0] and owner[1]:
            status = kube.helm("status", owner[0], "-n", owner[1], check=False)
            if status.strip():
                return False  # a live installation owns it
        adopt.append((name, owner))
    for name, owner in adopt:
        kube.kubectl("annotate", "--overwrite", "crd", name,
                     f"meta.helm.sh/release-name={release}", f"meta.helm.sh/release-namespace={namespace}")  # fmt: skip
        kube.kubectl("label", "--overwrite", "crd", name, "app.kubernetes.io/managed-by=Helm")
        log(f"CRD {name} left behind by release {owner[1]}/{owner[0]}: adopted by {namespace}/{release}")
    return True


CHARTS_DIR = REPO_ROOT / "charts"


def chart_args(charts: Path | str, chart: str, version: str | None = None) -> list[str]:
    """helm's arguments naming ``chart`` of ``charts``: a directory holding the charts (the working tree's
    charts/), or a registry (host[:port]/path) that hack/push.sh pushed them to: ``oci://<registry>/charts/
    <chart>`` at ``version`` (default: the project's), over plain HTTP where ``plain_http`` says so."""
    if isinstance(charts, Path):
        return [str(charts / chart)]
    args = [f"oci://{charts}/charts/{chart}", "--version", version or project_version()]
    return [*args, "--plain-http"] if plain_http(charts) else args


def install_charts(
    kube: Kube,
    operator_ns: str,
    cluster_ns: str,
    values: dict[str, Any],
    values_file: Path,
    *,
    operator_release: str = "slurm-operator",
    crds: str = "subchart",
    cluster: bool = True,
    operator_set: dict[str, str] | None = None,
    charts: Path | str | None = None,
    version: str | None = None,
) -> None:
    """helm upgrade --install the charts: the operator watching only ``cluster_ns`` (so several
    installations can share a cluster) and slurm-cluster with ``values``. ``crds``: "subchart" installs
    the CRD through the operator chart (crds.enabled), "chart" as its own slurm-operator-crds release;
    either way a CRD that a live release of another installation owns is left to it (``claim_crd``).
    ``cluster=False`` stops after the operator. ``operator_set``: more ``--set`` values of the operator chart.
    ``charts``: where the charts come from, a directory (``CHARTS_DIR``) or a registry prefix that hack/push.sh
    pushed the charts and images to (the operator then gets ``image.registry``: its image and the clusters'
    default images are pulled from there); default: ``kube.registry`` when set, else ``CHARTS_DIR``.
    ``version``: the charts' version in a registry (default: the project's)."""
    source: Path | str = charts if charts is not None else (kube.registry or CHARTS_DIR)
    kube.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in {operator_ns, cluster_ns}])
    crd_release = operator_release if crds == "subchart" else "slurm-operator-crds"
    # installations made side by side (e2e's lanes) claim the CRDs one at a time: two claims of absent
    # CRDs would both install them, and Helm refuses the second
    with lanelock.exclusive(cache_dir() / "locks" / "crd-claim.lock"):
        if not claim_crd(kube, crd_release, operator_ns):
            crds = "none"
        if crds == "chart":
            kube.helm("upgrade", "--install", "slurm-operator-crds",
                      *chart_args(source, "slurm-operator-crds", version),
                      "-n", operator_ns)  # fmt: skip
    if isinstance(source, Path):
        kube.helm("dependency", "build", str(source / "slurm-operator"))
    sets = {"image.registry": source} if isinstance(source, str) else {}
    sets.update(operator_set or {})
    kube.helm("upgrade", "--install", operator_release, *chart_args(source, "slurm-operator", version),
              "-n", operator_ns,
              "--set", f"crds.enabled={'true' if crds == 'subchart' else 'false'}",
              "--set", f"watchNamespaces[0]={cluster_ns}", "--wait", "--timeout=5m",
              *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")])  # fmt: skip
    if not cluster:
        return
    values_file.parent.mkdir(parents=True, exist_ok=True)
    values_file.write_text(json.dumps(values, indent=2) + "\n")
    release = str(values.get("nameOverride") or "slurm-cluster")
    kube.helm("upgrade", "--install", release, *chart_args(source, "slurm-cluster", version), "-n", cluster_ns,
              "-f", str(values_file))  # fmt: skip


def new_ssh_key(path: Path, comment: str) -> Path:
    """A new passphrase-less ed25519 key at ``path`` (its public half at ``path.pub``)."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)
    return path


def uninstall_charts(kube: Kube, namespace: str, *releases: str) -> None:
    """What a test or benchmark installed, gone again: each helm release (waited for; one already gone
    is skipped), then the namespace (not waited for)."""
    for release in releases:
        kube.helm("uninstall", release, "-n", namespace, "--ignore-not-found", "--wait", check=False)
    kube.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found", check=False)


def wait_slurmcluster_ready(kube: Kube, namespace: str, name: str, timeout: float = 900) -> dict[str, Any]:
    """Poll the SlurmCluster until status.phase is Ready, printing each change of phase/conditions."""
    last = ""
    deadline = time.monotonic() + timeout
    t0 = time.monotonic()
    while True:
        out = kube.kubectl("-n", namespace, "get", "slurmcluster", name, "-o", "json", check=False)
        obj: dict[str, Any] = json.loads(out) if out.strip() else {}
        status = obj.get("status", {})
        conds = " ".join(f"{c['type']}={c['status']}" for c in status.get("conditions", []))
        line = f"phase={status.get('phase', '-')} {conds}"
        if line != last:
            log(f"[{time.monotonic() - t0:4.0f}s] {namespace}/{name}: {line}")
            last = line
        if status.get("phase") == "Ready":
            return obj
        if time.monotonic() > deadline:
            pods = kube.kubectl("-n", namespace, "get", "pods", "-o", "wide", check=False)
            events = kube.kubectl("-n", namespace, "get", "events", "--sort-by=.lastTimestamp", check=False)
            raise LocalClusterError(
                f"SlurmCluster {namespace}/{name} not Ready after {timeout:.0f}s ({line})\n{pods}\n{events[-4000:]}"
            )
        time.sleep(3)


# Images that carry Slurm: built once per Slurm series (docs/images.md, "Slurm series")
SLURM_IMAGES = ("controller", "worker", "login", "populate-jail", "accounting", "health-check")
DEFAULT_SLURM_SERIES = pinned_versions()["SLURM_SERIES"]


def chart_images(series: Sequence[str] = (DEFAULT_SLURM_SERIES,)) -> list[str]:
    """The images the charts use by default; other Slurm series add their Slurm images
    (``warden/<name>:<version>-slurm<series>``)."""
    version = project_version()
    refs = [f"warden/{n}:{version}" for n in CHART_IMAGES]
    for s in series:
        if s != DEFAULT_SLURM_SERIES:
            refs += [f"warden/{n}:{version}-slurm{s}" for n in SLURM_IMAGES]
    return refs


def demo(cluster: LocalCluster) -> None:
    """Push the chart images and the charts to the cluster's registry, install the charts from it (the
    kubelet pulls every image), wait until the SlurmCluster is Ready, print the ssh command."""
    key = ensure_ssh_key()
    pub = key.with_suffix(".pub").read_text().strip()
    registry = cluster.publish(chart_images())
    log(f"installing charts from oci://{registry}/charts: slurm-operator (+ slurm-operator-crds), slurm-cluster")
    kube = cluster.kube(registry)
    install_charts(kube, NAMESPACE_OPERATOR, NAMESPACE_DEMO, demo_values(pub), cluster.state / "demo-values.json")
    wait_slurmcluster_ready(kube, NAMESPACE_DEMO, DEMO_NAME)
    print(
        f"\nSlurmCluster {NAMESPACE_DEMO}/{DEMO_NAME} is Ready. Log in (chrooted into the jail):\n\n"
        f"  ssh -i {key} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -p {DEMO_NODE_PORT} "
        f"root@{NODE_IP}\n\n"
        f"  export KUBECONFIG={cluster.kubeconfig}\n"
        f"  export PATH={cluster.bin_dir()}:$PATH\n"
    )


__all__ = ["REGISTRY", "SERVICE_CIDR", "LocalCluster", "LocalClusterError"]
