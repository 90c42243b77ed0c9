"""Slurm's REST API (slurmrestd, the `<cluster>-restapi` Deployment) with JSON Web Tokens, as a user
and as the operator use it.

A user gets a token with `scontrol token` on the login node (inside the jail: the client needs no
key and no auth/jwt plugin there, slurmctld signs the token) and calls `http://<cluster>-restapi:6820`
with `X-SLURM-USER-NAME` and `X-SLURM-USER-TOKEN`. slurmrestd checks nothing itself: it hands each
token on to slurmctld, which decides (facts of Slurm 24.11.5, checked here):

- no token (or a name without one): 401 from slurmrestd itself;
- a token slurmctld refuses (garbage, another key, another user's name): HTTP 511 "Protocol
  authentication error" on data requests, and `/ping` answers 200 with the controller "DOWN";
- a user's token reads the nodes but cannot change them (500 "Invalid user id"); a token for
  `slurm` (SlurmUser, an administrator) can; only root or slurm get one for another user.

The operator's client (`warden.slurm.rest`) signs its own tokens with the key of Secret
`<cluster>-jwt-key` and is checked against the real slurmrestd here: ping, nodes, jobs, drain, resume,
delete a dynamic node. The session's one cluster is used (no cluster of its own); every drain is
undone before the test ends.
"""

from __future__ import annotations

import json
import shlex
import time
import uuid
from collections.abc import Callable, Iterator, Mapping

import pytest

from tests.support.jailuser import JailUser
from warden import naming, tokens
from warden.render import secrets as render_secrets
from warden.slurm.model import SlurmNodeUnknown
from warden.slurm.rest import SlurmRest, SlurmRestError, mint_token
from warden_dev.dockercluster import DockerCluster, wait_for

API = f"/slurm/{naming.RESTAPI_VERSION}"

# slurmrestd's HTTP status for an update slurmctld refuses: 500 on Slurm 24.11, 422 on 26.05
REFUSED = (422, 500)


@pytest.fixture(scope="module")
def erin(cluster: DockerCluster) -> JailUser:
    """A plain jail user (no accounting admin level), made for this module."""
    return JailUser.added_by_root(cluster, f"erin{uuid.uuid4().hex[:4]}")


def _restapi_pod(cluster: DockerCluster) -> str:
    (pod,) = [p.name for p in cluster.pods.values() if p.component == "restapi"]
    return pod


def _token(run: Callable[[str], str], args: str = "") -> str:
    """`scontrol token` in a login session: prints SLURM_JWT=<token>."""
    out = run(f"scontrol token lifespan=600 {args}").strip()
    assert out.startswith("SLURM_JWT="), out
    return out.removeprefix("SLURM_JWT=")


def _curl(
    cluster: DockerCluster,
    run: Callable[[str], str],
    path: str,
    user: str | None = None,
    token: str | None = None,
    method: str = "GET",
    body: Mapping[str, object] | None = None,
) -> tuple[int, str]:
    """curl the REST API by its Service name from a login session: (HTTP status, body)."""
    argv = ["curl", "-sS", "-X", method, "-w", r"\nHTTP %{http_code}"]
    if user is not None:
        argv += ["-H", f"X-SLURM-USER-NAME: {user}"]
    if token is not None:
        argv += ["-H", f"X-SLURM-USER-TOKEN: {token}"]
    if body is not None:
        argv += ["-H", "Content-Type: application/json", "--data", json.dumps(body)]
    argv.append(f"http://{cluster.names.restapi}:{naming.RESTAPI_PORT}{API}{path}")
    out = run(shlex.join(argv))
    text, _, status = out.rpartition("\nHTTP ")
    return int(status.strip()), text


def _errors(text: str) -> list[str]:
    return [str(e.get("error")) for e in json.loads(text).get("errors", [])]


def _reasons(cluster: DockerCluster) -> dict[str, str]:
    """`sinfo -R` on the login node (root, inside the jail): node -> "reason|user"."""
    out = cluster.ssh("root", "sinfo -R -h -N -o '%N|%E|%u'").out
    return {n: rest for n, _, rest in (line.partition("|") for line in out.splitlines() if line)}


