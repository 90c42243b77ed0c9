"""VM nodes joined to the local cluster: the host node stays, each VM node (``vmnode``) runs containerd, the
same kubelet and kube-proxy as the host node, and joins the same control plane
(``python -m warden_dev vm-node join|leave``, ``make up NODES=N``; docs/local-cluster.md, "VM nodes").

What a joined node is:

* a **share** (9p, read-only, ``/warden`` in the VM) this module writes before the VM boots: the kubelet and
  kube-proxy binaries the host node runs, their configurations and client certificates (signed by the local
  cluster's CA, ``system:node:<name>``), containerd's configuration, the CNI configuration of the node's pod
  subnet, Warden's seccomp profile, the pause image, and ``node-start`` (``NODE_START``), which the VM's init
  runs once it has booted; a second share (read-write) takes the node's logs (``logs/`` beside it);
* a **pod subnet** of its own (``10.244.<index>.0/24``; the host node has ``10.244.0.0/24``), routed by the
  host through the VM's address; pods of every node reach each other by their own addresses (no NAT
  between pod subnets);
* **images from the local registry**: the VM's containerd resolves ``127.0.0.1:5000/...`` through a mirror on
  the bridge's address, a second docker-registry process serving the same storage read-only;
* a **taint** (``warden.dev/vm-node=true:NoSchedule``) and a label: only pods that tolerate it land there, so
  the tiers that do not ask for VM nodes run as they always did;
* **stand-in GPUs** when asked (``gpus``): the host node's stand-in device plugin (hack/fakegpu) and stand-in
  drivers (``warden_dev.fakedriver``) in the share, the device files made in the VM, so the worker's cgroup v2
  device rules meet GPUs (no GPU exists here).

Everything the host side makes (the mirror, routes, iptables rules) is recorded in the VM node's state before
it is made (``vmnode.NodeState``) and removed by ``leave``/``vm-node down``; what several nodes share goes to
the last node left.
"""

from __future__ import annotations

import ipaddress
import json
import shlex
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from warden_dev import localcluster, localvolumes, vmimages, vmnode
from warden_dev.controlplane import REPO_ROOT, Pki, wait_for
from warden_dev.localcluster import (
    CLUSTER_CIDR,
    CLUSTER_DOMAIN,
    DNS_IP,
    PAUSE_IMAGE,
    REGISTRY_ADDRESS,
    registry_dir,
    state_dir,
)
from warden_dev.vmnode import BRIDGE, VM_SUBNET, NodeLayout, NodeState, Share, VmNodeError, log, node_layout, run

#: the taint and label every VM node carries: pods land there only when they ask to
VM_NODE_KEY = "warden.dev/vm-node"
VM_TAINT = f"{VM_NODE_KEY}=true:NoSchedule"
#: the 9p share's tag and where the VM mounts it; the logs share beside it
SHARE_TAG = "warden"
SHARE_MOUNT = "/warden"
LOGS_TAG = "wardenlogs"
#: the read-only registry mirror on the bridge's address (the local registry listens on loopback only)
MIRROR_PORT = 5000
#: Warden's AppArmor profiles (spec.security.appArmorProfile: Warden), loaded on every VM node as an admin
#: loads them on theirs (docs/nodes.md, "AppArmor")
APPARMOR_PROFILES = REPO_ROOT / "charts" / "slurm-cluster" / "files" / "apparmor"
#: the API server's certificate names "kubernetes", not the host's addresses: the VM checks that name
API_SERVER_NAME = "kubernetes"


def pod_subnet(index: int) -> str:
    if not 1 <= index <= 254:
        raise VmNodeError(f"node index {index}: 1..254 (its pod subnet is 10.244.<index>.0/24)")
    return f"10.244.{index}.0/24"


def node_ip(layout: NodeLayout) -> str:
    return layout.address.split("/")[0]


def mirror_address(subnet: str = VM_SUBNET) -> str:
    return f"{next(ipaddress.ip_network(subnet).hosts())}:{MIRROR_PORT}"


