"""Config file text: slurm.conf, cgroup.conf, gres.conf, plugstack.conf, sshd_config, slurmdbd.conf."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import jinja2

from warden import naming
from warden import quantity as quantity_mod
from warden.model import SLURMDBD_PRIVATE_DATA, WorkerGroup
from warden.naming import group_feature
from warden.render.context import Cluster
from warden.slurm import confighash

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("warden", "templates"),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    autoescape=False,
)

# Room for dynamic nodes above the desired count, so scaling up never changes slurm.conf (nor gres.conf:
# each GPU worker writes its own line).
MIN_MAX_NODE_COUNT = 1024


def _render(template: str, **values: Any) -> str:
    return _ENV.get_template(template).render(**values)


def _common(cluster: Cluster) -> dict[str, Any]:
    return {"cluster": cluster.name, "namespace": cluster.namespace}


def nodeset_name(group: str) -> str:
    return f"ns_{group.replace('-', '_')}"


def slurm_conf(cluster: Cluster) -> str:
    spec = cluster.spec
    names = cluster.names
    quick = spec.health_checks.quick
    accounting = None
    if spec.accounting.mode != "Disabled":
        accounting = {"host": names.accounting, "port": naming.SLURMDBD_PORT, "enforce": spec.accounting.enforce}
    groups = {g.name: g for g in spec.worker_groups}
    partitions = [
        {
            "name": p.name,
            "nodes": [nodeset_name(w) for w in p.worker_groups if w in groups],
            "default": p.default,
            "max_time": p.max_time,
            "allow_groups": p.allow_groups,
            "def_mem_per_cpu": default_mem_per_cpu([groups[w] for w in p.worker_groups if w in groups]),
        }
        for p in spec.effective_partitions()
    ]
    if (bridge := bridge_partition(cluster)) is not None:
        partitions.append(bridge)
    return _render(
        "slurm.conf.j2",
        **_common(cluster),
        controllers=[
            {
                "pod": pod,
                "address": (
                    names.controller_service_address(pod)
                    if spec.controller.has_backup
                    else names.controller_pod_address(pod)
                ),
            }
            for pod in names.controller_pods(spec.controller.replicas)
        ],
        takeover_seconds=spec.controller.takeover_seconds if spec.controller.has_backup else None,
        slurmctld_port=naming.SLURMCTLD_PORT,
        slurmd_port=naming.SLURMD_PORT,
        state_save_location=naming.STATE_SAVE_LOCATION,
        slurmd_spool_dir=naming.SLURMD_SPOOL_DIR,
        run_dir=naming.SLURM_RUN_DIR,
        jwt_key=f"{naming.SLURM_ETC}/{naming.JWT_KEY}",
        max_token_lifespan=spec.security.max_token_lifespan_seconds,
        max_node_count=max(MIN_MAX_NODE_COUNT, 2 * cluster.total_workers),
        gres_types=["gpu"] if cluster.gpu_groups else [],
        quick_check=(
            {"program": naming.QUICKCHECK_PROGRAM, "interval": quick.interval_seconds} if quick.enabled else None
        ),
        accounting=accounting,
        job_mapping=(
            {"prolog": naming.PROLOG_PROGRAM, "epilog": naming.EPILOG_PROGRAM}
            if spec.metrics.dcgm_job_mapping.enabled
            else None
        ),
        contain=cluster.worker_ssh,
        nodesets=[{"name": nodeset_name(g.name), "feature": group_feature(g.name)} for g in spec.worker_groups],
        standby=[standby_nodes(names.worker(g.name), g) for g in spec.worker_groups if g.autoscaled],
        partitions=partitions,
        private_data=list(spec.slurm_config.private_data),
        extra_lines=list(spec.slurm_config.extra_lines),
        topology=spec.topology,
    )


def bridge_partition(cluster: Cluster) -> dict[str, Any] | None:
    """With an enabled spec.bridge: its partition, of the NodeSets of its shared worker groups (slurm.conf's
    partition line as for the spec's own), never the default, with no time limit of its own (a pod's comes
    with its placeholder job). None without."""
    bridge = cluster.spec.active_bridge
    if bridge is None:
        return None
    return {
        "name": bridge.partition,
        "nodes": [nodeset_name(g) for g in bridge.worker_groups],
        "default": False,
        "max_time": "UNLIMITED",
        "allow_groups": [],
        "def_mem_per_cpu": None,
    }


def config_blocks(blocks: Collection[str]) -> tuple[str, ...]:
    """The BlockName lines of topology.conf for these blocks: Slurm wants one at least."""
    return tuple(sorted(blocks)) or (naming.EMPTY_BLOCK,)


def topology_conf(cluster: Cluster) -> str:
    """topology.conf of a cluster with spec.topology (``warden.topology.planner`` places the nodes)."""
    topology = cluster.spec.topology
    assert topology is not None
    blocks = config_blocks(cluster.blocks)
    return _render(
        "topology.conf.j2",
        **_common(cluster),
        tree=topology.tree,
        root=naming.TREE_ROOT,
        block=topology.block,
        blocks=blocks,
        empty=blocks == (naming.EMPTY_BLOCK,),
    )


def job_submit_lua(cluster: Cluster) -> str:
    """slurmctld's job_submit/lua script: the read-only users' jobs are refused (``warden.tokens``), the
    bridge's user submits external jobs and nothing else, and nobody else (root aside) submits to the
    bridge's partition (``warden.bridge``)."""
    bridge = cluster.spec.active_bridge
    return _render(
        "job_submit.lua.j2", **_common(cluster), reader_user=naming.READER_USER, reader_uid=naming.READER_UID,
        bridge_user=naming.BRIDGE_USER, bridge_uid=naming.BRIDGE_UID, external_job_bit=naming.EXTERNAL_JOB_FLAG,
        bridge_partition=bridge.partition if bridge is not None else "", slurm_uid=SLURM_USER_UID,
    )  # fmt: skip


