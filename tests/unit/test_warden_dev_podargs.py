"""warden_dev.podargs: the operator's rendered pods as `docker run` arguments (what the dataplane tier
runs), checked without Docker: volumes, env, capabilities and the rest of the security context,
hostnames, networks and DNS names, GPUs and their stand-in drivers, commands."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from warden.model import parse_spec
from warden.render import cluster as render_cluster
from warden.render import jail as render_jail
from warden.render.context import Cluster
from warden_dev.podargs import (
    LABEL_POD,
    PodPlan,
    TranslationError,
    Translator,
    configmap_data,
    containers,
    tmpfs_size,
)

NS = "dataplane"
SPEC: dict[str, Any] = {
    "login": {"replicas": 1},
    "workerGroups": [
        {"name": "cpu", "replicas": 2, "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}},
        {"name": "gpu", "replicas": 2, "gpus": {"count": 2}, "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}},
    ],
    "partitions": [
        {"name": "cpu", "workerGroups": ["cpu"], "default": True},
        {"name": "gpu", "workerGroups": ["gpu"]},
    ],
    "accounting": {"mode": "InCluster"},
    "metrics": {"dcgmJobMapping": {"enabled": True}},
}


class FakeDriver:
    def __init__(self, name: str) -> None:
        self.name = name

    def gke_mounts(self) -> list[tuple[Path, str]]:
        return [(Path(f"/drivers/{self.name}"), "/usr/local/nvidia")]

    def toolkit_mounts(self) -> list[tuple[Path, str]]:
        return [
            (Path(f"/drivers/{self.name}/lib64/libcuda.so.1"), "/usr/lib/x86_64-linux-gnu/libcuda.so.1"),
            (Path(f"/drivers/{self.name}/bin/nvidia-smi"), "/usr/bin/nvidia-smi"),
        ]


def translator(
    tmp_path: Path, spec: dict[str, Any] = SPEC, drivers: list[FakeDriver | None] | None = None
) -> tuple[Translator[FakeDriver], Cluster, list[dict[str, Any]]]:
    cluster = Cluster(name="dp", namespace=NS, spec=parse_spec(spec))
    rendered = render_cluster.render(cluster)
    secrets = {s.name: {key: f"{s.name}/{key}" for key in s.generate()} for s in rendered.secrets}
    t: Translator[FakeDriver] = Translator(
        prefix="wdp-r1",
        network="wdp-r1-net",
        namespace=NS,
        jail_claim=cluster.names.jail,
        jail_volume="wdp-r1-jail",
        files_dir=tmp_path / "files",
        services=[o for o in rendered.objects if o["kind"] == "Service"],
        configmaps=configmap_data(rendered.objects, {cluster.names.slurm_config: {"extra.conf": "x=1\n"}}),
        secrets=secrets,
        labels={"run": "r1"},
        seccomp_profile=Path("/repo/images/worker/seccomp.json"),
        gpu_device=lambda i: Path(f"/dev-standins/nvidia{i}"),
        drivers=lambda: [FakeDriver("a"), FakeDriver("b")] if drivers is None else drivers,
    )
    return t, cluster, rendered.objects


def opt(args: list[str], flag: str) -> list[str]:
    """Every value given to ``flag``."""
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == flag]


def mounts(plan: PodPlan) -> dict[str, str]:
    """target -> the whole --mount value."""
    out = {}
    for m in opt(plan.pod.args, "--mount"):
        fields = dict(f.split("=", 1) for f in m.split(",") if "=" in f)
        out[fields["target"]] = m
    return out


@pytest.fixture
def planned(tmp_path: Path) -> tuple[dict[str, PodPlan], Translator[FakeDriver], Cluster]:
    t, cluster, objects = translator(tmp_path)
    return t.workloads(objects), t, cluster


def test_every_pod_of_the_workloads_gets_a_container(planned: Any) -> None:
    plans, _, _ = planned
    assert sorted(plans) == [
        "dp-accounting-0",
        "dp-controller-0",
        "dp-exporter-0",
        "dp-login-0",
        "dp-mariadb-0",
        "dp-read-gate-0",
        "dp-restapi-0",
        "dp-worker-cpu-0",
        "dp-worker-cpu-1",
        "dp-worker-gpu-0",
        "dp-worker-gpu-1",
    ]
    worker = plans["dp-worker-cpu-1"].pod
    assert (worker.container, worker.component, worker.group, worker.image) == (
        "wdp-r1-dp-worker-cpu-1",
        "worker",
        "cpu",
        "warden/worker:0.2.0",
    )
    # workers and login wait for the jail's population, the rest starts beside it
    assert {n for n, p in plans.items() if p.pod.waits_for_jail} == {
        "dp-login-0",
        "dp-worker-cpu-0",
        "dp-worker-cpu-1",
        "dp-worker-gpu-0",
        "dp-worker-gpu-1",
    }


def test_nothing_is_written_while_translating(tmp_path: Path) -> None:
    t, _, objects = translator(tmp_path)
    t.workloads(objects)
    assert not (tmp_path / "files").exists()


def test_hostname_network_labels_and_dns_names(planned: Any) -> None:
    plans, _, cluster = planned
    args = plans["dp-worker-cpu-0"].pod.args
    assert args[:6] == ["--name", "wdp-r1-dp-worker-cpu-0", "--hostname", "dp-worker-cpu-0", "--network", "wdp-r1-net"]
    assert opt(args, "--label") == ["run=r1", f"{LABEL_POD}=dp-worker-cpu-0"]
    nodes = cluster.names.nodes_service
    # a WorkerSet's pod resolves under its subdomain, as Kubernetes names it
    assert opt(args, "--network-alias") == ["dp-worker-cpu-0", f"dp-worker-cpu-0.{nodes}.{NS}.svc.cluster.local"]
    # the login pod is also every name of the Service that selects it
    login = opt(plans["dp-login-0"].pod.args, "--network-alias")
    assert {"dp-login", f"dp-login.{NS}", f"dp-login.{NS}.svc.cluster.local"} <= set(login)
    # Kubernetes' search domains first, then the pod's own, each once
    searches = opt(args, "--dns-search")
    assert searches[:3] == [f"{NS}.svc.cluster.local", "svc.cluster.local", "cluster.local"]
    assert len(searches) == len(set(searches))
    assert f"{nodes}.{NS}.svc.cluster.local" in searches


def test_env_is_each_containers_own(planned: Any) -> None:
    plans, _, _ = planned
    for plan in plans.values():
        assert opt(plan.pod.args, "--env") == [f"{e['name']}={e['value']}" for e in plan.pod.spec.get("env", [])]
    assert "WARDEN_WORKER_GROUP=gpu" in opt(plans["dp-worker-gpu-0"].pod.args, "--env")


def test_configmap_and_secret_volumes_are_read_only_files(planned: Any, tmp_path: Path) -> None:
    plans, _, cluster = planned
    plan = plans["dp-controller-0"]
    config = tmp_path / "files" / "volumes" / "dp-controller-0" / "slurm-config"
    assert mounts(plan)["/etc/warden/slurm"] == f"type=bind,source={config},target=/etc/warden/slurm,readonly"
    files = {f.path: f for f in plan.files}
    assert files[config / "slurm.conf"].mode == 0o444
    assert files[config / "extra.conf"].text == "x=1\n"  # config_overrides reach the files
    # a Secret's items: only the keys named, under their paths, with the volume's mode
    db = [f for f in plans["dp-mariadb-0"].files if f.path.parent.name == "db-password"]
    assert [(f.path.name, f.mode) for f in db] == [("password", 0o400)]
    assert db[0].text == f"{cluster.names.db_password}/password"


def test_claims_and_empty_dirs_are_volumes_of_the_pod(planned: Any) -> None:
    plans, _, _ = planned
    worker = plans["dp-worker-cpu-0"]
    m = mounts(worker)
    assert m["/mnt/jail"] == "type=volume,source=wdp-r1-jail,target=/mnt/jail"  # the one shared jail
    assert m["/var/spool/slurmd"] == "type=volume,source=wdp-r1-dp-worker-cpu-0-spool,target=/var/spool/slurmd"
    assert worker.volumes == ["wdp-r1-dp-worker-cpu-0-spool", "wdp-r1-dp-worker-cpu-0-run-slurm"]
    # /tmp and /dev/shm are per job (localMounts perJob): the jail plugin's tmpfs, no volume of the pod
    assert opt(worker.pod.args, "--tmpfs") == []
    # a read-only mount of the jail stays read-only; a StatefulSet's claim template is the pod's
    assert mounts(plans["dp-accounting-0"])["/mnt/jail"].endswith(",readonly")
    assert plans["dp-mariadb-0"].volumes == ["wdp-r1-dp-mariadb-0-data"]


def test_a_host_path_is_one_volume_shared_by_every_pod(planned: Any) -> None:
    plans, t, _ = planned
    shared = {tuple(plans[p].host_volumes) for p in ("dp-worker-gpu-0", "dp-worker-gpu-1")}
    assert shared == {("wdp-r1-host-var-lib-dcgm-exporter-job-mapping",)}
    assert t.host_volume("/var/lib/dcgm-exporter/job-mapping/") == "wdp-r1-host-var-lib-dcgm-exporter-job-mapping"


def test_security_context(planned: Any) -> None:
    plans, _, _ = planned
    worker = plans["dp-worker-cpu-0"].pod.args
    assert opt(worker, "--cap-add") == ["SYS_ADMIN", "SYS_NICE"]
    assert opt(worker, "--security-opt") == ["seccomp=/repo/images/worker/seccomp.json", "apparmor=unconfined"]
    assert "--privileged" not in worker and "--user" not in worker
    rest = plans["dp-restapi-0"].pod.args
    assert opt(rest, "--cap-drop") == ["ALL"]
    assert opt(rest, "--user") == ["65534:65534"]
    assert "--read-only" in rest
    assert opt(rest, "--security-opt") == ["no-new-privileges"]
    exporter = plans["dp-exporter-0"]
    assert exporter.fs_group == 10001 and opt(exporter.pod.args, "--group-add") == ["10001"]


def test_termination_message_file(planned: Any, tmp_path: Path) -> None:
    plans, _, _ = planned
    plan = plans["dp-login-0"]
    assert plan.termination_log == tmp_path / "files" / "termination" / "wdp-r1-dp-login-0"
    target = plan.pod.spec.get("terminationMessagePath", "/dev/termination-log")
    assert mounts(plan)[target] == f"type=bind,source={plan.termination_log},target={target}"


def test_gpus_are_numbered_as_on_one_host_with_drivers_in_turn(planned: Any) -> None:
    plans, t, _ = planned
    first, second = plans["dp-worker-gpu-0"].pod.args, plans["dp-worker-gpu-1"].pod.args
    assert opt(first, "--device") == ["/dev-standins/nvidia0:/dev/nvidia0:rw", "/dev-standins/nvidia1:/dev/nvidia1:rw"]
    assert opt(second, "--device") == ["/dev-standins/nvidia2:/dev/nvidia2:rw", "/dev-standins/nvidia3:/dev/nvidia3:rw"]
    assert opt(first, "--volume") == ["/drivers/a:/usr/local/nvidia:ro"]  # GKE's layout
    assert opt(second, "--volume") == [  # NVIDIA's container toolkit's
        "/drivers/b/lib64/libcuda.so.1:/usr/lib/x86_64-linux-gnu/libcuda.so.1:ro",
        "/drivers/b/bin/nvidia-smi:/usr/bin/nvidia-smi:ro",
    ]
    assert {p: d.name if d else None for p, d in t.pod_drivers.items()} == {
        "dp-worker-gpu-0": "a",
        "dp-worker-gpu-1": "b",
    }
    assert "--device" not in plans["dp-worker-cpu-0"].pod.args
    assert t.gpu_pods == 2


def test_a_gpu_pod_may_get_no_driver(tmp_path: Path) -> None:
    t, _, objects = translator(tmp_path, drivers=[None])
    plans = t.workloads(objects)
    assert "--volume" not in plans["dp-worker-gpu-0"].pod.args
    assert len(opt(plans["dp-worker-gpu-0"].pod.args, "--device")) == 2
    assert t.pod_drivers == {"dp-worker-gpu-0": None, "dp-worker-gpu-1": None}


def test_commands_of_deployments_and_jobs(planned: Any, tmp_path: Path) -> None:
    plans, t, cluster = planned
    rest = plans["dp-restapi-0"].pod
    container = rest.spec
    assert opt(rest.args, "--entrypoint") == [container["command"][0]]
    assert rest.argv == [*container["command"][1:], *container.get("args", [])]
    job = render_jail.populate_job(cluster)
    plan = t.pod(
        "dp-populate-jail",
        job["spec"]["template"],
        None,
        set(),
        container_name="wdp-r1-populate",
        command=True,
        resolvable=False,
    )
    assert plan.pod.container == "wdp-r1-populate"
    assert "--network-alias" not in plan.pod.args  # a Job's pod has no DNS name
    assert mounts(plan)[next(m["mountPath"] for m in plan.pod.spec["volumeMounts"] if m["name"] == "jail")].startswith(
        "type=volume,source=wdp-r1-jail,"
    )


def test_images_of_every_workload(tmp_path: Path) -> None:
    _, _, objects = translator(tmp_path)
    images = {c["image"] for o in objects for c in containers(o)}
    assert {"warden/worker:0.2.0", "warden/controller:0.2.0", "warden/populate-jail:0.2.0"} <= images


def pod_template(container: dict[str, Any], volumes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"labels": {}},
        "spec": {"containers": [{"image": "img", **container}], "volumes": volumes or []},
    }


@pytest.mark.parametrize(
    ("container", "volumes", "error"),
    [
        ({"securityContext": {"privileged": True}}, [], "privileged"),
        ({"command": ["sh"]}, [], "command/args are not translated"),
        (
            {"volumeMounts": [{"name": "v", "mountPath": "/v"}]},
            [{"name": "v", "hostPath": {"path": "/dev/kmsg", "type": "CharDevice"}}],
            "not a directory",
        ),
        (
            {"volumeMounts": [{"name": "v", "mountPath": "/v"}]},
            [{"name": "v", "nfs": {"server": "x", "path": "/"}}],
            "unsupported type",
        ),
    ],
)
def test_what_is_refused(tmp_path: Path, container: dict[str, Any], volumes: list[dict[str, Any]], error: str) -> None:
    t, _, _ = translator(tmp_path)
    with pytest.raises(TranslationError, match=error):
        t.pod("p", pod_template(container, volumes), None, set())


def test_memory_empty_dir_size_and_read_only_mounts(tmp_path: Path) -> None:
    t, _, _ = translator(tmp_path)
    plan = t.pod(
        "p",
        pod_template(
            {
                "volumeMounts": [
                    {"name": "shm", "mountPath": "/dev/shm"},
                    {"name": "d", "mountPath": "/d", "readOnly": True},
                    {"name": "h", "mountPath": "/h"},
                ]
            },
            [
                {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
                {"name": "d", "emptyDir": {}},
                {"name": "h", "hostPath": {"path": "/var/h", "type": "DirectoryOrCreate"}},
            ],
        ),
        None,
        set(),
    )
    assert opt(plan.pod.args, "--tmpfs") == ["/dev/shm:rw,nosuid,nodev,exec,size=64m"]
    assert mounts(plan)["/d"] == "type=volume,source=wdp-r1-p-d,target=/d,readonly"
    assert plan.volumes == ["wdp-r1-p-d"] and plan.host_volumes == ["wdp-r1-host-var-h"]
    assert tmpfs_size("1Gi") == "1g"


def test_configmap_items_pick_and_rename_keys(tmp_path: Path) -> None:
    t, cluster, _ = translator(tmp_path)
    name = cluster.names.slurm_config
    plan = t.pod(
        "p",
        pod_template(
            {"volumeMounts": [{"name": "c", "mountPath": "/c", "readOnly": False}]},
            [
                {
                    "name": "c",
                    "configMap": {
                        "name": name,
                        "items": [{"key": "extra.conf", "path": "renamed.conf"}],
                        "defaultMode": 0o600,
                    },
                }
            ],
        ),
        None,
        set(),
    )
    assert [(f.path.name, f.text, f.mode) for f in plan.files] == [("renamed.conf", "x=1\n", 0o600)]
    assert mounts(plan)["/c"].endswith(",readonly")  # ConfigMap volumes are read-only whatever the mount says


def test_a_shared_claim_is_one_volume_for_every_pod_that_mounts_it(tmp_path: Path) -> None:
    """The backup controllers' state claim (ReadWriteMany): both pods write the same files."""
    t, _, _ = translator(tmp_path)
    template = pod_template(
        {"volumeMounts": [{"name": "state", "mountPath": "/var/spool/slurmctld"}]},
        [{"name": "state", "persistentVolumeClaim": {"claimName": "hpc-controller-state"}}],
    )
    a, b = t.pod("a", template, None, set()), t.pod("b", template, None, set())
    assert mounts(a)["/var/spool/slurmctld"] == mounts(b)["/var/spool/slurmctld"]
    assert a.host_volumes == b.host_volumes == [t.claim_volume("hpc-controller-state")]
