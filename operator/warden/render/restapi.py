"""slurmrestd: Slurm's REST API with JWT auth, a stateless Deployment and its Service.

slurmrestd runs as ``nobody`` with nothing but slurm.conf: it holds no key. Each request carries a
JSON Web Token (``X-SLURM-USER-NAME``, ``X-SLURM-USER-TOKEN``) that slurmrestd hands to slurmctld, which
checks it with the key from Secret ``<cluster>-jwt-key`` (``AuthAltTypes=auth/jwt``). People get a
token from ``scontrol token`` on a login node; the operator signs its own with the same key.
"""

from __future__ import annotations

from warden import naming
from warden.render.context import Cluster
from warden.render.pods import (
    POD_DEFAULTS,
    Manifest,
    config_map_volume,
    dns_config,
    meta,
    mount,
    resources,
    runtime_files_outside_jail,
    service,
    tcp_probe,
    unprivileged,
)

COMPONENT = "restapi"
NOBODY = 65534


def restapi_service(cluster: Cluster) -> Manifest:
    names = cluster.names
    return service(cluster, names.restapi, COMPONENT, names.selector(COMPONENT), [("http", naming.RESTAPI_PORT)])


def restapi_deployment(cluster: Cluster) -> Manifest:
    names = cluster.names
    spec = cluster.spec
    container: Manifest = {
        "name": "slurmrestd",
        "image": cluster.image("controller"),
        "imagePullPolicy": spec.images.pull_policy,
        "command": ["slurmrestd"],
        # rest_auth/jwt only: no request is trusted for who it comes from but by its token.
        "args": ["-a", "rest_auth/jwt", "-s", "openapi/slurmctld", f"0.0.0.0:{naming.RESTAPI_PORT}"],
        "env": [
            # slurm.conf straight from the ConfigMap (gres.conf, cgroup.conf beside it); no key needed.
            {"name": "SLURM_CONF", "value": f"{naming.SLURM_CONFIG_DIR}/slurm.conf"},
            # auth/jwt as slurmrestd's own auth plugin, so each request's token goes on to slurmctld
            # (without it: "Rejecting thread config token for user ..." and 401 to every request)
            {"name": "SLURM_JWT", "value": "daemon"},
            # slurmrestd unshares its SysV IPC namespace and file table at start; the runtime's default
            # seccomp profile refuses unshare() without CAP_SYS_ADMIN ("fatal: Unable to unshare System
            # V namespace: Operation not permitted"). Its remaining checks stay: not root, not SlurmUser.
            {"name": "SLURMRESTD_SECURITY", "value": "disable_unshare_sysv,disable_unshare_files"},
            cluster.series_env("controller"),
        ],
        "ports": [{"name": "http", "containerPort": naming.RESTAPI_PORT}],
        "volumeMounts": [mount("slurm-config", naming.SLURM_CONFIG_DIR, read_only=True)],
        "readinessProbe": tcp_probe(naming.RESTAPI_PORT, period=5),
        "livenessProbe": tcp_probe(naming.RESTAPI_PORT, period=20, failures=6, initial_delay=10),
        "resources": resources(spec.rest_api.resources),
        "securityContext": unprivileged(NOBODY),
    }
    labels = names.labels(COMPONENT)
    template = {
        "metadata": {"labels": labels},
        "spec": runtime_files_outside_jail(
            {
                **POD_DEFAULTS,
                "dnsConfig": dns_config(cluster),
                "containers": [container],
                "volumes": [config_map_volume("slurm-config", names.slurm_config)],
            }
        ),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta(cluster, names.restapi, COMPONENT),
        "spec": {"replicas": 1, "selector": {"matchLabels": names.selector(COMPONENT)}, "template": template},
    }


def render(cluster: Cluster) -> list[Manifest]:
    return [restapi_service(cluster), restapi_deployment(cluster)]
