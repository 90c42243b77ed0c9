"""Slurm itself upgraded in a live cluster, as a platform team lives it (issue 28): `helm install` with
the 24.11 images (`slurmVersion: "24.11"`), a user made, jobs run with accounting on, a two-node job
left running and another queued behind it, then `helm upgrade --set slurmVersion=26.05`. The operator
upgrades in Slurm's order (slurmdbd, slurmctld, the workers by drain-and-replace, login, the jail's
client tools in place); the running job completes, the queued one runs, `sacct` still lists the jobs
from before, every daemon and `srun --version` in the jail report 26.05, the user's home is intact, and
no worker pod is replaced while it runs a job. Then a downgrade (26.05 -> 24.11) is refused and leaves
every object as it was, with the reason in status and a Warning Event.

Its own installation (module fixture), beside test_slurmcluster's (hack/e2e-lanes.sh); the tests run in file order.
With ``WARDEN_UPGRADE_FIGURES=<file>`` it writes the upgrade's duration (helm upgrade to every daemon
on 26.05) and the number of jobs interrupted as JSON there (bench/slurm-upgrade.sh prints them).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_slurmcluster import NAME, RESOURCES, Installed, _eventually
from warden_dev.localcluster import Kube, install_charts, new_ssh_key, uninstall_charts, wait_slurmcluster_ready

OLD, NEW = "24.11", "26.05"
WORKERS = 2
UPGRADE_TIMEOUT = 900


def _values(pubkey: str) -> dict[str, Any]:
    return {
        "nameOverride": NAME,
        "slurmVersion": OLD,
        "jail": {"size": "2Gi", "retainOnDelete": False},
        "login": {"sshAuthorizedKeys": [pubkey], "service": {"type": "NodePort"}},
        "workerGroups": [{"name": "cpu", "replicas": WORKERS, "resources": RESOURCES}],
        "accounting": {"mode": "InCluster", "inCluster": {"storageSize": "1Gi"}},
    }


@pytest.fixture(scope="module")
def installed(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    tmp = tmp_path_factory.mktemp("upgrade")
    key = new_ssh_key(tmp / "id_ed25519", "warden-e2e")
    suffix = uuid.uuid4().hex[:6]
    namespace = f"warden-up-{suffix}"
    operator = f"op-{suffix}"
    values = _values(key.with_suffix(".pub").read_text().strip())
    try:
        install_charts(kube, namespace, namespace, values, tmp / "values.json", operator_release=operator, crds="chart")
        status = wait_slurmcluster_ready(kube, namespace, NAME, timeout=600)
        yield Installed(kube, namespace, values, tmp / "values.json", key, status, False, tmp, {})
    finally:
        uninstall_charts(kube, namespace, NAME, operator, "slurm-operator-crds")


def _cluster(installed: Installed) -> dict[str, Any]:
    obj: dict[str, Any] = installed.kube.json("-n", installed.namespace, "get", "slurmcluster", NAME)
    return obj


def _slurm_status(installed: Installed) -> dict[str, Any]:
    slurm: dict[str, Any] = _cluster(installed).get("status", {}).get("slurm", {})
    return slurm


def _condition(installed: Installed, type_: str) -> dict[str, Any]:
    for c in _cluster(installed).get("status", {}).get("conditions", []):
        if c["type"] == type_:
            return dict(c)
    return {}


def _as(installed: Installed, user: str, key: Path, command: str, timeout: float = 60) -> str:
    out = installed.ssh(command, key=key, user=user, timeout=timeout)
    assert out.returncode == 0, f"{command}: {out.stderr}"
    return out.stdout


def _job_states(installed: Installed, user: str, key: Path, jobs: list[str]) -> dict[str, str]:
    """sacct's State of each job (accounting: the database slurmdbd keeps across the upgrade); empty
    while sacct cannot answer (slurmdbd or the login pod being replaced by the upgrade)."""
    out = installed.ssh(f"sacct -X -n -P -o JobID,State -j {','.join(jobs)}", key=key, user=user)
    return dict(line.split("|", 1) for line in out.stdout.split() if "|" in line) if out.returncode == 0 else {}


def _worker_pods(installed: Installed) -> dict[str, str]:
    pods = installed.kube.json("-n", installed.namespace, "get", "pods", "-l", "app.kubernetes.io/component=worker")
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods["items"]}


def _images(installed: Installed) -> dict[str, str]:
    """Every container image of the release's pods, by pod/container."""
    pods = installed.kube.json("-n", installed.namespace, "get", "pods", "-l", f"app.kubernetes.io/instance={NAME}")
    return {
        f"{p['metadata']['name']}/{c['name']}": c["image"]
        for p in pods["items"]
        if p["status"].get("phase") == "Running"
        for c in p["spec"]["containers"]
    }


