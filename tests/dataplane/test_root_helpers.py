"""Root never acts through a path a user controls (issue 51): a user plants a symbolic link where a root
helper or a daemon writes for them, and the helper refuses, or the write happens with the user's own
rights, so the link's target stays as it was.

- `warden-useradd --key` (root in the jail, the documented way to give a user a key) writes ~/.ssh as the
  user and refuses a link there, naming it;
- the login's session hook (root, outside the chroot, where an absolute link in the jail resolves against
  the login container's own root) makes a directory user's home only below directories that root alone
  can change, never through a link;
- sbcast (slurmd, as the user) and an MPI step's per-task files (slurmstepd, as the user), which are opened
  in the worker container and not in the jail, never change a root file of the container through a link;
  an MPI step's files in the job's own /tmp and /dev/shm land there (slurmstepd sees the job's directories
  over the container's while it opens them), sbcast's are refused there, and both reach the home and a
  node-local mount every job shares.

Every trap targets a root-owned file or directory made for the test. After each, the user is served again
once they have removed the link.
"""

from __future__ import annotations

import random
import re
import shlex
import uuid
from collections.abc import Iterator

import pytest

from tests.support.directory import Directory
from tests.support.eventually import eventually
from tests.support.jailuser import JailUser
from warden import naming
from warden_dev.dockercluster import DockerCluster

q = shlex.quote
PROBE = "probe: root's, no user may change it\n"


def _login(cluster: DockerCluster) -> str:
    return f"{cluster.names.login}-0"


@pytest.fixture
def user(cluster: DockerCluster) -> JailUser:
    """A fresh user (warden-useradd as root on the login node) for each test: a trap that went wrong
    locks out only this one."""
    return JailUser.added_by_root(cluster, f"trap{uuid.uuid4().hex[:6]}")


@pytest.fixture
def probe(cluster: DockerCluster) -> Iterator[str]:
    """A file in the jail's /etc made by root for the test: root:root 0644, known contents."""
    path = f"/etc/warden-probe-{uuid.uuid4().hex[:8]}"
    cluster.ssh("root", f"printf %s {q(PROBE)} > {path} && chmod 0644 {path}")
    yield path
    cluster.ssh("root", f"rm -rf {path}", check=False)


@pytest.fixture
def probe_dir(cluster: DockerCluster) -> Iterator[str]:
    """An empty directory in the jail's /etc made by root for the test: root:root 0755."""
    path = f"/etc/warden-probe-{uuid.uuid4().hex[:8]}.d"
    cluster.ssh("root", f"install -d -m 0755 {path}")
    yield path
    cluster.ssh("root", f"rm -rf {path}", check=False)


def _in_jail(cluster: DockerCluster, path: str) -> str:
    """Owner, mode and contents of a jail path, as root sees them (in root's SSH session)."""
    show = f"stat -c '%u:%g %a' {path}; if [ -d {path} ]; then ls -A {path}; else cat {path}; fi"
    return cluster.ssh("root", show).out


def _as_user_on_login(cluster: DockerCluster, user: JailUser, script: str) -> None:
    """`script` run with the user's uid and gid on the login node (its container, the jail at
    /mnt/jail): what the user does to undo a trap that also keeps sshd from reading their keys."""
    uid, gid = _ids(cluster, user)
    cluster.exec(_login(cluster), f"cd {naming.JAIL_MOUNT}/home/{user.name} && {script}", user=f"{uid}:{gid}")


def _ids(cluster: DockerCluster, user: JailUser) -> tuple[str, str]:
    out = cluster.ssh("root", f"id -u {user.name}; id -g {user.name}").out.split()
    return out[0], out[1]


def test_warden_useradd_gives_a_key_as_the_users_own_file_and_again_changes_nothing(
    cluster: DockerCluster, user: JailUser
) -> None:
    """The normal path: a new key for an existing user, given twice; the file is theirs, 0600, in their
    0700 ~/.ssh, with each key once, and the new key logs them in."""
    identity, key = cluster.user_key(f"{user.name}-new")
    for _ in range(2):
        cluster.ssh("root", f"warden-useradd --key {q(key)} {user.name}")
    out = user.ssh("stat -c '%U %a' ~/.ssh ~/.ssh/authorized_keys; cat ~/.ssh/authorized_keys")
    lines = out.splitlines()
    assert lines[:2] == [f"{user.name} 700", f"{user.name} 600"], out
    assert sorted(lines[2:]) == sorted([user.public_key, key]), out
    assert cluster.ssh(user.name, "id -un", identity=identity).out.strip() == user.name


