"""Slurm nodes: one WorkerSet per worker group (its pods made by the operator, `warden.workers`), the login
StatefulSet, and their Services."""

from __future__ import annotations

from warden import naming
from warden import quantity as quantity_mod
from warden.model import API_GROUP, API_VERSION, WORKER_SET_KIND, WorkerGroup
from warden.render import config
from warden.render.context import Cluster
from warden.render.pods import (
    POD_DEFAULTS,
    Manifest,
    config_map_volume,
    daemon_probes,
    dns_config,
    empty_dir,
    identity_mounts,
    identity_volumes,
    jail_volume,
    listening_readiness,
    meta,
    mount,
    placed,
    resources,
    runtime_files_outside_jail,
    secret_volume,
    service,
    slurm_container,
    slurm_mounts,
    slurm_volumes,
    statefulset,
    wait_for_jail_init,
)

WORKER = "worker"
LOGIN = "login"


def nodes_service(cluster: Cluster) -> Manifest:
    """Headless Service giving every worker and login pod a DNS name (`<pod>.<cluster>-nodes`)."""
    names = cluster.names
    selector = {naming.INSTANCE_LABEL: cluster.name, naming.SLURM_NODE_LABEL: "true"}
    return service(cluster, names.nodes_service, WORKER, selector, [("slurmd", naming.SLURMD_PORT)], headless=True)


def _worker_security(cluster: Cluster) -> Manifest:
    sec = cluster.spec.security
    profile = sec.worker_seccomp_profile
    seccomp: Manifest = {"type": profile.type}
    if profile.type == "Localhost":
        seccomp["localhostProfile"] = profile.localhost_profile
    out: Manifest = {
        # Mount namespaces, bind mounts and pivot_root for the jail; CPU affinity for user tasks.
        "capabilities": {"add": ["SYS_ADMIN", "SYS_NICE"]},
        "seccompProfile": seccomp,
    }
    armor = app_armor(cluster, "worker")
    if armor is not None:
        out["appArmorProfile"] = armor
    return out


def app_armor(cluster: Cluster, component: str) -> Manifest | None:
    """The AppArmor profile of login or worker pods (spec.security.appArmorProfile): Warden's own
    (``warden-<component>``, loaded on the nodes), none, or for workers the older switch's choice."""
    sec = cluster.spec.security
    if sec.app_armor_profile == "Warden":
        return {"type": "Localhost", "localhostProfile": f"warden-{component}"}
    if component == "login":
        # unconfined by default where the images are this release's: a cluster held on older images keeps its
        # login pods' template (an operator upgrade replaces no pod of it)
        return {"type": "Unconfined"} if sec.app_armor_profile == "Unconfined" or cluster.has_limits else None
    if sec.app_armor_profile == "Unconfined" or sec.worker_app_armor_unconfined:
        return {"type": "Unconfined"}
    return None


def login_security(cluster: Cluster) -> Manifest:
    """The login container's securityContext: SYS_ADMIN (its sessions' jail mounts), and its AppArmor profile
    when there is one to name."""
    out: Manifest = {"capabilities": {"add": ["SYS_ADMIN"]}}
    armor = app_armor(cluster, "login")
    if armor is not None:
        out["appArmorProfile"] = armor
    return out


def _process_env(cluster: Cluster) -> list[Manifest]:
    """Login and worker pods remount their /proc so that users see only their own processes, unless
    spec.security.hideOtherUsersProcesses is off (images/slurm-base/warden-lib.sh: warden_hide_processes)."""
    if cluster.spec.security.hide_other_users_processes or not cluster.has_limits:
        return []
    return [{"name": "WARDEN_HIDE_PROCESSES", "value": "no"}]


def session_limits(cluster: Cluster) -> tuple[int, int] | None:
    """(bytes, millicores) that all of one user's SSH sessions on a login node get together
    (spec.login.userLimits), None when off. The memory is at most the login container's own limit."""
    limits = cluster.spec.login.user_limits
    if not limits.enabled or not cluster.has_limits:
        return None
    memory = int(quantity_mod.parse(limits.memory))
    pod_memory = cluster.spec.login.resources.limits.get("memory")
    if pod_memory is not None:
        memory = min(memory, int(quantity_mod.parse(pod_memory)))
    return memory, max(1, int(quantity_mod.parse(limits.cpu) * 1000))


