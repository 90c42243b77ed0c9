"""What every renderer is given: the cluster's identity and its validated spec."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from warden import imagecompat
from warden.model import SlurmClusterSpec
from warden.naming import SLURM_SERIES_ENV, Names


@dataclass(frozen=True)
class ServiceAccountRef:
    """A ServiceAccount of another namespace than the cluster's (the bridge's, in the operator's)."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Cluster:
    name: str
    namespace: str
    spec: SlurmClusterSpec
    #: the API serves monitoring.coreos.com/v1 ServiceMonitors (``metrics.serviceMonitor.mode: Auto``)
    service_monitor_crd: bool = False
    #: (image, Slurm series) by spec.images key of the Slurm-carrying images, as a Slurm upgrade releases
    #: them (``warden.upgrade.planner``); a key not here: the spec's image of ``spec.slurmVersion``
    slurm_images: Mapping[str, tuple[str, str]] = field(default_factory=dict, hash=False, compare=False)
    #: the blocks some worker's Kubernetes node is labelled with, as the Slurm sync last saw them
    #: (status.slurmNodes.topology.blocks): topology.conf names them (``warden.topology.planner``)
    blocks: tuple[str, ...] = ()
    #: the bridge's ServiceAccount (the operator's ``--bridge-service-account``): with an enabled
    #: spec.bridge it may read the cluster's bridge token Secret (``warden.render.bridge``); None: no flag
    bridge_account: ServiceAccountRef | None = None

    @cached_property
    def names(self) -> Names:
        return Names(cluster=self.name, namespace=self.namespace)

    @cached_property
    def has_limits(self) -> bool:
        """Whether the cluster's images carry this release's limits (per-job space, the process limit,
        login sessions' limits, the /proc switch, the config check) and get its pod changes (sshd's and
        slurmdbd's startup probes, the worker's readiness every 10 s): ``warden.imagecompat``."""
        return imagecompat.has_limits(self.spec.images.version)

    @property
    def worker_ssh(self) -> bool:
        """SSH to the workers (spec.workerSsh), where the cluster's images have it (this release's: an older
        worker image would ignore the config, an older login image the workers' host key)."""
        return self.spec.worker_ssh.enabled and self.has_limits

    def image(self, component: str) -> str:
        """The image of a Slurm-carrying component (``model.SLURM_IMAGES`` key): every renderer asks here."""
        if component in self.slurm_images:
            return self.slurm_images[component][0]
        return self.spec.image(component)

    def slurm_series(self, component: str) -> str:
        """The Slurm series of that image: its pods get it as ``WARDEN_SLURM_SERIES``."""
        if component in self.slurm_images:
            return self.slurm_images[component][1]
        return self.spec.slurm_version

    def series_env(self, component: str) -> dict[str, str]:
        """The env entry that tells a Slurm container which series its image must carry."""
        return {"name": SLURM_SERIES_ENV, "value": self.slurm_series(component)}

    @property
    def gpu_groups(self) -> list[str]:
        return [g.name for g in self.spec.worker_groups if g.gpus.count > 0]

    @property
    def total_workers(self) -> int:
        return sum(g.replicas for g in self.spec.worker_groups)
