"""The rendered NetworkPolicies carry the traffic a Slurm cluster needs and nothing a job must not
reach (the Kubernetes API, the database), read by tests/support/netpol.py's account of the API's rules.
No network plugin here enforces them: docs/security.md."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.netpol import Endpoint, allowed, slurm_traffic
from warden import naming
from warden.model import parse_spec
from warden.naming import Names
from warden.render.cluster import render
from warden.render.context import Cluster

SPEC: dict[str, Any] = {
    "workerGroups": [{"name": "cpu", "replicas": 2}],
    "accounting": {"mode": "InCluster"},
    "healthChecks": {"nccl": {"enabled": True}},
}
OUTSIDE = {
    "apiserver": Endpoint("172.18.0.2"),
    "dns": Endpoint("10.244.0.3", "kube-system", {"k8s-app": "kube-dns"}, {"name": "kube-system"}),
    "internet": Endpoint("203.0.113.7"),
    "client": Endpoint("198.51.100.20"),
    "stranger": Endpoint("10.244.9.9", "other", {"app": "web"}, {"kubernetes.io/metadata.name": "other"}),
}


def _policies(spec: dict[str, Any]) -> list[dict[str, Any]]:
    objects = render(Cluster("demo", "hpc", parse_spec(spec))).objects
    return [o for o in objects if o["kind"] == "NetworkPolicy"]


def _pods() -> dict[str, Endpoint]:
    names = Names("demo", "hpc")
    ns_labels = {"kubernetes.io/metadata.name": "hpc"}
    components = {"controller": "controller", "restapi": "restapi", "worker": "worker", "worker2": "worker",
                  "login": "login", "accounting": "accounting", "database": "database",
                  "health-check": "health-check", "populate": "jail", "exporter": "exporter",
                  "read-gate": "read-gate"}  # fmt: skip
    return {
        key: Endpoint(f"10.244.1.{i + 10}", "hpc", names.labels(component), ns_labels)
        for i, (key, component) in enumerate(components.items())
    }


def _describe(src: Endpoint, dst: Endpoint, port: int, proto: str) -> str:
    def name(e: Endpoint) -> str:
        return (e.labels or {}).get("app.kubernetes.io/component", e.ip)

    return f"{name(src)} -> {name(dst)}:{port}/{proto}"


def test_the_policies_carry_what_slurm_needs_and_refuse_what_jobs_must_not_reach() -> None:
    policies = _policies(SPEC)
    needed, forbidden = slurm_traffic(_pods(), OUTSIDE)
    refused = [_describe(*c) for c in needed if not allowed(policies, *c)]
    assert not refused, f"needed traffic refused: {refused}"
    passing = [_describe(*c) for c in forbidden if allowed(policies, *c)]
    assert not passing, f"traffic that must not pass: {passing}"


def test_job_egress_networks_open_only_those_networks_to_jobs() -> None:
    policies = _policies({**SPEC, "networkPolicy": {"jobEgressCidrs": ["203.0.113.0/24"]}})
    pods = _pods()
    assert allowed(policies, pods["worker"], OUTSIDE["internet"], 443)
    assert allowed(policies, pods["login"], OUTSIDE["internet"], 443)
    assert not allowed(policies, pods["worker"], OUTSIDE["apiserver"], 6443)
    assert not allowed(policies, pods["controller"], OUTSIDE["internet"], 443)


def test_an_external_database_is_reached_by_slurmdbd_alone_on_its_port() -> None:
    spec = {**SPEC, "accounting": {"mode": "External", "external": {"host": "db.example.com", "port": 3307,
                                                                    "passwordSecretRef": {"name": "db"}}}}  # fmt: skip
    policies = _policies(spec)
    pods, database = _pods(), Endpoint("192.0.2.50")
    assert allowed(policies, pods["accounting"], database, 3307)
    assert not allowed(policies, pods["accounting"], database, 22)
    assert not allowed(policies, pods["worker"], database, 3307)


@pytest.mark.parametrize("enabled", [True, False])
def test_policies_can_be_left_to_the_platform(enabled: bool) -> None:
    policies = _policies({**SPEC, "networkPolicy": {"enabled": enabled}})
    assert bool(policies) is enabled


def test_a_directorys_servers_are_reached_on_their_ports_by_the_pods_running_sssd_alone() -> None:
    """sssd in slurmctld's, slurmdbd's, the login and the worker pods resolves directory users: they reach
    the servers' ports (wherever the URIs point); nothing else of theirs opens, and no other pod reaches it."""
    ldap = {"uris": ["ldaps://ldap.example.org", "ldap://ldap2.example.org:1389"], "searchBase": "dc=example,dc=org"}
    policies = _policies({**SPEC, "identity": {"ldap": ldap}})
    pods, directory = _pods(), Endpoint("192.0.2.60")
    for who in ("controller", "accounting", "login", "worker"):
        assert allowed(policies, pods[who], directory, 636), who
        assert allowed(policies, pods[who], directory, 1389), who
        assert not allowed(policies, pods[who], directory, 389), who
        assert not allowed(policies, pods[who], OUTSIDE["apiserver"], 6443), who
    for who in ("restapi", "exporter", "read-gate", "database"):
        assert not allowed(policies, pods[who], directory, 636), who


