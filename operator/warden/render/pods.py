"""Small builders shared by the workload renderers: volumes, mounts, probes, pod scaffolding."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from warden import naming
from warden.kube.manifest import Manifest
from warden.model import Placed, ResourceRequirements, Toleration
from warden.render.context import Cluster

__all__ = ["Manifest"]  # re-exported: the renderers' one name for an object


def meta(cluster: Cluster, name: str, component: str, **extra: Any) -> Manifest:
    """metadata of a child object. Owner references are added by the apply layer."""
    out: Manifest = {"name": name, "namespace": cluster.namespace, "labels": cluster.names.labels(component)}
    out.update(extra)
    return out


def content_hash(*parts: Any) -> str:
    """A short stable hash of JSON-able values (config hashes on pod templates, Job generations)."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def resources(req: ResourceRequirements, extra_limits: dict[str, str] | None = None) -> Manifest:
    out: Manifest = {}
    if req.requests:
        out["requests"] = dict(req.requests)
    limits = {**req.limits, **(extra_limits or {})}
    if limits:
        out["limits"] = limits
    return out


def tolerations(items: list[Toleration]) -> list[Manifest]:
    return [t.model_dump(by_alias=True, exclude_none=True) for t in items]


def placed(pod_spec: Manifest, where: Placed) -> Manifest:
    """``pod_spec`` with the component's nodeSelector and tolerations (none: as it was)."""
    if where.node_selector:
        pod_spec["nodeSelector"] = dict(where.node_selector)
    if where.tolerations:
        pod_spec["tolerations"] = tolerations(where.tolerations)
    return pod_spec


# --- volumes ---------------------------------------------------------------------------------


def config_map_volume(name: str, config_map: str, mode: int = 0o444) -> Manifest:
    return {"name": name, "configMap": {"name": config_map, "defaultMode": mode}}


def secret_volume(name: str, secret: str, mode: int = 0o400, optional: bool = False) -> Manifest:
    """A Secret as files; ``optional``: the pod starts before the Secret exists, and the kubelet fills the
    volume once it does."""
    volume: Manifest = {"name": name, "secret": {"secretName": secret, "defaultMode": mode}}
    if optional:
        volume["secret"]["optional"] = True
    return volume


def jail_volume(cluster: Cluster) -> Manifest:
    claim = cluster.spec.jail.existing_claim or cluster.names.jail
    return {"name": "jail", "persistentVolumeClaim": {"claimName": claim}}


def empty_dir(name: str, medium: str | None = None, size_limit: str | None = None) -> Manifest:
    spec: Manifest = {}
    if medium:
        spec["medium"] = medium
    if size_limit:
        spec["sizeLimit"] = size_limit
    return {"name": name, "emptyDir": spec}


def slurm_container(cluster: Cluster, name: str, component: str, port: tuple[str, int] | None = None) -> Manifest:
    """A Slurm container as every Slurm pod starts one: the image of ``component`` for the cluster's
    series, the pull policy, ``WARDEN_SLURM_SERIES`` (its entrypoint refuses an image of another
    series) and its port, if it has one."""
    out: Manifest = {
        "name": name,
        "image": cluster.image(component),
        "imagePullPolicy": cluster.spec.images.pull_policy,
        "env": [cluster.series_env(component)],
    }
    if port is not None:
        out["ports"] = [{"name": port[0], "containerPort": port[1]}]
    return out


def mount(name: str, path: str, read_only: bool = False) -> Manifest:
    out: Manifest = {"name": name, "mountPath": path}
    if read_only:
        out["readOnly"] = True
    return out


def slurm_volumes(cluster: Cluster) -> list[Manifest]:
    """slurm.conf & co. and the auth key: every Slurm daemon and client pod has them."""
    return [
        config_map_volume("slurm-config", cluster.names.slurm_config),
        secret_volume("slurm-key", cluster.names.slurm_key),
    ]


def slurm_mounts() -> list[Manifest]:
    return [
        mount("slurm-config", naming.SLURM_CONFIG_DIR, read_only=True),
        mount("slurm-key", naming.SLURM_KEY_DIR, read_only=True),
    ]


