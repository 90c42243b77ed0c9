"""Privacy of jobs (spec.slurmConfig.privateData, default `[jobs, usage]`): an ordinary user sees their own
jobs only, in squeue, scontrol, sacct and slurmrestd, while root and SlurmUser, as whom the operator and
the exporter read Slurm, see everyone's."""

from __future__ import annotations

import uuid

import pytest

from tests.support.jailuser import JailUser
from warden import naming
from warden.slurm.rest import SlurmRest, mint_token
from warden_dev.dockercluster import DockerCluster, wait_for


@pytest.fixture(scope="module")
def olga(cluster: DockerCluster) -> JailUser:
    return JailUser.added_by_root(cluster, f"olga{uuid.uuid4().hex[:4]}")


def _rest(cluster: DockerCluster, user: str) -> SlurmRest:
    """slurmrestd with a token for `user`, signed as slurmctld signs `scontrol token`'s."""
    (pod,) = [p.name for p in cluster.pods.values() if p.component == "restapi"]
    key = cluster.secrets[cluster.names.jwt_key][naming.JWT_KEY].encode()
    url = f"http://{cluster.ip(pod)}:{naming.RESTAPI_PORT}"
    return SlurmRest(url, token=lambda: mint_token(key, user, lifetime_s=60), user=user)


def test_a_user_does_not_see_another_users_job(cluster: DockerCluster, alice: JailUser, olga: JailUser) -> None:
    ctld = cluster.exec(cluster.names.controller_pod, "scontrol show config").out
    assert any(line.split() == ["PrivateData", "=", "jobs,usage"] for line in ctld.splitlines()), "not the default"
    # both in accounting (docs/operations.md): olga sees no job of alice's in sacct either, though she may
    # see her own, and alice sees hers (slurmdbd shows a user only jobs submitted with an association)
    alice.add_to_accounting()
    olga.add_to_accounting()
    name = f"private-{uuid.uuid4().hex[:6]}"
    job = alice.ssh(f"sbatch --parsable -p cpu -J {name} -o /dev/null --wrap 'sleep 300'").strip().split(";")[0]
    try:
        listing = "squeue -h -o '%i %j %u'"
        assert f"{job} {name} {alice.name}" in alice.ssh(listing).splitlines()
        assert f"{job} {name} {alice.name}" in cluster.ssh("root", listing).out.splitlines()
        seen = olga.ssh(listing)
        assert job not in seen.split() and name not in seen, seen
        shown = cluster.ssh(olga.name, f"scontrol show job {job}", check=False, identity=olga.identity)
        assert shown.rc != 0 and name not in shown.out + shown.err, shown
        # slurmrestd: the operator's and the exporter's view (SlurmUser) has it, olga's token does not
        assert int(job) in {j.id for j in _rest(cluster, "slurm").jobs()}
        assert int(job) not in {j.id for j in _rest(cluster, olga.name).jobs()}
        # slurmdbd: once it holds the job, sacct shows it to alice and root, not to olga
        sacct = f"sacct -n -X -a -o JobID -j {job}"
        wait_for(f"job {job} in slurmdbd", lambda: job in cluster.ssh("root", sacct).out.split(), timeout=60)
        assert job in alice.ssh(sacct).split()
        assert job not in olga.ssh(sacct).split()
    finally:
        alice.ssh(f"scancel {job}")
