"""Backup controllers (spec.controller.replicas: 2): Slurm keeps scheduling through what Kubernetes cannot
see, and through what it can. Real Slurm, a cluster of its own, in the order an operator meets it:

(a) slurmctld in charge hangs (SIGSTOP) inside a container that still runs: the backup takes control
    once it has not answered for takeoverSeconds, users submit again, a running job finishes; the hung
    slurmctld is fenced (killed, never resumed with the queue it held) and, started again by its
    container's restart policy, stands by (no take-back): SIGCONT finds nothing to resume, one
    controller is in charge and the queue is intact;
(b) the pod in charge is deleted (SIGTERM, as the kubelet sends): the other takes control at once (a
    handover, or the standing-by primary seeing it stop), users submit while it is gone, and it
    stands by when it returns;
(c) the controllers replaced one after the other, as a rolling update of their image does (the last
    first): a user submitting every second never sees an sbatch fail.

The dataplane runs no kubelet: containers start again when they exit (`restart_containers`), as the
kubelet restarts them, and a pod's deletion (SIGTERM to the container's first process) followed by its
StatefulSet making it again is that SIGTERM and the restart. (`docker stop` would also take the name
off Docker's DNS, whose failed lookups Slurm retries for a minute, where a cluster DNS says at once that
the name does not exist.)
"""

from __future__ import annotations

import shlex
import threading
import time
import uuid
from collections.abc import Iterator
from functools import partial

import pytest

from tests.support.eventually import eventually
from tests.support.jailuser import JailUser
from warden import naming
from warden_dev.dockercluster import DockerCluster, docker, running

