"""The NCCL check running the REAL all_reduce_perf from the GPU jail, where no GPU can answer.

A cluster of its own populated from warden/populate-jail-gpu (CUDA runtime, NCCL, nccl-tests'
all_reduce_perf), two GPU workers with stand-in device files and the STAND-IN driver of
hack/fakedriver in two versions (550.54.15 and 580.159.04, see dev/warden_dev/dockercluster.py). The real
binary finds each node's injected libcuda through the jail's per-node loader cache, and the CUDA runtime
gives up on it the same way on both nodes ("API call is not supported in the installed CUDA driver":
the stand-in answers only cuInit/cuDriverGetVersion/cuDeviceGetCount). That is what a run looks like
when every node fails for one reason outside the nodes (a CUDA runtime newer than every driver, a
broken jail): the check's own failure, which drains nobody and says why.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.dataplane.healthcheck import by_node, run_check
from tests.support.dockerfixture import running_for_tests
from warden_dev.dockercluster import DockerCluster, version

SPEC: dict[str, Any] = {
    "images": {"populateJail": f"warden/populate-jail-gpu:{version()}"},
    "login": {"replicas": 0},
    "workerGroups": [{"name": "gpu", "replicas": 2, "gpus": {"count": 2, "type": "fake"}}],
    "partitions": [{"name": "gpu", "workerGroups": ["gpu"], "default": True}],
    "accounting": {"mode": "Disabled"},
    "healthChecks": {"nccl": {"enabled": True, "minBusBandwidthGbps": 100}},
}


@pytest.fixture(scope="module")
def gj(request: pytest.FixtureRequest) -> Iterator[DockerCluster]:
    failed_before = request.session.testsfailed
    failed = lambda: request.session.testsfailed > failed_before  # noqa: E731
    with running_for_tests(DockerCluster(SPEC, name="gj"), "GPU jail cluster", failed) as c:
        yield c


def test_real_all_reduce_perf_failing_alike_everywhere_drains_nobody(gj: DockerCluster) -> None:
    nodes = gj.worker_pods("gpu")
    versions = {gj.pod_drivers[n].version for n in nodes}  # type: ignore[union-attr]
    assert len(versions) == 2, "two driver versions, one failure"
    summary = run_check(gj, "--min-bytes", "1M", "--max-bytes", "1M")
    assert summary["drained"] == [] and summary["nodesChecked"] == 2, summary
    reports = by_node(summary)
    assert [reports[n]["outcome"] for n in nodes] == ["failed", "failed"], summary
    failed = summary["checkFailed"]
    assert failed is not None and failed.startswith("all_reduce_perf failed the same way on all 2 nodes tested: ")
    assert "<node>: Test CUDA failure" in failed, failed  # each node named itself; the same message once not
    states = gj.exec(gj.names.controller_pod, f"sinfo -h -N -n {','.join(nodes)} -o %t").out.split()
    assert states == ["idle", "idle"], states