def cgroup_conf(cluster: Cluster) -> str:
    return _render("cgroup.conf.j2", **_common(cluster))


def gres_conf(cluster: Cluster) -> str:
    """gres.conf without node lines: each GPU worker adds its own from the devices its pod got."""
    groups = [
        {"name": g.name, "count": g.gpus.count, "type": g.gpus.type}
        for g in cluster.spec.worker_groups
        if g.gpus.count > 0
    ]
    return _render("gres.conf.j2", **_common(cluster), groups=groups)


def _job_space(jail_path: str, size_limit: str | None) -> str:
    """A per-job mount as the plugin's jobtmpfs= value: the path, and the size cap in bytes if any."""
    return f"{jail_path}:{max(int(quantity_mod.parse(size_limit)), 1)}" if size_limit else jail_path


def plugstack_conf(cluster: Cluster, group: WorkerGroup | None = None) -> str:
    """The cluster-wide plugstack.conf, or a worker group's (with its node-local mounts).

    The worker entrypoint has already bound, in the pod's mount namespace, what every step needs
    inside the jail (the slurmd spool with batch scripts, /run/slurm with the auth socket, a copy of
    /etc/slurm without the key, resolv.conf and hosts); the plugin's recursive bind of the jail root
    carries those along. Only node-local mounts are the plugin's own arguments.
    """
    spec = cluster.spec
    # pyxis everywhere once a group runs it: srun and sbatch know the options, and a group with
    # containers off refuses a step that asks for one (its importer says why) instead of ignoring it
    pyxis = any(spec.containers_on(g) for g in spec.worker_groups)
    containers = spec.containers_on(group) if group is not None else pyxis
    binds: list[str] = []
    job_spaces: list[str] = []
    if group is not None:
        # Node-local mounts sit at their jail path in the worker container too (see nodes.py), and so
        # does the container store. A per-job mount is no volume: the plugin mounts each job's own tmpfs
        # (jobtmpfs=DST[:BYTES]) and takes it away when the job ends.
        # (Images older than this release's know no jobtmpfs= and nproc=: there every mount stays a bind.)
        per_job = [m for m in group.local_mounts if m.per_job and cluster.has_limits]
        binds += [m.jail_path for m in group.local_mounts if m not in per_job]
        job_spaces += [_job_space(m.jail_path, m.size_limit) for m in per_job]
        if containers:
            binds.append(naming.CONTAINER_STORE)
    return _render(
        "plugstack.conf.j2",
        **_common(cluster),
        group=group.name if group else None,
        plugin=naming.SPANK_PLUGIN,
        jail=naming.JAIL_MOUNT,
        binds=binds,
        job_spaces=job_spaces,
        nproc=group.max_user_processes if group is not None and cluster.has_limits else 0,
        pyxis=naming.PYXIS_PLUGIN if pyxis else None,
        containers=containers,
        store=naming.CONTAINER_STORE,
        importer=naming.IMAGE_IMPORTER,
        refuse=naming.CONTAINERS_OFF_IMPORTER,
    )


