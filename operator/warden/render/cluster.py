"""Everything a SlurmCluster is made of, in the order it is applied."""

from __future__ import annotations

from dataclasses import dataclass

from warden.render import (
    accounting,
    backup,
    bridge,
    budgets,
    configmaps,
    exporter,
    health,
    jail,
    network,
    nodes,
    restapi,
    slurmctld,
)
from warden.render.context import Cluster
from warden.render.pods import Manifest
from warden.render.secrets import SecretSpec, secret_specs


@dataclass(frozen=True)
class Rendered:
    secrets: list[SecretSpec]
    objects: list[Manifest]


def render(cluster: Cluster) -> Rendered:
    # the network policies first: no pod of the cluster runs before they are there
    objects: list[Manifest] = [
        *network.render(cluster),
        configmaps.slurm_config(cluster),
        configmaps.sshd_config(cluster),
    ]
    if cluster.spec.accounting.mode != "Disabled":
        objects.append(configmaps.slurmdbd_config(cluster))
    if (worker_ssh := configmaps.worker_sshd_config(cluster)) is not None:
        objects.append(worker_ssh)
    if (identity := configmaps.identity(cluster)) is not None:
        objects.append(identity)
    objects += jail.render(cluster)
    objects += backup.render(cluster)
    objects += accounting.render(cluster)
    objects += slurmctld.render(cluster)
    objects += restapi.render(cluster)
    objects += exporter.render(cluster)
    objects += nodes.render(cluster)
    objects += health.render(cluster)
    objects += bridge.render(cluster)
    objects += budgets.render(cluster)
    return Rendered(secrets=secret_specs(cluster), objects=with_pull_secrets(objects, cluster.spec.images.pull_secrets))


def pod_spec(obj: Manifest) -> Manifest | None:
    """The pod spec of a workload (Deployment, StatefulSet, Job, WorkerSet, CronJob), else None."""
    spec = obj.get("spec") or {}
    if obj["kind"] == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec")) or {}
    template = spec.get("template")
    return template.get("spec") if isinstance(template, dict) else None


def with_pull_secrets(objects: list[Manifest], secrets: list[str]) -> list[Manifest]:
    """Every pod of the cluster pulls its images with ``secrets`` (spec.images.pullSecrets): the one
    place they are given, so no pod is forgotten."""
    if not secrets:
        return objects
    refs = [{"name": name} for name in secrets]
    for obj in objects:
        spec = pod_spec(obj)
        if spec is not None:
            spec["imagePullSecrets"] = refs
    return objects
