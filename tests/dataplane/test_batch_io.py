"""Every file a job names lands in the jail: a batch job's --output, --error and --input at paths outside
/home, its working directory, arrays' %A_%a, append mode across jobs, srun's per-task files; nothing in
the worker container, and a directory the user cannot make fails the job as Slurm fails it.

slurmstepd opens these files (as the user) before any task exists. The SPANK plugin moves slurmstepd's
main thread into the jail for exactly that part (spank/README.md, "Which process sees which root"), so
the paths resolve in the jail. Each test works in its own directory under the jail's /var/tmp, which is
on the shared jail volume (every node sees it) and, unlike /home, is not also mounted in the worker
containers: there, a file at a path the jail and the container both have could hide the defect.
"""

from __future__ import annotations

import shlex
import uuid
from collections.abc import Iterator

import pytest

from tests.support.jailuser import JailUser
from warden_dev.dockercluster import DockerCluster

q = shlex.quote


@pytest.fixture
def work(alice: JailUser) -> Iterator[str]:
    """A fresh directory alice made in the jail's /var/tmp (removed afterwards)."""
    path = f"/var/tmp/io-{uuid.uuid4().hex[:10]}"
    alice.ssh(f"mkdir -p {path}/made")
    yield path
    alice.ssh(f"rm -rf {path}", check=False)


def _sbatch(alice: JailUser, args: str, script: str) -> str:
    """Submit as alice, wait for the end (-W: sbatch's status is the job's); the job id."""
    out = alice.ssh(f"sbatch -W --parsable -p cpu {args} --wrap {q(script)}", check=False)
    job = out.strip().splitlines()[0].split(";")[0] if out.strip() else ""
    assert job.isdigit(), out
    return job


def _not_in_workers(cluster: DockerCluster, path: str) -> None:
    """The path exists in no worker container (each container's own root, not the jail)."""
    for pod in cluster.worker_pods("cpu"):
        r = cluster.exec(pod, f"test -e {q(path)} && echo present || echo absent")
        assert r.out.strip() == "absent", f"{path} exists in {pod}'s container"


def _owned_by_alice_nowhere_in_workers(cluster: DockerCluster, alice: JailUser) -> None:
    """Nothing on a worker container's own file system (not the jail's mounts) belongs to alice."""
    for pod in cluster.worker_pods("cpu"):
        found = cluster.exec(pod, f"find / -xdev -user {alice.name} 2>/dev/null | head -5", check=False).out
        assert found.strip() == "", f"{pod}: {found}"


def test_output_error_input_and_workdir_outside_home_are_the_jails(
    cluster: DockerCluster, alice: JailUser, work: str
) -> None:
    """-D and -o in a directory alice made, -e in one Slurm makes for her (as Slurm does), -i a file
    she wrote on the login node: all in the jail, hers, with the content the job saw and wrote."""
    alice.ssh(f"printf 'line one\\nline two\\n' > {work}/in.txt")
    job = _sbatch(
        alice,
        f"-D {work}/made -o {work}/made/o-%j.out -e {work}/new/e-%j.err -i {work}/in.txt",
        "cat; pwd; id -un; echo to-stderr >&2",
    )
    out = alice.ssh(f"cat {work}/made/o-{job}.out")
    assert out.splitlines() == ["line one", "line two", f"{work}/made", alice.name], out
    assert alice.ssh(f"cat {work}/new/e-{job}.err").strip() == "to-stderr"
    owners = alice.ssh(f"stat -c '%U %n' {work}/made/o-{job}.out {work}/new {work}/new/e-{job}.err")
    assert [line.split()[0] for line in owners.splitlines()] == [alice.name] * 3, owners
    # the login pod sees these files on the jail volume itself
    login = f"{cluster.names.login}-0"
    assert cluster.exec(login, f"cat /mnt/jail{work}/new/e-{job}.err").out.strip() == "to-stderr"
    _not_in_workers(cluster, work)
    _owned_by_alice_nowhere_in_workers(cluster, alice)


def test_array_tasks_write_their_own_files(alice: JailUser, work: str) -> None:
    job = _sbatch(alice, f"-a 1-3 -o {work}/arr/%A_%a.out", "echo task $SLURM_ARRAY_TASK_ID of $SLURM_ARRAY_JOB_ID")
    listing = alice.ssh(f"cd {work}/arr && ls")
    assert listing.split() == [f"{job}_{i}.out" for i in (1, 2, 3)], listing
    for i in (1, 2, 3):
        assert alice.ssh(f"cat {work}/arr/{job}_{i}.out").strip() == f"task {i} of {job}"


def test_append_mode_keeps_the_previous_jobs_output(alice: JailUser, work: str) -> None:
    for word in ("first", "second"):
        _sbatch(alice, f"--open-mode=append -o {work}/made/log.out", f"echo {word}")
    assert alice.ssh(f"cat {work}/made/log.out").split() == ["first", "second"]