@pytest.fixture
def worker(cluster: DockerCluster) -> Iterator[str]:
    """A CPU worker node, idle again (not drained) after the test whatever it did."""
    node = cluster.worker_pods("cpu")[-1]
    yield node
    ctl = cluster.names.controller_pod
    if node in _reasons(cluster):
        cluster.exec(ctl, f"scontrol update nodename={node} state=resume")


def test_restapi_runs_as_rendered_nobody_read_only_no_capabilities(cluster: DockerCluster) -> None:
    pod = _restapi_pod(cluster)
    out = cluster.exec(pod, "id -u; id -g; grep -E '^(CapBnd|CapEff|NoNewPrivs):' /proc/1/status; cat /proc/1/cmdline")
    lines = out.out.splitlines()
    assert lines[:2] == ["65534", "65534"], out
    assert "CapBnd:\t0000000000000000" in lines and "CapEff:\t0000000000000000" in lines, out
    assert "NoNewPrivs:\t1" in lines, out
    assert lines[-1].split("\0")[0] == "slurmrestd", out
    denied = cluster.exec(pod, "touch /tmp/x", check=False)
    assert not denied.ok and "Read-only file system" in denied.err, denied
    # no key of any kind: the token of each request is all it acts on
    keys = cluster.exec(pod, "ls /etc/slurm /etc/warden; ls /etc/warden/* 2>&1", check=False).out
    assert "slurm.key" not in keys and "jwt" not in keys, keys


def test_the_jwt_key_is_the_controllers_alone(cluster: DockerCluster, alice: JailUser) -> None:
    """slurmctld's copy is SlurmUser's, 0600, the Secret's bytes; the jail's client config has none."""
    ctl = cluster.names.controller_pod
    key = cluster.secrets[cluster.names.jwt_key][naming.JWT_KEY]
    assert cluster.exec(ctl, "stat -c '%U %G %a' /etc/slurm/jwt_hs256.key").out.split() == ["slurm", "slurm", "600"]
    assert cluster.exec(ctl, "cat /etc/slurm/jwt_hs256.key").out == key
    login = f"{cluster.names.login}-0"
    assert "slurm.conf" in cluster.exec(login, "ls /mnt/jail/etc/slurm").out.split()
    assert "jwt" not in cluster.exec(login, "ls /mnt/jail/etc/slurm /etc/slurm").out
    assert "jwt" not in alice.ssh("ls /etc/slurm")


def test_a_user_gets_a_token_on_the_login_node_and_lists_the_nodes(cluster: DockerCluster, erin: JailUser) -> None:
    """What the docs tell users: `scontrol token`, then curl with their name and the token."""
    token = _token(erin.ssh)
    status, text = _curl(cluster, erin.ssh, "/nodes", user=erin.name, token=token)
    assert status == 200, text
    doc = json.loads(text)
    workers = sorted(cluster.worker_pods("cpu") + cluster.worker_pods("gpu") + cluster.worker_pods("plain"))
    assert sorted(n["name"] for n in doc["nodes"]) == workers, text
    assert all("IDLE" in n["state"] for n in doc["nodes"]), [(n["name"], n["state"]) for n in doc["nodes"]]
    # root gets one too, and the name header is optional: the token's own user is taken
    as_root: Callable[[str], str] = lambda script: cluster.ssh("root", script).out  # noqa: E731
    status, text = _curl(cluster, as_root, "/ping", token=_token(as_root))
    assert status == 200 and json.loads(text)["pings"][0]["pinged"] == "UP", text


