"""The nodes tier: Warden on the nodes platform teams run, with one jail shared by two of them.

Two VM nodes (``warden_dev.vmjoin``: Debian's own kernel under qemu, cgroup v2 only, AppArmor on as Debian
ships it, NFS client) join the local cluster beside its host node. A SlurmCluster's Slurm pods run on
them, its jail a ReadWriteMany volume served over NFS from the host (nfs-ganesha): the controller (it
mounts the jail too, and the host node has no NFS client), the login node and worker a on the first,
worker b (with two stand-in GPUs) and the populate Job on the second. Two, not three: on this 2-core
machine under TCG each VM node's own agents (kubelet, containerd) took most of an emulated CPU, idle, and
with three nodes every pod's setup and exec probe starved (readiness checks timing out, the login out of its
Service, SSH refused); docs/nodes.md has the figures. The operator stays on the host node. Users do what
they do: log in, write files, run steps across both nodes, ask for memory, cores and GPUs; then a node is
powered off under a running job, and its machine comes back.

The tests share one installation and run in file order. What ran where (node, kernel, cgroup version,
AppArmor mode) is printed at the start.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import mpi
from tests.support.eventually import eventually
from warden_dev import vmimages, vmjoin, vmnode
from warden_dev.localcluster import (
    Kube,
    install_charts,
    new_ssh_key,
    project_version,
    uninstall_charts,
    wait_slurmcluster_ready,
)
from warden_dev.localvolumes import NFS_STORAGE_CLASS as NFS

WORKER_A, WORKER_B = "vmn-worker-a-0", "vmn-worker-b-0"
#: VMs under TCG on a shared machine: the installation alone can take most of the e2e tier's 600 s per test
pytestmark = pytest.mark.timeout(2400)

NAME = "vmn"
#: WARDEN_NODES_KEEP=1: the VM nodes and the installation stay after the run, and the next run uses them
#: (the quick loop while writing a test here)
KEEP = os.environ.get("WARDEN_NODES_KEEP") == "1"
KEEP_LABEL = "warden.dev/nodes-tier"
#: the user the cases run as (made on the login node; a kept installation gets a new one each run)
USER = f"ada{uuid.uuid4().hex[:4]}" if KEEP else "ada"
#: the VM nodes: the login and worker a (2 CPUs: the cores test pins one of two); worker b, which dies in the
#: node-death test; a slurmctld on each (the chart spreads the two)
NODE_A, NODE_B = 1, 2
NODES = (NODE_A, NODE_B)
CONTROLLERS = (f"{NAME}-controller-0", f"{NAME}-controller-1")
#: controller.takeoverSeconds (Slurm's SlurmctldTimeout): a backup waits this long for one that stopped answering
TAKEOVER_S = 30
IN_CHARGE = "slurm.warden.dev/SlurmctldInCharge"
#: two emulated CPUs each: the host's scheduler shares its cores by thread, and a one-CPU VM node got a
#: quarter of a core beside two-CPU ones (worker b took minutes to start where the others took one)
VM_CPUS = {NODE_A: 2, NODE_B: 2}
#: node 1 holds a slurmctld, the login and worker a (its limit 1 GiB); both slurmctlds once node 2 died
VM_MEMORY_MIB = 3584
TOLERATE = [{"key": vmjoin.VM_NODE_KEY, "operator": "Exists", "effect": "NoSchedule"}]
WORKER_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}
#: worker b gets one CPU of its node's two: its Slurm node says so (CPUs= comes from the limit)
WORKER_B_RESOURCES = {**WORKER_RESOURCES, "limits": {"cpu": "1", "memory": "1Gi"}}
#: stand-in GPUs each VM node advertises (vmjoin: hack/fakegpu's device plugin in the VM; no GPU exists here);
#: worker group b asks for both
GPUS = 2


def on(index: int) -> dict[str, Any]:
    """Placement onto VM node ``index``."""
    return {"nodeSelector": {"kubernetes.io/hostname": vmnode.node_layout(index).name}, "tolerations": TOLERATE}


@dataclass
class VmCluster:
    kube: Kube
    namespace: str
    key: Path
    tmp: Path
    nodes: dict[str, dict[str, Any]]

    def login_address(self) -> tuple[str, int]:
        svc = self.kube.json("-n", self.namespace, "get", "service", f"{NAME}-login")
        port = next(p["nodePort"] for p in svc["spec"]["ports"] if p["name"] == "ssh")
        return "10.239.0.1", int(port)  # the host node's address: kube-proxy there forwards to the VM node

    def ssh_argv(self, command: str, key: Path | None = None, user: str = "root") -> list[str]:
        """ssh to the login node as ``user``. One connection per user, kept open and shared by the commands
        (ControlMaster): under TCG a login's key exchange and session setup take 20-70 s."""
        ip, port = self.login_address()
        return ["ssh", "-i", str(key or self.key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                "-o", "ConnectTimeout=120", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", "LogLevel=ERROR", "-o", "ControlMaster=auto", "-o", f"ControlPath={self.tmp}/ssh-%r@%h:%p",
                "-o", "ControlPersist=600", "-p", str(port), f"{user}@{ip}", command]  # fmt: skip

    def ssh(self, command: str, timeout: float = 300, key: Path | None = None,
            user: str = "root") -> subprocess.CompletedProcess[str]:  # fmt: skip
        """``command`` as ``user`` on the login node."""
        return subprocess.run(self.ssh_argv(command, key, user), capture_output=True, text=True, timeout=timeout)

    def send(self, user: str, key: Path, local: Path, remote: str, timeout: float = 600) -> None:
        """Copy the file ``local`` to ``remote`` (a path in the jail, as ``user``) over SSH, as a user's scp."""
        with local.open("rb") as f:
            done = subprocess.run(self.ssh_argv(f"cat > {shlex.quote(remote)}", key, user), stdin=f,
                                  capture_output=True, timeout=timeout)  # fmt: skip
        assert done.returncode == 0, done.stderr.decode(errors="replace")

    def as_user(self, user: str, key: Path, command: str, timeout: float = 300) -> str:
        out = self.ssh(command, key=key, user=user, timeout=timeout)
        assert out.returncode == 0, f"{command!r} as {user}: {out.stdout}{out.stderr}"
        return out.stdout

    def make_user(self, name: str) -> Path:
        key = new_ssh_key(self.tmp / f"id_{name}", name)
        out = self.ssh(f"warden-useradd --key '{key.with_suffix('.pub').read_text().strip()}' {name}")
        assert out.returncode == 0, out.stderr
        return key

    def pod_node(self, pod: str) -> str:
        return str(self.kube.json("-n", self.namespace, "get", "pod", pod)["spec"].get("nodeName", ""))


def node_facts(kube: Kube, name: str) -> dict[str, str]:
    """What a node runs, read on the node itself (a pod there): kernel, cgroup filesystem, AppArmor."""
    node = kube.json("get", "node", name)
    info = node["status"]["nodeInfo"]
    return {"node": name, "kernel": info["kernelVersion"], "os": info["osImage"],
            "runtime": info["containerRuntimeVersion"]}  # fmt: skip


@pytest.fixture(scope="module")
def vm_nodes(kube: Kube) -> Iterator[dict[str, dict[str, Any]]]:
    """The VM nodes joined side by side (booted here unless already joined), left again at the end."""
    started = [i for i in NODES if not vmjoin.joined(i)]
    try:
        yield vmjoin.join_all(NODES, cpus=VM_CPUS, memory_mib=VM_MEMORY_MIB, gpus=GPUS,
                              images=vmimages.slurm_images())  # fmt: skip
    finally:
        for index in reversed(started) if not KEEP else ():
            vmjoin.leave(index)


@pytest.fixture(scope="module")
def cluster(kube: Kube, vm_nodes: dict[str, dict[str, Any]],
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[VmCluster]:  # fmt: skip
    tmp = tmp_path_factory.mktemp("nodes")
    kept = kube.kubectl("get", "namespace", "-l", KEEP_LABEL, "--field-selector=status.phase=Active", "-o", "name",
                        check=False).split()  # fmt: skip
    if KEEP and kept:
        namespace = kept[0].removeprefix("namespace/")
        key = vmnode.vm_dir() / "nodes-tier-key"
        wait_slurmcluster_ready(kube, namespace, NAME, timeout=1500)
        kept_cluster = VmCluster(kube, namespace, key, tmp, vm_nodes)
        # an earlier run's jobs (a requeued 2-node job runs again once its node is back) would hold the nodes
        kept_cluster.ssh("squeue -h -o %i | xargs -r scancel")
        yield kept_cluster
        return
    key = new_ssh_key(tmp / "id_ed25519", "warden-nodes")
    if KEEP:
        for old in vmnode.vm_dir().glob("nodes-tier-key*"):
            old.unlink()
        key = new_ssh_key(vmnode.vm_dir() / "nodes-tier-key", "warden-nodes")
    suffix = uuid.uuid4().hex[:6]
    namespace = f"warden-nodes-{suffix}"
    operator = f"op-{suffix}"
    values: dict[str, Any] = {
        "nameOverride": NAME,
        # the jail on NFS (every VM node mounts it; the host node has no NFS client)
        "jail": {"existingClaim": "jail", "populate": on(NODE_B)},
        # a primary and a backup slurmctld, on either VM node (the chart spreads them), sharing their state on
        # NFS (ReadWriteMany); a TCG guest's NFS round trips are slow, so a backup waits 30 s, not 15, before
        # it takes over from one that stopped answering
        "controller": {"replicas": 2, "takeoverSeconds": TAKEOVER_S, "stateVolume": {"storageClassName": NFS},
                       "nodeSelector": {vmjoin.VM_NODE_KEY: "true"}, "tolerations": TOLERATE},
        "login": {"sshAuthorizedKeys": [key.with_suffix(".pub").read_text().strip()],
                  "service": {"type": "NodePort"}, **on(NODE_A)},
        "accounting": {"mode": "Disabled"},
        # a VM node kept between runs (WARDEN_NODES_KEEP) holds the images of the last one under the same tags
        "images": {"pullPolicy": "Always"},
        # Warden's AppArmor profiles (the VM nodes load them as an admin would: vmjoin.NODE_START)
        "security": {"appArmorProfile": "Warden"},
        # a powered-off node is DOWN after 30 s, not Slurm's default 300 (the node-death test waits for it)
        "slurmConfig": {"extraLines": ["SlurmdTimeout=30"]},
        "workerGroups": [{"name": "a", "replicas": 1, "resources": WORKER_RESOURCES, **on(NODE_A)},
                         {"name": "b", "replicas": 1, "resources": WORKER_B_RESOURCES, **on(NODE_B),
                          "gpus": {"count": GPUS, "type": "fake"}}],
    }  # fmt: skip
    t0 = time.monotonic()
    kube.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}])
    try:
        prefill_jail(kube, namespace)
        # worker b's VM node (one emulated CPU) took over 5 minutes from its slurmd container's start to
        # registering, with every pod starting at once: the default 300 s made it afresh, again and again
        install_charts(kube, namespace, namespace, values, tmp / "values.json", operator_release=operator,
                       crds="chart", operator_set={"slurmSync.registerTimeoutSeconds": "1200"})  # fmt: skip
        if KEEP:  # after install_charts, whose apply of the namespace owns its labels
            kube.kubectl("label", "namespace", namespace, f"{KEEP_LABEL}=true", "--overwrite")
        wait_slurmcluster_ready(kube, namespace, NAME, timeout=1500)
        print(f"\nSlurmCluster {namespace}/{NAME} on VM nodes Ready {time.monotonic() - t0:.0f}s after helm install")
        yield VmCluster(kube, namespace, key, tmp, vm_nodes)
    finally:
        if not KEEP:
            uninstall_charts(kube, namespace, NAME, operator, "slurm-operator-crds")
            kube.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def prefill_jail(kube: Kube, namespace: str) -> None:
    """The jail's claim (``warden-nfs``, ReadWriteMany), filled before the cluster is made by the populate
    image itself run on the host (Docker) into the volume's directory, as an admin prepares a jail.

    Why not the cluster's own populate Job: on a TCG VM node it copies the 11,000 files of the jail over
    NFS at about 10 files a second (measured: each file is several NFS round trips, each costing the
    emulated guest's network and RPC stack), some 15 minutes; the tier would not fit CI. The Job still runs
    on worker b's VM node, mounts the NFS jail and finds it populated (its sentinel)."""
    kube.apply([{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                 "metadata": {"name": "jail", "namespace": namespace},
                 "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": NFS,
                          "resources": {"requests": {"storage": "4Gi"}}}}])  # fmt: skip
    volume = eventually("the jail's claim bound", lambda: kube.kubectl(
        "-n", namespace, "get", "pvc", "jail", "-o", "jsonpath={.spec.volumeName}", check=False).strip(), bool,
        timeout=60)  # fmt: skip
    path = kube.json("get", "pv", volume)["metadata"]["annotations"]["warden.dev/host-path"]
    image = f"warden/populate-jail:{project_version()}"
    out = subprocess.run(["docker", "run", "--rm", "-v", f"{path}:/mnt/jail", image], capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]


