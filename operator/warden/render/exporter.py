"""The Slurm metrics exporter (``warden-slurm-exporter``): a Deployment, its Service with the plain
Prometheus scrape annotations, and a Prometheus Operator ServiceMonitor when one is wanted; and its read
gate (``warden-read-gate``): a Deployment and its Service.

The exporter holds a token for ``warden-reader`` (Secret ``<cluster>-exporter-token``), no signing key and
no administrator's token, and reads Slurm through the gate, which alone holds SlurmUser's token (Secret
``<cluster>-read-gate-token``) and answers only the exporter's reads (``warden.readgate``; the operator
writes both tokens, ``warden.tokens``). Both run as an unprivileged user with nothing else.
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
GATE = "read-gate"
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
        f"--restapi=http://{names.read_gate}:{naming.READ_GATE_PORT}",
        f"--token-file={naming.token_dir(COMPONENT)}/{naming.TOKEN_KEY}",
        f"--user={naming.READER_USER}",
        f"--port={naming.EXPORTER_PORT}",
    ]
    if cluster.spec.accounting.mode != "Disabled":
        args.append(f"--slurmdbd={names.accounting}:{naming.SLURMDBD_PORT}")
    return args


def _deployment(
    cluster: Cluster,
    name: str,
    component: str,
    command: str,
    port: tuple[str, int],
    args: list[str],
    tokens: dict[str, str],
) -> Manifest:
    """One unprivileged container of the operator's image, probed on its port, mounting token Secrets
    (volume name -> component whose token it is) read-only at ``naming.token_dir(component)``."""
    names, spec = cluster.names, cluster.spec
    port_name, number = port
    container: Manifest = {
        "name": component,
        "image": spec.own_image("exporter"),
        "imagePullPolicy": spec.images.pull_policy,
        "command": [command],
        "args": args,
        "ports": [{"name": port_name, "containerPort": number}],
        "volumeMounts": [mount(volume, naming.token_dir(of), read_only=True) for volume, of in tokens.items()],
        # the port, not /metrics: a scrape asks Slurm, and Slurm being away is no reason to restart
        "readinessProbe": tcp_probe(number, period=10),
        "livenessProbe": tcp_probe(number, period=20, failures=3, initial_delay=10),
        "resources": resources(spec.metrics.resources),
        "securityContext": unprivileged(EXPORTER_UID),
    }
    template = {
        # the scrape annotations are the Service's alone: on the pod too, a Prometheus following both scrapes twice
        "metadata": {"labels": names.labels(component)},
        "spec": runtime_files_outside_jail(
            {
                **POD_DEFAULTS,
                "dnsConfig": dns_config(cluster),
                # the token files are root's; group-readable (0440) by the container's group, and no one else's
                "securityContext": {**POD_DEFAULTS["securityContext"], "fsGroup": EXPORTER_UID},
                "containers": [container],
                # optional: the operator writes the tokens in its first Slurm sync round after the key exists
                "volumes": [
                    secret_volume(volume, names.token(of), mode=0o440, optional=True) for volume, of in tokens.items()
                ],
            }
        ),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(cluster, name, component),
        "spec": {"replicas": 1, "selector": {"matchLabels": names.selector(component)}, "template": template},
    }


def exporter_deployment(cluster: Cluster) -> Manifest:
    port = ("metrics", naming.EXPORTER_PORT)
    args, tokens = exporter_args(cluster), {"token": COMPONENT}
    return _deployment(cluster, cluster.names.exporter, COMPONENT, "warden-slurm-exporter", port, args, tokens)


def read_gate_deployment(cluster: Cluster) -> Manifest:
    names = cluster.names
    args = [
        f"--restapi=http://{names.restapi}:{naming.RESTAPI_PORT}",
        f"--caller-token={naming.token_dir(COMPONENT)}/{naming.TOKEN_KEY}",
        f"--token={naming.token_dir(GATE)}/{naming.TOKEN_KEY}",
        f"--port={naming.READ_GATE_PORT}",
    ]
    tokens = {"caller-token": COMPONENT, "token": GATE}
    port = ("read-gate", naming.READ_GATE_PORT)
    return _deployment(cluster, names.read_gate, GATE, "warden-read-gate", port, args, tokens)


def read_gate_service(cluster: Cluster) -> Manifest:
    names = cluster.names
    return service(cluster, names.read_gate, GATE, names.selector(GATE), [("read-gate", naming.READ_GATE_PORT)])


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
    objects = [
        exporter_service(cluster),
        exporter_deployment(cluster),
        read_gate_service(cluster),
        read_gate_deployment(cluster),
    ]
    if service_monitor_wanted(cluster):
        objects.append(service_monitor(cluster))
    return objects
