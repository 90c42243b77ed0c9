"""A user's path through Warden on a real cluster: the three charts installed with helm, the
SlurmCluster Ready, SSH through the login Service into the jail, a user made in the jail right after
Ready who logs in and runs jobs (nothing restarted), a two-node batch job whose output lands in the
jail, a second SSH key added by `helm upgrade` (the same login pod lets it in), a second user a minute
later and a group added to both (seen in their job steps), SSH that forwards nothing (`-W`, `-L`, `-R`,
`-A`) while a terminal, scp and sftp work, jobs private to their user, a GPU group added by `helm
upgrade` (its workers join with their GPUs; the login pod, not restarted, follows the new slurm.conf), a
`--gpus` job on it, job steps on both GPU nodes at once each loading its own node's (stand-in) driver, no
runtime file a user may write in sessions and job steps, the NCCL health check run from its CronJob
draining the slow GPU node, workers scaled up and down joining and leaving Slurm, the controller pod
deleted with jobs queued (the queue survives and they complete), and `helm uninstall` then `helm
install` keeping a user's home and account (the default), deleting them only when asked.

GPUs: the local cluster has none. Its kubelet gets STAND-IN ``nvidia.com/gpu`` devices from hack/fakegpu
(a device plugin binding /dev/null at /dev/nvidiaN, and giving each GPU container a stand-in driver built
from hack/fakedriver, two versions in turn), and ``all_reduce_perf`` in the jail is the stand-in
tests/support/nccl_standin.py, which prints the bandwidth the test chose for each node. Everything else
(the scheduling of GPU pods, Slurm's gres, the CronJob's Job, drains, status) is real. On a cluster given
by ``KUBECONFIG`` that offers no ``nvidia.com/gpu``, the GPU group is left out and its tests skip.

The tests share one installation (module fixture) and run in file order: each builds on the last.
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import directory, jailmounts, registry
from tests.support.dashboard import dashboard_expressions, load_dashboard, promql_metric_names
from tests.support.eventually import until
from warden import naming
from warden.opmetrics import exposed_names
from warden.slurm import confighash
from warden_dev.localcluster import (
    FAKE_GPU_RESOURCE,
    Kube,
    LocalCluster,
    install_charts,
    new_ssh_key,
    project_version,
    registry_hosts_toml,
    uninstall_charts,
    wait_slurmcluster_ready,
)

NAME = "e2e"
STANDIN = Path(__file__).resolve().parents[1] / "support" / "nccl_standin.py"
STANDIN_DIR = "/var/lib/warden-nccl-standin"  # in the jail: the stand-in's per-node settings
GPU_NODES = 2  # two, so one can be slow while the other stays in service
GPUS_PER_NODE = 2  # the check compares bus bandwidth only on nodes with at least two GPUs
MIN_BUSBW = 100.0
CONDITIONS = ("Ready", "JailPopulated", "ControllerReady", "RestApiReady", "LoginReady", "WorkersReady",
              "AccountingReady", "SlurmNodesRegistered")  # fmt: skip
# A worker pod whose slurmd has not registered this long is recreated (the operator's default is 300 s).
REGISTER_TIMEOUT = 40
INSTANCE = f"app.kubernetes.io/instance={NAME}"
#: the operator chart's values: the bridge runs beside the operator (docs/bridge.md)
OPERATOR_SET = {"slurmSync.registerTimeoutSeconds": str(REGISTER_TIMEOUT), "bridge.enabled": "true"}


@dataclass
class Installed:
    kube: Kube
    namespace: str
    values: dict[str, Any]
    values_file: Path
    key: Path
    status: dict[str, Any]
    gpus: bool
    tmp: Path
    users_made_at: dict[str, float]  # jail user -> time.monotonic() of its creation
    #: the LDAP directory the cluster reads its directory users from (None: a cluster without one)
    site: SiteDirectory | None = None
    #: the login Service's address as last read (``ssh`` reads it again only when SSH could not connect)
    address: tuple[str, int] | None = None

    def make_user(self, name: str) -> Path:
        """`warden-useradd` as root on the login node (chrooted into the jail), with a new SSH key."""
        key = new_ssh_key(self.tmp / f"id_{name}", name)
        out = self.ssh(f"warden-useradd --key '{key.with_suffix('.pub').read_text().strip()}' {name}")
        assert out.returncode == 0, out.stderr
        self.users_made_at[name] = time.monotonic()
        return key

    def restarts(self) -> dict[str, tuple[str, int]]:
        """Every pod of the release: (uid, container restarts)."""
        pods = self.kube.json("-n", self.namespace, "get", "pods", "-l", INSTANCE)["items"]
        return {
            p["metadata"]["name"]: (
                p["metadata"]["uid"],
                sum(c.get("restartCount", 0) for c in p["status"].get("containerStatuses", [])),
            )
            for p in pods
            if p["status"].get("phase") == "Running"
        }

    def login_address(self) -> tuple[str, int]:
        """The login Service from outside: the node's address and the Service's NodePort."""
        svc = self.kube.json("-n", self.namespace, "get", "service", f"{NAME}-login")
        port = next(p["nodePort"] for p in svc["spec"]["ports"] if p["name"] == "ssh")
        node = self.kube.json("get", "nodes")["items"][0]
        ip = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
        return ip, int(port)

    def ssh_options(self, key: Path | None = None, log_level: str = "ERROR") -> list[str]:
        """Options of ssh, scp and sftp (not the port: `-p` for ssh, `-P` for the others)."""
        return ["-i", str(key or self.key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
                "-o", "ConnectTimeout=10", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                "-o", f"LogLevel={log_level}"]  # fmt: skip

    def ssh(
        self, command: str, timeout: float = 60, input: str | None = None, key: Path | None = None, user: str = "root"
    ) -> subprocess.CompletedProcess[str]:
        """Run ``command`` as ``user`` (root's key unless ``key``) over SSH through the login Service
        (NodePort on the node's address). The address is read once (two kubectl runs); when SSH could not
        connect (255) and the address changed (a reinstall gets a new NodePort) it tries once more there."""
        first = self.address is None
        if self.address is None:
            self.address = self.login_address()

        def run(address: tuple[str, int]) -> subprocess.CompletedProcess[str]:
            ip, port = address
            return subprocess.run(
                ["ssh", *self.ssh_options(key), "-p", str(port), f"{user}@{ip}", command],
                capture_output=True, text=True, timeout=timeout, input=input,
            )  # fmt: skip

        done = run(self.address)
        if done.returncode == 255 and not first and (now := self.login_address()) != self.address:
            self.address = now
            done = run(now)
        return done

    def diagnostics(self) -> str:
        """What a person would look at first when a test failed: pods, Slurm's nodes and jobs, recent
        events and the tails of slurmctld's and the operator's logs (each part best effort, bounded)."""
        ns = self.namespace
        parts: list[tuple[str, Callable[[], str]]] = [
            ("pods", lambda: self.kube.kubectl("-n", ns, "get", "pods", "-o", "wide", check=False, timeout=30)),
            ("slurm nodes and jobs", lambda: (lambda r: r.stdout + r.stderr)(self.ssh(
                "sinfo -N -h -o '%N %T %E'; squeue -h -t all -o '%i %u %T %r %N'", timeout=30))),
            ("events", lambda: "\n".join(self.kube.kubectl("-n", ns, "get", "events", "--sort-by=.lastTimestamp",
                                                           check=False, timeout=30).splitlines()[-30:])),
            ("slurmctld", lambda: self.kube.kubectl("-n", ns, "logs", f"{NAME}-controller-0", "--all-containers",
                                                   "--tail=40", check=False, timeout=30)),
            ("operator", lambda: self.kube.kubectl("-n", ns, "logs", "-l", "app.kubernetes.io/name=slurm-operator",
                                                  "--tail=60", check=False, timeout=30)),
        ]  # fmt: skip
        out = []
        for title, read in parts:
            try:
                text = read()
            except Exception as e:  # a diagnostic that fails says why and the others still run
                text = f"({type(e).__name__}: {e})"
            out.append(f"--- {title}\n{text.rstrip()}")
        return "\n".join(out)

    def helm_upgrade(self, install: bool = False) -> None:
        self.values_file.write_text(json.dumps(self.values, indent=2) + "\n")
        self.kube.helm("upgrade", *(["--install"] if install else []), NAME,
                       str(Path("charts/slurm-cluster").resolve()), "-n", self.namespace,
                       "-f", str(self.values_file))  # fmt: skip


@dataclass
class SiteDirectory:
    """The site's LDAP directory: slapd (warden/test-ldap) with TLS as a Deployment and Service ``ldap`` in the
    cluster's namespace, its certificates made fresh; the Secrets a site makes for the SlurmCluster."""

    kube: Kube
    namespace: str
    admin_password: str
    reader_password: str
    ca: str

    @classmethod
    def deploy(cls, kube: Kube, namespace: str) -> SiteDirectory:
        host = f"ldap.{namespace}.svc"
        certs = directory.certificates("ldap", host, f"{host}.cluster.local")
        if not os.environ.get("KUBECONFIG"):
            LocalCluster().import_images([directory.image()])
        site = cls(kube, namespace, uuid.uuid4().hex, uuid.uuid4().hex, certs.ca)
        labels = {"app.kubernetes.io/name": "test-ldap"}
        env = [{"name": "READER_PASSWORD", "value": site.reader_password},
               {"name": "ADMIN_PASSWORD", "value": site.admin_password}]  # fmt: skip
        pod = {"containers": [{"name": "slapd", "image": directory.image(), "imagePullPolicy": "IfNotPresent",
                               "env": env, "volumeMounts": [{"name": "certs", "mountPath": "/certs"}],
                               "readinessProbe": {"tcpSocket": {"port": 636}, "periodSeconds": 1}}],
               "volumes": [{"name": "certs", "secret": {"secretName": "ldap-server"}}]}  # fmt: skip
        kube.apply([
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            site._secret("ldap-server", {"server.crt": certs.server_crt, "server.key": certs.server_key}),
            *[site._secret(name, data) for name, data in site.secrets().items()],
            {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "ldap", "namespace": namespace},
             "spec": {"selector": {"matchLabels": labels},
                      "template": {"metadata": {"labels": labels}, "spec": pod}}},
            site.service(),
        ])  # fmt: skip
        kube.kubectl("-n", namespace, "rollout", "status", "deployment/ldap", "--timeout=120s", timeout=150)
        return site

    def service(self) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "ldap", "namespace": self.namespace},
                "spec": {"selector": {"app.kubernetes.io/name": "test-ldap"},
                         "ports": [{"name": "ldaps", "port": 636}, {"name": "ldap", "port": 389}]}}  # fmt: skip

    def unreachable(self) -> None:
        """The directory cannot be reached (its Service gone: the name resolves no more); its data stays."""
        self.kube.kubectl("-n", self.namespace, "delete", "service", "ldap", "--wait=true")

    def reachable(self) -> None:
        self.kube.apply([self.service()])

    def _secret(self, name: str, data: dict[str, str]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": self.namespace},
                "stringData": data}  # fmt: skip

    def secrets(self) -> dict[str, dict[str, str]]:
        return {
            directory.BIND_SECRET: {naming.IDENTITY_BIND_DN_KEY: directory.READER_DN,
                                    naming.IDENTITY_PASSWORD_KEY: self.reader_password},
            directory.CA_SECRET: {"ca.crt": self.ca},
        }  # fmt: skip

    def values(self) -> dict[str, Any]:
        """The chart's `identity` value."""
        return directory.spec(f"ldaps://ldap.{self.namespace}.svc")

    def set_secret(self, name: str, data: dict[str, str]) -> None:
        """What a site's admin does to a Secret (a rotated password, another CA)."""
        self.kube.apply([self._secret(name, data)])

    def run(self, tool: str, *args: str, stdin: str | None = None) -> str:
        return self.kube.kubectl("-n", self.namespace, "exec", "-i", "deploy/ldap", "--",
                                 *directory.admin_args(tool, self.admin_password), *args, input=stdin)  # fmt: skip


#: the Kubernetes node condition the cluster names in spec.nodeConditionDrains
NODE_CONDITION = "GpuXidError"
RESOURCES = {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}


def _values(pubkey: str, workers: int) -> dict[str, Any]:
    return {
        "nameOverride": NAME,
        "jail": {"size": "2Gi", "retainOnDelete": False},  # the last test switches to the default
        "login": {"sshAuthorizedKeys": [pubkey], "service": {"type": "NodePort"}},
        "workerGroups": [{"name": "cpu", "replicas": workers, "resources": RESOURCES}],
        # containers in jobs, from the test registry the container test runs in the namespace (plain HTTP)
        "containers": {"enabled": True, "allowHttpRegistries": True, "store": {"sizeLimit": "2Gi"}},
        # Kubernetes pods scheduled by Slurm on the cpu group's nodes (docs/bridge.md); preemption by QoS
        "bridge": {"enabled": True, "workerGroups": ["cpu"]},
        "slurmConfig": {"extraLines": ["PreemptType=preempt/qos", "PreemptMode=CANCEL"]},
        # a GPU fault reported on the Kubernetes node (by a person here) drains its workers in Slurm
        "nodeConditionDrains": [{"type": NODE_CONDITION}],
    }


def _add_gpu_group(values: dict[str, Any]) -> None:
    """What a user adds to a running cluster's values: a GPU group in its own partition (CPU jobs stay
    in the default one) and the NCCL check."""
    values["workerGroups"].append({"name": "gpu", "replicas": GPU_NODES, "resources": RESOURCES,
                                   "gpus": {"count": GPUS_PER_NODE, "type": "fake"}})  # fmt: skip
    values["partitions"] = [{"name": "cpu", "workerGroups": ["cpu"], "default": True},
                            {"name": "gpu", "workerGroups": ["gpu"]}]  # fmt: skip
    values["healthChecks"] = {
        "nccl": {
            "enabled": True,
            "schedule": "0 0 1 1 *",  # yearly: the test runs it by hand (kubectl create job --from)
            "minBusBandwidthGbps": MIN_BUSBW,
            "minBytes": "1M",
            "maxBytes": "8M",
            "timeLimitMinutes": 1,
        }
    }


def _allocatable_gpus(kube: Kube) -> int:
    nodes = kube.json("get", "nodes")["items"]
    return sum(int(n["status"].get("allocatable", {}).get(FAKE_GPU_RESOURCE, "0")) for n in nodes)


@pytest.fixture(scope="module")
def installed(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    tmp = tmp_path_factory.mktemp("e2e")
    key = new_ssh_key(tmp / "id_ed25519", "warden-e2e")
    suffix = uuid.uuid4().hex[:6]
    namespace = f"warden-e2e-{suffix}"
    operator = f"op-{suffix}"  # its cluster-wide objects are named after the release: unique per run
    gpus = _allocatable_gpus(kube) >= GPU_NODES * GPUS_PER_NODE
    if not gpus and not os.environ.get("KUBECONFIG"):
        pytest.fail(f"the local cluster offers no stand-in {FAKE_GPU_RESOURCE} (hack/fakegpu did not register?)")
    values = _values(key.with_suffix(".pub").read_text().strip(), workers=2)
    t0 = time.monotonic()
    try:
        # the site's directory is there before the cluster, which is installed reading it
        site = SiteDirectory.deploy(kube, namespace)
        values["identity"] = site.values()
        install_charts(kube, namespace, namespace, values, tmp / "values.json", operator_release=operator, crds="chart",
                       operator_set=OPERATOR_SET)  # fmt: skip
        status = wait_slurmcluster_ready(kube, namespace, NAME, timeout=600)
        print(f"\nSlurmCluster {namespace}/{NAME} Ready {time.monotonic() - t0:.0f}s after helm install")
        yield Installed(kube, namespace, values, tmp / "values.json", key, status, gpus, tmp, {}, site)
    finally:
        uninstall_charts(kube, namespace, NAME, operator, "slurm-operator-crds")
        # a jail kept by default (a test that stopped before deleting it): the local provisioner removes
        # a Released volume whose policy is Delete
        kept = kube.kubectl("get", "pv", "-l", f"slurm.warden.dev/jail-namespace={namespace}", "-o", "name",
                            check=False).split()  # fmt: skip
        for pv in kept:
            kube.kubectl("patch", pv, "--type=merge", "-p", '{"spec":{"persistentVolumeReclaimPolicy":"Delete"}}',
                         check=False)  # fmt: skip


def test_helm_install_makes_a_ready_slurmcluster(installed: Installed) -> None:
    status = installed.status["status"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert {t: conditions.get(t) for t in CONDITIONS} == dict.fromkeys(CONDITIONS, "True")
    assert status["observedGeneration"] == installed.status["metadata"]["generation"]
    groups = {g["name"]: (g["readyReplicas"], g["replicas"]) for g in status["workerGroups"]}
    assert groups == {"cpu": (2, 2)}
    assert (status["workers"], status["login"], status["jailPopulated"]) == ("2/2", "1/1", True)
    # Ready means registered with slurmctld, not just running
    assert status["slurmNodes"]["registered"] == 2 and status["slurmNodes"]["usable"] == 2, status["slurmNodes"]
    # what `kubectl get slurm` shows (the CRD's printer columns)
    table = installed.kube.kubectl("-n", installed.namespace, "get", "slurm")
    header, row = table.splitlines()
    assert header.split() == ["NAME", "PHASE", "WORKERS", "LOGIN", "USABLE", "JAIL", "SLURM", "AGE"]
    assert row.split()[:7] == [NAME, "Ready", "2/2", "1/1", "2", "true", "26.05"]


SLURM_CONDITION = "slurm.warden.dev/SlurmNode"


_eventually = until  # the tier's one way to wait (tests.support.eventually); the other modules import it here


def _slurm_condition(installed: Installed, pod: str) -> dict[str, Any]:
    """The pod's SlurmNode condition; {} also while the pod is gone (deleted, its controller not yet making
    the new one: waits during a rollout or a replacement read it then)."""
    obj = installed.kube.json_if_found("-n", installed.namespace, "get", "pod", pod)
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == SLURM_CONDITION), {})


def _events(installed: Installed, reason: str) -> list[str]:
    items = installed.kube.json("-n", installed.namespace, "get", "events", "--field-selector", f"reason={reason}")
    return [e["message"] for e in items["items"]]


def _sinfo_reasons(installed: Installed) -> dict[str, str]:
    out = installed.ssh("sinfo -h -R -N -o '%N|%E'")
    return dict(line.split("|", 1) for line in out.stdout.splitlines() if "|" in line)


def test_rest_api_answers_a_user_with_a_token_from_scontrol_token(installed: Installed) -> None:
    """What docs/operations.md tells a user: `scontrol token` on the login node, then curl slurmrestd
    with it. Without a token slurmrestd says 401, with a forged one 511 (slurmctld refuses it)."""
    key = installed.make_user("restuser")
    url = f"http://{NAME}-restapi:6820/slurm/v0.0.42"
    script = (
        "TOKEN=$(scontrol token lifespan=300 | cut -d= -f2) && "
        f'curl -sf -H "X-SLURM-USER-NAME: $USER" -H "X-SLURM-USER-TOKEN: $TOKEN" {url}/nodes'
    )
    out = installed.ssh(script, user="restuser", key=key)
    assert out.returncode == 0, out.stderr
    names = {n["name"] for n in json.loads(out.stdout)["nodes"]}
    assert names == {f"{NAME}-worker-cpu-0", f"{NAME}-worker-cpu-1"}
    for headers in ("", "-H 'X-SLURM-USER-NAME: restuser' -H 'X-SLURM-USER-TOKEN: e30.e30.forged'"):
        code = installed.ssh(
            f"curl -s -o /dev/null -w '%{{http_code}}' {headers} {url}/nodes", user="restuser", key=key
        )
        # no token: 401; a forged one: slurmctld refuses it (511)
        assert code.stdout.strip() == ("401" if not headers else "511"), (headers, code.stdout, code.stderr)
    # a user's token cannot drain a node: only Slurm administrators (the operator acts as SlurmUser)
    drain = installed.ssh(
        "TOKEN=$(scontrol token | cut -d= -f2) && curl -s -X POST -H 'Content-Type: application/json' "
        f"-H \"X-SLURM-USER-NAME: $USER\" -H \"X-SLURM-USER-TOKEN: $TOKEN\" "
        f"-d '{{\"state\":[\"DRAIN\"],\"reason\":\"mine\"}}' {url}/node/{NAME}-worker-cpu-0",
        user="restuser", key=key,
    )  # fmt: skip
    assert "DRAIN" not in installed.ssh(f"sinfo -h -n {NAME}-worker-cpu-0 -o %T").stdout.upper(), drain.stdout