def _session_env(cluster: Cluster) -> list[Manifest]:
    """The login container's per-user limits (images/login/warden-session-limits)."""
    limits = session_limits(cluster)
    if limits is None:
        return []
    return [
        {"name": "WARDEN_SESSION_MEMORY", "value": str(limits[0])},
        {"name": "WARDEN_SESSION_CPU", "value": str(limits[1])},
        {"name": "WARDEN_SESSION_PIDS", "value": str(cluster.spec.login.user_limits.processes)},
    ]


def _gpu_env(group: WorkerGroup) -> list[Manifest]:
    """A GPU worker shows the driver its container got to every job step (images/worker/warden-driver.sh):
    WARDEN_GPUS says it must, and NVIDIA's runtime hands over the compute libraries and nvidia-smi
    only for the capabilities a container asks for."""
    if not group.gpus.count:
        return []
    return [
        {"name": "WARDEN_GPUS", "value": str(group.gpus.count)},
        {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
    ]


JOB_MAPPING_VOLUME = "dcgm-job-mapping"


def _job_mapping(cluster: Cluster, group: WorkerGroup) -> tuple[list[Manifest], list[Manifest]]:
    """(volumes, mounts) for dcgm-exporter's GPU job mapping (spec.metrics.dcgmJobMapping): a GPU
    worker sees the node's mapping directory (a hostPath, made when missing) at a fixed path, where
    slurmd's prolog and epilog write one file per GPU. CPU workers get nothing: there the scripts find
    no directory and do nothing."""
    mapping = cluster.spec.metrics.dcgm_job_mapping
    if not mapping.enabled or not group.gpus.count:
        return [], []
    volume = {"name": JOB_MAPPING_VOLUME, "hostPath": {"path": mapping.host_path, "type": "DirectoryOrCreate"}}
    return [volume], [mount(JOB_MAPPING_VOLUME, naming.DCGM_JOB_MAPPING_DIR)]


CONTAINER_STORE_VOLUME = "containers"


def _container_store(cluster: Cluster, group: WorkerGroup) -> tuple[list[Manifest], list[Manifest]]:
    """(volumes, mounts) for containers in jobs (spec.containers): the node-local store of images and
    containers, at the same path in the worker container and, through the jail plugin's bind, in the
    jail. An emptyDir with the store's size limit, or the node's directory (hostPath) when one is given."""
    if not cluster.spec.containers_on(group):
        return [], []
    store = cluster.spec.containers.store
    volume: Manifest
    if store.host_path:
        volume = {"name": CONTAINER_STORE_VOLUME, "hostPath": {"path": store.host_path, "type": "DirectoryOrCreate"}}
    else:
        volume = empty_dir(CONTAINER_STORE_VOLUME, None, store.size_limit)
    return [volume], [mount(CONTAINER_STORE_VOLUME, naming.CONTAINER_STORE)]


WORKER_SSH_CONFIG_VOLUME = "worker-sshd-config"
WORKER_SSH_HOST_KEYS_VOLUME = "worker-ssh-host-keys"


def _worker_ssh(cluster: Cluster) -> tuple[list[Manifest], list[Manifest]]:
    """(volumes, mounts) of a worker's sshd (spec.workerSsh): its config and its host key. Nothing while
    it is off: the entrypoint starts sshd only when the config is there."""
    if not cluster.worker_ssh:
        return [], []
    names = cluster.names
    volumes = [
        config_map_volume(WORKER_SSH_CONFIG_VOLUME, names.worker_sshd_config),
        secret_volume(WORKER_SSH_HOST_KEYS_VOLUME, names.worker_ssh_host_keys, mode=0o400),
    ]
    mounts = [
        mount(WORKER_SSH_CONFIG_VOLUME, naming.WORKER_SSH_CONFIG_DIR, read_only=True),
        mount(WORKER_SSH_HOST_KEYS_VOLUME, naming.WORKER_SSH_HOST_KEYS_DIR, read_only=True),
    ]
    return volumes, mounts


def _login_knows_workers(cluster: Cluster) -> tuple[list[Manifest], list[Manifest], list[Manifest]]:
    """(volumes, mounts, env) that let the ssh client of a login session check the workers' host key
    (spec.workerSsh): the key's public half alone (the Secret's other key, the private one, is not
    projected into the login pod) and the names it is known by."""
    if not cluster.worker_ssh:
        return [], [], []
    public = f"{naming.SSH_HOST_KEY}.pub"
    volume = secret_volume("worker-ssh-known-key", cluster.names.worker_ssh_host_keys, mode=0o444)
    volume["secret"]["items"] = [{"key": public, "path": public}]
    env = [{"name": "WARDEN_WORKER_SSH_HOSTS", "value": config.worker_host_patterns(cluster)}]
    return [volume], [mount("worker-ssh-known-key", naming.WORKER_SSH_KNOWN_KEY_DIR, read_only=True)], env


def worker_set(cluster: Cluster, group: WorkerGroup) -> Manifest:
    names = cluster.names
    spec = cluster.spec
    name = names.worker(group.name)
    labels = {**names.labels(WORKER), naming.WORKER_GROUP_LABEL: group.name, naming.SLURM_NODE_LABEL: "true"}
    gpu_limits = {group.gpus.resource_name: str(group.gpus.count)} if group.gpus.count else None
    # Per-job mounts (perJob) are no volume: the jail plugin mounts each job's own tmpfs in the container
    # and binds it into the job's view (config.plugstack_conf).
    shared = [m for m in group.local_mounts if not (m.per_job and cluster.has_limits)]
    local_volumes = [
        empty_dir(f"local-{m.name}", "Memory" if m.medium == "Memory" else None, m.size_limit) for m in shared
    ]
    # Node-local directories are mounted at their jail path in the container, and bound at the same
    # path inside the jail: `sbatch -o /scratch/out` is opened by slurmstepd before the jail plugin
    # runs, and must land where the job sees it.
    local_mounts = [mount(f"local-{m.name}", m.jail_path) for m in shared]
    mapping_volumes, mapping_mounts = _job_mapping(cluster, group)
    store_volumes, store_mounts = _container_store(cluster, group)
    ssh_volumes, ssh_mounts = _worker_ssh(cluster)
    ports = [{"name": "slurmd", "containerPort": naming.SLURMD_PORT}]
    if ssh_mounts:
        ports.append({"name": "ssh", "containerPort": naming.SSH_PORT})
    container: Manifest = {
        "name": "slurmd",
        "image": cluster.image("worker"),
        "imagePullPolicy": spec.images.pull_policy,
        "env": [
            {"name": "WARDEN_SLURMD_CONF", "value": config.slurmd_node_conf(group)},
            {"name": "WARDEN_WORKER_GROUP", "value": group.name},
            *_gpu_env(group),
            *_process_env(cluster),
            cluster.series_env("worker"),
        ],
        "ports": ports,
        "securityContext": _worker_security(cluster),
        "volumeMounts": [
            *slurm_mounts(),
            mount("jail", naming.JAIL_MOUNT),
            mount("spool", naming.SLURMD_SPOOL_DIR),
            mount("run-slurm", naming.SLURM_RUN_DIR),
            *local_mounts,
            *mapping_mounts,
            *store_mounts,
            *ssh_mounts,
            *identity_mounts(cluster),
        ],
        "readinessProbe": listening_readiness(naming.SLURMD_PORT, current=cluster.has_limits),
        "resources": resources(group.resources, gpu_limits),
    }
    pod_spec: Manifest = {
        "subdomain": names.nodes_service,  # with the pod's own `hostname`: <pod>.<cluster>-nodes resolves
        "dnsConfig": dns_config(cluster),
        # On SIGTERM warden.node (the container's PID 1) drains the node, gives running jobs
        # WARDEN_LEAVE_TIMEOUT (40 s), deletes the node from slurmctld, then stops slurmd: all within this
        # grace period (tests/unit/test_node_lifecycle.py holds it to that).
        "terminationGracePeriodSeconds": 60,
        "initContainers": [wait_for_jail_init(cluster, cluster.image("worker"))],
        "containers": [container],
        "volumes": [
            *slurm_volumes(cluster),
            jail_volume(cluster),
            empty_dir("spool"),
            empty_dir("run-slurm"),
            *local_volumes,
            *mapping_volumes,
            *store_volumes,
            *ssh_volumes,
            *identity_volumes(cluster),
        ],
    }
    placed(pod_spec, group)
    set_spec: Manifest = {
        "replicas": group.replicas,
        "selector": {"matchLabels": names.worker_selector(group.name)},
        # Upgrades: pods on an older template are drained and replaced once idle, this many at a time.
        "maxUnavailable": group.max_unavailable,
    }
    if group.scale_in_timeout_seconds is not None:
        set_spec["scaleInTimeoutSeconds"] = group.scale_in_timeout_seconds
    window = cluster.spec.maintenance_window
    if window is not None:
        set_spec["maintenanceWindow"] = {"start": window.start, "durationMinutes": window.duration_minutes}
        if window.days:
            set_spec["maintenanceWindow"]["days"] = list(window.days)
    set_spec["template"] = {
        "metadata": {"labels": labels},
        "spec": runtime_files_outside_jail({**POD_DEFAULTS, **pod_spec}),
    }
    metadata: Manifest = {"name": name, "namespace": cluster.namespace, "labels": labels}
    if group.autoscaled:
        # the apply layer creates it with `replicas`, then never applies that field again
        metadata["annotations"] = {naming.AUTOSCALED_ANNOTATION: "true"}
    return {"apiVersion": f"{API_GROUP}/{API_VERSION}", "kind": WORKER_SET_KIND, "metadata": metadata, "spec": set_spec}


def login_service(cluster: Cluster) -> Manifest:
    names = cluster.names
    svc = cluster.spec.login.service
    port: Manifest = {"name": "ssh", "port": naming.SSH_PORT, "targetPort": naming.SSH_PORT, "protocol": "TCP"}
    if svc.node_port is not None and svc.type != "ClusterIP":
        port["nodePort"] = svc.node_port
    metadata = meta(cluster, names.login, LOGIN)
    if svc.annotations:
        metadata["annotations"] = dict(svc.annotations)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {"type": svc.type, "selector": names.selector(LOGIN), "ports": [port]},
    }