def identity_volumes(cluster: Cluster) -> list[Manifest]:
    """Directory users (spec.identity.ldap) for a pod that runs SSSD (controller, login, workers): the
    rendered sssd.conf, the bind Secret and the CA bundle. None without a directory."""
    ldap = cluster.spec.identity.ldap
    if ldap is None:
        return []
    out = [config_map_volume("identity", cluster.names.identity)]
    if ldap.bind_secret:
        out.append(secret_volume("identity-bind", ldap.bind_secret))
    if ldap.ca_secret_ref:
        ref = ldap.ca_secret_ref
        items = [{"key": ref.key, "path": naming.IDENTITY_CA_FILE.rsplit("/", 1)[1]}]
        out.append({"name": "identity-ca", "secret": {"secretName": ref.name, "defaultMode": 0o444, "items": items}})
    return out


def identity_mounts(cluster: Cluster) -> list[Manifest]:
    """The mounts of ``identity_volumes``."""
    paths = {
        "identity": naming.IDENTITY_CONFIG_DIR,
        "identity-bind": naming.IDENTITY_BIND_DIR,
        "identity-ca": naming.IDENTITY_CA_DIR,
    }
    return [mount(v["name"], paths[v["name"]], read_only=True) for v in identity_volumes(cluster)]


# --- probes ---------------------------------------------------------------------------------


def tcp_probe(port: int, period: int = 10, failures: int = 3, initial_delay: int = 0) -> Manifest:
    return {
        "tcpSocket": {"port": port},
        "periodSeconds": period,
        "failureThreshold": failures,
        "initialDelaySeconds": initial_delay,
    }


def listening_probe(port: int, period: int = 10, failures: int = 3, initial_delay: int = 0,
                    timeout: int = 5) -> Manifest:  # fmt: skip
    """Like tcp_probe (ready once the daemon listens), without connecting: slurmd and sshd log every
    bare TCP connect as a broken connection, every `period` seconds on every node. A check that takes
    longer than ``timeout`` s counts as a failure."""
    return {
        "exec": {"command": [naming.LISTENING_CHECK, str(port)]},
        "periodSeconds": period,
        "failureThreshold": failures,
        "initialDelaySeconds": initial_delay,
        "timeoutSeconds": timeout,
    }


#: how long a listening check of readiness or liveness may take before it counts as a failure (its exec, on a
#: starved node)
LISTENING_CHECK_SECONDS = 15


def listening_readiness(port: int, current: bool) -> Manifest:
    """A daemon's readiness: it listens, looked at every 10 s on this release's images (each look is an exec
    into the container, about a second of a TCG node's CPU), each look having ``LISTENING_CHECK_SECONDS``
    (on a starved TCG VM node the exec alone took over 5 s again and again: the login left its Service and
    users' SSH was refused while sshd served); every 5 s with 5 s, as that release rendered it, on an older
    release's (``current`` False: ``warden.imagecompat``), so that upgrading the operator changes no pod
    template."""
    if current:
        return listening_probe(port, period=10, timeout=LISTENING_CHECK_SECONDS)
    return listening_probe(port, period=5)


#: how long a daemon's pod may take to start listening before the kubelet restarts it
DAEMON_START_SECONDS = 600