def test_no_or_a_bad_token_gets_nothing(cluster: DockerCluster, erin: JailUser) -> None:
    status, text = _curl(cluster, erin.ssh, "/nodes")
    assert (status, text.strip()) == (401, "Authentication failure")
    status, text = _curl(cluster, erin.ssh, "/nodes", user=erin.name)
    assert status == 401, text
    # a well-formed token signed with another key: slurmctld refuses it, slurmrestd says so
    forged = mint_token(b"0" * 64, erin.name)
    status, text = _curl(cluster, erin.ssh, "/nodes", user=erin.name, token=forged)
    assert status == 511 and _errors(text) == ["Protocol authentication error"], text
    assert json.loads(text).get("nodes", []) == []
    # ping answers 200 either way; slurmctld refused the request, so the controller shows "DOWN"
    status, text = _curl(cluster, erin.ssh, "/ping", user=erin.name, token="not-a-token")
    assert status == 200 and json.loads(text)["pings"][0]["pinged"] == "DOWN", text


def test_a_users_token_acts_for_that_user_only(cluster: DockerCluster, erin: JailUser) -> None:
    token = _token(erin.ssh)
    status, text = _curl(cluster, erin.ssh, "/nodes", user="slurm", token=token)
    assert status == 511 and _errors(text) == ["Protocol authentication error"], text
    refused = erin.ssh("scontrol token username=slurm 2>&1 || true")
    assert "SLURM_JWT=" not in refused and "Invalid user id" in refused, refused


def test_a_user_cannot_drain_a_node_slurm_can(cluster: DockerCluster, erin: JailUser, worker: str) -> None:
    reason = f"rest-{uuid.uuid4().hex[:6]}"
    drain = {"state": ["DRAIN"], "reason": reason}
    status, text = _curl(cluster, erin.ssh, f"/node/{worker}", erin.name, _token(erin.ssh), "POST", drain)
    assert status in REFUSED and _errors(text) == ["Invalid user id"], text
    assert worker not in _reasons(cluster)

    # root on the login node may get a token for slurm (SlurmUser: a Slurm administrator)
    admin = _token(lambda s: cluster.ssh("root", s).out, "username=slurm")
    status, text = _curl(cluster, erin.ssh, f"/node/{worker}", "slurm", admin, "POST", drain)
    assert status == 200 and _errors(text) == [], text
    assert _reasons(cluster).get(worker) == f"{reason}|slurm"
    status, text = _curl(cluster, erin.ssh, f"/node/{worker}", "slurm", admin, "POST", {"state": ["RESUME"]})
    assert status == 200, text
    assert worker not in _reasons(cluster)


# --- the operator's client --------------------------------------------------------------------


@pytest.fixture(scope="module")
def rest(cluster: DockerCluster) -> SlurmRest:
    """The operator's client as the operator builds it: tokens for `slurm` minted from the Secret."""
    url = f"http://{cluster.ip(_restapi_pod(cluster))}:{naming.RESTAPI_PORT}"
    return SlurmRest(url, token=lambda: mint_token(_key(cluster), "slurm", lifetime_s=60))


def _key(cluster: DockerCluster) -> bytes:
    """The key of Secret <cluster>-jwt-key as it is now (a test below rotates it)."""
    return cluster.secrets[cluster.names.jwt_key][naming.JWT_KEY].encode()


def test_client_pings_and_lists_the_worker_nodes(cluster: DockerCluster, rest: SlurmRest) -> None:
    rest.ping()
    # (a job of an earlier test may still be completing; a node resumed a moment ago is NOT_RESPONDING
    # until its slurmd answers the next ping)
    wait_for("every worker idle", lambda: all(n.state == "IDLE" and not n.down for n in rest.nodes()), 60)
    nodes = {n.name: n for n in rest.nodes()}
    gpu = cluster.worker_pods("gpu")
    assert sorted(nodes) == sorted(cluster.worker_pods("cpu") + gpu + cluster.worker_pods("plain"))
    for node in nodes.values():
        assert node.state == "IDLE" and not node.drained and not node.down, node
    assert [nodes[g].gpus for g in gpu] == [2] * len(gpu)
    assert all("cpu" in nodes[w].partitions for w in cluster.worker_pods("cpu"))


