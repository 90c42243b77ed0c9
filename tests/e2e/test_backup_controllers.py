"""Backup controllers on a real cluster (issue 32), as a platform team lives them: `helm install` with
`controller.replicas: 2`, then, with a user's job running each time,

(a) slurmctld in charge hangs (SIGSTOP) in a pod Kubernetes still sees Running: the backup takes control,
    the user submits again, the hung one is fenced (its container restarts and stands by), SIGCONT finds
    nothing to resume, the status and the pods' conditions say who is in charge, with an Event;
(b) the pod in charge is deleted: the other takes control at once and the user submits again;
(c) `helm upgrade` of the controller image: the StatefulSet replaces both pods in turn while a user
    submits every second, and no sbatch fails.

Its own installation (module fixture), beside test_slurmcluster's (hack/e2e-lanes.sh); the tests run in file order.
"""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_slurmcluster import NAME, RESOURCES, Installed, _eventually
from warden_dev.localcluster import (
    Kube,
    LocalCluster,
    install_charts,
    new_ssh_key,
    uninstall_charts,
    wait_slurmcluster_ready,
)

TAKEOVER_S = 10
CONTROLLERS = (f"{NAME}-controller-0", f"{NAME}-controller-1")
IN_CHARGE = "slurm.warden.dev/SlurmctldInCharge"


def _values(pubkey: str) -> dict[str, Any]:
    return {
        "nameOverride": NAME,
        "controller": {"replicas": 2, "takeoverSeconds": TAKEOVER_S},
        "jail": {"size": "2Gi", "retainOnDelete": False},
        "login": {"sshAuthorizedKeys": [pubkey], "service": {"type": "NodePort"}},
        "workerGroups": [{"name": "cpu", "replicas": 1, "resources": RESOURCES}],
    }


