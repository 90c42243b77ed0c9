"""ConfigMaps: Slurm config files, sshd config, slurmdbd config."""

from __future__ import annotations

from warden.render import config
from warden.render.context import Cluster
from warden.render.pods import Manifest, meta


def _config_map(cluster: Cluster, name: str, component: str, data: dict[str, str]) -> Manifest:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(cluster, name, component), "data": data}


def slurm_config(cluster: Cluster) -> Manifest:
    return _config_map(cluster, cluster.names.slurm_config, "slurm", config.slurm_config_files(cluster))


def sshd_config(cluster: Cluster) -> Manifest:
    data = {"sshd_config": config.sshd_config(cluster), "authorized_keys": config.authorized_keys(cluster)}
    return _config_map(cluster, cluster.names.sshd_config, "login", data)


def worker_sshd_config(cluster: Cluster) -> Manifest | None:
    """The workers' sshd_config, root's keys and the admins (spec.workerSsh); None while it is off."""
    if not cluster.worker_ssh:
        return None
    data = config.worker_ssh_files(cluster)
    return _config_map(cluster, cluster.names.worker_sshd_config, "worker", data)


def identity(cluster: Cluster) -> Manifest | None:
    """sssd.conf of spec.identity.ldap (no credentials: those stay in the bind Secret); None without one."""
    text = config.sssd_conf(cluster)
    if text is None:
        return None
    return _config_map(cluster, cluster.names.identity, "identity", {"sssd.conf": text})


def slurmdbd_config(cluster: Cluster) -> Manifest:
    data = {"slurmdbd.conf": config.slurmdbd_conf(cluster)}
    return _config_map(cluster, cluster.names.slurmdbd_config, "accounting", data)
