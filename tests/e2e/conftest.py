"""Fixtures for the e2e tier: a real Kubernetes cluster with real nodes (kubelet, container runtime,
CNI, cluster DNS), where the charts are installed with helm and users SSH in and run jobs.

With ``KUBECONFIG`` set, the tests use that cluster (kind, the local cluster, a real one): the project's
images must be there already and no other Warden operator may watch the tests' namespace; the charts are
installed from the working tree. Without it, the local single-node cluster of `make up`
(warden_dev.localcluster) is used: brought up when it is not running (and torn down at the end, unless
WARDEN_E2E_KEEP=1). The chart images (both Slurm series) and the charts are pushed to its registry
(hack/push.sh, 127.0.0.1:5000/warden), every install_charts installs from there, and the kubelet pulls
the images as a real node does.

hack/e2e-lanes.sh runs the modules in lanes side by side on one cluster, a pytest process each: every
module's installation has its own namespaces and operator; a test that changes the node they all share
(a cordon, `kubectl drain`, a taint: marked ``whole_node``) runs while no other lane runs a test
(warden_dev.lanelock).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from warden_dev import lanelock
from warden_dev.controlplane import REPO_ROOT, cache_dir, sigterm_as_interrupt
from warden_dev.localcluster import Kube, LocalCluster, LocalClusterError, chart_images, pinned_bin_dir


@pytest.fixture(scope="session")
def kube() -> Iterator[Kube]:
    """kubectl/helm against the cluster under test."""
    build = subprocess.run(["bash", str(REPO_ROOT / "hack" / "build-k8s-bins.sh"), "kubectl", "helm"],
                           capture_output=True, text=True)  # fmt: skip
    if build.returncode != 0:
        pytest.fail(f"kubectl/helm could not be built: {build.stderr[-2000:]}", pytrace=False)
    kubeconfig = os.environ.get("KUBECONFIG")
    if kubeconfig:
        yield Kube(Path(kubeconfig), pinned_bin_dir())
        return
    cluster = LocalCluster()
    started = False
    if not cluster.running():
        up = subprocess.run([sys.executable, "-m", "warden_dev", "cluster"], stderr=sys.stderr)
        if up.returncode != 0:
            pytest.fail("the local cluster did not come up (python -m warden_dev cluster; logs above)", pytrace=False)
        started = True
    try:
        with sigterm_as_interrupt():
            images = chart_images(series=("26.05", "24.11"))  # the upgrade story starts on 24.11
            registry = cluster.registry()
            with lanelock.exclusive(cache_dir() / "locks" / "e2e-publish.lock"):  # lanes push one at a time
                if registry is None:  # a cluster an older checkout started: no registry, images imported
                    cluster.import_images(images)
                else:
                    cluster.publish(images)
            yield cluster.kube(registry)
    except LocalClusterError as e:
        pytest.fail(str(e), pytrace=False)
    finally:
        if started and os.environ.get("WARDEN_E2E_KEEP") != "1":
            cluster.down()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """A failed test's report carries the cluster's state at that moment (``Installed.diagnostics``):
    pods, Slurm's nodes and jobs, events, slurmctld's and the operator's logs; the CI log then says why."""
    outcome = yield
    report = outcome.get_result()
    installed: Any = getattr(item, "funcargs", {}).get("installed")
    if report.when == "call" and report.failed and hasattr(installed, "diagnostics"):
        report.sections.append(("warden diagnostics", installed.diagnostics()))


WAITS = pytest.StashKey[list[tuple[str, bool, float]]]()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, Any, None]:
    """In lanes (hack/e2e-lanes.sh), each test with its module's setup and teardown takes its turn on the
    shared node: alone when marked ``whole_node``, else beside the other lanes' tests."""
    lock_dir = os.environ.get(lanelock.LANES_ENV)
    if not lock_dir:
        yield
        return
    whole_node = item.get_closest_marker("whole_node") is not None
    with lanelock.node_turn(Path(lock_dir), whole_node) as waited:
        item.config.stash.setdefault(WAITS, []).append((item.nodeid, whole_node, waited))
        yield


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """How long this lane waited for the node: what running the lanes side by side cost it."""
    waits = config.stash.get(WAITS, [])
    if not waits:
        return
    alone = [(n, w) for n, whole, w in waits if whole]
    shared = sum(w for _, whole, w in waits if not whole)
    line = f"lane turns: {len(waits)} tests; waited {shared:.0f}s in all behind other lanes' whole-node tests"
    if alone:
        line += "; whole-node tests waited " + ", ".join(f"{n.rsplit('::', 1)[-1]} {w:.0f}s" for n, w in alone)
    terminalreporter.write_line(line)
