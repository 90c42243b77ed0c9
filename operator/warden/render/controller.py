"""slurmctld: a one-replica StatefulSet with its state volume, and its headless Service."""

from __future__ import annotations

from warden import naming
from warden.render import config
from warden.render.context import Cluster
from warden.render.pods import (
    Manifest,
    content_hash,
    dns_config,
    jail_volume,
    meta,
    mount,
    resources,
    slurm_mounts,
    slurm_volumes,
    tcp_probe,
)

COMPONENT = "controller"


def service(cluster: Cluster) -> Manifest:
    names = cluster.names
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(cluster, names.controller, COMPONENT),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": names.selector(COMPONENT),
            "ports": [{"name": "slurmctld", "port": naming.SLURMCTLD_PORT, "targetPort": naming.SLURMCTLD_PORT}],
        },
    }


def statefulset(cluster: Cluster) -> Manifest:
    names = cluster.names
    spec = cluster.spec
    state = spec.controller.state_volume
    claim_spec: Manifest = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": state.size}},
    }
    if state.storage_class_name:
        claim_spec["storageClassName"] = state.storage_class_name
    # slurmctld reads slurm.conf only at start: a changed file rolls the (single) controller pod.
    # Its state is on the PVC, so the queue and running jobs survive the restart.
    config_hash = content_hash(config.slurm_config_files(cluster))
    container: Manifest = {
        "name": "slurmctld",
        "image": spec.images.controller,
        "imagePullPolicy": spec.images.pull_policy,
        "ports": [{"name": "slurmctld", "containerPort": naming.SLURMCTLD_PORT}],
        # The jail, read-only: slurmctld looks up each job's user and groups (send_gids), and users
        # live in the jail's /etc/passwd (the entrypoint points NSS extrausers at it).
        "volumeMounts": [
            *slurm_mounts(),
            mount("state", naming.STATE_SAVE_LOCATION),
            mount("jail", naming.JAIL_MOUNT, read_only=True),
        ],
        "readinessProbe": tcp_probe(naming.SLURMCTLD_PORT, period=5),
        "livenessProbe": tcp_probe(naming.SLURMCTLD_PORT, period=20, failures=6, initial_delay=30),
        "resources": resources(spec.controller.resources),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta(cluster, names.controller, COMPONENT),
        "spec": {
            "replicas": 1,
            "serviceName": names.controller,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": names.selector(COMPONENT)},
            "template": {
                "metadata": {
                    "labels": names.labels(COMPONENT),
                    "annotations": {naming.CONFIG_HASH_ANNOTATION: config_hash},
                },
                "spec": {
                    "dnsConfig": dns_config(cluster),
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": 30,
                    "containers": [container],
                    "volumes": [*slurm_volumes(cluster), jail_volume(cluster)],
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "state", "labels": names.labels(COMPONENT)},
                    "spec": claim_spec,
                }
            ],
        },
    }


def render(cluster: Cluster) -> list[Manifest]:
    return [service(cluster), statefulset(cluster)]