def test_client_lists_a_running_job_with_its_node_and_end(
    cluster: DockerCluster, rest: SlurmRest, erin: JailUser
) -> None:
    """A user's 2-minute job: the operator's client sees it RUNNING on the node squeue names, ending
    at its start plus its time limit."""
    submitted = time.time()
    job = int(erin.ssh("cd && sbatch -p cpu -t 2 --parsable --wrap 'sleep 30'").strip())
    try:
        wait_for(f"job {job} running",
                 lambda: any(j.id == job and j.state == "RUNNING" for j in rest.jobs()), 60)  # fmt: skip
        running = time.time()
        (listed,) = [j for j in rest.jobs() if j.id == job]
        node = erin.ssh(f"squeue -h -j {job} -o %N").strip()
        assert listed.nodes == (node,) and node in cluster.worker_pods("cpu"), (listed, node)
        assert listed.end_time is not None, listed
        # Slurm counts in whole seconds; the clocks are the host's
        assert submitted + 120 - 5 <= listed.end_time <= running + 120 + 5, (listed, submitted, running)
    finally:
        erin.ssh(f"scancel {job}", check=False)


def test_client_drains_and_resumes_a_node(cluster: DockerCluster, rest: SlurmRest, worker: str) -> None:
    reason = f"warden: rest client test {uuid.uuid4().hex[:6]}"
    rest.drain(worker, reason)
    assert _reasons(cluster).get(worker) == f"{reason}|slurm"
    (node,) = [n for n in rest.nodes() if n.name == worker]
    assert node.drained and node.held_reason == reason, node
    rest.resume(worker)
    assert worker not in _reasons(cluster)
    wait_for(f"{worker} idle again",
             lambda: any(n.name == worker and not n.drained and not n.down for n in rest.nodes()), 30)  # fmt: skip


def test_client_deletes_a_dynamic_node(cluster: DockerCluster, rest: SlurmRest) -> None:
    name = f"gone-{uuid.uuid4().hex[:6]}"
    ctl = cluster.names.controller_pod
    cluster.exec(ctl, f"scontrol create NodeName={name} CPUs=1 State=FUTURE")
    # a FUTURE node in no partition: only `scontrol --future` shows it
    show = f"scontrol --future show node {name}"
    assert f"NodeName={name} " in cluster.exec(ctl, show).out
    rest.delete_node(name)
    gone = cluster.exec(ctl, show, check=False)
    assert not gone.ok and f"Node {name} not found" in gone.out + gone.err, gone
    rest.delete_node(name)  # already gone: nothing to do


def test_client_makes_changes_and_deletes_a_maintenance_reservation_that_holds_jobs_off(
    cluster: DockerCluster, rest: SlurmRest, erin: JailUser
) -> None:
    """What a maintenance window's reservation does (warden.workers.maintenance), through the operator's client:
    made over both workers from a start a few minutes ahead, read back as made; a job that would run into it
    waits ("Reserved for maintenance") while a short one runs; moved later, the held job still waits; deleted,
    it runs."""
    workers = cluster.worker_pods("cpu")
    name = f"warden-maintenance-test-{uuid.uuid4().hex[:6]}"
    start = int(time.time()) + 300
    job = ""
    try:
        rest.put_reservation(name, start, 30, workers, ("MAINT", "IGNORE_JOBS"), ["root"])
        (made,) = [r for r in rest.reservations() if r.name == name]
        assert (made.start, made.minutes, sorted(made.nodes)) == (start, 30, sorted(workers)), made
        assert {"MAINT", "IGNORE_JOBS"} <= made.flags, made
        short = erin.ssh("sbatch --parsable -t 1 --wrap true").strip()
        job = erin.ssh("sbatch --parsable -t 20 --wrap true").strip()
        wait_for(f"job {short} completed", lambda: erin.ssh(f"sacct -n -X -j {short} -o State").strip() == "COMPLETED",
                 90)  # fmt: skip

        def held() -> str:
            return erin.ssh(f"squeue -h -j {job} -o '%T %r'").strip()

        wait_for(f"job {job} held off by the reservation", lambda: "Reserved for maintenance" in held(), 60)
        assert held().startswith("PENDING"), held()

        rest.put_reservation(name, start + 600, 45, workers, ("MAINT", "IGNORE_JOBS"), ["root"])
        (moved,) = [r for r in rest.reservations() if r.name == name]
        assert (moved.start, moved.minutes) == (start + 600, 45), moved
        rest.delete_reservation(name)
        assert name not in [r.name for r in rest.reservations()]
        rest.delete_reservation(name)  # already gone: nothing to do
        wait_for(f"job {job} ran once the reservation went",
                 lambda: erin.ssh(f"sacct -n -X -j {job} -o State").strip() == "COMPLETED", 90)  # fmt: skip
    finally:
        cluster.exec(cluster.names.controller_pod, f"scontrol delete reservation {name}", check=False)
        if job:
            erin.ssh(f"scancel {job}", check=False)


