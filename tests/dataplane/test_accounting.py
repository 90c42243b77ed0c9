"""Accounting: slurmdbd (warden/accounting) and MariaDB (warden/mariadb) with the rendered
slurmdbd.conf and the generated database password; finished jobs show up in `sacct`."""

from __future__ import annotations

import re
import time
import uuid

from tests.support.jailuser import JailUser
from warden_dev.dockercluster import DockerCluster


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
