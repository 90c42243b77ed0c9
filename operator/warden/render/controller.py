"""slurmctld: a one-replica StatefulSet with its state volume, and its headless Service."""

from __future__ import annotations

from warden import naming
from warden.render.context import Cluster
from warden.render.pods import (
    Manifest,
    claim_spec,
    claim_template,
    dns_config,
    identity_mounts,
    identity_volumes,
    jail_volume,
    mount,
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


def controller_service(cluster: Cluster) -> Manifest:
    names = cluster.names
    ports = [("slurmctld", naming.SLURMCTLD_PORT)]
    return service(cluster, names.controller, COMPONENT, names.selector(COMPONENT), ports, headless=True)


def controller_statefulset(cluster: Cluster) -> Manifest:
    names = cluster.names
    spec = cluster.spec
    state = spec.controller.state_volume
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
        **slurmctld_probes(),
        "resources": resources(spec.controller.resources),
    }
    if spec.accounting.mode != "Disabled" and spec.accounting.default_account:
        # the entrypoint gives jail users that accounting does not know an association in it (sacctmgr
        # as root, which slurmdbd takes as an admin)
        container["env"].append({"name": "WARDEN_DEFAULT_ACCOUNT", "value": spec.accounting.default_account})
    labels = names.labels(COMPONENT)
    return statefulset(
        cluster,
        names.controller,
        labels=labels,
        selector=names.selector(COMPONENT),
        service_name=names.controller,
        replicas=1,
        parallel=True,
        # No config hash on the template: a changed slurm.conf never replaces slurmctld; its entrypoint
        # follows the mounted files and runs `scontrol reconfigure` (see images/controller).
        pod_spec={
            "dnsConfig": dns_config(cluster),
            "terminationGracePeriodSeconds": 30,
            "containers": [container],
            "volumes": [
                *slurm_volumes(cluster),
                jail_volume(cluster),
                secret_volume("jwt-key", names.jwt_key),
                *identity_volumes(cluster),
            ],
        },
        claims=[claim_template("state", labels, claim_spec(state.size, state.storage_class_name))],
    )


def render(cluster: Cluster) -> list[Manifest]:
    return [controller_service(cluster), controller_statefulset(cluster)]
