"""Rendered config files of the example clusters: pinned by golden files, then read as an admin would.

Regenerate the golden files after an intended change with `make golden` (UPDATE_GOLDEN=1) and review
the diff like any other code change.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.examples import EXAMPLES, load
from tests.support.slurmconf import parse, parse_sshd
from warden.model import SlurmConfig, WorkerGroup, parse_spec
from warden.render import config
from warden.render.context import Cluster

GOLDEN = Path(__file__).parent / "golden"
FILES = ["slurm.conf", "gres.conf", "plugstack.conf", "cgroup.conf", "sshd_config", "slurmdbd.conf"]


def rendered(example: str) -> dict[str, str]:
    cluster = load(example)
    files = config.slurm_config_files(cluster)
    files["sshd_config"] = config.sshd_config(cluster)
    if cluster.spec.accounting.mode != "Disabled":
        files["slurmdbd.conf"] = config.slurmdbd_conf(cluster)
    return files


def test_there_are_three_examples() -> None:
    assert {"cpu-only", "gpu-two-groups", "accounting-external"} <= set(EXAMPLES)


@pytest.mark.parametrize("example", EXAMPLES)
def test_rendered_files_match_golden(example: str) -> None:
    files = rendered(example)
    folder = GOLDEN / example
    if os.environ.get("UPDATE_GOLDEN"):
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
        for name, text in files.items():
            (folder / name).write_text(text)
    expected = {p.name: p.read_text() for p in folder.iterdir()}
    assert set(files) == set(expected), "files rendered differ from golden files: run `make golden`"
    for name, text in files.items():
        assert text == expected[name], f"{example}/{name} differs from its golden file: run `make golden`"


# --- read as a Slurm admin would ---------------------------------------------------------------


def test_cpu_cluster_slurm_conf() -> None:
    conf = parse(rendered("cpu-only")["slurm.conf"])
    assert conf.get("ClusterName") == "cpu"
    assert conf.get("SlurmctldHost") == "cpu-controller-0(cpu-controller-0.cpu-controller.hpc.svc.cluster.local)"
    assert conf.get("AuthType") == "auth/slurm" and conf.get("CredType") == "cred/slurm"
    assert conf.get("StateSaveLocation") == "/var/spool/slurmctld"
    assert conf.get("GresTypes") is None, "no GPU group, no gres"
    assert conf.get("AccountingStorageType") is None
    assert conf.get("HealthCheckProgram") == "/usr/local/bin/warden-quickcheck"
    assert int(conf.get("MaxNodeCount") or 0) >= 2
    (nodeset,) = conf.records_of("NodeSet")
    assert nodeset == {"nodeset": "ns_cpu", "feature": "warden-group-cpu"}
    (partition,) = conf.records_of("PartitionName")
    assert partition["partitionname"] == "main"
    assert partition["nodes"] == "ns_cpu"
    assert partition["default"] == "YES"
    assert not conf.records_of("NodeName"), "workers are dynamic nodes: no static NodeName lines"


def test_autoscaled_groups_have_hidden_capacity_so_jobs_queue_at_zero() -> None:
    """The only static node lines: an autoscaled group's `replicas` FUTURE records, in its NodeSet, so a
    job submitted while an autoscaler has the group at zero is queued, not refused."""
    cluster = load("cpu-only")
    groups = [{"name": "cpu", "replicas": 3, "autoscaled": True, "resources": {"limits": {"cpu": "2"}}},
              {"name": "fixed", "replicas": 2}]  # fmt: skip
    spec = cluster.spec.model_copy(update={"worker_groups": [WorkerGroup.model_validate(g) for g in groups]})
    conf = parse(config.slurm_conf(Cluster(name="c", namespace="ns", spec=spec)))
    (standby,) = conf.records_of("NodeName")
    assert standby["nodename"] == "c-worker-cpu-standby-[0-2]" and standby["state"] == "FUTURE"
    assert standby["feature"] == "warden-group-cpu" and standby["cpus"] == "2"


def test_gpu_cluster_partitions_and_gres() -> None:
    files = rendered("gpu-two-groups")
    conf = parse(files["slurm.conf"])
    assert conf.get("GresTypes") == "gpu"
    partitions = {p["partitionname"]: p for p in conf.records_of("PartitionName")}
    assert partitions["h100"]["nodes"] == "ns_h100" and partitions["h100"]["maxtime"] == "2-00:00:00"
    assert partitions["a100"]["nodes"] == "ns_a100" and partitions["a100"]["default"] == "NO"
    assert partitions["cpu"]["default"] == "YES"
    nodesets = {n["nodeset"]: n["feature"] for n in conf.records_of("NodeSet")}
    assert nodesets == {"ns_h100": "warden-group-h100", "ns_a100": "warden-group-a100", "ns_cpu": "warden-group-cpu"}
    # extraLines arrive verbatim, after everything the operator owns.
    assert conf.get("PriorityType") == "priority/multifactor"
    text = files["slurm.conf"]
    assert text.index("PriorityType=") > text.index("PartitionName=")
    assert conf.get("HealthCheckInterval") == "120"

    # No node lines: each GPU worker adds its own, naming the devices its pod got (host numbering),
    # so scaling a GPU group changes nothing here (and slurmctld, whose config hash includes this
    # file, is not restarted for it).
    assert parse(files["gres.conf"]).records_of("NodeName") == []
    spec = load("gpu-two-groups").spec
    scaled = spec.model_copy(
        update={"worker_groups": [g.model_copy(update={"replicas": g.replicas + 3}) for g in spec.worker_groups]}
    )
    assert config.gres_conf(Cluster("gpu", "research", scaled)) == files["gres.conf"]


def test_plugstack_puts_the_jail_plugin_first_with_each_groups_mounts() -> None:
    files = rendered("gpu-two-groups")
    for key in ("plugstack.conf", "plugstack.h100.conf", "plugstack.a100.conf"):
        lines = [line for line in files[key].splitlines() if line and not line.startswith("#")]
        words = lines[0].split()
        assert words[:2] == ["required", "/usr/lib/warden/spank_jail.so"], key
        assert "root=/mnt/jail" in words
        # What every step needs (spool, auth socket, keyless config) the worker entrypoint binds
        # into the jail itself; the plugin's arguments never expose the node's /etc/slurm (the key).
        assert "bind=/etc/slurm" not in words
    h100 = files["plugstack.h100.conf"]
    assert "bind=/scratch" in h100.split()
    assert "jobtmpfs=/dev/shm:68719476736" in h100.split()  # per job, at most its sizeLimit (64Gi)
    assert "scratch" not in files["plugstack.a100.conf"]
    words = files["plugstack.conf"].split()
    assert not [w for w in words if w.startswith(("bind=", "jobtmpfs=", "nproc="))], "login/controller: no node's"


def test_sshd_config_chroots_into_the_jail_with_keys_only() -> None:
    options, matches = parse_sshd(rendered("cpu-only")["sshd_config"])
    assert options["chrootdirectory"] == ["/mnt/jail"]
    assert options["passwordauthentication"] == ["no"]
    assert options["kbdinteractiveauthentication"] == ["no"]
    assert options["pubkeyauthentication"] == ["yes"]
    assert options["permitrootlogin"] == ["prohibit-password"]
    # Read before the chroot: root's from the spec (installed by the entrypoint), users' from the jail;
    # root's never from the jail's /root.
    assert options["authorizedkeysfile"] == ["/etc/ssh/warden_authorized_keys/%u", "/mnt/jail%h/.ssh/authorized_keys"]
    assert matches == {"User root": {"authorizedkeysfile": ["/etc/ssh/warden_authorized_keys/root"]}}


#: sshd_config options of forwarding, as `sshd -T` names them
FORWARDING_OPTIONS = ("disableforwarding", "allowtcpforwarding", "allowagentforwarding", "x11forwarding",
                      "allowstreamlocalforwarding", "permittunnel", "gatewayports")  # fmt: skip
FORWARD_NOTHING = {"disableforwarding": ["yes"]} | {o: ["no"] for o in FORWARDING_OPTIONS[1:]}


def _sshd(forwarding: dict[str, Any]) -> dict[str, list[str]]:
    spec = parse_spec({"workerGroups": [{"name": "cpu"}], "login": {"forwarding": forwarding}})
    options, _ = parse_sshd(config.sshd_config(Cluster("c", "ns", spec)))
    return options


@pytest.mark.parametrize("example", EXAMPLES)
def test_sshd_forwards_nothing_by_default_while_sessions_get_a_pty_and_sftp(example: str) -> None:
    """No TCP (`-L`, `-W`, `-R`), agent, X11, tunnel or Unix socket forwarding, for anyone; a terminal
    and the chroot's own sftp server (no program of the jail needed) stay."""
    options, matches = parse_sshd(rendered(example)["sshd_config"])
    assert {o: options.get(o) for o in FORWARDING_OPTIONS} == FORWARD_NOTHING
    assert options["permittty"] == ["yes"]
    assert options["subsystem"] == ["sftp", "internal-sftp"]
    assert all(o not in m for m in matches.values() for o in FORWARDING_OPTIONS), "a Match block forwards"