@pytest.mark.whole_node  # cordons the node every installation runs on
def test_drains_reach_pods_status_and_events_and_cordon_drains_only_its_own(installed: Installed) -> None:
    """A person drains a Slurm node: its pod's condition, the SlurmCluster's status and an Event say so.
    Then the Kubernetes node is cordoned: every other Slurm node on it is drained with a reason naming
    the cordon; uncordoned, those are resumed, and the person's drain stays as it was."""
    kube, ns = installed.kube, installed.namespace
    mine, other = f"{NAME}-worker-cpu-1", f"{NAME}-worker-cpu-0"
    out = installed.ssh(f"scontrol update nodename={mine} state=drain reason='alice: swapping a disk'")
    assert out.returncode == 0, out.stderr
    cond = _eventually(
        f"{mine}'s pod condition says Drained",
        lambda: (c := _slurm_condition(installed, mine)).get("reason") == "Drained" and c,
        timeout=30,
    )
    assert cond["status"] == "False" and "alice: swapping a disk" in cond["message"], cond
    assert _slurm_condition(installed, other)["reason"] in ("Idle", "Mixed", "Allocated")

    def status_lists_it() -> bool:
        status = kube.json("-n", ns, "get", "slurmcluster", NAME)["status"]
        return {"node": mine, "reason": "alice: swapping a disk"} in status.get("slurmNodes", {}).get("drained", [])

    _eventually("status.slurmNodes.drained lists the person's drain", status_lists_it, timeout=30)
    _eventually("a SlurmNodeDrained Event", lambda: any(mine in m for m in _events(installed, "SlurmNodeDrained")))
    # structured: a program finds the drained pod without parsing the note
    items = kube.json("-n", ns, "get", "events.events.k8s.io")["items"]
    about = [(e["regarding"]["name"], e["related"]["name"], e["action"], e["reportingController"])
             for e in items if e["reason"] == "SlurmNodeDrained"]  # fmt: skip
    assert (NAME, mine, "Observe", "slurm.warden.dev/operator") in about, about

    k8s_node = kube.json("-n", ns, "get", "pod", other)["spec"]["nodeName"]
    kube.kubectl("cordon", k8s_node)
    try:
        reasons = _eventually(
            f"{other} drained for the cordon",
            lambda: (r := _sinfo_reasons(installed)).get(other, "").startswith("warden: Kubernetes node") and r,
            timeout=30,
        )
        assert k8s_node in reasons[other] and "cordoned" in reasons[other], reasons
        assert reasons[mine] == "alice: swapping a disk", "the person's drain was overwritten"
    finally:
        kube.kubectl("uncordon", k8s_node)
    _eventually(f"{other} resumed after uncordon", lambda: other not in _sinfo_reasons(installed), timeout=30)
    assert _sinfo_reasons(installed).get(mine) == "alice: swapping a disk", "the person's drain was undone"
    _eventually(
        f"{other}'s pod condition back to usable",
        lambda: _slurm_condition(installed, other).get("status") == "True",
        timeout=30,
    )
    installed.ssh(f"scontrol update nodename={mine} state=resume")
    _eventually(f"{mine} usable again", lambda: _slurm_condition(installed, mine).get("status") == "True", timeout=30)


def _node_condition(
    installed: Installed, k8s_node: str, status: str | None, reason: str = "", message: str = ""
) -> None:
    """What an admin (or Node Problem Detector) does: the node's condition set with `kubectl patch
    --subresource=status` (a strategic merge on its type: the kubelet's own conditions stay), or, with
    ``status`` None, deleted."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    item: dict[str, str] = {"type": NODE_CONDITION, "$patch": "delete"}
    if status is not None:
        item = {"type": NODE_CONDITION, "status": status, "reason": reason, "message": message,
                "lastHeartbeatTime": now, "lastTransitionTime": now}  # fmt: skip
    patch = json.dumps({"status": {"conditions": [item]}})
    installed.kube.kubectl("patch", "node", k8s_node, "--subresource=status", "--type=strategic", "-p", patch)


def test_a_node_condition_drains_its_workers_with_its_words_and_clearing_it_resumes_them(installed: Installed) -> None:
    """An admin marks a GPU fault on the Kubernetes node (`GpuXidError=True`, reason and message): the
    Slurm nodes of the workers there are drained, `sinfo -R` saying why; a person's drain on the same node
    stays theirs. The condition cleared, Warden resumes its own drains and only those."""
    kube, ns = installed.kube, installed.namespace
    mine, other = f"{NAME}-worker-cpu-1", f"{NAME}-worker-cpu-0"
    k8s_node = kube.json("-n", ns, "get", "pod", other)["spec"]["nodeName"]
    out = installed.ssh(f"scontrol update nodename={mine} state=drain reason='alice: swapping a disk'")
    assert out.returncode == 0, out.stderr
    why = f"warden-condition: {NODE_CONDITION} (Xid79): GPU has fallen off the bus (node {k8s_node})"
    try:
        t0 = time.monotonic()
        _node_condition(installed, k8s_node, "True", "Xid79", "GPU has fallen off the bus")
        reasons = _eventually(
            f"{other} drained for {NODE_CONDITION}", lambda: (r := _sinfo_reasons(installed)).get(other) == why and r
        )
        drained_after = time.monotonic() - t0
        assert reasons[mine] == "alice: swapping a disk", "the person's drain was overwritten"
        # the kubelet's own conditions are there beside it
        conditions = {c["type"]: c["status"] for c in kube.json("get", "node", k8s_node)["status"]["conditions"]}
        assert conditions[NODE_CONDITION] == "True" and conditions["Ready"] == "True", conditions
        # said on the pod (the sync round after the drain reads it back) and in a Warning Event about the
        # cluster, related to the pod
        cond = _eventually(
            f"{other}'s pod condition says Drained",
            lambda: (c := _slurm_condition(installed, other)).get("reason") == "Drained" and c,
            timeout=30,
        )
        assert cond["status"] == "False" and why in cond["message"], cond
        _eventually("a NodeConditionDrained Event", lambda: f"{other}: drained: {why}" in _events(
            installed, "NodeConditionDrained"))  # fmt: skip
        items = kube.json("-n", ns, "get", "events.events.k8s.io")["items"]
        about = {(e["type"], e["regarding"]["name"], e["related"]["name"], e["action"])
                 for e in items if e["reason"] == "NodeConditionDrained"}  # fmt: skip
        assert ("Warning", NAME, other, "Drain") in about, about
        # a job asked for that node does not start: Slurm holds it off
        held = installed.ssh(f"srun --immediate=5 -w {other} true")
        assert held.returncode != 0, held.stdout
        # the fault cleared, as Node Problem Detector clears it: the status turns False
        t0 = time.monotonic()
        _node_condition(installed, k8s_node, "False", "NoXid", "")
        _eventually(f"{other} resumed", lambda: other not in _sinfo_reasons(installed))
        print(f"\n{NODE_CONDITION}: drained {drained_after:.1f}s after it was set, resumed"
              f" {time.monotonic() - t0:.1f}s after it cleared")  # fmt: skip
    finally:
        _node_condition(installed, k8s_node, None)
        installed.ssh(f"scontrol update nodename={mine} state=resume")
    assert any(f"{other}: conditions cleared on {k8s_node}: resumed" in m
               for m in _events(installed, "NodeConditionCleared"))  # fmt: skip
    # drained once while the condition held (Slurm keeps the reason as given: no drain again each round)
    drains = [e for e in kube.json("-n", ns, "get", "events.events.k8s.io")["items"]
              if e["reason"] == "NodeConditionDrained" and e["related"]["name"] == other]  # fmt: skip
    assert len(drains) == 1 and not drains[0].get("series"), drains
    ran = installed.ssh(f"srun --immediate=30 -w {other} hostname")
    assert ran.returncode == 0 and ran.stdout.strip(), ran.stderr
    _eventually(f"{mine} usable again", lambda: _slurm_condition(installed, mine).get("status") == "True", timeout=30)


def test_ghost_node_records_go_and_a_pod_that_lost_its_registration_is_recreated(installed: Installed) -> None:
    """A Slurm node record without a pod (a pod killed without leaving) is deleted within seconds. A
    worker whose node record vanished while its slurmd runs (never registered, for slurmctld) is
    recreated after the register timeout and joins again."""
    kube, ns = installed.kube, installed.namespace
    ghost = f"{NAME}-worker-cpu-7"
    out = installed.ssh(f"scontrol create nodename={ghost} state=cloud")
    assert out.returncode == 0, out.stderr
    assert ghost in installed.ssh(f"scontrol show node {ghost}").stdout
    _eventually(
        "the ghost node record deleted",
        lambda: installed.ssh(f"scontrol show node {ghost}").returncode != 0,
        timeout=30,
    )
    assert any(ghost in m for m in _events(installed, "GhostNodeRemoved"))

    victim = f"{NAME}-worker-cpu-1"
    uid = kube.json("-n", ns, "get", "pod", victim)["metadata"]["uid"]
    out = installed.ssh(f"scontrol delete nodename={victim}")
    assert out.returncode == 0, out.stderr

    # its slurmd has run far longer than the register timeout, so the same look at Slurm that finds it
    # unregistered may delete the pod at once: either sign will do, the condition or a new pod
    def noticed() -> bool:
        pod = kube.json_if_found("-n", ns, "get", "pod", victim)
        renewed = not pod or pod["metadata"]["uid"] != uid
        # the condition of the pod just read: a second read may find it deleted already (being recreated)
        said = [c for c in (pod.get("status") or {}).get("conditions", []) if c["type"] == SLURM_CONDITION]
        return renewed or any(c.get("reason") == "NotRegistered" for c in said)

    _eventually(f"{victim} seen as not registered (condition NotRegistered, or already recreated)", noticed,
                timeout=30)  # fmt: skip

    def recreated_and_registered() -> bool:
        pod = kube.json_if_found("-n", ns, "get", "pod", victim)
        return (
            bool(pod) and pod["metadata"]["uid"] != uid and _slurm_condition(installed, victim).get("status") == "True"
        )

    _eventually(
        f"{victim} recreated and registered", recreated_and_registered, timeout=REGISTER_TIMEOUT + 180, interval=3
    )
    assert any(victim in m for m in _events(installed, "WorkerRecreated"))


def test_ssh_through_login_service_lands_in_the_jail(installed: Installed) -> None:
    out = installed.ssh("cat /etc/warden-jail-release; id -un")
    assert out.returncode == 0, out.stderr
    assert "WARDEN_JAIL_VERSION=" in out.stdout
    assert out.stdout.splitlines()[-1] == "root"
    # the file is the jail's, not the login image's: the session is chrooted
    probe = "test -e /etc/warden-jail-release && echo image || echo absent"
    pod = installed.kube.kubectl("-n", installed.namespace, "exec", f"{NAME}-login-0", "-c", "sshd", "--",
                                 "sh", "-c", probe)  # fmt: skip
    assert pod.strip() == "absent"


def _user_runs_jobs(installed: Installed, user: str, key: Path) -> None:
    """What a new user does first: log in with their key, `srun`, `sbatch` into their home."""
    out = installed.ssh("id -un; pwd", user=user, key=key)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [user, f"/home/{user}"]
    out = installed.ssh("srun -N1 sh -c 'echo $(id -un) $HOME'", user=user, key=key)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [user, f"/home/{user}"]
    out = installed.ssh("cd && sbatch --parsable -o first-%j.out --wrap 'id -un; hostname'", user=user, key=key)
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    assert _wait_job(installed, job) == "COMPLETED"
    text = installed.ssh(f"cat ~/first-{job}.out", user=user, key=key).stdout.split()
    assert text[0] == user and text[1].startswith(f"{NAME}-worker-"), text


@pytest.mark.whole_node  # cordons the node every installation runs on
def test_kubectl_drain_waits_for_the_running_job_and_takes_idle_workers_at_once(installed: Installed) -> None:
    """`kubectl drain` of the Kubernetes node (limited here to this cluster's workers: the local cluster
    has one node) while a job runs on one worker: the idle worker is evicted at once, the busy one is
    refused (its PodDisruptionBudget) and its job completes; once it is done, the drain goes through.
    Uncordoned, both workers come back into Slurm."""
    kube, ns = installed.kube, installed.namespace
    busy, idle = f"{NAME}-worker-cpu-0", f"{NAME}-worker-cpu-1"
    out = installed.ssh(f"sbatch --parsable -w {busy} -o /root/drained-%j.out --wrap 'sleep 45; echo finished'")
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]

    def label(pod: str) -> str | None:
        obj = kube.json_if_found("-n", ns, "get", "pod", pod)
        return (obj.get("metadata", {}).get("labels") or {}).get("slurm.warden.dev/busy") if obj else None

    _eventually(f"{busy} labelled busy", lambda: label(busy) == "true", timeout=30)
    uids = {p: kube.json("-n", ns, "get", "pod", p)["metadata"]["uid"] for p in (busy, idle)}
    k8s_node = kube.json("-n", ns, "get", "pod", busy)["spec"]["nodeName"]
    drain = ["drain", k8s_node, "--pod-selector", f"{INSTANCE},app.kubernetes.io/component=worker",
             "--ignore-daemonsets", "--delete-emptydir-data"]  # fmt: skip
    try:
        first = kube.kubectl_result(*drain, "--timeout=20s")
        assert first.returncode != 0, "the drain went through while a job ran"
        assert "disruption budget" in first.stderr or "Cannot evict" in first.stderr, first.stderr
        assert kube.json("-n", ns, "get", "pod", busy)["metadata"]["uid"] == uids[busy], "the busy worker was evicted"
        gone = kube.json_if_found("-n", ns, "get", "pod", idle)
        assert not gone or gone["metadata"]["uid"] != uids[idle], "the idle worker was not evicted"
        assert _wait_job(installed, job) == "COMPLETED"
        assert installed.ssh(f"cat /root/drained-{job}.out").stdout.strip() == "finished"
        _eventually(f"{busy} no longer labelled busy", lambda: label(busy) != "true", timeout=30)
        second = kube.kubectl_result(*drain, "--timeout=120s")
        assert second.returncode == 0, second.stderr
    finally:
        kube.kubectl("uncordon", k8s_node)
    status = wait_slurmcluster_ready(kube, ns, NAME, timeout=300)
    _eventually(
        "both workers usable in Slurm again",
        lambda: kube.json("-n", ns, "get", "slurmcluster", NAME)["status"].get("slurmNodes", {}).get("usable") == 2,
        timeout=120,
    )
    assert status["status"]["phase"] == "Ready"


def _all_replaced(installed: Installed, workerset: str, uids: dict[str, str]) -> bool:
    """Whether every pod named in ``uids`` was made again from the WorkerSet's current template, its
    Slurm node registered and usable."""
    kube, ns = installed.kube, installed.namespace
    target = kube.json("-n", ns, "get", "workerset", workerset)["status"].get("updateRevision")
    pods = kube.json("-n", ns, "get", "pods", "-l", f"{INSTANCE},app.kubernetes.io/component=worker")["items"]
    mine = [p for p in pods if p["metadata"]["name"].startswith(f"{workerset}-")]
    return len(mine) == len(uids) and all(
        p["metadata"]["annotations"].get("slurm.warden.dev/pod-template") == target
        and p["metadata"]["uid"] != uids[p["metadata"]["name"]]
        and _slurm_condition(installed, p["metadata"]["name"]).get("status") == "True"
        for p in mine
    )


def test_worker_upgrade_waits_for_a_two_node_job_and_moves_every_pod(installed: Installed) -> None:
    """A worker pod-template change (`helm upgrade` of the group's resources) with a job running on both
    workers: no pod is replaced while the job runs; it completes and writes its output; then the pods
    are replaced one at a time (maxUnavailable 1), each drained and idle first, and every pod ends on
    the WorkerSet's current template, registered and usable."""
    kube, ns = installed.kube, installed.namespace
    sts = f"{NAME}-worker-cpu"
    out = installed.ssh("sbatch --parsable -N2 -o /root/upgrade-%j.out --wrap 'srun sh -c \"sleep 60; echo across\"'")
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    _eventually(f"job {job} running", lambda: _job_states(installed).get(job) == "RUNNING", timeout=60)
    uids = {p: kube.json("-n", ns, "get", "pod", p)["metadata"]["uid"] for p in (f"{sts}-0", f"{sts}-1")}
    group = installed.values["workerGroups"][0]
    group["resources"] = {**group["resources"], "limits": {**group["resources"]["limits"], "cpu": "900m"}}
    installed.helm_upgrade()

    # The operator took the new template and its Slurm sync began the rollout: a worker drained for the
    # upgrade, which Slurm shows as Draining (its node still runs the job) a sync round after the drain.
    def drained_for_upgrade() -> bool:
        return any(
            (c := _slurm_condition(installed, p)).get("reason") == "Draining" and "warden: upgrade" in c["message"]
            for p in uids
        )

    _eventually("a busy worker draining for the upgrade", drained_for_upgrade, timeout=90, interval=2)

    def uid(pod: str) -> str | None:
        obj = kube.json_if_found("-n", ns, "get", "pod", pod)
        return str(obj["metadata"]["uid"]) if obj else None

    # from then on every sync round may replace an idle drained pod: none goes while the job runs
    while True:
        now = {p: uid(p) for p in uids}
        if _job_states(installed).get(job) != "RUNNING":  # read after the pods: they were read while it ran
            break
        assert now == uids, "a pod was replaced while the job ran"
        time.sleep(3)
    assert _wait_job(installed, job) == "COMPLETED", "the job was disturbed"
    assert installed.ssh(f"cat /root/upgrade-{job}.out").stdout.split() == ["across", "across"]

    _eventually("every worker on the new revision, registered and usable", lambda: _all_replaced(installed, sts, uids),
                timeout=300, interval=3)  # fmt: skip
    assert any(sts in m for m in _events(installed, "UpgradeReplacing"))


def test_a_worker_upgrade_waits_for_the_maintenance_window_with_its_nodes_kept_free_and_no_job_killed(
    installed: Installed,
) -> None:
    """An admin sets a maintenance window opening in a few minutes and changes the worker template in the same
    `helm upgrade`: nothing is drained or replaced before the window; status says when the upgrade starts; a
    Slurm reservation keeps both workers free from then, so a job that would run past the start waits
    ("Reserved for maintenance") while a short one still runs; when the window opens, both pods are replaced
    at once, the reservation goes, and the waiting job runs on the new pods: every job completes."""
    kube, ns = installed.kube, installed.namespace
    sts = f"{NAME}-worker-cpu"
    pods = (f"{sts}-0", f"{sts}-1")
    uids = {p: kube.json("-n", ns, "get", "pod", p)["metadata"]["uid"] for p in pods}
    now = datetime.datetime.now(datetime.UTC)
    opens = (now + datetime.timedelta(minutes=4)).replace(second=0, microsecond=0)
    stamp = opens.strftime("%Y-%m-%dT%H:%M:%SZ")
    group = installed.values["workerGroups"][0]
    group["resources"] = {**group["resources"], "limits": {**group["resources"]["limits"], "cpu": "850m"}}
    installed.values["maintenanceWindow"] = {"start": opens.strftime("%H:%M"), "durationMinutes": 30}
    reservation = f"warden-maintenance-{sts}"
    try:
        installed.helm_upgrade()

        def waiting() -> bool:
            ws = kube.json("-n", ns, "get", "workerset", sts)["status"]
            cluster = kube.json("-n", ns, "get", "slurmcluster", NAME)["status"]
            group_status = next(g for g in cluster.get("workerGroups", []) if g["name"] == "cpu")
            return bool(ws.get("upgradeWaitsForWindow") == stamp and group_status.get("upgradeWaitsForWindow") == stamp)

        _eventually(f"status: the upgrade waits for the window at {stamp}", waiting, timeout=90, interval=2)
        shown = _eventually(
            f"Slurm's reservation {reservation}",
            lambda: (out := installed.ssh(f"scontrol show reservation {reservation}")).returncode == 0 and out.stdout,
            timeout=30,
        )
        assert "MAINT" in shown and "IGNORE_JOBS" in shown and f"{sts}-[0-1]" in shown, shown
        assert any(reservation in m for m in _events(installed, "MaintenanceReserved"))
        # before the window: no worker drained for the upgrade, no pod replaced
        assert {p: kube.json("-n", ns, "get", "pod", p)["metadata"]["uid"] for p in pods} == uids
        assert not any("warden: upgrade" in _slurm_condition(installed, p).get("message", "") for p in pods)

        # a job that would run into the window waits; a short one ends before it and runs now
        long = installed.ssh("sbatch --parsable -t 10 -o /root/window-%j.out --wrap 'echo after'")
        short = installed.ssh("sbatch --parsable -t 1 -o /root/window-%j.out --wrap 'echo before'")
        assert long.returncode == 0 and short.returncode == 0, long.stderr + short.stderr
        long_job, short_job = long.stdout.strip().split(";")[0], short.stdout.strip().split(";")[0]
        assert _wait_job(installed, short_job) == "COMPLETED"
        assert installed.ssh(f"cat /root/window-{short_job}.out").stdout.strip() == "before"
        reason = _eventually(
            f"job {long_job} held off by the reservation",
            lambda: "Reserved" in (r := installed.ssh(f"squeue -h -j {long_job} -o '%T %r'").stdout) and r,
            timeout=60,
        )
        assert reason.startswith("PENDING"), reason
        assert {p: kube.json("-n", ns, "get", "pod", p)["metadata"]["uid"] for p in pods} == uids

        # the window opens: both replaced at once, the reservation gone, the waiting job runs on the new pods
        _eventually("both workers replaced once the window opened", lambda: _all_replaced(installed, sts, uids),
                    timeout=420, interval=3)  # fmt: skip
        assert datetime.datetime.now(datetime.UTC) >= opens
        assert _wait_job(installed, long_job, timeout=300) == "COMPLETED"
        assert installed.ssh(f"cat /root/window-{long_job}.out").stdout.strip() == "after"
        assert installed.ssh(f"scontrol show reservation {reservation}").returncode != 0
        assert any(reservation in m for m in _events(installed, "MaintenanceReservationEnded"))
        _eventually(
            "the waiting upgrade gone from status",
            lambda: "upgradeWaitsForWindow" not in kube.json("-n", ns, "get", "workerset", sts)["status"],
            timeout=60,
        )
    finally:
        installed.values.pop("maintenanceWindow", None)
        installed.helm_upgrade()
        installed.ssh(f"scontrol delete reservation {reservation}")


def test_user_made_right_after_ready_logs_in_and_runs_jobs(installed: Installed) -> None:
    """The first thing an admin does on a fresh install: make a user in the jail. With nothing
    restarted since `helm install` (slurmctld started before the populate Job had filled the jail),
    the user logs in, and `srun` and `sbatch` run as them."""
    before = installed.restarts()
    alice = installed.make_user("alice")
    _user_runs_jobs(installed, "alice", alice)
    assert installed.restarts() == before, "a pod was restarted or replaced"
    assert all(restarts == 0 for _, restarts in before.values()), before


#: a job's states once it has ended (COMPLETING has not: its epilog still runs on the node)
JOB_ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def _wait_job(installed: Installed, job: str, timeout: float = 180) -> str:
    """The job's final state, once it has one."""

    def ended() -> str | None:
        out = installed.ssh(f"scontrol show job -o {job}")
        state = dict(f.split("=", 1) for f in out.stdout.split() if "=" in f).get("JobState", "")
        return state if state in JOB_ENDED else None

    return str(until(f"job {job} ended", ended, timeout=timeout, interval=2))


def test_accounting_is_on_and_a_users_finished_jobs_are_hers_in_sacct(installed: Installed) -> None:
    """The chart runs accounting (MariaDB in the cluster) and puts jail users in the default account on
    its own: alice, made a moment ago with nothing else done, has her association; a job she runs then
    is in `sacct` for her with its final state, and in root's `sacct -a`."""
    key = installed.tmp / "id_alice"
    assoc = "sacctmgr -n -P show assoc where user=alice format=account"
    _eventually("alice in the default account", lambda: installed.ssh(assoc).stdout.split() == ["users"], timeout=60)
    ctl = ("-n", installed.namespace, "exec", f"{NAME}-controller-0", "--")
    _eventually(
        "slurmctld knows alice's association",
        lambda: "UserName=alice(" in installed.kube.kubectl(*ctl, "scontrol", "show", "assoc_mgr", "flags=assoc",
                                                            "users=alice", check=False),
        timeout=30,
    )  # fmt: skip
    out = installed.ssh("cd && sbatch --parsable -o acct-%j.out --wrap 'exit 3'", key=key, user="alice")
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    assert _wait_job(installed, job) == "FAILED"
    mine = f"sacct -X -n -P -o JobID,User,State,ExitCode -j {job}"
    _eventually(
        f"job {job} in alice's sacct",
        lambda: installed.ssh(mine, key=key, user="alice").stdout.split() == [f"{job}|alice|FAILED|3:0"],
        timeout=60,
    )
    assert installed.ssh(f"sacct -a {mine.removeprefix('sacct ')}").stdout.split() == [f"{job}|alice|FAILED|3:0"]


BRIDGE_QOS = "k8s-low"


def _bridge_job(name: str, parallelism: int, image: str, command: str, annotations: dict[str, str]) -> dict[str, Any]:
    """A batch Job a Kubernetes user submits to the bridge: its scheduler name, small requests (the kubelet
    admits pods by them; the worker pods beside them hold the node's CPUs for Slurm), limits (what Slurm
    allocates: one CPU each), ``parallelism`` pods that start together."""
    resources = {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"cpu": "1", "memory": "64Mi"}}
    pod = {"schedulerName": "warden-slurm", "restartPolicy": "Never", "terminationGracePeriodSeconds": 5,
           "containers": [{"name": "main", "image": image, "command": ["sh", "-c", command],
                           "resources": resources}]}  # fmt: skip
    # pods Slurm took back (preempted, cancelled: the bridge marks them DisruptionTarget) are not failures
    # (docs/bridge.md); with backoffLimit 0, one counted as a failure would fail the Job
    policy = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"parallelism": parallelism, "completions": parallelism, "backoffLimit": 0,
                     "podFailurePolicy": policy,
                     "template": {"metadata": {"annotations": annotations}, "spec": pod}}}  # fmt: skip


