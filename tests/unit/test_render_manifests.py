"""Kubernetes objects rendered for the example clusters: what a platform engineer would check."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.examples import EXAMPLES, load
from warden import naming
from warden.kube.apply import Owner, with_owner
from warden.kube.kinds import BY_KIND
from warden.model import parse_spec
from warden.naming import TEMPLATE_HASH_ANNOTATION
from warden.render.cluster import render
from warden.render.context import Cluster
from warden.render.jail import populate_job


def objects(cluster: Cluster) -> dict[str, dict[str, Any]]:
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in render(cluster).objects}


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    pod = (
        obj["spec"]["template"]["spec"]
        if obj["kind"] != "CronJob"
        else obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    )
    found: list[dict[str, Any]] = pod.get("initContainers", []) + pod["containers"]
    return found


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def pod_specs(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """Every pod template rendered, the CronJob's included."""
    found = {}
    for key, obj in objects(cluster).items():
        if obj["kind"] == "CronJob":
            found[key] = obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        elif "template" in obj.get("spec", {}):
            found[key] = pod_spec(obj)
    return found


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_object_is_labelled_namespaced_and_known_to_the_apply_layer(example: str) -> None:
    cluster = load(example)
    for key, obj in objects(cluster).items():
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == cluster.name, key
        assert labels["app.kubernetes.io/managed-by"] == "warden", key
        assert labels["app.kubernetes.io/component"], key
        assert obj["metadata"]["namespace"] == cluster.namespace, key
        assert (obj["apiVersion"], obj["kind"]) in BY_KIND, key
        assert len(obj["metadata"]["name"]) <= 63, key


@pytest.mark.parametrize("example", EXAMPLES)
def test_nothing_runs_privileged(example: str) -> None:
    for key, obj in objects(load(example)).items():
        if "template" not in obj.get("spec", {}) and obj["kind"] != "CronJob":
            continue
        for c in containers(obj):
            sc = c.get("securityContext", {})
            assert not sc.get("privileged"), f"{key}/{c['name']} is privileged"
            assert "ALL" not in sc.get("capabilities", {}).get("add", []), key


@pytest.mark.parametrize("example", EXAMPLES)
def test_slurm_pods_get_no_api_token_and_a_seccomp_profile(example: str) -> None:
    """Only the NCCL check (its own ServiceAccount, to write its report) holds a Kubernetes API token;
    every pod runs under the runtime's default seccomp profile, workers' containers under theirs."""
    pods = pod_specs(load(example))
    for key, pod in pods.items():
        if not key.startswith("CronJob/"):
            assert pod.get("automountServiceAccountToken") is False, f"{key} mounts an API token"
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, key
        for c in pod["containers"]:
            profile = c.get("securityContext", {}).get("seccompProfile")
            assert profile is None or key.startswith("WorkerSet/"), f"{key}/{c['name']} overrides the seccomp profile"
    if load(example).spec.health_checks.nccl.enabled:
        assert any(k.startswith("CronJob/") for k in pods), "the NCCL check's pod is checked too"


#: What of the pod SSH sessions and job steps see inside the jail: the plugin's recursive binds, the worker
#: and login entrypoints' binds (docs/architecture.md, "The pod contract"), the jail volume itself.
JAIL_VIEWS = ("/dev", "/proc", "/sys", naming.SLURM_RUN_DIR, naming.SLURMD_SPOOL_DIR, naming.SLURM_ETC,
              "/etc/resolv.conf", "/etc/hosts", "/etc/hostname", naming.JAIL_MOUNT, "/home", "/root")  # fmt: skip


