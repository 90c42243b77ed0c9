"""slurmctld: a StatefulSet with its state volume, and its headless Service.

One replica keeps its state on the StatefulSet's own claim. With backups (`spec.controller.replicas`
2-3) the pods share one ReadWriteMany claim, `<cluster>-controller-state`, and Slurm chooses which one
is in charge (the first in slurm.conf's SlurmctldHost order that runs; images/controller fences one
that lost control). Their pods prefer different Kubernetes nodes."""

from __future__ import annotations

from warden import naming
from warden.render import bridge
from warden.render.context import Cluster
from warden.render.pods import (
    Manifest,
    claim_spec,
    claim_template,
    config_map_volume,
    dns_config,
    identity_mounts,
    identity_volumes,
    jail_volume,
    meta,
    mount,
    placed,
    resources,
    secret_volume,
    service,
    slurm_container,
    slurm_mounts,
    slurm_volumes,
    slurmctld_probes,
    statefulset,
)

COMPONENT = "controller"


#: the label the StatefulSet controller puts on each of its pods, naming it
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"


def controller_service(cluster: Cluster) -> Manifest:
    names = cluster.names
    ports = [("slurmctld", naming.SLURMCTLD_PORT)]
    return service(cluster, names.controller, COMPONENT, names.selector(COMPONENT), ports, headless=True)


def controller_pod_services(cluster: Cluster) -> list[Manifest]:
    """With backups: a ClusterIP Service per controller pod, named as the pod, the address slurm.conf gives
    it (``naming.Names.controller_service_address``). Not-ready pods stay behind it (a standby, a
    slurmctld starting); a pod being made again gets the same address, and while there is none the
    connection is refused at once, so clients go on to the next controller."""
    out = []
    for pod in cluster.names.controller_pods(cluster.spec.controller.replicas):
        svc = service(cluster, pod, COMPONENT, {**cluster.names.selector(COMPONENT), POD_NAME_LABEL: pod},
                      [("slurmctld", naming.SLURMCTLD_PORT)])  # fmt: skip
        svc["spec"]["publishNotReadyAddresses"] = True
        out.append(svc)
    return out


#: StorageClass provisioners whose volumes attach to one node only (no ReadWriteMany): a shared state
#: volume on them would never bind, or be refused; backups need a shared filesystem (NFS, CephFS, ...).
SINGLE_NODE_PROVISIONERS = frozenset(
    {
        "kubernetes.io/aws-ebs",
        "ebs.csi.aws.com",
        "kubernetes.io/gce-pd",
        "pd.csi.storage.gke.io",
        "kubernetes.io/azure-disk",
        "disk.csi.azure.com",
        "kubernetes.io/cinder",
        "cinder.csi.openstack.org",
        "rancher.io/local-path",
        "openebs.io/local",
        "local.csi.openebs.io",
        "topolvm.io",
        "kubernetes.io/no-provisioner",
    }
)


def state_class_problem(cluster: Cluster, storage_class: Manifest | None) -> str | None:
    """Why backups cannot share a state volume of `storage_class` (the named or the default
    StorageClass, None when there is none), or None. Only a provisioner known to give single-node
    volumes is refused here; any other is tried, and a claim it cannot bind shows in ControllerReady."""
    if not cluster.spec.controller.has_backup:
        return None
    state = cluster.spec.controller.state_volume
    if storage_class is None:
        if state.storage_class_name:
            return (
                f"controller.stateVolume.storageClassName: StorageClass {state.storage_class_name!r} does not "
                "exist; backup controllers need one that offers ReadWriteMany"
            )
        return None  # no default class: the claim waits for a volume, shown in ControllerReady
    provisioner = str(storage_class.get("provisioner", ""))
    if provisioner in SINGLE_NODE_PROVISIONERS:
        name = storage_class.get("metadata", {}).get("name", "")
        return (
            f"controller.replicas: {cluster.spec.controller.replicas} needs a state volume the controllers share "
            f"(ReadWriteMany), and StorageClass {name!r} ({provisioner}) gives single-node volumes: set "
            "controller.stateVolume.storageClassName to a shared-filesystem class (NFS, CephFS, ...) or "
            "controller.replicas to 1"
        )
    return None


def state_claim(cluster: Cluster) -> Manifest:
    """The state volume the controllers share when there are backups."""
    state = cluster.spec.controller.state_volume
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": meta(cluster, cluster.names.controller_state, COMPONENT),
        "spec": claim_spec(state.size, state.storage_class_name, "ReadWriteMany"),
    }


def _spread(cluster: Cluster) -> Manifest:
    """Backups on other Kubernetes nodes than the controller in charge where there are several (preferred,
    not required: a one-node cluster still runs them all)."""
    term = {
        "weight": 100,
        "podAffinityTerm": {
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": cluster.names.selector(COMPONENT)},
        },
    }
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [term]}}


