"""Tokens, identities, privacy and limits between the users of one cluster (docs/security.md, "Tokens,
identities and privacy" and "Login sessions have per-user limits"):

- `scontrol token` gives an ordinary user no token longer-lived than spec.security.maxTokenLifespanSeconds
  (default one day), refused with Slurm's own words; a shorter one works against slurmrestd, and root (Slurm's
  rule) and the operator's own minted tokens are not limited;
- a directory entry with a system uid (0, below 1000, or a Warden system user's, such as warden-reader's
  64999) is no user on the cluster, while a normal directory user is;
- a user does not see another user's processes (their command lines) on the login node nor in a job step
  on a worker; root does;
- a user whose SSH sessions go past spec.login.userLimits.memory has a process killed, alone: another user's
  session goes on;
- a user whose sessions fork past spec.login.userLimits.processes gets EAGAIN, alone: another user's session
  still starts processes.
"""

from __future__ import annotations

import shlex
import threading
import uuid

import pytest

from tests.support.directory import Directory
from tests.support.eventually import eventually
from tests.support.jailuser import JailUser
from warden import naming
from warden.slurm.rest import SlurmRest, mint_token
from warden_dev.dockercluster import DockerCluster, Exec

q = shlex.quote
TEN_YEARS = 10 * 365 * 86400
#: what slurmctld answers a lifespan past the limit (Slurm's ESLURM_INVALID_TIME_LIMIT)
SLURM_REFUSAL = "Requested time limit is invalid (missing or exceeds some limit)"


@pytest.fixture(scope="module")
def bob(cluster: DockerCluster) -> JailUser:
    return JailUser.added_by_root(cluster, f"bob{uuid.uuid4().hex[:4]}")


def _rest_url(cluster: DockerCluster) -> str:
    (pod,) = [p.name for p in cluster.pods.values() if p.component == "restapi"]
    return f"http://{cluster.ip(pod)}:{naming.RESTAPI_PORT}"


def _token(out: str) -> str:
    (line,) = [line for line in out.splitlines() if line.startswith("SLURM_JWT=")]
    return line.removeprefix("SLURM_JWT=")


def test_a_ten_year_token_is_refused_with_slurms_words_and_a_short_one_works(
    cluster: DockerCluster, alice: JailUser
) -> None:
    config = cluster.exec(cluster.names.controller_pod, "scontrol show config").out
    assert "max_token_lifespan=86400" in config, "not the default spec.security.maxTokenLifespanSeconds"
    long = cluster.ssh(alice.name, f"scontrol token lifespan={TEN_YEARS}", check=False, identity=alice.identity)
    assert long.rc != 0 and "SLURM_JWT=" not in long.out, long
    assert SLURM_REFUSAL in long.err, long
    # a lifespan within the limit: the token works against slurmrestd, as alice
    short = _token(alice.ssh("scontrol token lifespan=600"))
    SlurmRest(_rest_url(cluster), token=lambda: short, user=alice.name).jobs()
    # root is not limited (Slurm's rule for root and SlurmUser), nor are the tokens the operator mints with the key
    assert _token(cluster.ssh("root", f"scontrol token lifespan={TEN_YEARS}").out)
    key = cluster.secrets[cluster.names.jwt_key][naming.JWT_KEY].encode()
    minted = mint_token(key, "slurm", lifetime_s=2 * 86400)
    SlurmRest(_rest_url(cluster), token=lambda: minted, user="slurm").jobs()


def test_directory_entries_with_system_uids_are_no_users(cluster: DockerCluster, directory: Directory) -> None:
    tag = uuid.uuid4().hex[:4]
    normal = f"nora{tag}"
    # uid 0 (root), 500 (a system account's range), 64999 (warden-reader, the exporter's Slurm user)
    system = {f"zero{tag}": 0, f"low{tag}": 500, f"reader{tag}": naming.READER_UID}
    keys = {}
    for name, uid in [(normal, 70000 + int(uuid.uuid4().int % 900)), *system.items()]:
        identity, public = cluster.user_key(name)
        keys[name] = identity
        directory.add_user(name, uid, public)
    login = f"{cluster.names.login}-0"
    eventually(
        f"{normal} resolves on the login node",
        lambda: cluster.exec(login, f"getent passwd {normal}", check=False).out,
        lambda out: out.startswith(f"{normal}:"),
        timeout=60,
    )
    for pod in (login, cluster.names.controller_pod):
        for name in system:
            r = cluster.exec(pod, f"getent passwd {name}; getent group {name}", check=False)
            assert r.out == "", f"{pod}: {name} resolves: {r.out}"
        # the uid is the image's own system user's, or no one's
        reader = cluster.exec(pod, f"getent passwd {naming.READER_UID}", check=False).out
        assert reader == "" or reader.startswith(f"{naming.READER_USER}:"), f"{pod}: {reader}"
    # the person logs in; the entries with system uids do not, with the keys the directory holds for them
    r = cluster.ssh(normal, "id -un", check=False, identity=keys[normal])
    assert r.ok and r.out.strip() == normal, r
    for name in system:
        r = cluster.ssh(name, "id", check=False, identity=keys[name])
        assert not r.ok and "uid=" not in r.out, f"{name} logged in: {r}"