@pytest.mark.parametrize(
    ("tcp", "allow"), [("Disabled", "no"), ("Local", "local"), ("Remote", "remote"), ("All", "yes")]
)
def test_forwarding_setting_opens_only_what_it_names(tcp: str, allow: str) -> None:
    options = _sshd({"tcp": tcp})
    assert options["allowtcpforwarding"] == [allow]
    assert options.get("disableforwarding") == (["yes"] if tcp == "Disabled" else None), "it would override"
    assert (options["allowagentforwarding"], options["x11forwarding"]) == (["no"], ["no"])
    # never: tunnel devices, Unix sockets, listening ports on anything but the loopback
    assert (options["permittunnel"], options["allowstreamlocalforwarding"], options["gatewayports"]) == (
        ["no"], ["no"], ["no"],
    )  # fmt: skip


def test_agent_and_x11_forwarding_are_their_own_settings() -> None:
    options = _sshd({"agent": True})
    assert (options["allowagentforwarding"], options["x11forwarding"], options["allowtcpforwarding"]) == (
        ["yes"], ["no"], ["no"],
    )  # fmt: skip
    assert "disableforwarding" not in options
    options = _sshd({"x11": True})
    assert (options["x11forwarding"], options["allowagentforwarding"]) == (["yes"], ["no"])


