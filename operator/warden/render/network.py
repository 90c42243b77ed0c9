"""NetworkPolicies: who may talk to whom among a cluster's pods, and what leaves them.

Every pod of the cluster is isolated both ways, then allowed exactly this (docs/security.md):
- Slurm's pods (slurmctld, slurmrestd, slurmd, login, slurmdbd, the NCCL check) reach each other on
  any port: srun and job steps connect back to the login node and to each other on ephemeral ports,
  MPI and NCCL between workers too; and DNS.
- SSH into the login pods and the REST API from anywhere (both authenticate every caller).
- With backup controllers: the controller pods' in-charge answer (``GET /in-charge``, the operator's
  question of which slurmctld is in charge: ``warden.ha.verdict``) from anywhere, on its port only; it
  reads out a heartbeat's writer and age, nothing secret, and takes nothing in.
- The in-cluster database: only slurmdbd, on its port. An external database: slurmdbd, on its port.
- The NCCL check's Job: anywhere (it writes its report through the Kubernetes API).
- The jail's backup Job, and the populate Job while it restores a backup, when their restic repository is a
  URL: anywhere, and DNS (``warden.render.backup``).
- Slurm's check of a new configuration (its Job's pods, component `config-check`: ``warden.configcheck``):
  nothing, either way; the cluster's isolation alone selects them.
- The metrics exporter: scraped from anywhere on its port; it reaches its read gate's port, slurmdbd's
  port (to tell whether it answers) and DNS, nothing else. The read gate: reached by the exporter
  alone; it reaches slurmrestd's port and DNS.
- With a directory (spec.identity.ldap): the pods running SSSD (controller, slurmdbd, login, workers) reach
  its servers' ports, anywhere (the URIs name hosts, not addresses).
- Job steps and login sessions (worker and login pods): nothing else unless `networkPolicy.jobEgressCidrs`
  names it, or a policy of the user's own adds it (policies add up). So no job reaches the Kubernetes API
  or the database.
"""

from __future__ import annotations

from warden import naming
from warden.render.context import Cluster
from warden.render.pods import Manifest, meta

COMPONENT = "network"
#: the pods running Slurm's daemons and commands (they reach each other freely)
SLURM_COMPONENTS = ("controller", "restapi", "worker", "login", "accounting", "health-check")
#: the pods running SSSD when the cluster reads a directory (warden.render.pods.identity_volumes)
DIRECTORY_COMPONENTS = ("controller", "accounting", "worker", "login")
#: where users' code runs (job steps, SSH sessions)
USER_COMPONENTS = ("worker", "login")
EVERYWHERE = [{"ipBlock": {"cidr": "0.0.0.0/0"}}, {"ipBlock": {"cidr": "::/0"}}]
DNS: Manifest = {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}


def _policy(cluster: Cluster, suffix: str, selector: Manifest, spec: Manifest) -> Manifest:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta(cluster, f"{cluster.name}-{suffix}", COMPONENT),
        "spec": {"podSelector": selector, **spec},
    }


def _components(cluster: Cluster, *components: str) -> Manifest:
    instance = {naming.INSTANCE_LABEL: cluster.name}
    if len(components) == 1:
        return {"matchLabels": {**instance, naming.COMPONENT_LABEL: components[0]}}
    return {
        "matchLabels": instance,
        "matchExpressions": [{"key": naming.COMPONENT_LABEL, "operator": "In", "values": list(components)}],
    }


def _ports(*ports: int) -> list[Manifest]:
    return [{"protocol": "TCP", "port": p} for p in ports]