def test_warden_useradd_refuses_a_linked_authorized_keys_and_its_target_stays_roots(
    cluster: DockerCluster, user: JailUser, probe: str
) -> None:
    """The measured attack: ~/.ssh/authorized_keys made a link to a root file of the jail's /etc; root then
    adds a key. Before, warden-useradd appended the key to the file, made it the user's and mode 0600
    (with /etc/passwd as the target: root). Now it refuses, names the link, and writes nothing."""
    keys = f"/home/{user.name}/.ssh/authorized_keys"
    user.ssh(f"mv {keys} ~/keys.saved && ln -s {probe} {keys}")
    identity, key = cluster.user_key(f"{user.name}-new")
    r = cluster.ssh("root", f"warden-useradd --key {q(key)} {user.name}", check=False)
    assert not r.ok, r
    want = f"warden-useradd: refusing {keys}: it is a symbolic link (to {probe}); remove it and run again"
    assert want in r.err, r
    assert _in_jail(cluster, probe) == "0:0 644\n" + PROBE
    # the user removes the link (sshd cannot read their keys through it, so not over SSH); root again
    _as_user_on_login(cluster, user, "rm .ssh/authorized_keys && mv keys.saved .ssh/authorized_keys")
    cluster.ssh("root", f"warden-useradd --key {q(key)} {user.name}")
    assert cluster.ssh(user.name, "id -un", identity=identity).out.strip() == user.name
    assert user.ssh("srun -p cpu -N1 id -un").strip() == user.name
    assert _in_jail(cluster, probe) == "0:0 644\n" + PROBE


def test_warden_useradd_refuses_a_linked_ssh_directory_and_its_target_stays_roots(
    cluster: DockerCluster, user: JailUser, probe_dir: str
) -> None:
    """~/.ssh made a link to a root directory of the jail: before, root made the directory the user's
    (install -d follows the link) and wrote authorized_keys into it."""
    user.ssh(f"mv ~/.ssh ~/ssh.saved && ln -s {probe_dir} ~/.ssh")
    identity, key = cluster.user_key(f"{user.name}-new")
    r = cluster.ssh("root", f"warden-useradd --key {q(key)} {user.name}", check=False)
    assert not r.ok, r
    want = f"warden-useradd: refusing /home/{user.name}/.ssh: it is a symbolic link (to {probe_dir}); remove it"
    assert want in r.err, r
    assert _in_jail(cluster, probe_dir) == "0:0 755\n"
    _as_user_on_login(cluster, user, "rm .ssh && mv ssh.saved .ssh")
    cluster.ssh("root", f"warden-useradd --key {q(key)} {user.name}")
    assert cluster.ssh(user.name, "id -un", identity=identity).out.strip() == user.name


def test_the_session_hook_makes_no_home_through_a_users_link(
    cluster: DockerCluster, directory: Directory, user: JailUser
) -> None:
    """A directory user whose home the directory puts below a jail user's home, where that user made a
    link to /etc. The session hook runs as root outside the chroot: through the link it would have made
    the home in the login container's own /etc. It refuses (the login log says why), makes nothing in
    either /etc, and the person still logs in (in /)."""
    user.ssh("ln -s /etc ~/lab")
    person = f"eve{uuid.uuid4().hex[:4]}"
    uid = 72000 + random.randrange(900)
    home = f"/home/{user.name}/lab/{person}"
    identity, key = cluster.user_key(person)
    directory.add_user(person, uid, key, home=home)
    try:
        r = cluster.ssh(person, "pwd; id -u", identity=identity, check=False)
        assert r.ok and r.out.split() == ["/", str(uid)], r
        log = cluster.logs(_login(cluster), tail=400)
        assert f"users: refusing to make {person}'s home {home}: " in log, log
        assert "the session starts in /" in log, log
        made = cluster.exec(
            _login(cluster),
            f"ls -d /etc/{person} /etc/.warden-home.* {naming.JAIL_MOUNT}/etc/{person} "
            f"{naming.JAIL_MOUNT}/etc/.warden-home.* 2>/dev/null || true",
        ).out
        assert made == "", made
    finally:
        directory.delete_user(person)


@pytest.fixture
def worker_probe(cluster: DockerCluster) -> Iterator[tuple[str, str]]:
    """A root file of a CPU worker's container (not in the jail): (node, path), root:root 0644."""
    node = cluster.worker_pods("cpu")[0]
    path = f"/etc/warden-probe-{uuid.uuid4().hex[:8]}"
    cluster.exec(node, f"printf %s {q(PROBE)} > {path} && chmod 0644 {path}")
    yield node, path
    cluster.exec(node, f"rm -f {path}", check=False)


def _in_worker(cluster: DockerCluster, node: str, path: str) -> str:
    return cluster.exec(node, f"stat -c '%u:%g %a' {path}; cat {path}").out


