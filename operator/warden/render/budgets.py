"""PodDisruptionBudgets: evictions (`kubectl drain`, cluster autoscalers) never take a pod Slurm needs.

- slurmctld: one replica, none may be evicted (its queue and running jobs depend on it). Move it by
  deleting the pod yourself; its state is on a volume. With backups, all but one may be evicted at a
  time: an evicted controller in charge hands over to a backup first (images/controller).
- worker pods running a job: the operator labels a worker pod ``slurm.warden.dev/busy=true`` while its
  Slurm node is allocated, mixed or completing (``warden.nodesync``); none of those may be evicted.
  An idle worker may be: its StatefulSet makes it again. A cordoned Kubernetes node also drains its
  Slurm nodes (no new jobs), so `kubectl drain` waits for the running jobs, then goes on.
"""

from __future__ import annotations

from warden import naming
from warden.render.context import Cluster
from warden.render.pods import Manifest, meta


def _budget(
    cluster: Cluster, name: str, component: str, selector: dict[str, str], max_unavailable: int = 0
) -> Manifest:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": meta(cluster, name, component),
        "spec": {"maxUnavailable": max_unavailable, "selector": {"matchLabels": selector}},
    }


def render(cluster: Cluster) -> list[Manifest]:
    names = cluster.names
    busy = {**names.selector("worker"), naming.BUSY_LABEL: "true"}
    return [
        _budget(
            cluster,
            names.controller,
            "controller",
            names.selector("controller"),
            max_unavailable=cluster.spec.controller.replicas - 1,
        ),
        _budget(cluster, names.busy_workers_budget, "worker", busy),
    ]