# ---------------------------------------------------------------------------------------------------
# what the share holds: pure renderers


def kubeconfig(server: str, user: str) -> dict[str, Any]:
    """A kubeconfig for the VM: certificates under the share, the API server checked by its name."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {
            "server": server, "certificate-authority": f"{SHARE_MOUNT}/pki/ca.crt",
            "tls-server-name": API_SERVER_NAME}}],
        "users": [{"name": user, "user": {"client-certificate": f"{SHARE_MOUNT}/pki/{user}.crt",
                                          "client-key": f"{SHARE_MOUNT}/pki/{user}.key"}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }  # fmt: skip


def kubelet_config(layout: NodeLayout) -> dict[str, Any]:
    """The VM node's kubelet: what the host node's has, for a cgroup v2 node without systemd."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node_ip(layout),
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": f"{SHARE_MOUNT}/pki/ca.crt"},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
        # cgroup v2 (the kernel mounts nothing else: cgroup_no_v1=all); tini is PID 1, not systemd
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "failSwapOn": False,
        "clusterDNS": [DNS_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": "",
        "podCIDR": pod_subnet(layout.index),
        "maxPods": 30,
        "serializeImagePulls": False,
        "registerWithTaints": [{"key": VM_NODE_KEY, "value": "true", "effect": "NoSchedule"}],
        # the pause image is imported, never pulled: no image GC
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "50Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "rotateCertificates": False,
        "containerLogMaxSize": "10Mi",
        "containerLogMaxFiles": 2,
        # a node that was powered off comes back as a new VM: tell pods on it apart quickly
        "nodeStatusUpdateFrequency": "10s",
    }


def kube_proxy_config(layout: NodeLayout) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": f"{SHARE_MOUNT}/kube-proxy.kubeconfig"},
        "mode": "iptables",
        "clusterCIDR": CLUSTER_CIDR,
        "hostnameOverride": layout.name,
        "bindAddress": node_ip(layout),
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        "nodePortAddresses": [f"{node_ip(layout)}/32"],
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s"},
    }


def containerd_config() -> str:
    """The VM's containerd (Debian's, its default paths): the CRI with crun as the runc shim's binary
    (Debian's; under TCG an exec into a container, which every exec probe is, took 1.8 s with runc, two Go
    starts, and 0.9 s with crun: docs/local-cluster.md), cgroupfs on cgroup v2, AppArmor as the node has it
    (containerd loads its default profile for containers that ask for none), registries from the share's
    certs.d. The host node keeps runc: the tiers run on both."""
    return f"""version = 2

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    discard_unpacked_layers = true
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "/usr/bin/crun"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{SHARE_MOUNT}/cni"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{SHARE_MOUNT}/certs.d"
"""


def registry_hosts_toml(mirror: str) -> str:
    """certs.d/127.0.0.1:5000/hosts.toml: the images the charts name (the local registry's, loopback on the
    host) are pulled from the mirror on the bridge."""
    return f"""server = "http://{REGISTRY_ADDRESS}"

[host."http://{mirror}"]
  capabilities = ["pull", "resolve"]
"""


def cni_conflist(index: int) -> str:
    """The node's pod network: its own subnet, no NAT towards the other nodes' pods (every node routes
    10.244.0.0/16 through the host)."""
    return localcluster.cni_conflist(pod_subnet(index), host_node=False)


def mirror_config(storage: Path, address: str) -> str:
    """docker-registry serving the local registry's storage read-only on the bridge's address."""
    return f"""version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {storage}
  maintenance:
    readonly:
      enabled: true
    uploadpurging:
      enabled: false
http:
  addr: {address}
"""