def test_what_ran_where(cluster: VmCluster) -> None:
    """The list of nodes this tier ran on, read on each node (a Slurm pod there, and this machine for the
    host node): kernel, cgroup version, AppArmor mode and the profile confining that pod, and which of the
    cluster's pods ran there."""
    probe = ("stat -fc %T /sys/fs/cgroup; cat /sys/module/apparmor/parameters/enabled 2>/dev/null || echo N; "
             "cat /proc/1/attr/current 2>/dev/null || echo none")  # fmt: skip
    pods = cluster.kube.json("-n", cluster.namespace, "get", "pods")["items"]

    def on_node(node: str) -> list[str]:
        return sorted(p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") == node)

    rows = []
    for pod, container in ((CONTROLLERS[0], "slurmctld"), (CONTROLLERS[1], "slurmctld"),
                           (f"{NAME}-login-0", "sshd"), (WORKER_A, "slurmd"), (WORKER_B, "slurmd")):  # fmt: skip
        name = cluster.pod_node(pod)
        out = cluster.kube.kubectl("-n", cluster.namespace, "exec", pod, "-c", container, "--", "sh", "-c", probe)
        fs, apparmor, label = [*out.splitlines(), "", "", ""][:3]
        rows.append({**node_facts(cluster.kube, name), "cgroup": "v2" if fs == "cgroup2fs" else "v1",
                     "apparmor": "on" if apparmor == "Y" else "off", "read_in": f"{pod}/{container}",
                     f"{container}_confined_by": label, "pods": on_node(name)})  # fmt: skip
    host_fs = subprocess.run(["stat", "-fc", "%T", "/sys/fs/cgroup"], capture_output=True, text=True).stdout.strip()
    rows.append({"node": "warden-node (this machine)", "kernel": os.uname().release,
                 "cgroup": "v2" if host_fs == "cgroup2fs" else "v1 (hybrid)",
                 "apparmor": "on" if Path("/sys/module/apparmor").exists() else "off",
                 "pods": on_node("warden-node")})  # fmt: skip
    print("\nwhat ran where: " + json.dumps({"nodes": rows, "joins": cluster.nodes}, indent=1, default=str))
    for pod, index in ((f"{NAME}-login-0", NODE_A), (WORKER_A, NODE_A), (WORKER_B, NODE_B)):
        assert cluster.pod_node(pod) == vmnode.node_layout(index).name, pod
    # the backup on another node than the primary (the chart's anti-affinity), both on VM nodes
    assert sorted(cluster.pod_node(p) for p in CONTROLLERS) == sorted(vmnode.node_layout(i).name for i in NODES)
    login, *workers = rows[2:5]
    assert all(r["cgroup"] == "v2" and r["apparmor"] == "on" for r in rows[:5]), rows
    assert str(login["sshd_confined_by"]).startswith("warden-login"), login
    assert all(str(r["slurmd_confined_by"]).startswith("warden-worker") for r in workers), workers


@pytest.fixture(scope="module")
def ada(cluster: VmCluster) -> Path:
    """A user made on the login node (first VM node)."""
    return cluster.make_user(USER)


def test_one_jail_two_nodes_a_users_file_and_a_job_across_both(cluster: VmCluster, ada: Path) -> None:
    """The jail is one NFS volume: what a user writes on the login node (VM node 1) is there, with its
    owner and mode, for her step on worker b (VM node 2); a 2-node step runs on both workers at once."""
    assert cluster.pod_node(WORKER_A) == vmnode.node_layout(NODE_A).name
    assert cluster.pod_node(WORKER_B) == vmnode.node_layout(NODE_B).name
    cluster.as_user(USER, ada, "umask 027; echo written-on-login > ~/note; mkdir -p ~/d && chmod 700 ~/d")
    out = cluster.as_user(USER, ada, f"srun -N1 -w {WORKER_B} stat -c '%U %G %a %n' ~/note ~/d; "
                                      f"srun -N1 -w {WORKER_B} cat ~/note")  # fmt: skip
    assert f"{USER} {USER} 640" in out and f"{USER} {USER} 700" in out and "written-on-login" in out, out
    # and back: written by the step on node 2, read on the login node
    cluster.as_user(USER, ada, f"srun -N1 -w {WORKER_B} sh -c 'hostname > ~/from-b'")
    assert cluster.as_user(USER, ada, "cat ~/from-b").strip() == WORKER_B
    both = cluster.as_user(USER, ada, "srun -N2 -l hostname")
    assert sorted(line.split(":", 1)[1].strip() for line in both.splitlines()) == [WORKER_A, WORKER_B], both


def test_an_mpi_program_runs_a_rank_on_each_node_over_the_pod_network(cluster: VmCluster, ada: Path) -> None:
    """A user's MPI program across the two VM nodes: she installs mpi4py and MPICH into a venv in her home
    on the shared jail (the wheels PyPI serves, copied into her home by the test as by her scp: the VM nodes'
    pods do not reach PyPI), and `srun --mpi=pmi2` starts one rank on each node (Slurm's PMI wires them up);
    an allreduce between them goes over the pod network, routed between the nodes."""
    cluster.as_user(USER, ada, "mkdir -p ~/wheels")
    for wheel in mpi.wheels():
        cluster.send(USER, ada, wheel, f"/home/{USER}/wheels/{wheel.name}")
    cluster.as_user(USER, ada, f"cat > ~/allreduce.py <<'EOF'\n{mpi.ALLREDUCE}EOF\n{mpi.INSTALL}", timeout=1500)
    out = cluster.as_user(USER, ada, f"{mpi.ENV} srun -N2 --ntasks-per-node=1 --mpi=pmi2 ~/mpi/bin/python "
                                     "~/allreduce.py", timeout=900)  # fmt: skip
    print(f"\nmpi across nodes: {mpi.ranks(out)}")
    assert mpi.ranks(out) in ([("rank 0 of 2", WORKER_A, "3"), ("rank 1 of 2", WORKER_B, "3")],
                              [("rank 0 of 2", WORKER_B, "3"), ("rank 1 of 2", WORKER_A, "3")]), out  # fmt: skip


def test_cgroup_v2_a_step_past_its_memory_is_killed_alone_and_cores_are_pinned(cluster: VmCluster, ada: Path) -> None:
    """On a cgroup v2 node (slurmd's cgroup/v2 plugin in the worker pod): a step that goes past --mem is
    killed by the kernel's OOM killer while the job's other step finishes; a step given one core of two
    runs on that core only."""
    script = f"""#!/bin/bash
#SBATCH -N1 -w {WORKER_A} --mem=400M -o /home/{USER}/oom.out
srun --overlap --mem=100M bash -c 'sleep 15; echo survivor-finished' &
sleep 2
srun --overlap --mem=100M python3 -c 'x = bytearray(600 * 2**20); print("hog-survived")'
echo "hog-exit=$?"
wait
"""
    cluster.as_user(USER, ada, f"cat > ~/oom.sh <<'EOF'\n{script}EOF\nsbatch --parsable ~/oom.sh")
    out = eventually("the job's output, both steps ended",
                     lambda: cluster.as_user(USER, ada, "cat ~/oom.out 2>/dev/null; true"),
                     lambda o: "survivor-finished" in o and "hog-exit=" in o, timeout=240)  # fmt: skip
    assert "hog-survived" not in out and "hog-exit=0" not in out, out
    assert "oom" in out.lower(), out  # slurmstepd: "Detected 1 oom_kill event in StepId=..."
    one = cluster.as_user(USER, ada, f"srun -N1 -w {WORKER_A} -c1 grep Cpus_allowed_list /proc/self/status")
    two = cluster.as_user(USER, ada, f"srun -N1 -w {WORKER_A} -c2 grep Cpus_allowed_list /proc/self/status")
    assert _cpus(two) in ("0-1", "0,1"), two
    assert _cpus(one) in ("0", "1"), one
    where = cluster.as_user(USER, ada, f"srun -N1 -w {WORKER_A} cat /proc/self/cgroup")
    assert where.startswith("0::/") and "step_" in where, where  # one cgroup v2 hierarchy, a step's own cgroup


def test_cgroup_v2_a_gpu_step_opens_only_the_gpu_it_was_given(cluster: VmCluster, ada: Path) -> None:
    """Worker b holds the VM node's two stand-in GPUs (character devices (195, N) that no driver owns: opening
    one fails with ENXIO where the cgroup allows it, EPERM where it does not; no GPU exists here). On cgroup
    v2 there is no devices controller: slurmd's cgroup/v2 plugin attaches a BPF device program to each step's
    cgroup. A step given one GPU opens that one and is refused the other; a step given none is refused both."""
    probe = shlex.quote(
        "echo CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-}; for d in /dev/nvidia[0-9]*; do "
        'if msg=$( (exec 3<"$d") 2>&1 ); then echo "$d=open"; else echo "$d=${msg##*: }"; fi; done'
    )
    one = cluster.as_user(USER, ada, f"srun -N1 -w {WORKER_B} --gpus=1 sh -c {probe}").strip().splitlines()
    none = cluster.as_user(USER, ada, f"srun -N1 -w {WORKER_B} sh -c {probe}").strip().splitlines()
    print(f"\ngpu steps on cgroup v2: given one {one}, given none {none}")
    cvd, *opened = one
    assert cvd in ("CUDA_VISIBLE_DEVICES=0", "CUDA_VISIBLE_DEVICES=1"), one
    results = sorted(line.split("=", 1)[1] for line in opened)
    assert results == ["No such device or address", "Operation not permitted"], one
    assert len(none) == 1 + GPUS and all(line.endswith("=Operation not permitted") for line in none[1:]), none


def _cpus(status_line: str) -> str:
    return status_line.split(":")[1].strip()


def test_the_login_node_on_an_apparmor_node_has_a_working_jail(cluster: VmCluster, ada: Path) -> None:
    """The login container runs confined by Warden's AppArmor profile (the node has AppArmor on) and its
    jail's binds hold: a session sees the cluster's Slurm config, its own /proc, and Slurm answers; a
    step on a worker runs under the worker's profile."""
    out = cluster.as_user(USER, ada, "cat /proc/self/attr/current; echo; test -s /etc/slurm/slurm.conf && "
                                      "ps -o user= -p $$ && sinfo -h -o %D")  # fmt: skip
    assert out.startswith("warden-login (enforce)"), out
    assert out.split()[-2:] == [USER, "2"], out
    step = cluster.as_user(USER, ada, f"srun -N1 -w {WORKER_B} cat /proc/self/attr/current")
    assert step.startswith("warden-worker (enforce)"), step


def _slurm_node(cluster: VmCluster, ada: Path, node: str) -> str:
    return cluster.as_user(USER, ada, f"sinfo -h -N -n {node} -o '%T|%E'").strip()


def _fields(line: str) -> dict[str, str]:
    return dict(f.split("=", 1) for f in line.split() if "=" in f)


def _job(cluster: VmCluster, ada: Path, job: str) -> dict[str, str]:
    return _fields(cluster.as_user(USER, ada, f"scontrol show job {job} -o"))


def _job_story(cluster: VmCluster, ada: Path, job: str) -> str:
    """What a person reads when a job did not end as it should: its output and slurmctld's lines about it."""
    out = cluster.ssh(f"cat /home/{USER}/two-{job}.out", key=ada, user=USER).stdout
    story = f"--- the job's output\n{out}"
    for pod in CONTROLLERS:
        log = cluster.kube.kubectl("-n", cluster.namespace, "logs", pod, "-c", "slurmctld", check=False)
        about = [line for line in log.splitlines() if f"JobId={job}" in line or WORKER_B in line]
        story += f"--- {pod}'s slurmctld on job {job} and {WORKER_B}\n" + "\n".join(about[-30:]) + "\n"
    return story


def _in_charge(cluster: VmCluster) -> str:
    """The controller pod the cluster says is in charge: its status, and that pod's own condition."""
    status = cluster.kube.json("-n", cluster.namespace, "get", "slurmcluster", NAME).get("status", {})
    pod = str(status.get("slurmctldInCharge") or "")
    if not pod:
        return ""
    # the pod the status still names may be gone for a moment (deleted, its StatefulSet not yet making it again)
    conditions = (
        cluster.kube.json_if_found("-n", cluster.namespace, "get", "pod", pod).get("status", {}).get("conditions", [])
    )
    return pod if any(c["type"] == IN_CHARGE and c["status"] == "True" for c in conditions) else ""


def _controller_in_charge_on(cluster: VmCluster, node: str) -> str:
    """Make the slurmctld in charge the one on ``node``, as an admin does: delete the pod in charge elsewhere,
    which hands control over (docs/operations.md, "Backup controllers"); it comes back standing by."""
    boss = eventually("a controller in charge", lambda: _in_charge(cluster), bool, timeout=180)
    if cluster.pod_node(boss) == node:
        return boss
    other = CONTROLLERS[1 - CONTROLLERS.index(boss)]
    assert cluster.pod_node(other) == node, {p: cluster.pod_node(p) for p in CONTROLLERS}
    cluster.kube.kubectl("-n", cluster.namespace, "delete", "pod", boss, "--wait=false")
    eventually(f"{other} (on {node}) in charge", lambda: _in_charge(cluster), lambda p: p == other, timeout=300)
    eventually(f"{boss} back, standing by", lambda: _pod_ready(cluster, boss), lambda s: s.endswith("|ready"),
               timeout=600)  # fmt: skip
    return other


def _pod_ready(cluster: VmCluster, pod: str) -> str:
    """``node|phase|ready`` of a pod (``||`` while it does not exist)."""
    got = cluster.kube.kubectl_result("-n", cluster.namespace, "get", "pod", pod, "-o", "json")
    if got.returncode != 0:
        return "||"
    item = json.loads(got.stdout)
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in item["status"].get("conditions", []))
    return f"{item['spec'].get('nodeName', '')}|{item['status'].get('phase')}|{'ready' if ready else 'not ready'}"