def render(cluster: Cluster) -> list[Manifest]:
    spec = cluster.spec
    if not spec.network_policy.enabled:
        return []
    slurm = _components(cluster, *SLURM_COMPONENTS)
    dns = DNS
    out = [
        _policy(
            cluster,
            "isolate",
            {"matchLabels": {naming.INSTANCE_LABEL: cluster.name}},
            {"policyTypes": ["Ingress", "Egress"]},
        ),
        _policy(
            cluster,
            "slurm",
            slurm,
            {
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [{"podSelector": slurm}]}],
                "egress": [{"to": [{"podSelector": slurm}]}, dns],
            },
        ),
        _policy(
            cluster,
            "ssh",
            _components(cluster, "login"),
            {
                "policyTypes": ["Ingress"],
                "ingress": [{"ports": _ports(naming.SSH_PORT)}],
            },
        ),
        _policy(
            cluster,
            "rest-api",
            _components(cluster, "restapi"),
            {
                "policyTypes": ["Ingress"],
                "ingress": [{"ports": _ports(naming.RESTAPI_PORT)}],
            },
        ),
    ]
    if spec.controller.has_backup:
        out.append(
            _policy(
                cluster,
                "controller-in-charge",
                _components(cluster, "controller"),
                {
                    "policyTypes": ["Ingress"],
                    "ingress": [{"ports": _ports(naming.IN_CHARGE_PORT)}],
                },
            )
        )
    out += _database_policies(cluster)
    if spec.health_checks.nccl.enabled:
        out.append(
            _policy(
                cluster,
                "health-check",
                _components(cluster, "health-check"),
                {
                    "policyTypes": ["Egress"],
                    "egress": [{"to": EVERYWHERE}],
                },
            )
        )
    if spec.metrics.enabled:
        out += _exporter_policies(cluster, dns)
    ldap = spec.identity.ldap
    if ldap is not None:
        out.append(
            _policy(
                cluster,
                "directory",
                _components(cluster, *DIRECTORY_COMPONENTS),
                {
                    "policyTypes": ["Egress"],
                    "egress": [{"to": EVERYWHERE, "ports": _ports(*ldap.ports)}],
                },
            )
        )
    cidrs = spec.network_policy.job_egress_cidrs
    if cidrs:
        out.append(
            _policy(
                cluster,
                "job-egress",
                _components(cluster, *USER_COMPONENTS),
                {
                    "policyTypes": ["Egress"],
                    "egress": [{"to": [{"ipBlock": {"cidr": c}} for c in cidrs]}],
                },
            )
        )
    return out


def _database_policies(cluster: Cluster) -> list[Manifest]:
    """Accounting's database: only slurmdbd reaches it (in the cluster), and slurmdbd reaches only it."""
    out: list[Manifest] = []
    accounting = cluster.spec.accounting
    if accounting.mode == "InCluster":
        out.append(
            _policy(
                cluster,
                "database",
                _components(cluster, "database"),
                {
                    "policyTypes": ["Ingress"],
                    "ingress": [
                        {
                            "from": [{"podSelector": _components(cluster, "accounting")}],
                            "ports": _ports(naming.MARIADB_PORT),
                        }
                    ],
                },
            )
        )
    to_database: Manifest | None = None
    if accounting.mode == "InCluster":
        to_database = {"to": [{"podSelector": _components(cluster, "database")}], "ports": _ports(naming.MARIADB_PORT)}
    elif accounting.mode == "External" and accounting.external is not None:
        to_database = {"to": EVERYWHERE, "ports": _ports(accounting.external.port)}
    if to_database is not None:
        out.append(
            _policy(
                cluster,
                "slurmdbd-database",
                _components(cluster, "accounting"),
                {
                    "policyTypes": ["Egress"],
                    "egress": [to_database],
                },
            )
        )
    return out


def _exporter_policies(cluster: Cluster, dns: Manifest) -> list[Manifest]:
    exporter = _components(cluster, "exporter")
    egress: list[Manifest] = [
        {"to": [{"podSelector": _components(cluster, "read-gate")}], "ports": _ports(naming.READ_GATE_PORT)},
        dns,
    ]
    out = [
        _policy(
            cluster,
            "read-gate",
            _components(cluster, "read-gate"),
            {
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"from": [{"podSelector": exporter}], "ports": _ports(naming.READ_GATE_PORT)}],
                "egress": [
                    {"to": [{"podSelector": _components(cluster, "restapi")}], "ports": _ports(naming.RESTAPI_PORT)},
                    dns,
                ],
            },
        )
    ]
    if cluster.spec.accounting.mode != "Disabled":
        egress.append(
            {"to": [{"podSelector": _components(cluster, "accounting")}], "ports": _ports(naming.SLURMDBD_PORT)}
        )
        out.append(
            _policy(
                cluster,
                "slurmdbd-from-exporter",
                _components(cluster, "accounting"),
                {
                    "policyTypes": ["Ingress"],
                    "ingress": [{"from": [{"podSelector": exporter}], "ports": _ports(naming.SLURMDBD_PORT)}],
                },
            )
        )
    out.insert(
        0,
        _policy(
            cluster,
            "exporter",
            exporter,
            {
                "policyTypes": ["Ingress", "Egress"],
                "ingress": [{"ports": _ports(naming.EXPORTER_PORT)}],
                "egress": egress,
            },
        ),
    )
    return out