def store_limits(cluster: Cluster) -> tuple[int, int]:
    """(bytes of the node-local container store, bytes one user's images and containers may take of it):
    spec.containers.store's sizeLimit and perUserLimit (default half the store, at most all of it)."""
    store = cluster.spec.containers.store
    size = int(quantity_mod.parse(store.size_limit))
    share = size // 2 if store.per_user_limit is None else int(quantity_mod.parse(store.per_user_limit))
    return size, min(share, size)


def enroot_conf(cluster: Cluster) -> str:
    """The cluster's enroot settings (spec.containers), read by enroot on every node through
    /etc/enroot/enroot.conf.d/50-cluster.conf (a link to /etc/slurm/enroot.conf in the images), and the
    store's bounds, which /usr/lib/warden/warden-store-room reads there (enroot ignores the names)."""
    size, share = store_limits(cluster)
    return _render(
        "enroot.conf.j2",
        **_common(cluster),
        allow_http=cluster.spec.containers.allow_http_registries,
        store_size=size,
        user_share=share,
    )


def plugstack_key(group: str) -> str:
    """ConfigMap key of a group's plugstack.conf; worker entrypoints install it as plugstack.conf."""
    return f"plugstack.{group}.conf"


def slurm_config_files(cluster: Cluster) -> dict[str, str]:
    """Every file of the `<cluster>-slurm-config` ConfigMap."""
    files = {
        "slurm.conf": slurm_conf(cluster),
        "cgroup.conf": cgroup_conf(cluster),
        "gres.conf": gres_conf(cluster),
        "plugstack.conf": plugstack_conf(cluster),
        naming.JOB_SUBMIT_LUA: job_submit_lua(cluster),
    }
    for g in cluster.spec.worker_groups:
        files[plugstack_key(g.name)] = plugstack_conf(cluster, g)
    if any(cluster.spec.containers_on(g) for g in cluster.spec.worker_groups):
        files[naming.ENROOT_CONF] = enroot_conf(cluster)
    if cluster.spec.topology is not None:
        files["topology.conf"] = topology_conf(cluster)
    return confighash.stamped(files)  # slurm.conf's first line: the hash of them all


#: spec.login.forwarding.tcp as sshd's AllowTcpForwarding
_TCP_FORWARDING = {"Disabled": "no", "Local": "local", "Remote": "remote", "All": "yes"}


def _yes_no(value: bool) -> str:
    return "yes" if value else "no"


def sshd_config(cluster: Cluster) -> str:
    forwarding = cluster.spec.login.forwarding
    return _render(
        "sshd_config.j2",
        **_common(cluster),
        port=naming.SSH_PORT,
        host_key=f"{naming.SSH_HOST_KEYS_DIR}/{naming.SSH_HOST_KEY}",
        jail=naming.JAIL_MOUNT,
        authorized_keys_dir=naming.SSH_AUTHORIZED_KEYS_DIR,
        forward_nothing=not forwarding.forwards_anything,
        tcp_forwarding=_TCP_FORWARDING[forwarding.tcp],
        agent_forwarding=_yes_no(forwarding.agent),
        x11_forwarding=_yes_no(forwarding.x11),
        directory=cluster.spec.identity.ldap is not None,
        user_limits=cluster.spec.login.user_limits.enabled and cluster.has_limits,
        keys_command=naming.SSH_KEYS_COMMAND,
    )


def authorized_keys(cluster: Cluster) -> str:
    keys = cluster.spec.login.ssh_authorized_keys
    return "".join(f"{k}\n" for k in keys)


def worker_sshd_config(cluster: Cluster) -> str:
    """The workers' sshd_config (spec.workerSsh): keys only, PAM's account stack (pam_slurm_adopt in the
    worker image's /etc/pam.d/sshd), sessions chrooted into the worker's view of the jail, nothing
    forwarded, root only with a key of spec.workerSsh.rootAuthorizedKeys."""
    return _render(
        "worker_sshd_config.j2",
        **_common(cluster),
        port=naming.SSH_PORT,
        host_key=f"/etc/ssh/{naming.SSH_HOST_KEY}",
        root_keys=bool(cluster.spec.worker_ssh.root_authorized_keys),
        chroot=naming.WORKER_SSH_ROOT,
        jail=naming.JAIL_MOUNT,
        authorized_keys_dir=naming.SSH_AUTHORIZED_KEYS_DIR,
        directory=cluster.spec.identity.ldap is not None,
        keys_command=naming.SSH_KEYS_COMMAND,
    )