def test_slurm_upgraded_from_24_11_to_26_05_under_running_and_queued_jobs(installed: Installed) -> None:
    assert _slurm_status(installed).get("version") == OLD, _slurm_status(installed)
    alice = installed.make_user("alice")
    # what an admin does with accounting on (docs/operations.md): the user gets an association, without
    # which sacct shows her none of her jobs (job privacy)
    ctl = ("-n", installed.namespace, "exec", f"{NAME}-controller-0", "--")
    installed.kube.kubectl(
        *ctl, "sh", "-c", "sacctmgr -i add account lab >/dev/null; sacctmgr -i add user alice account=lab"
    )
    assoc = ("scontrol", "show", "assoc_mgr", "flags=assoc", "users=alice")
    _eventually(
        "slurmctld knows alice's association",
        lambda: "UserName=alice(" in installed.kube.kubectl(*ctl, *assoc, check=False),
        timeout=60,
        interval=2,
    )
    _as(installed, "alice", alice, "echo kept > ~/before-upgrade.txt")
    assert " 24.11.5" in _as(installed, "alice", alice, "srun --version")  # "slurm-wlm 24.11.5"

    # jobs with accounting on, one finished before the upgrade
    done = _as(installed, "alice", alice, "sbatch --parsable --wrap 'hostname'").strip()
    _eventually(
        f"job {done} completed",
        lambda: _job_states(installed, "alice", alice, [done]).get(done) == "COMPLETED",
        timeout=180,
        interval=3,
    )
    # a two-node job that runs through the upgrade, and one queued behind it (it needs the same nodes)
    through = f"sbatch --parsable -N{WORKERS} -o ~/running-%j.out --wrap 'srun sleep 150; echo finished'"
    running = _as(installed, "alice", alice, through).strip()
    _eventually(
        f"job {running} running",
        lambda: _job_states(installed, "alice", alice, [running]).get(running) == "RUNNING",
        timeout=120,
        interval=2,
    )
    queued = _as(installed, "alice", alice, f"sbatch --parsable -N{WORKERS} --wrap 'srun hostname'").strip()
    assert _job_states(installed, "alice", alice, [queued]).get(queued) == "PENDING"
    workers_while_running = _worker_pods(installed)

    t0 = time.monotonic()
    installed.values["slurmVersion"] = NEW
    installed.helm_upgrade()

    # every step in Slurm's order, until everything runs 26.05; meanwhile no worker pod goes while the
    # two-node job runs on it
    steps_seen: list[str] = []
    deadline = time.monotonic() + UPGRADE_TIMEOUT
    while True:
        slurm = _slurm_status(installed)
        step = str(slurm.get("step", ""))
        if step and (not steps_seen or steps_seen[-1] != step):
            steps_seen.append(step)
        states = _job_states(installed, "alice", alice, [running])
        if states.get(running) == "RUNNING":
            assert _worker_pods(installed) == workers_while_running, "a worker pod was replaced under a running job"
        settled = slurm.get("version") == NEW and slurm.get("phase") == "Settled"
        if settled and _condition(installed, "SlurmVersion").get("status") == "True":
            break
        assert time.monotonic() < deadline, f"upgrade not done after {UPGRADE_TIMEOUT}s: {slurm} (steps {steps_seen})"
        time.sleep(3)
    duration = time.monotonic() - t0

    # the jobs: the running one finished, the queued one ran, the earlier one is still in sacct
    deadline = time.monotonic() + 300
    while True:
        states = _job_states(installed, "alice", alice, [done, running, queued])
        if states.get(queued) in ("COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL"):
            break
        assert time.monotonic() < deadline, states
        time.sleep(3)
    interrupted = sum(1 for j in (running, queued) if states.get(j) != "COMPLETED")
    figures = os.environ.get("WARDEN_UPGRADE_FIGURES")
    if figures:
        Path(figures).write_text(json.dumps({"seconds": round(duration, 1), "interrupted": interrupted,
                                             "jobs": states, "steps": steps_seen}) + "\n")  # fmt: skip
    print(f"\nSlurm {OLD} -> {NEW}: {duration:.0f}s from helm upgrade to every daemon on {NEW}; "
          f"{interrupted} jobs interrupted; steps {steps_seen}")  # fmt: skip
    assert states == {done: "COMPLETED", running: "COMPLETED", queued: "COMPLETED"}, states
    assert "finished" in _as(installed, "alice", alice, f"cat ~/running-{running}.out")

    # every daemon reports 26.05, and so do the jail's client tools; alice's home is as it was
    slurm = _slurm_status(installed)
    for part in ("accounting", "controller", "restapi", "login", "jail"):
        assert str(slurm.get(part, "")).startswith(NEW), (part, slurm)
    # the versions the slurmds report to slurmctld, with their counts: "26.05.5 x2"
    assert str(slurm.get("workers", "")).startswith(f"{NEW}.5") and OLD not in str(slurm.get("workers")), slurm
    assert " 26.05.5" in _as(installed, "alice", alice, "srun --version")
    assert _as(installed, "alice", alice, "cat ~/before-upgrade.txt") == "kept\n"
    assert all("-slurm24.11" not in image for image in _images(installed).values()), _images(installed)