def test_the_login_images_own_sshd_config_forwards_nothing_either() -> None:
    """images/login/sshd_config, what the login image runs without the operator's ConfigMap."""
    options, _ = parse_sshd((Path(__file__).parents[2] / "images" / "login" / "sshd_config").read_text())
    assert {o: options.get(o) for o in FORWARDING_OPTIONS} == FORWARD_NOTHING
    assert options["subsystem"] == ["sftp", "internal-sftp"]


def test_jobs_and_usage_are_private_by_default_in_slurm_conf_and_slurmdbd_conf() -> None:
    files = rendered("accounting-external")
    assert parse(files["slurm.conf"]).get("PrivateData") == "jobs,usage"
    assert parse(files["slurmdbd.conf"]).get("PrivateData") == "jobs,usage"


def test_private_data_follows_the_spec_and_slurmdbd_gets_what_it_knows() -> None:
    base = load("accounting-external")

    def with_private(items: list[str]) -> Cluster:
        spec = base.spec.model_copy(update={"slurm_config": SlurmConfig.model_validate({"privateData": items})})
        return Cluster(base.name, base.namespace, spec)

    wide = with_private(["jobs", "nodes", "users", "cloud"])
    assert parse(config.slurm_conf(wide)).get("PrivateData") == "jobs,nodes,users,cloud"
    assert parse(config.slurmdbd_conf(wide)).get("PrivateData") == "jobs,users"
    # []: Slurm's own default, everyone sees everything: no line at all
    public = with_private([])
    assert "PrivateData" not in config.slurm_conf(public)
    assert "PrivateData" not in config.slurmdbd_conf(public)