#: run by the VM's init (``warden.share`` on its command line) once the node has booted: the kubelet and
#: kube-proxy run under a loop that starts them again when they exit (there is no systemd)
NODE_START = r"""#!/bin/bash
# warden_dev VM node: join the local cluster (written by dev/warden_dev/vmjoin.py into the node's share)
set -u
S=/warden L=/var/log/warden
# the node's Go agents (containerd and its shims and runc, the kubelet, kube-proxy, the GPU plugin) on one
# scheduler thread with a lazier collector: under TCG their periodic work is most of an idle node's emulated
# CPU (measured: kubelet 71% -> 53% of a vCPU, containerd -26%; docs/local-cluster.md). A container's own
# environment is its image's and pod's, not this.
export GOMAXPROCS=1 GOGC=400
modprobe -a overlay br_netfilter veth bridge nf_conntrack iptable_nat iptable_filter xt_conntrack \
    xt_MASQUERADE xt_comment xt_mark xt_addrtype ip_tables 2>>"$L/node-start.log"
sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1 2>>"$L/node-start.log"
[ -s /etc/machine-id ] || cat /proc/sys/kernel/random/uuid | tr -d - >/etc/machine-id
# the node's cgroup v2 controllers, delegated to the kubelet's tree
for c in $(cat /sys/fs/cgroup/cgroup.controllers); do echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control; done
mkdir -p /var/lib/kubelet/seccomp/warden /etc/kubernetes
# Warden's AppArmor profiles, loaded the way an admin loads them on a node (the init loaded Debian's)
apparmor_parser --replace "$S"/apparmor/warden-* >>"$L/node-start.log" 2>&1 ||
    echo "warden AppArmor profiles: not loaded" >>"$L/node-start.log"
cp "$S/seccomp/worker.json" /var/lib/kubelet/seccomp/warden/worker.json
install -m 0755 "$S/bin/kubelet" "$S/bin/kube-proxy" /usr/local/bin/
# stand-in GPUs (no GPU exists here): character devices (195, N) that no driver owns, the device plugin
# advertising them to the kubelet (it waits for the kubelet's socket itself)
gpus=$(cat "$S/gpus" 2>/dev/null || echo 0)
if [ "$gpus" -gt 0 ]; then
    mkdir -p /run/warden-gpudev
    for i in $(seq 0 $((gpus - 1))); do mknod -m 0666 "/run/warden-gpudev/nvidia$i" c 195 "$i"; done
fi
# the images disk (vmimages: the cluster's images already pulled, made on the host), when attached
mkdir -p /var/lib/containerd
if mount -L warden-images /var/lib/containerd 2>>"$L/node-start.log"; then
    echo "images disk mounted on /var/lib/containerd" >>"$L/node-start.log"
fi
containerd --config "$S/containerd.toml" >>"$L/containerd.log" 2>&1 &
for _ in $(seq 1 120); do ctr version >/dev/null 2>&1 && break; sleep 0.5; done
ctr -n k8s.io images import "$S/images/pause.tar" >>"$L/node-start.log" 2>&1
supervise() {  # name argv...: run it again when it exits
    local name=$1; shift
    ( while true; do "$@" >>"$L/$name.log" 2>&1; echo "$(date +%s) $name exited $?" >>"$L/$name.log"; sleep 2; done ) &
}
supervise kubelet /usr/local/bin/kubelet --config="$S/kubelet.yaml" --kubeconfig="$S/kubelet.kubeconfig" \
    --hostname-override="$(hostname)" --node-ip="$(cat "$S/node-ip")" --node-labels="$(cat "$S/node-labels")" \
    --cert-dir=/var/lib/kubelet/pki --v=1
supervise kube-proxy /usr/local/bin/kube-proxy --config="$S/kube-proxy.yaml" --v=1
if [ "$gpus" -gt 0 ]; then
    supervise fake-gpu-plugin "$S/bin/warden-fake-gpu-plugin" -count="$gpus" -device-dir=/run/warden-gpudev \
        -resource=nvidia.com/gpu -drivers="$(cat "$S/gpu-drivers")"
fi
"""


# ---------------------------------------------------------------------------------------------------
# the host's side


