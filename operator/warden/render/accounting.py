"""Accounting: slurmdbd, and MariaDB when the database runs in the cluster."""

from __future__ import annotations

from warden import naming
from warden.render.config import slurmdbd_conf
from warden.render.context import Cluster
from warden.render.pods import (
    Manifest,
    config_map_volume,
    content_hash,
    meta,
    mount,
    resources,
    secret_volume,
    slurm_mounts,
    slurm_volumes,
    tcp_probe,
)

COMPONENT = "accounting"
DATABASE = "database"
DB_NAME = "slurm_acct_db"
DB_USER = "slurm"


def _service(cluster: Cluster, name: str, component: str, port: int, port_name: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(cluster, name, component),
        "spec": {
            "selector": cluster.names.selector(component),
            "ports": [{"name": port_name, "port": port, "targetPort": port}],
        },
    }


def password_secret(cluster: Cluster) -> tuple[str, str]:
    """(Secret name, key) of the database password."""
    acct = cluster.spec.accounting
    if acct.mode == "External" and acct.external is not None:
        ref = acct.external.password_secret_ref
        return ref.name, ref.key
    return cluster.names.db_password, naming.DB_PASSWORD_KEY


def _password_volume(cluster: Cluster) -> Manifest:
    secret, key = password_secret(cluster)
    volume = secret_volume("db-password", secret)
    volume["secret"]["items"] = [{"key": key, "path": naming.DB_PASSWORD_KEY}]
    return volume


def slurmdbd_statefulset(cluster: Cluster) -> Manifest:
    names = cluster.names
    spec = cluster.spec
    container: Manifest = {
        "name": "slurmdbd",
        "image": spec.images.accounting,
        "imagePullPolicy": spec.images.pull_policy,
        "ports": [{"name": "slurmdbd", "containerPort": naming.SLURMDBD_PORT}],
        "volumeMounts": [
            *slurm_mounts(),
            mount("slurmdbd-config", naming.SLURMDBD_CONFIG_DIR, read_only=True),
            mount("db-password", naming.DB_PASSWORD_DIR, read_only=True),
        ],
        "readinessProbe": tcp_probe(naming.SLURMDBD_PORT, period=5),
        "livenessProbe": tcp_probe(naming.SLURMDBD_PORT, period=20, failures=6, initial_delay=60),
        "resources": resources(spec.accounting.resources),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta(cluster, names.accounting, COMPONENT),
        "spec": {
            "replicas": 1,
            "serviceName": names.accounting,
            "selector": {"matchLabels": names.selector(COMPONENT)},
            "template": {
                "metadata": {
                    "labels": names.labels(COMPONENT),
                    "annotations": {naming.CONFIG_HASH_ANNOTATION: content_hash(slurmdbd_conf(cluster))},
                },
                "spec": {
                    "enableServiceLinks": False,
                    "containers": [container],
                    "volumes": [
                        *slurm_volumes(cluster),
                        config_map_volume("slurmdbd-config", names.slurmdbd_config),
                        _password_volume(cluster),
                    ],
                },
            },
        },
    }


def mariadb_statefulset(cluster: Cluster) -> Manifest:
    names = cluster.names
    spec = cluster.spec
    db = spec.accounting.in_cluster
    claim: Manifest = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": db.storage_size}}}
    if db.storage_class_name:
        claim["storageClassName"] = db.storage_class_name
    container: Manifest = {
        "name": "mariadb",
        "image": spec.images.mariadb,
        "imagePullPolicy": spec.images.pull_policy,
        "env": [{"name": "WARDEN_DB_NAME", "value": DB_NAME}, {"name": "WARDEN_DB_USER", "value": DB_USER}],
        "ports": [{"name": "mysql", "containerPort": naming.MARIADB_PORT}],
        "volumeMounts": [mount("data", "/var/lib/mysql"), mount("db-password", naming.DB_PASSWORD_DIR, True)],
        "readinessProbe": tcp_probe(naming.MARIADB_PORT, period=5),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta(cluster, names.mariadb, DATABASE),
        "spec": {
            "replicas": 1,
            "serviceName": names.mariadb,
            "selector": {"matchLabels": names.selector(DATABASE)},
            "template": {
                "metadata": {"labels": names.labels(DATABASE)},
                "spec": {
                    "enableServiceLinks": False,
                    "containers": [container],
                    "volumes": [_password_volume(cluster)],
                },
            },
            "volumeClaimTemplates": [{"metadata": {"name": "data", "labels": names.labels(DATABASE)}, "spec": claim}],
        },
    }


def render(cluster: Cluster) -> list[Manifest]:
    mode = cluster.spec.accounting.mode
    if mode == "Disabled":
        return []
    names = cluster.names
    out = [
        _service(cluster, names.accounting, COMPONENT, naming.SLURMDBD_PORT, "slurmdbd"),
        slurmdbd_statefulset(cluster),
    ]
    if mode == "InCluster":
        out += [
            _service(cluster, names.mariadb, DATABASE, naming.MARIADB_PORT, "mysql"),
            mariadb_statefulset(cluster),
        ]
    return out