def _pods_of(installed: Installed, team: str, job: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = installed.kube.json("-n", team, "get", "pods", "-l", f"job-name={job}")["items"]
    return items


def _pending_because(installed: Installed, team: str, job: str, reason: str, words: str) -> bool:
    pods = _pods_of(installed, team, job)
    told = [
        c for p in pods for c in p["status"].get("conditions", [])
        if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == reason
        and words in c.get("message", "")
    ]  # fmt: skip
    return len(pods) > 0 and len(told) == len(pods)


def _squeue(installed: Installed) -> list[list[str]]:
    """Every job, as root sees them: id, user, name, state."""
    return [line.split("|") for line in installed.ssh("squeue -h -o '%i|%u|%j|%T'").stdout.split()]


def _bridge_events(installed: Installed, team: str, reason: str) -> list[str]:
    """The notes of the bridge's Events of ``reason`` in the namespace (about its pods)."""
    events = installed.kube.json("-n", team, "get", "events.v1.events.k8s.io")["items"]
    return [str(e.get("note", "")) for e in events if e.get("reason") == reason]


def _phases(installed: Installed, team: str, job: str) -> list[str]:
    return sorted(str(p["status"].get("phase")) for p in _pods_of(installed, team, job))


def test_slurm_schedules_a_kubernetes_job_beside_slurm_jobs_preempts_it_and_both_cancel_each_other(
    installed: Installed,
) -> None:
    """The bridge (docs/bridge.md), as a cluster admin and a Kubernetes user meet it beside alice, a Slurm
    user: the admin opts a namespace in; a two-pod Job waits in Slurm's queue (squeue shows it beside
    alice's job) while her job holds both nodes, and runs when she ends it; a Job on a preemptible QoS is
    preempted by her high-priority job (its pods leave within the QoS's grace time, an Event says why);
    `scancel` of a placeholder deletes its pods; deleting a Job cancels its placeholder; a pod bigger than
    any node waits with Slurm's reason."""
    kube, ns = installed.kube, installed.namespace
    team = f"{ns}-team"
    # the admin opts the namespace in, and lets its pods choose the preemptible QoS (docs/bridge.md)
    kube.apply([{"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": team, "labels": {naming.BRIDGE_NAMESPACE_LABEL: f"{ns}.{NAME}"},
                              "annotations": {naming.BRIDGE_ALLOWED_QOS_ANNOTATION: BRIDGE_QOS}}}])  # fmt: skip
    controller = kube.json("-n", ns, "get", "pod", f"{NAME}-controller-0")
    image = controller["spec"]["containers"][0]["image"]  # on the node already: it runs
    try:
        _bridge_story(installed, team, image)
    finally:  # whatever happened, the tests after this one get the nodes back
        installed.ssh("scancel -u alice; scancel -u warden-bridge")
        kube.kubectl("delete", "namespace", team, "--wait=false", check=False)