def test_a_node_powered_off_under_a_two_node_job_and_the_controller_in_charge(cluster: VmCluster, ada: Path) -> None:
    """VM node 2 is powered off hard while a 2-node job runs on its worker and on node 1's, and while the
    slurmctld in charge lives there. The backup on node 1 takes control once the one in charge has not
    answered for takeoverSeconds; Slurm marks the node DOWN with a reason, the job is requeued (never silently
    lost), users run on the node left. The admin's out-of-service taint (Kubernetes' non-graceful node
    shutdown) frees the pods stuck there: the controller's starts again on node 1 and stands by (two
    controllers again), the worker's is made again by its WorkerSet and waits for its node."""
    layout = vmnode.node_layout(NODE_B)
    lost_controller = _controller_in_charge_on(cluster, layout.name)
    backup = CONTROLLERS[1 - CONTROLLERS.index(lost_controller)]
    job = cluster.as_user(USER, ada, f"sbatch --parsable -N2 --requeue -o /home/{USER}/two-%j.out "
                                      "--wrap 'srun -l sh -c \"echo started; exec sleep 900\"'").strip()  # fmt: skip
    # its step's task started on both nodes (each says so): RUNNING alone comes before the step reaches node 2,
    # and a node lost during the launch fails the step and so the job (exit 140), which is not this case
    eventually(f"job {job}'s step started on both nodes",
               lambda: cluster.as_user(USER, ada, f"cat /home/{USER}/two-{job}.out 2>/dev/null; true"),
               lambda out: {"0: started", "1: started"} <= set(out.splitlines()), timeout=180)  # fmt: skip
    pid = int(vmnode.NodeState(layout).data["pid"])
    t0 = time.monotonic()
    os.kill(pid, 9)  # the power cord: no shutdown, no goodbye to the API server or slurmctld
    timings: dict[str, float] = {}

    eventually(f"the backup {backup} in charge", lambda: _in_charge(cluster), lambda p: p == backup,
               timeout=300)  # fmt: skip
    timings["backup_in_charge_s"] = time.monotonic() - t0
    down = eventually(f"{WORKER_B} DOWN in Slurm with a reason", lambda: _slurm_node(cluster, ada, WORKER_B),
                      lambda s: s.split("|")[0].startswith("down") and s.split("|")[1] not in ("", "none"),
                      timeout=180)  # fmt: skip
    timings["slurm_node_down_s"] = time.monotonic() - t0
    eventually(f"job {job} requeued", lambda: cluster.as_user(USER, ada, f"scontrol show job {job} -o"),
                          lambda j: " Restarts=1 " in j and "JobState=COMPLETED" not in j
                          and "JobState=FAILED" not in j and "JobState=CANCELLED" not in j,
                          timeout=180, explain=lambda: _job_story(cluster, ada, job))  # fmt: skip
    timings["job_requeued_s"] = time.monotonic() - t0
    cluster.as_user(USER, ada, f"srun -N1 -w {WORKER_A} true", timeout=120)
    timings["users_run_again_s"] = time.monotonic() - t0

    # Kubernetes: the node goes NotReady; its pod stays (Terminating/Unknown) until the admin says the node
    # is gone for good (docs/operations.md, "A node dies")
    kube = cluster.kube
    eventually(f"{layout.name} NotReady", lambda: json.dumps(kube.json("get", "node", layout.name)["status"]),
               lambda s: '"type": "Ready", "status": "Unknown"' in s or '"status": "Unknown", "type": "Ready"' in s
               or "NodeStatusUnknown" in s, timeout=180)  # fmt: skip
    timings["k8s_node_not_ready_s"] = time.monotonic() - t0
    old_uid = kube.json("-n", cluster.namespace, "get", "pod", WORKER_B)["metadata"]["uid"]
    kube.kubectl("taint", "node", layout.name, "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute")
    t_taint = time.monotonic()

    def replaced() -> str:
        out = kube.kubectl("-n", cluster.namespace, "get", "pod", WORKER_B, "-o", "jsonpath={.metadata.uid}",
                           check=False)  # fmt: skip
        return out.strip()

    # deleted, then made again by the WorkerSet (a new uid; none for a moment between)
    eventually(f"{WORKER_B}'s pod freed from the dead node and made again", replaced,
               lambda u: u not in ("", old_uid), timeout=180)  # fmt: skip
    timings["pod_freed_after_taint_s"] = time.monotonic() - t_taint
    # the lost controller's pod starts again on the node left (the chart's spread is a preference) and stands by
    eventually(f"{lost_controller} Ready again on {vmnode.node_layout(NODE_A).name}",
               lambda: _pod_ready(cluster, lost_controller),
               lambda s: s == f"{vmnode.node_layout(NODE_A).name}|Running|ready", timeout=900)  # fmt: skip
    timings["controller_back_after_taint_s"] = time.monotonic() - t_taint
    assert _in_charge(cluster) == backup
    ping = cluster.as_user(USER, ada, "scontrol ping")
    assert ping.count("is UP") == 2, ping

    # the freed pod waits for its node (the WorkerSet pins it there), the requeued job for two nodes: the next
    # test brings the node back
    pending = kube.json("-n", cluster.namespace, "get", "pod", WORKER_B)
    assert pending["status"].get("phase") == "Pending", pending["status"]
    # it waits for two nodes; COMPLETING first, while Slurm tidies the job's part on the dead node
    waiting = eventually(f"job {job} pending for two nodes", lambda: cluster.as_user(
        USER, ada, f"scontrol show job {job} -o"), lambda j: "JobState=PENDING" in j, timeout=300)  # fmt: skip
    job_state = {k: v for k, v in _fields(waiting).items() if k in ("JobState", "Reason", "Restarts")}
    DEAD["job"] = job
    facts = {"slurm": down, "job": job_state, "controller_lost": lost_controller, "controller_in_charge": backup}
    print("\nnode death: " + json.dumps({**facts, **{k: round(v, 1) for k, v in timings.items()}}))