def worker_ssh_files(cluster: Cluster) -> dict[str, str]:
    """The files of the `<cluster>-worker-sshd-config` ConfigMap: sshd_config, root's keys and the admins
    (one a line: pam_listfile lets them in without a job on the node)."""
    ssh = cluster.spec.worker_ssh
    return {
        "sshd_config": worker_sshd_config(cluster),
        "authorized_keys": "".join(f"{k}\n" for k in ssh.root_authorized_keys),
        "admins": "".join(f"{u}\n" for u in ssh.admins),
    }


def worker_host_patterns(cluster: Cluster) -> str:
    """The names a user's ssh client on a login node may call a worker by (known_hosts patterns, comma
    separated): the node name, and its DNS names through the nodes' headless Service."""
    names = cluster.names
    node = names.worker("*")
    return ",".join(
        (node, f"{node}.{names.nodes_service}", f"{node}.{names.nodes_service}.{cluster.namespace}.svc",
         f"{node}.{names.nodes_domain}")
    )  # fmt: skip


#: SSSD's domain name on every pod: what `getent` and logs call the directory's users' source
SSSD_DOMAIN = "directory"
_LDAP_SCHEMAS = {"rfc2307": "rfc2307", "rfc2307bis": "rfc2307bis", "AD": "ad"}


#: SSSD provides no user or group with an id below this: root (0) and the images' and the jail's system
#: accounts never come from the directory
SSSD_MIN_ID = 1000
#: ids at or above SSSD_MIN_ID of the images' own system accounts: SlurmUser (`slurm`, 64030 from the Debian
#: package, the same in every image and the jail), the bridge's and the exporter's Slurm users, nobody/nogroup
SYSTEM_IDS = (64030, naming.BRIDGE_UID, naming.READER_UID, 65534)
#: SlurmUser's uid (`slurm`, from the Debian package's sysusers.d entry: the same in every image and the jail)
SLURM_USER_UID = SYSTEM_IDS[0]
#: their names (and root's), which SSSD's NSS responder never answers for
SYSTEM_USERS = ("root", "slurm", naming.BRIDGE_USER, naming.READER_USER, "nobody")
SYSTEM_GROUPS = ("root", "slurm", "nogroup")


def directory_filters(user_filter: str | None, group_filter: str | None) -> tuple[str, str]:
    """The LDAP filters of SSSD's user and group searches: the spec's own (if any), less every entry that
    carries a system id (SYSTEM_IDS) as its uid or gid."""
    not_user = "".join(f"(!(uidNumber={i}))(!(gidNumber={i}))" for i in SYSTEM_IDS)
    not_group = "".join(f"(!(gidNumber={i}))" for i in SYSTEM_IDS)
    return f"(&{user_filter or ''}{not_user})", f"(&{group_filter or ''}{not_group})"


def sssd_conf(cluster: Cluster) -> str | None:
    """sssd.conf for spec.identity.ldap, without the bind credentials (the entrypoints add them from the
    bind Secret, which only SSSD's pods mount); None without a directory."""
    ldap = cluster.spec.identity.ldap
    if ldap is None:
        return None
    tls = not ldap.insecure_plaintext or any(u.startswith("ldaps://") for u in ldap.uris)
    user_filter, group_filter = directory_filters(ldap.user_filter, ldap.group_filter)
    return _render(
        "sssd.conf.j2",
        **_common(cluster),
        ldap=ldap,
        min_id=SSSD_MIN_ID,
        system_ids=SYSTEM_IDS,
        system_users=SYSTEM_USERS,
        system_groups=SYSTEM_GROUPS,
        user_filter=user_filter,
        group_filter=group_filter,
        domain=SSSD_DOMAIN,
        schema=_LDAP_SCHEMAS[ldap.schema_],
        bind_secret=ldap.bind_secret,
        tls=tls,
        # StartTLS on ldap:// URIs; an ldaps:// URI is TLS whatever this says
        start_tls=ldap.start_tls and any(u.startswith("ldap://") for u in ldap.uris),
        ca_file=naming.IDENTITY_CA_FILE if ldap.ca_secret_ref else None,
    )


