"""The Slurm metrics exporter (``warden-slurm-exporter``): a Deployment, its Service with the plain
Prometheus scrape annotations, and a Prometheus Operator ServiceMonitor when one is wanted.

The exporter reads Slurm through slurmrestd with tokens it signs with the cluster's JWT key (mounted
read-only, as the controller has it); it runs as an unprivileged user with nothing else.
"""

from __future__ import annotations

from warden import naming
from warden.render.context import Cluster
from warden.render.pods import (
    POD_DEFAULTS,
    Manifest,
    dns_config,
    meta,
    mount,
    resources,
    runtime_files_outside_jail,
    secret_volume,
    service,
    tcp_probe,
    unprivileged,
)

COMPONENT = "exporter"
#: the operator image's unprivileged user
EXPORTER_UID = 10001
SERVICE_MONITOR_API = "monitoring.coreos.com/v1"
#: what the exporter's Service says to a Prometheus that follows the usual annotations
SCRAPE_ANNOTATIONS = {
    "prometheus.io/scrape": "true",
    "prometheus.io/port": str(naming.EXPORTER_PORT),
    "prometheus.io/path": "/metrics",
}


def service_monitor_wanted(cluster: Cluster) -> bool:
    mode = cluster.spec.metrics.service_monitor.mode
    return cluster.spec.metrics.enabled and (mode == "Enabled" or (mode == "Auto" and cluster.service_monitor_crd))


def exporter_args(cluster: Cluster) -> list[str]:
    names = cluster.names
    args = [
        f"--cluster={cluster.namespace}/{cluster.name}",
        f"--restapi=http://{names.restapi}:{naming.RESTAPI_PORT}",
        f"--jwt-key={naming.JWT_KEY_DIR}/{naming.JWT_KEY}",
        f"--port={naming.EXPORTER_PORT}",
    ]
    if cluster.spec.accounting.mode != "Disabled":
        args.append(f"--slurmdbd={names.accounting}:{naming.SLURMDBD_PORT}")
    return args


def exporter_deployment(cluster: Cluster) -> Manifest:
    names, spec = cluster.names, cluster.spec
    container: Manifest = {
        "name": "exporter",
        "image": spec.images.exporter,
        "imagePullPolicy": spec.images.pull_policy,
        "command": ["warden-slurm-exporter"],
        "args": exporter_args(cluster),
        "ports": [{"name": "metrics", "containerPort": naming.EXPORTER_PORT}],
        "volumeMounts": [mount("jwt-key", naming.JWT_KEY_DIR, read_only=True)],
        # the port, not /metrics: a scrape asks Slurm, and Slurm being away is no reason to restart
        "readinessProbe": tcp_probe(naming.EXPORTER_PORT, period=10),
        "livenessProbe": tcp_probe(naming.EXPORTER_PORT, period=20, failures=3, initial_delay=10),
        "resources": resources(spec.metrics.resources),
        "securityContext": unprivileged(EXPORTER_UID),
    }
    template = {
        # the scrape annotations are the Service's alone: on the pod too, a Prometheus following both scrapes twice
        "metadata": {"labels": names.labels(COMPONENT)},
        "spec": runtime_files_outside_jail(
            {
                **POD_DEFAULTS,
                "dnsConfig": dns_config(cluster),
                # the key file is root's; group-readable (0440) by the exporter's group, and no one else's
                "securityContext": {**POD_DEFAULTS["securityContext"], "fsGroup": EXPORTER_UID},
                "containers": [container],
                "volumes": [secret_volume("jwt-key", names.jwt_key, mode=0o440)],
            }
        ),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(cluster, names.exporter, COMPONENT),
        "spec": {"replicas": 1, "selector": {"matchLabels": names.selector(COMPONENT)}, "template": template},
    }


def exporter_service(cluster: Cluster) -> Manifest:
    names = cluster.names
    svc = service(cluster, names.exporter, COMPONENT, names.selector(COMPONENT), [("metrics", naming.EXPORTER_PORT)])
    svc["metadata"]["annotations"] = {**svc["metadata"].get("annotations", {}), **SCRAPE_ANNOTATIONS}
    return svc


def service_monitor(cluster: Cluster) -> Manifest:
    names, monitor = cluster.names, cluster.spec.metrics.service_monitor
    obj_meta = meta(cluster, names.exporter, COMPONENT)
    obj_meta["labels"] = {**monitor.labels, **obj_meta["labels"]}
    return {
        "apiVersion": SERVICE_MONITOR_API,
        "kind": "ServiceMonitor",
        "metadata": obj_meta,
        "spec": {
            "selector": {"matchLabels": names.selector(COMPONENT)},
            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": monitor.interval}],
        },
    }


def render(cluster: Cluster) -> list[Manifest]:
    if not cluster.spec.metrics.enabled:
        return []
    objects = [exporter_service(cluster), exporter_deployment(cluster)]
    if service_monitor_wanted(cluster):
        objects.append(service_monitor(cluster))
    return objects