def test_sbcast_through_a_users_link_changes_no_file_of_the_worker_container(
    cluster: DockerCluster, user: JailUser, worker_probe: tuple[str, str]
) -> None:
    """slurmd writes sbcast's file in the worker container, not in the jail, from a process with the
    user's uid: a link in the user's home (shown at /home in the container too) to a root file of the
    container, or into slurmd's spool, is refused by the kernel, and the file stays root's."""
    node, target = worker_probe
    spool = f"{naming.SLURMD_SPOOL_DIR}/warden-probe-{uuid.uuid4().hex[:8]}"
    user.ssh(f"echo payload > ~/payload && ln -s {target} ~/to-etc && ln -s {spool} ~/to-spool")
    for link in ("to-etc", "to-spool"):
        r = cluster.ssh(
            user.name, f"salloc -p cpu -N1 -w {node} sbcast -f ~/payload ~/{link}", check=False, identity=user.identity
        )
        assert not r.ok, (link, r)
        assert "Permission denied" in r.err, (link, r)
    assert _in_worker(cluster, node, target) == "0:0 644\n" + PROBE
    assert cluster.exec(node, f"test -e {spool} && echo yes || echo no").out.strip() == "no"
    # without the links, the same broadcast lands in her home (the jail's), as hers
    user.ssh("rm ~/to-etc ~/to-spool")
    user.ssh(f"salloc -p cpu -N1 -w {node} sbcast -f ~/payload ~/to-etc")
    assert user.ssh("stat -c %U ~/to-etc; cat ~/to-etc").split() == [user.name, "payload"]


@pytest.mark.parametrize("where", ["home", "tmp"])
def test_an_mpi_steps_files_through_a_users_link_change_no_file_of_the_worker_container(
    cluster: DockerCluster, user: JailUser, worker_probe: tuple[str, str], where: str
) -> None:
    """An srun step with an MPI plugin has its per-task files opened in the worker container (spank/README.md,
    "Which process sees which root"; the job's own /tmp bound over the container's), by slurmstepd with the
    user's uid: a per-task output name that is the user's link to a root file of the container, in the home
    or in the job's /tmp, fails the step, and the file stays root's. Without the link the same step writes
    the user's file."""
    node, target = worker_probe
    if where == "home":
        plant, out, undo = f"ln -s {target} ~/mpi-0.out", "mpi-%t.out", "rm ~/mpi-0.out"
        read = "stat -c %U mpi-0.out; cat mpi-0.out"
    else:
        plant, out, undo = f"srun ln -s {target} /tmp/mpi-0.out", "/tmp/mpi-%t.out", "srun rm /tmp/mpi-0.out"
        read = "srun cat /tmp/mpi-0.out"
    step = f"srun --mpi=pmi2 -o {out} echo written; echo mpi=$?"
    script = f"{plant} && {step}; {undo} && {step} && {read}"
    r = cluster.ssh(
        user.name,
        f"cd && salloc -p cpu -N1 -w {node} bash -c {q(script)}",
        check=False,
        identity=user.identity,
        timeout=180,
    )
    runs = re.findall(r"^mpi=(\d+)$", r.out, re.M)
    assert runs and runs[0] != "0", r
    assert "Slurmd could not connect IO" in r.err, r
    assert _in_worker(cluster, node, target) == "0:0 644\n" + PROBE
    assert runs == [runs[0], "0"], r
    assert r.out.split()[-1] == "written", r
    if where == "home":
        assert r.out.split()[-2] == user.name, r


def test_a_populate_overwrite_never_walks_into_what_users_can_write(cluster: DockerCluster) -> None:
    """`jail.populate.overwrite` copies the image over a live jail, as root, and deletes what the image
    lacks. In a directory users can write (/var/tmp) that meant deleting their files by path, while a user
    could swap a directory for a link and have root delete through it. Now it never walks into such a
    directory: what a user made there stays, links included, and their targets are untouched."""
    vol = f"{cluster.prefix}-populate-{uuid.uuid4().hex[:6]}"
    cluster.create_volume(vol)
    cluster.run_populate(vol)
    cluster.volume_sh(
        vol,
        "mkdir -p /v/var/tmp/work/sub && echo data > /v/var/tmp/work/sub/f && ln -s /etc /v/var/tmp/work/etc "
        "&& chown -hR 10000:10000 /v/var/tmp/work",
    )
    before = cluster.volume_sh(vol, "stat -c '%u:%g %a' /v/etc; ls /v/etc | wc -l").out
    again = cluster.run_populate(vol, overwrite=True)
    assert "leaving alone what users can write in:" in again.logs and " /var/tmp" in again.logs, again.logs
    after = cluster.volume_sh(
        vol, "cat /v/var/tmp/work/sub/f; readlink /v/var/tmp/work/etc; stat -c %u /v/var/tmp/work"
    )
    assert after.out.split() == ["data", "/etc", "10000"], after
    assert cluster.volume_sh(vol, "stat -c '%u:%g %a' /v/etc; ls /v/etc | wc -l").out == before


