"""What every renderer is given: the cluster's identity and its validated spec."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from warden.model import SlurmClusterSpec
from warden.naming import Names


@dataclass(frozen=True)
class Cluster:
    name: str
    namespace: str
    spec: SlurmClusterSpec
    #: the API serves monitoring.coreos.com/v1 ServiceMonitors (``metrics.serviceMonitor.mode: Auto``)
    service_monitor_crd: bool = False

    @cached_property
    def names(self) -> Names:
        return Names(cluster=self.name, namespace=self.namespace)

    @property
    def gpu_groups(self) -> list[str]:
        return [g.name for g in self.spec.worker_groups if g.gpus.count > 0]

    @property
    def total_workers(self) -> int:
        return sum(g.replicas for g in self.spec.worker_groups)
