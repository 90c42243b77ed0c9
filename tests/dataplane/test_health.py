"""GPU node health against real Slurm: the NCCL check CronJob's pod and slurmd's quick check.

A cluster of its own (module scope): two GPU workers with two GPUs each and the NCCL check enabled.
Two things here are stand-ins for hardware this machine lacks, and nothing else is:

- GPUs: each worker's /dev/nvidia0 and /dev/nvidia1 are /dev/null (char 1:3), passed with
  `docker run --device` where the device plugin would hand out real ones (dev/warden_dev/dockercluster.py);
  Slurm's gres needs only the files, and sets CUDA_VISIBLE_DEVICES from them.
- `all_reduce_perf`: tests/support/nccl_standin.py, copied into the jail as
  /usr/local/bin/all_reduce_perf. It prints nccl-tests' real output format with the bus bandwidth
  this test wrote for the node into the jail (`STANDIN_DIR/<node>`), or hangs.

Everything else is real: the check runs as the rendered CronJob's pod would (its image, command, args
and the Slurm config + key mounted as its pod spec mounts them), except `--report-configmap`, which
needs a Kubernetes API; the JSON summary on stdout is what it would have written there. Its srun lands
on each node through slurmd and the SPANK plugin, inside the jail; drains and resumes are scontrol's.

`sinfo -R` is read with `%100E`: the check's reasons run to 100 characters and `%50E` cuts them.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dataplane.healthcheck import by_node, run_check
from tests.support.dockerfixture import running_for_tests
from warden_dev.dockercluster import DockerCluster, docker, wait_for

STANDIN = Path(__file__).resolve().parents[1] / "support" / "nccl_standin.py"
STANDIN_DIR = "/var/lib/warden-nccl-standin"
THRESHOLD = 100.0
FAST, SLOW = 400.0, 12.5

#: Two GPU workers (two fake GPUs each), the NCCL check on (threshold 100 GB/s), the quick check every
#: 10 s so a test sees slurmd run it; no login and no accounting (not needed here).
HEALTH_SPEC: dict[str, Any] = {
    "login": {"replicas": 0},
    "workerGroups": [
        {
            "name": "gpu",
            "replicas": 2,
            "gpus": {"count": 2, "type": "fake"},
            "resources": {"limits": {"cpu": "2", "memory": "1Gi"}},
        }
    ],
    "partitions": [{"name": "gpu", "workerGroups": ["gpu"], "default": True}],
    "accounting": {"mode": "Disabled"},
    "healthChecks": {
        "nccl": {"enabled": True, "minBusBandwidthGbps": THRESHOLD},
        "quick": {"enabled": True, "intervalSeconds": 10},
    },
}

q = shlex.quote


@pytest.fixture(scope="module")
def hc(request: pytest.FixtureRequest) -> Iterator[DockerCluster]:
    failed_before = request.session.testsfailed
    failed = lambda: request.session.testsfailed > failed_before  # noqa: E731
    with running_for_tests(DockerCluster(HEALTH_SPEC, name="hc"), "health cluster", failed) as c:
        worker = c.worker_pods("gpu")[0]
        docker(
            "exec",
            "-i",
            c.container(worker),
            "sh",
            "-c",
            f"install -d /mnt/jail{STANDIN_DIR} && "
            "cat > /mnt/jail/usr/local/bin/all_reduce_perf && chmod 755 /mnt/jail/usr/local/bin/all_reduce_perf",
            input=STANDIN.read_text(),
        )
        yield c


@pytest.fixture
def nodes(hc: DockerCluster) -> Iterator[tuple[str, str]]:
    """Both GPU nodes, fast, idle and undrained, with their GPU device files; put back so afterwards."""
    first, second = hc.worker_pods("gpu")
    restore(hc)
    yield first, second
    restore(hc)


# --- helpers ------------------------------------------------------------------------------------


def jail_sh(hc: DockerCluster, script: str) -> str:
    """A shell script as root on the jail volume (mounted at /mnt/jail on the first worker)."""
    return hc.exec(hc.worker_pods("gpu")[0], script).out


def set_busbw(hc: DockerCluster, node: str, value: float | str) -> None:
    jail_sh(hc, f"echo {q(str(value))} > /mnt/jail{STANDIN_DIR}/{node}")


def standin_calls(hc: DockerCluster) -> list[dict[str, Any]]:
    out = jail_sh(hc, f"cat /mnt/jail{STANDIN_DIR}/calls.jsonl 2>/dev/null; rm -f /mnt/jail{STANDIN_DIR}/calls.jsonl")
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def ctl(hc: DockerCluster, script: str, check: bool = True) -> str:
    return hc.exec(hc.names.controller_pod, script, check=check).out


def drain_reasons(hc: DockerCluster) -> dict[str, tuple[str, str]]:
    """`sinfo -R`, one line per node: node -> (reason, user)."""
    out = ctl(hc, "sinfo -R -N -h -o '%100E|%9u|%19H|%N'")
    reasons = {}
    for line in out.splitlines():
        reason, user, _when, node = (f.strip() for f in line.split("|"))
        reasons[node] = (reason, user)
    return reasons


def state(hc: DockerCluster, node: str) -> str:
    return ctl(hc, f"sinfo -h -N -n {node} -o '%t'").strip()


def wait_idle(hc: DockerCluster, *names: str, timeout: float = 60) -> None:
    wait_for(f"{names} idle", lambda: all(state(hc, n) == "idle" for n in names), timeout)


def restore(hc: DockerCluster) -> None:
    pods = hc.worker_pods("gpu")
    for node in pods:
        hc.exec(node, "[ -e /dev/.nvidia1-away ] && mv /dev/.nvidia1-away /dev/nvidia1 || true")
        set_busbw(hc, node, FAST)
        ctl(hc, f"scontrol update nodename={node} state=resume", check=False)
    wait_idle(hc, *pods)
    standin_calls(hc)


def slow_reason(busbw: float) -> str:
    return f"warden-health: nccl all_reduce_perf busbw {busbw:.1f} GB/s < {THRESHOLD:.1f} GB/s"


# --- tests --------------------------------------------------------------------------------------


def test_slow_node_is_drained_with_the_measured_bandwidth(hc: DockerCluster, nodes: tuple[str, str]) -> None:
    slow, fast = nodes
    set_busbw(hc, slow, SLOW)
    summary = run_check(hc)

    assert summary["drained"] == [{"node": slow, "reason": slow_reason(SLOW)}]
    assert summary["passed"] == [fast] and summary["skipped"] == [] and summary["errors"] == []
    assert summary["nodesChecked"] == 2 and summary["thresholdGBps"] == THRESHOLD
    assert by_node(summary)[slow]["outcome"] == "slow" and by_node(summary)[slow]["busbwGBps"] == SLOW
    assert by_node(summary)[fast]["busbwGBps"] == FAST
    # Slurm has it: exactly the slow node, drained by root (the check pod) with the whole reason
    assert drain_reasons(hc) == {slow: (slow_reason(SLOW), "root")}
    assert state(hc, slow) == "drain" and state(hc, fast) == "idle"
    # each node ran the CronJob's all_reduce_perf command inside the jail, with both its GPUs
    calls = sorted(standin_calls(hc), key=lambda c: str(c["host"]))
    assert [c["host"] for c in calls] == sorted(nodes)
    for call in calls:
        assert call["argv"] == ["-b", "512M", "-e", "8G", "-f", "2", "-g", "2"], call
        assert call["cuda_visible_devices"] == "0,1" and call["in_jail"] is True, call


def test_recovered_node_is_resumed_by_the_next_run(hc: DockerCluster, nodes: tuple[str, str]) -> None:
    slow, fast = nodes
    set_busbw(hc, slow, SLOW)
    run_check(hc)
    assert set(drain_reasons(hc)) == {slow}

    set_busbw(hc, slow, 250)
    summary = run_check(hc)

    assert summary["resumed"] == [slow] and summary["drained"] == []
    assert by_node(summary)[slow]["outcome"] == "passed" and by_node(summary)[slow]["busbwGBps"] == 250
    assert sorted(summary["passed"]) == sorted(nodes)
    assert drain_reasons(hc) == {}
    wait_idle(hc, slow, fast)  # jobs can run there again
    assert ctl(hc, f"srun -w {slow} --gpus-per-node=2 hostname").strip() == slow
    # the re-test ran inside the check's maintenance reservation, which is gone again
    assert "warden-health" not in ctl(hc, "scontrol show reservation", check=False)


def test_node_drained_by_a_person_is_left_alone(hc: DockerCluster, nodes: tuple[str, str]) -> None:
    human, other = nodes
    ctl(hc, f"scontrol update nodename={human} state=drain reason='disk replacement'")
    set_busbw(hc, human, SLOW)  # it would fail the check, were it tested
    summary = run_check(hc)

    assert summary["skipped"] == [{"node": human, "why": "drained by someone else: disk replacement"}]
    assert summary["passed"] == [other] and summary["drained"] == [] and summary["resumed"] == []
    assert drain_reasons(hc) == {human: ("disk replacement", "root")}
    assert [c["host"] for c in standin_calls(hc)] == [other]


def test_quick_check_drains_a_node_missing_a_gpu_and_resumes_it(hc: DockerCluster, nodes: tuple[str, str]) -> None:
    """slurmd runs warden-quickcheck (HealthCheckProgram, every 10 s here): a GPU device file gone
    drains the node with the quick check's own reason; the NCCL check leaves that drain alone; the
    file back, the quick check resumes the node itself."""
    broken, fine = nodes
    # the node's (stand-in) driver, which the quick check runs nvidia-smi with, sees one GPU too
    reason = "warden-quickcheck: 1 of 2 GPU device files; nvidia-smi lists 1 of 2 GPUs"
    hc.exec(broken, "mv /dev/nvidia1 /dev/.nvidia1-away")
    wait_for(f"{broken} drained by the quick check", lambda: broken in drain_reasons(hc), 45, interval=1)
    assert drain_reasons(hc) == {broken: (reason, "root")}

    summary = run_check(hc)
    assert summary["skipped"] == [{"node": broken, "why": f"drained by someone else: {reason}"}]
    assert summary["passed"] == [fine]

    hc.exec(broken, "mv /dev/.nvidia1-away /dev/nvidia1")
    wait_for(f"{broken} resumed by the quick check", lambda: drain_reasons(hc) == {}, 45, interval=1)
    wait_idle(hc, broken)


def test_hung_test_is_timed_out_and_drained(hc: DockerCluster, nodes: tuple[str, str]) -> None:
    """A collective that never finishes: Slurm ends the step at its time limit (Slurm counts whole
    minutes, so `--time-limit-seconds 5` lasts about a minute) and the check drains the node."""
    hung, fast = nodes
    set_busbw(hc, hung, "hang")
    t0 = time.monotonic()
    summary = run_check(hc, "--time-limit-seconds", "5")
    took = time.monotonic() - t0

    reason = "warden-health: nccl all_reduce_perf timed out after 5s"
    assert summary["drained"] == [{"node": hung, "reason": reason}], summary
    assert by_node(summary)[hung]["outcome"] == "timedOut"
    assert summary["passed"] == [fast]
    assert drain_reasons(hc) == {hung: (reason, "root")}
    # Slurm's time limit ended it, not the runner's own deadline (immediate + limit + 90 s grace)
    ctld = hc.logs(hc.names.controller_pod, tail=2000)
    assert re.search(r"Time limit exhausted for JobId=\d+", ctld), ctld[-2000:]
    print(f"hung test: the check ended after {took:.0f} s")
    # and nothing of the hung program is left on the node
    leftovers = hc.exec(hung, "pgrep -af '[a]ll_reduce_perf' || true").out  # [a]: not this shell itself
    assert not re.search(r"all_reduce_perf", leftovers), leftovers
