"""SSH to the login node: keys only, host key from the operator's Secret, sessions chrooted into the jail;
nothing forwarded (TCP, agent) unless the SlurmCluster says so, while PTYs, scp and sftp work."""

from __future__ import annotations

import copy
import shlex
import uuid

from tests.support.jailuser import JailUser
from warden.model import parse_spec
from warden.render import configmaps
from warden.render.context import Cluster
from warden_dev.dockercluster import DockerCluster, Exec, wait_for


def test_root_key_from_the_spec_lands_in_the_jail(cluster: DockerCluster) -> None:
    """root's key (spec.login.sshAuthorizedKeys) logs in; the client checks the host key against the
    generated Secret (StrictHostKeyChecking=yes); the session sees the jail, not the container."""
    out = cluster.ssh(
        "root",
        "cat /etc/warden-jail-release; hostname; id -un; "
        "for p in /etc/warden /mnt/jail /usr/local/bin/warden-login /etc/slurm/slurm.key; do "
        '[ -e "$p" ] && echo "VISIBLE $p"; done; true',
    ).out
    assert "WARDEN_JAIL_VERSION=" in out
    assert f"{cluster.names.login}-0" in out.split()
    assert "root" in out.split()
    assert "VISIBLE" not in out, out
    # the same paths do exist in the login container itself
    cluster.exec(f"{cluster.names.login}-0", "test -d /etc/warden && test -d /mnt/jail && test -f /etc/slurm/slurm.key")


def test_jail_user_logs_in_with_their_own_key(cluster: DockerCluster, alice: JailUser) -> None:
    out = alice.ssh('id -un; echo "home=$HOME"; pwd; test -f /etc/warden-jail-release && echo in-jail')
    assert out.split() == ["alice", "home=/home/alice", "/home/alice", "in-jail"]


def test_a_users_key_is_not_roots(cluster: DockerCluster, alice: JailUser) -> None:
    r = cluster.ssh("root", "true", check=False, identity=alice.identity)
    assert r.rc == 255
    assert "Permission denied (publickey)" in r.err


def test_a_key_written_into_the_jails_root_home_does_not_let_anyone_in_as_root(
    cluster: DockerCluster, alice: JailUser
) -> None:
    """root's keys come from the SlurmCluster only: a key added to the jail's /root/.ssh (by anything
    that ran as root in a job step, or a backup restored there) is not accepted."""
    cluster.ssh("root", f"mkdir -p -m 700 /root/.ssh && echo '{alice.public_key}' >> /root/.ssh/authorized_keys")
    try:
        r = cluster.ssh("root", "true", check=False, identity=alice.identity)
        assert r.rc == 255 and "Permission denied (publickey)" in r.err, (r.rc, r.err)
    finally:
        cluster.ssh("root", "rm -f /root/.ssh/authorized_keys")


def test_password_login_is_refused(cluster: DockerCluster, alice: JailUser) -> None:
    for user in ("root", "alice"):
        for method in ("password", "keyboard-interactive"):
            r = cluster.ssh(
                user,
                "true",
                check=False,
                extra=["-o", f"PreferredAuthentications={method}", "-o", "PubkeyAuthentication=no"],
            )
            assert r.rc == 255, r
            assert "Permission denied (publickey)" in r.err, r


def test_unknown_host_key_is_rejected(cluster: DockerCluster) -> None:
    """Negative control for the host-key check above: with an empty known_hosts the client refuses."""
    r = cluster.ssh("root", "true", check=False, extra=["-o", "UserKnownHostsFile=/dev/null"])
    assert r.rc == 255
    assert "Host key verification failed" in r.err


def test_sessions_have_proc_and_a_terminal_but_not_the_containers_root(cluster: DockerCluster, alice: JailUser) -> None:
    """`ps`, bash's process substitution (/dev/fd) and a pty work in a jail user's session, while the
    login container's root stays out of reach (/proc/1/root: PID 1 is root's, which a user does not even
    see: spec.security.hideOtherUsersProcesses, tests/dataplane/test_identity_limits.py)."""
    out = alice.ssh("ps -e -o comm=; cat <(echo procsub-ok); ls /proc/1/root/ 2>&1; true")
    assert {"bash", "ps"} <= set(out.split()) and "sshd" not in out.split(), out
    assert "procsub-ok" in out.split(), out
    assert "cannot access '/proc/1/root/': No such file or directory" in out, out
    tty = cluster.ssh("alice", "tty", identity=alice.identity, extra=["-tt"]).out
    assert tty.strip().startswith("/dev/pts/"), tty