def write_share(layout: NodeLayout, node_dir: Path, pki: Pki, server: str, bins: Path, gpus: int = 0) -> Path:
    """The node's share: everything ``NODE_START`` reads. Certificates are made for this node's name;
    ``gpus`` stand-in GPUs with the host's stand-in device plugin and drivers."""
    share = node_dir / "share"
    if share.exists():
        shutil.rmtree(share)
    for d in ("pki", "bin", "cni", "seccomp", "apparmor", "images", f"certs.d/{REGISTRY_ADDRESS}"):
        (share / d).mkdir(parents=True, exist_ok=True)
    (node_dir / "logs").mkdir(exist_ok=True)
    for user, subj in ((f"kubelet-{layout.name}", f"/O=system:nodes/CN=system:node:{layout.name}"),
                       ("kube-proxy", "/CN=system:kube-proxy")):  # fmt: skip
        if user != "kube-proxy":
            pki._leaf(user, subj, "clientAuth", None)
        shutil.copyfile(pki.crt(user), share / "pki" / f"{_vm_user(user)}.crt")
        shutil.copyfile(pki.key(user), share / "pki" / f"{_vm_user(user)}.key")
    shutil.copyfile(pki.ca_crt, share / "pki" / "ca.crt")
    _write_json(share / "kubelet.kubeconfig", kubeconfig(server, "kubelet"))
    _write_json(share / "kube-proxy.kubeconfig", kubeconfig(server, "kube-proxy"))
    _write_json(share / "kubelet.yaml", kubelet_config(layout))
    _write_json(share / "kube-proxy.yaml", kube_proxy_config(layout))
    (share / "containerd.toml").write_text(containerd_config())
    (share / "certs.d" / REGISTRY_ADDRESS / "hosts.toml").write_text(registry_hosts_toml(mirror_address()))
    (share / "cni" / "10-warden.conflist").write_text(cni_conflist(layout.index))
    shutil.copyfile(REPO_ROOT / "images" / "worker" / "seccomp.json", share / "seccomp" / "worker.json")
    for profile in APPARMOR_PROFILES.glob("warden-*"):
        shutil.copyfile(profile, share / "apparmor" / profile.name)
    (share / "node-ip").write_text(node_ip(layout) + "\n")
    (share / "node-labels").write_text(f"{VM_NODE_KEY}=true\n")
    for b in ("kubelet", "kube-proxy"):
        shutil.copyfile(bins / b, share / "bin" / b)
    with (share / "images" / "pause.tar").open("wb") as f:
        proc = subprocess.run(["docker", "save", PAUSE_IMAGE], stdout=f, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        raise VmNodeError(f"docker save {PAUSE_IMAGE}: {proc.stderr.decode(errors='replace').strip()}")
    if gpus:
        write_gpus(share, gpus)
    (share / "node-start").write_text(NODE_START)
    (share / "node-start").chmod(0o755)
    return share


def write_gpus(share: Path, gpus: int) -> None:
    """``gpus`` stand-in GPUs: the device plugin (static Go) and the stand-in drivers it hands out in turn
    (``drivers/<version>``, built on the host: C against glibc, which the VM's newer one runs)."""
    from warden_dev import fakedriver

    shutil.copyfile(localcluster.build_fake_gpu_plugin(), share / "bin" / "warden-fake-gpu-plugin")
    (share / "bin" / "warden-fake-gpu-plugin").chmod(0o755)
    paths = []
    for driver in fakedriver.build_all():
        shutil.copytree(driver.path, share / "drivers" / driver.version, symlinks=True)
        paths.append(f"{SHARE_MOUNT}/drivers/{driver.version}")
    (share / "gpu-drivers").write_text(",".join(paths) + "\n")
    (share / "gpus").write_text(f"{gpus}\n")


def _vm_user(user: str) -> str:
    return "kubelet" if user.startswith("kubelet-") else user


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2) + "\n")
    path.chmod(0o600)


