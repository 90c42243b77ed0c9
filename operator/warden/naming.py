"""Every name, label and fixed path the operator uses: the one place they are made.

Names are deterministic functions of the cluster name (and group name), so a handler that runs twice,
or an operator restarted at any line, finds the objects it made before.
"""

from __future__ import annotations

from dataclasses import dataclass

from warden.model import API_GROUP

FIELD_MANAGER = "warden"
#: the bridge's field manager: its writes to the one child of a cluster it writes (the ConfigMap of its
#: namespaces, ``Names.bridge_accounts``) are no drift for the operator to put back
BRIDGE_FIELD_MANAGER = "warden-bridge"


def token_dir(component: str) -> str:
    """Where a pod mounts a component's token Secret (file TOKEN_KEY in it)."""
    return f"{TOKEN_DIR}/{component}"


LABEL_PREFIX = API_GROUP  # slurm.warden.dev/...
# the populate Job's template, hashed: a Job whose template changed is made again (Jobs are immutable)
TEMPLATE_HASH_ANNOTATION = f"{LABEL_PREFIX}/template-hash"

# Paths inside pods: the pod contract in docs/architecture.md.
SLURM_CONFIG_DIR = "/etc/warden/slurm"
SLURM_KEY_DIR = "/etc/warden/auth"
JWT_KEY_DIR = "/etc/warden/jwt"
#: components' Slurm tokens (Secrets the operator keeps fresh, ``warden.tokens``): ``token_dir(component)``
TOKEN_DIR = "/etc/warden/token"
#: the Slurm user that only reads Slurm (the exporter's token): a system user of the controller image
#: (images/controller/Dockerfile), so slurmctld knows it and no node does; Slurm refuses its jobs
#: (job_submit.lua, ``warden.render.config.job_submit_lua``) and it is no Slurm operator or admin
READER_USER = "warden-reader"
READER_UID = 64999
#: the Slurm user the bridge (``warden.bridge``) submits, reads and cancels its placeholder jobs as: a
#: system user of the controller image like READER_USER, so slurmctld maps its token to it and no node
#: knows it (no job step can ever run as it); no Slurm operator or admin
BRIDGE_USER = "warden-bridge"
BRIDGE_UID = 64998
#: slurmctld's job_submit/lua script, beside slurm.conf (Slurm looks for it there)
JOB_SUBMIT_LUA = "job_submit.lua"
#: where the entrypoints put the working copies of the config and keys (owned by SlurmUser)
SLURM_ETC = "/etc/slurm"
SLURMDBD_CONFIG_DIR = "/etc/warden/slurmdbd"
DB_PASSWORD_DIR = "/etc/warden/db"
SSH_CONFIG_DIR = "/etc/warden/ssh"
SSH_HOST_KEYS_DIR = "/etc/warden/ssh-host-keys"
#: SSH to the workers (spec.workerSsh): the worker's sshd_config, root's keys and the admins (ConfigMap
#: <cluster>-worker-sshd-config), its host key (Secret <cluster>-worker-ssh-host-keys), and on login pods
#: that key's public half alone, which the login entrypoint shows the jail's ssh client as known hosts
WORKER_SSH_CONFIG_DIR = "/etc/warden/worker-ssh"
WORKER_SSH_HOST_KEYS_DIR = "/etc/warden/worker-ssh-host-keys"
WORKER_SSH_KNOWN_KEY_DIR = "/etc/warden/worker-ssh-known-key"
#: where the worker's sshd chroots sessions: a recursive bind of the jail with the container's /proc and
#: /dev bound in (images/worker/warden-worker-ssh.sh), so the jail job steps start from stays as it is
WORKER_SSH_ROOT = "/run/warden/ssh-root"
#: the admins' list pam_listfile reads on a worker (one user a line)
WORKER_SSH_ADMINS = "/etc/ssh/warden_admins"
# Where the login entrypoint installs per-user authorized_keys (root's from the spec).
SSH_AUTHORIZED_KEYS_DIR = "/etc/ssh/warden_authorized_keys"
#: directory users (spec.identity.ldap): the rendered sssd.conf (ConfigMap <cluster>-identity), the bind
#: Secret (keys IDENTITY_BIND_DN_KEY, IDENTITY_PASSWORD_KEY) and the CA bundle, read by the entrypoints
IDENTITY_CONFIG_DIR = "/etc/warden/identity"
IDENTITY_BIND_DIR = "/etc/warden/identity-bind"
IDENTITY_CA_DIR = "/etc/warden/identity-ca"
IDENTITY_CA_FILE = f"{IDENTITY_CA_DIR}/ca.crt"
IDENTITY_BIND_DN_KEY = "bindDN"
IDENTITY_PASSWORD_KEY = "password"
#: sshd's AuthorizedKeysCommand on login nodes with a directory: the keys SSSD read from it
SSH_KEYS_COMMAND = "/usr/bin/sss_ssh_authorizedkeys"
JAIL_MOUNT = "/mnt/jail"
#: where the backup and restore containers mount a repository's PVC (``spec.jail.backup.repository.claimName``)
BACKUP_REPOSITORY_MOUNT = "/repository"
STATE_SAVE_LOCATION = "/var/spool/slurmctld"
SLURMD_SPOOL_DIR = "/var/spool/slurmd"
SLURM_RUN_DIR = "/run/slurm"
SPANK_PLUGIN = "/usr/lib/warden/spank_jail.so"
#: readiness check of the Slurm daemons and sshd (images/slurm-base/warden-listening): connects to nothing
LISTENING_CHECK = "/usr/lib/warden/warden-listening"
#: slurmctld's probe (images/controller): a job read and a node read answered within its argument's seconds
SLURMCTLD_HEALTH_CHECK = "/usr/lib/warden/warden-slurmctld-health"
QUICKCHECK_PROGRAM = "/usr/local/bin/warden-quickcheck"
#: slurmd's Prolog and Epilog when spec.metrics.dcgmJobMapping is on (images/worker/warden-job-mapping):
#: they keep dcgm-exporter's job mapping files in DCGM_JOB_MAPPING_DIR, where GPU workers have the
#: node's hostPath mounted
PROLOG_PROGRAM = "/usr/lib/warden/warden-prolog"
EPILOG_PROGRAM = "/usr/lib/warden/warden-epilog"
DCGM_JOB_MAPPING_DIR = "/var/lib/warden/dcgm-job-mapping"
JAIL_MARKER = "/etc/warden-jail-release"
#: containers in jobs (spec.containers): pyxis' SPANK plugin (images/container-runtime), listed before
#: the jail plugin, and the node-local store of images and containers on every worker, at the same path
#: in the worker container and inside the jail (pyxis makes <store>/<uid> for each user, as root)
PYXIS_PLUGIN = "/usr/lib/warden/spank_pyxis.so"
#: pyxis' importer on worker groups with containers: each image imported once per node, user and digest
IMAGE_IMPORTER = "/usr/lib/warden/warden-importer"
#: pyxis' importer on worker groups with containers off: fails a step that asks for an image, saying so
CONTAINERS_OFF_IMPORTER = "/usr/lib/warden/containers-off"
CONTAINER_STORE = "/var/lib/warden/containers"
#: the cluster's enroot settings (spec.containers) in the slurm-config ConfigMap; the images' enroot reads
#: them through /etc/enroot/enroot.conf.d/50-cluster.conf, a link to /etc/slurm/enroot.conf
ENROOT_CONF = "enroot.conf"
#: env of every container that runs Slurm: the series its image carries (its entrypoint refuses another)
SLURM_SERIES_ENV = "WARDEN_SLURM_SERIES"
#: every container's terminationMessagePath: the kubelet binds a world-writable file there. Its default,
#: /dev/termination-log, would be in every SSH session and job step (login and worker containers show
#: their /dev in the jail); the container's /run never enters the jail (only /run/slurm is bound there).
TERMINATION_LOG = "/run/termination-log"
# Written by populate-jail at the root of the jail volume once the copy is complete.
JAIL_POPULATED_SENTINEL = ".warden-populated"