def _gone_from_the_worker(cluster: DockerCluster, node: str, job: str) -> None:
    """The job's tmpfs is unmounted and its directory removed (the job epilog runs after the job ends)."""
    look = f"grep -c ' /run/warden/jobs/{job} ' /proc/self/mounts; ls -d /run/warden/jobs/{job} 2>&1"
    eventually(
        f"job {job}'s space gone from {node}",
        lambda: cluster.exec(node, look, check=False).out,
        lambda out: out.split()[0] == "0" and "No such file" in out,
        timeout=60,
    )


@pytest.mark.parametrize("where", ["/tmp", "/dev/shm"])
def test_sbcast_and_mpi_files_land_where_the_job_sees_them_or_are_refused(
    cluster: DockerCluster, user: JailUser, where: str
) -> None:
    """sbcast's file and an MPI step's per-task files are opened in the worker container, not in the jail.
    /tmp and /dev/shm are each job's own (perJob): while slurmstepd opens an MPI step's files it sees the
    job's directories over the container's, so the step's per-task files and its working directory are in
    the job's space, a later step of the job reads them there, and they go with the job. sbcast (slurmd: no
    plugin hook moves it) is refused there: the container's own directory is root's, and holds nothing of
    the job."""
    node = cluster.worker_pods("cpu")[0]
    tag = uuid.uuid4().hex[:8]
    name, wd = f"{where}/bc-{tag}", f"{where}/wd-{tag}"
    user.ssh("echo payload > ~/payload")
    script = (
        f"echo job=$SLURM_JOB_ID; sbcast -f ~/payload {name}; echo sbcast=$?; srun -n1 mkdir {wd}; "
        f"srun -n2 --mpi=pmi2 --chdir={wd} -o out-%t pwd; echo mpi=$?; srun -n1 cat {wd}/out-0 {wd}/out-1"
    )
    r = cluster.ssh(
        user.name,
        f"salloc -p cpu -N1 -n2 -w {node} bash -c {q(script)}",
        check=False,
        identity=user.identity,
        timeout=180,
    )
    job = re.findall(r"^job=(\d+)$", r.out, re.M)
    assert job, r
    refused = re.findall(r"^sbcast=(\d+)$", r.out, re.M)
    assert refused and refused[0] != "0" and "Permission denied" in r.err, r
    assert "mpi=0" in r.out.split(), r
    assert r.out.split()[-2:] == [wd, wd], r  # the tasks' output, read back by the job's next step
    kept = cluster.exec(node, f"ls -A {where}").out.split()
    assert f"bc-{tag}" not in kept and f"wd-{tag}" not in kept, kept  # nothing in the container's own
    _gone_from_the_worker(cluster, node, job[0])
    later = cluster.ssh(user.name, f"srun -p cpu -N1 -w {node} ls {wd} 2>&1; true", check=False, identity=user.identity)
    assert "No such file or directory" in later.out, later


def test_sbcast_and_mpi_files_reach_the_home_and_a_node_local_mount_every_job_shares(
    cluster: DockerCluster, user: JailUser
) -> None:
    """Where the jail shows the container's own directory at the same path, sbcast and an MPI step's per-task
    files work as they always did: the home, and a node-local mount without perJob (/scratch on group
    `plain`, tests/dataplane/spec.py); the job's steps read them there, and so does the user's next job."""
    node = cluster.worker_pods("plain")[0]
    tag = uuid.uuid4().hex[:8]
    user.ssh("echo payload > ~/payload")
    script = (
        f"sbcast -f ~/payload /scratch/bc-{tag} && sbcast -f ~/payload ~/bc-{tag} && "
        f"srun --mpi=pmi2 -o /scratch/mpi-{tag}-%t echo written && srun --mpi=pmi2 -o mpi-{tag}-%t echo home && "
        f"srun cat /scratch/bc-{tag} /scratch/mpi-{tag}-0 ~/bc-{tag} ~/mpi-{tag}-0"
    )
    r = cluster.ssh(
        user.name,
        f"cd && salloc -p plain -N1 -w {node} bash -c {q(script)}",
        check=False,
        identity=user.identity,
        timeout=180,
    )
    assert r.ok and r.out.split() == ["payload", "written", "payload", "home"], r
    later = user.ssh(f"srun -p plain -N1 -w {node} stat -c %U /scratch/bc-{tag} /scratch/mpi-{tag}-0")
    assert later.split() == [user.name, user.name], later
    user.ssh(f"srun -p plain -N1 -w {node} rm /scratch/bc-{tag} /scratch/mpi-{tag}-0")
