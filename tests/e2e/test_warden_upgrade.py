"""Warden itself upgraded in place, as a platform team lives it (issue 35): the previous release (built
from its tag by hack/previous-release.sh, pushed to the local cluster's registry with its own charts) is
installed; a user's two-node job runs and another waits behind it; then the CRD chart, the operator
chart and the cluster chart are upgraded to this tree's, from the registry. Both jobs complete, slurmctld
never restarts and no pod of the cluster is replaced (the cluster keeps the images it was made with:
status.imagesVersion). Then the other skew: the operator goes back to the previous release under this
release's CRDs, and the cluster stays Ready, its pods untouched, taking jobs.

Its own installation (module fixture). It installs the previous release's CRDs, so it runs when no other
installation is live: hack/e2e-lanes.sh runs it alone, after the other lanes.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_slurmcluster import NAME, RESOURCES, Installed, _eventually
from warden import __version__
from warden_dev.controlplane import REPO_ROOT
from warden_dev.localcluster import (
    Kube,
    chart_args,
    install_charts,
    new_ssh_key,
    uninstall_charts,
    wait_slurmcluster_ready,
)

WORKERS = 2
SUFFIX = uuid.uuid4().hex[:6]
NAMESPACE = f"warden-wu-{SUFFIX}"
OPERATOR = f"op-{SUFFIX}"  # its cluster-wide objects are named after the release: unique per run


def _previous_release() -> str:
    out = subprocess.run(["bash", str(REPO_ROOT / "hack" / "previous-release.sh"), "version"], check=True,
                         capture_output=True, text=True)  # fmt: skip
    return out.stdout.strip()


PREVIOUS = _previous_release()


@pytest.fixture(scope="module")
def registry(kube: Kube) -> str:
    """The local cluster's registry, holding the previous release's images and charts as well."""
    if kube.registry is None:
        pytest.skip("the previous release is pushed to the local cluster's registry (not with KUBECONFIG)")
    script = str(REPO_ROOT / "hack" / "previous-release.sh")
    for step in (["build"], ["push", kube.registry]):
        done = subprocess.run(["bash", script, *step], capture_output=True, text=True)
        assert done.returncode == 0, f"previous-release.sh {' '.join(step)}:\n{done.stderr[-3000:]}"
    return kube.registry


@pytest.fixture(scope="module")
def installed(kube: Kube, registry: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    tmp = tmp_path_factory.mktemp("warden-upgrade")
    key = new_ssh_key(tmp / "id_ed25519", "warden-e2e")
    namespace, operator = NAMESPACE, OPERATOR
    values = {
        "nameOverride": NAME,
        "jail": {"size": "2Gi", "retainOnDelete": False},
        "login": {"sshAuthorizedKeys": [key.with_suffix(".pub").read_text().strip()], "service": {"type": "NodePort"}},
        "workerGroups": [{"name": "cpu", "replicas": WORKERS, "resources": RESOURCES}],
    }
    try:
        install_charts(kube, namespace, namespace, values, tmp / "values.json", operator_release=operator,
                       crds="chart", charts=registry, version=PREVIOUS)  # fmt: skip
        status = wait_slurmcluster_ready(kube, namespace, NAME, timeout=600)
        yield Installed(kube, namespace, values, tmp / "values.json", key, status, False, tmp, {})
    finally:
        uninstall_charts(kube, namespace, NAME, operator, "slurm-operator-crds")


def _operator(installed: Installed) -> tuple[str, str, bool]:
    """The operator's pod: (name, image, ready) of the one not being deleted; of this release's replicas, the
    one acting (the holder of the chart's Lease)."""
    pods = installed.kube.json("-n", installed.namespace, "get", "pods", "-l", "app.kubernetes.io/component=operator")
    live = [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]
    if len(live) > 1:
        lease = installed.kube.kubectl("-n", installed.namespace, "get", "lease", f"{OPERATOR}-slurm-operator",
                                       "--ignore-not-found", "-o", "jsonpath={.spec.holderIdentity}")  # fmt: skip
        live = [p for p in live if p["metadata"]["name"] == lease.strip()]
    if len(live) != 1:
        return "", "", False
    (pod,) = live
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))
    return pod["metadata"]["name"], pod["spec"]["containers"][0]["image"], ready


def _status(installed: Installed) -> dict[str, Any]:
    obj = installed.kube.json("-n", installed.namespace, "get", "slurmcluster", NAME)
    return dict(obj.get("status") or {})


def _images(installed: Installed) -> set[str]:
    pods = installed.kube.json("-n", installed.namespace, "get", "pods", "-l", f"app.kubernetes.io/instance={NAME}")
    return {c["image"] for p in pods["items"] for c in p["spec"]["containers"]}