def daemon_probes(port: int, liveness_delay: int, startup: bool = True) -> Manifest:
    """A long-running daemon's probes: up to ``DAEMON_START_SECONDS`` to start listening (what its entrypoint
    does first takes minutes on a slow node: the login's setup took three on a TCG VM node, where a liveness
    probe from 30 s after start restarted it just as sshd came up, again and again), ready once it listens
    (checked every 10 s), restarted after two minutes of not listening once it has (6 x 20 s), a check
    having ``LISTENING_CHECK_SECONDS`` to answer: on a starved node (a TCG VM node, every pod starting at
    once) the check's own exec took over 5 s for two minutes while sshd listened, and liveness restarted
    it three times, each restart starving the node again.

    ``startup`` False (a cluster held on an older release's images, ``warden.imagecompat``): the probes that
    release rendered, liveness from ``liveness_delay`` s after start and no startup probe, so that upgrading
    the operator changes no pod template and replaces no pod."""
    if not startup:
        return {
            "readinessProbe": listening_readiness(port, current=False),
            "livenessProbe": listening_probe(port, period=20, failures=6, initial_delay=liveness_delay),
        }
    return {
        "startupProbe": listening_probe(port, period=5, failures=DAEMON_START_SECONDS // 5),
        "readinessProbe": listening_readiness(port, current=True),
        "livenessProbe": listening_probe(port, period=20, failures=6, timeout=LISTENING_CHECK_SECONDS),
    }


#: seconds slurmctld has to answer each of the probe's reads (Slurm's own MessageTimeout is 10)
SLURMCTLD_ANSWER_SECONDS = 8


#: liveness: how long slurmctld may go without answering any of its checks (startup's, readiness's) before
#: liveness asks it itself
SLURMCTLD_SILENT_SECONDS = 60
#: ... and the bound of each of liveness's own reads: longer than readiness's, since a client's start took
#: seconds on a starved node and Slurm's clients wait MessageTimeout (10 s) for the answer
SLURMCTLD_LIVENESS_ANSWER_SECONDS = 20


def slurmctld_probes(current: bool = True) -> Manifest:
    """slurmctld's probes. Startup and readiness run ``naming.SLURMCTLD_HEALTH_CHECK``, a job read and a
    node read that must each answer within ``SLURMCTLD_ANSWER_SECONDS`` (a listening port or a ping is not
    enough: a slurmctld stuck on a lock listens and pings while every user's command hangs); each answer's
    time is noted in the container.

    - startup: up to 10 minutes to recover its state (large queues), checked every 10 s;
    - readiness: not Ready from the second failed check (20 s);
    - liveness: the check's other form: nothing started while a check had its answer within
      ``SLURMCTLD_SILENT_SECONDS``, else the reads again, each within ``SLURMCTLD_LIVENESS_ANSWER_SECONDS``;
      restarted after two such failures in a row (about two minutes without any answer), then the pod's
      grace period. A slurmctld answering slowly (a loaded node: on a starved TCG VM node reads took over
      8 s for minutes while it served jobs, and restarting it, its state's reload, starved the node
      further) is left to answer. The Service is headless and publishes not-ready addresses: slurmd and
      the clients still resolve it while it is not Ready.

    ``current`` False (an older release's images, ``warden.imagecompat``): liveness runs the reads too,
    every 20 s, three failures in a row, as that release rendered it.
    """
    seconds = SLURMCTLD_ANSWER_SECONDS

    def probe(period: int, failures: int, command: list[str] | None = None, bound: int = seconds) -> Manifest:
        return {
            "exec": {"command": command or [naming.SLURMCTLD_HEALTH_CHECK, str(bound)]},
            "periodSeconds": period,
            "failureThreshold": failures,
            # both reads, each with its bound and the kill's 2 s, and room to start the commands
            "timeoutSeconds": 2 * (bound + 2) + 5,
        }

    liveness = probe(period=20, failures=3)
    if current:
        bound = SLURMCTLD_LIVENESS_ANSWER_SECONDS
        command = [naming.SLURMCTLD_HEALTH_CHECK, "--answered-within", str(SLURMCTLD_SILENT_SECONDS), str(bound)]
        liveness = probe(period=20, failures=2, command=command, bound=bound)
    return {
        "startupProbe": probe(period=10, failures=60),
        "readinessProbe": probe(period=10, failures=2),
        "livenessProbe": liveness,
    }


def dns_config(cluster: Cluster) -> Manifest:
    """Short Slurm node names and the controller resolve from every pod of the cluster."""
    ns = cluster.namespace
    return {
        "searches": [
            cluster.names.nodes_domain,
            f"{cluster.names.controller}.{ns}.svc.cluster.local",
        ]
    }


def wait_for_jail_init(cluster: Cluster, image: str) -> Manifest:
    """Init container that holds a pod until the populate-jail Job has filled the jail (the sentinel
    file it writes last), saying what it waits for in its log every 30 s; the pod stays not Ready
    (``Init:0/1``) meanwhile."""
    marker = f"{naming.JAIL_MOUNT}/{naming.JAIL_POPULATED_SENTINEL}"
    job = cluster.names.populate_jail
    script = (
        f'n=0; until [ -e "{marker}" ]; do '
        f'[ $((n % 15)) -eq 0 ] && echo "waiting for the jail: Job {job} has not populated it yet'
        f' (no {marker}; $((n * 2))s)"; n=$((n + 1)); sleep 2; done; '
        f'echo "jail populated: $(head -n 1 "{marker}")"'
    )
    return {
        "name": "wait-for-jail",
        "image": image,
        "imagePullPolicy": cluster.spec.images.pull_policy,
        "command": ["/bin/sh", "-c", script],
        "volumeMounts": [mount("jail", naming.JAIL_MOUNT, read_only=True)],
    }


# --- workload scaffolding -----------------------------------------------------------------------


# Every pod of a Slurm cluster: no Kubernetes API token (nothing in them talks to the API; the NCCL
# check's Job, which writes its report, has its own ServiceAccount), no Service environment variables,
# and the runtime's default seccomp profile (workers' containers name their own: they need pivot_root).
def unprivileged(uid: int) -> Manifest:
    """A container's securityContext: ``uid`` (and its group), no root, no privilege escalation, a
    read-only root filesystem, no capabilities."""
    return {
        "runAsUser": uid,
        "runAsGroup": uid,
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


POD_DEFAULTS: Manifest = {
    "enableServiceLinks": False,
    "automountServiceAccountToken": False,
    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
}


def runtime_files_outside_jail(pod_spec: Manifest) -> Manifest:
    """``pod_spec`` with every container's termination message file at ``naming.TERMINATION_LOG``.

    The kubelet binds a world-writable file at each container's terminationMessagePath and reports
    what it holds when the container ends. Its default, /dev/termination-log, lies in the /dev that
    login and worker containers show to SSH sessions and job steps: any user could write what
    Kubernetes says about the end of sshd or slurmd. Every pod template of a cluster goes through here
    (``statefulset`` does it for its callers)."""
    out = dict(pod_spec)
    for key in ("initContainers", "containers"):
        if key in out:
            out[key] = [{**c, "terminationMessagePath": naming.TERMINATION_LOG} for c in out[key]]
    return out


def claim_spec(size: str, storage_class: str | None, access_mode: str = "ReadWriteOnce") -> Manifest:
    spec: Manifest = {"accessModes": [access_mode], "resources": {"requests": {"storage": size}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return spec


def claim_template(name: str, labels: dict[str, str], spec: Manifest) -> Manifest:
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


def statefulset(
    cluster: Cluster,
    name: str,
    *,
    labels: dict[str, str],
    selector: dict[str, str],
    service_name: str,
    replicas: int,
    pod_spec: Manifest,
    annotations: dict[str, str] | None = None,
    claims: list[Manifest] | None = None,
    parallel: bool = False,
) -> Manifest:
    """A StatefulSet whose object and pods carry `labels` (a superset of the immutable `selector`).

    `parallel`: pods start and stop all at once (Slurm nodes are independent of each other)."""
    spec: Manifest = {"replicas": replicas, "serviceName": service_name}
    if parallel:
        spec["podManagementPolicy"] = "Parallel"
    spec["selector"] = {"matchLabels": selector}
    template_meta: Manifest = {"labels": labels}
    if annotations:
        template_meta["annotations"] = annotations
    spec["template"] = {"metadata": template_meta, "spec": runtime_files_outside_jail({**POD_DEFAULTS, **pod_spec})}
    if claims:
        spec["volumeClaimTemplates"] = claims
    metadata = {"name": name, "namespace": cluster.namespace, "labels": labels}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": metadata, "spec": spec}


def service(
    cluster: Cluster,
    name: str,
    component: str,
    selector: dict[str, str],
    ports: list[tuple[str, int]],
    *,
    headless: bool = False,
) -> Manifest:
    """A Service; `headless` ones publish not-ready pods too, so Slurm names resolve during start."""
    spec: Manifest = {}
    if headless:
        spec = {"clusterIP": "None", "publishNotReadyAddresses": True}
    spec["selector"] = selector
    spec["ports"] = [{"name": port_name, "port": port, "targetPort": port} for port_name, port in ports]
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta(cluster, name, component), "spec": spec}