@pytest.fixture(scope="module")
def installed(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    tmp = tmp_path_factory.mktemp("ha")
    key = new_ssh_key(tmp / "id_ed25519", "warden-e2e")
    suffix = uuid.uuid4().hex[:6]
    namespace = f"warden-ha-{suffix}"
    operator = f"op-{suffix}"
    values = _values(key.with_suffix(".pub").read_text().strip())
    try:
        install_charts(kube, namespace, namespace, values, tmp / "values.json", operator_release=operator, crds="chart")
        status = wait_slurmcluster_ready(kube, namespace, NAME, timeout=600)
        yield Installed(kube, namespace, values, tmp / "values.json", key, status, False, tmp, {})
    finally:
        uninstall_charts(kube, namespace, NAME, operator, "slurm-operator-crds")


@pytest.fixture(scope="module")
def user(installed: Installed) -> tuple[str, Path]:
    return "hana", installed.make_user("hana")


def _submit(installed: Installed, user: tuple[str, Path], what: str = "true") -> str:
    """One sbatch as the user on the login node: the job id, or what went wrong."""
    out = installed.ssh(f"sbatch --parsable --wrap '{what}' 2>&1", key=user[1], user=user[0], timeout=90)
    return out.stdout.strip() if out.returncode == 0 else f"FAILED {out.stdout.strip()} {out.stderr.strip()}"


def _first_accepted(installed: Installed, user: tuple[str, Path], what: str, timeout: float) -> str:
    """The user's sbatch tried until one is accepted: its job id."""
    return str(_eventually(what, lambda: (job := _submit(installed, user)).isdigit() and job, timeout))


def _job_state(installed: Installed, user: tuple[str, Path], job: str) -> str:
    out = installed.ssh(f"scontrol -o show job {job}", key=user[1], user=user[0], timeout=90).stdout
    fields = dict(w.split("=", 1) for w in out.split() if "=" in w)
    return fields.get("JobState", out)


def _completed(installed: Installed, user: tuple[str, Path], job: str) -> bool:
    return _job_state(installed, user, job) == "COMPLETED"


def _running_job(installed: Installed, user: tuple[str, Path], seconds: int) -> str:
    """A job of the user's, running and saved as running in the controllers' shared state (Slurm saves
    its state a few seconds after a change; a change made on purpose gives a fresh save to wait for)."""
    job = _submit(installed, user, f"sleep {seconds}")
    assert job.isdigit(), job
    _eventually(f"job {job} running", lambda: _job_state(installed, user, job) == "RUNNING", 120)
    boss = _pod_in_charge(installed)
    state = ("-n", installed.namespace, "exec", boss, "--")
    since = float(installed.kube.kubectl(*state, "date", "+%s.%N"))
    installed.ssh(f"scontrol update jobid={job} comment=running", key=user[1], user=user[0])
    saved = ("stat", "-c", "%.9Y", "/var/spool/slurmctld/job_state")
    _eventually("the running job saved", lambda: float(installed.kube.kubectl(*state, *saved)) > since, 60)
    return job


def _cluster(installed: Installed) -> dict[str, Any]:
    obj: dict[str, Any] = installed.kube.json("-n", installed.namespace, "get", "slurmcluster", NAME)
    return obj


def _conditions(installed: Installed) -> dict[str, tuple[str, str]]:
    """Each controller pod's SlurmctldInCharge condition: (status, reason)."""
    out = {}
    for pod in CONTROLLERS:
        obj = installed.kube.json_if_found("-n", installed.namespace, "get", "pod", pod)
        for c in obj.get("status", {}).get("conditions", []):
            if c["type"] == IN_CHARGE:
                out[pod] = (c["status"], c["reason"])
    return out


def _pod_in_charge(installed: Installed) -> str:
    """The controller pod whose slurmctld writes the shared heartbeat (read from a pod that runs)."""
    for pod in CONTROLLERS:
        r = installed.kube.kubectl_result(
            "-n", installed.namespace, "exec", pod, "--", "sh", "-c",
            "od -An -v -tu8 --endian=big -N16 /var/spool/slurmctld/heartbeat && date +%s",
        )  # fmt: skip
        words = r.stdout.split()
        # a beat older than takeoverSeconds names nobody (a backup that stopped in charge dates its last back)
        if r.returncode == 0 and len(words) == 3 and int(words[2]) - int(words[0]) <= TAKEOVER_S:
            return CONTROLLERS[int(words[1])]
    return ""


def _says_in_charge(installed: Installed, pod: str) -> bool:
    other = CONTROLLERS[1 - CONTROLLERS.index(pod)]
    conds = _conditions(installed)
    return (
        _cluster(installed).get("status", {}).get("slurmctldInCharge") == pod
        and conds.get(pod, ("", ""))[0] == "True"
        and conds.get(other, ("", ""))[0] == "False"
    )


def test_two_controllers_one_in_charge_and_the_cluster_says_which(installed: Installed, user: tuple[str, Path]) -> None:
    ns = installed.namespace
    claim = installed.kube.json("-n", ns, "get", "pvc", f"{NAME}-controller-state")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    pdb = installed.kube.json("-n", ns, "get", "pdb", f"{NAME}-controller")
    assert pdb["spec"]["maxUnavailable"] == 1
    pings = installed.ssh("scontrol ping", key=user[1], user=user[0]).stdout
    assert all(f"at {pod} is UP" in pings for pod in CONTROLLERS), pings
    assert _pod_in_charge(installed) == CONTROLLERS[0]
    _eventually("the status and the pods say controller-0 is in charge",
                lambda: _says_in_charge(installed, CONTROLLERS[0]), 90)  # fmt: skip
    assert _conditions(installed)[CONTROLLERS[1]] == ("False", "Standby")


def test_a_hung_slurmctld_in_a_running_pod_is_replaced_and_fenced(installed: Installed, user: tuple[str, Path]) -> None:
    ns = installed.namespace
    primary, backup = CONTROLLERS
    # settled: with accounting, slurmctld in charge saves its whole state once at start (images/controller)
    _eventually(
        "the primary's first full state save",
        lambda: "state: saved in full once" in installed.kube.kubectl("-n", ns, "logs", primary, check=False),
        120,
    )
    job = _running_job(installed, user, 60)
    # by its command line: a reconfigured slurmctld runs on under its PID as /proc/self/exe
    pid = installed.kube.kubectl("-n", ns, "exec", primary, "--", "pgrep", "-of", "^slurmctld ").strip()
    installed.kube.kubectl("-n", ns, "exec", primary, "--", "kill", "-STOP", pid)
    assert installed.kube.json("-n", ns, "get", "pod", primary)["status"]["phase"] == "Running"
    t0 = time.monotonic()
    accepted = _first_accepted(installed, user, "a user's sbatch accepted while slurmctld in charge hangs", 240)
    took = time.monotonic() - t0
    _eventually(
        "the hung slurmctld fenced",
        lambda: "fence: slurmctld 1 took control" in installed.kube.kubectl(
            "-n", ns, "logs", primary, "--previous", check=False) + installed.kube.kubectl(
            "-n", ns, "logs", primary, check=False),
        90,
    )  # fmt: skip
    installed.kube.kubectl_result("-n", ns, "exec", primary, "--", "kill", "-CONT", pid)
    _eventually("the status and the pods say the backup is in charge", lambda: _says_in_charge(installed, backup), 120)
    assert _pod_in_charge(installed) == backup
    events = installed.kube.kubectl("-n", ns, "get", "events", "--field-selector", "reason=ControllerTakeover")
    assert backup in events, events
    for j in (accepted, job):
        _eventually(f"job {j} completed", partial(_completed, installed, user, j), 240)
    print(f"hung slurmctld: first sbatch accepted after {took:.1f} s (takeoverSeconds {TAKEOVER_S})")


def test_b_the_deleted_pod_in_charge_hands_over_at_once(installed: Installed, user: tuple[str, Path]) -> None:
    ns = installed.namespace
    boss = _pod_in_charge(installed)
    other = CONTROLLERS[1 - CONTROLLERS.index(boss)]
    job = _running_job(installed, user, 40)
    t0 = time.monotonic()
    installed.kube.kubectl("-n", ns, "delete", "pod", boss, "--wait=false")
    accepted = _first_accepted(installed, user, "a user's sbatch accepted once the pod in charge is deleted", 120)
    took = time.monotonic() - t0
    _eventually("the other controller in charge", lambda: _says_in_charge(installed, other), 120)
    for j in (accepted, job):
        _eventually(f"job {j} completed", partial(_completed, installed, user, j), 240)
    print(f"deleted {boss} in charge: first sbatch accepted after {took:.1f} s")


def test_c_helm_upgrade_of_the_controller_image_fails_no_sbatch(installed: Installed, user: tuple[str, Path]) -> None:
    ns = installed.namespace
    sts = installed.kube.json("-n", ns, "get", "statefulset", f"{NAME}-controller")
    image = sts["spec"]["template"]["spec"]["containers"][0]["image"]
    new = f"{image}-ha"
    # the same bits under a new name: a new image to the StatefulSet, pulled from the node as any other
    subprocess.run(["docker", "tag", image, new], check=True, capture_output=True)
    LocalCluster().import_images([new])
    job = _running_job(installed, user, 120)
    results: list[str] = []
    done = threading.Event()

    def submit_every_second() -> None:
        while not done.is_set():
            start = time.strftime("%H:%M:%S")
            out = _submit(installed, user)
            results.append(out if out.isdigit() else f"{start}-{time.strftime('%H:%M:%S')} {out}")
            time.sleep(1)

    loop = threading.Thread(target=submit_every_second, daemon=True)
    loop.start()
    try:
        _eventually("the loop's first sbatch", lambda: len(results) > 0, 60)
        installed.values["images"] = {**installed.values.get("images", {}), "controller": new}
        installed.helm_upgrade()

        def rolled() -> bool:
            pods = [installed.kube.json_if_found("-n", ns, "get", "pod", p) for p in CONTROLLERS]
            return all(
                p
                and p["spec"]["containers"][0]["image"] == new
                and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))
                for p in pods
            )

        _eventually("both controllers on the new image and Ready", rolled, 600)
        n = len(results)
        _eventually("more sbatches after the upgrade", lambda: len(results) > n + 2, 120)
    finally:
        done.set()
        loop.join(timeout=120)
    failed = [r for r in results if not r.isdigit()]
    if failed:
        logs = "\n".join(
            f"--- {pod}{' (previous)' if prev else ''}\n"
            + installed.kube.kubectl(
                "-n", ns, "logs", pod, *(["--previous"] if prev else []), "--timestamps", "--tail=60", check=False
            )
            for pod in CONTROLLERS
            for prev in (True, False)
        )
        pytest.fail(f"{len(failed)} of {len(results)} sbatches failed: {failed[:3]}\n{logs}")
    _eventually(f"job {job} completed", lambda: _job_state(installed, user, job) == "COMPLETED", 300)