def _ps(who: Exec) -> list[str]:
    return who.out.splitlines()


def test_users_do_not_see_each_others_processes_on_the_login_node(
    cluster: DockerCluster, alice: JailUser, bob: JailUser
) -> None:
    secret = f"--secret-token={uuid.uuid4().hex}"
    alice.ssh(f"setsid -f bash -c {q(f'sleep 300; : {secret}')} </dev/null >/dev/null 2>&1")
    try:
        # root sees it (and so knows its pid); alice sees her own
        seen = eventually(
            "root sees alice's process",
            lambda: cluster.ssh("root", "ps -eo pid=,user:32=,args=").out,
            lambda out: secret in out,
        )
        ((pid, user),) = [line.split()[:2] for line in seen.splitlines() if secret in line]
        assert user == alice.name
        assert secret in alice.ssh("ps -eo args=")
        # bob does not: not in ps, and no /proc entry of it
        listing = bob.ssh("ps -eo user:32=,args=")
        assert secret not in listing and alice.name not in listing, listing
        assert {line.split()[0] for line in listing.splitlines()} == {bob.name}, listing
        r = cluster.ssh(bob.name, f"cat /proc/{pid}/cmdline", check=False, identity=bob.identity)
        assert not r.ok and secret not in r.out, r
    finally:
        alice.ssh(f"pkill -u {alice.name} -f -- {q(secret)}", check=False)


def test_users_do_not_see_each_others_processes_in_job_steps(
    cluster: DockerCluster, alice: JailUser, bob: JailUser
) -> None:
    node = cluster.ssh("root", "sinfo -h -p cpu -N -o %N").out.split()[0]
    secret = f"--secret-token={uuid.uuid4().hex}"
    step = f"-p cpu -w {node} -c 1 --mem=64M"
    script = q(f"bash -c {q(f'sleep 300; : {secret}')}")
    job = alice.ssh(f"sbatch --parsable {step} -o /dev/null --wrap {script}").strip().split(";")[0]
    try:
        eventually(
            f"root's step on {node} sees alice's job",
            lambda: cluster.ssh("root", f"srun {step} ps -eo user:32=,args=", check=False).out,
            lambda out: secret in out and alice.name in out,
            timeout=60,
        )
        listing = bob.ssh(f"srun {step} ps -eo user:32=,args=")
        assert secret not in listing and alice.name not in listing, listing
        assert {line.split()[0] for line in listing.splitlines()} == {bob.name}, listing
        assert secret in alice.ssh(f"srun {step} ps -eo args=")
    finally:
        alice.ssh(f"scancel {job}", check=False)


