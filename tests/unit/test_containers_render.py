"""Containers in jobs (spec.containers): what the renderers give pyxis, the jail plugin, enroot and the
worker pods, read as the admin and slurmstepd would read them."""

from __future__ import annotations

from typing import Any

import pytest

from warden import naming
from warden.model import parse_spec
from warden.render import config
from warden.render.context import Cluster
from warden.render.nodes import worker_set


def _cluster(containers: dict[str, Any] | None = None, **groups: dict[str, Any]) -> Cluster:
    body: dict[str, Any] = {"workerGroups": [{"name": n, **g} for n, g in (groups or {"cpu": {}}).items()]}
    if containers is not None:
        body["containers"] = containers
    return Cluster("c", "ns", parse_spec(body))


def _plugins(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line and not line.startswith("#")]


def _store(cluster: Cluster, group: str) -> tuple[list[Any], list[Any]]:
    pod = worker_set(cluster, next(g for g in cluster.spec.worker_groups if g.name == group))["spec"]["template"]
    volumes = [v for v in pod["spec"]["volumes"] if v["name"] == "containers"]
    (slurmd,) = pod["spec"]["containers"]
    mounts = [m for m in slurmd["volumeMounts"] if m["name"] == "containers"]
    return volumes, mounts


def test_off_by_default_nothing_changes() -> None:
    cluster = _cluster()
    files = config.slurm_config_files(cluster)
    assert naming.ENROOT_CONF not in files
    for key in ("plugstack.conf", "plugstack.cpu.conf"):
        (jail,) = _plugins(files[key])
        assert jail[:2] == ["required", naming.SPANK_PLUGIN] and "containers=on" not in jail
    assert _store(cluster, "cpu") == ([], [])


def test_on_pyxis_comes_before_the_jail_plugin_which_defers_its_filter() -> None:
    files = config.slurm_config_files(_cluster({"enabled": True}))
    pyxis, jail = _plugins(files["plugstack.cpu.conf"])
    # a worker without pyxis must not start: required; its containers live in the node-local store
    assert pyxis == [
        "required",
        naming.PYXIS_PLUGIN,
        f"runtime_path={naming.CONTAINER_STORE}",
        "container_scope=job",
        f"importer={naming.IMAGE_IMPORTER}",  # one import per node, user and image digest
    ]
    assert jail[:3] == ["required", naming.SPANK_PLUGIN, "root=/mnt/jail"]
    # the store is bound into the jail at its own path, and the filter waits for pyxis' task_init
    assert f"bind={naming.CONTAINER_STORE}" in jail and jail[-1] == "containers=on"
    # srun and sbatch (login, controller) only parse the options: optional, and no filter there
    client_pyxis, client_jail = _plugins(files["plugstack.conf"])
    assert client_pyxis[:2] == ["optional", naming.PYXIS_PLUGIN]
    assert "containers=on" not in client_jail and f"bind={naming.CONTAINER_STORE}" not in client_jail


def test_a_group_can_say_otherwise_and_then_refuses_container_steps() -> None:
    files = config.slurm_config_files(_cluster({"enabled": True}, cpu={}, plain={"containers": False}))
    assert len(_plugins(files["plugstack.cpu.conf"])) == 2
    # pyxis is loaded there too, with an importer that fails any image (srun would otherwise send the
    # option to a node that ignores it, and the step would run in the jail); the filter stays where it was
    pyxis, jail = _plugins(files["plugstack.plain.conf"])
    assert pyxis[:2] == ["required", naming.PYXIS_PLUGIN] and pyxis[-1] == f"importer={naming.CONTAINERS_OFF_IMPORTER}"
    assert "containers=on" not in jail and f"bind={naming.CONTAINER_STORE}" not in jail
    assert _store(_cluster({"enabled": True}, cpu={}, plain={"containers": False}), "plain") == ([], [])
    # the other way round: off for the cluster, on for one group; clients then know the options too
    files = config.slurm_config_files(_cluster(None, cpu={}, ai={"containers": True}))
    assert _plugins(files["plugstack.ai.conf"])[1][-1] == "containers=on"
    assert _plugins(files["plugstack.cpu.conf"])[0][-1] == f"importer={naming.CONTAINERS_OFF_IMPORTER}"
    assert _plugins(files["plugstack.conf"])[0][:2] == ["optional", naming.PYXIS_PLUGIN]
    assert naming.ENROOT_CONF in files


@pytest.mark.parametrize("allow", [False, True])
def test_enroot_conf_says_whether_plain_http_registries_are_allowed(allow: bool) -> None:
    files = config.slurm_config_files(_cluster({"enabled": True, "allowHttpRegistries": allow}))
    settings = dict(_plugins(files[naming.ENROOT_CONF]))
    assert settings["ENROOT_ALLOW_HTTP"] == ("yes" if allow else "no")
    # the other lines are Warden's (the store's bounds), which enroot ignores: it reads only ENROOT_* and a few
    assert {k for k in settings if not k.startswith("ENROOT_")} == {"WARDEN_STORE_SIZE", "WARDEN_STORE_USER_SHARE"}


@pytest.mark.parametrize(
    ("store", "size", "share"),
    [
        ({}, 50 * 1024**3, 25 * 1024**3),  # default: half the 50Gi store
        ({"sizeLimit": "20Gi", "perUserLimit": "4Gi"}, 20 * 1024**3, 4 * 1024**3),
        ({"sizeLimit": "10Gi", "perUserLimit": "1Ti"}, 10 * 1024**3, 10 * 1024**3),  # at most the store
        ({"hostPath": "/var/lib/ai-images", "sizeLimit": "2Ti"}, 2 * 1024**4, 1024**4),  # hostPath: the same check
    ],
)
def test_enroot_conf_gives_warden_store_room_the_stores_size_and_each_users_share(
    store: dict[str, str], size: int, share: int
) -> None:
    """/usr/lib/warden/warden-store-room reads these two lines (bytes) before enroot writes into the store."""
    files = config.slurm_config_files(_cluster({"enabled": True, "store": store}))
    settings = dict(_plugins(files[naming.ENROOT_CONF]))
    assert (settings["WARDEN_STORE_SIZE"], settings["WARDEN_STORE_USER_SHARE"]) == (str(size), str(share))


def test_the_store_is_an_emptydir_with_its_size_or_the_nodes_directory() -> None:
    volumes, mounts = _store(_cluster({"enabled": True, "store": {"sizeLimit": "20Gi"}}), "cpu")
    assert volumes == [{"name": "containers", "emptyDir": {"sizeLimit": "20Gi"}}]
    assert mounts == [{"name": "containers", "mountPath": naming.CONTAINER_STORE}]
    volumes, _ = _store(_cluster({"enabled": True, "store": {"hostPath": "/var/lib/ai-images"}}), "cpu")
    assert volumes == [{"name": "containers", "hostPath": {"path": "/var/lib/ai-images", "type": "DirectoryOrCreate"}}]


@pytest.mark.parametrize(
    ("containers", "field"),
    [
        ({"store": {"hostPath": "relative/dir"}}, "hostPath"),
        ({"store": {"hostPath": "/a/../etc"}}, "hostPath"),
        ({"store": {"sizeLimit": "lots"}}, "sizeLimit"),
        ({"enabled": "sometimes"}, "enabled"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(containers: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        _cluster(containers)
