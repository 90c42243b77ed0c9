"""Directory users (spec.identity.ldap) in the order a site lives them: a person is added to the LDAP
directory after the cluster is up, logs in over SSH with the key the directory holds, lands in the jail
with a fresh home, runs jobs on several nodes as their directory uid, submits through the REST API, sees
their jobs in sacct; a group-restricted partition admits members only; the directory goes away for a
while and work goes on; the person is removed and can no longer log in.

The directory is real: OpenLDAP's slapd with TLS (tests/support/directory.py), read by SSSD in the
controller, accounting, login and worker pods with the CA from a Secret. The jail's own users
(`warden-useradd`) keep working beside directory users (alice here, and every other dataplane test).
"""

from __future__ import annotations

import json
import shlex
import time
import uuid

import pytest

from tests.support.directory import CACHE_SECONDS, SITE_GROUPS, Directory
from tests.support.eventually import eventually
from tests.support.jailuser import JailUser
from warden import naming
from warden_dev.dockercluster import DockerCluster, wait_for

q = shlex.quote
PHYSICS_GID = SITE_GROUPS["physics"]


class DirectoryUser:
    """A person in the directory (not in the jail's /etc/passwd) with an SSH key of their own."""

    def __init__(self, cluster: DockerCluster, directory: Directory, name: str, uid: int) -> None:
        self.cluster, self.directory, self.name, self.uid = cluster, directory, name, uid
        self.identity, self.public_key = cluster.user_key(name)

    def ssh(self, script: str, check: bool = True, timeout: float = 120) -> str:
        return self.cluster.ssh(self.name, script, check=check, timeout=timeout, identity=self.identity).out

    def login(self, script: str = "true") -> tuple[bool, str]:
        r = self.cluster.ssh(self.name, script, check=False, timeout=60, identity=self.identity)
        return r.ok, r.out + r.err


@pytest.fixture(scope="module")
def dora(cluster: DockerCluster, directory: Directory) -> DirectoryUser:
    """Added to the directory after the cluster is up, and to the site's group physics, which the cluster
    has known from its start (partition physics allows it); nothing done on the cluster."""
    user = DirectoryUser(cluster, directory, f"dora{uuid.uuid4().hex[:4]}", 70000 + int(uuid.uuid4().int % 900))
    directory.add_user(user.name, user.uid, user.public_key, groups=("physics",))
    return user


def test_a_person_added_to_the_directory_logs_in_with_its_key_into_a_fresh_home(
    cluster: DockerCluster, dora: DirectoryUser
) -> None:
    # the first login: SSSD looks her up (no cache yet), sshd takes the key from the directory
    out = dora.ssh("id; pwd; stat -c '%u:%g %a' ~; ls -A ~; cat /etc/warden-jail-release | head -n 1")
    lines = out.splitlines()
    assert lines[0].startswith(f"uid={dora.uid}({dora.name}) gid={dora.uid}({dora.name})"), out
    assert f"{PHYSICS_GID}(physics)" in lines[0], out
    assert lines[1] == f"/home/{dora.name}", out  # in the jail, in her home
    assert lines[2] == f"{dora.uid}:{dora.uid} 700", out
    assert ".ssh" not in lines[3:], out  # no key was copied anywhere: it came from the directory
    assert "WARDEN_JAIL_VERSION=" in out, out
    login_log = cluster.logs(f"{cluster.names.login}-0", tail=200)
    assert f"made /home/{dora.name} for {dora.name} ({dora.uid}:{dora.uid}) in the jail" in login_log, login_log


def test_her_jobs_run_as_her_directory_uid_on_every_node(cluster: DockerCluster, dora: DirectoryUser) -> None:
    out = dora.ssh("srun -p cpu -N2 bash -c 'echo $(hostname) $(id -u) $(id -G); touch ~/from-$(hostname)' | sort")
    nodes = out.splitlines()
    assert len(nodes) == 2, out
    for line in nodes:
        _, uid, *gids = line.split()
        assert uid == str(dora.uid) and str(PHYSICS_GID) in gids, out
    listing = dora.ssh("ls -ln ~ | grep from-")
    owners = {line.split()[2] for line in listing.splitlines()}
    assert len(listing.splitlines()) == 2 and owners == {str(dora.uid)}, listing


def test_her_two_node_batch_job_is_in_sacct_with_its_final_state(cluster: DockerCluster, dora: DirectoryUser) -> None:
    # her first login gave her an association in the default account (spec.accounting.defaultAccount),
    # so that sacct shows her her own jobs
    ctl = cluster.names.controller_pod
    assoc = cluster.exec(ctl, f"sacctmgr -n -P show assoc user={dora.name} format=user,account").out
    assert f"{dora.name}|users" in assoc, assoc
    job = dora.ssh("sbatch --parsable -p cpu -N2 -o ~/batch-%j.out --wrap 'srun hostname; id -u'").strip()
    assert job.isdigit(), job
    eventually(
        f"job {job} in sacct as COMPLETED",
        lambda: dora.ssh(f"sacct -n -X -P -j {job} -o jobid,user,state,nnodes"),
        lambda out: out.strip() == f"{job}|{dora.name}|COMPLETED|2",
        timeout=120,
    )
    assert dora.ssh(f"tail -n 1 ~/batch-{job}.out").strip() == str(dora.uid)
    assert job in dora.ssh(f"sacct -n -X -P -u {dora.name} -o jobid").split()