def test_a_user_past_the_login_memory_limit_is_killed_alone(
    cluster: DockerCluster, alice: JailUser, bob: JailUser
) -> None:
    tag = uuid.uuid4().hex[:6]
    started, done = f"/tmp/bob-started-{tag}", f"/tmp/alice-done-{tag}"
    # bob's session: open before alice goes past her limit, still answering after it
    result: dict[str, Exec] = {}

    def bobs_session() -> None:
        script = f"cat /proc/self/cgroup; touch {started}; until [ -e {done} ]; do sleep 0.2; done; echo bob-still-here"
        result["bob"] = cluster.ssh(bob.name, script, check=False, timeout=240, identity=bob.identity)

    thread = threading.Thread(target=bobs_session)
    thread.start()
    try:
        eventually("bob's session is open", lambda: cluster.ssh("root", f"ls {started}", check=False).out, bool)
        # 1 GiB held by one process (tail keeps a line without newlines whole), past alice's 384 MiB
        hog = "head -c 1G /dev/zero | tail >/dev/null; echo tail-status ${PIPESTATUS[1]}"
        out = alice.ssh(f"cat /proc/self/cgroup; {hog}")
        assert "tail-status 137" in out, out  # SIGKILL: the kernel's OOM killer, in alice's cgroup
        assert f"/warden-users/{alice.name}" in out, out
        # alice's next session works again
        assert alice.ssh("echo alive").strip() == "alive"
    finally:
        cluster.ssh("root", f"touch {done}", check=False)
        thread.join(timeout=240)
    bobs = result["bob"]
    assert bobs.ok and "bob-still-here" in bobs.out, bobs
    assert f"/warden-users/{bob.name}" in bobs.out, bobs
    # the limits the login pod's cgroups hold for alice: 384 MiB, one CPU (v1's files, or v2's)
    user = f"warden-users/{alice.name}"
    limits = cluster.exec(
        f"{cluster.names.login}-0",
        f"cat /sys/fs/cgroup/memory/{user}/memory.limit_in_bytes /sys/fs/cgroup/cpu/{user}/cpu.cfs_quota_us"
        f" 2>/dev/null || cat /sys/fs/cgroup/{user}/memory.max /sys/fs/cgroup/{user}/cpu.max",
    ).out.split()
    assert limits[:2] == [str(384 * 1024 * 1024), "100000"], limits


#: alice's fork bomb: children that wait until fork fails, then (holding them) a marker, until the test says done
_FORK_BOMB = """
import os, signal, sys, time
marker, done = sys.argv[1], sys.argv[2]
kids = []
try:
    while len(kids) < 5000:
        pid = os.fork()
        if pid == 0:
            time.sleep(300)
            os._exit(0)
        kids.append(pid)
    print("no-limit", len(kids), flush=True)
except OSError as e:
    print(f"fork-failed errno={e.errno} {e.strerror} after={len(kids)}", flush=True)
    open(marker, "w").close()
    deadline = time.monotonic() + 200
    while not os.path.exists(done) and time.monotonic() < deadline:
        time.sleep(0.2)
finally:
    for k in kids:
        os.kill(k, signal.SIGKILL)
    for k in kids:
        os.waitpid(k, 0)
"""


def test_a_fork_bomb_on_the_login_node_stops_at_the_users_process_limit(
    cluster: DockerCluster, alice: JailUser, bob: JailUser
) -> None:
    """spec.login.userLimits.processes (200 in the dataplane's spec): alice's session forks until the kernel
    says EAGAIN, short of 200 processes, and while she holds them all bob's session starts 100 processes of
    his own; alice's next session works once hers are gone."""
    tag = uuid.uuid4().hex[:6]
    full, done = f"/tmp/alice-full-{tag}", f"/tmp/alice-done-{tag}"
    result: dict[str, Exec] = {}

    def alices_bomb() -> None:
        command = f"python3 -c {q(_FORK_BOMB)} {full} {done}"
        result["alice"] = cluster.ssh(alice.name, command, check=False, timeout=300, identity=alice.identity)

    thread = threading.Thread(target=alices_bomb)
    thread.start()
    try:
        eventually(
            "alice's session is out of processes",
            lambda: cluster.ssh("root", f"ls {full}", check=False).out,
            bool,
            timeout=120,
        )
        bobs = bob.ssh("for i in $(seq 100); do sleep 3 & done; wait; echo bob-forked-100", timeout=120)
        assert bobs.strip().endswith("bob-forked-100"), bobs
    finally:
        cluster.ssh("root", f"touch {done}", check=False)
        thread.join(timeout=300)
    alices = result["alice"]
    assert "fork-failed errno=11 Resource temporarily unavailable" in alices.out, alices
    held = int(alices.out.rsplit("after=", 1)[1].split()[0])
    assert 100 < held < 200, alices  # her session's own processes (sshd's, bash, python) count too
    assert alice.ssh("echo alive").strip() == "alive"
    user = f"warden-users/{alice.name}"
    limit = cluster.exec(
        f"{cluster.names.login}-0",
        f"cat /sys/fs/cgroup/pids/{user}/pids.max 2>/dev/null || cat /sys/fs/cgroup/{user}/pids.max",
    ).out.strip()
    assert limit == "200", limit