def _template_images(installed: Installed) -> dict[str, str]:
    """Every container image the release's workloads are told to run (their pod templates): what the
    operator applies, seen at once, before any pod is replaced."""
    kinds = "statefulsets,deployments,workersets"
    items = installed.kube.json("-n", installed.namespace, "get", kinds, "-l", f"app.kubernetes.io/instance={NAME}")
    return {
        f"{o['kind']}/{o['metadata']['name']}/{c['name']}": c["image"]
        for o in items["items"]
        for c in o["spec"]["template"]["spec"]["containers"]
    }


def test_a_downgrade_is_refused_and_touches_nothing(installed: Installed) -> None:
    before = {k: v for k, v in _images(installed).items()}
    templates = _template_images(installed)
    workers = _worker_pods(installed)
    installed.values["slurmVersion"] = OLD
    installed.helm_upgrade()
    deadline = time.monotonic() + 120
    while (cond := _condition(installed, "SlurmVersion")).get("reason") != "DowngradeRefused":
        assert time.monotonic() < deadline, cond
        time.sleep(2)
    assert cond["status"] == "False" and OLD in cond["message"] and NEW in cond["message"], cond

    def refusal_told() -> bool:  # the Event follows the status of the same reconcile
        events = installed.kube.json("-n", installed.namespace, "get", "events", "--field-selector",
                                     f"involvedObject.name={NAME},type=Warning")["items"]  # fmt: skip
        return any(NEW in e.get("message", "") and OLD in e.get("message", "") for e in events)

    _eventually("a Warning Event saying the downgrade was refused", refusal_told, timeout=30)
    # the refusal is complete once status says so: nothing was applied before it (the workloads' templates
    # show an apply at once; the pods only once replaced)
    assert _template_images(installed) == templates
    assert _images(installed) == before
    assert _worker_pods(installed) == workers
    assert _slurm_status(installed).get("version") == NEW