def test_client_tells_unknown_nodes_and_refusals_apart(cluster: DockerCluster, rest: SlurmRest, erin: JailUser) -> None:
    with pytest.raises(SlurmNodeUnknown):
        rest.drain("no-such-node", "x")
    key = cluster.secrets[cluster.names.jwt_key][naming.JWT_KEY].encode()
    as_erin = SlurmRest(rest.base_url, token=lambda: mint_token(key, erin.name), user=erin.name)
    assert len(as_erin.nodes()) == len(rest.nodes())  # a user may look
    worker = cluster.worker_pods("cpu")[0]
    with pytest.raises(SlurmRestError) as denied:
        as_erin.drain(worker, "not allowed")
    assert denied.value.status in REFUSED and "Invalid user id" in str(denied.value), denied.value
    assert worker not in _reasons(cluster)
    forged = SlurmRest(rest.base_url, token=lambda: mint_token(b"0" * 64, "slurm"))
    with pytest.raises(SlurmRestError) as refused:
        forged.nodes()
    assert refused.value.status == 511 and "Protocol authentication error" in str(refused.value), refused.value


# --- the exporter's token, and rotating the key -----------------------------------------------


def _reader_token(cluster: DockerCluster) -> str:
    """The exporter's token, as the operator writes it into Secret <cluster>-exporter-token."""
    return cluster.secrets[cluster.names.token("exporter")][naming.TOKEN_KEY]


def _running(erin: JailUser, job: int) -> bool:
    return erin.ssh(f"squeue -h -j {job} -o %T").strip() == "RUNNING"


def _gate(cluster: DockerCluster, token: str) -> SlurmRest:
    """The exporter's client as the exporter builds it: through its read gate, as warden-reader."""
    (pod,) = [p.name for p in cluster.pods.values() if p.component == "read-gate"]
    url = f"http://{cluster.ip(pod)}:{naming.READ_GATE_PORT}"
    return SlurmRest(url, token=lambda: token, user=naming.READER_USER)