def test_output_in_a_node_local_mount_stays_on_that_node(cluster: DockerCluster, alice: JailUser, work: str) -> None:
    """/tmp is the job's own on each node (the group's default localMounts, perJob): the job's output is in
    its /tmp, which a later step of the job reads, not on the shared jail volume, and gone with the job
    (tests/dataplane/test_job_space.py)."""
    node = cluster.worker_pods("cpu")[0]
    name = f"/tmp/{work.rsplit('/', 1)[1]}-%j.out"
    path = name.replace("%j", "$SLURM_JOB_ID")
    job = _sbatch(
        alice, f"-w {node} -o {name}", f"echo node-local; srun sh -c 'cat {path}; stat -c %U {path}' >{work}/seen"
    )
    assert alice.ssh(f"cat {work}/seen").split() == ["node-local", alice.name]
    path = name.replace("%j", job)
    login = f"{cluster.names.login}-0"
    assert cluster.exec(login, f"test -e /mnt/jail{path} && echo yes || echo no").out.strip() == "no"
    after = alice.ssh(f"srun -p cpu -w {node} sh -c {q(f'test -e {path} && echo yes || echo no')}")
    assert after.strip() == "no"


def test_srun_per_task_files_are_the_jails(cluster: DockerCluster, alice: JailUser, work: str) -> None:
    """`srun -o name-%t`: slurmstepd on each node opens one file per task, in the jail."""
    nodes = cluster.worker_pods("cpu")
    alice.ssh(f"srun -p cpu -N2 --ntasks-per-node=1 -o {work}/made/t-%t.out sh -c 'echo task $SLURM_PROCID'")
    for rank in (0, 1):
        assert alice.ssh(f"cat {work}/made/t-{rank}.out").strip() == f"task {rank}"
    assert len(nodes) == 2
    _not_in_workers(cluster, work)


def test_a_directory_she_cannot_make_fails_the_job_as_slurm_does(
    cluster: DockerCluster, alice: JailUser, work: str
) -> None:
    """`-o /<missing>/o.out`: Slurm cannot make the directory as alice (/ is root's), so the job fails
    before it runs, as Slurm fails it anywhere: `sbatch -W` exits 1 and the job is FAILED; nothing
    appears in the jail or in a worker container."""
    missing = f"/no-such-dir-{work.rsplit('-', 1)[1]}"
    out = alice.ssh(f"sbatch -W --parsable -p cpu -o {missing}/o.out --wrap true; echo rc=$?", check=False)
    job = out.strip().splitlines()[0].split(";")[0]
    assert job.isdigit(), out
    assert "rc=0" not in out, out
    shown = alice.ssh(f"scontrol show job {job}")
    assert "JobState=FAILED" in shown, shown
    assert alice.ssh(f"test -e {missing} && echo yes || echo no").strip() == "no"
    _not_in_workers(cluster, missing)


def test_an_mpi_steps_per_task_files_outside_shared_paths_are_refused(
    cluster: DockerCluster, alice: JailUser, work: str
) -> None:
    """The documented exception: with an MPI plugin (--mpi=pmi2), slurmstepd opens per-task files in
    the worker container (the plugin's server must start on the node's own libraries). The container
    has no directory alice may write, so the step fails with Slurm's message to srun, and still
    nothing of hers is in the container. Paths under /home and node-local mounts work there too."""
    r = cluster.ssh(
        alice.name,
        f"srun -p cpu -N1 --mpi=pmi2 -o /var/tmp/{work.rsplit('/', 1)[1]}-%t.out true",
        check=False,
        identity=alice.identity,
    )
    assert not r.ok, r
    assert "launch failed: Slurmd could not connect IO" in r.err, r
    _owned_by_alice_nowhere_in_workers(cluster, alice)
    alice.ssh("srun -p cpu -N1 --mpi=pmi2 -o ~/mpi-%t.out sh -c 'echo in-home'")
    assert alice.ssh("cat ~/mpi-0.out; rm ~/mpi-0.out").strip() == "in-home"


def test_task_epilogs_run_in_the_jail_as_the_user(cluster: DockerCluster, alice: JailUser, work: str) -> None:
    """`srun --task-epilog=SCRIPT`: slurmstepd runs the script after each task ends, as the user. It
    runs in the jail, like the task prolog and the tasks: the script is the jail's file, and it sees the
    jail's root, not the worker container's (no /mnt/jail, no /etc/warden with the cluster's keys)."""
    look = "id -un; test -f /etc/warden-jail-release && echo jail; test -e /mnt/jail && echo container-mnt-jail"
    look += "; test -e /etc/warden && echo container-etc-warden"
    epilog = f"#!/bin/sh\n{{ {look}; }} > {work}/made/epi-$SLURM_PROCID\n"
    alice.ssh(f"cat > {work}/epi.sh && chmod 755 {work}/epi.sh", input=epilog)
    alice.ssh(f"srun -p cpu -N2 --ntasks-per-node=1 --task-epilog={work}/epi.sh true")
    for rank in (0, 1):
        assert alice.ssh(f"cat {work}/made/epi-{rank}").split() == [alice.name, "jail"]