#: iptables rules the host needs for VM nodes, each added once (``-C`` first) and removed at the end:
#: Docker's FORWARD policy is DROP; pod traffic between the host's pods and the VM nodes' passes here,
#: and the host's pods reach VM pods by their own address (the CNI bridge plugin would masquerade it)
HOST_RULES: tuple[tuple[str, ...], ...] = (
    ("filter", "FORWARD", "-i", BRIDGE, "-m", "comment", "--comment", "warden VM nodes", "-j", "ACCEPT"),
    ("filter", "FORWARD", "-o", BRIDGE, "-m", "comment", "--comment", "warden VM nodes", "-j", "ACCEPT"),
    ("nat", "POSTROUTING", "-s", CLUSTER_CIDR, "-d", CLUSTER_CIDR, "-m", "comment", "--comment",
     "warden VM nodes: pod to pod, no NAT", "-j", "RETURN"),
)  # fmt: skip


def rule_present(rule: Sequence[str]) -> bool:
    table, chain, *spec = rule
    return run(["iptables", "-w", "-t", table, "-C", chain, *spec], check=False).returncode == 0


def add_rule(rule: Sequence[str]) -> None:
    table, chain, *spec = rule
    run(["iptables", "-w", "-t", table, "-I", chain, "1", *spec])