#: what the node-death test leaves the next one: the requeued job
DEAD: dict[str, str] = {}


def test_the_dead_node_comes_back_and_the_requeued_job_runs_again(cluster: VmCluster, ada: Path) -> None:
    """The dead node's machine boots again under its Node object (as a rebooted machine's kubelet registers
    again), still carrying the admin's out-of-service taint; the admin removes it (docs/nodes.md, "A node
    dies"): the WorkerSet's waiting pod starts there, Slurm returns the node to service once its slurmd
    registers (ReturnToService=2), the requeued 2-node job runs again on both nodes, users run there."""
    job = DEAD.get("job")
    if job is None:
        pytest.skip("the node-death test did not leave its requeued job")
    kube, layout = cluster.kube, vmnode.node_layout(NODE_B)
    taint = "node.kubernetes.io/out-of-service"
    t0 = time.monotonic()
    timings: dict[str, float] = {}
    vmjoin.join_all([NODE_B], cpus=VM_CPUS, memory_mib=VM_MEMORY_MIB, gpus=GPUS, images=vmimages.slurm_images(),
                    comes_back=True)  # fmt: skip
    timings["k8s_node_ready_s"] = time.monotonic() - t0
    taints = [t["key"] for t in kube.json("get", "node", layout.name)["spec"].get("taints", [])]
    assert taint in taints, f"the admin's taint is the admin's to remove: {taints}"
    kube.kubectl("taint", "node", layout.name, f"{taint}-")

    eventually(f"{WORKER_B}'s pod Ready on {layout.name}", lambda: _pod_ready(cluster, WORKER_B),
               lambda s: s == f"{layout.name}|Running|ready", timeout=1200)  # fmt: skip
    timings["worker_pod_ready_s"] = time.monotonic() - t0
    back = eventually(f"{WORKER_B} back in service in Slurm", lambda: _slurm_node(cluster, ada, WORKER_B),
                      lambda s: not s.split("|")[0].startswith(("down", "drain", "fail")), timeout=600)  # fmt: skip
    timings["slurm_node_back_s"] = time.monotonic() - t0
    # Slurm starts a requeued job again once it may (its BeginTime) and both nodes are free
    running = _fields(eventually(
        f"job {job} running again on both nodes", lambda: cluster.as_user(USER, ada, f"scontrol show job {job} -o"),
        lambda j: "JobState=RUNNING" in j and " NumNodes=2 " in j,  # the cluster's two Slurm nodes
        timeout=600, explain=lambda: _job_story(cluster, ada, job)))  # fmt: skip
    assert running.get("Restarts") == "1", running
    timings["job_running_again_s"] = time.monotonic() - t0
    # the job holds worker b's one CPU: it goes first, then a user's step runs there
    cluster.as_user(USER, ada, f"scancel {job}")
    assert cluster.as_user(USER, ada, f"srun -N1 -w {WORKER_B} hostname", timeout=300).strip() == WORKER_B
    timings["users_run_there_s"] = time.monotonic() - t0
    print("\nnode back: " + json.dumps({"slurm": back, **{k: round(v, 1) for k, v in timings.items()}}))
