"""Accounting: slurmdbd, and MariaDB when the database runs in the cluster."""

from __future__ import annotations

from warden import naming
from warden.render.config import slurmdbd_conf
from warden.render.context import Cluster
from warden.render.pods import (
    Manifest,
    claim_spec,
    claim_template,
    config_map_volume,
    content_hash,
    daemon_probes,
    identity_mounts,
    identity_volumes,
    jail_volume,
    mount,
    resources,
    secret_volume,
    service,
    slurm_container,
    slurm_mounts,
    slurm_volumes,
    statefulset,
    tcp_probe,
)

COMPONENT = "accounting"
DATABASE = "database"
DB_NAME = "slurm_acct_db"
DB_USER = "slurm"


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
        **slurm_container(cluster, "slurmdbd", "accounting", ("slurmdbd", naming.SLURMDBD_PORT)),
        "volumeMounts": [
            *slurm_mounts(),
            mount("slurmdbd-config", naming.SLURMDBD_CONFIG_DIR, read_only=True),
            mount("db-password", naming.DB_PASSWORD_DIR, read_only=True),
            # Users are the jail's: slurmdbd maps account users to uids (admin levels, coordinators)
            # through the jail's /etc/passwd, read live (the entrypoint points NSS extrausers at it).
            mount("jail", naming.JAIL_MOUNT, read_only=True),
            # and directory users (spec.identity.ldap) through SSSD, like slurmctld
            *identity_mounts(cluster),
        ],
        **daemon_probes(naming.SLURMDBD_PORT, liveness_delay=60, startup=cluster.has_limits),
        "resources": resources(spec.accounting.resources),
    }
    return statefulset(
        cluster,
        names.accounting,
        labels=names.labels(COMPONENT),
        selector=names.selector(COMPONENT),
        service_name=names.accounting,
        replicas=1,
        annotations={naming.CONFIG_HASH_ANNOTATION: content_hash(slurmdbd_conf(cluster))},
        pod_spec={
            "containers": [container],
            "volumes": [
                *slurm_volumes(cluster),
                config_map_volume("slurmdbd-config", names.slurmdbd_config),
                _password_volume(cluster),
                jail_volume(cluster),
                *identity_volumes(cluster),
            ],
        },
    )


def mariadb_statefulset(cluster: Cluster) -> Manifest:
    names = cluster.names
    spec = cluster.spec
    db = spec.accounting.in_cluster
    container: Manifest = {
        "name": "mariadb",
        "image": spec.own_image("mariadb"),
        "imagePullPolicy": spec.images.pull_policy,
        "env": [{"name": "WARDEN_DB_NAME", "value": DB_NAME}, {"name": "WARDEN_DB_USER", "value": DB_USER}],
        "ports": [{"name": "mysql", "containerPort": naming.MARIADB_PORT}],
        "volumeMounts": [mount("data", "/var/lib/mysql"), mount("db-password", naming.DB_PASSWORD_DIR, True)],
        "readinessProbe": tcp_probe(naming.MARIADB_PORT, period=5),
    }
    labels = names.labels(DATABASE)
    return statefulset(
        cluster,
        names.mariadb,
        labels=labels,
        selector=names.selector(DATABASE),
        service_name=names.mariadb,
        replicas=1,
        pod_spec={"containers": [container], "volumes": [_password_volume(cluster)]},
        claims=[claim_template("data", labels, claim_spec(db.storage_size, db.storage_class_name))],
    )


def render(cluster: Cluster) -> list[Manifest]:
    mode = cluster.spec.accounting.mode
    if mode == "Disabled":
        return []
    names = cluster.names
    out = [
        service(cluster, names.accounting, COMPONENT, names.selector(COMPONENT), [("slurmdbd", naming.SLURMDBD_PORT)]),
        slurmdbd_statefulset(cluster),
    ]
    if mode == "InCluster":
        out += [
            service(cluster, names.mariadb, DATABASE, names.selector(DATABASE), [("mysql", naming.MARIADB_PORT)]),
            mariadb_statefulset(cluster),
        ]
    return out
