"""The jail: its ReadWriteMany PVC and the Job that fills it from the jail image."""

from __future__ import annotations

from warden import naming
from warden.render import backup
from warden.render.context import Cluster
from warden.render.pods import (
    POD_DEFAULTS,
    Manifest,
    claim_spec,
    content_hash,
    jail_volume,
    meta,
    mount,
    placed,
    runtime_files_outside_jail,
)

COMPONENT = "jail"


# The Job's pod template is immutable; this annotation tells the apply layer which inputs made it,
# so a changed image or overwrite switch replaces the Job instead of failing to patch it.
def pvc(cluster: Cluster) -> Manifest | None:
    jail = cluster.spec.jail
    if jail.existing_claim:
        return None
    spec = claim_spec(jail.size, jail.storage_class_name, "ReadWriteMany")
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta(cluster, cluster.names.jail, COMPONENT),
        "spec": spec,
    }


def populate_image(cluster: Cluster) -> str:
    return cluster.image("populateJail")


def populate_job(cluster: Cluster) -> Manifest:
    names = cluster.names
    spec = cluster.spec
    image = populate_image(cluster)
    overwrite = spec.jail.populate.overwrite
    series = cluster.slurm_series("populateJail")
    restore = spec.jail.restore_from
    template_hash = content_hash(
        image, overwrite, series, *([restore.model_dump(), backup.image(cluster)] if restore else [])
    )
    container: Manifest = {
        "name": "populate-jail",
        "image": image,
        "imagePullPolicy": spec.images.pull_policy,
        # One overwrite per image: the jail's sentinel records the request it served, so the Job made
        # again (deleted, or the operator restarted) does not copy again.
        "env": [
            {"name": "WARDEN_POPULATE_OVERWRITE", "value": f"once:{content_hash(image)[:16]}" if overwrite else "0"},
            cluster.series_env("populateJail"),
        ],
        "volumeMounts": [mount("jail", naming.JAIL_MOUNT)],
    }
    labels = names.labels(COMPONENT)
    pod: Manifest = {
        **POD_DEFAULTS,
        "restartPolicy": "OnFailure",
        "containers": [container],
        "volumes": [jail_volume(cluster)],
    }
    if restore is not None:
        # a new jail gets the snapshot first; the copy then finds it populated (and upgrades its Slurm if older)
        pod["initContainers"] = [backup.restore_container(cluster, restore)]
        pod["volumes"] += backup.restore_volumes(restore)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            **meta(cluster, names.populate_jail, COMPONENT),
            "annotations": {naming.TEMPLATE_HASH_ANNOTATION: template_hash},
        },
        "spec": {
            "backoffLimit": 3,
            "template": {
                "metadata": {"labels": labels},
                "spec": runtime_files_outside_jail(placed(pod, spec.jail.populate)),
            },
        },
    }


def render(cluster: Cluster) -> list[Manifest]:
    claim = pvc(cluster)
    return [*([claim] if claim else []), populate_job(cluster)]
