"""SSH to the login node: keys only, host key from the operator's Secret, sessions chrooted into the jail."""

from __future__ import annotations

from tests.dataplane.conftest import JailUser
from tests.support.dockercluster import DockerCluster


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
    login container's root stays out of reach (/proc/1/root: EACCES for a non-root user)."""
    out = alice.ssh("ps -e -o comm=; cat <(echo procsub-ok); ls /proc/1/root/ 2>&1; true")
    assert "sshd" in out.split(), out
    assert "procsub-ok" in out.split(), out
    assert "Permission denied" in out, out
    tty = cluster.ssh("alice", "tty", identity=alice.identity, extra=["-tt"]).out
    assert tty.strip().startswith("/dev/pts/"), tty