SLURMCTLD_PORT = 6817
SLURMD_PORT = 6818
SLURMDBD_PORT = 6819
RESTAPI_PORT = 6820
#: the one slurmrestd OpenAPI version the operator speaks (Slurm 24.11 serves v0.0.40 to v0.0.42)
RESTAPI_VERSION = "v0.0.42"
#: the data_parser version that reads and sets a node's place in the topology (Slurm 25.05 on): the sync
#: speaks it to clusters with spec.topology, which only runs on such a Slurm
RESTAPI_VERSION_TOPOLOGY = "v0.0.44"
#: the same version by the series that serves it (Slurm 25.11 and 26.05): external jobs and nodes (the bridge)
RESTAPI_VERSION_2605 = RESTAPI_VERSION_TOPOLOGY
MARIADB_PORT = 3306
#: the Slurm metrics exporter's HTTP port (`/metrics`), and the operator's own
EXPORTER_PORT = 9341
#: the read gate (``warden.readgate``): the exporter's reads of Slurm, asked as SlurmUser
READ_GATE_PORT = 6830
OPERATOR_METRICS_PORT = 9340
#: with backup controllers: each controller pod answers ``GET /in-charge`` here with its verdict of which
#: slurmctld is in charge, from Slurm's heartbeat file (warden.ha.ctld serves it, warden.ha.verdict asks)
IN_CHARGE_PORT = 6827
SSH_PORT = 22

