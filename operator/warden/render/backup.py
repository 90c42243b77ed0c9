"""The jail's backups (``spec.jail.backup``): a CronJob running restic over the jail, mounted read-only;
and the container that restores a snapshot into a new jail (``spec.jail.restoreFrom``), which the
populate Job runs first (``warden.render.jail``).

Programs: ``warden-jail-backup`` and ``warden-jail-restore`` of images/backup. The repository's Secret
becomes the environment of these containers only (docs/security.md).
"""

from __future__ import annotations

from warden import naming
from warden.model import BackupRepository, JailBackup, JailRestore
from warden.render.context import Cluster
from warden.render.network import DNS, EVERYWHERE
from warden.render.pods import (
    POD_DEFAULTS,
    Manifest,
    empty_dir,
    jail_volume,
    meta,
    mount,
    placed,
    runtime_files_outside_jail,
)

COMPONENT = "jail-backup"
#: restic's cache and temporary files (a read-only root filesystem otherwise)
CACHE_DIR = "/var/cache/restic"
#: the path the jail has in every snapshot: restores take that folder of the snapshot
SNAPSHOT_PATH = naming.JAIL_MOUNT
#: capabilities of the restore container: a snapshot's owners, modes, file capabilities, device files
RESTORE_CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "MKNOD", "SETFCAP"]


def image(cluster: Cluster) -> str:
    return cluster.spec.own_image("backup")


def repository_env(repository: BackupRepository) -> list[Manifest]:
    location = repository.url or f"{naming.BACKUP_REPOSITORY_MOUNT}/{repository.path}"
    return [
        {"name": "RESTIC_REPOSITORY", "value": location},
        {"name": "RESTIC_CACHE_DIR", "value": CACHE_DIR},
        {"name": "TMPDIR", "value": CACHE_DIR},
    ]


def repository_volumes(repository: BackupRepository) -> list[Manifest]:
    volumes = [empty_dir("restic-cache")]
    if repository.claim_name:
        volumes.append({"name": "repository", "persistentVolumeClaim": {"claimName": repository.claim_name}})
    return volumes


def repository_mounts(repository: BackupRepository) -> list[Manifest]:
    mounts = [mount("restic-cache", CACHE_DIR)]
    if repository.claim_name:
        mounts.append(mount("repository", naming.BACKUP_REPOSITORY_MOUNT))
    return mounts


def _container(cluster: Cluster, name: str, repository: BackupRepository) -> Manifest:
    return {
        "name": name,
        "image": image(cluster),
        "imagePullPolicy": cluster.spec.images.pull_policy,
        "env": [{"name": "WARDEN_JAIL", "value": naming.JAIL_MOUNT}, *repository_env(repository)],
        # RESTIC_PASSWORD and the backend's keys: the admin's Secret, as it is
        "envFrom": [{"secretRef": {"name": repository.credentials_secret}}],
    }


def backup_args(cluster: Cluster, backup: JailBackup) -> list[str]:
    args = ["--host", cluster.name]
    for rule, count in backup.keep.counts().items():
        if count:
            args += [f"--keep-{rule}", str(count)]
    for path in backup.exclude:
        args += ["--exclude", path]
    return args


def backup_container(cluster: Cluster, backup: JailBackup, repository: BackupRepository) -> Manifest:
    return {
        **_container(cluster, "backup", repository),
        "command": ["warden-jail-backup"],
        "args": backup_args(cluster, backup),
        "volumeMounts": [mount("jail", naming.JAIL_MOUNT, read_only=True), *repository_mounts(repository)],
        # root that reads every file (users' homes are theirs alone) and changes none: the jail is mounted
        # read-only, and nothing else is granted
        "securityContext": {
            "runAsUser": 0,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"], "add": ["DAC_READ_SEARCH"]},
        },
    }


def cronjob(cluster: Cluster) -> Manifest:
    names = cluster.names
    backup = cluster.spec.jail.backup
    repository = backup.repository
    assert repository is not None  # the model refuses an enabled backup without one
    labels = names.labels(COMPONENT)
    pod = placed(
        {
            **POD_DEFAULTS,
            "restartPolicy": "Never",
            "containers": [backup_container(cluster, backup, repository)],
            "volumes": [jail_volume(cluster), *repository_volumes(repository)],
        },
        backup,
    )
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": meta(cluster, names.jail_backup, COMPONENT),
        "spec": {
            "schedule": backup.schedule,
            "timeZone": "Etc/UTC",
            # one backup at a time: restic locks the repository, a second run would only wait and fail
            "concurrencyPolicy": "Forbid",
            "startingDeadlineSeconds": 3600,
            "successfulJobsHistoryLimit": 3,
            "failedJobsHistoryLimit": 3,
            "jobTemplate": {
                "metadata": {"labels": labels},
                "spec": {
                    # a failed run is retried once; the next schedule tries again anyway
                    "backoffLimit": 1,
                    "activeDeadlineSeconds": backup.time_limit_minutes * 60,
                    "template": {"metadata": {"labels": labels}, "spec": runtime_files_outside_jail(pod)},
                },
            },
        },
    }


def _remote(repository: BackupRepository | None) -> bool:
    return repository is not None and repository.url is not None


def egress_components(cluster: Cluster) -> list[str]:
    """The components whose pods reach a repository by URL: the backup's, and the populate Job's (``jail``)
    while it restores."""
    jail = cluster.spec.jail
    out = [COMPONENT] if jail.backup.enabled and _remote(jail.backup.repository) else []
    if jail.restore_from is not None and _remote(jail.restore_from.repository):
        out.append("jail")
    return out


def network_policy(cluster: Cluster, components: list[str]) -> Manifest:
    """Those pods reach anywhere (a URL names a host, not an address); nothing reaches them: the cluster's
    isolating policy (``warden.render.network``) still selects them."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta(cluster, cluster.names.jail_backup, COMPONENT),
        "spec": {
            "podSelector": {
                "matchLabels": {naming.INSTANCE_LABEL: cluster.name},
                "matchExpressions": [{"key": naming.COMPONENT_LABEL, "operator": "In", "values": components}],
            },
            "policyTypes": ["Egress"],
            # addresses outside the cluster, and any pod (a store run in the cluster: ipBlock need not match pods)
            "egress": [{"to": [*EVERYWHERE, {"namespaceSelector": {}}]}, DNS],
        },
    }


def restore_container(cluster: Cluster, restore: JailRestore) -> Manifest:
    """The populate Job's first container: the snapshot into the jail, if the jail was never populated."""
    return {
        **_container(cluster, "restore-jail", restore.repository),
        "command": ["warden-jail-restore"],
        "args": [
            "--host",
            restore.cluster or cluster.name,
            "--snapshot",
            restore.snapshot,
            "--path",
            SNAPSHOT_PATH,
        ],
        "volumeMounts": [mount("jail", naming.JAIL_MOUNT), *repository_mounts(restore.repository)],
        "securityContext": {
            "runAsUser": 0,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"], "add": RESTORE_CAPABILITIES},
        },
    }


def restore_volumes(restore: JailRestore) -> list[Manifest]:
    return repository_volumes(restore.repository)


def render(cluster: Cluster) -> list[Manifest]:
    objects: list[Manifest] = []
    if cluster.spec.jail.backup.enabled:
        objects.append(cronjob(cluster))
    if components := egress_components(cluster):
        objects.append(network_policy(cluster, components))
    return objects
