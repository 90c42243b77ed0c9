"""Users and groups made in the jail while every daemon runs, on a cluster started in Kubernetes' order:
slurmctld and slurmdbd start alongside the populate Job, on a jail volume that is still empty; the
workers and the login node wait for it (their init container). Nothing is restarted between the
creation of a user and its use.

Each daemon that looks users up is checked by what it does with them: sshd (the login), slurmctld (the
job credential: name, home, groups), slurmd/slurmstepd (the step runs as the user, in their home),
slurmdbd (an accounting admin level bound to the user's uid).
"""

from __future__ import annotations

import shlex
import uuid

import pytest

from tests.support.eventually import eventually
from tests.support.jailuser import JailUser
from warden_dev.dockercluster import DockerCluster

q = shlex.quote


@pytest.fixture(scope="module")
def carol(cluster: DockerCluster) -> JailUser:
    """A user made by root on the login node after every daemon is up."""
    return JailUser.added_by_root(cluster, f"carol{uuid.uuid4().hex[:4]}")


def test_slurmctld_and_slurmdbd_started_before_the_jail_was_populated(cluster: DockerCluster) -> None:
    """The order the rest of this module relies on (and every fresh install has): both daemons said
    they started without jail users, and went on without a restart."""
    for pod in (cluster.names.controller_pod, f"{cluster.names.accounting}-0"):
        logs = cluster.logs(pod, tail=10_000)
        assert "the jail is not populated yet" in logs, logs
        assert cluster.inspect(cluster.container(pod))["RestartCount"] == 0


def test_every_daemon_container_resolves_a_user_made_after_it_started(cluster: DockerCluster, carol: JailUser) -> None:
    uid = carol.ssh("id -u").strip()
    assert uid.isdigit() and int(uid) >= 10000
    for pod in cluster.pods.values():
        # MariaDB, slurmrestd, the metrics exporter and its read gate look no user up (slurmrestd passes
        # each request's token to slurmctld; the exporter and the gate only pass tokens on)
        if pod.component in ("database", "restapi", "exporter", "read-gate"):
            continue
        out = cluster.exec(pod.name, f"getent passwd {carol.name} | cut -d: -f3,6").out.strip()
        assert out == f"{uid}:/home/{carol.name}", (pod.name, out)


def test_user_made_after_start_runs_srun_and_sbatch(cluster: DockerCluster, carol: JailUser) -> None:
    """slurmctld builds the credential (name, home, groups) and slurmstepd runs the step as the user,
    in their home, on both CPU workers."""
    probe = 'echo "$(hostname) $(id -un) $(id -gn) $HOME $(pwd)"'
    out = carol.ssh(f"cd && srun -p cpu -N2 --ntasks-per-node=1 sh -c {q(probe)}")
    home = f"/home/{carol.name}"
    want = sorted(f"{w} {carol.name} {carol.name} {home} {home}" for w in cluster.worker_pods("cpu"))
    assert sorted(out.splitlines()) == want, out
    job = carol.ssh("cd && sbatch -p cpu -W --parsable -o batch-%j.out --wrap 'id -un; pwd'").strip()
    assert job.isdigit(), job
    assert carol.ssh(f"cat ~/batch-{job}.out").split() == [carol.name, home]


def test_group_added_later_is_in_the_next_job_step(cluster: DockerCluster, carol: JailUser) -> None:
    """slurmctld caches group lists (GroupUpdateTime): a group added after the user's first jobs
    reaches their job steps within seconds, and their next login."""
    assert carol.ssh("srun -p cpu -N1 id -Gn").split() == [carol.name]  # cached by slurmctld now
    group = f"lab{uuid.uuid4().hex[:4]}"
    cluster.ssh("root", f"groupadd {group} && usermod -aG {group} {carol.name}")
    assert sorted(carol.ssh("id -Gn").split()) == sorted([carol.name, group])  # sshd: a new login
    eventually(
        f"{group} in a job step of {carol.name}",
        lambda: carol.ssh("srun -p cpu -N1 id -Gn", check=False),
        lambda out: sorted(out.split()) == sorted([carol.name, group]),
        timeout=30,
    )


def test_slurmdbd_binds_an_admin_level_to_a_user_made_after_it_started(cluster: DockerCluster, carol: JailUser) -> None:
    """An accounting Operator may add accounts: slurmdbd knows who asks by uid, so it must resolve the
    user's name to the uid of the jail's passwd (it started before the jail had one)."""
    account = f"acct{uuid.uuid4().hex[:4]}"
    denied = cluster.ssh(carol.name, f"sacctmgr -i add account {account}-early", check=False, identity=carol.identity)
    assert not denied.ok and "only admins/operators" in denied.err.lower(), denied  # not an operator yet
    ctl = cluster.names.controller_pod
    cluster.exec(ctl, f"sacctmgr -i add account {account} && sacctmgr -i add user {carol.name} account={account}")
    cluster.exec(ctl, f"sacctmgr -i modify user {carol.name} set adminlevel=operator")
    mine = f"{account}-by-{carol.name}"
    carol.ssh(f"sacctmgr -i add account {mine}")
    out = cluster.exec(ctl, f"sacctmgr -n -P show account {mine} format=account").out
    assert out.split() == [mine], out


def test_a_jail_file_replaced_by_rename_is_bound_again(cluster: DockerCluster, alice: JailUser) -> None:
    """The worker binds this pod's /etc/hosts over the jail's. Replacing the jail's file by rename on
    the shared volume (what populate overwrites and editors do) drops that bind in every pod; the
    worker puts it back within its config poll, so job steps keep the pod's name resolution."""
    worker = cluster.worker_pods("cpu")[0]
    assert cluster.exec(worker, "mountpoint -q /mnt/jail/etc/hosts", check=False).ok
    cluster.volume_sh(cluster.jail_volume, "cp /v/etc/hosts /v/etc/hosts.new && mv /v/etc/hosts.new /v/etc/hosts")
    eventually(
        f"/etc/hosts bound again on {worker}",
        lambda: cluster.exec(worker, "mountpoint /mnt/jail/etc/hosts", check=False).out,
        lambda out: "is a mountpoint" in out,
        timeout=40,
    )
    assert "bound again" in cluster.logs(worker, tail=200)
    ip = cluster.ip(worker)
    out = alice.ssh(f"srun -p cpu -N1 -w {worker} getent hosts {worker}")
    assert out.split()[0] == ip, out
