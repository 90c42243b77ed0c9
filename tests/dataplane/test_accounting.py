"""Accounting: slurmdbd (warden/accounting) and MariaDB (warden/mariadb) with the rendered
slurmdbd.conf and the generated database password; finished jobs show up in `sacct`; a user made in the
jail is put in accounting's default account by slurmctld's entrypoint, with nothing done by an admin."""

from __future__ import annotations

import re
import time
import uuid

from tests.support.jailuser import JailUser
from warden_dev.dockercluster import DockerCluster, wait_for


def test_sacct_lists_finished_jobs(cluster: DockerCluster, alice: JailUser) -> None:
    alice.add_to_accounting()  # her own jobs are private to her: slurmdbd must know her
    name = f"acct-{uuid.uuid4().hex[:8]}"
    ok = alice.ssh(f"cd && sbatch -p cpu -J {name}-ok -W --parsable --wrap 'hostname'").strip()
    bad = alice.ssh(f"cd && sbatch -p cpu -J {name}-bad -W --parsable --wrap 'exit 3'", check=False).strip()
    root = cluster.ssh("root", f"cd && srun -p cpu -N2 -J {name}-root true && echo done").out
    assert ok.isdigit() and bad.isdigit() and "done" in root
    want = {(f"{name}-ok", "alice", "COMPLETED", "0:0"), (f"{name}-bad", "alice", "FAILED", "3:0")}
    deadline = time.monotonic() + 60
    while True:
        # alice, from the login node, sees her own jobs
        out = alice.ssh(f"sacct -X -n -P -o JobName,User,State,ExitCode -S now-1hours --name={name}-ok,{name}-bad")
        rows = {tuple(line.split("|")) for line in out.splitlines() if line}
        if want <= rows or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert want <= rows, out
    # root sees everyone's, with the nodes the job ran on
    out = cluster.ssh("root", f"sacct -a -X -n -P -o JobName,User,NNodes,NodeList,State --name={name}-root").out
    (line,) = out.splitlines()
    job_name, user, nnodes, nodes, state = line.split("|")
    assert (job_name, user, nnodes, state) == (f"{name}-root", "root", "2", "COMPLETED")
    expanded = cluster.exec(cluster.names.controller_pod, f"scontrol show hostnames '{nodes}'").out.split()
    assert sorted(expanded) == cluster.worker_pods("cpu")


def test_slurmdbd_knows_the_cluster(cluster: DockerCluster) -> None:
    out = cluster.exec(cluster.names.controller_pod, "sacctmgr -n -P show cluster format=Cluster,ControlHost").out
    clusters = dict(line.split("|") for line in out.splitlines() if line)
    assert cluster.name in clusters
    assert clusters[cluster.name] == cluster.ip(cluster.names.controller_pod)


def test_rendered_dbd_host_is_one_slurmdbd_accepts(cluster: DockerCluster) -> None:
    """slurmdbd exits with "This host not configured to run SlurmDBD" unless DbdHost is its host name
    (the StatefulSet's pod, `<cluster>-accounting-0`) or localhost."""
    conf = cluster.manifest("ConfigMap", cluster.names.slurmdbd_config)["data"]["slurmdbd.conf"]
    host = re.search(r"^DbdHost=(\S+)$", conf, re.M)
    assert host
    assert host.group(1) in {f"{cluster.names.accounting}-0", "localhost"}


def test_the_database_runs_as_slurmdbd_needs_it(cluster: DockerCluster) -> None:
    """slurmdbd checks the database's settings when it connects and logs what it does not support:
    MariaDB 11.8's default snapshot isolation makes slurmdbd stop on a write that conflicts with a
    concurrent transaction (images/mariadb/warden.cnf turns it off)."""
    log = cluster.logs(f"{cluster.names.accounting}-0", tail=2000)
    assert "slurmdbd version" in log and "started" in log, log[-2000:]
    assert "innodb_snapshot_isolation" not in log, log[-2000:]


def test_a_user_made_in_the_jail_sees_her_jobs_in_sacct_with_nothing_else_done(cluster: DockerCluster) -> None:
    """`warden-useradd` and nothing else: within seconds she has an association in the default account
    (`users`, made by the controller), so the jobs she then submits, a good one and a failing one, are
    hers in `sacct`, with their final states."""
    name = f"acct{uuid.uuid4().hex[:6]}"
    user = JailUser.added_by_root(cluster, name)
    ctl = cluster.names.controller_pod
    assoc = f"sacctmgr -n -P show assoc where user={name} format=account"
    wait_for(f"{name} in accounting", lambda: cluster.exec(ctl, assoc).out.split() == ["users"], timeout=60)
    known = f"scontrol show assoc_mgr flags=assoc users={name}"
    wait_for(f"slurmctld knows {name}'s association", lambda: f"UserName={name}(" in cluster.exec(ctl, known).out,
             timeout=30)  # fmt: skip
    ok = user.ssh("cd && sbatch -p cpu -W --parsable --wrap 'hostname'").strip()
    bad = user.ssh("cd && sbatch -p cpu -W --parsable --wrap 'exit 3'", check=False).strip()
    want = {(ok, "COMPLETED", "0:0"), (bad, "FAILED", "3:0")}
    sacct = f"sacct -X -n -P -o JobID,State,ExitCode -j {ok},{bad}"
    wait_for(f"{name}'s jobs in sacct", lambda: want <= {tuple(r.split("|")) for r in user.ssh(sacct).split()},
             timeout=60)  # fmt: skip


def test_limits_hold_a_new_user_runs_at_once_and_an_unknown_qos_or_account_is_refused(cluster: DockerCluster) -> None:
    """Accounting enforces associations, limits and QoS (spec.accounting.enforce's default): slurm.conf says
    so; `warden-useradd` returns once slurmctld knows the new user's association, so her first job runs
    with nothing else done; a job naming a QoS or an account that does not exist is refused at submission,
    in Slurm's words, and root's own jobs run (root's association)."""
    ctl = cluster.names.controller_pod
    config = cluster.exec(ctl, "scontrol show config").out
    assert re.search(r"^AccountingStorageEnforce\s*=\s*associations,limits,qos$", config, re.M), config
    name = f"lim{uuid.uuid4().hex[:6]}"
    made = cluster.ssh("root", f"warden-useradd {name}")
    assert f"{name} may run jobs" in made.err, made.err
    user = JailUser.added_by_root(cluster, name)  # her key (warden-useradd only adds it to the existing user)
    assert user.ssh("srun -p cpu hostname").strip() in cluster.worker_pods("cpu")
    refusals = {"--qos=nosuch": "Invalid qos specification",
                "--account=nosuch": "Invalid account or account/partition combination specified"}  # fmt: skip
    for option, words in refusals.items():
        out = cluster.ssh(name, f"sbatch -p cpu {option} --wrap true", check=False, identity=user.identity)
        assert out.rc != 0 and words in out.err, (option, out.out, out.err)
    assert "done" in cluster.ssh("root", "srun -p cpu true && echo done").out