def start_mirror(node_dir: Path, storage: Path, address: str) -> int:
    """The read-only registry on the bridge; its pid (``vmnode.undo_item`` stops it)."""
    cfg = node_dir / "mirror.yml"
    cfg.write_text(mirror_config(storage, address))
    logf = (node_dir / "mirror.log").open("ab")
    proc = subprocess.Popen(["/usr/bin/docker-registry", "serve", str(cfg)], stdin=subprocess.DEVNULL,
                            stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    logf.close()
    return proc.pid


def mirror_answers(address: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://{address}/v2/", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


#: the NFS export every VM node reaches (nfs-ganesha, NFS v4.1+ only, on the bridge's address): where
#: ReadWriteMany volumes come from, a jail shared by nodes among them (``nfs_volume``)
NFS_PORT = 2049
NFS_PSEUDO = localvolumes.NFS_PSEUDO


def nfs_dir() -> Path:
    return vmnode.vm_dir() / "nfs"


def ganesha_config(export: Path, address: str) -> str:
    """nfs-ganesha: NFSv4 only (no rpcbind, no lock manager), no grace period at start, one export of
    ``export`` read-write with root kept root (the jail's files are root's), AUTH_SYS (users' uids as sent)."""
    return f"""NFS_CORE_PARAM {{
    Protocols = 4;
    Bind_addr = {address};
    NFS_Port = {NFS_PORT};
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Enable_UDP = false;
}}
NFSV4 {{
    Graceless = true;
    RecoveryBackend = fs;
    Minor_Versions = 1, 2;
}}
NFS_KRB5 {{ Active_krb5 = false; }}
EXPORT {{
    Export_Id = 1;
    Path = {export};
    Pseudo = {NFS_PSEUDO};
    Access_Type = RW;
    Squash = No_Root_Squash;
    SecType = sys;
    Protocols = 4;
    Transports = TCP;
    FSAL {{ Name = VFS; }}
}}
LOG {{ Default_Log_Level = WARN; }}
"""


def nfs_answers(address: str) -> bool:
    import socket

    try:
        with socket.create_connection((address, NFS_PORT), timeout=2):
            return True
    except OSError:
        return False


def keeper_script(argv: Sequence[str], log: Path) -> str:
    """A shell that runs ``argv`` and starts it again a second after it exits (saying so in ``log``), until
    it gets SIGTERM, which it passes on: an NFS server that crashed is back for the clients' retries, as an
    appliance's would be (nfs-ganesha 4.3 segfaulted under the nodes tier after a node died and came back,
    and every process reading the jail over NFS then hung in the kernel)."""
    return (f'trap \'kill -TERM "$child" 2>/dev/null; exit 0\' TERM\n'
            f'while :; do {shlex.join(argv)} & child=$!; wait "$child"; rc=$?\n'
            f'  echo "warden: {argv[0]} exited ($rc); starting it again" >> {shlex.quote(str(log))}; sleep 1\n'
            'done\n')  # fmt: skip


def start_nfs(node_dir: Path, address: str) -> int:
    """nfs-ganesha serving ``nfs_dir()/export`` on ``address``, kept running (``keeper_script``); the
    keeper's pid (its command line names ganesha.nfsd: ``vmnode.undo_item`` stops it and so the server)."""
    if shutil.which("ganesha.nfsd") is None:
        raise VmNodeError("ganesha.nfsd is missing: apt-get install nfs-ganesha nfs-ganesha-vfs")
    (nfs_dir() / "export").mkdir(parents=True, exist_ok=True)
    cfg = node_dir / "ganesha.conf"
    cfg.write_text(ganesha_config(nfs_dir() / "export", address))
    log = node_dir / "ganesha.log"
    argv = ["ganesha.nfsd", "-F", "-f", str(cfg), "-L", str(log), "-p", str(node_dir / "ganesha.pid"), "-N", "NIV_WARN"]
    proc = subprocess.Popen(["bash", "-c", keeper_script(argv, log)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    return proc.pid


def host_side(state: NodeState, layout: NodeLayout, storage: Path) -> None:
    """What the host adds for a joined node, each recorded before it is made: the mirror, the NFS export and
    the firewall rules (once for all nodes), the route to the node's pod subnet."""
    made = state.data.setdefault("made", [])

    def record(item: dict[str, Any]) -> None:
        made.append(item)
        state.save()

    address = mirror_address()
    if not mirror_answers(address):
        record({"kind": "mirror", "name": address, "pid": 0})
        made[-1]["pid"] = start_mirror(state.path.parent, storage, address)
        state.save()
        wait_for(f"the registry mirror on {address}", lambda: mirror_answers(address), 30)
    gateway = address.split(":")[0]
    if not nfs_answers(gateway):
        record({"kind": "nfs", "name": f"{gateway}:{NFS_PORT}", "pid": 0})
        made[-1]["pid"] = start_nfs(state.path.parent, gateway)
        state.save()
        wait_for(f"nfs-ganesha on {gateway}:{NFS_PORT}", lambda: nfs_answers(gateway), 30)
    for rule in HOST_RULES:
        if not rule_present(rule):
            record({"kind": "iptables", "name": " ".join(rule), "rule": list(rule)})
            add_rule(rule)
    route = pod_subnet(layout.index)
    record({"kind": "route", "name": route})
    run(["ip", "route", "replace", route, "via", node_ip(layout), "dev", BRIDGE])


def local_cluster_api(state_file: Path) -> tuple[str, Path, Pki]:
    """The local cluster's API server as the VM reaches it (the host node's address, the port it serves),
    its binaries and its PKI."""
    if not state_file.is_file():
        raise VmNodeError("the local cluster is not up: make up (or python -m warden_dev cluster) first")
    saved = json.loads(state_file.read_text())
    port = saved["server"].rsplit(":", 1)[1]
    server = f"https://{saved['node_ip']}:{port}"
    return server, Path(saved["bin_dir"]), Pki(state_file.parent / "controlplane" / "pki")


def wait_node_ready(kubectl: Sequence[str], name: str, timeout: float) -> dict[str, Any]:
    """The Node object once Ready."""
    found: dict[str, Any] = {}

    def ready() -> bool:
        proc = subprocess.run([*kubectl, "get", "node", name, "-o", "json"], capture_output=True, text=True)
        if proc.returncode != 0:
            return False
        node = json.loads(proc.stdout)
        conds = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
        if conds.get("Ready") == "True":
            found.update(node)
            return True
        return False

    wait_for(f"node {name} Ready", ready, timeout, interval=2)
    return found


def localcluster_state() -> Path:
    return state_dir() / "state.json"


def kubectl_argv() -> list[str]:
    _, bins, _ = local_cluster_api(localcluster_state())
    saved = json.loads(localcluster_state().read_text())
    return [str(bins / "kubectl"), f"--kubeconfig={saved['kubeconfig']}"]


def join(index: int, cpus: int = 1, memory_mib: int = 3072, timeout: float = 900, gpus: int = 0,
         images: Sequence[str] = (), comes_back: bool = False) -> dict[str, Any]:  # fmt: skip
    """Boot VM node ``index`` as a node of the running local cluster (with ``gpus`` stand-in GPUs, and
    ``images`` of the local registry already in its containerd: ``vmimages``) and wait until it is Ready;
    what it reported at boot, its Node's facts and the times. ``comes_back``: the machine of a node that
    died returns under its Node object, as a rebooted machine does (its kubelet registers again; the taints
    an admin set stay for the admin to remove)."""
    server, bins, pki = local_cluster_api(localcluster_state())
    layout = node_layout(index)
    t0 = time.monotonic()

    def prepare(state: NodeState, layout: NodeLayout, ndir: Path) -> list[Share]:
        share = write_share(layout, ndir, pki, server, bins, gpus=gpus)
        host_side(state, layout, registry_dir())
        return [Share(SHARE_TAG, share), Share(LOGS_TAG, ndir / "logs", readonly=False)]

    # a Node object left from an earlier boot of this name (a node that died and never left) goes first: its
    # taints (the out-of-service one an admin set when it died) would keep pods off the new machine. Not a
    # running node's: boot refuses that one, and its kubelet would not register again
    if not comes_back and not NodeState(layout).running():
        subprocess.run([*kubectl_argv(), "delete", "node", layout.name, "--ignore-not-found", "--wait=false"],
                       capture_output=True, timeout=60)  # fmt: skip
    disks = [vmimages.ensure_disk(images)] if images else []
    result = vmnode.boot(index, cpus=cpus, memory_mib=memory_mib, timeout=timeout, prepare=prepare, disks=disks)
    ready = result["reports"].get("ready", {})
    if ready.get("joined") != "yes":
        raise VmNodeError(f"{layout.name}: node-start failed; see {vmnode.node_dir(layout) / 'logs'}")
    try:
        node = wait_node_ready(kubectl_argv(), layout.name, max(60.0, timeout - (time.monotonic() - t0)))
    except Exception as e:
        # the node's logs go with its directory when the caller takes it down: what they say goes in the error
        raise VmNodeError(f"{layout.name} never became Ready ({e})\n{node_conditions(layout.name)}\n"
                          f"{logs_tail(vmnode.node_dir(layout) / 'logs')}") from e  # fmt: skip
    info = node.get("status", {}).get("nodeInfo", {})
    result["node"] = {"name": layout.name, "kernel": info.get("kernelVersion"), "os": info.get("osImage"),
                      "runtime": info.get("containerRuntimeVersion"), "kubelet": info.get("kubeletVersion"),
                      "pod_subnet": pod_subnet(index)}  # fmt: skip
    result["ready_seconds"] = round(time.monotonic() - t0, 1)
    log(f"{layout.name}: Ready after {result['ready_seconds']}s ({info.get('kernelVersion')})")
    return result


#: the node's logs an error quotes, with how many of their last lines
NOT_READY_LOGS = (("kubelet.log", 40), ("containerd.log", 15), ("node-start.log", 15), ("kube-proxy.log", 5))


def logs_tail(logs: Path, wanted: Sequence[tuple[str, int]] = NOT_READY_LOGS) -> str:
    """The last lines of a VM node's logs (the directory its guest writes them to), each under its name."""
    parts = []
    for name, lines in wanted:
        path = logs / name
        text = path.read_text(errors="replace").splitlines()[-lines:] if path.is_file() else ["(no such log)"]
        parts.append(f"--- {name} (last {lines} lines):\n" + "\n".join(text))
    return "\n".join(parts)


def node_conditions(name: str) -> str:
    """What the Node object of ``name`` says of itself: its conditions, or why there is none to read."""
    proc = subprocess.run([*kubectl_argv(), "get", "node", name, "-o", "json"], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    if proc.returncode != 0:
        return f"--- node {name}: {proc.stderr.strip() or 'not readable'}"
    conds = json.loads(proc.stdout).get("status", {}).get("conditions", [])
    said = [f"{c.get('type')}={c.get('status')} {c.get('reason', '')}: {c.get('message', '')}" for c in conds]
    return f"--- node {name} conditions:\n" + "\n".join(said)


def leave(index: int) -> None:
    """Remove VM node ``index`` from the cluster (its Node object) and stop it (``vmnode.down``)."""
    layout = node_layout(index)
    if localcluster_state().is_file():
        subprocess.run([*kubectl_argv(), "delete", "node", layout.name, "--ignore-not-found", "--wait=false"],
                       capture_output=True, timeout=60)  # fmt: skip
    vmnode.down(index)


__all__ = ["VM_NODE_KEY", "VM_TAINT", "cni_conflist", "containerd_config", "join", "kubelet_config", "leave",
           "node_layout", "pod_subnet", "write_share"]  # fmt: skip


def joined(index: int) -> bool:
    """VM node ``index`` runs (its qemu is alive) and its Node is Ready."""
    layout = node_layout(index)
    if not NodeState(layout).running() or not localcluster_state().is_file():
        return False
    proc = subprocess.run([*kubectl_argv(), "get", "node", layout.name, "-o", "json"], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    if proc.returncode != 0:
        return False
    conds = {c["type"]: c["status"] for c in json.loads(proc.stdout).get("status", {}).get("conditions", [])}
    return conds.get("Ready") == "True"


def join_all(indexes: Sequence[int], cpus: int | Mapping[int, int] = 1, memory_mib: int = 3072, gpus: int = 0,
             images: Sequence[str] = (), comes_back: bool = False) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Join VM nodes ``indexes`` side by side (those already joined are left as they are): each boots once
    the one before runs its qemu, so the first makes what they share (the bridge, the mirror, the NFS
    server) alone. ``cpus``: for every node, or by index; ``images``: already in each node's containerd;
    ``comes_back``: as ``join``'s. What each join returned, by node name ({"reused": True} for one already
    joined)."""
    from concurrent.futures import Future, ThreadPoolExecutor

    out: dict[str, dict[str, Any]] = {}
    futures: dict[str, Future[dict[str, Any]]] = {}
    # leftovers of nodes that did not leave (a machine restarted under kept nodes) are cleared one by one
    # first: a leftover's state names the shared bridge, and clearing it while a sibling boots took the
    # sibling's tap off the bridge (its VM booted without a network), and its stale pid started the next boot
    for index in indexes:
        if vmnode.state_file(node_layout(index)).is_file() and not joined(index):
            vmnode.down(index)
    if images and not all(joined(i) for i in indexes):
        vmimages.ensure_disk(images)  # once, before the nodes that share it boot
    with ThreadPoolExecutor(max(1, len(indexes))) as pool:
        for index in indexes:
            layout = node_layout(index)
            if joined(index):
                out[layout.name] = {"reused": True}
                continue
            t0 = time.monotonic()
            n = cpus if isinstance(cpus, int) else cpus[index]
            futures[layout.name] = pool.submit(join, index, cpus=n, memory_mib=memory_mib, gpus=gpus, images=images,
                                               comes_back=comes_back)  # fmt: skip
            state = vmnode.state_file(layout)
            while not futures[layout.name].done() and '"pid"' not in (state.read_text() if state.is_file() else ""):
                time.sleep(1)
            log(f"{layout.name}: booting ({time.monotonic() - t0:.0f}s); the next one starts")
        for name, future in futures.items():
            out[name] = future.result()
    return out


def node_indexes() -> list[int]:
    """The VM nodes that have a state here (running or left over)."""
    found = []
    for state in (vmnode.vm_dir() / "nodes").glob(f"warden-vm-*/{vmnode.state_file(node_layout(1)).name}"):
        suffix = state.parent.name.removeprefix("warden-vm-")
        if suffix.isdigit():
            found.append(int(suffix))
    return sorted(found)