def controller_statefulset(cluster: Cluster) -> Manifest:
    names = cluster.names
    spec = cluster.spec
    state = spec.controller.state_volume
    backups = spec.controller.has_backup
    container: Manifest = {
        **slurm_container(cluster, "slurmctld", "controller", ("slurmctld", naming.SLURMCTLD_PORT)),
        # The jail, read-only: slurmctld looks up each job's user and groups (send_gids), and users
        # live in the jail's /etc/passwd (the entrypoint points NSS extrausers at it, by path: users
        # made at any time resolve). slurmctld does not wait for the populate Job: it needs no jail
        # file to run, and jail users resolve from the moment the Job has filled the jail.
        "volumeMounts": [
            *slurm_mounts(),
            mount("state", naming.STATE_SAVE_LOCATION),
            mount("jail", naming.JAIL_MOUNT, read_only=True),
            # auth/jwt: slurmctld checks the tokens slurmrestd passes on (the entrypoint copies it)
            mount("jwt-key", naming.JWT_KEY_DIR, read_only=True),
            # directory users (spec.identity.ldap): slurmctld resolves them through SSSD, for --uid,
            # AllowGroups and accounting
            *identity_mounts(cluster),
        ],
        **slurmctld_probes(current=cluster.has_limits),
        "resources": resources(spec.controller.resources),
    }
    if spec.accounting.mode != "Disabled" and spec.accounting.default_account:
        # the entrypoint gives jail users that accounting does not know an association in it (sacctmgr
        # as root, which slurmdbd takes as an admin)
        container["env"].append({"name": "WARDEN_DEFAULT_ACCOUNT", "value": spec.accounting.default_account})
    if bridge.accounts_enabled(cluster):
        # the entrypoint makes a Slurm account for each namespace the bridge lists (warden.render.bridge)
        accounts_file = f"{naming.BRIDGE_ACCOUNTS_DIR}/{naming.BRIDGE_ACCOUNTS_KEY}"
        container["env"].append({"name": "WARDEN_BRIDGE_ACCOUNTS", "value": accounts_file})
        container["volumeMounts"].append(mount("bridge-accounts", naming.BRIDGE_ACCOUNTS_DIR, read_only=True))
    if backups:
        # the entrypoint hands control to a backup when its pod stops, and fences a slurmctld that lost it
        container["env"].append({"name": "WARDEN_CONTROLLERS", "value": str(spec.controller.replicas)})
        # and answers the operator's question of which slurmctld is in charge (its verdict from Slurm's
        # heartbeat file: warden.ha.verdict asks it; the NetworkPolicy "controller-in-charge" lets it in)
        container["env"].append({"name": "WARDEN_IN_CHARGE_PORT", "value": str(naming.IN_CHARGE_PORT)})
        container["ports"].append({"name": "in-charge", "containerPort": naming.IN_CHARGE_PORT, "protocol": "TCP"})
    labels = names.labels(COMPONENT)
    volumes = [
        *slurm_volumes(cluster),
        jail_volume(cluster),
        secret_volume("jwt-key", names.jwt_key),
        *identity_volumes(cluster),
    ]
    if bridge.accounts_enabled(cluster):
        # optional: the kubelet fills it once the ConfigMap is there
        accounts_volume = config_map_volume("bridge-accounts", names.bridge_accounts)
        accounts_volume["configMap"]["optional"] = True
        volumes.append(accounts_volume)
    pod_spec: Manifest = {
        "dnsConfig": dns_config(cluster),
        "terminationGracePeriodSeconds": 30,
        "containers": [container],
        "volumes": volumes,
    }
    if backups:
        volumes.append({"name": "state", "persistentVolumeClaim": {"claimName": names.controller_state}})
        pod_spec["affinity"] = _spread(cluster)
    placed(pod_spec, spec.controller)
    return statefulset(
        cluster,
        names.controller,
        labels=labels,
        selector=names.selector(COMPONENT),
        service_name=names.controller,
        replicas=spec.controller.replicas,
        # pods start and are made again independently (a backup is remade while the primary hangs);
        # a rolling update still goes one pod at a time from the last, each once the one before is Ready,
        # so a backup is replaced first and the controller in charge hands over to a Ready backup
        parallel=True,
        # No config hash on the template: a changed slurm.conf never replaces slurmctld; its entrypoint
        # follows the mounted files and runs `scontrol reconfigure` (see images/controller).
        pod_spec=pod_spec,
        claims=None if backups else [claim_template("state", labels, claim_spec(state.size, state.storage_class_name))],
    )


def render(cluster: Cluster) -> list[Manifest]:
    if not cluster.spec.controller.has_backup:
        return [controller_service(cluster), controller_statefulset(cluster)]
    return [state_claim(cluster), controller_service(cluster), *controller_pod_services(cluster),
            controller_statefulset(cluster)]  # fmt: skip