TAKEOVER_S = 10
SPEC = {
    "controller": {"replicas": 2, "takeoverSeconds": TAKEOVER_S},
    "login": {"replicas": 1},
    "workerGroups": [{"name": "cpu", "replicas": 1, "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}],
}
HEALTH = "/usr/lib/warden/warden-slurmctld-health"
#: a user's wait for one sbatch: Slurm's MessageTimeout (10 s) against a hung controller, and the
#: standby backoff (takeoverSeconds / 2) while control moves
SBATCH_S = 40


@pytest.fixture(scope="module")
def ha() -> Iterator[DockerCluster]:
    with running(DockerCluster(SPEC, name="ha", restart_containers=True, names_fail_fast=True)) as c:
        yield c


@pytest.fixture(scope="module")
def user(ha: DockerCluster) -> JailUser:
    return JailUser.added_by_root(ha, f"ha{uuid.uuid4().hex[:4]}")


def _pods(c: DockerCluster) -> tuple[str, str]:
    primary, backup = c.names.controller_pods(2)
    return primary, backup


def _running(c: DockerCluster, pod: str) -> bool:
    r = docker("inspect", "-f", "{{.State.Running}}", c.container(pod), check=False)
    return r.stdout.strip() == "true"


def writer(c: DockerCluster) -> str:
    """The index of the slurmctld writing the shared heartbeat file (the one in charge), read from a
    controller container that runs."""
    pod = next(p for p in _pods(c) if _running(c, p))
    beat = f"od -An -v -tu8 --endian=big -N16 {naming.STATE_SAVE_LOCATION}/heartbeat; date +%s"
    words = c.exec(pod, beat, check=False).out.split()
    # a beat older than takeoverSeconds names nobody (a backup that stopped in charge dates its last back)
    fresh = len(words) == 3 and int(words[2]) - int(words[0]) <= TAKEOVER_S
    return words[1] if fresh else ""


def served(c: DockerCluster, pod: str) -> str:
    """Who is in charge as controller pod ``pod`` tells the operator (its GET /in-charge, warden.ha.ctld): the
    pod's name, "None" when nobody is, or what went wrong."""
    code = (
        "import json, os, urllib.request as u; "
        "url = 'http://127.0.0.1:%s/in-charge' % os.environ['WARDEN_IN_CHARGE_PORT']; "
        "print(json.load(u.urlopen(url, timeout=5))['inCharge'])"
    )
    r = c.exec(pod, f"/opt/warden/bin/python -I -c {shlex.quote(code)}", check=False)
    return (r.out or r.err).strip()


def _probe(c: DockerCluster, pod: str) -> str:
    """The controller's own probe, as the kubelet runs it (the pod's environment)."""
    r = c.exec(pod, f"{HEALTH} 8 && echo HEALTHY", check=False, timeout=40)
    return r.out + r.err


def _submit(user: JailUser, what: str = "true") -> str:
    """One sbatch as the user, from the login node: the job id, or what went wrong."""
    out = user.ssh(f"sbatch --parsable --wrap '{what}' 2>&1 || echo FAILED", check=False, timeout=SBATCH_S + 30)
    return out.strip()


def _accepted(out: str) -> bool:
    return out.isdigit()


def _job_state(user: JailUser, job: str) -> str:
    """The job's state as its user sees it (`scontrol show job` on the login node)."""
    out = user.ssh(f"scontrol -o show job {job} 2>&1", check=False, timeout=SBATCH_S + 30)
    fields = dict(w.split("=", 1) for w in out.split() if "=" in w)
    if "JobState" not in fields:
        return out
    state = fields["JobState"]
    return state if state in ("RUNNING", "COMPLETED") else f"{state} (Reason={fields.get('Reason', '')})"


def _long_job(c: DockerCluster, user: JailUser, seconds: int) -> str:
    """A job of the user's, running, and saved as running in the state the controllers share (Slurm
    writes its state a few seconds after a change: a controller that hangs before that loses it)."""
    job = _submit(user, f"sleep {seconds}; echo finished")
    assert _accepted(job), job
    eventually(f"job {job} running", lambda: _job_state(user, job), lambda s: s == "RUNNING", timeout=60)
    pod = next(p for p in _pods(c) if _running(c, p))
    since = float(c.exec(pod, "date +%s.%N").out)
    user.ssh(f"scontrol update jobid={job} comment=running")  # a change: saved within seconds
    # (no job_state yet on a new cluster: slurmctld writes it a few seconds after the first change)
    saved = f"stat -c %.9Y {naming.STATE_SAVE_LOCATION}/job_state 2>/dev/null || echo 0"
    eventually("the running job saved", lambda: c.exec(pod, saved).out.strip(), lambda m: float(m) > since, 30)
    return job


def _replace(c: DockerCluster, pod: str) -> None:
    """The pod deleted and made again (see the module's docstring); returns once its container runs again."""
    before = docker("inspect", "-f", "{{.RestartCount}}", c.container(pod)).stdout.strip()
    c.exec(pod, "kill -TERM 1")

    def restarted() -> str:
        r = docker("inspect", "-f", "{{.RestartCount}} {{.State.Running}}", c.container(pod), check=False)
        return r.stdout.strip()

    # (Docker waits longer before each restart of a container that keeps stopping young)
    eventually(f"{pod} made again", restarted, lambda out: out != f"{before} true" and out.endswith("true"), 150)


def _one_in_charge(c: DockerCluster) -> tuple[str, str]:
    """(the pod in charge, the other), once one writes the heartbeat and the other stands by healthy."""
    pods = _pods(c)
    w = eventually("a controller in charge", lambda: writer(c), lambda w: w in ("0", "1"), timeout=120)
    boss, other = pods[int(w)], pods[1 - int(w)]
    eventually(f"{boss} answers its probe", lambda: _probe(c, boss), lambda o: "HEALTHY" in o, timeout=60)
    eventually(f"{other} stands by", lambda: _probe(c, other), lambda o: "HEALTHY" in o, timeout=120)
    # what the operator relays: each pod serves the heartbeat's verdict, the one standing by too
    for pod in pods:
        eventually(f"{pod} says {boss} is in charge", partial(served, c, pod), lambda s: s == boss, timeout=30)
    return boss, other


def test_the_backup_stands_by_and_answers_its_probe(ha: DockerCluster, user: JailUser) -> None:
    primary, backup = _pods(ha)
    pings = user.ssh("scontrol ping")
    assert f"at {primary} is UP" in pings and f"at {backup} is UP" in pings, pings
    assert _one_in_charge(ha) == (primary, backup)
    standby = ha.exec(backup, "SLURM_CONF=/run/warden/ctld-self/slurm.conf scontrol show job 1 2>&1", check=False)
    assert "standby mode" in standby.out + standby.err


def test_a_hung_controller_is_replaced_by_its_backup_and_fenced(ha: DockerCluster, user: JailUser) -> None:
    primary, backup = _pods(ha)
    job = _long_job(ha, user, 40)
    pid = ha.exec(primary, "pgrep -of '^slurmctld '").out.strip()  # a reconfigured one is /proc/self/exe
    ha.exec(primary, f"kill -STOP {pid}")
    t0 = time.monotonic()
    # users submit again, through the backup
    accepted = eventually(
        "a user's sbatch accepted while the primary hangs", lambda: _submit(user), _accepted, timeout=180
    )
    took = time.monotonic() - t0
    assert "taking over" in ha.logs(backup, tail=400)
    # the hung slurmctld was killed, not left to resume with the queue it held
    eventually(
        "the hung slurmctld fenced",
        lambda: ha.logs(primary, tail=400),
        lambda out: "fence: slurmctld 1 took control from this one" in out,
        timeout=30,
    )
    ha.exec(primary, f"kill -CONT {pid} 2>/dev/null; true", check=False)
    # one controller in charge, the backup; the primary, started again, stands by
    assert _one_in_charge(ha) == (backup, primary)
    assert "standing by until it stops" in ha.logs(primary, tail=100)
    # the queue is intact: the job the backup accepted and the job that ran through it both finish
    for j in (accepted, job):
        eventually(f"job {j} completed", partial(_job_state, user, j), lambda s: s == "COMPLETED", timeout=120)
    print(f"hung controller: first sbatch accepted after {took:.1f} s (takeoverSeconds {TAKEOVER_S})")


def test_b_the_deleted_pod_in_charge_is_replaced_at_once(ha: DockerCluster, user: JailUser) -> None:
    boss, other = _one_in_charge(ha)
    job = _long_job(ha, user, 30)
    t0 = time.monotonic()
    _replace(ha, boss)
    accepted = eventually("a user's sbatch accepted once the pod in charge is gone", lambda: _submit(user), _accepted)
    took = time.monotonic() - t0
    # the other took control and the one made again stands by
    assert _one_in_charge(ha) == (other, boss)
    logs = ha.logs(boss, tail=200)
    assert "took control" in logs or "slurmctld exited" in logs, logs
    for j in (accepted, job):
        eventually(f"job {j} completed", partial(_job_state, user, j), lambda s: s == "COMPLETED", timeout=120)
    print(f"deleted {boss} in charge: first sbatch accepted after {took:.1f} s")


def test_c_replacing_both_controllers_in_turn_fails_no_sbatch(ha: DockerCluster, user: JailUser) -> None:
    primary, backup = _pods(ha)
    _one_in_charge(ha)
    job = _long_job(ha, user, 75)
    results: list[str] = []
    done = threading.Event()

    def submit_every_second() -> None:
        while not done.is_set():
            results.append(_submit(user))
            time.sleep(1)

    loop = threading.Thread(target=submit_every_second, daemon=True)
    loop.start()
    try:
        eventually("the loop's first sbatch", lambda: str(len(results)), lambda n: int(n) > 0, timeout=60)
        for pod in (backup, primary):  # as a StatefulSet's rolling update: the last pod first
            _replace(ha, pod)
            eventually(f"{pod} answers its probe", partial(_probe, ha, pod), lambda o: "HEALTHY" in o, 120)
        _one_in_charge(ha)
        n = len(results)
        eventually("more sbatches after the replacements", lambda: str(len(results)), lambda m: int(m) > n + 2, 60)
    finally:
        done.set()
        loop.join(timeout=SBATCH_S + 60)
    failed = [r for r in results if not _accepted(r)]
    assert not failed, f"{len(failed)} of {len(results)} sbatches failed: {failed[:3]}"
    eventually(f"job {job} completed", lambda: _job_state(user, job), lambda s: s == "COMPLETED", timeout=180)


def test_d_a_config_change_reaches_both_controllers_and_survives_a_handover(ha: DockerCluster, user: JailUser) -> None:
    boss, other = _one_in_charge(ha)
    files = dict(ha.manifest("ConfigMap", ha.names.slurm_config)["data"])
    files["slurm.conf"] += "MessageTimeout=17\n"
    assert set(_pods(ha)) <= set(ha.update_configmap(ha.names.slurm_config, files))

    def message_timeout() -> str:
        out = user.ssh("scontrol show config | grep -i '^MessageTimeout'", check=False, timeout=SBATCH_S + 30)
        return out.split("=", 1)[-1].strip()

    eventually("the controller in charge runs with MessageTimeout 17", message_timeout, lambda v: v == "17 sec", 60)
    if ha.exec(other, "pgrep -f '^slurmctld '", check=False).ok:
        # a standby slurmctld re-reads its files itself (SIGHUP from its own pod); a primary standing by
        # without one reads them when it starts
        eventually(
            "the standby re-read its configuration",
            lambda: ha.logs(other, tail=200),
            lambda out: "standby slurmctld re-read its configuration" in out,
            60,
        )
    _replace(ha, boss)
    assert _one_in_charge(ha) == (other, boss)
    assert message_timeout() == "17 sec"
    assert _accepted(_submit(user))
