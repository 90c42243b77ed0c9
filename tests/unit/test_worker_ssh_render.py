"""SSH from the login nodes to the workers (spec.workerSsh): what the operator renders for it, read as an
admin would: slurm.conf's extern steps, the workers' sshd_config and PAM stack, who mounts which host key,
and who reaches the workers' sshd through the NetworkPolicies."""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tests.support.netpol import Endpoint, allowed
from tests.support.slurmconf import parse, parse_sshd
from warden import naming
from warden.model import SlurmClusterSpec, parse_spec
from warden.naming import Names
from warden.render import config
from warden.render.cluster import Rendered, render
from warden.render.context import Cluster

ROOT = Path(__file__).parents[2]
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPu2bcmBBn3XKmWrGqOEa5eX8bz0dQ5mB2zD7Ovr0p5i admin@laptop"


def _spec(**fields: Any) -> dict[str, Any]:
    return {"workerGroups": [{"name": "cpu", "replicas": 2}], **fields}


def _cluster(spec: dict[str, Any]) -> Cluster:
    return Cluster("demo", "hpc", parse_spec(spec))


def _render(spec: dict[str, Any]) -> Rendered:
    return render(_cluster(spec))


def _object(rendered: Rendered, kind: str, name: str) -> dict[str, Any]:
    (obj,) = [o for o in rendered.objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def _pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def _secret_volumes(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["secret"]["secretName"]: v["secret"] for v in pod["volumes"] if "secret" in v}


def test_off_by_default_nothing_of_it_is_rendered() -> None:
    """A cluster that does not ask for it gets no worker sshd, key, extern steps or login change."""
    assert SlurmClusterSpec.model_validate(_spec()).worker_ssh.enabled is False
    rendered = _render(_spec())
    names = Names("demo", "hpc")
    assert names.worker_ssh_host_keys not in [s.name for s in rendered.secrets]
    assert not [o for o in rendered.objects if o["metadata"]["name"] == names.worker_sshd_config]
    worker = _pod_spec(_object(rendered, "WorkerSet", names.worker("cpu")))
    login = _pod_spec(_object(rendered, "StatefulSet", names.login))
    assert names.worker_ssh_host_keys not in _secret_volumes(worker) | _secret_volumes(login)
    assert [p["name"] for p in worker["containers"][0]["ports"]] == ["slurmd"]
    assert parse(config.slurm_conf(_cluster(_spec()))).get("PrologFlags") is None


def test_a_cluster_held_on_older_images_gets_none_of_it() -> None:
    """Images of a release before the workers' sshd (spec.images.version 0.1.0) would ignore its config:
    nothing of it is rendered until the images are moved on (docs/operations.md)."""
    spec = _spec(workerSsh={"enabled": True}, images={"version": "0.1.0"})
    rendered, names = _render(spec), Names("demo", "hpc")
    assert names.worker_ssh_host_keys not in [s.name for s in rendered.secrets]
    assert not [o for o in rendered.objects if o["metadata"]["name"] == names.worker_sshd_config]
    assert parse(config.slurm_conf(_cluster(spec))).get("PrologFlags") is None
    login = _pod_spec(_object(rendered, "StatefulSet", names.login))
    assert "WARDEN_WORKER_SSH_HOSTS" not in {e["name"] for e in login["containers"][0]["env"]}


def test_slurm_makes_every_job_an_extern_step_for_pam_slurm_adopt() -> None:
    """PrologFlags=Contain: each job's extern step exists on every node of the allocation from its start,
    so a session has a cgroup to be adopted into; with dcgm's job mapping the same one line (Contain
    includes the Alloc the prolog needs), never two PrologFlags."""
    conf = parse(config.slurm_conf(_cluster(_spec(workerSsh={"enabled": True}))))
    assert conf.get("PrologFlags") == "Contain"
    mapped = _spec(workerSsh={"enabled": True}, metrics={"dcgmJobMapping": {"enabled": True}})
    text = config.slurm_conf(_cluster(mapped))
    assert [line for line in text.splitlines() if line.startswith("PrologFlags")] == ["PrologFlags=Contain"]
    assert parse(text).get("Prolog") == naming.PROLOG_PROGRAM


def test_prolog_flags_stay_out_of_extra_lines() -> None:
    with pytest.raises(ValidationError, match="PrologFlags"):
        parse_spec(_spec(workerSsh={"enabled": True}, slurmConfig={"extraLines": ["PrologFlags=Alloc"]}))


def test_the_workers_sshd_takes_keys_only_asks_pam_and_chroots_into_the_jail() -> None:
    files = config.worker_ssh_files(_cluster(_spec(workerSsh={"enabled": True})))
    options, matches = parse_sshd(files["sshd_config"])
    assert options["chrootdirectory"] == [naming.WORKER_SSH_ROOT]
    assert (options["pubkeyauthentication"], options["passwordauthentication"]) == (["yes"], ["no"])
    assert options["kbdinteractiveauthentication"] == ["no"]
    assert options["usepam"] == ["yes"], "pam_slurm_adopt is in PAM's account stack"
    assert options["permitrootlogin"] == ["no"], "no root key in the spec: root is refused"
    assert options["authorizedkeysfile"] == ["/etc/ssh/warden_authorized_keys/%u", "/mnt/jail%h/.ssh/authorized_keys"]
    assert matches == {"User root": {"authorizedkeysfile": ["/etc/ssh/warden_authorized_keys/root"]}}
    assert options["disableforwarding"] == ["yes"]
    assert all(options[o] == ["no"] for o in ("allowtcpforwarding", "allowagentforwarding", "x11forwarding"))
    assert options["hostkey"] == [f"/etc/ssh/{naming.SSH_HOST_KEY}"]
    assert (files["authorized_keys"], files["admins"]) == ("", "")


def test_root_needs_a_key_of_the_spec_and_admins_are_listed_for_pam() -> None:
    ssh = {"enabled": True, "rootAuthorizedKeys": [KEY], "admins": ["ops", "alice"]}
    files = config.worker_ssh_files(_cluster(_spec(workerSsh=ssh)))
    options, _ = parse_sshd(files["sshd_config"])
    assert options["permitrootlogin"] == ["prohibit-password"]
    assert files["authorized_keys"] == f"{KEY}\n"
    assert files["admins"] == "ops\nalice\n"


@pytest.mark.parametrize("admins", [["root"], ["ops", "ops"], ["Bad Name"]])
def test_admins_never_include_root_and_are_user_names(admins: list[str]) -> None:
    with pytest.raises(ValidationError):
        parse_spec(_spec(workerSsh={"enabled": True, "admins": admins}))


def test_with_a_directory_the_worker_reads_the_directorys_keys_too() -> None:
    ldap = {"uris": ["ldaps://ldap.example.org"], "searchBase": "dc=example,dc=org", "bindSecret": "bind"}
    files = config.worker_ssh_files(_cluster(_spec(workerSsh={"enabled": True}, identity={"ldap": ldap})))
    options, matches = parse_sshd(files["sshd_config"])
    assert options["authorizedkeyscommand"] == [naming.SSH_KEYS_COMMAND, "%u"]
    assert matches["User root"]["authorizedkeyscommand"] == ["none"]


def test_each_side_mounts_only_the_key_it_needs() -> None:
    """The workers' host key is a Secret of its own: workers mount it whole, login pods only its public
    half (the known host their users' ssh checks), and neither gets the other's private key."""
    rendered = _render(_spec(workerSsh={"enabled": True}))
    names = Names("demo", "hpc")
    assert {names.ssh_host_keys, names.worker_ssh_host_keys} <= {s.name for s in rendered.secrets}
    worker = _pod_spec(_object(rendered, "WorkerSet", names.worker("cpu")))
    login = _pod_spec(_object(rendered, "StatefulSet", names.login))
    worker_secrets, login_secrets = _secret_volumes(worker), _secret_volumes(login)
    assert names.ssh_host_keys not in worker_secrets
    assert "items" not in worker_secrets[names.worker_ssh_host_keys]
    public = f"{naming.SSH_HOST_KEY}.pub"
    assert login_secrets[names.worker_ssh_host_keys]["items"] == [{"key": public, "path": public}]
    mounts = {m["mountPath"] for m in worker["containers"][0]["volumeMounts"]}
    assert {naming.WORKER_SSH_CONFIG_DIR, naming.WORKER_SSH_HOST_KEYS_DIR} <= mounts
    assert {"name": "ssh", "containerPort": naming.SSH_PORT} in worker["containers"][0]["ports"]
    env = {e["name"]: e.get("value") for e in login["containers"][0]["env"]}
    patterns = (env["WARDEN_WORKER_SSH_HOSTS"] or "").split(",")
    # what a user types on the login node, and the workers' DNS names, are known hosts; the login isn't
    for host in ("demo-worker-cpu-0", "demo-worker-cpu-1.demo-nodes", "demo-worker-cpu-0.demo-nodes.hpc.svc",
                 "demo-worker-gpu-3.demo-nodes.hpc.svc.cluster.local"):  # fmt: skip
        assert any(fnmatch.fnmatchcase(host, p) for p in patterns), host
    assert not any(fnmatch.fnmatchcase("demo-login-0", p) for p in patterns)
    # the config the worker mounts is the rendered one
    data = _object(rendered, "ConfigMap", names.worker_sshd_config)["data"]
    assert set(data) == {"sshd_config", "authorized_keys", "admins"}


def test_the_workers_sshd_is_reached_by_the_clusters_own_pods_only() -> None:
    """No Service exposes it: from the login node (and a job step on another worker) yes; from another
    workload of the Kubernetes cluster, or from outside, no."""
    policies = [o for o in _render(_spec(workerSsh={"enabled": True})).objects if o["kind"] == "NetworkPolicy"]
    names = Names("demo", "hpc")
    ns = {"kubernetes.io/metadata.name": "hpc"}
    worker = Endpoint("10.244.1.10", "hpc", names.labels("worker"), ns)
    login = Endpoint("10.244.1.11", "hpc", names.labels("login"), ns)
    other_worker = Endpoint("10.244.1.12", "hpc", names.labels("worker"), ns)
    stranger = Endpoint("10.244.9.9", "other", {"app": "web"}, {"kubernetes.io/metadata.name": "other"})
    assert allowed(policies, login, worker, naming.SSH_PORT)
    assert allowed(policies, other_worker, worker, naming.SSH_PORT)
    assert not allowed(policies, stranger, worker, naming.SSH_PORT)
    assert not allowed(policies, Endpoint("198.51.100.20"), worker, naming.SSH_PORT)
    rendered = _render(_spec(workerSsh={"enabled": True}))
    services = [o for o in rendered.objects if o["kind"] == "Service"]
    assert not [s for s in services if any(p["port"] == naming.SSH_PORT for p in s["spec"]["ports"])
                and s["metadata"]["name"] != names.login], "a Service exposes the workers' sshd"  # fmt: skip


def test_the_worker_images_pam_stack_lets_admins_in_then_asks_slurm() -> None:
    """images/worker/pam-sshd: no password ever; in the account stack the admins' list, then
    pam_slurm_adopt for this node, refusing whenever it cannot adopt the session into a job; the session
    under the job steps' filter."""
    lines = [line.split() for line in (ROOT / "images/worker/pam-sshd").read_text().splitlines()]
    stack = [w for w in lines if w and not w[0].startswith("#")]
    assert ["auth", "required", "pam_deny.so"] in stack
    account = [w for w in stack if w[0] == "account"]
    assert [w[2] for w in account] == ["pam_unix.so", "pam_listfile.so", "pam_slurm_adopt.so"]
    listfile, adopt = account[1], account[2]
    assert listfile[1] == "sufficient" and f"file={naming.WORKER_SSH_ADMINS}" in listfile
    assert adopt[1] == "required"
    assert {"nodename=@NODE@", "action_adopt_failure=deny", "action_generic_failure=deny"} <= set(adopt[3:])
    # the session: under the job steps' seccomp filter first (spank/pam_warden_filter.c), refused without it
    session = [w for w in stack if w[0] == "session"]
    assert session[0][1:] == ["required", "/usr/lib/warden/pam_warden_filter.so"], session