def login_statefulset(cluster: Cluster) -> Manifest:
    names = cluster.names
    spec = cluster.spec
    labels = {**names.labels(LOGIN), naming.SLURM_NODE_LABEL: "true"}
    known_volumes, known_mounts, known_env = _login_knows_workers(cluster)
    container: Manifest = {
        **slurm_container(cluster, "sshd", "login", ("ssh", naming.SSH_PORT)),
        "volumeMounts": [
            *slurm_mounts(),
            mount("jail", naming.JAIL_MOUNT),
            mount("sshd-config", naming.SSH_CONFIG_DIR, read_only=True),
            mount("ssh-host-keys", naming.SSH_HOST_KEYS_DIR, read_only=True),
            mount("run-slurm", naming.SLURM_RUN_DIR),
            *known_mounts,
            *identity_mounts(cluster),
        ],
        # Sessions are chrooted into the jail; the entrypoint binds Slurm's client config (without
        # the key), the auth socket of sackd and the pod's DNS files into it, in this pod only.
        "securityContext": login_security(cluster),
        **daemon_probes(naming.SSH_PORT, liveness_delay=30, startup=cluster.has_limits),
        "resources": resources(spec.login.resources),
    }
    if spec.identity.ldap is not None and spec.accounting.mode != "Disabled" and spec.accounting.default_account:
        # directory users get their association at login (the session hook; the jail's users get theirs
        # from slurmctld's pod, which sees the jail's passwd change)
        container["env"].append({"name": "WARDEN_DEFAULT_ACCOUNT", "value": spec.accounting.default_account})
    container["env"] += [*_session_env(cluster), *_process_env(cluster), *known_env]
    return statefulset(
        cluster,
        names.login,
        labels=labels,
        selector=names.selector(LOGIN),
        service_name=names.nodes_service,
        replicas=spec.login.replicas,
        parallel=True,
        pod_spec=placed(
            {
                "dnsConfig": dns_config(cluster),
                "initContainers": [wait_for_jail_init(cluster, cluster.image("login"))],
                "containers": [container],
                "volumes": [
                    *slurm_volumes(cluster),
                    jail_volume(cluster),
                    config_map_volume("sshd-config", names.sshd_config),
                    secret_volume("ssh-host-keys", names.ssh_host_keys, mode=0o400),
                    empty_dir("run-slurm"),
                    *known_volumes,
                    *identity_volumes(cluster),
                ],
            },
            spec.login,
        ),
    )


def render(cluster: Cluster) -> list[Manifest]:
    out = [nodes_service(cluster), login_service(cluster), login_statefulset(cluster)]
    out += [worker_set(cluster, g) for g in cluster.spec.worker_groups]
    return out