def test_the_jail_backup_reaches_its_repository_and_opens_nothing_else() -> None:
    """With a repository by URL the backup pods (and the populate Job while it restores) reach it, and DNS; no
    other pod gains a way out, and nothing reaches the backup pods."""
    repo = {"url": "s3:https://s3.example.com/bucket/warden", "credentialsSecret": "jail-backup"}
    pods = _pods()
    names = Names("demo", "hpc")
    backup = Endpoint("10.244.1.99", "hpc", names.labels("jail-backup"), {"kubernetes.io/metadata.name": "hpc"})
    s3, dns, stranger = OUTSIDE["internet"], OUTSIDE["dns"], OUTSIDE["stranger"]
    restoring = _policies(
        {**SPEC, "jail": {"backup": {"enabled": True, "repository": repo}, "restoreFrom": {"repository": repo}}}
    )
    assert allowed(restoring, backup, s3, 443) and allowed(restoring, backup, dns, 53, "UDP")
    assert allowed(restoring, pods["populate"], s3, 443)
    for key in ("worker", "login", "controller", "exporter"):
        assert not allowed(restoring, pods[key], s3, 443), key
    assert not allowed(restoring, stranger, backup, 8080) and not allowed(restoring, pods["login"], backup, 8080)
    # backing up only: the populate Job keeps no way out
    backing_up = _policies({**SPEC, "jail": {"backup": {"enabled": True, "repository": repo}}})
    assert allowed(backing_up, backup, s3, 443) and not allowed(backing_up, pods["populate"], s3, 443)
    # a backup volume: no way out at all
    volume = {"claimName": "jail-backups", "credentialsSecret": "jail-backup"}
    on_a_volume = _policies({**SPEC, "jail": {"backup": {"enabled": True, "repository": volume}}})
    assert not allowed(on_a_volume, backup, s3, 443)


def test_with_backups_anyone_may_ask_the_controllers_who_is_in_charge_and_nothing_more() -> None:
    """The operator asks the controller pods' verdict (GET /in-charge, warden.ha.verdict) from its own
    namespace: that port opens to anywhere with backup controllers, slurmctld's stays closed."""
    pods = _pods()
    one = _policies(SPEC)
    assert not allowed(one, OUTSIDE["client"], pods["controller"], naming.IN_CHARGE_PORT)
    backups = _policies({**SPEC, "controller": {"replicas": 2}})
    for who in (OUTSIDE["client"], OUTSIDE["stranger"], pods["worker"]):
        assert allowed(backups, who, pods["controller"], naming.IN_CHARGE_PORT)
    assert not allowed(backups, OUTSIDE["client"], pods["controller"], naming.SLURMCTLD_PORT)
    assert not allowed(backups, OUTSIDE["client"], pods["restapi"], naming.IN_CHARGE_PORT)
    assert not allowed(backups, OUTSIDE["client"], pods["worker"], naming.IN_CHARGE_PORT)
    needed, forbidden = slurm_traffic(pods, OUTSIDE)
    assert all(allowed(backups, *c) for c in needed)
    assert not [_describe(*c) for c in forbidden if allowed(backups, *c)]