@pytest.mark.parametrize("example", EXAMPLES)
def test_no_containers_termination_log_is_where_users_can_reach_it(example: str) -> None:
    """The kubelet binds a world-writable file at every container's terminationMessagePath and reports
    what it holds when the container ends; Kubernetes' default, /dev/termination-log, is in the /dev that
    sessions and job steps see. Every container of every pod (init containers, Jobs, the CronJob's) has it
    in the container's /run, which nothing binds into the jail, nor a group's node-local mounts."""
    cluster = load(example)
    views = (*JAIL_VIEWS, *(m.jail_path for g in cluster.spec.worker_groups for m in g.local_mounts))
    assert not [v for v in views if v == naming.TERMINATION_LOG or naming.TERMINATION_LOG.startswith(v + "/")]
    seen = set()
    for key, obj in objects(cluster).items():
        if "template" not in obj.get("spec", {}) and obj["kind"] != "CronJob":
            continue
        for c in containers(obj):
            assert c.get("terminationMessagePath") == naming.TERMINATION_LOG, f"{key}/{c['name']}"
            seen.add(c["name"])
    assert {"slurmctld", "slurmd", "sshd", "wait-for-jail", "slurmrestd", "exporter", "populate-jail"} <= seen, seen


@pytest.mark.parametrize("example", EXAMPLES)
def test_workload_selectors_use_only_immutable_labels(example: str) -> None:
    for key, obj in objects(load(example)).items():
        if obj["kind"] not in ("StatefulSet", "WorkerSet"):
            continue
        selector = obj["spec"]["selector"]["matchLabels"]
        template_labels = obj["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= template_labels.items(), key
        assert set(selector) <= {
            "app.kubernetes.io/name",
            "app.kubernetes.io/instance",
            "app.kubernetes.io/component",
            "slurm.warden.dev/worker-group",
        }, key


@pytest.mark.parametrize("example", EXAMPLES)
def test_daemon_probes_never_connect_to_slurm_or_sshd(example: str) -> None:
    """slurmd logs every bare TCP connect as an error and sshd as a [preauth] disconnect: a tcpSocket
    probe every 5 s fills every node's log. Slurm daemons and sshd are probed by warden-listening."""
    ports = {"slurmctld": 6817, "slurmd": 6818, "slurmdbd": 6819, "sshd": 22}
    seen = set()
    for key, obj in objects(load(example)).items():
        if obj["kind"] not in ("StatefulSet", "WorkerSet"):
            continue
        for c in containers(obj):
            if c["name"] not in ports:
                continue
            seen.add(c["name"])
            if c["name"] == "slurmctld":
                continue  # probed by what users need of it, below
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                if probe in c:
                    assert c[probe]["exec"]["command"] == [naming.LISTENING_CHECK, str(ports[c["name"]])], key
    assert {"slurmctld", "slurmd", "sshd"} <= seen


@pytest.mark.parametrize("example", EXAMPLES)
def test_a_slow_starting_sshd_or_slurmdbd_is_not_restarted_before_it_could_listen(example: str) -> None:
    """The login's and slurmdbd's entrypoints do minutes of work on a slow node before the daemon listens: a
    startup probe gives them ten minutes, and liveness (two minutes without listening) only counts after."""
    for key, obj in objects(load(example)).items():
        if obj["kind"] != "StatefulSet":
            continue
        for c in containers(obj):
            if c["name"] not in ("sshd", "slurmdbd"):
                continue
            start, ready, live = c["startupProbe"], c["readinessProbe"], c["livenessProbe"]
            assert start["periodSeconds"] * start["failureThreshold"] == 600, key
            assert (live["periodSeconds"] * live["failureThreshold"], live["initialDelaySeconds"]) == (120, 0), key
            # a check slowed by a starved node is not "not listening": it has 15 s, within liveness's period,
            # and readiness's too (the login stays in its Service while sshd serves)
            assert start["timeoutSeconds"] == 5 and 15 == live["timeoutSeconds"] < live["periodSeconds"], key
            assert ready["timeoutSeconds"] == 15 and ready["periodSeconds"] == 10, key


def test_a_stuck_slurmctld_is_not_ready_then_restarted_within_a_bounded_time() -> None:
    """A stuck slurmctld listens and pings: startup and readiness ask it for a job and a node read instead,
    with a timeout the kubelet enforces; liveness restarts it after about two minutes without any answer
    (a slow one is left to answer), and starts nothing itself; startup allows long recoveries of large
    queues first."""
    (ctld,) = containers(objects(load("cpu-only"))["StatefulSet/cpu-controller"])
    probes = {p: ctld[p] for p in ("startupProbe", "readinessProbe", "livenessProbe")}
    for name in ("startupProbe", "readinessProbe"):
        command = probes[name]["exec"]["command"]
        assert command[0] == naming.SLURMCTLD_HEALTH_CHECK
        assert probes[name]["timeoutSeconds"] > 2 * (int(command[1]) + 2), probes[name]  # both reads and their kill
    live = probes["livenessProbe"]
    check, form, silent, bound = live["exec"]["command"]
    assert (check, form) == (naming.SLURMCTLD_HEALTH_CHECK, "--answered-within"), live
    # its own reads get longer than readiness's, and the kubelet waits for both of them
    assert int(bound) > int(probes["readinessProbe"]["exec"]["command"][1]), live
    assert live["timeoutSeconds"] > 2 * (int(bound) + 2), live
    # stuck: restarted within three minutes of its last answer
    last_look = int(silent) + live["periodSeconds"] * live["failureThreshold"] + live["timeoutSeconds"]
    assert 90 <= last_look <= 180, live
    assert probes["startupProbe"]["periodSeconds"] * probes["startupProbe"]["failureThreshold"] >= 300
    assert probes["readinessProbe"]["failureThreshold"] * probes["readinessProbe"]["periodSeconds"] <= 30


def test_workers_get_exactly_the_capabilities_the_jail_needs() -> None:
    objs = objects(load("gpu-two-groups"))
    sts = objs["WorkerSet/gpu-worker-h100"]
    slurmd = pod_spec(sts)["containers"][0]
    sc = slurmd["securityContext"]
    assert sorted(sc["capabilities"]["add"]) == ["SYS_ADMIN", "SYS_NICE"]
    assert sc["seccompProfile"] == {"type": "Localhost", "localhostProfile": "warden/worker.json"}
    assert sc["appArmorProfile"] == {"type": "Unconfined"}
    # Login binds the client config and auth socket into the jail: SYS_ADMIN, nothing else; unconfined by
    # AppArmor (the runtime's default profile denies every bind) unless Warden's profiles are asked for
    sshd = pod_spec(objs["StatefulSet/gpu-login"])["containers"][0]
    assert sshd["securityContext"] == {
        "capabilities": {"add": ["SYS_ADMIN"]},
        "appArmorProfile": {"type": "Unconfined"},
    }
    for c in containers(objs["StatefulSet/gpu-controller"]):
        assert "securityContext" not in c


@pytest.mark.parametrize(("profile", "login", "worker"), [
    (None, {"type": "Unconfined"}, {"type": "Unconfined"}),
    ("Unconfined", {"type": "Unconfined"}, {"type": "Unconfined"}),
    ("Warden", {"type": "Localhost", "localhostProfile": "warden-login"},
     {"type": "Localhost", "localhostProfile": "warden-worker"}),
])  # fmt: skip
def test_login_and_workers_get_the_apparmor_profile_the_spec_chooses(
    profile: str | None, login: dict[str, str], worker: dict[str, str]
) -> None:
    spec = {"workerGroups": [{"name": "cpu"}], "security": {"appArmorProfile": profile} if profile else {}}
    objs = objects(Cluster(name="c", namespace="ns", spec=parse_spec(spec)))
    assert pod_spec(objs["StatefulSet/c-login"])["containers"][0]["securityContext"]["appArmorProfile"] == login
    assert pod_spec(objs["WorkerSet/c-worker-cpu"])["containers"][0]["securityContext"]["appArmorProfile"] == worker


def test_a_cluster_held_on_the_previous_releases_images_keeps_its_login_pods_apparmor_template() -> None:
    """Login pods are unconfined by default from this release on; a cluster whose images are an older
    release's (held at an operator upgrade) keeps a login template without it: the upgrade replaces no pod."""
    spec = {"workerGroups": [{"name": "cpu"}], "images": {"version": "0.1.0"}}
    objs = objects(Cluster(name="c", namespace="ns", spec=parse_spec(spec)))
    assert "appArmorProfile" not in pod_spec(objs["StatefulSet/c-login"])["containers"][0]["securityContext"]
    unconfined = {**spec, "security": {"appArmorProfile": "Unconfined"}}
    objs = objects(Cluster(name="c", namespace="ns", spec=parse_spec(unconfined)))
    login = pod_spec(objs["StatefulSet/c-login"])["containers"][0]["securityContext"]
    assert login["appArmorProfile"] == {"type": "Unconfined"}, "asked for: given"


def test_gpu_worker_group_pod() -> None:
    objs = objects(load("gpu-two-groups"))
    sts = objs["WorkerSet/gpu-worker-h100"]
    assert sts["spec"]["replicas"] == 4
    pod = pod_spec(sts)
    assert pod["subdomain"] == "gpu-nodes", "each pod's own hostname resolves under the nodes Service"
    slurmd = pod["containers"][0]
    assert slurmd["resources"]["limits"]["nvidia.com/gpu"] == "8"
    env = {e["name"]: e["value"] for e in slurmd["env"]}
    assert env["WARDEN_WORKER_GROUP"] == "h100"
    assert "Gres=gpu:h100:8" in env["WARDEN_SLURMD_CONF"]
    # the entrypoint shows the container's driver to job steps, and asks NVIDIA's runtime for it
    assert env["WARDEN_GPUS"] == "8"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    cpu = pod_spec(objs["WorkerSet/gpu-worker-cpu"])["containers"][0]
    assert not {"WARDEN_GPUS", "NVIDIA_DRIVER_CAPABILITIES"} & {e["name"] for e in cpu["env"]}
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "gpu-h100x8"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    mounts = {m["mountPath"]: m["name"] for m in slurmd["volumeMounts"]}
    assert mounts["/mnt/jail"] == "jail"
    assert mounts["/scratch"] == "local-scratch"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["local-scratch"]["emptyDir"] == {"sizeLimit": "2Ti"}
    assert "local-shm" not in volumes and "/dev/shm" not in mounts  # per job: the jail plugin's tmpfs
    assert volumes["jail"]["persistentVolumeClaim"]["claimName"] == "gpu-jail"
    assert volumes["slurm-key"]["secret"]["secretName"] == "gpu-slurm-key"
    # Short node names resolve through the headless Service's domain.
    assert "gpu-nodes.research.svc.cluster.local" in pod["dnsConfig"]["searches"]
    assert pod["initContainers"][0]["name"] == "wait-for-jail"


def test_login_service_and_statefulset() -> None:
    objs = objects(load("gpu-two-groups"))
    svc = objs["Service/gpu-login"]
    assert svc["spec"]["type"] == "LoadBalancer"
    assert svc["spec"]["ports"][0]["port"] == 22
    sts = objs["StatefulSet/gpu-login"]
    assert sts["spec"]["replicas"] == 2
    mounts = {m["mountPath"] for m in containers(sts)[-1]["volumeMounts"]}
    assert {"/mnt/jail", "/run/slurm", "/etc/warden/ssh", "/etc/warden/ssh-host-keys"} <= mounts
    assert not [m for m in mounts if m.startswith("/mnt/jail/")], "nothing is mounted into the shared volume"


def test_headless_services() -> None:
    objs = objects(load("cpu-only"))
    for name in ("Service/cpu-nodes", "Service/cpu-controller"):
        assert objs[name]["spec"]["clusterIP"] == "None"
        assert objs[name]["spec"]["publishNotReadyAddresses"] is True


def test_controller_keeps_state_on_a_volume_and_is_not_replaced_for_a_config_change() -> None:
    spec = {"workerGroups": [{"name": "cpu"}]}
    a = objects(Cluster("c", "ns", parse_spec(spec)))["StatefulSet/c-controller"]
    assert a["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "1Gi"
    mounts = {m["mountPath"] for m in a["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert "/var/spool/slurmctld" in mounts
    jail = next(m for m in a["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] if m["name"] == "jail")
    assert jail == {"name": "jail", "mountPath": "/mnt/jail", "readOnly": True}, "users are looked up in the jail"
    # slurmctld follows slurm.conf in place (scontrol reconfigure): its pod template does not change
    changed = {
        **spec,
        "slurmConfig": {"extraLines": ["MaxJobCount=5000"]},
        "partitions": [{"name": "p", "workerGroups": ["cpu"]}],
    }
    b = objects(Cluster("c", "ns", parse_spec(changed)))["StatefulSet/c-controller"]
    assert a["spec"]["template"] == b["spec"]["template"]


def test_jail_pvc_is_rwx_and_absent_with_an_existing_claim() -> None:
    objs = objects(load("gpu-two-groups"))
    pvc = objs["PersistentVolumeClaim/gpu-jail"]
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    assert pvc["spec"]["storageClassName"] == "shared-rwx"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "500Gi"
    mine = Cluster("c", "ns", parse_spec({"workerGroups": [{"name": "a"}], "jail": {"existingClaim": "shared-root"}}))
    objs = objects(mine)
    assert not [k for k in objs if k.startswith("PersistentVolumeClaim/")]
    volumes = {v["name"]: v for v in pod_spec(objs["WorkerSet/c-worker-a"])["volumes"]}
    assert volumes["jail"]["persistentVolumeClaim"]["claimName"] == "shared-root"


def test_populate_job_is_replaced_when_overwrite_or_image_changes() -> None:
    base = {"workerGroups": [{"name": "a"}]}
    job = populate_job(Cluster("c", "ns", parse_spec(base)))
    again = populate_job(Cluster("c", "ns", parse_spec(base)))
    overwrite = populate_job(Cluster("c", "ns", parse_spec({**base, "jail": {"populate": {"overwrite": True}}})))
    image = populate_job(Cluster("c", "ns", parse_spec({**base, "jail": {"populate": {"image": "me/jail:2"}}})))
    hashes = [j["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION] for j in (job, again, overwrite, image)]
    assert hashes[0] == hashes[1]
    assert len(set(hashes)) == 3
    env = {e["name"]: e["value"] for e in overwrite["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["WARDEN_POPULATE_OVERWRITE"].startswith("once:")  # one overwrite per image, not per Job
    assert image["spec"]["template"]["spec"]["containers"][0]["image"] == "me/jail:2"


def test_accounting_objects_follow_the_mode() -> None:
    external = objects(load("accounting-external"))
    assert "StatefulSet/acct-accounting" in external
    assert not [k for k in external if "mariadb" in k], "external DB: no in-cluster MariaDB"
    dbd = pod_spec(external["StatefulSet/acct-accounting"])
    password = {v["name"]: v for v in dbd["volumes"]}["db-password"]["secret"]
    assert password["secretName"] == "slurm-db"
    assert password["items"] == [{"key": "password", "path": "password"}]
    incluster = objects(
        Cluster("c", "ns", parse_spec({"workerGroups": [{"name": "a"}], "accounting": {"mode": "InCluster"}}))
    )
    assert "StatefulSet/c-mariadb" in incluster and "Service/c-mariadb" in incluster
    assert "db-password" in [
        s.name.removeprefix("c-")
        for s in render(
            Cluster("c", "ns", parse_spec({"workerGroups": [{"name": "a"}], "accounting": {"mode": "InCluster"}}))
        ).secrets
    ]
    assert not [k for k in objects(load("cpu-only")) if "accounting" in k]


def test_nccl_cronjob() -> None:
    objs = objects(load("gpu-two-groups"))
    cron = objs["CronJob/gpu-nccl-check"]
    spec = cron["spec"]
    assert spec["schedule"] == "0 */4 * * *"
    assert spec["concurrencyPolicy"] == "Forbid"
    assert spec["successfulJobsHistoryLimit"] == 3 and spec["failedJobsHistoryLimit"] == 3
    job = spec["jobTemplate"]["spec"]
    # 6 GPU nodes, 4 at a time, 10 minutes each: two waves plus slack.
    assert job["activeDeadlineSeconds"] == 2 * 10 * 60 + 300
    args = job["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--min-busbw") + 1] == "180"
    assert args[args.index("--report-configmap") + 1] == "research/gpu-nccl-check"
    role = objs["Role/gpu-health-check"]
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["gpu-nccl-check"],
            "verbs": ["get", "patch", "update"],
        }
    ]
    # No CronJob where it cannot do anything: no GPU group, or the check switched off.
    assert not [k for k in objects(load("cpu-only")) if k.startswith("CronJob/")]


def test_names_are_deterministic() -> None:
    a = [sorted(objects(load(e))) for e in EXAMPLES]
    b = [sorted(objects(load(e))) for e in EXAMPLES]
    assert a == b


def test_owner_reference_points_at_the_cluster() -> None:
    obj = render(load("cpu-only")).objects[0]
    owned = with_owner(obj, Owner(name="cpu", namespace="hpc", uid="1234"))
    (ref,) = owned["metadata"]["ownerReferences"]
    assert ref == {
        "apiVersion": "slurm.warden.dev/v1alpha1",
        "kind": "SlurmCluster",
        "name": "cpu",
        "uid": "1234",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert "ownerReferences" not in obj["metadata"], "the rendered object itself is left untouched"


def test_secrets_are_generated_fresh_and_complete() -> None:
    specs = {s.name: s for s in render(load("cpu-only")).secrets}
    key1 = specs["cpu-slurm-key"].generate()["slurm.key"]
    key2 = specs["cpu-slurm-key"].generate()["slurm.key"]
    assert key1 != key2 and len(key1) == 1024
    host = specs["cpu-ssh-host-keys"].generate()
    assert host["ssh_host_ed25519_key"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert host["ssh_host_ed25519_key.pub"].startswith("ssh-ed25519 ")
    assert all("data" not in s.manifest and "stringData" not in s.manifest for s in specs.values())


def test_every_daemon_that_looks_users_up_mounts_the_jail_and_only_nodes_wait_for_it() -> None:
    """Users live in the jail: slurmctld, slurmdbd, slurmd and sshd resolve them there (read-only where
    nothing is written). Workers and login wait for the populate Job (their jail binds need a full
    jail); slurmctld and slurmdbd do not (they run without jail users until it is there)."""
    objs = objects(load("accounting-external"))
    seen: dict[str, tuple[Any, bool, bool]] = {}
    for obj in objs.values():
        if obj["kind"] not in ("StatefulSet", "WorkerSet"):
            continue
        pod = obj["spec"]["template"]["spec"]
        (jail,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "jail"] or [None]
        waits = [c["name"] for c in pod.get("initContainers", [])] == ["wait-for-jail"]
        seen[obj["metadata"]["labels"]["app.kubernetes.io/component"]] = (
            jail and jail["mountPath"],
            bool(jail and jail.get("readOnly")),
            waits,
        )
    assert seen == {
        "controller": ("/mnt/jail", True, False),
        "accounting": ("/mnt/jail", True, False),
        "login": ("/mnt/jail", False, True),
        "worker": ("/mnt/jail", False, True),
    }, seen


def test_wait_for_jail_says_what_it_waits_for_then_ends(tmp_path: Path) -> None:
    """The init container's script, run against a directory standing in for the jail volume."""
    objs = objects(load("cpu-only"))
    (init,) = objs["StatefulSet/cpu-login"]["spec"]["template"]["spec"]["initContainers"]
    assert init["command"][:2] == ["/bin/sh", "-c"]
    script = init["command"][2].replace("/mnt/jail", str(tmp_path))
    proc = subprocess.Popen(["/bin/sh", "-c", script], stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    assert proc.poll() is None, "ended before the jail was populated"
    (tmp_path / ".warden-populated").write_text("WARDEN_JAIL_VERSION=9\npopulated_at=now\n")
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0
    assert out.splitlines() == [
        f"waiting for the jail: Job cpu-populate-jail has not populated it yet (no {tmp_path}/.warden-populated; 0s)",
        "jail populated: WARDEN_JAIL_VERSION=9",
    ]


def test_budgets_protect_slurmctld_and_only_the_workers_running_jobs() -> None:
    cluster = Cluster(name="demo", namespace="ns", spec=parse_spec({"workerGroups": [{"name": "cpu", "replicas": 2}]}))
    objs = objects(cluster)
    ctld = objs["PodDisruptionBudget/demo-controller"]["spec"]
    assert ctld["maxUnavailable"] == 0
    assert ctld["selector"]["matchLabels"] == cluster.names.selector("controller")
    busy = objs["PodDisruptionBudget/demo-busy-workers"]["spec"]
    assert busy["maxUnavailable"] == 0
    assert busy["selector"]["matchLabels"] == {**cluster.names.selector("worker"), naming.BUSY_LABEL: "true"}
    # the label is the operator's to set on pods: no worker template carries it (idle pods may go)
    template = objs["WorkerSet/demo-worker-cpu"]["spec"]["template"]
    assert naming.BUSY_LABEL not in template["metadata"]["labels"]


def test_only_autoscaled_groups_are_marked_for_the_apply_layer() -> None:
    spec = {"workerGroups": [{"name": "fixed", "replicas": 2}, {"name": "elastic", "replicas": 3, "autoscaled": True}]}
    objs = objects(Cluster(name="demo", namespace="ns", spec=parse_spec(spec)))
    elastic = objs["WorkerSet/demo-worker-elastic"]
    assert elastic["metadata"]["annotations"] == {naming.AUTOSCALED_ANNOTATION: "true"}
    assert elastic["spec"]["replicas"] == 3, "the size it is created with"
    assert "annotations" not in objs["WorkerSet/demo-worker-fixed"]["metadata"]


def test_worker_sets_carry_what_their_controller_needs_and_nothing_a_statefulset_would() -> None:
    spec = {"workerGroups": [{"name": "cpu", "maxUnavailable": 2, "scaleInTimeoutSeconds": 600}, {"name": "gpu"}]}
    objs = objects(Cluster(name="demo", namespace="ns", spec=parse_spec(spec)))
    cpu, gpu = objs["WorkerSet/demo-worker-cpu"]["spec"], objs["WorkerSet/demo-worker-gpu"]["spec"]
    assert (cpu["maxUnavailable"], cpu["scaleInTimeoutSeconds"]) == (2, 600)
    assert gpu["maxUnavailable"] == 1 and "scaleInTimeoutSeconds" not in gpu, "unbounded by default"
    assert cpu["selector"]["matchLabels"].items() <= cpu["template"]["metadata"]["labels"].items()
    assert "hostname" not in cpu["template"]["spec"], "each pod gets its own (warden.workers.podset)"
    assert not any(o["kind"] == "StatefulSet" and "worker" in name for name, o in objs.items())


@pytest.mark.parametrize(
    ("accounting", "account"),
    [({"mode": "InCluster"}, "users"), ({"mode": "InCluster", "defaultAccount": "lab"}, "lab"),
     ({"mode": "InCluster", "defaultAccount": ""}, None), ({"mode": "Disabled"}, None)],
)  # fmt: skip
def test_the_controller_gives_new_jail_users_an_association_only_with_accounting_on(
    accounting: dict[str, str], account: str | None
) -> None:
    """slurmctld's entrypoint associates jail users that accounting does not know with
    WARDEN_DEFAULT_ACCOUNT: set with accounting on (default `users`), never without accounting."""
    spec = parse_spec({"workerGroups": [{"name": "a"}], "accounting": accounting})
    (ctld,) = containers(objects(Cluster("c", "ns", spec))["StatefulSet/c-controller"])
    env = {e["name"]: e.get("value") for e in ctld["env"]}
    assert env.get("WARDEN_DEFAULT_ACCOUNT") == account


@pytest.mark.parametrize("bad", ["Lab", "lab account", "-lab", "a" * 65])
def test_a_default_account_slurm_cannot_take_is_refused_naming_the_field(bad: str) -> None:
    with pytest.raises(ValueError, match=r"default_account|defaultAccount"):
        parse_spec({"workerGroups": [{"name": "a"}], "accounting": {"mode": "InCluster", "defaultAccount": bad}})