def slurmdbd_conf(cluster: Cluster) -> str:
    acct = cluster.spec.accounting
    if acct.mode == "External" and acct.external is not None:
        ext = acct.external
        db = {"host": ext.host, "port": ext.port, "user": ext.user, "database": ext.database}
    else:
        db = {"host": cluster.names.mariadb, "port": naming.MARIADB_PORT, "user": "slurm", "database": "slurm_acct_db"}
    return _render(
        "slurmdbd.conf.j2",
        **_common(cluster),
        # slurmdbd refuses to start unless DbdHost is its own host name: the StatefulSet's one pod.
        # Clients reach it through the Service (AccountingStorageHost in slurm.conf).
        dbd_host=f"{cluster.names.accounting}-0",
        dbd_port=naming.SLURMDBD_PORT,
        db=db,
        # slurmdbd applies PrivateData to what it serves (sacct, sreport, sacctmgr): the values it knows
        private_data=[d for d in cluster.spec.slurm_config.private_data if d in SLURMDBD_PRIVATE_DATA],
        password_file=f"{naming.DB_PASSWORD_DIR}/{naming.DB_PASSWORD_KEY}",
    )


#: Memory of a worker pod kept from jobs for slurmd, slurmstepd and the entrypoint: an eighth of the
#: pod's limit, at least 128 MiB and at most 2 GiB. Job steps' cgroups live inside the pod's, so jobs
#: that filled the whole limit would push the pod's OOM killer onto slurmd.
RESERVED_MIB_MIN = 128
RESERVED_MIB_MAX = 2048


def job_memory(group: WorkerGroup) -> int | None:
    """MiB of a node that jobs may allocate (its RealMemory): the pod's memory limit less the reserve."""
    limit = _mebibytes(group.resources.limits.get("memory"))
    if not limit:
        return None
    reserve = min(max(limit // 8, RESERVED_MIB_MIN), RESERVED_MIB_MAX)
    return max(limit - reserve, 1)


def default_mem_per_cpu(groups: list[WorkerGroup]) -> int | None:
    """A partition's DefMemPerCPU: the smallest memory-per-CPU of its groups, so that jobs without
    `--mem` share nodes by their CPUs. None when a group lacks a CPU or memory limit (Slurm then gives
    such a job the whole memory of each node it gets)."""
    ratios = []
    for g in groups:
        cpus, memory = _cpus(g.resources.limits.get("cpu")), job_memory(g)
        if not cpus or not memory:
            return None
        ratios.append(memory // cpus)
    return max(min(ratios), 1) if ratios else None


STANDBY_SUFFIX = "-standby"


def standby_nodes(workerset: str, group: WorkerGroup) -> str:
    """Hidden capacity of an autoscaled group: `replicas` (at least one) node records in state FUTURE,
    with the group's node line. They never run anything and `sinfo` does not show them, but they are in
    the group's NodeSet, so a job submitted while an autoscaler has the group smaller than that (at
    zero) is queued until real nodes register, rather than refused ("Requested node configuration is
    not available"). Only autoscaled groups have them: a fixed-size group refuses a job larger than it
    is, as Slurm does, and its `replicas` changes never touch slurm.conf (static node lines changing
    under running jobs is what this avoids)."""
    count = max(1, group.replicas)
    return f"NodeName={workerset}{STANDBY_SUFFIX}-[0-{count - 1}] State=FUTURE {slurmd_node_conf(group)}"


def slurmd_node_conf(group: WorkerGroup) -> str:
    """The `slurmd -Z --conf` line of a worker group's nodes."""
    parts: list[str] = []
    cpus = _cpus(group.resources.limits.get("cpu"))
    if cpus:
        parts.append(f"CPUs={cpus}")
    memory = job_memory(group)
    if memory:
        parts.append(f"RealMemory={memory}")
    if group.gpus.count > 0:
        kind = f"gpu:{group.gpus.type}" if group.gpus.type else "gpu"
        parts.append(f"Gres={kind}:{group.gpus.count}")
    parts.append(f"Feature={','.join(group_features(group))}")
    return " ".join(parts)


def group_features(group: WorkerGroup) -> tuple[str, ...]:
    """The features a group's nodes register with: the group's own (its NodeSet selects on it) and
    spec's; the operator adds the node-label features (``warden.topology.planner``) after registration."""
    return (group_feature(group.name), *group.features)


def _cpus(quantity: str | None) -> int | None:
    """Whole CPUs in a CPU quantity (`4`, `4000m`); fractions round down, 0 means unknown."""
    if quantity is None:
        return None
    return quantity_mod.whole_cpus(quantity) or None


def _mebibytes(quantity: str | None) -> int | None:
    """A memory quantity in MiB (what Slurm's RealMemory counts in)."""
    if quantity is None:
        return None
    return quantity_mod.mebibytes(quantity) or None