def _job_state(installed: Installed, key: Path, job: str) -> str:
    out = installed.ssh(f"scontrol show job -o {job}", key=key, user="alice")
    state = [w for w in out.stdout.split() if w.startswith("JobState=")]
    return state[0].removeprefix("JobState=") if state else ""


def _reconciled_by(installed: Installed, pod: str, since: str) -> bool:
    """The operator pod ``pod`` posted a Reconciled Event after ``since`` (RFC 3339): it has taken the
    cluster over. This release's operator counts up the series of an Event the one before it posted when it
    says the same (warden.kube.events: no Event said twice across a handover): then the series moved."""
    events = installed.kube.json("-n", installed.namespace, "get", "events.events.k8s.io")["items"]
    return any(e["reason"] == "Reconciled" and ((e.get("reportingInstance") == pod and e["eventTime"] > since)
                                                 or (e.get("series") or {}).get("lastObservedTime", "") > since)
               for e in events)  # fmt: skip


def _now() -> str:
    """The time now as Events write it, to the second (the API server runs on this host's clock)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())


def test_warden_upgraded_in_place_under_running_and_queued_jobs_then_the_older_operator_under_newer_crds(
    installed: Installed, registry: str
) -> None:
    kube, ns = installed.kube, installed.namespace
    assert _operator(installed)[1] == f"{registry}/operator:{PREVIOUS}"
    assert all(image.endswith(f":{PREVIOUS}") for image in _images(installed)), _images(installed)
    alice = installed.make_user("alice")

    # a two-node job that runs through the upgrade (until alice says go), and one queued behind it
    wait = 'srun sh -c "until [ -e ~/go ]; do sleep 1; done"; echo finished'
    running = installed.ssh(f"sbatch --parsable -N{WORKERS} -o ~/through-%j.out --wrap '{wait}'", key=alice,
                            user="alice").stdout.strip()  # fmt: skip
    _eventually("the two-node job running", lambda: _job_state(installed, alice, running) == "RUNNING", timeout=120)
    queued = installed.ssh(f"sbatch --parsable -N{WORKERS} --wrap 'srun hostname'", key=alice,
                           user="alice").stdout.strip()  # fmt: skip
    assert _job_state(installed, alice, queued) == "PENDING"
    pods_before = installed.restarts()
    controller = f"{NAME}-controller-0"
    assert controller in pods_before

    # upgrade: the CRD chart, the operator chart and the cluster chart, this tree's, from the registry
    since = _now()
    install_charts(kube, ns, ns, installed.values, installed.values_file, operator_release=OPERATOR,
                   crds="chart", charts=registry)  # fmt: skip
    name, _, _ = _eventually("the new operator ready", lambda: (o := _operator(installed))[2]
                                 and o[1] == f"{registry}/operator:{__version__}" and o, timeout=180)  # fmt: skip
    _eventually("the new operator reconciled the cluster", lambda: _reconciled_by(installed, name, since), timeout=180)
    status = _status(installed)
    assert status.get("imagesVersion") == PREVIOUS and status.get("phase") == "Ready", status
    assert _job_state(installed, alice, running) == "RUNNING"
    assert installed.restarts() == pods_before, "a pod was replaced or restarted by the operator's upgrade"
    assert all(image.endswith(f":{PREVIOUS}") for image in _images(installed)), _images(installed)

    # both jobs complete
    installed.ssh("touch ~/go", key=alice, user="alice")
    _eventually("the queued job completed", lambda: _job_state(installed, alice, queued) == "COMPLETED", timeout=180)
    assert _job_state(installed, alice, running) == "COMPLETED"
    assert "finished" in installed.ssh(f"cat ~/through-{running}.out", key=alice, user="alice").stdout

    # the other skew: this release's CRDs, the previous release's operator
    since = _now()
    # --reset-then-reuse-values (docs/operations.md): the previous chart's own defaults with the values
    # given; --reuse-values would hand it this release's defaults, which its schema refuses (`bridge`)
    kube.helm("upgrade", OPERATOR, *chart_args(registry, "slurm-operator", PREVIOUS), "-n", ns,
              "--reset-then-reuse-values", "--wait", "--timeout=5m")  # fmt: skip
    name, _, _ = _eventually("the previous operator ready", lambda: (o := _operator(installed))[2]
                             and o[1] == f"{registry}/operator:{PREVIOUS}" and o, timeout=180)  # fmt: skip
    _eventually("the previous operator reconciled the cluster", lambda: _reconciled_by(installed, name, since),
                timeout=180)  # fmt: skip
    wait_slurmcluster_ready(kube, ns, NAME, timeout=120)
    assert installed.restarts() == pods_before, "a pod was replaced or restarted under the older operator"
    after = installed.ssh("sbatch --parsable --wait -N2 --wrap 'srun hostname'", key=alice, user="alice", timeout=180)
    assert after.returncode == 0 and _job_state(installed, alice, after.stdout.strip()) == "COMPLETED", after.stderr