def _bridge_story(installed: Installed, team: str, image: str) -> None:
    kube, ns, alice = installed.kube, installed.namespace, installed.tmp / "id_alice"
    # 1. alice's job holds both nodes; a two-pod Job waits for them in Slurm's queue, then runs
    out = installed.ssh("sbatch --parsable -N2 --exclusive -o /dev/null --wrap 'sleep 600'", key=alice, user="alice")
    assert out.returncode == 0, out.stderr
    held = out.stdout.strip().split(";")[0]
    _eventually(f"alice's job {held} running", lambda: [held, "alice"] in [r[:2] for r in _squeue(installed)
                                                                          if r[3] == "RUNNING"])  # fmt: skip
    kube.apply([{**_bridge_job("waits", 2, image, "sleep 3", {}), "metadata": {"name": "waits", "namespace": team}}])
    # the namespace's Slurm account is made once the controller pod sees the bridge's list (its kubelet
    # refreshes the mounted ConfigMap within about a minute): Slurm refuses the job until then
    _eventually("the Job's pods pending in Slurm", lambda: _pending_because(installed, team, "waits", "SlurmPending",
                                                                            "Resources"), timeout=180)  # fmt: skip
    queue = _squeue(installed)
    placeholder = next(r for r in queue if r[2] == f"k8s:{team}/waits")
    assert placeholder[1] == naming.BRIDGE_USER and placeholder[3] == "PENDING", queue
    assert [held, "alice", "wrap", "RUNNING"] in queue, queue
    assert installed.ssh(f"scancel {held}", key=alice, user="alice").returncode == 0
    _eventually("the Job complete", lambda: (kube.json("-n", team, "get", "job", "waits")["status"]
                                             .get("succeeded") == 2), timeout=120)  # fmt: skip
    nodes = {p["spec"]["nodeName"] for p in _pods_of(installed, team, "waits")}
    assert nodes == {kube.json("-n", ns, "get", "pod", f"{NAME}-worker-cpu-0")["spec"]["nodeName"]}
    _eventually("the finished Job's placeholder gone from squeue",
                lambda: not [r for r in _squeue(installed) if r[2] == f"k8s:{team}/waits"])  # fmt: skip
    assert _bridge_events(installed, team, "Scheduled")
    # 2. a preemptible QoS (20 s grace) and alice's high one that preempts it
    for qos in (f"{BRIDGE_QOS} GraceTime=20", f"high Preempt={BRIDGE_QOS}"):
        add = installed.ssh(f"sacctmgr -i add qos {qos}")
        assert add.returncode == 0 or "Nothing new added" in add.stdout + add.stderr, add.stderr
    # Slurm enforces QoS (spec.accounting.enforce): the admin lets the namespace's account and alice's use them
    _allow_qos(installed, naming.bridge_account(team), BRIDGE_QOS)
    _allow_qos(installed, "users", "high")
    low = _bridge_job("low", 2, image, "sleep 600", {naming.BRIDGE_QOS_ANNOTATION: BRIDGE_QOS})
    kube.apply([{**low, "metadata": {"name": "low", "namespace": team}}])
    both = ["Running", "Running"]
    _eventually("the low Job's pods running", lambda: _phases(installed, team, "low") == both, timeout=120)
    first = {p["metadata"]["uid"] for p in _pods_of(installed, team, "low")}
    out = installed.ssh("sbatch --parsable --qos=high -N2 --exclusive -o /dev/null --wrap 'sleep 5'", key=alice,
                        user="alice")  # fmt: skip
    assert out.returncode == 0, out.stderr
    high = out.stdout.strip().split(";")[0]
    preempted = _eventually("Events about preempted pods", lambda: _bridge_events(installed, team, "SlurmJobPreempted"),
                            timeout=60)  # fmt: skip
    assert "grace time" in preempted[0], preempted
    _eventually("the preempted pods gone", lambda: not first & {p["metadata"]["uid"] for p in
                                                                 _pods_of(installed, team, "low")})  # fmt: skip
    assert _wait_job(installed, high) == "COMPLETED"
    # 3. the Job made new pods; they run again once alice's job is done; scancel of their placeholder
    # deletes them
    _eventually("the low Job's new pods running", lambda: _phases(installed, team, "low") == both, timeout=120)
    again = next(r for r in _squeue(installed) if r[2] == f"k8s:{team}/low")
    assert installed.ssh(f"scancel {again[0]}").returncode == 0
    cancelled = _eventually("Events about cancelled pods",
                            lambda: _bridge_events(installed, team, "SlurmJobCancelled"))  # fmt: skip
    assert f"Slurm job {again[0]}" in cancelled[0], cancelled
    kube.kubectl("-n", team, "delete", "job", "low", "--wait=false")
    # 4. deleting a Job cancels its placeholder
    doomed = _bridge_job("doomed", 2, image, "sleep 600", {})
    kube.apply([{**doomed, "metadata": {"name": "doomed", "namespace": team}}])
    _eventually("the doomed Job's pods running", lambda: _phases(installed, team, "doomed") == both, timeout=120)
    assert [r for r in _squeue(installed) if r[2] == f"k8s:{team}/doomed" and r[3] == "RUNNING"]
    kube.kubectl("-n", team, "delete", "job", "doomed", "--wait=false")
    _eventually("the deleted Job's placeholder gone from squeue",
                lambda: not [r for r in _squeue(installed) if r[2] == f"k8s:{team}/doomed"], timeout=30)  # fmt: skip
    # 5. bad input: a pod bigger than any node waits with Slurm's reason
    huge = _bridge_job("huge", 1, image, "true", {})
    huge["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "64"
    kube.apply([{**huge, "metadata": {"name": "huge", "namespace": team}}])
    _eventually("the huge pod pending with Slurm's reason",
                lambda: _pending_because(installed, team, "huge", "SlurmPending", "PartitionConfig"))  # fmt: skip


def _allow_qos(installed: Installed, account: str, qos: str) -> None:
    """What an admin does (docs/operations.md, "Limits that hold"): the account's associations, its users'
    and sub-accounts' included, may use ``qos``; returns once accounting shows it (slurmdbd hands the change
    to slurmctld at once)."""
    out = installed.ssh(f"sacctmgr -i modify account where name={account} set qos+={qos}")
    assert out.returncode == 0 or "Nothing modified" in out.stdout + out.stderr, out.stdout + out.stderr
    shown = f"sacctmgr -n -P show assoc where account={account} format=qos"

    def allowed() -> bool:
        lines = installed.ssh(shown).stdout.split()
        return bool(lines) and all(qos in line.split(",") for line in lines)

    _eventually(f"account {account} and its users may use QoS {qos}", allowed, timeout=30)


def _opt_in(installed: Installed, team: str) -> None:
    """A cluster admin opts a namespace in to the cluster's bridge (docs/bridge.md)."""
    installed.kube.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": team, "labels": {naming.BRIDGE_NAMESPACE_LABEL: f"{installed.namespace}.{NAME}"}}}])  # fmt: skip


def _succeeded(installed: Installed, team: str, job: str) -> bool:
    return bool(installed.kube.json("-n", team, "get", "job", job)["status"].get("succeeded") == 1)


def _image(installed: Installed) -> str:
    """An image on the node already (the controller's: it runs)."""
    controller = installed.kube.json("-n", installed.namespace, "get", "pod", f"{NAME}-controller-0")
    return str(controller["spec"]["containers"][0]["image"])


def test_a_users_jobs_are_held_to_the_qos_limits_an_admin_sets_and_an_unknown_qos_or_account_is_refused(
    installed: Installed,
) -> None:
    """Accounting enforces associations, limits and QoS by default: quinn, a new jail user (in the default
    account on her own), may run one job at a time on the QoS `one` an admin made with `sacctmgr` and let
    her account use; her second job waits with Slurm's reason while the first runs, and runs once it ends.
    A job naming a QoS or an account that does not exist is refused at submission, in Slurm's words."""
    quinn = installed.make_user("quinn")
    add = installed.ssh("sacctmgr -i add qos one MaxJobsPerUser=1")
    assert add.returncode == 0 or "Nothing new added" in add.stdout + add.stderr, add.stdout + add.stderr
    _allow_qos(installed, "users", "one")
    submit = "sbatch --parsable --qos=one -o /dev/null --wrap 'sleep 300'"
    # the first submission once slurmctld has the admin's change (slurmdbd sends it a moment after sacctmgr)
    first = _eventually("quinn's job on QoS one accepted",
                        lambda: installed.ssh(submit, key=quinn, user="quinn").stdout.strip(), timeout=30)  # fmt: skip
    out = installed.ssh(submit, key=quinn, user="quinn")
    assert out.returncode == 0, out.stderr
    jobs = [first.split(";")[0], out.stdout.strip().split(";")[0]]
    try:
        states = f"squeue -h -j {','.join(jobs)} -o '%i|%T|%r'"
        _eventually(
            "quinn's first job running, her second waiting for the QoS's limit",
            lambda: sorted(installed.ssh(states).stdout.split()) == sorted(
                [f"{jobs[0]}|RUNNING|None", f"{jobs[1]}|PENDING|QOSMaxJobsPerUserLimit"]),
            timeout=120,
        )  # fmt: skip
        assert installed.ssh(f"scancel {jobs[0]}", key=quinn, user="quinn").returncode == 0
        second = [f"{jobs[1]}|RUNNING|None"]
        _eventually(f"her second job {jobs[1]} running once the first ended",
                    lambda: installed.ssh(states).stdout.split() == second, timeout=120)  # fmt: skip
    finally:
        installed.ssh(f"scancel {' '.join(jobs)}")
    refusals = {"--qos=nosuch": "Invalid qos specification",
                "--account=nosuch": "Invalid account or account/partition combination specified"}  # fmt: skip
    for option, words in refusals.items():
        out = installed.ssh(f"sbatch {option} -o /dev/null --wrap true", key=quinn, user="quinn")
        assert out.returncode != 0 and words in out.stderr, (option, out.stdout, out.stderr)


def test_a_users_job_in_the_bridges_partition_is_refused(installed: Installed) -> None:
    """The bridge's partition (k8s) holds the bridge's placeholders only: an ordinary user's job there is
    refused, saying why, with or without a time limit."""
    key = installed.make_user("rhea")
    for limit in ("", "-t UNLIMITED"):
        out = installed.ssh(f"sbatch -p k8s {limit} -o /dev/null --wrap true", key=key, user="rhea")
        assert out.returncode != 0, out.stdout
        assert "partition k8s takes the bridge's placeholders for Kubernetes pods only" in out.stderr, out.stderr


def _placeholders(installed: Installed, command: str, team: str) -> list[list[str]]:
    """The lines ``command`` (as root on the login node; `JobName|...` ones) prints for ``team``'s placeholder
    jobs (named `k8s:<namespace>/<pod>` for a single pod), split at `|`."""
    lines = installed.ssh(command).stdout.split()
    return [line.split("|") for line in lines if line.startswith(f"k8s:{team}/")]


def test_each_opted_in_namespaces_pods_are_charged_to_its_own_slurm_account(installed: Installed) -> None:
    """Two namespaces opted in to the bridge: each is a Slurm account of its own (k8s-<namespace>, made on
    its own), so a Job's pod in either runs, `squeue` shows its placeholder in its namespace's account
    while it runs, and `sacct -A` once it is done: fair share and an admin's limits apply per team."""
    kube, ns = installed.kube, installed.namespace
    teams = [f"{ns}-blue", f"{ns}-green"]
    image = _image(installed)
    try:
        for team in teams:
            _opt_in(installed, team)
            job = _bridge_job("work", 1, image, "sleep 60", {})
            kube.apply([{**job, "metadata": {"name": "work", "namespace": team}}])
        for team in teams:
            queued = partial(_placeholders, installed, "squeue -h -o '%j|%a|%u'", team)
            [(_, account, user)] = _eventually(f"the placeholder of {team}'s pod in squeue", queued, timeout=240)
            assert (account, user) == (naming.bridge_account(team), naming.BRIDGE_USER)
        for team in teams:
            _eventually(f"the Job in {team} complete", partial(_succeeded, installed, team, "work"), timeout=120)
        sacct = "sacct -a -X -n -P -S now-1hours -o JobName,Account,User -A {}"
        for team, other in zip(teams, reversed(teams), strict=True):
            account = naming.bridge_account(team)
            done = partial(_placeholders, installed, sacct.format(account), team)
            [(_, charged, user)] = _eventually(f"{team}'s placeholder in sacct -A {account}", done, timeout=60)
            assert (charged, user) == (account, naming.BRIDGE_USER)
            assert not _placeholders(installed, sacct.format(naming.bridge_account(other)), team), "charged to another"
    finally:
        for team in teams:
            kube.kubectl("delete", "namespace", team, "--wait=false", check=False)


@pytest.mark.whole_node  # taints the node every installation runs on
def test_a_bridge_pod_never_lands_on_a_node_tainted_against_it_and_runs_once_the_taint_goes(
    installed: Installed,
) -> None:
    """The bridge binds a pod only where kube-scheduler would: with the workers' Kubernetes node tainted
    NoSchedule, a tenant's pod without the toleration waits, saying why, and is never bound; once the admin
    takes the taint off, it runs there."""
    kube, ns = installed.kube, installed.namespace
    team = f"{ns}-tainted"
    node = kube.json("-n", ns, "get", "pod", f"{NAME}-worker-cpu-0")["spec"]["nodeName"]
    taint = "warden.dev/e2e-reserved=others:NoSchedule"
    _opt_in(installed, team)
    try:
        kube.kubectl("taint", "node", node, taint)
        kube.apply([{**_bridge_job("kept", 1, _image(installed), "true", {}),
                     "metadata": {"name": "kept", "namespace": team}}])  # fmt: skip

        def waits() -> bool:
            pods = _pods_of(installed, team, "kept")
            assert not [p for p in pods if p["spec"].get("nodeName")], "bound to the tainted node"
            told = [c.get("message", "") for p in pods for c in p["status"].get("conditions", [])
                    if c["type"] == "PodScheduled" and c["status"] == "False"]  # fmt: skip
            return bool(told) and all("warden.dev/e2e-reserved" in m or "not available" in m for m in told)

        _eventually("the pod waiting, saying why, unbound", waits, timeout=180)
        kube.kubectl("taint", "node", node, f"{taint}-")
        _eventually("the Job complete once the taint went", lambda: _succeeded(installed, team, "kept"), timeout=180)
    finally:
        kube.kubectl("taint", "node", node, f"{taint}-", check=False)
        kube.kubectl("delete", "namespace", team, "--wait=false", check=False)


def test_a_person_added_to_the_directory_after_install_logs_in_and_runs_jobs_as_herself(installed: Installed) -> None:
    """dana is added to the site's LDAP directory after the cluster is up, with an SSH key; nothing is done
    on the cluster. She logs in with that key, lands in a fresh home in the jail, runs a step on two
    nodes and a two-node batch job as her directory uid, and finds it in sacct with its final state."""
    key = new_ssh_key(installed.tmp / "id_dana", "dana")
    uid = 70100
    assert installed.site is not None
    installed.site.run(
        "ldapadd", stdin=directory.user_entries("dana", uid, key.with_suffix(".pub").read_text().strip())
    )

    def dana(command: str) -> subprocess.CompletedProcess[str]:
        return installed.ssh(command, key=key, user="dana")

    first = _eventually("dana's first login", lambda: (lambda r: r if r.returncode == 0 else None)(
        dana("id -u; pwd; stat -c '%u:%g %a' ~; ls -A ~")), timeout=60)  # fmt: skip
    lines = first.stdout.splitlines()
    assert lines[:3] == [str(uid), "/home/dana", f"{uid}:{uid} 700"], first.stdout
    assert ".ssh" not in lines[3:], first.stdout  # the key came from the directory
    out = dana("srun -N2 bash -c 'echo $(hostname) $(id -u)' | sort")
    assert out.returncode == 0, out.stderr
    assert [line.split()[1] for line in out.stdout.splitlines()] == [str(uid), str(uid)], out.stdout
    out = dana("cd && sbatch --parsable -N2 -o dana-%j.out --wrap 'srun id -u'")
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    assert _wait_job(installed, job) == "COMPLETED"
    assert dana(f"stat -c %u ~/dana-{job}.out; sort -u ~/dana-{job}.out").stdout.split() == [str(uid), str(uid)]
    _eventually(
        f"job {job} in dana's sacct",
        lambda: (
            dana(f"sacct -u dana -X -n -P -o JobID,User,State,NNodes -j {job}").stdout.split()
            == [f"{job}|dana|COMPLETED|2"]
        ),
        timeout=60,
    )


def _generation(installed: Installed) -> int:
    return int(installed.kube.json("-n", installed.namespace, "get", "slurmcluster", NAME)["metadata"]["generation"])


def _directory_condition(installed: Installed) -> dict[str, Any]:
    obj = installed.kube.json("-n", installed.namespace, "get", "slurmcluster", NAME)
    return next((c for c in obj["status"].get("conditions", []) if c["type"] == "DirectoryReachable"), {})


def test_the_cluster_says_what_is_wrong_with_its_directory_while_local_users_keep_working(
    installed: Installed,
) -> None:
    """A rotated bind password the cluster was not given, a CA that did not sign the server's
    certificate, a server name that does not resolve: each in the SlurmCluster's DirectoryReachable
    condition and a DirectoryFailing Event naming what fails; root and the jail's users go on."""
    site = installed.site
    assert site is not None
    _eventually("DirectoryReachable", lambda: _directory_condition(installed).get("status") == "True", timeout=90)

    def fails_with(reason: str, words: str) -> None:
        _eventually(
            f"DirectoryReachable {reason}",
            lambda: (lambda c: c.get("status") == "False" and c.get("reason") == reason and words in c["message"])(
                _directory_condition(installed)),
            timeout=90,
        )  # fmt: skip
        assert any(words in m for m in _events(installed, "DirectoryFailing")), _events(installed, "DirectoryFailing")
        out = installed.ssh("srun -N1 id -u")  # root, a local user, is not held up
        assert out.returncode == 0 and out.stdout.strip() == "0", out.stderr

    def works_again() -> None:
        _eventually("DirectoryReachable again", lambda: _directory_condition(installed).get("status") == "True",
                    timeout=90)  # fmt: skip

    good = site.secrets()
    site.set_secret(directory.BIND_SECRET, {**good[directory.BIND_SECRET], naming.IDENTITY_PASSWORD_KEY: "wrong"})
    fails_with("BindFailed", "invalid credentials for cn=reader")
    site.set_secret(directory.BIND_SECRET, good[directory.BIND_SECRET])
    works_again()
    assert _events(installed, "DirectoryReachable")

    site.set_secret(directory.CA_SECRET, {"ca.crt": directory.certificates("someone-else").ca})
    fails_with("TLSFailed", "certificate does not verify")
    site.set_secret(directory.CA_SECRET, good[directory.CA_SECRET])
    works_again()

    before = _generation(installed)
    installed.values["identity"]["ldap"]["uris"] = [f"ldaps://no-such-ldap.{installed.namespace}.svc"]
    installed.helm_upgrade()
    _spec_reconciled(installed, before)
    fails_with("Unreachable", "cannot connect")
    before = _generation(installed)
    installed.values["identity"] = site.values()
    installed.helm_upgrade()
    _spec_reconciled(installed, before)
    works_again()
    # and the directory's users log in again
    key = installed.tmp / "id_dana"
    _eventually("dana logs in again", lambda: installed.ssh("id -u", key=key, user="dana").returncode == 0, timeout=120)


def test_a_directory_groups_partition_an_outage_and_a_person_who_left(installed: Installed) -> None:
    """dana's group `physics` (the site's, made in the directory now) opens a partition to its members only;
    the directory stops for a while and her next job still runs; she is removed from the directory and
    cannot log in once the cache time has passed."""
    site = installed.site
    assert site is not None
    key = installed.tmp / "id_dana"

    def dana(command: str) -> subprocess.CompletedProcess[str]:
        return installed.ssh(command, key=key, user="dana")

    site.run("ldapadd", stdin=directory.group_entry("physics", 71000))
    site.run("ldapmodify", stdin=directory.member_change("physics", "dana"))
    before = _generation(installed)
    installed.values["partitions"] = [
        {"name": "cpu", "workerGroups": ["cpu"], "default": True},
        {"name": "physics", "workerGroups": ["cpu"], "allowGroups": ["physics"]},
    ]
    installed.helm_upgrade()
    _spec_reconciled(installed, before)
    try:
        _eventually("physics admits dana", lambda: dana("srun -p physics id -u").stdout.strip() == "70100",
                    timeout=directory.CACHE_SECONDS + 120, interval=3)  # fmt: skip
        out = installed.ssh("sbatch --parsable -p physics --wrap true")  # root is no member, but root may
        assert out.returncode == 0, out.stderr
        assert _wait_job(installed, out.stdout.strip().split(";")[0]) == "COMPLETED"
        alice = installed.tmp / "id_alice"
        out = installed.ssh("sbatch --parsable -p physics --wrap true", key=alice, user="alice")
        assert out.returncode == 0, out.stderr
        job = out.stdout.strip().split(";")[0]
        why = _eventually("alice's job held back", lambda: (lambda r: r if "not in group permitted" in r else None)(
            installed.ssh(f"squeue -h -j {job} -o '%T %r'").stdout))  # fmt: skip
        assert why.startswith("PENDING"), why
        installed.ssh(f"scancel {job}")
    finally:
        before = _generation(installed)
        del installed.values["partitions"]
        installed.helm_upgrade()
        _spec_reconciled(installed, before)

    # the directory goes away; past the cache time her login and jobs are served from SSSD's cache
    site.unreachable()
    try:
        time.sleep(directory.CACHE_SECONDS + 2)
        out = dana("srun -N2 id -u | sort -u")
        assert out.returncode == 0 and out.stdout.strip() == "70100", (out.stdout, out.stderr)
    finally:
        site.reachable()

    # she leaves: removed from the directory, her login is refused once the cache time has passed
    site.run("ldapdelete", f"uid=dana,{directory.PEOPLE}", f"cn=dana,{directory.GROUPS}")
    _eventually("dana refused", lambda: dana("true").returncode != 0,
                timeout=directory.BACK_ONLINE_SECONDS + directory.CACHE_SECONDS + 120, interval=3)  # fmt: skip


def test_sbatch_on_two_nodes_writes_its_output_into_the_jail(installed: Installed) -> None:
    out = installed.ssh("sbatch --parsable -N2 -o /root/e2e-%j.out --wrap 'srun hostname'")
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    assert _wait_job(installed, job) == "COMPLETED"
    # read through a worker pod's jail volume: the output is on the shared jail, not on one node
    text = installed.kube.kubectl("-n", installed.namespace, "exec", f"{NAME}-worker-cpu-0", "-c", "slurmd", "--",
                                  "cat", f"/mnt/jail/root/e2e-{job}.out")  # fmt: skip
    assert sorted(text.split()) == [f"{NAME}-worker-cpu-0", f"{NAME}-worker-cpu-1"]


def _service_ip(installed: Installed, namespace: str, name: str) -> str:
    return str(installed.kube.json("-n", namespace, "get", "service", name)["spec"]["clusterIP"])


def _pod_ip(installed: Installed, pod: str) -> str:
    return str(installed.kube.json("-n", installed.namespace, "get", "pod", pod)["status"]["podIP"])


def _api_addresses(installed: Installed) -> dict[str, tuple[str, int]]:
    """The Kubernetes API as a pod finds it (the ``kubernetes`` Service) and where it really listens."""
    slices = installed.kube.json("-n", "default", "get", "endpointslices", "-l",
                                 "kubernetes.io/service-name=kubernetes")  # fmt: skip
    endpoint = slices["items"][0]
    return {
        "kubernetes-service": (_service_ip(installed, "default", "kubernetes"), 443),
        "kubernetes-endpoint": (endpoint["endpoints"][0]["addresses"][0], int(endpoint["ports"][0]["port"])),
    }


def test_a_job_step_reaches_slurm_but_neither_the_kubernetes_api_nor_the_database(installed: Installed) -> None:
    """With the policies enforced (the local cluster runs kube-router's firewall): a user's job step opens
    a TCP connection to slurmctld, and to the Kubernetes API (its Service and its real address) and the
    accounting database (its Service and its pod) none within a second: refused or dropped."""
    ns = installed.namespace
    targets = {
        "slurmctld": (_pod_ip(installed, f"{NAME}-controller-0"), naming.SLURMCTLD_PORT),
        **_api_addresses(installed),
        "database-service": (_service_ip(installed, ns, f"{NAME}-mariadb"), naming.MARIADB_PORT),
        "database-pod": (_pod_ip(installed, f"{NAME}-mariadb-0"), naming.MARIADB_PORT),
    }
    probe = "; ".join(
        f"timeout 1 bash -c 'exec 3<>/dev/tcp/{ip}/{port}' 2>/dev/null; echo {name} $?"
        for name, (ip, port) in targets.items()
    )
    key = installed.make_user("netuser")
    out = installed.ssh(f"srun -N1 -w {NAME}-worker-cpu-0 bash -c {shlex.quote(probe)}", user="netuser", key=key)
    assert out.returncode == 0, out.stderr
    codes = dict(line.split() for line in out.stdout.splitlines() if line.strip())
    assert codes.pop("slurmctld") == "0", out.stdout  # the network works: what follows is the policies' doing
    # 1: refused at once; 124: dropped, given up after the second
    assert all(code in ("1", "124") for code in codes.values()), out.stdout
    assert set(codes) == set(targets) - {"slurmctld"}


def test_a_pod_without_the_clusters_labels_reaches_ssh_and_rest_but_no_slurm_daemon(installed: Installed) -> None:
    """Another workload in the namespace (no Warden labels): the login's SSH and the REST API answer it
    (both authenticate every caller), slurmctld, slurmd and the database do not."""
    ns = installed.namespace
    operator = installed.kube.json("-n", ns, "get", "deploy", "-l", "app.kubernetes.io/name=slurm-operator")
    image = operator["items"][0]["spec"]["template"]["spec"]["containers"][0]["image"]
    container = {"name": "main", "image": image, "imagePullPolicy": "IfNotPresent",
                 "command": ["python3", "-c", "import time; time.sleep(3600)"]}  # fmt: skip
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "stranger", "namespace": ns, "labels": {"app": "stranger"}},
        "spec": {"containers": [container], "terminationGracePeriodSeconds": 0},
    }
    installed.kube.apply([pod])
    try:
        installed.kube.kubectl("-n", ns, "wait", "--for=condition=Ready", "pod/stranger", "--timeout=120s",
                               timeout=150)  # fmt: skip
        targets = {
            "ssh": (_service_ip(installed, ns, f"{NAME}-login"), naming.SSH_PORT),
            "rest": (_service_ip(installed, ns, f"{NAME}-restapi"), naming.RESTAPI_PORT),
            "slurmctld": (_pod_ip(installed, f"{NAME}-controller-0"), naming.SLURMCTLD_PORT),
            "slurmd": (_pod_ip(installed, f"{NAME}-worker-cpu-0"), naming.SLURMD_PORT),
            "database": (_pod_ip(installed, f"{NAME}-mariadb-0"), naming.MARIADB_PORT),
        }
        probe = (
            "import socket, sys\n"
            "for name, ip, port in zip(*[iter(sys.argv[1:])] * 3):\n"
            "    try:\n"
            "        socket.create_connection((ip, int(port)), timeout=1).close(); print(name, 'open')\n"
            "    except OSError as e:\n"
            "        print(name, type(e).__name__)\n"
        )
        argv = [w for name, (ip, port) in targets.items() for w in (name, ip, str(port))]
        out = installed.kube.kubectl("-n", ns, "exec", "stranger", "--", "python3", "-c", probe, *argv)
        said = dict(line.split() for line in out.splitlines())
        assert said == {"ssh": "open", "rest": "open", "slurmctld": said["slurmctld"], "slurmd": said["slurmd"],
                        "database": said["database"]}, out  # fmt: skip
        assert all(said[k] in ("ConnectionRefusedError", "TimeoutError") for k in ("slurmctld", "slurmd", "database"))
    finally:
        installed.kube.kubectl("-n", ns, "delete", "pod", "stranger", "--wait=false", check=False)


def _test_registry(installed: Installed) -> str:
    """The test registry, seeded with warden/test-image (tests/support/registry.py), as a Deployment and a
    Service in the cluster's namespace; returns the image reference a user passes to --container-image."""
    image = registry.seeded_image()
    if not os.environ.get("KUBECONFIG"):
        LocalCluster().import_images([image])
    labels = {"app.kubernetes.io/name": "test-registry"}
    ready = {"httpGet": {"path": "/v2/", "port": 5000}, "periodSeconds": 1}
    pod = {"containers": [{"name": "registry", "image": image, "imagePullPolicy": "IfNotPresent",
                           "ports": [{"containerPort": 5000}], "readinessProbe": ready}]}  # fmt: skip
    installed.kube.apply([
        {"apiVersion": "apps/v1", "kind": "Deployment",
         "metadata": {"name": "test-registry", "namespace": installed.namespace, "labels": labels},
         "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": pod}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "test-registry", "namespace": installed.namespace},
         "spec": {"selector": labels, "ports": [{"port": 5000, "targetPort": 5000}]}},
        # what docs/security.md tells a user with a registry of their own in the cluster: a policy of theirs
        # lets job steps reach it (policies add up; Warden's own let jobs reach no other pod)
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
         "metadata": {"name": "jobs-pull-from-test-registry", "namespace": installed.namespace},
         "spec": {"podSelector": {"matchLabels": {"app.kubernetes.io/instance": NAME,
                                                  "app.kubernetes.io/component": "worker"}},
                  "policyTypes": ["Egress"],
                  "egress": [{"to": [{"podSelector": {"matchLabels": labels}}], "ports": [{"port": 5000}]}]}},
    ])  # fmt: skip
    installed.kube.kubectl("-n", installed.namespace, "rollout", "status", "deployment/test-registry",
                           "--timeout=120s", timeout=150)  # fmt: skip
    return f"test-registry.{installed.namespace}:5000#{registry.IMAGE_PATH}:{registry.TAG}"