def test_the_exporters_token_reads_slurm_and_can_neither_submit_nor_cancel(
    cluster: DockerCluster, erin: JailUser
) -> None:
    """The exporter holds a token for warden-reader, not the key. Straight to slurmrestd it reads what any
    user may: the nodes, not erin's job (privateData: jobs); Slurm refuses its submission (job_submit.lua)
    and its cancelling of erin's job. Through its read gate the same token reads every job."""
    reader, token = naming.READER_USER, _reader_token(cluster)
    status, text = _curl(cluster, erin.ssh, "/nodes", reader, token)
    assert status == 200 and json.loads(text)["nodes"], text
    job = int(erin.ssh("cd && sbatch -p cpu -t 2 --parsable --wrap 'sleep 120'").strip())
    try:
        wait_for(f"job {job} running", lambda: _running(erin, job), 60)
        status, text = _curl(cluster, erin.ssh, "/jobs", reader, token)
        assert status == 200 and job not in [j["job_id"] for j in json.loads(text)["jobs"]], text
        assert job in [j.id for j in _gate(cluster, token).jobs()]
        submit = {
            "script": "#!/bin/bash\ntrue\n",
            "job": {"name": "reader", "partition": "cpu", "current_working_directory": "/tmp",
                    "environment": ["PATH=/usr/bin:/bin"]},
        }  # fmt: skip
        status, text = _curl(cluster, erin.ssh, "/job/submit", reader, token, "POST", submit)
        assert status != 200 and "Access/permission denied" in _errors(text), (status, text)
        # refused per job, in the answer's "status" (HTTP 200 on Slurm 26.05)
        status, text = _curl(cluster, erin.ssh, f"/job/{job}", reader, token, "DELETE")
        said = [str((s.get("error") or {}).get("string")) for s in json.loads(text).get("status") or []]
        assert status != 200 or _errors(text) or said == ["Access/permission denied"], (status, text)
        assert _running(erin, job), "the reader's DELETE ended erin's job"
        # the gate holds SlurmUser's token, yet passes on nothing but the four reads, and only for the exporter
        with pytest.raises(SlurmRestError, match="HTTP 401"):
            _gate(cluster, _token(erin.ssh)).jobs()
        (gate,) = [p.name for p in cluster.pods.values() if p.component == "read-gate"]
        url = f"http://{cluster.ip(gate)}:{naming.READ_GATE_PORT}{API}/job/{job}"
        argv = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "DELETE",
                "-H", f"X-SLURM-USER-TOKEN: {token}", url]  # fmt: skip
        denied = erin.ssh(shlex.join(argv))
        assert denied.strip() == "405", denied
        assert _running(erin, job)
    finally:
        erin.ssh(f"scancel {job}", check=False)


def test_a_rotated_key_ends_old_tokens_and_nothing_else(
    cluster: DockerCluster, erin: JailUser, rest: SlurmRest
) -> None:
    """Rotating the JWT key (docs/operations.md): the Secret gets a new key; the controller installs it and
    reconfigures slurmctld in place; tokens of the old key are refused from then on, a running job goes
    on, users get working tokens again, and the exporter's new token (written by the operator's next
    Slurm sync round: tests/integration/test_slurmsync.py) reads every job through its gate again."""
    job = int(erin.ssh("cd && sbatch -p cpu -t 2 --parsable --wrap 'sleep 60'").strip())
    wait_for(f"job {job} running", lambda: _running(erin, job), 60)
    old_user_token, old_reader_token = _token(erin.ssh), _reader_token(cluster)
    new_key = render_secrets.jwt_key()
    cluster.update_secret(cluster.names.jwt_key, new_key)
    wait_for("slurmctld to refuse tokens of the old key",
             lambda: _curl(cluster, erin.ssh, "/nodes", erin.name, old_user_token)[0] == 511, 90)  # fmt: skip
    assert _curl(cluster, erin.ssh, "/nodes", naming.READER_USER, old_reader_token)[0] == 511
    status, text = _curl(cluster, erin.ssh, "/nodes", erin.name, _token(erin.ssh))
    assert status == 200, text
    # the operator's next sync round writes both tokens anew (tests/integration/test_slurmsync.py)
    for purpose in (tokens.EXPORTER, tokens.READ_GATE):
        token = tokens.mint(new_key[naming.JWT_KEY].encode(), purpose)
        cluster.update_secret(cluster.names.token(purpose.component), {naming.TOKEN_KEY: token})
    reader_token = _reader_token(cluster)
    status, text = _curl(cluster, erin.ssh, "/nodes", naming.READER_USER, reader_token)
    assert status == 200, text
    assert job in [j.id for j in _gate(cluster, reader_token).jobs()]  # the exporter's reads, as before
    rest.ping()  # the operator's client, with tokens of the new key
    assert _running(erin, job), erin.ssh(f"sacct -j {job} -o state -n 2>&1 || true")
    assert erin.ssh("cd && srun -p cpu -t 1 echo after-rotation").strip() == "after-rotation"
    erin.ssh(f"scancel {job}", check=False)