# Keys inside the Secrets the operator generates.
SLURM_KEY = "slurm.key"
#: auth/jwt HS256 key (slurmctld signs `scontrol token`s with it; the operator mints its own)
JWT_KEY = "jwt_hs256.key"
SSH_HOST_KEY = "ssh_host_ed25519_key"
#: a Slurm token (auth/jwt) in a per-purpose token Secret
TOKEN_KEY = "token"
DB_PASSWORD_KEY = "password"

# Kubernetes' recommended labels, as every child object carries them (``Names.labels``).
INSTANCE_LABEL = "app.kubernetes.io/instance"  # the SlurmCluster's name
COMPONENT_LABEL = "app.kubernetes.io/component"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
#: what every object the operator makes carries: what its watches select, server-side
MANAGED = {MANAGED_BY_LABEL: "warden"}

# Label/annotation keys of our own.
WORKER_GROUP_LABEL = f"{LABEL_PREFIX}/worker-group"
SLURM_NODE_LABEL = f"{LABEL_PREFIX}/slurm-node"
#: "true" on a WorkerSet whose `replicas` the operator sets at creation only (an autoscaled group)
AUTOSCALED_ANNOTATION = f"{LABEL_PREFIX}/autoscaled"
#: "true" on a worker pod whose Slurm node runs a job (set from Slurm's state): a PodDisruptionBudget
#: keeps such pods from being evicted
BUSY_LABEL = f"{LABEL_PREFIX}/busy"
CONFIG_HASH_ANNOTATION = f"{LABEL_PREFIX}/config-hash"
#: on the pods that mount a token Secret: when its token was written (``warden.tokens``)
TOKEN_ISSUED_ANNOTATION = f"{LABEL_PREFIX}/token-issued"
#: on a worker pod: the hash of the WorkerSet pod template it was made from (upgrades compare it)
POD_TEMPLATE_ANNOTATION = f"{LABEL_PREFIX}/pod-template"
#: on a worker pod chosen to leave its group (scale-in): since when (RFC 3339), so the choice holds
#: from one look at Slurm to the next and an optional bound on the wait can be kept
LEAVING_ANNOTATION = f"{LABEL_PREFIX}/leaving-since"
#: on running pods (not templates): the configuration the operator last told the pod's kubelet about
POD_CONFIG_ANNOTATION = f"{LABEL_PREFIX}/config"