def test_a_user_runs_a_step_on_two_nodes_in_a_container_image(installed: Installed) -> None:
    """`srun -N2 --container-image=...` from the login node, the image pulled by each worker from a
    registry in the cluster: both tasks see the image's OS release and the user's home from the jail."""
    reference = _test_registry(installed)
    carol = installed.make_user("carol")
    installed.ssh("echo carols-home > ~/where", user="carol", key=carol)
    script = "echo $(hostname) $(id -un); grep PRETTY_NAME /etc/os-release; cat ~/where"
    out = installed.ssh(f"srun -N2 --container-image={reference} bash -c {shlex.quote(script)}",
                        user="carol", key=carol, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert sorted(line for line in lines if line.endswith(" carol")) == [
        f"{NAME}-worker-cpu-0 carol", f"{NAME}-worker-cpu-1 carol"], out.stdout  # fmt: skip
    assert lines.count('PRETTY_NAME="Warden test image 1.0"') == 2 and lines.count("carols-home") == 2, out.stdout

    def carol_runs(script: str) -> str:
        done = installed.ssh(script, user="carol", key=carol, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    # a batch script in the image (`#` starts a comment in #SBATCH lines: the REGISTRY/IMAGE form) writes
    # into her home in the jail
    slash = reference.replace("#", "/", 1)
    batch = f"#!/bin/bash\n#SBATCH --container-image={slash}\ngrep PRETTY_NAME /etc/os-release > ~/from-batch\n"
    job = carol_runs(f"cat > ~/ctr.sbatch <<'EOF'\n{batch}EOF\ncd && sbatch --parsable ctr.sbatch").strip()
    assert _wait_job(installed, job) == "COMPLETED"
    assert "Warden test image" in carol_runs("cat ~/from-batch")
    # a jail path mounted read-only; a named container kept for the job's next step; no namespaces inside
    carol_runs("mkdir -p ~/dataset && echo row-1 > ~/dataset/part-0")
    mounted = carol_runs(f"srun --container-image={reference} --container-mounts=$HOME/dataset:/data:ro "
                         "sh -c 'cat /data/part-0; touch /data/x 2>/dev/null || echo read-only'")  # fmt: skip
    assert mounted.split() == ["row-1", "read-only"], mounted
    steps = (f"srun --container-name=work --container-image={reference} --container-writable "
             "sh -c 'echo kept > /kept'; srun --container-name=work cat /kept; "
             "srun --container-name=work sh -c 'unshare -U true 2>/dev/null; echo userns=$?'")  # fmt: skip
    kept = carol_runs(f"salloc -N1 bash -c {shlex.quote(steps)}")
    assert "kept" in kept.split() and "userns=1" in kept.split(), kept


def _needs_gpus(installed: Installed) -> None:
    if not installed.gpus:
        pytest.skip(f"the cluster under test (KUBECONFIG) offers no {FAKE_GPU_RESOURCE}")


def test_ssh_key_added_by_helm_upgrade_logs_in_without_restarting_login(installed: Installed, tmp_path: Path) -> None:
    """A second authorized key in the values: the login pod (same pod) lets it in once the kubelet has
    refreshed the mounted ConfigMap; the first key still works."""
    kube, ns = installed.kube, installed.namespace
    login_uid = kube.json("-n", ns, "get", "pod", f"{NAME}-login-0")["metadata"]["uid"]
    key2 = new_ssh_key(tmp_path / "second", "warden-e2e-2")
    assert installed.ssh("true", key=key2).returncode != 0, "an unknown key got in"
    installed.values["login"]["sshAuthorizedKeys"].append(key2.with_suffix(".pub").read_text().strip())
    installed.helm_upgrade()
    deadline = time.monotonic() + 240  # the kubelet refreshes ConfigMap volumes about once a minute
    out = installed.ssh("id -un", key=key2)
    while out.returncode != 0 and time.monotonic() < deadline:
        time.sleep(5)
        out = installed.ssh("id -un", key=key2)
    assert out.returncode == 0 and out.stdout.strip() == "root", out.stderr
    assert installed.ssh("id -un").stdout.strip() == "root"
    assert kube.json("-n", ns, "get", "pod", f"{NAME}-login-0")["metadata"]["uid"] == login_uid


def test_second_user_a_minute_later_and_a_group_added_to_a_user_who_ran_jobs(installed: Installed) -> None:
    """A second user made a minute after the first works the same; a group made later, with both
    users in it, is in their next login and, within seconds, in their job steps (slurmctld caches each
    user's groups for GroupUpdateTime)."""
    before = installed.restarts()
    wait = 60 - (time.monotonic() - installed.users_made_at["alice"])
    if wait > 0:
        time.sleep(wait)
    bob = installed.make_user("bob")
    _user_runs_jobs(installed, "bob", bob)

    out = installed.ssh("groupadd e2e-lab && usermod -aG e2e-lab alice && usermod -aG e2e-lab bob")
    assert out.returncode == 0, out.stderr
    alice = installed.tmp / "id_alice"
    assert sorted(installed.ssh("id -Gn", user="alice", key=alice).stdout.split()) == ["alice", "e2e-lab"]
    deadline = time.monotonic() + 60
    groups: list[str] = []
    while time.monotonic() < deadline:
        out = installed.ssh("srun -N1 id -Gn", user="alice", key=alice)
        groups = sorted(out.stdout.split())
        if groups == ["alice", "e2e-lab"]:
            break
        time.sleep(2)
    assert groups == ["alice", "e2e-lab"], out.stderr
    assert installed.restarts() == before, "a pod was restarted or replaced"


def test_a_users_batch_files_outside_home_land_in_the_jail(installed: Installed) -> None:
    """alice's batch job names its working directory, output, error and input under the jail's
    /var/tmp (not mounted in the worker containers, unlike /home), an array names %A_%a files, two
    jobs append to one file, one writes into the node-local /tmp: every file is in the jail, hers,
    with what the job saw and wrote; no worker container has the directory; an output directory she
    cannot make fails the job. sgather is in the jail too (seff only on 24.11: Debian's 26.05 Perl API
    is built for another Perl, docs/images.md)."""
    alice = installed.tmp / "id_alice"
    work = f"/var/tmp/e2e-io-{uuid.uuid4().hex[:8]}"

    def as_alice(command: str, input: str | None = None) -> str:
        out = installed.ssh(command, user="alice", key=alice, timeout=180, input=input)
        assert out.returncode == 0, f"{command}: {out.stderr}"
        return out.stdout

    as_alice(f"mkdir -p {work}/made && cat > {work}/in.txt", input="from the login node\n")
    script = "cat; pwd; id -un; echo to-stderr >&2"
    job = as_alice(f"sbatch -W --parsable -D {work}/made -o {work}/made/o-%j.out -e {work}/new/e-%j.err "
                   f"-i {work}/in.txt --wrap {shlex.quote(script)}").strip()  # fmt: skip
    assert as_alice(f"cat {work}/made/o-{job}.out").splitlines() == ["from the login node", f"{work}/made", "alice"]
    assert as_alice(f"cat {work}/new/e-{job}.err").strip() == "to-stderr"
    assert as_alice(f"stat -c %U {work}/made/o-{job}.out {work}/new/e-{job}.err").split() == ["alice", "alice"]

    array = as_alice(f"sbatch -W --parsable -a 1-2 -o {work}/arr/%A_%a.out --wrap 'echo $SLURM_ARRAY_TASK_ID'").strip()
    assert as_alice(f"cat {work}/arr/{array}_1.out {work}/arr/{array}_2.out").split() == ["1", "2"]
    for word in ("first", "second"):
        as_alice(f"sbatch -W --open-mode=append -o {work}/made/log.out --wrap 'echo {word}'")
    assert as_alice(f"cat {work}/made/log.out").split() == ["first", "second"]

    node = f"{NAME}-worker-cpu-0"
    # /tmp is the job's own (localMounts perJob): a later step of the job reads its output there
    local = as_alice(f"sbatch -W --parsable -w {node} -o /tmp/e2e-io-%j.out --wrap "
                     f"'echo node-local; srun cat /tmp/e2e-io-$SLURM_JOB_ID.out > {work}/local'").strip()  # fmt: skip
    assert local.isdigit() and as_alice(f"cat {work}/local").strip() == "node-local"

    failed = installed.ssh(f"sbatch -W --parsable -o /{work.rsplit('/', 1)[1]}/o.out --wrap true",
                           user="alice", key=alice, timeout=180)  # fmt: skip
    assert failed.returncode != 0, failed.stdout
    assert _wait_job(installed, failed.stdout.strip().split(";")[0]) == "FAILED"

    for pod in (f"{NAME}-worker-cpu-0", f"{NAME}-worker-cpu-1"):
        look = f"for p in {work} /{work.rsplit('/', 1)[1]}; do test -e $p && echo present $p; done; echo looked"
        seen = installed.kube.kubectl("-n", installed.namespace, "exec", pod, "-c", "slurmd", "--", "sh", "-c", look)
        assert seen.split() == ["looked"], f"{pod}: {seen}"
    assert "Usage: sgather" in as_alice("sgather --usage")
    as_alice(f"rm -rf {work}")


#: the login pod's own sshd, as the login pod reaches it: a forward that works reads its banner
FORWARD_TARGET = "127.0.0.1:22"
BANNER = "SSH-2.0-"


def _sh(script: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=timeout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_ordinary_users_ssh_forwards_nothing_while_sessions_scp_and_sftp_work(installed: Installed) -> None:
    """What someone with a login key tried (issue 26), through the login Service: `ssh -W` and `ssh -L`
    (connections made by the login pod: to slurmctld, the kubelet, the API server...), `ssh -R` (a port
    listening in the login pod) and `ssh -A` (their agent inside the jail) are refused, for root too;
    commands, a terminal, scp (both protocols) and sftp into the user's home work."""
    key = installed.tmp / "id_alice"
    ip, port = installed.login_address()
    dest = f"alice@{ip}"
    ssh = shlex.join(["ssh", *installed.ssh_options(key, log_level="INFO"), "-p", str(port)])

    for who, command in ((dest, ssh), (f"root@{ip}", shlex.join(["ssh", *installed.ssh_options(log_level="INFO"),
                                                                  "-p", str(port)]))):  # fmt: skip
        w = _sh(f"sleep 3 | timeout 30 {command} -W {FORWARD_TARGET} {who}")
        assert BANNER not in w.stdout and w.returncode == 255, (who, w)
        assert "administratively prohibited" in w.stderr and "stdio forwarding failed" in w.stderr, (who, w)

    local, err = _free_port(), installed.tmp / "local-forward.err"
    connect = f"exec 3<>/dev/tcp/127.0.0.1/{local}"
    forwarded = _sh(f"""
        {ssh} -N -L 127.0.0.1:{local}:{FORWARD_TARGET} {dest} 2>{err} & pid=$!
        for _ in $(seq 1 300); do bash -c {shlex.quote(connect)} 2>/dev/null && break; sleep 0.1; done
        echo "through=$(timeout 10 bash -c {shlex.quote(connect + "; head -c 8 <&3")})"
        kill $pid; wait $pid; cat {err} >&2
    """)
    # the client listened (its connection was accepted), and what came through it: nothing
    assert forwarded.stdout.split() == ["through="], forwarded
    assert "administratively prohibited" in forwarded.stderr, forwarded

    remote = 20000 + uuid.uuid4().int % 10000
    listens = f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{remote}' 2>/dev/null && echo port=open || echo port=closed"
    r = _sh(f"timeout 60 {ssh} -o ExitOnForwardFailure=yes -R 127.0.0.1:{remote}:{FORWARD_TARGET} {dest} "
            f"{shlex.quote(listens)}")  # fmt: skip
    assert "port=open" not in r.stdout and r.returncode == 255, r
    assert f"remote port forwarding failed for listen port {remote}" in r.stderr, r

    agent = _sh(f"""
        eval "$(ssh-agent -s)" >/dev/null && ssh-add -q {shlex.quote(str(key))} || exit 99
        timeout 60 {ssh} -A {dest} 'echo "agent=${{SSH_AUTH_SOCK:-none}}"'; rc=$?
        ssh-agent -k >/dev/null; exit $rc
    """)
    assert agent.returncode == 0 and "agent=none" in agent.stdout.split(), agent

    # what stays: commands, a terminal, scp and sftp
    assert installed.ssh("id -un", key=key, user="alice").stdout.strip() == "alice"
    tty = _sh(f"timeout 60 {shlex.join(['ssh', *installed.ssh_options(key), '-p', str(port)])} -tt {dest} tty")
    assert tty.stdout.strip().startswith("/dev/pts/"), tty
    tag = uuid.uuid4().hex[:8]
    up = installed.tmp / f"up-{tag}"
    up.write_text(f"payload-{tag}\n")
    back = [installed.tmp / f"{how}-{tag}" for how in ("scp", "old", "sftp")]
    scp = shlex.join(["scp", *installed.ssh_options(key), "-P", str(port)])
    sftp = shlex.join(["sftp", *installed.ssh_options(key), "-P", str(port), "-b", "-", dest])
    copied = _sh(f"""
        set -e
        {scp} {up} {dest}:scp-{tag} && {scp} {dest}:scp-{tag} {back[0]}
        {scp} -O {up} {dest}:scp-old-{tag} && {scp} -O {dest}:scp-old-{tag} {back[1]}
        printf 'put {up} sftp-{tag}\\nget sftp-{tag} {back[2]}\\n' | {sftp} >/dev/null
    """)
    assert copied.returncode == 0, copied
    assert [p.read_text() for p in back] == [f"payload-{tag}\n"] * 3
    inside = installed.ssh(f"cat ~/scp-{tag} ~/scp-old-{tag} ~/sftp-{tag}", key=key, user="alice")
    assert inside.stdout.split() == [f"payload-{tag}"] * 3, inside


def test_a_user_does_not_see_another_users_jobs(installed: Installed) -> None:
    """Jobs are private by default (`slurmConfig.privateData: [jobs, usage]`): bob does not see alice's job
    in squeue, scontrol show job or slurmrestd with his own token, while alice and root do."""
    alice, bob = installed.tmp / "id_alice", installed.tmp / "id_bob"
    name = f"private-{uuid.uuid4().hex[:6]}"
    out = installed.ssh(f"sbatch --parsable --hold -J {name} --wrap 'echo not for bob'", key=alice, user="alice")
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    url = f"http://{NAME}-restapi:6820/slurm/v0.0.42/jobs"
    rest = ('TOKEN=$(scontrol token lifespan=300 | cut -d= -f2) && '
            f'curl -sf -H "X-SLURM-USER-NAME: $USER" -H "X-SLURM-USER-TOKEN: $TOKEN" {url}')  # fmt: skip

    def rest_jobs(key: Path, user: str) -> set[int]:
        r = installed.ssh(rest, key=key, user=user)
        assert r.returncode == 0, r.stderr
        return {int(j["job_id"]) for j in json.loads(r.stdout)["jobs"]}

    try:
        listing = "squeue -h -o '%i %j %u'"
        assert f"{job} {name} alice" in installed.ssh(listing, key=alice, user="alice").stdout.splitlines()
        assert f"{job} {name} alice" in installed.ssh(listing).stdout.splitlines()
        seen = installed.ssh(listing, key=bob, user="bob")
        assert seen.returncode == 0 and job not in seen.stdout.split() and name not in seen.stdout, seen
        shown = installed.ssh(f"scontrol show job {job}", key=bob, user="bob")
        assert shown.returncode != 0 and name not in shown.stdout + shown.stderr, shown
        assert int(job) in rest_jobs(alice, "alice")
        assert int(job) not in rest_jobs(bob, "bob")
    finally:
        installed.ssh(f"scancel {job}", key=alice, user="alice")


IO_URING_PROBE = (
    "import ctypes, errno; libc = ctypes.CDLL(None, use_errno=True); p = ctypes.create_string_buffer(120); "
    "r = libc.syscall(ctypes.c_long(425), ctypes.c_long(1), p); "
    "print('io_uring_setup', 'fd' if r >= 0 else errno.errorcode[ctypes.get_errno()])"
)


def test_an_ordinary_users_traps_are_refused_and_the_cluster_keeps_serving(installed: Installed) -> None:
    """What an ordinary user tries for more than they were given, on the real cluster, in the order they
    would (docs/security.md): a link at ~/.ssh/authorized_keys to a root file, then root adds a key the
    documented way (refused, the file stays root's); a task epilog that makes a user namespace (refused
    under the step's filter); io_uring in a step; a file left in /tmp for the next job (the job's own
    tmpfs, gone); a ten-year token (Slurm refuses it); another user's command line in `ps` (hidden). Each
    time the user's next job runs."""
    alice, bob = installed.tmp / "id_alice", installed.tmp / "id_bob"
    tag = uuid.uuid4().hex[:8]
    probe = f"/etc/warden-e2e-probe-{tag}"

    def as_alice(command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return installed.ssh(command, key=alice, user="alice", timeout=timeout)

    # 1. a link where root writes: warden-useradd refuses it, naming it, and the root file is untouched
    assert installed.ssh(f"echo root-only > {probe} && chmod 0644 {probe}").returncode == 0
    planted = as_alice(f"cp ~/.ssh/authorized_keys ~/.ak-{tag} && ln -sfn {probe} ~/.ssh/authorized_keys")
    assert planted.returncode == 0, planted.stderr
    extra = new_ssh_key(installed.tmp / f"id_extra_{tag}", "extra").with_suffix(".pub").read_text().strip()
    add = installed.ssh(f"warden-useradd --key {shlex.quote(extra)} alice")
    assert add.returncode != 0 and "refusing /home/alice/.ssh/authorized_keys" in add.stderr, add
    assert "symbolic link" in add.stderr, add.stderr
    after = installed.ssh(f"stat -c '%U %a' {probe} && cat {probe}").stdout.split()
    assert after == ["root", "644", "root-only"], after
    # the user's way back: root removes the link and gives her key again the documented way
    own = (installed.tmp / "id_alice.pub").read_text().strip()
    back = installed.ssh(f"rm /home/alice/.ssh/authorized_keys && warden-useradd --key {shlex.quote(own)} alice")
    assert back.returncode == 0, back.stderr
    assert as_alice("id -un").stdout.strip() == "alice"

    try:
        # 2. a task epilog of her own runs under the step's filter: no user namespace
        verdict = f"$HOME/epi-{tag}"
        script = f"#!/bin/sh\nunshare -Ur true 2>/dev/null && echo open > {verdict} || echo refused > {verdict}\n"
        written = installed.ssh(
            f"cat > ~/epi-{tag}.sh && chmod 0755 ~/epi-{tag}.sh", key=alice, user="alice", input=script
        )
        assert written.returncode == 0, written.stderr
        assert as_alice(f"srun -N1 --task-epilog=$HOME/epi-{tag}.sh true").returncode == 0
        said = _eventually("the task epilog's verdict", lambda: as_alice(f"cat ~/epi-{tag} 2>/dev/null").stdout.strip())
        assert said == "refused", said

        # 3. io_uring from a step
        uring = as_alice(f"srun -N1 python3 -c {shlex.quote(IO_URING_PROBE)}")
        assert uring.stdout.strip() == "io_uring_setup EPERM", uring

        # 4. /tmp is the job's own tmpfs, no larger than the job's memory, and what it leaves is gone
        node = f"{NAME}-worker-cpu-0"
        fill = f"df -P -k /tmp | tail -1; stat -f -c %T /tmp; head -c 1048576 /dev/zero > /tmp/left-{tag}"
        first = as_alice(f"srun -N1 -w {node} sh -c {shlex.quote(fill)}")
        assert first.returncode == 0, first
        usage, fstype = first.stdout.strip().splitlines()[-2:]
        assert fstype == "tmpfs", first.stdout
        memory = as_alice(f"scontrol show node {node} -o").stdout
        real = int(dict(f.split("=", 1) for f in memory.split() if "=" in f)["RealMemory"])
        assert int(usage.split()[1]) <= real * 1024, (usage, real)
        second = as_alice(f"srun -N1 -w {node} sh -c 'ls /tmp/left-{tag} 2>&1 || true'")
        assert "No such file" in second.stdout, second

        # 5. a token for ten years: Slurm refuses it, a short one is issued
        long = as_alice("scontrol token lifespan=315360000")
        assert long.returncode != 0 and "SLURM_JWT=" not in long.stdout, long
        assert as_alice("scontrol token lifespan=600").stdout.startswith("SLURM_JWT=")

        # 6. another user's command line is not hers to read
        secret = f"--secret-token={tag}"
        as_alice(f"setsid -f bash -c {shlex.quote(f'sleep 120; : {secret}')} </dev/null >/dev/null 2>&1")
        _eventually("alice sees her own process", lambda: secret in as_alice("ps -eo args=").stdout)
        assert secret in installed.ssh("ps -eo args=").stdout
        assert secret not in installed.ssh("ps -eo args=", key=bob, user="bob").stdout

        # and after all of it the cluster serves her
        out = as_alice("srun -N1 id -un")
        assert out.returncode == 0 and out.stdout.strip() == "alice", out
    finally:
        installed.ssh(f"rm -f {probe} /home/alice/epi-{tag} /home/alice/epi-{tag}.sh /home/alice/.ak-{tag}; "
                      f"pkill -u alice -f -- secret-token={tag} || true")  # fmt: skip


def _controller_pod(installed: Installed) -> tuple[str, int]:
    pod = installed.kube.json("-n", installed.namespace, "get", "pod", f"{NAME}-controller-0")
    restarts = sum(c.get("restartCount", 0) for c in pod["status"].get("containerStatuses", []))
    return pod["metadata"]["uid"], restarts


def test_slurm_config_change_reaches_every_daemon_in_place(installed: Installed) -> None:
    """`slurmConfig.extraLines` changed by `helm upgrade` with a job running: slurmctld shows the new
    value within seconds, the workers' slurmd and the login node run with the new file, no pod is
    replaced or restarted, and the job completes. Then the config ConfigMap deleted by hand is back
    within seconds, without a spec edit."""
    kube, ns = installed.kube, installed.namespace
    before = _controller_pod(installed)
    workers_before = {p: r for p, r in installed.restarts().items() if "-worker-" in p}
    out = installed.ssh("sbatch --parsable -o /root/across-%j.out --wrap 'sleep 25; echo done'")
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]

    installed.values["slurmConfig"] = {"extraLines": ["MessageTimeout=17"]}
    t0 = time.monotonic()
    installed.helm_upgrade()

    def timed(what: str, check: Callable[[], bool], timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f}s"
            time.sleep(0.5)
        return time.monotonic() - t0

    def shows_new_value() -> bool:
        out = installed.ssh("scontrol show config | grep -E '^MessageTimeout'").stdout
        return "17 sec" in out

    worker = f"{NAME}-worker-cpu-0"

    def worker_has_file() -> bool:
        conf = kube.kubectl("-n", ns, "exec", worker, "-c", "slurmd", "--", "cat", "/etc/slurm/slurm.conf")
        return "MessageTimeout=17" in conf

    ctld = timed("slurmctld running with the new value", shows_new_value, 120)
    wrk = timed(f"{worker}'s slurmd with the new slurm.conf", worker_has_file, 120)
    login = timed(
        "the login node's slurm.conf",
        lambda: "MessageTimeout=17" in installed.ssh("cat /etc/slurm/slurm.conf").stdout,
        120,
    )
    # what every slurmd runs: the new stamp, recorded by each once it started with the files (warden.slurm.confighash)
    stamp = confighash.of_text(kube.json("-n", ns, "get", "configmap", f"{NAME}-slurm-config")["data"]["slurm.conf"])

    def all_run_it() -> bool:
        c = _condition(kube, ns, NAME, "SlurmConfigRunning")
        return c.get("status") == "True" and stamp in c.get("message", "")

    running = timed(f"SlurmConfigRunning: every slurmd runs {stamp}", all_run_it, 120)
    print(f"\nhelm upgrade (extraLines) to: slurmctld {ctld:.1f}s, worker slurm.conf {wrk:.1f}s, login {login:.1f}s,"
          f" every slurmd recorded running it {running:.1f}s")  # fmt: skip
    assert _controller_pod(installed) == before, "slurmctld's pod was replaced or restarted"
    # no worker's slurmd died of the reload (a SIGHUP while slurmd executed itself anew ended it, status 129)
    assert {p: r for p, r in installed.restarts().items() if "-worker-" in p} == workers_before
    assert _wait_job(installed, job) == "COMPLETED"
    assert installed.ssh(f"cat /root/across-{job}.out").stdout.strip() == "done"

    # self-healing: the ConfigMap deleted by hand comes back as it was
    cm = f"{NAME}-slurm-config"
    data = kube.json("-n", ns, "get", "configmap", cm)["data"]
    kube.kubectl("-n", ns, "delete", "configmap", cm)
    t0 = time.monotonic()

    def back() -> bool:
        obj = kube.json_if_found("-n", ns, "get", "configmap", cm)
        return bool(obj.get("data") == data)

    took = timed(f"ConfigMap {cm} back", back, 60)
    print(f"deleted ConfigMap back after {took:.1f}s")
    assert _controller_pod(installed) == before


def test_a_slurm_config_change_slurm_refuses_is_never_applied_and_the_fix_is(installed: Installed) -> None:
    """A value Slurm refuses (`DefMemPerCPU=lots`) in `slurmConfig.extraLines`, with a user's job running:
    Slurm's own check refuses it before any daemon sees it, the SlurmCluster's condition and a Warning Event
    carry Slurm's words, the job keeps running, no node is drained or down, squeue answers throughout and
    slurmctld is never restarted. The corrected spec is checked and applied in place."""
    kube, ns = installed.kube, installed.namespace
    before = _controller_pod(installed)
    out = installed.ssh("sbatch --parsable -o /root/refused-%j.out --wrap 'sleep 150; echo done'")
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    _eventually(f"job {job} running", lambda: installed.ssh(f"squeue -h -j {job} -o %T").stdout.strip() == "RUNNING")
    kept = list((installed.values.get("slurmConfig") or {}).get("extraLines", []))

    installed.values["slurmConfig"] = {"extraLines": [*kept, "DefMemPerCPU=lots"]}
    installed.helm_upgrade()

    def refused() -> dict[str, Any] | None:
        c = _condition(kube, ns, NAME, "SlurmConfigAccepted")
        return c if c.get("reason") == "SlurmRefusedConfig" else None

    condition = _eventually("SlurmConfigAccepted: SlurmRefusedConfig", refused, 240, interval=2)
    assert condition["status"] == "False"
    assert "DefMemPerCPU value (lots) is not a valid number" in condition["message"], condition
    assert any("DefMemPerCPU value (lots)" in m for m in _events(installed, "SlurmRefusedConfig"))
    # the last good configuration runs on: the pods' files, the job, the nodes, the queue
    conf = kube.json("-n", ns, "get", "configmap", f"{NAME}-slurm-config")["data"]["slurm.conf"]
    assert "DefMemPerCPU=lots" not in conf
    squeue = installed.ssh(f"squeue -h -j {job} -o %T")
    assert squeue.returncode == 0 and squeue.stdout.strip() == "RUNNING", squeue
    states = installed.ssh("sinfo -h -N -o '%N %t'")
    assert states.returncode == 0, states
    assert not [line for line in states.stdout.splitlines() if any(s in line for s in ("drain", "down", "drng"))], (
        states.stdout
    )
    assert _controller_pod(installed) == before, "slurmctld's pod was replaced or restarted"

    # the fix: checked, then applied in place
    installed.values["slurmConfig"] = {"extraLines": [*kept, "MaxJobCount=20000"]}
    installed.helm_upgrade()
    _eventually(
        "slurmctld running with the fix",
        lambda: "20000" in installed.ssh("scontrol show config | grep -E '^MaxJobCount'").stdout,
        180,
        interval=2,
    )
    _eventually(
        "SlurmConfigAccepted True", lambda: _condition(kube, ns, NAME, "SlurmConfigAccepted").get("status") == "True"
    )
    # slurmctld takes the fix with Slurm's reconfigure (it re-executes itself): a squeue in that moment may
    # get no answer (CI saw an empty one once), so the job's state is read once squeue answers again
    state = _eventually(
        f"squeue answering for job {job} after the reconfigure",
        lambda: ((r := installed.ssh(f"squeue -h -j {job} -o %T")).returncode == 0 and r.stdout.strip()) or None,
        60,
    )
    assert state == "RUNNING", state
    assert _controller_pod(installed) == before
    assert "Restarts=0" in installed.ssh(f"scontrol show job {job}").stdout, "the job was requeued"
    assert _wait_job(installed, job, timeout=240) == "COMPLETED"


def _features(installed: Installed) -> dict[str, set[str]]:
    out = installed.ssh("sinfo -N -h -o '%N %f'")
    return {n: set(f.split(",")) for n, f in (line.split() for line in out.stdout.splitlines() if " " in line)}


def test_node_labels_become_features_and_blocks_that_jobs_keep_to(installed: Installed) -> None:
    """spec.topology (blocks) and spec.nodeLabelFeatures set by `helm upgrade` on the running cluster, and
    labels put on its Kubernetes node: `sinfo` shows each worker's zone as a feature and `--constraint`
    selects by it, `scontrol show topology` names the node's block with the workers in it, and a job
    asking for `--segment=2` runs on two nodes of it. Taken away again: every node's place goes, the
    zone feature too once the label is gone, and slurmctld was never restarted."""
    kube, ns = installed.kube, installed.namespace
    before = _controller_pod(installed)
    block_label, zone_label = "example.com/nvlink-domain", "topology.kubernetes.io/zone"
    k8s_node = kube.json("get", "nodes")["items"][0]["metadata"]["name"]
    workers = [f"{NAME}-worker-cpu-0", f"{NAME}-worker-cpu-1"]
    kube.kubectl("label", "node", k8s_node, "--overwrite", f"{block_label}=nvl-e2e", f"{zone_label}=e2e-a")
    try:
        installed.values["topology"] = {"block": {"label": block_label, "blockSizes": [2]}}
        installed.values["nodeLabelFeatures"] = [{"label": zone_label, "prefix": "zone-"}]
        installed.helm_upgrade()
        _eventually(
            "the zone feature on both workers",
            lambda: all("zone-e2e-a" in _features(installed).get(w, set()) for w in workers),
            timeout=120,
        )
        assert all("warden-group-cpu" in _features(installed)[w] for w in workers)

        def in_block() -> str:
            out = installed.ssh("scontrol show topology").stdout
            line = next((x for x in out.splitlines() if x.startswith("BlockName=nvl-e2e ")), "")
            nodes = line.split("Nodes=", 1)[1].split()[0] if "Nodes=" in line else ""
            names = installed.ssh(f"scontrol show hostnames {nodes}").stdout.split() if nodes else []
            return line if set(workers) <= set(names) else ""

        line = _eventually("scontrol show topology to put both workers in block nvl-e2e", in_block, timeout=120)
        assert "BlockSize=2" in line, line
        for w in workers:
            assert "Topology=default:nvl-e2e" in installed.ssh(f"scontrol show node {w}").stdout

        # a constraint by the label's value runs; one no node has is refused at once
        out = installed.ssh("sbatch --parsable -N1 --constraint=zone-e2e-a -o /dev/null --wrap true")
        assert out.returncode == 0, out.stderr
        assert _wait_job(installed, out.stdout.strip().split(";")[0]) == "COMPLETED"
        out = installed.ssh("sbatch --parsable -N1 --constraint=zone-elsewhere -o /dev/null --wrap true")
        assert out.returncode != 0 and "feature" in out.stderr.lower(), (out.stdout, out.stderr)
        # two nodes in one segment of the block
        out = installed.ssh("sbatch --parsable -N2 --segment=2 -o /dev/null --wrap 'srun hostname'")
        assert out.returncode == 0, out.stderr
        job = out.stdout.strip().split(";")[0]
        assert _wait_job(installed, job) == "COMPLETED"
        shown = dict(f.split("=", 1) for f in installed.ssh(f"scontrol show job -o {job}").stdout.split() if "=" in f)
        assert shown.get("SegmentSize") == "2", shown
        ran = set(installed.ssh(f"scontrol show hostnames {shown['NodeList']}").stdout.split())
        assert ran == set(workers), shown["NodeList"]
        status = kube.json("-n", ns, "get", "slurmcluster", NAME)["status"]["slurmNodes"]["topology"]
        assert status["plugin"] == "topology/block" and status["blocks"].get("nvl-e2e", 0) >= 2, status
        assert status["features"].get("zone-e2e-a", 0) >= 2 and status["unplaced"] == [], status
    finally:
        installed.values.pop("topology", None)
        installed.values.pop("nodeLabelFeatures", None)
        installed.helm_upgrade()
        kube.kubectl("label", "node", k8s_node, f"{block_label}-", f"{zone_label}-")
    # every place taken back (Slurm keeps them in its state otherwise), and status says nothing of it
    _eventually("no worker placed any more",
                lambda: all("Topology=" not in installed.ssh(f"scontrol show node {w}").stdout for w in workers),
                timeout=120)  # fmt: skip
    _eventually(
        "status.slurmNodes.topology gone",
        lambda: "topology" not in kube.json("-n", ns, "get", "slurmcluster", NAME)["status"]["slurmNodes"],
        timeout=60,
    )
    removed = time.monotonic()
    _eventually(
        "slurmctld reconfigured without the block topology",
        lambda: "topology/block" not in installed.ssh("scontrol show config | grep -i '^TopologyPlugin'").stdout,
        timeout=120,
    )
    print(f"\ntopology removed: slurmctld without it after {time.monotonic() - removed:.1f}s more")
    assert _controller_pod(installed) == before, "slurmctld's pod was replaced or restarted"


def test_gpu_group_added_by_helm_upgrade_is_usable_from_the_same_login(installed: Installed) -> None:
    """A GPU group, its partition and the NCCL check added to the running cluster: the new workers join
    Slurm with their GPUs (gres), and the login pod and slurmctld, neither restarted, follow the new
    slurm.conf (the login's clients then know the `gpu` partition and gres type)."""
    _needs_gpus(installed)
    kube, ns = installed.kube, installed.namespace
    login_uid = kube.json("-n", ns, "get", "pod", f"{NAME}-login-0")["metadata"]["uid"]
    controller = _controller_pod(installed)
    _add_gpu_group(installed.values)
    installed.helm_upgrade()
    workers = 2 + GPU_NODES
    deadline = time.monotonic() + 300
    status: dict[str, Any] = {}
    while time.monotonic() < deadline:
        obj = kube.json("-n", ns, "get", "slurmcluster", NAME)
        status = obj.get("status", {})
        current = status.get("observedGeneration") == obj["metadata"]["generation"]
        if current and status.get("phase") == "Ready" and status.get("workers") == f"{workers}/{workers}":
            break
        time.sleep(3)
    assert (status.get("phase"), status.get("workers")) == ("Ready", f"{workers}/{workers}"), status

    want = {f"{NAME}-worker-gpu-{i}": f"gpu:fake:{GPUS_PER_NODE}" for i in range(GPU_NODES)}
    deadline = time.monotonic() + 240  # the kubelet refreshes ConfigMap volumes about once a minute
    nodes: dict[str, str] = {}
    config = ""
    while time.monotonic() < deadline:
        config = installed.ssh("cat /etc/slurm/slurm.conf").stdout
        out = installed.ssh("sinfo -h -N -p gpu -o '%N %G %t'").stdout
        nodes = {f[0]: f[1].split("(")[0] for f in map(str.split, out.splitlines()) if f[2:] == ["idle"]}
        if "PartitionName=gpu" in config and nodes == want:
            break
        time.sleep(5)
    assert nodes == want, "the GPU workers did not join with their gres"
    assert "GresTypes=gpu" in config and "PartitionName=gpu" in config, config
    assert kube.json("-n", ns, "get", "pod", f"{NAME}-login-0")["metadata"]["uid"] == login_uid
    assert _controller_pod(installed) == controller, "slurmctld's pod was replaced or restarted"


def test_gpus_job_on_the_gpu_group_completes(installed: Installed) -> None:
    """`--gpus=1` in the GPU partition: Slurm gives the step one of the node's gres GPUs. All the device
    files the kubelet's device plugin put into the worker pod are visible inside the jail, and the job's
    devices cgroup lets the step open only its own (the stand-ins are character devices (195, N) that
    no driver owns: ENXIO when allowed, EPERM when denied)."""
    _needs_gpus(installed)
    probe = (
        "echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES; for d in /dev/nvidia[0-9]*; do "
        'if msg=$( (exec 3<"$d") 2>&1 ); then echo "$d=open"; else echo "$d=${msg##*: }"; fi; done'
    )
    script = f"#!/bin/sh\nsrun sh -c {shlex.quote(probe)}\n"
    out = installed.ssh("sbatch --parsable -p gpu --gpus=1 -o /root/gpu-%j.out", input=script)
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip().split(";")[0]
    assert _wait_job(installed, job) == "COMPLETED"
    cvd, *lines = installed.ssh(f"cat /root/gpu-{job}.out").stdout.strip().splitlines()
    opened = dict(line.split("=", 1) for line in lines)
    fields = dict(f.split("=", 1) for f in installed.ssh(f"scontrol show job -o {job}").stdout.split() if "=" in f)
    node = fields["NodeList"]
    assert fields["Partition"] == "gpu" and node.startswith(f"{NAME}-worker-gpu-")
    # the device plugin keeps the host's numbers (two pods of 2 GPUs each never both hold /dev/nvidia0):
    # the node's gres.conf line names the pod's own files, and CUDA counts from 0 among them
    look = "ls /dev | grep -E '^nvidia[0-9]+$' | sed 's|^|/dev/|' | sort -V; grep ^NodeName= /etc/slurm/gres.conf"
    pod = installed.kube.kubectl("-n", installed.namespace, "exec", node, "-c", "slurmd", "--", "sh", "-c", look)
    *devices, gres_line = pod.strip().splitlines()
    assert len(devices) == GPUS_PER_NODE, pod
    assert gres_line == f"NodeName={node} Name=gpu Type=fake File={','.join(devices)}", pod
    assert cvd in {f"CUDA_VISIBLE_DEVICES={i}" for i in range(GPUS_PER_NODE)}, cvd
    assert sorted(opened) == sorted(devices), lines  # the pod's GPUs are all there; the step uses one
    assert sorted(opened.values()) == ["No such device or address"] + ["Operation not permitted"] * (
        GPUS_PER_NODE - 1
    ), lines


#: A CUDA program's first steps, through ctypes in the jail's python3: libcuda.so.1 by soname (nothing
#: set by the user), its stand-in version, and the file the loader mapped.
CUDA_PROBE = (
    "import ctypes, os; c = ctypes.CDLL('libcuda.so.1'); v = ctypes.c_int(); c.cuDriverGetVersion(ctypes.byref(v)); "
    "p = next(l.split()[-1] for l in open('/proc/self/maps') if 'libcuda' in l); "
    "n = (ctypes.c_char * 40).in_dll(c, 'warden_fake_driver_version').value.decode(); "
    "print(os.uname().nodename, n, v.value, p)"
)


def _driver_versions(installed: Installed) -> dict[str, str]:
    """The stand-in driver version the device plugin gave each GPU worker, by pod (in ordinal order)."""
    nodes = [f"{NAME}-worker-gpu-{i}" for i in range(GPU_NODES)]
    return {
        n: installed.kube.kubectl("-n", installed.namespace, "exec", n, "-c", "slurmd", "--",
                                  "cat", "/run/warden/driver/version").strip()
        for n in nodes
    }  # fmt: skip


def test_gpu_steps_load_their_own_nodes_driver_and_cpu_steps_none(installed: Installed) -> None:
    """The device plugin gave each GPU worker a stand-in driver, two versions in turn (one laid out as
    GKE does, one as NVIDIA's toolkit does): alice's job step on both nodes at once loads each node's
    own libcuda and runs its own nvidia-smi, a CPU step finds none, and the jail volume holds no driver."""
    _needs_gpus(installed)
    kube, ns = installed.kube, installed.namespace
    given = _driver_versions(installed)
    nodes = list(given)
    assert len(set(given.values())) == GPU_NODES, given
    alice = installed.tmp / "id_alice"
    step = f"srun -p gpu -N{GPU_NODES} -w {','.join(nodes)}"
    out = installed.ssh(f'{step} python3 -c "{CUDA_PROBE}"', key=alice, user="alice")
    assert out.returncode == 0, out.stderr
    seen = {f[0]: f[1:] for f in map(str.split, out.stdout.splitlines())}
    for node in nodes:
        version, _cuda, path = seen[node]
        assert version == given[node] and path == f"/usr/lib/warden/driver/lib/libcuda.so.{version}", seen
    # each node's own nvidia-smi, on PATH (tasks are numbered in slurmctld's node order: name each)
    smi = installed.ssh(f"{step} sh -c 'echo $(hostname) $(nvidia-smi | grep Driver)'", key=alice, user="alice")
    lines = set(smi.stdout.splitlines())
    assert lines == {f"{node} Driver Version: {given[node]}" for node in nodes}, smi
    cpu = installed.ssh(f'srun -p cpu python3 -c "{CUDA_PROBE}"', key=alice, user="alice")
    assert cpu.returncode != 0 and "libcuda.so.1: cannot open shared object file" in cpu.stderr, cpu
    look = "find /mnt/jail -xdev -name 'libcuda*' -o -xdev -name 'libnvidia-*'; ls -A /mnt/jail/usr/lib/warden/driver"
    on_volume = kube.kubectl("-n", ns, "exec", f"{NAME}-worker-cpu-0", "-c", "slurmd", "--", "sh", "-c", look)
    assert on_volume.split() == [], on_volume


def test_a_gpu_step_in_a_container_loads_its_own_nodes_driver(installed: Installed) -> None:
    """The same on both GPU workers in a container image (which carries no driver): each task loads its
    node's own stand-in libcuda, found through the container's loader cache."""
    _needs_gpus(installed)
    given = _driver_versions(installed)
    nodes = list(given)
    reference = _test_registry(installed)
    alice = installed.tmp / "id_alice"
    step = f"srun -p gpu -N{GPU_NODES} -w {','.join(nodes)} --gpus-per-node=1 --container-image={reference}"
    out = installed.ssh(f'{step} python3 -c "{CUDA_PROBE}"', key=alice, user="alice", timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    seen = {f[0]: f[1:] for f in map(str.split, out.stdout.splitlines()) if len(f) == 4}
    for node in nodes:
        version, _cuda, path = seen[node]
        assert version == given[node] and path == f"/usr/lib/warden/driver/lib/libcuda.so.{version}", seen


def test_users_can_write_no_runtime_file_in_sessions_or_job_steps(installed: Installed) -> None:
    """The kubelet binds a world-writable file at every container's terminationMessagePath and reports
    what it holds when the container ends: every container of the release has it in its own /run, where
    the kubelet put it, and none in the /dev the login shows its sessions. alice walks every mount of an
    SSH session and of job steps (on a GPU node too: its driver's binds) and may write only the reviewed
    places (tests/support/jailmounts.py); /dev/termination-log is not there to open."""
    kube, ns = installed.kube, installed.namespace
    pods = kube.json("-n", ns, "get", "pods", "-l", INSTANCE)["items"]
    paths = {(p["metadata"]["name"], c["name"]): c.get("terminationMessagePath")
             for p in pods for c in p["spec"].get("initContainers", []) + p["spec"]["containers"]}  # fmt: skip
    assert set(paths.values()) == {naming.TERMINATION_LOG}, paths
    for pod, container in ((f"{NAME}-login-0", "sshd"), (f"{NAME}-worker-cpu-0", "slurmd")):
        look = f"test -f {naming.TERMINATION_LOG} && echo present; ls /mnt/jail/dev"
        listed = kube.kubectl("-n", ns, "exec", pod, "-c", container, "--", "sh", "-c", look).split()
        assert listed[0] == "present" and "termination-log" not in listed, (pod, listed)

    key = installed.tmp / "id_alice"
    saved = installed.ssh("cat > ~/mountprobe.py", input=jailmounts.PROBE, key=key, user="alice")
    assert saved.returncode == 0, saved.stderr
    probe = jailmounts.probe_command("/home/alice/mountprobe.py")
    runs = {"an SSH session": probe}
    for part in ("cpu", "gpu") if installed.gpus else ("",):
        runs[f"a job step ({part or 'default'} partition)"] = f"srun {f'-p {part} ' if part else ''}-N1 {probe}"
    for what, command in runs.items():
        out = installed.ssh(command, key=key, user="alice", timeout=180)
        assert out.returncode == 0, (what, out.stderr)
        report = jailmounts.Report.parse(out.stdout)
        assert report.user != 0, what
        seen = report.mount_points()
        assert {"/", "/dev", "/dev/pts", "/proc", "/etc/hosts", naming.SLURM_RUN_DIR} <= seen, (what, sorted(seen))
        assert jailmounts.problems(report) == [], what
        assert report.termination_log == {"open": "No such file or directory", "create": "Permission denied"}, what


def test_health_check_job_drains_the_slow_gpu_node(installed: Installed) -> None:
    """A Job made from the CronJob runs all_reduce_perf (stand-in) on both GPU nodes: the slow one is
    drained with Warden's reason in `sinfo -R`, the fast one stays, and the SlurmCluster's status lists
    the drained node."""
    _needs_gpus(installed)
    kube, ns = installed.kube, installed.namespace
    fast, slow = f"{NAME}-worker-gpu-0", f"{NAME}-worker-gpu-1"
    setup = (f"install -m 0755 /dev/stdin /usr/local/bin/all_reduce_perf && mkdir -p {STANDIN_DIR} && "
             f"echo 180 > {STANDIN_DIR}/{fast} && echo 20 > {STANDIN_DIR}/{slow}")  # fmt: skip
    out = installed.ssh(setup, input=STANDIN.read_text())
    assert out.returncode == 0, out.stderr

    job = "nccl-check-now"
    kube.kubectl("-n", ns, "create", "job", job, f"--from=cronjob/{NAME}-nccl-check")
    done = kube.kubectl("-n", ns, "wait", f"job/{job}", "--for=condition=Complete", "--timeout=400s",
                        check=False, timeout=420)  # fmt: skip
    log = kube.kubectl("-n", ns, "logs", f"job/{job}", check=False)
    assert "condition met" in done, log[-3000:]

    # what an admin reads (%100E: Warden's reasons run to 100 characters, the default width cuts them)
    sinfo = installed.ssh("sinfo -R -N -h -o '%N|%100E'").stdout
    reasons = {node.strip(): reason.strip() for node, reason in (line.split("|", 1) for line in sinfo.splitlines())}
    want = f"warden-health: nccl all_reduce_perf busbw 20.0 GB/s < {MIN_BUSBW:.1f} GB/s"
    assert reasons == {slow: want}, log[-3000:]
    calls = [json.loads(c) for c in installed.ssh(f"cat {STANDIN_DIR}/calls.jsonl").stdout.splitlines()]
    assert sorted(c["host"] for c in calls) == [fast, slow]
    assert all(c["in_jail"] and c["cuda_visible_devices"] == "0,1" for c in calls), calls

    deadline = time.monotonic() + 60
    health: dict[str, Any] = {}
    while time.monotonic() < deadline:
        health = kube.json("-n", ns, "get", "slurmcluster", NAME)["status"].get("healthCheck", {})
        if health.get("drained"):
            break
        time.sleep(2)
    assert health.get("drained") == [{"node": slow, "reason": want}], health
    assert (health["nodesChecked"], health["nodesPassed"]) == (2, 1)
    events = kube.json("-n", ns, "get", "events", "--field-selector", "reason=NodeDrained")["items"]
    assert any(e["message"] == f"{slow}: {want}" for e in events), [e["message"] for e in events]


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _scrape_annotated(installed: Installed) -> dict[str, tuple[set[str], Samples]]:
    """Every Service of the release's namespace that asks to be scraped (`prometheus.io/scrape`), scraped
    at its `prometheus.io/port` and `path` on each pod behind it (its Endpoints, through the apiserver's
    pod proxy), the way an annotation-following Prometheus finds them, and parsed with the Prometheus
    client's parser: {service: (family names, samples)}, or {service/pod: ...} for a Service of several
    pods (the operator's leader and its standby)."""
    kube, ns = installed.kube, installed.namespace
    out = {}
    for svc in kube.json("-n", ns, "get", "services")["items"]:
        notes = svc["metadata"].get("annotations") or {}
        if notes.get("prometheus.io/scrape") != "true":
            continue
        name, port, path = svc["metadata"]["name"], notes["prometheus.io/port"], notes.get("prometheus.io/path", "/")
        subsets = kube.json("-n", ns, "get", "endpoints", name).get("subsets") or []
        pods = [(a["targetRef"]["name"], p["port"]) for s in subsets for a in s.get("addresses", [])
                for p in s.get("ports", []) if str(p["port"]) == str(port) or p.get("name") == "metrics"]  # fmt: skip
        if len(pods) <= 1:
            out[name] = _scrape(
                kube.kubectl("get", "--raw", f"/api/v1/namespaces/{ns}/services/{name}:{port}/proxy{path}")
            )
            continue
        for pod, pod_port in pods:
            out[f"{name}/{pod}"] = _scrape(
                kube.kubectl("get", "--raw", f"/api/v1/namespaces/{ns}/pods/{pod}:{pod_port}/proxy{path}")
            )
    return out


def _scrape(text: str) -> tuple[set[str], Samples]:
    parsed = list(text_string_to_metric_families(text))
    # a family's series names by its type (a labelled counter nothing has counted yet is still served)
    families = exposed_names(parsed) | {s.name for f in parsed for s in f.samples}
    samples = {(s.name, frozenset(s.labels.items())): s.value for f in parsed for s in f.samples}
    return families, samples


def _sample(samples: Samples, name: str, **labels: str) -> float | None:
    hits = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls]
    assert len(hits) <= 1, f"{name}{labels}: {len(hits)} samples"
    return hits[0] if hits else None


def test_metrics_endpoints_show_a_job_a_drain_and_the_health_check(installed: Installed) -> None:
    """What Prometheus and the shipped dashboard read: the exporter and the operator, found by their scrape
    annotations and scraped on the real cluster. A job runs and a person drains a node: the matching
    series say so. With GPUs, the NCCL check that drained the slow node (the test before) shows in both:
    the node's reason class, and its bus bandwidth and result per node."""
    kube, ns = installed.kube, installed.namespace
    scraped = _scrape_annotated(installed)
    exporter = f"{NAME}-exporter"
    # of the operator's replicas, the one acting (warden_operator_leading 1); the standby serves its 0
    leading = {s: _sample(samples, "warden_operator_leading") for s, (_, samples) in scraped.items()}
    operators = [s for s, (families, _) in scraped.items() if "warden_reconciles_total" in families and leading[s] == 1]
    standby = [s for s in scraped if leading[s] == 0]
    assert exporter in scraped and len(operators) == 1 and len(standby) == 1, sorted(scraped)
    cluster = f"{ns}/{NAME}"
    slurm, ops = scraped[exporter][1], scraped[operators[0]][1]
    assert _sample(slurm, "slurm_up", slurm_cluster=cluster) == 1
    assert (_sample(ops, "warden_reconciles_total", slurm_cluster=cluster, outcome="complete") or 0) >= 1
    # every series the shipped dashboard queries is served by one of them
    served = set().union(*(families for families, _ in scraped.values()))
    used = {name for _, expr in dashboard_expressions(load_dashboard()) for name in promql_metric_names(expr)}
    assert used - served == set(), f"the dashboard queries series nobody serves: {sorted(used - served)}"

    person = f"{NAME}-worker-cpu-1"
    submitted = installed.ssh("sbatch --parsable -p cpu -w " + f"{NAME}-worker-cpu-0 --wrap 'sleep 300'")
    job = submitted.stdout.strip()
    assert submitted.returncode == 0 and job.isdigit(), submitted.stdout + submitted.stderr
    drain = installed.ssh(f"scontrol update nodename={person} state=drain reason='e2e: metrics, ticket 9'")
    assert drain.returncode == 0, drain.stderr
    try:

        def shown() -> Samples | None:
            # one scrape reads the nodes and the jobs one after the other: a job that starts in between is
            # running in the jobs' series before its CPUs show in the nodes', so wait for both
            samples = _scrape_annotated(installed)[exporter][1]
            running = _sample(samples, "slurm_jobs", partition="cpu", state="running") or 0
            allocated = _sample(samples, "slurm_partition_cpus_allocated", partition="cpu") or 0
            held = _sample(samples, "slurm_node_reason", node=person, reason_class="person")
            return samples if running >= 1 and allocated >= 1 and held == 1 else None

        samples = _eventually("the job running, its CPUs and the drain in the exporter's series", shown, timeout=90)
        assert _sample(samples, "slurm_node_reason", node=person, reason="e2e: metrics, ticket 9") == 1
        assert (_sample(samples, "slurm_nodes", worker_group="cpu", state="drained", reason_class="person") or 0) >= 1
        if installed.gpus:
            fast, slow = f"{NAME}-worker-gpu-0", f"{NAME}-worker-gpu-1"
            assert _sample(samples, "slurm_node_state", node=slow, reason_class="health_check") == 1
            ops = _scrape_annotated(installed)[operators[0]][1]
            assert _sample(ops, "warden_nccl_bus_bandwidth_gbps", slurm_cluster=cluster, node=slow) == 20.0
            assert _sample(ops, "warden_nccl_bus_bandwidth_gbps", slurm_cluster=cluster, node=fast) == 180.0
            assert _sample(ops, "warden_nccl_check_passed", slurm_cluster=cluster, node=slow) == 0
            assert _sample(ops, "warden_nccl_check_passed", slurm_cluster=cluster, node=fast) == 1
            assert (_sample(ops, "warden_health_check_node_actions_total", slurm_cluster=cluster,
                            action="drained") or 0) >= 1  # fmt: skip
            age = _sample(ops, "warden_nccl_seconds_since_last_run", slurm_cluster=cluster, node=fast)
            assert age is not None and 0 <= age < 3600, age
    finally:
        installed.ssh(f"scancel {job}; scontrol update nodename={person} state=resume")
    _eventually(f"{person} back in service", lambda: person not in _sinfo_reasons(installed), timeout=30)
    assert kube.json("-n", ns, "get", "deployment", exporter)["status"].get("readyReplicas") == 1


def test_scaled_up_workers_join_slurm(installed: Installed) -> None:
    installed.values["workerGroups"][0]["replicas"] = 3
    installed.helm_upgrade()
    want = {f"{NAME}-worker-cpu-{i}" for i in range(3)}
    deadline = time.monotonic() + 300
    idle: set[str] = set()
    while time.monotonic() < deadline:
        out = installed.ssh("sinfo -h -N -p cpu -o '%N %t'" if installed.gpus else "sinfo -h -N -o '%N %t'")
        idle = {line.split()[0] for line in out.stdout.splitlines() if line.split()[1:] == ["idle"]}
        if idle == want:
            break
        time.sleep(3)
    assert idle == want
    out = installed.ssh("srun -N3 hostname")
    assert out.returncode == 0, out.stderr
    assert set(out.stdout.split()) == want


def _job_states(installed: Installed) -> dict[str, str]:
    """Every job slurmctld knows, finished ones included (kept MinJobAge, 300 s), by id."""
    out = installed.ssh("squeue -h -t all -o '%i %T'")
    return dict(line.split() for line in out.stdout.splitlines()) if out.returncode == 0 else {}


def test_controller_pod_deleted_keeps_the_queue_and_jobs_complete(installed: Installed) -> None:
    """slurmctld's pod deleted with jobs running and queued: the StatefulSet makes a new one, whose
    slurmctld reads its saved state (StateSaveLocation on its PVC) and has the same jobs; all complete."""
    kube, ns = installed.kube, installed.namespace
    jobs = []
    for _ in range(5):  # three one-CPU workers: three run, two wait
        out = installed.ssh("sbatch --parsable -o /root/requeue-%j.out --wrap 'sleep 20; echo done'")
        assert out.returncode == 0, out.stderr
        jobs.append(out.stdout.strip().split(";")[0])
    deadline = time.monotonic() + 60
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        out = installed.ssh(f"squeue -h -o '%i %T' -j {','.join(jobs)}")
        states = dict(line.split() for line in out.stdout.splitlines())
        if "RUNNING" in states.values():
            break
        time.sleep(1)
    assert set(states) == set(jobs) and "RUNNING" in states.values() and "PENDING" in states.values(), states

    pod = f"{NAME}-controller-0"
    old_uid = kube.json("-n", ns, "get", "pod", pod)["metadata"]["uid"]
    kube.kubectl("-n", ns, "delete", "pod", pod, "--wait=false")
    deadline = time.monotonic() + 180
    ready = False
    while time.monotonic() < deadline and not ready:
        obj = kube.json_if_found("-n", ns, "get", "pod", pod)
        conds = {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions", [])}
        ready = obj.get("metadata", {}).get("uid", old_uid) != old_uid and conds.get("Ready") == "True"
        if not ready:
            time.sleep(1)
    assert ready, f"{pod} not regenerated and Ready within 180s"

    # the new slurmctld answers with the same jobs (from its saved state: none lost, none under a new id)
    deadline = time.monotonic() + 60
    known: dict[str, str] = {}
    while time.monotonic() < deadline and not known:
        known = _job_states(installed)
        time.sleep(1)
    assert set(jobs) <= set(known), known

    deadline = time.monotonic() + 240
    final: dict[str, str] = {}
    while time.monotonic() < deadline:
        final = {j: s for j, s in _job_states(installed).items() if j in jobs}
        if set(final) == set(jobs) and all(s in JOB_ENDED for s in final.values()):
            break
        time.sleep(3)
    assert final == dict.fromkeys(jobs, "COMPLETED")
    # each job's own output is there, whole; slurmstepd may add its own lines ("[time] error: ... failed:
    # ...") while it could not reach slurmctld: the controller's DNS name points at the gone pod's address
    # for the DNS cache's time (30 s here), and an enforcing network plugin turns those attempts into
    # timeouts rather than refusals
    for job in jobs:
        text = installed.ssh(f"cat /root/requeue-{job}.out").stdout
        own = [line for line in text.splitlines() if not line.startswith(("[", "slurmstepd:"))]
        assert own == ["done"], (job, text)


def _controller_condition(installed: Installed) -> dict[str, Any]:
    status = installed.kube.json("-n", installed.namespace, "get", "slurmcluster", NAME).get("status", {})
    return next((c for c in status.get("conditions", []) if c["type"] == "ControllerReady"), {})


def test_a_stuck_controller_is_reported_then_restarted_by_its_liveness_probe(installed: Installed) -> None:
    """slurmctld stopped in its tracks (SIGSTOP: it still listens, its port still takes connections, as
    with the lock a user's REST call once left held): the SlurmCluster says so (ControllerReady False,
    SlurmctldUnresponsive, a Warning Event), its liveness probe restarts the container, and users get
    the cluster back by themselves with its queue: a job queued before is still there, sbatch works."""
    kube, ns = installed.kube, installed.namespace
    pod = f"{NAME}-controller-0"
    held = installed.ssh("sbatch --parsable --hold --wrap true")
    assert held.returncode == 0, held.stderr
    job = held.stdout.strip().split(";")[0]
    restarts = installed.restarts()[pod]
    t0 = time.monotonic()
    kube.kubectl("-n", ns, "exec", pod, "-c", "slurmctld", "--", "sh", "-c",
                 f"kill -STOP $(cat {naming.SLURM_RUN_DIR}/slurmctld.pid)")  # fmt: skip
    cond = _eventually(
        "ControllerReady False: SlurmctldUnresponsive",
        lambda: (c := _controller_condition(installed)).get("reason") == "SlurmctldUnresponsive" and c,
        timeout=90,
    )
    assert cond["status"] == "False" and "did not answer" in cond["message"], cond
    _eventually("a SlurmctldUnresponsive Event", lambda: _events(installed, "SlurmctldUnresponsive"), timeout=30)
    _eventually(
        "the liveness probe restarting slurmctld's container",
        lambda: installed.restarts().get(pod, ("", 0))[1] > restarts[1],
        timeout=240,
        interval=3,
    )
    assert installed.restarts()[pod][0] == restarts[0], "the pod was replaced, not its container restarted"
    accepted = _eventually(
        "a user's sbatch accepted again",
        lambda: (r := installed.ssh("sbatch --parsable --wrap true")).returncode == 0 and r,
        timeout=180,
        interval=3,
    )
    print(f"\nslurmctld stopped -> a user's sbatch accepted again: {time.monotonic() - t0:.0f}s")
    assert accepted.stdout.strip()
    assert job in _job_states(installed), "the queue was lost"
    _eventually("ControllerReady True again", lambda: _controller_condition(installed).get("status") == "True", 60)
    _eventually("a SlurmctldResponsive Event", lambda: _events(installed, "SlurmctldResponsive"), timeout=30)
    installed.ssh(f"scancel {job}")


def _worker_pods(installed: Installed) -> list[str]:
    """The cpu group's worker pods that are not on their way out."""
    pods = installed.kube.json("-n", installed.namespace, "get", "pods", "-l",
                               f"{INSTANCE},{naming.WORKER_GROUP_LABEL}=cpu")["items"]  # fmt: skip
    return sorted(p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp"))


def _cpu_nodes(installed: Installed) -> dict[str, str]:
    out = installed.ssh("sinfo -h -N -p cpu -o '%N %t'" if installed.gpus else "sinfo -h -N -o '%N %t'")
    return dict(line.split() for line in out.stdout.splitlines())


def test_scale_in_frees_the_idle_node_then_the_one_whose_job_ends_first(installed: Installed) -> None:
    """Replicas 3 -> 1 with a short job on ordinal 0, a long one on ordinal 2, and ordinal 1 idle (a
    StatefulSet would remove 1 and 2 and kill the long job). The idle node goes at once, the short
    job's node once that job has ended, and the long job's node stays: both jobs complete with their
    output, and `sinfo` lists only the node that stays (no DOWN leftovers)."""
    w = [f"{NAME}-worker-cpu-{i}" for i in range(3)]
    part = "-p cpu " if installed.gpus else ""
    jobs = {}
    for node, minutes, sleep in ((w[0], 1, 25), (w[2], 3, 50)):
        out = installed.ssh(f"sbatch --parsable {part}-w {node} -t {minutes} -o /root/scalein-%j.out "
                            f"--wrap 'sleep {sleep}; echo kept on $(hostname)'")  # fmt: skip
        assert out.returncode == 0, out.stderr
        jobs[node] = out.stdout.strip().split(";")[0]
    _eventually("both jobs running", lambda: {_job_states(installed).get(j) for j in jobs.values()} == {"RUNNING"})
    installed.values["workerGroups"][0]["replicas"] = 1
    installed.helm_upgrade()

    _eventually(f"the idle {w[1]} gone", lambda: w[1] not in _worker_pods(installed), timeout=60)
    assert _job_states(installed).get(jobs[w[0]]) == "RUNNING", "the idle node went first, while both jobs ran"
    assert _sinfo_reasons(installed).get(w[0], "").startswith("warden: scale-in"), "drained: no new job there"
    assert w[2] in _worker_pods(installed) and not _sinfo_reasons(installed).get(w[2])
    assert _wait_job(installed, jobs[w[0]]) == "COMPLETED"
    _eventually(f"{w[0]} gone once its job ended", lambda: _worker_pods(installed) == [w[2]], timeout=60)
    assert _job_states(installed).get(jobs[w[2]]) == "RUNNING", "the long job is untouched"
    assert _wait_job(installed, jobs[w[2]]) == "COMPLETED"
    for node, job in jobs.items():
        assert installed.ssh(f"cat /root/scalein-{job}.out").stdout.strip() == f"kept on {node}"
    _eventually("sinfo lists only the node that stays", lambda: _cpu_nodes(installed) == {w[2]: "idle"}, timeout=60)
    deleted = _events(installed, "ScaledIn")
    assert any(m.startswith(f"{w[1]}: deleted: drained and idle") for m in deleted), deleted
    assert any(m.startswith(f"{w[0]}: deleted: drained and idle") for m in deleted), deleted
    out = installed.ssh("srun -N1 -p cpu hostname" if installed.gpus else "srun -N1 hostname")
    assert out.returncode == 0 and out.stdout.strip() == w[2], out.stderr


def test_kubectl_scale_takes_an_autoscaled_group_to_zero_and_back_and_a_job_queued_at_zero_runs(
    installed: Installed,
) -> None:
    """What an HPA or KEDA does: the group marked `autoscaled` (its `replicas`, 2, now only its starting
    size and its hidden capacity), `kubectl scale workerset` 2 -> 0 -> 2. A job submitted at zero waits
    in the queue and runs once the nodes are back; the operator never puts the size back."""
    kube, ns = installed.kube, installed.namespace
    ws = f"{NAME}-worker-cpu"
    before = kube.json("-n", ns, "get", "slurmcluster", NAME)["metadata"]["generation"]
    installed.values["workerGroups"][0].update(autoscaled=True, replicas=2)
    installed.helm_upgrade()
    _spec_reconciled(installed, before)  # the WorkerSet applied from the new spec
    assert kube.json("-n", ns, "get", "workerset", ws)["spec"]["replicas"] == 1, "an existing group keeps its size"
    kube.kubectl("-n", ns, "scale", "workerset", ws, "--replicas=2")
    _eventually("two cpu nodes idle", lambda: sorted(_cpu_nodes(installed).values()) == ["idle", "idle"], timeout=180)
    kube.kubectl("-n", ns, "scale", "workerset", ws, "--replicas=0")
    _eventually("no cpu worker pods", lambda: _worker_pods(installed) == [], timeout=90)
    _eventually("no cpu nodes in Slurm", lambda: _cpu_nodes(installed) == {}, timeout=60)
    part = "-p cpu " if installed.gpus else ""
    out = installed.ssh(f"sbatch --parsable {part}-N2 -o /root/atzero-%j.out --wrap 'srun hostname'")
    assert out.returncode == 0, f"a job submitted at zero is queued, not refused: {out.stderr}"
    job = out.stdout.strip().split(";")[0]

    def held() -> str | None:
        """slurmctld's reason for keeping the job waiting, once its scheduler has looked at it."""
        out = installed.ssh(f"squeue -h -j {job} -o '%T %r'")
        if out.returncode != 0:
            return None
        state, _, reason = out.stdout.strip().partition(" ")
        assert state == "PENDING", f"job {job} {state or 'gone'} with no cpu node: it must wait in the queue"
        return reason if reason not in ("", "None") else None

    _eventually(f"slurmctld holding job {job} in the queue (a pending reason)", held, timeout=120, interval=2)
    kube.kubectl("-n", ns, "scale", "workerset", ws, "--replicas=2")
    assert _wait_job(installed, job, timeout=300) == "COMPLETED"
    ran = installed.ssh(f"cat /root/atzero-{job}.out").stdout.split()
    assert sorted(ran) == [f"{ws}-0", f"{ws}-1"], ran
    assert kube.json("-n", ns, "get", "workerset", ws)["spec"]["replicas"] == 2, "the operator left the size be"
    groups = {g["name"]: g for g in kube.json("-n", ns, "get", "slurmcluster", NAME)["status"]["workerGroups"]}
    assert groups["cpu"]["replicas"] == 2, groups


def _spec_reconciled(installed: Installed, before: int, timeout: float = 120) -> dict[str, Any]:
    """After a `helm upgrade` that changed the spec (its generation was ``before``): the SlurmCluster
    once the operator has reconciled the new spec (status.observedGeneration at the new generation)."""

    def caught_up() -> dict[str, Any] | None:
        obj: dict[str, Any] = installed.kube.json("-n", installed.namespace, "get", "slurmcluster", NAME)
        generation = obj["metadata"]["generation"]
        assert generation > before, "helm upgrade did not change the SlurmCluster's spec"
        return obj if obj.get("status", {}).get("observedGeneration") == generation else None

    got: dict[str, Any] = _eventually("status.observedGeneration at the new spec's generation", caught_up, timeout)
    return got


def _jail_claim(installed: Installed) -> dict[str, Any] | None:
    pvcs = installed.kube.json("-n", installed.namespace, "get", "pvc")["items"]
    return next((p for p in pvcs if p["metadata"]["name"] == f"{NAME}-jail"), None)


def _condition(kube: Kube, namespace: str, name: str, type_: str) -> dict[str, Any]:
    obj = kube.json("-n", namespace, "get", "slurmcluster", name)
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == type_), {})


def _pull_secret(kube: Kube, namespace: str, server: str, password: str) -> None:
    secret = kube.kubectl("-n", namespace, "create", "secret", "docker-registry", "regcred",
                          f"--docker-server={server}", "--docker-username=warden", f"--docker-password={password}",
                          "--dry-run=client", "-o", "json")  # fmt: skip
    kube.kubectl("apply", "-f", "-", input=secret)


def test_a_pod_that_cannot_pull_with_a_wrong_pull_secret_is_named_in_status_and_events_until_it_is_fixed(
    installed: Installed,
) -> None:
    """A registry that wants a password (the test's own container beside the node, on loopback) holds the
    exporter's image; a second, small SlurmCluster pulls with a pull secret of the wrong password: its
    ImagesPulled condition names the pod and image, an ImagePullFailed Event carries the kubelet's 401;
    with the right password the pod pulls and the condition clears. Its pull policy (Always) reaches the
    kubelet: an image the node holds is pulled again."""
    if os.environ.get("KUBECONFIG"):
        pytest.skip("the password registry runs beside the local cluster's node (loopback)")
    kube, ns = installed.kube, installed.namespace
    version = project_version()
    port = 5001
    server = f"127.0.0.1:{port}"
    image = f"{server}/warden/operator:{version}"
    container = f"warden-e2e-pull-{uuid.uuid4().hex[:6]}"
    hosts = LocalCluster().state / "certs.d" / server / "hosts.toml"
    config = installed.tmp / "docker-config"
    name = "pulls"
    try:
        subprocess.run(["docker", "run", "-d", "--rm", "--name", container, "-p", f"{server}:5000",
                        "-e", "REGISTRY_USER=warden", "-e", "REGISTRY_PASSWORD=right",
                        f"warden/test-registry:{version}"], check=True, capture_output=True)  # fmt: skip
        hosts.parent.mkdir(parents=True, exist_ok=True)
        hosts.write_text(registry_hosts_toml(server))
        login = ["docker", "--config", str(config), "login", server, "-u", "warden", "--password-stdin"]
        _eventually("the password registry answering", lambda: subprocess.run(
            login, input=b"right", capture_output=True).returncode == 0, timeout=60)  # fmt: skip
        subprocess.run(["docker", "tag", f"warden/operator:{version}", image], check=True)
        subprocess.run(["docker", "--config", str(config), "push", image], check=True, capture_output=True)
        _pull_secret(kube, ns, server, "wrong")
        cluster = {"apiVersion": "slurm.warden.dev/v1alpha1", "kind": "SlurmCluster",
                   "metadata": {"name": name, "namespace": ns},
                   "spec": {"workerGroups": [{"name": "cpu", "replicas": 0}], "login": {"replicas": 0},
                            "jail": {"size": "1Gi", "retainOnDelete": False},
                            "images": {"exporter": image, "pullSecrets": ["regcred"],
                                       "pullPolicy": "Always"}}}  # fmt: skip
        kube.kubectl("apply", "-f", "-", input=json.dumps(cluster))

        # the condition names every pod that cannot pull: the cluster's read gate runs the same image and
        # may fail first, the exporter's pod a few seconds later
        failed = _eventually("ImagesPulled False naming the exporter's pod", lambda: (c := _condition(
            kube, ns, name, "ImagesPulled")).get("status") == "False" and f"{name}-exporter-" in c.get(
            "message", "") and c, timeout=240, interval=3)  # fmt: skip
        assert failed["reason"] == "ImagePullFailed" and image in failed["message"], failed
        assert "pullSecrets" in failed["message"], failed
        ready = _condition(kube, ns, name, "Ready")
        assert ready["status"] == "False" and "ImagesPulled" in ready["message"], ready

        def told() -> list[dict[str, Any]]:
            events = kube.json("-n", ns, "get", "events.events.k8s.io")
            return [e for e in events["items"] if e["reason"] == "ImagePullFailed" and e["regarding"]["name"] == name]

        # one per pod that cannot pull (the read gate runs the same image)
        (event, *_) = _eventually("an ImagePullFailed Event about the exporter's pod", lambda: [
            e for e in told() if e["related"]["name"].startswith(f"{name}-exporter-")], timeout=60)  # fmt: skip
        assert event["type"] == "Warning", event
        assert image in event["note"] and ("401" in event["note"] or "nauthorized" in event["note"]), event["note"]

        _pull_secret(kube, ns, server, "right")  # the kubelet tries again after its back-off
        _eventually("ImagesPulled True once the secret is right", lambda: _condition(
            kube, ns, name, "ImagesPulled").get("status") == "True", timeout=420, interval=5)  # fmt: skip
        deploy = kube.json("-n", ns, "get", "deployment", f"{name}-exporter")
        _eventually("the exporter running its pulled image", lambda: kube.json(
            "-n", ns, "get", "deployment", f"{name}-exporter").get("status", {}).get("readyReplicas") == 1,
            timeout=120)  # fmt: skip
        assert deploy["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]

        # pullPolicy Always: the kubelet asks the registry even for an image its node holds already (the
        # controller's, which the first cluster runs), where IfNotPresent says "already present"
        def pulls_of_the_controller() -> list[str]:
            selector = f"involvedObject.name={name}-controller-0"
            events = kube.json("-n", ns, "get", "events", "--field-selector", selector)
            return [e.get("message", "") for e in events["items"] if e.get("reason") == "Pulled"]

        pulled = _eventually("the controller's image pulled", pulls_of_the_controller, timeout=120)
        assert all(m.startswith("Successfully pulled image") for m in pulled), pulled
    finally:
        kube.kubectl("-n", ns, "delete", "slurmcluster", name, "--ignore-not-found", "--wait=true", "--timeout=180s",
                     check=False)  # fmt: skip
        # the claim of its controller's StatefulSet stays, as Kubernetes keeps those: not this test's to leave
        kube.kubectl("-n", ns, "delete", "pvc", f"state-{name}-controller-0", "--ignore-not-found", check=False)
        kube.kubectl("-n", ns, "delete", "secret", "regcred", "--ignore-not-found", check=False)
        subprocess.run(["docker", "rm", "-f", container], capture_output=True)
        subprocess.run(["docker", "rmi", image], capture_output=True)
        hosts.unlink(missing_ok=True)


def test_uninstall_and_reinstall_keep_a_users_home_and_only_explicit_deletion_deletes_it(installed: Installed) -> None:
    """Default values (no retention setting at all): `helm uninstall` removes everything but the jail;
    `helm install` again gives the same user the same home and account. Deleting the SlurmCluster keeps
    it too. `jail.retainOnDelete: false`, set on the running cluster, applies to the existing claim: the
    next uninstall deletes the claim and its volume."""
    kube, ns = installed.kube, installed.namespace
    first = _jail_claim(installed)
    assert first is not None and first["metadata"].get("ownerReferences"), "installed with retainOnDelete: false"
    volume = first["spec"]["volumeName"]
    installed.values["jail"].pop("retainOnDelete", None)
    installed.helm_upgrade()  # the chart's default from here on: applies to the claim there

    def kept_now() -> bool:
        claim = _jail_claim(installed) or {}
        policy = kube.json("get", "pv", volume)["spec"]["persistentVolumeReclaimPolicy"]
        return not claim.get("metadata", {}).get("ownerReferences") and policy == "Retain"

    _eventually("the existing jail claim and volume kept", kept_now, timeout=60, interval=2)
    key = installed.make_user("dora")
    wrote = installed.ssh("echo 'results of a long run' > ~/data.txt && id -u", key=key, user="dora")
    assert wrote.returncode == 0, wrote.stderr

    kube.helm("uninstall", NAME, "-n", ns, "--wait")
    kinds = "slurmclusters,workersets,statefulsets,pods,jobs,services,configmaps,secrets"

    def nothing_left() -> bool:
        left = kube.kubectl("-n", ns, "get", kinds, "-l", INSTANCE, "-o", "name").split()
        return not left and not kube.kubectl("-n", ns, "get", "slurmclusters", "-o", "name").split()

    _eventually("the release's objects gone", nothing_left, timeout=180, interval=2)
    kept = _jail_claim(installed)
    assert kept is not None and kept["metadata"]["uid"] == first["metadata"]["uid"], "the jail claim was deleted"
    # besides the jail only StatefulSet volume claims stay (Kubernetes keeps those by default)
    others = {p["metadata"]["name"] for p in kube.json("-n", ns, "get", "pvc")["items"]} - {f"{NAME}-jail"}
    assert all(n.startswith(f"state-{NAME}-controller-") or "-mariadb-" in n for n in others), others

    installed.helm_upgrade(install=True)
    wait_slurmcluster_ready(kube, ns, NAME, timeout=600)
    back = installed.ssh("cat ~/data.txt && id -u", key=key, user="dora")
    assert back.returncode == 0, back.stderr
    assert back.stdout == f"results of a long run\n{wrote.stdout}", back.stdout

    kube.kubectl("-n", ns, "delete", "slurmcluster", NAME, "--wait=true")

    def no_children() -> bool:
        return not kube.kubectl("-n", ns, "get", "workersets,pods", "-l", INSTANCE, "-o", "name").split()

    _eventually("the SlurmCluster's children gone", no_children, timeout=180, interval=2)
    after_delete = _jail_claim(installed)
    assert after_delete is not None and after_delete["metadata"]["uid"] == first["metadata"]["uid"]

    installed.values["jail"]["retainOnDelete"] = False
    installed.helm_upgrade()  # makes the SlurmCluster again, asking for deletion this time
    made = lambda: kube.kubectl("-n", ns, "get", "slurmcluster", NAME, "-o", "jsonpath={.metadata.uid}", check=False)  # noqa: E731
    uid = _eventually("the SlurmCluster made again", made, timeout=180, interval=2)

    def owned() -> bool:
        claim = _jail_claim(installed)
        refs = [r["uid"] for r in (claim or {}).get("metadata", {}).get("ownerReferences", [])]
        return refs == [uid] and kube.json("get", "pv", volume)["spec"]["persistentVolumeReclaimPolicy"] == "Delete"

    _eventually("retainOnDelete: false applied to the existing claim and volume", owned, timeout=60, interval=2)
    kube.helm("uninstall", NAME, "-n", ns, "--wait")
    _eventually("the jail claim deleted", lambda: _jail_claim(installed) is None, timeout=180, interval=2)
    _eventually(
        "its volume deleted", lambda: volume not in kube.kubectl("get", "pv", "-o", "name"), timeout=180, interval=2
    )
