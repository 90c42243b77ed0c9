"""What bounds one user against the others, as rendered (docs/security.md, "Tokens, identities and privacy"
and "Login sessions have per-user limits"): the lifespan of `scontrol token`'s tokens in slurm.conf, the
system ids SSSD never takes from a directory, the /proc switch of login and worker pods, and the per-user
limits of login sessions. The dataplane tier (tests/dataplane/test_identity_limits.py) shows them at work."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from warden import naming
from warden.model import parse_spec
from warden.render import config
from warden.render.context import Cluster
from warden.render.nodes import login_statefulset, worker_set

LDAP: dict[str, Any] = {"uris": ["ldaps://ldap.example.org"], "searchBase": "dc=example,dc=org"}


def cluster(**extra: Any) -> Cluster:
    spec: dict[str, Any] = {"workerGroups": [{"name": "cpu", "replicas": 2}]}
    spec.update(extra)
    return Cluster(name="hpc", namespace="lab", spec=parse_spec(spec))


def env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def login_env(c: Cluster) -> dict[str, str]:
    return env(login_statefulset(c)["spec"]["template"]["spec"]["containers"][0])


def worker_env(c: Cluster) -> dict[str, str]:
    return env(worker_set(c, c.spec.worker_groups[0])["spec"]["template"]["spec"]["containers"][0])


def auth_alt(c: Cluster) -> list[str]:
    return [line for line in config.slurm_conf(c).splitlines() if line.startswith("AuthAltParameters=")]


def test_scontrol_token_gives_users_a_day_at_most_unless_the_spec_says_otherwise() -> None:
    assert auth_alt(cluster()) == [
        f"AuthAltParameters=jwt_key={naming.SLURM_ETC}/{naming.JWT_KEY},max_token_lifespan=86400"
    ]
    hour = cluster(security={"maxTokenLifespanSeconds": 3600})
    assert auth_alt(hour) == [f"AuthAltParameters=jwt_key={naming.SLURM_ETC}/{naming.JWT_KEY},max_token_lifespan=3600"]


@pytest.mark.parametrize("seconds", [0, 59, 10 * 365 * 86400])
def test_a_token_lifespan_of_none_or_years_is_refused_naming_the_field(seconds: int) -> None:
    with pytest.raises(ValidationError, match=r"security\.maxTokenLifespanSeconds"):
        cluster(security={"maxTokenLifespanSeconds": seconds})


@pytest.mark.parametrize(
    "line",
    [
        "AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key",
        "authaltparameters=disable_token_creation",
        "MinJobAge=300 AuthAltParameters=jwt_key=/tmp/k",
    ],
)
def test_extra_lines_cannot_lift_the_token_lifespan(line: str) -> None:
    with pytest.raises(ValidationError, match=r"set it through spec\.security\.maxTokenLifespanSeconds"):
        cluster(slurmConfig={"extraLines": [line]})


def test_no_directory_entry_maps_onto_a_system_uid() -> None:
    conf = config.sssd_conf(cluster(identity={"ldap": {**LDAP, "userFilter": "(memberOf=cn=hpc,dc=example,dc=org)"}}))
    assert conf is not None
    lines = conf.splitlines()
    # root and every system account of the images and the jail are below 1000
    assert "min_id = 1000" in lines
    assert not [line for line in lines if line.startswith("max_id")], "directory uids above 65535 are common"
    # by name: the users Warden runs as
    (users,) = [line for line in lines if line.startswith("filter_users = ")]
    assert set(users.removeprefix("filter_users = ").split(", ")) >= {
        "root",
        "slurm",
        naming.BRIDGE_USER,
        naming.READER_USER,
    }
    # by id: SlurmUser's 64030, warden-bridge's 64998, warden-reader's 64999, nobody's, as uid or gid, and the
    # site's own filter still applies
    (user_base,) = [line for line in lines if line.startswith("ldap_user_search_base = ")]
    (group_base,) = [line for line in lines if line.startswith("ldap_group_search_base = ")]
    assert user_base.startswith(
        "ldap_user_search_base = dc=example,dc=org?subtree?(&(memberOf=cn=hpc,dc=example,dc=org)"
    )
    for uid in (64030, naming.BRIDGE_UID, naming.READER_UID, 65534):
        assert f"(!(uidNumber={uid}))" in user_base and f"(!(gidNumber={uid}))" in user_base
        assert f"(!(gidNumber={uid}))" in group_base
    assert group_base.startswith("ldap_group_search_base = dc=example,dc=org?subtree?(&(!(")


def test_users_see_only_their_own_processes_unless_switched_off() -> None:
    assert "WARDEN_HIDE_PROCESSES" not in login_env(cluster())
    assert "WARDEN_HIDE_PROCESSES" not in worker_env(cluster())
    off = cluster(security={"hideOtherUsersProcesses": False})
    assert login_env(off)["WARDEN_HIDE_PROCESSES"] == "no"
    assert worker_env(off)["WARDEN_HIDE_PROCESSES"] == "no"


def test_login_sessions_get_per_user_limits_through_pam() -> None:
    default = cluster()
    assert login_env(default)["WARDEN_SESSION_MEMORY"] == str(4 * 1024**3)
    assert login_env(default)["WARDEN_SESSION_CPU"] == "2000"
    assert login_env(default)["WARDEN_SESSION_PIDS"] == "1024"
    assert login_env(cluster(login={"userLimits": {"processes": 200}}))["WARDEN_SESSION_PIDS"] == "200"
    assert "UsePAM yes" in config.sshd_config(default).splitlines()
    set_ = cluster(login={"userLimits": {"memory": "512Mi", "cpu": "500m"}})
    assert login_env(set_)["WARDEN_SESSION_MEMORY"] == str(512 * 1024**2)
    assert login_env(set_)["WARDEN_SESSION_CPU"] == "500"
    # never more than the login container itself has
    small_pod = cluster(login={"resources": {"limits": {"memory": "1Gi"}}})
    assert login_env(small_pod)["WARDEN_SESSION_MEMORY"] == str(1024**3)
    off = cluster(login={"userLimits": {"enabled": False}})
    assert not {"WARDEN_SESSION_MEMORY", "WARDEN_SESSION_CPU", "WARDEN_SESSION_PIDS"} & set(login_env(off))
    assert "UsePAM no" in config.sshd_config(off).splitlines()


@pytest.mark.parametrize(
    ("limits", "field"),
    [({"memory": "1Mi"}, "userLimits.memory"), ({"cpu": "1m"}, "userLimits.cpu"), ({"memory": "lots"}, "memory")],
)
def test_login_limits_no_session_could_start_in_are_refused_naming_the_field(
    limits: dict[str, str], field: str
) -> None:
    with pytest.raises(ValidationError, match=field):
        cluster(login={"userLimits": limits})