def test_external_accounting_points_slurmdbd_at_the_users_database() -> None:
    files = rendered("accounting-external")
    conf = parse(files["slurm.conf"])
    assert conf.get("AccountingStorageType") == "accounting_storage/slurmdbd"
    assert conf.get("AccountingStorageHost") == "acct-accounting"
    assert conf.get("HealthCheckProgram") is None, "quick check disabled in this example"
    dbd = parse(files["slurmdbd.conf"])
    assert dbd.get("StorageHost") == "mariadb.databases.svc.cluster.local"
    assert dbd.get("StorageLoc") == "slurm_acct_db"
    assert dbd.get("StoragePass") is None, "the password never enters a ConfigMap"


def test_node_conf_line_of_each_group() -> None:
    cluster = load("gpu-two-groups")
    lines = {g.name: config.slurmd_node_conf(g) for g in cluster.spec.worker_groups}
    # 1000Gi less the 2 GiB kept for slurmd
    assert lines["h100"] == "CPUs=96 RealMemory=1021952 Gres=gpu:h100:8 Feature=warden-group-h100,nvlink,ib"
    assert lines["cpu"] == "Feature=warden-group-cpu"


@pytest.mark.parametrize(
    ("limit", "jobs"),
    [("1Gi", 896), ("4Gi", 3584), ("512Mi", 384), ("200Mi", 72), ("64Gi", 63488), ("1000Gi", 1021952)],
)
def test_jobs_get_the_pods_memory_less_a_reserve_for_slurmd(limit: str, jobs: int) -> None:
    """An eighth of the limit, at least 128 MiB and at most 2 GiB, stays with slurmd: jobs filling their
    node's RealMemory never push the pod's OOM killer onto it."""
    group = WorkerGroup(name="g", resources={"limits": {"memory": limit}})
    assert config.job_memory(group) == jobs


@pytest.mark.parametrize(("limit", "cpus"), [("900m", 1), ("1", 1), ("1500m", 1), ("2", 2), ("2500m", 2)])
def test_a_nodes_cpus_are_its_whole_cpu_limit_and_at_least_one(limit: str, cpus: int) -> None:
    """Slurm counts whole CPUs: a fractional limit rounds down, and one under a CPU is one (without a count
    slurmd would offer the host's CPUs to jobs in a pod allowed less than one); the partition's
    DefMemPerCPU stays with it."""
    group = WorkerGroup(name="g", resources={"limits": {"cpu": limit, "memory": "1Gi"}})
    assert f"CPUs={cpus} " in config.slurmd_node_conf(group)
    assert config.default_mem_per_cpu([group]) == 896 // cpus


def test_jobs_without_mem_share_nodes_by_cpu() -> None:
    """Each partition's DefMemPerCPU is its groups' smallest memory per CPU; a group without CPU or
    memory limits leaves it unset (Slurm then gives such jobs whole nodes' memory, said in the docs)."""
    cluster = load("gpu-two-groups")
    conf = parse(config.slurm_conf(cluster))
    assert conf.get("SelectTypeParameters") == "CR_Core_Memory"
    assert conf.get("ProctrackType") == "proctrack/cgroup"
    assert conf.get("TaskPlugin") == "task/cgroup,task/affinity"
    partitions = {p["partitionname"]: p for p in conf.records_of("PartitionName")}
    assert partitions["h100"]["defmempercpu"] == "10645"  # 1021952 MiB / 96 CPUs
    assert "defmempercpu" not in partitions["cpu"]  # the cpu group has no limits
    cgroup = parse(config.cgroup_conf(cluster))
    for key in ("ConstrainCores", "ConstrainRAMSpace", "ConstrainDevices", "ConstrainSwapSpace"):
        assert cgroup.get(key) == "yes", key
