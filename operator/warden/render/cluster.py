"""Everything a SlurmCluster is made of, in the order it is applied."""

from __future__ import annotations

from dataclasses import dataclass

from warden.render import (
    accounting,
    budgets,
    configmaps,
    controller,
    exporter,
    health,
    jail,
    network,
    nodes,
    restapi,
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
    if (identity := configmaps.identity(cluster)) is not None:
        objects.append(identity)
    objects += jail.render(cluster)
    objects += accounting.render(cluster)
    objects += controller.render(cluster)
    objects += restapi.render(cluster)
    objects += exporter.render(cluster)
    objects += nodes.render(cluster)
    objects += health.render(cluster)
    objects += budgets.render(cluster)
    return Rendered(secrets=secret_specs(cluster), objects=objects)
