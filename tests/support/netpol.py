"""What a set of NetworkPolicies lets through, by the rules of networking.k8s.io/v1 (pure).

The local clusters here have no network plugin that enforces NetworkPolicies (docs/security.md says
why), so the tests check the rendered, and the applied, policies against the traffic a Slurm cluster
needs and the traffic it must never carry, with this reading of the API's semantics:
- a pod is isolated for a direction when any policy in its namespace selects it with that policy type;
  then only what some rule of such a policy allows passes, and a connection needs both the sender's
  egress and the receiver's ingress to allow it;
- a rule with no peers matches every peer, with no ports every port; a peer's podSelector without a
  namespaceSelector means the policy's namespace; an ipBlock matches addresses (minus its `except`).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

Manifest = dict[str, Any]


@dataclass(frozen=True)
class Endpoint:
    """A pod (labels, namespace) or an address outside the cluster's pods (labels None)."""

    ip: str
    namespace: str = ""
    labels: dict[str, str] | None = None
    namespace_labels: dict[str, str] = field(default_factory=dict)


def selects(selector: Manifest, labels: dict[str, str]) -> bool:
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        present = key in labels
        ok = {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }[op]
        if not ok:
            return False
    return True


def _in_block(block: Manifest, ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    network = ipaddress.ip_network(block["cidr"], strict=False)
    if address.version != network.version or address not in network:
        return False
    return not any(address in ipaddress.ip_network(e, strict=False) for e in block.get("except") or [])


def _peer_matches(peer: Manifest, other: Endpoint, policy_namespace: str) -> bool:
    if "ipBlock" in peer:
        return _in_block(peer["ipBlock"], other.ip)
    if other.labels is None:
        return False  # pod and namespace selectors match pods only
    if "namespaceSelector" in peer:
        if not selects(peer["namespaceSelector"], other.namespace_labels):
            return False
    elif other.namespace != policy_namespace:
        return False
    return "podSelector" not in peer or selects(peer["podSelector"], other.labels)


def _port_matches(ports: list[Manifest] | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    for p in ports:
        if p.get("protocol", "TCP") != protocol:
            continue
        if "port" not in p:
            return True
        low = int(p["port"])
        if low <= port <= int(p.get("endPort", low)):
            return True
    return False


def _direction_allows(
    policies: list[Manifest], pod: Endpoint, peer: Endpoint, port: int, protocol: str, direction: str
) -> bool:
    if pod.labels is None:
        return True  # not a pod: no policy applies to it
    kind, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == pod.namespace
        and direction in _policy_types(p)
        and selects(p["spec"].get("podSelector") or {}, pod.labels)
    ]
    if not selecting:
        return True
    for policy in selecting:
        for rule in policy["spec"].get(kind) or []:
            peers = rule.get(peers_key) or []
            if (not peers or any(_peer_matches(x, peer, pod.namespace) for x in peers)) and _port_matches(
                rule.get("ports"), port, protocol
            ):
                return True
    return False


def _policy_types(policy: Manifest) -> list[str]:
    spec = policy["spec"]
    if spec.get("policyTypes"):
        return list(spec["policyTypes"])
    return ["Ingress", *(["Egress"] if spec.get("egress") else [])]


def allowed(policies: list[Manifest], src: Endpoint, dst: Endpoint, port: int, protocol: str = "TCP") -> bool:
    """Whether a connection from ``src`` to ``dst`` on ``port`` passes every policy."""
    return _direction_allows(policies, src, dst, port, protocol, "Egress") and _direction_allows(
        policies, dst, src, port, protocol, "Ingress"
    )


def slurm_traffic(pods: dict[str, Endpoint], outside: dict[str, Endpoint]) -> tuple[list[Any], list[Any]]:
    """(needed, forbidden) connections of a Slurm cluster as (source, destination, port, protocol).
    ``pods`` by component (controller, restapi, worker, worker2, login, accounting, database,
    health-check, populate, exporter, read-gate; connections of a component not given are left out); ``outside``:
    apiserver, dns, internet, client (a person on the network), stranger (a pod of another namespace)."""
    missing = Endpoint("missing")
    p, o = {k: pods.get(k, missing) for k in _COMPONENTS}, outside
    needed = [
        (p["worker"], p["controller"], 6817, "TCP"),  # slurmd registers
        (p["controller"], p["worker"], 6818, "TCP"),  # job launch, pings
        (p["login"], p["controller"], 6817, "TCP"),  # sbatch, squeue
        (p["login"], p["worker"], 6818, "TCP"),  # srun's step launch
        (p["worker"], p["login"], 42311, "TCP"),  # srun's I/O, back to the login node
        (p["worker"], p["worker2"], 50123, "TCP"),  # MPI/NCCL between job steps
        (p["restapi"], p["controller"], 6817, "TCP"),
        (p["controller"], p["accounting"], 6819, "TCP"),
        (p["login"], p["accounting"], 6819, "TCP"),  # sacct
        (p["worker"], p["accounting"], 6819, "TCP"),  # sacct in a job step
        (p["accounting"], p["database"], 3306, "TCP"),
        (p["accounting"], p["controller"], 6817, "TCP"),
        (p["health-check"], p["controller"], 6817, "TCP"),
        (p["health-check"], o["apiserver"], 6443, "TCP"),  # its report ConfigMap
        (o["client"], p["login"], 22, "TCP"),  # SSH
        (o["client"], p["restapi"], 6820, "TCP"),  # REST API (the operator too)
        (p["worker"], o["dns"], 53, "UDP"),
        (p["login"], o["dns"], 53, "TCP"),
        (o["client"], p["exporter"], 9341, "TCP"),  # Prometheus scrapes the exporter
        (p["exporter"], p["read-gate"], 6830, "TCP"),  # which reads Slurm through its gate
        (p["read-gate"], p["restapi"], 6820, "TCP"),  # which asks slurmrestd
        (p["read-gate"], o["dns"], 53, "UDP"),
        (p["exporter"], p["accounting"], 6819, "TCP"),  # and sees whether slurmdbd answers
        (p["exporter"], o["dns"], 53, "UDP"),
    ]
    forbidden = [
        (p["worker"], o["apiserver"], 6443, "TCP"),  # a job step at the Kubernetes API
        (p["login"], o["apiserver"], 443, "TCP"),
        (p["worker"], p["database"], 3306, "TCP"),  # a job step at the database
        (p["login"], p["database"], 3306, "TCP"),
        (p["controller"], p["database"], 3306, "TCP"),
        (p["worker"], o["internet"], 443, "TCP"),  # nothing outside unless jobEgressCidrs says so
        (o["client"], p["controller"], 6817, "TCP"),
        (o["client"], p["worker"], 6818, "TCP"),
        (o["client"], p["accounting"], 6819, "TCP"),
        (o["client"], p["database"], 3306, "TCP"),
        (o["stranger"], p["worker"], 6818, "TCP"),
        (p["populate"], o["internet"], 443, "TCP"),
        (p["populate"], p["controller"], 6817, "TCP"),
        (p["exporter"], p["controller"], 6817, "TCP"),  # the exporter speaks HTTP to its gate, not Slurm
        (p["exporter"], p["worker"], 6818, "TCP"),
        (p["exporter"], o["apiserver"], 6443, "TCP"),
        (p["exporter"], p["database"], 3306, "TCP"),
        (o["client"], p["exporter"], 9342, "TCP"),  # only its metrics port
        (p["exporter"], p["restapi"], 6820, "TCP"),  # its token reads less than its gate's: gate only
        (o["client"], p["read-gate"], 6830, "TCP"),  # the gate reads every job: the exporter's alone
        (p["worker"], p["read-gate"], 6830, "TCP"),
        (p["login"], p["read-gate"], 6830, "TCP"),
        (o["stranger"], p["read-gate"], 6830, "TCP"),
        (p["read-gate"], p["controller"], 6817, "TCP"),
        (p["read-gate"], o["apiserver"], 6443, "TCP"),
    ]

    def given(connection: tuple[Endpoint, Endpoint, int, str]) -> bool:
        return connection[0] is not missing and connection[1] is not missing

    return [c for c in needed if given(c)], [c for c in forbidden if given(c)]


_COMPONENTS = ("controller", "restapi", "worker", "worker2", "login", "accounting", "database", "health-check",
               "populate", "exporter", "read-gate")  # fmt: skip