# --- forwarding (spec.login.forwarding: nothing by default) ------------------------------------------

#: the login pod's own sshd, as the login pod reaches it: a forward that works reads its banner
TARGET = "127.0.0.1:22"
BANNER = "SSH-2.0-"
LOCAL_PORT, REMOTE_PORT = 2222, 2223


def _ssh_words(cluster: DockerCluster, user: JailUser, *args: str) -> str:
    """An ssh command line for the client container, logging refusals (LogLevel INFO)."""
    return shlex.join(["ssh", *cluster.ssh_options(user.identity, log_level="INFO"), *args])


def _client(cluster: DockerCluster, script: str) -> Exec:
    return cluster.exec("client", script, check=False, timeout=90)


def _stdio_forward(cluster: DockerCluster, user: JailUser) -> Exec:
    """`ssh -W` to the login pod's sshd (stdin open for a few seconds: time for the banner to come)."""
    ssh = _ssh_words(cluster, user, "-W", TARGET, f"{user.name}@{cluster.names.login}")
    return _client(cluster, f"sleep 3 | timeout 30 {ssh}")


def _local_forward(cluster: DockerCluster, user: JailUser) -> Exec:
    """`ssh -N -L`: once the client listens, one connection through it; prints `through=` what came back."""
    ssh = _ssh_words(
        cluster, user, "-N", "-L", f"127.0.0.1:{LOCAL_PORT}:{TARGET}", f"{user.name}@{cluster.names.login}"
    )
    connect = f"exec 3<>/dev/tcp/127.0.0.1/{LOCAL_PORT}"
    script = f"""
        {ssh} 2>/tmp/local-forward.err & pid=$!
        for _ in $(seq 1 300); do bash -c {shlex.quote(connect)} 2>/dev/null && break; sleep 0.1; done
        echo "through=$(timeout 10 bash -c {shlex.quote(connect + "; head -c 8 <&3")})"
        kill $pid; wait $pid; cat /tmp/local-forward.err >&2
    """
    return _client(cluster, script)


def _remote_forward(cluster: DockerCluster, user: JailUser) -> Exec:
    """`ssh -R` (the client gives up when the forward is refused); the session says whether anything
    listens on the port in the login pod."""
    check = f"bash -c 'exec 3<>/dev/tcp/127.0.0.1/{REMOTE_PORT}' 2>/dev/null && echo port=open || echo port=closed"
    return cluster.ssh(
        user.name,
        check,
        check=False,
        identity=user.identity,
        extra=["-o", "ExitOnForwardFailure=yes", "-R", f"127.0.0.1:{REMOTE_PORT}:{TARGET}"],
    )


def _agent_forward(cluster: DockerCluster, user: JailUser) -> Exec:
    """`ssh -A` with an agent holding the user's key: the session prints the agent socket it got and
    the keys it can list through it."""
    ssh = _ssh_words(cluster, user, "-A", f"{user.name}@{cluster.names.login}",
                     'echo "agent=${SSH_AUTH_SOCK:-none}"; ssh-add -l 2>&1 || true')  # fmt: skip
    script = f"""
        eval "$(ssh-agent -s)" >/dev/null && ssh-add -q {shlex.quote(user.identity)} || exit 99
        {ssh}; rc=$?
        ssh-agent -k >/dev/null; exit $rc
    """
    return _client(cluster, script)