def test_her_job_submitted_through_the_rest_api_runs_as_her(cluster: DockerCluster, dora: DirectoryUser) -> None:
    token = dora.ssh("scontrol token lifespan=600").strip().removeprefix("SLURM_JWT=")
    body = {
        "job": {
            "name": "rest",
            "partition": "cpu",
            "script": "#!/bin/bash\nid -u > rest-out.txt\n",
            "current_working_directory": f"/home/{dora.name}",
            "environment": ["PATH=/usr/bin:/bin"],
        }
    }
    url = f"http://{cluster.names.restapi}:{naming.RESTAPI_PORT}/slurm/{naming.RESTAPI_VERSION}/job/submit"
    curl = [
        "curl", "-sS", "-X", "POST", "-H", f"X-SLURM-USER-NAME: {dora.name}", "-H", f"X-SLURM-USER-TOKEN: {token}",
        "-H", "Content-Type: application/json", "--data", json.dumps(body), url,
    ]  # fmt: skip
    answer = json.loads(dora.ssh(shlex.join(curl)))
    assert answer.get("job_id"), answer
    out = eventually(
        "the REST job's output",
        lambda: dora.ssh("stat -c '%u' rest-out.txt 2>/dev/null && cat rest-out.txt", check=False),
        lambda out: len(out.split()) == 2,
        timeout=60,
    )
    assert out.split() == [str(dora.uid), str(dora.uid)], out


def test_a_group_restricted_partition_admits_members_and_refuses_others(
    cluster: DockerCluster, dora: DirectoryUser, alice: JailUser
) -> None:
    # slurmctld learns the group's new member within the cache time (SSSD's, then its own GroupUpdateTime)
    eventually(
        "physics admits its new member",
        lambda: dora.ssh("srun -p physics id -u 2>&1", check=False),
        lambda out: out.strip() == str(dora.uid),
        timeout=CACHE_SECONDS + 60,
    )
    # Slurm 26.05 keeps a job of a non-member pending, saying why (24.11 refused it at submission)
    job = alice.ssh("sbatch --parsable -p physics --wrap true").strip()
    try:
        reason = alice.ssh(f"squeue -h -j {job} -o '%T %r'").strip()
        assert reason.startswith("PENDING") and "not in group permitted to use this partition (physics)" in reason
    finally:
        alice.ssh(f"scancel {job}", check=False)
    # the jail's own user keeps working everywhere else, beside the directory's
    assert alice.ssh("srun -p cpu id -un").strip() == alice.name


def test_work_goes_on_while_the_directory_is_unreachable(
    cluster: DockerCluster, directory: Directory, dora: DirectoryUser
) -> None:
    directory.stop()
    try:
        # past the cache time: SSSD finds the directory gone and answers from its cache
        time.sleep(CACHE_SECONDS + 2)
        out = dora.ssh("srun -p cpu -N2 id -u | sort -u; squeue -h -u $USER -t all -o %i | sort -n | tail -1")
        uid, job = out.split()
        assert uid == str(dora.uid), out
        ok, said = dora.login("id -u")
        assert ok and said.strip() == str(dora.uid), said
        # the job ended cleanly on both nodes (its epilog too), which take the next job
        ctl = cluster.names.controller_pod
        state = f"squeue -h -t all -j {job} -o %T"
        done = "COMPLETED"
        eventually(f"{job} {done}", lambda: cluster.exec(ctl, state).out, lambda out: out.strip() == done, timeout=60)
        assert cluster.exec(ctl, "sinfo -h -R -N -p cpu -o '%N %E'").out.strip() == ""
    finally:
        directory.start_again()


def test_a_person_removed_from_the_directory_cannot_log_in_after_the_cache_time(
    cluster: DockerCluster, directory: Directory, dora: DirectoryUser
) -> None:
    assert dora.login()[0]
    directory.delete_user(dora.name)
    wait_for(
        f"{dora.name}'s login refused",
        lambda: not dora.login()[0],
        timeout=CACHE_SECONDS + 90,
        interval=3,
    )
    # nowhere known any more: slurmctld refuses her uid too
    ctl = cluster.names.controller_pod
    wait_for(f"{dora.name} unknown to the controller", lambda: not cluster.exec(ctl, f"id {dora.name}", check=False).ok,
             timeout=CACHE_SECONDS + 60, interval=3)  # fmt: skip
