"""Directory users (spec.identity.ldap) as rendered: what SSSD, sshd and slurm.conf get, and which pods hold
the directory's bind credentials. A platform engineer reviewing a cluster that reads their LDAP checks these."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from warden import naming
from warden.model import parse_spec
from warden.render import config
from warden.render.cluster import render
from warden.render.context import Cluster

LDAP: dict[str, Any] = {
    "uris": ["ldaps://ldap.example.org", "ldaps://ldap2.example.org:1636"],
    "searchBase": "dc=example,dc=org",
    "bindSecret": "ldap-bind",
    "caSecretRef": {"name": "ldap-ca", "key": "ca.crt"},
}


def cluster(ldap: dict[str, Any] | None = None, **extra: Any) -> Cluster:
    spec: dict[str, Any] = {"workerGroups": [{"name": "cpu", "replicas": 2}], "accounting": {"mode": "InCluster"}}
    if ldap is not None:
        spec["identity"] = {"ldap": ldap}
    spec.update(extra)
    return Cluster(name="hpc", namespace="lab", spec=parse_spec(spec))


def pods(c: Cluster) -> dict[str, dict[str, Any]]:
    """Workload kind/name -> pod spec."""
    out: dict[str, dict[str, Any]] = {}
    for o in render(c).objects:
        spec = o.get("spec", {})
        if "jobTemplate" in spec:
            spec = spec["jobTemplate"]["spec"]
        if "template" in spec:
            out[f"{o['kind']}/{o['metadata']['name']}"] = spec["template"]["spec"]
    return out


def test_without_a_directory_nothing_of_sssd_is_rendered_and_sshd_keeps_pam_off() -> None:
    c = cluster()
    assert config.sssd_conf(c) is None
    assert not [o for o in render(c).objects if o["metadata"]["name"] == c.names.identity]
    for name, pod in pods(c).items():
        assert not [v for v in pod["volumes"] if v["name"].startswith("identity")], name
    assert "AuthorizedKeysCommand" not in config.sshd_config(c)
    # PAM only for the per-user limits of sessions (spec.login.userLimits), when they are on
    sshd = config.sshd_config(cluster(login={"userLimits": {"enabled": False}}))
    assert "UsePAM no" in sshd and "AuthorizedKeysCommand" not in sshd


def test_sssd_reads_the_directory_over_verified_tls_without_the_password_in_any_object() -> None:
    c = cluster(LDAP)
    conf = config.sssd_conf(c)
    assert conf is not None
    lines = conf.splitlines()
    assert "ldap_uri = ldaps://ldap.example.org, ldaps://ldap2.example.org:1636" in lines
    assert "ldap_search_base = dc=example,dc=org" in lines
    assert "ldap_tls_reqcert = demand" in lines
    assert f"ldap_tls_cacert = {naming.IDENTITY_CA_FILE}" in lines
    assert "ldap_user_ssh_public_key = sshPublicKey" in lines
    assert "entry_cache_timeout = 300" in lines
    # after an outage SSSD asks the directory again within 70 s (docs/operations.md says so)
    assert {"offline_timeout_max = 60", "offline_timeout_random_offset = 10"} <= set(lines)
    # the domain section is the file's last: the entrypoints append the bind DN and password to it
    assert [line for line in lines if line.startswith("[")][-1] == "[domain/directory]"
    assert not [line for line in lines if line.startswith("ldap_default_authtok")]
    (cm,) = [o for o in render(c).objects if o["metadata"]["name"] == c.names.identity]
    assert cm["kind"] == "ConfigMap" and cm["data"] == {"sssd.conf": conf}


def test_starttls_on_ldap_uris_and_plain_ldap_only_when_asked_for() -> None:
    starttls = config.sssd_conf(cluster({**LDAP, "uris": ["ldap://ldap.example.org"]}))
    assert starttls is not None and "ldap_id_use_start_tls = true" in starttls.splitlines()
    with pytest.raises(ValidationError, match=r"startTls: ldap://ldap\.example\.org without StartTLS"):
        cluster({**LDAP, "uris": ["ldap://ldap.example.org"], "startTls": False})
    plain = config.sssd_conf(cluster({**LDAP, "uris": ["ldap://ldap.example.org"], "insecurePlaintext": True}))
    assert plain is not None
    assert "ldap_id_use_start_tls = false" in plain.splitlines()
    assert "ldap_tls_reqcert" not in plain
    # no CA named: the images' system CAs
    system = config.sssd_conf(cluster({k: v for k, v in LDAP.items() if k != "caSecretRef"}))
    assert system is not None and "ldap_tls_cacertdir = /etc/ssl/certs" in system.splitlines()


def test_filters_bases_and_active_directory() -> None:
    conf = config.sssd_conf(
        cluster(
            {
                **LDAP,
                "userSearchBase": "ou=people,dc=example,dc=org",
                "userFilter": "(memberOf=cn=hpc,ou=groups,dc=example,dc=org)",
                "groupFilter": "(cn=hpc-*)",
                "schema": "AD",
                "idMapping": True,
                "cacheSeconds": 60,
            }
        )
    )
    assert conf is not None
    lines = conf.splitlines()
    # the site's filters, less the entries with system ids (tests/unit/test_identity_limits_render.py)
    users, groups = config.directory_filters("(memberOf=cn=hpc,ou=groups,dc=example,dc=org)", "(cn=hpc-*)")
    assert users.startswith("(&(memberOf=cn=hpc,ou=groups,dc=example,dc=org)(!(")
    assert groups.startswith("(&(cn=hpc-*)(!(")
    assert f"ldap_user_search_base = ou=people,dc=example,dc=org?subtree?{users}" in lines
    assert f"ldap_group_search_base = dc=example,dc=org?subtree?{groups}" in lines
    assert {"ldap_schema = ad", "ldap_id_mapping = true", "ldap_referrals = false", "entry_cache_timeout = 60"} <= set(
        lines
    )


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("uris", ["http://ldap.example.org"], "uris"),
        ("uris", ["ldaps://ldap.example.org/dc=x?uid"], "uris"),
        ("uris", [], "uris"),
        ("searchBase", "example.org", "searchBase"),
        ("userFilter", "uid=*", "userFilter"),
        ("userFilter", "(uid=*)\nfoo", "userFilter"),
        ("cacheSeconds", 1, "cacheSeconds"),
        ("schema", "nis", "schema"),
        ("bindSecret", "Not_A_Name", "bindSecret"),
    ],
)
def test_bad_directory_settings_are_refused_naming_the_field(field: str, value: Any, words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        cluster({**LDAP, field: value})


def test_only_the_pods_that_run_sssd_mount_the_bind_secret() -> None:
    c = cluster(LDAP)
    with_bind = {
        name
        for name, pod in pods(c).items()
        for v in pod["volumes"]
        if v.get("secret", {}).get("secretName") == "ldap-bind"
    }
    assert with_bind == {
        f"StatefulSet/{c.names.controller}",
        f"StatefulSet/{c.names.accounting}",
        f"StatefulSet/{c.names.login}",
        f"WorkerSet/{c.names.worker('cpu')}",
    }
    login = pods(c)[f"StatefulSet/{c.names.login}"]
    mounts = {m["name"]: m for m in login["containers"][0]["volumeMounts"]}
    assert mounts["identity-bind"] == {"name": "identity-bind", "mountPath": naming.IDENTITY_BIND_DIR, "readOnly": True}
    (ca,) = [v for v in login["volumes"] if v["name"] == "identity-ca"]
    assert ca["secret"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]


def test_login_nodes_take_keys_from_the_directory_and_make_homes_but_never_for_root() -> None:
    sshd = config.sshd_config(cluster(LDAP))
    main, _, root = sshd.partition("Match User root")
    assert "UsePAM yes" in main
    assert f"AuthorizedKeysCommand {naming.SSH_KEYS_COMMAND} %u" in main
    assert "AuthorizedKeysCommandUser nobody" in main
    assert "PasswordAuthentication no" in main and "KbdInteractiveAuthentication no" in main
    assert "AuthorizedKeysCommand none" in root


def test_a_partition_for_members_of_some_groups_only() -> None:
    c = cluster(
        LDAP,
        partitions=[
            {"name": "cpu", "workerGroups": ["cpu"], "default": True},
            {"name": "physics", "workerGroups": ["cpu"], "allowGroups": ["physics", "hpc-admins"]},
        ],
    )
    parts = [line for line in config.slurm_conf(c).splitlines() if line.startswith("PartitionName=")]
    assert "AllowGroups" not in parts[0]
    assert " AllowGroups=physics,hpc-admins " in parts[1]
    with pytest.raises(ValidationError, match="allowGroups"):
        cluster(partitions=[{"name": "p", "workerGroups": ["cpu"], "allowGroups": ["bad group"]}])


def test_directory_users_get_their_accounting_association_when_they_log_in() -> None:
    def login_env(c: Cluster) -> dict[str, str]:
        (container,) = pods(c)[f"StatefulSet/{c.names.login}"]["containers"]
        return {e["name"]: e.get("value", "") for e in container["env"]}

    assert login_env(cluster(LDAP))["WARDEN_DEFAULT_ACCOUNT"] == "users"
    assert "WARDEN_DEFAULT_ACCOUNT" not in login_env(cluster())  # the jail's users: slurmctld's pod does it
    off = cluster(LDAP, accounting={"mode": "InCluster", "defaultAccount": ""})
    assert "WARDEN_DEFAULT_ACCOUNT" not in login_env(off)