def test_a_user_can_forward_nothing_through_the_login_node(cluster: DockerCluster, alice: JailUser) -> None:
    """`ssh -W` and `ssh -L` (connections from the login pod to where the user asks: slurmctld, the
    kubelet, the API server), `ssh -R` (a listening port in the login pod) and `ssh -A` (the user's agent
    in the jail, open to root there) are all refused."""
    w = _stdio_forward(cluster, alice)
    assert BANNER not in w.out and w.rc == 255, w
    assert "administratively prohibited" in w.err and "stdio forwarding failed" in w.err, w

    local = _local_forward(cluster, alice)
    assert local.out.split() == ["through="], local  # the client listened, the connection got nothing
    assert "administratively prohibited" in local.err, local

    remote = _remote_forward(cluster, alice)
    assert "port=open" not in remote.out and remote.rc == 255, remote
    assert f"remote port forwarding failed for listen port {REMOTE_PORT}" in remote.err, remote

    agent = _agent_forward(cluster, alice)
    assert agent.rc == 0 and "agent=none" in agent.out.split(), agent


def test_sessions_still_get_a_terminal_scp_and_sftp(cluster: DockerCluster, alice: JailUser) -> None:
    """What forwarding nothing leaves: commands, a PTY, scp (SFTP protocol, and the old one with -O, which
    runs the jail's scp) and sftp, all into alice's home in the jail."""
    assert alice.ssh("id -un").strip() == alice.name
    tty = cluster.ssh(alice.name, "tty", identity=alice.identity, extra=["-tt"]).out
    assert tty.strip().startswith("/dev/pts/"), tty
    tag = uuid.uuid4().hex[:8]
    opts = shlex.join(cluster.ssh_options(alice.identity))
    remote = f"{alice.name}@{cluster.names.login}"
    script = f"""
        set -e
        echo payload-{tag} > /tmp/up-{tag}
        scp {opts} /tmp/up-{tag} {remote}:scp-{tag} && scp {opts} {remote}:scp-{tag} /tmp/scp-{tag}
        scp -O {opts} /tmp/up-{tag} {remote}:scp-old-{tag} && scp -O {opts} {remote}:scp-old-{tag} /tmp/old-{tag}
        printf 'put /tmp/up-{tag} sftp-{tag}\\nget sftp-{tag} /tmp/sftp-{tag}\\n' | sftp {opts} -b - {remote} >/dev/null
        cat /tmp/scp-{tag} /tmp/old-{tag} /tmp/sftp-{tag}
    """
    copied = cluster.exec("client", script, timeout=90).out
    assert copied.split() == [f"payload-{tag}"] * 3, copied
    assert alice.ssh(f"cat ~/scp-{tag} ~/scp-old-{tag} ~/sftp-{tag}").split() == [f"payload-{tag}"] * 3


def test_the_forwarding_setting_opens_what_it_names_without_restarting_sshd(
    cluster: DockerCluster, alice: JailUser
) -> None:
    """The same four with `forwarding: {tcp: All, agent: true}` (the ConfigMap changed as the operator
    changes it; the login follows without a restart): each works, which is what the refusals above are
    measured against. Then the default again."""
    login = cluster.names.sshd_config

    def sshd_config(forwarding: dict[str, object]) -> dict[str, str]:
        spec = copy.deepcopy(cluster.spec_with_key)
        spec["login"]["forwarding"] = forwarding
        data: dict[str, str] = configmaps.sshd_config(Cluster(cluster.name, cluster.namespace, parse_spec(spec)))[
            "data"
        ]
        return data

    assert cluster.update_configmap(login, sshd_config({"tcp": "All", "agent": True}))
    try:
        wait_for("ssh -W through the login node", lambda: BANNER in _stdio_forward(cluster, alice).out, timeout=60)
        local = _local_forward(cluster, alice)
        assert local.out.split() == [f"through={BANNER}"], local
        remote = _remote_forward(cluster, alice)
        assert remote.rc == 0 and remote.out.split() == ["port=open"], remote
        agent = _agent_forward(cluster, alice)
        sock = agent.out.split()[0] if agent.out else ""
        assert sock.startswith("agent=/tmp/ssh-") and "ED25519" in agent.out, agent
    finally:
        cluster.update_configmap(login, sshd_config({}))
        wait_for("ssh -W refused again", lambda: "stdio forwarding failed" in _stdio_forward(cluster, alice).err, 60)