@dataclass(frozen=True)
class Names:
    """Names of a cluster's child objects."""

    cluster: str
    namespace: str

    # --- Slurm controller -------------------------------------------------------------------
    @property
    def controller(self) -> str:
        return f"{self.cluster}-controller"

    @property
    def controller_pod(self) -> str:
        """The primary slurmctld's pod (the first of `controller_pods`)."""
        return self.controller_pods(1)[0]

    def controller_pods(self, replicas: int) -> list[str]:
        """slurmctld's pods in Slurm's SlurmctldHost order: the primary, then its backups."""
        return [f"{self.controller}-{i}" for i in range(replicas)]

    def controller_pod_address(self, pod: str) -> str:
        return f"{pod}.{self.controller}.{self.namespace}.svc.cluster.local"

    def controller_service_address(self, pod: str) -> str:
        """With backups: the address of the Service of one controller pod (named as the pod). Its IP never
        changes when the pod is made again, and with no pod behind it connections are refused at once,
        where a pod's own DNS record would point at a gone IP for the DNS cache's time."""
        return f"{pod}.{self.namespace}.svc.cluster.local"

    @property
    def controller_address(self) -> str:
        return self.controller_pod_address(self.controller_pod)

    @property
    def controller_state(self) -> str:
        """The state claim the controllers share when there are backups (one ReadWriteMany PVC)."""
        return f"{self.controller}-state"

    @property
    def restapi(self) -> str:
        """slurmrestd: its Deployment and Service."""
        return f"{self.cluster}-restapi"

    @property
    def restapi_url(self) -> str:
        return f"http://{self.restapi}.{self.namespace}.svc.cluster.local:{RESTAPI_PORT}"

    @property
    def busy_workers_budget(self) -> str:
        """PodDisruptionBudget of the worker pods that run jobs."""
        return f"{self.cluster}-busy-workers"

    # --- Slurm nodes (workers, login) --------------------------------------------------------
    def worker(self, group: str) -> str:
        return f"{self.cluster}-worker-{group}"

    @property
    def login(self) -> str:
        return f"{self.cluster}-login"

    @property
    def nodes_service(self) -> str:
        """Headless Service of worker and login pods: short node names resolve through it."""
        return f"{self.cluster}-nodes"

    @property
    def nodes_domain(self) -> str:
        return f"{self.nodes_service}.{self.namespace}.svc.cluster.local"

    # --- configuration and secrets ----------------------------------------------------------
    @property
    def slurm_config(self) -> str:
        return f"{self.cluster}-slurm-config"

    @property
    def slurm_key(self) -> str:
        return f"{self.cluster}-slurm-key"

    @property
    def jwt_key(self) -> str:
        return f"{self.cluster}-jwt-key"

    @property
    def sshd_config(self) -> str:
        return f"{self.cluster}-sshd-config"

    @property
    def ssh_host_keys(self) -> str:
        return f"{self.cluster}-ssh-host-keys"

    @property
    def worker_sshd_config(self) -> str:
        return f"{self.cluster}-worker-sshd-config"

    @property
    def worker_ssh_host_keys(self) -> str:
        return f"{self.cluster}-worker-ssh-host-keys"

    @property
    def identity(self) -> str:
        return f"{self.cluster}-identity"

    @property
    def slurmdbd_config(self) -> str:
        return f"{self.cluster}-slurmdbd-config"

    @property
    def db_password(self) -> str:
        return f"{self.cluster}-db-password"

    # --- jail -------------------------------------------------------------------------------
    @property
    def jail(self) -> str:
        return f"{self.cluster}-jail"

    @property
    def populate_jail(self) -> str:
        return f"{self.cluster}-populate-jail"

    @property
    def jail_backup(self) -> str:
        """The CronJob backing the jail up (``spec.jail.backup``) and its NetworkPolicy."""
        return f"{self.cluster}-jail-backup"

    # --- accounting ---------------------------------------------------------------------------
    @property
    def accounting(self) -> str:
        return f"{self.cluster}-accounting"

    @property
    def mariadb(self) -> str:
        return f"{self.cluster}-mariadb"

    # --- metrics ------------------------------------------------------------------------------
    @property
    def exporter(self) -> str:
        """The Slurm metrics exporter: its Deployment, Service and ServiceMonitor."""
        return f"{self.cluster}-exporter"

    @property
    def read_gate(self) -> str:
        """The read gate (``warden.readgate``): its Deployment and Service."""
        return f"{self.cluster}-read-gate"

    def token(self, component: str) -> str:
        """A component's Slurm token Secret (``<cluster>-exporter-token``), kept fresh by the operator
        (``warden.tokens``)."""
        return f"{self.cluster}-{component}-token"

    # --- the bridge (spec.bridge) ----------------------------------------------------------------
    @property
    def bridge_token_secret(self) -> str:
        """The bridge's Slurm token Secret (``warden-bridge``'s), mounted by no pod: the bridge, in the
        operator's namespace, reads it through the API."""
        return self.token("bridge")

    @property
    def bridge(self) -> str:
        """The Role and RoleBinding that let the bridge's ServiceAccount read ``bridge_token_secret``."""
        return f"{self.cluster}-bridge"

    @property
    def bridge_accounts(self) -> str:
        """The ConfigMap where the bridge lists the namespaces opted in to the cluster (with accounting): the
        controller pod mounts it and makes each one's Slurm account (``bridge_account``)."""
        return f"{self.cluster}-bridge-accounts"

    # --- health checks ------------------------------------------------------------------------
    @property
    def nccl_check(self) -> str:
        return f"{self.cluster}-nccl-check"

    @property
    def health_check_account(self) -> str:
        return f"{self.cluster}-health-check"

    # --- labels ---------------------------------------------------------------------------------
    def labels(self, component: str) -> dict[str, str]:
        """Labels of every child object. All of them are immutable for a given object."""
        return {
            "app.kubernetes.io/name": "slurm",
            INSTANCE_LABEL: self.cluster,
            COMPONENT_LABEL: component,
            **MANAGED,
            "app.kubernetes.io/part-of": "warden",
        }

    def selector(self, component: str) -> dict[str, str]:
        """Selector labels: a subset of `labels` that never changes for the life of the object."""
        return {
            "app.kubernetes.io/name": "slurm",
            INSTANCE_LABEL: self.cluster,
            COMPONENT_LABEL: component,
        }

    def worker_selector(self, group: str) -> dict[str, str]:
        return {**self.selector("worker"), WORKER_GROUP_LABEL: group}

    def instance_selector(self) -> dict[str, str]:
        """Every object of this cluster (used to find objects left over by removed groups)."""
        return {INSTANCE_LABEL: self.cluster, **MANAGED}


#: the switch every tree the operator writes hangs from (``warden.topology.planner``); no label value ends in `_`,
#: so no switch named after one is called so
TREE_ROOT = "root_"
#: the block topology.conf names while no worker's node has a block label (Slurm wants at least one)
EMPTY_BLOCK = "none_"
#: the name Slurm gives the one topology of topology.conf (the first word of a node's Topology=)
SLURM_TOPOLOGY = "default"


def group_feature(group: str) -> str:
    """The Slurm feature that marks a worker group's nodes (partitions select on it)."""
    return f"warden-group-{group}"


# --- the bridge (warden.bridge): Kubernetes pods scheduled by Slurm -------------------------------------
#: namespace label a cluster admin sets to let the bridge schedule the namespace's pods, value
#: ``<cluster-namespace>.<cluster>``: the SlurmCluster whose Slurm places them
BRIDGE_NAMESPACE_LABEL = f"{LABEL_PREFIX}/bridge"
#: node label a cluster admin sets to let the bridge bind pods to a Kubernetes node that is a Slurm node of
#: the same name (an external node), value ``<cluster-namespace>.<cluster>``: without it only the nodes of
#: the cluster's worker pods take pods
BRIDGE_EXTERNAL_NODE_LABEL = f"{LABEL_PREFIX}/bridge-external-node"
#: pod label: the Slurm job (the placeholder) the pod belongs to
BRIDGE_JOB_LABEL = f"{LABEL_PREFIX}/slurm-job"
#: pod annotation set at binding: the Slurm node whose share of the allocation the pod took
BRIDGE_NODE_ANNOTATION = f"{LABEL_PREFIX}/slurm-node"
#: pod (or namespace) annotations that choose the placeholder's partition, QoS, time limit (minutes) and
#: whether the job shares its nodes only with its own user's jobs (``user``)
BRIDGE_PARTITION_ANNOTATION = f"{LABEL_PREFIX}/partition"
BRIDGE_QOS_ANNOTATION = f"{LABEL_PREFIX}/qos"
BRIDGE_TIME_LIMIT_ANNOTATION = f"{LABEL_PREFIX}/time-limit"
BRIDGE_ISOLATION_ANNOTATION = f"{LABEL_PREFIX}/isolation"
#: namespace annotations (an admin's) listing the partitions and QoS a pod's own annotations may choose
#: (comma-separated); a pod may otherwise take only what its namespace or the cluster's spec.bridge sets
BRIDGE_ALLOWED_PARTITIONS_ANNOTATION = f"{LABEL_PREFIX}/allowed-partitions"
BRIDGE_ALLOWED_QOS_ANNOTATION = f"{LABEL_PREFIX}/allowed-qos"
#: the job comment's first word: the job is a placeholder of this bridge, in this format
BRIDGE_COMMENT_TAG = "warden-bridge/v1"
#: with accounting, the Slurm account each opted-in namespace's placeholders are charged to is
#: ``k8s-<namespace>`` (``bridge_account``), under the account ``k8s``: the controller pod makes them from
#: the namespaces the bridge lists (key BRIDGE_ACCOUNTS_KEY of ConfigMap ``Names.bridge_accounts``, mounted
#: at BRIDGE_ACCOUNTS_DIR), warden-bridge in each
BRIDGE_PARENT_ACCOUNT = "k8s"
BRIDGE_ACCOUNTS_DIR = "/etc/warden/bridge-accounts"
BRIDGE_ACCOUNTS_KEY = "namespaces"


def bridge_account(namespace: str) -> str:
    """The Slurm account of an opted-in namespace's pods (a namespace name is a valid account name)."""
    return f"{BRIDGE_PARENT_ACCOUNT}-{namespace}"


#: Slurm's EXTERNAL_JOB job flag (slurm.h, 25.05 on: bit 24 of a job's bitflags), as job_submit.lua reads it
EXTERNAL_JOB_FLAG = 1 << 24
