"""The NCCL check's decisions: who is tested, drained, resumed, left alone.

No Slurm and no GPU exist in the unit tier, so ``scontrol``/``srun`` are answered by ``FakeSlurm``
(health_fakes.py), which keeps node state the way Slurm 24.11 does; ``all_reduce_perf`` output comes
from fixtures/nccl. The dataplane tier runs the same code against real Slurm.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from contextlib import redirect_stdout
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.unit.health_fakes import BUSY, Behaviour, FakeNode, FakeSlurm, hangs, prints
from warden.health.check import CheckConfig, run_checks
from warden.health.main import main
from warden.slurm.cli import CommandResult, Slurm
from warden.slurm.reasons import HEALTH_CHECK as REASON_PREFIX

SLOW_REASON = "warden-health: nccl all_reduce_perf busbw 12.3 GB/s < 100.0 GB/s"


def run(fake: FakeSlurm, cfg: CheckConfig | None = None, nodes: list[str] | None = None) -> dict[str, Any]:
    summary = run_checks(Slurm(fake), cfg or CheckConfig(), nodes, now=datetime(2026, 11, 22, 4, 0, tzinfo=UTC))
    return summary.to_json()


def outcome(summary: dict[str, Any], node: str) -> dict[str, Any]:
    return next(n for n in summary["nodes"] if n["node"] == node)


def test_slow_node_is_drained_with_the_exact_reason() -> None:
    fake = FakeSlurm([FakeNode("gpu-0")])
    fake.behaviour["gpu-0"] = prints("h100_8gpu_slow.txt")
    summary = run(fake)
    assert fake.nodes["gpu-0"].state == ["IDLE", "DRAIN"]
    assert fake.nodes["gpu-0"].reason == SLOW_REASON
    assert summary["drained"] == [{"node": "gpu-0", "reason": SLOW_REASON}]
    assert outcome(summary, "gpu-0")["outcome"] == "slow"
    assert outcome(summary, "gpu-0")["busbwGBps"] == pytest.approx(12.2748)


def test_fast_node_is_tested_with_all_its_gpus_and_left_alone() -> None:
    fake = FakeSlurm([FakeNode("gpu-0", gres="gpu:h100:4(S:0),gpu:h100:4(S:1)")])
    summary = run(fake, CheckConfig(min_bytes="1G", max_bytes="4G", time_limit_s=300))
    assert fake.updates("gpu-0") == []
    assert fake.nodes["gpu-0"].state == ["IDLE"]
    assert summary["passed"] == ["gpu-0"] and summary["nodesChecked"] == 1
    (srun,) = fake.sruns("gpu-0")
    assert "--gpus-per-node=8" in srun and "--exclusive" in srun and "--time=5:00" in srun
    assert srun[srun.index("all_reduce_perf") :] == (
        "all_reduce_perf", "-b", "1G", "-e", "4G", "-f", "2", "-g", "8",
    )  # fmt: skip


def test_recovered_node_is_resumed_inside_a_reservation() -> None:
    fake = FakeSlurm([FakeNode("gpu-0", state=["IDLE", "DRAIN"], reason=SLOW_REASON)])
    summary = run(fake)
    assert fake.nodes["gpu-0"].state == ["IDLE"]
    assert summary["resumed"] == ["gpu-0"] and summary["passed"] == ["gpu-0"]
    (srun,) = fake.sruns("gpu-0")
    assert "--reservation=warden-health-gpu-0" in srun
    assert fake.reservations == {}  # cleaned up
    assert fake.updates("gpu-0") == [("scontrol", "update", "NodeName=gpu-0", "State=RESUME")]


def test_node_still_failing_on_retest_is_drained_again_with_the_new_finding() -> None:
    fake = FakeSlurm([FakeNode("gpu-0", state=["IDLE", "DRAIN"], reason=SLOW_REASON)])
    fake.behaviour["gpu-0"] = prints("h100_8gpu_wrong.txt")
    summary = run(fake)
    assert fake.nodes["gpu-0"].state == ["IDLE", "DRAIN"]
    assert fake.nodes["gpu-0"].reason == "warden-health: nccl all_reduce_perf failed: 24 wrong values"
    assert summary["resumed"] == []
    assert fake.reservations == {}


def test_human_drained_node_is_untouched_and_reported() -> None:
    fake = FakeSlurm([FakeNode("gpu-0", state=["IDLE", "DRAIN"], reason="bad DIMM, ticket 4711")])
    summary = run(fake)
    assert fake.updates("gpu-0") == [] and fake.sruns("gpu-0") == []
    assert fake.nodes["gpu-0"].reason == "bad DIMM, ticket 4711"
    assert summary["skipped"] == [{"node": "gpu-0", "why": "drained by someone else: bad DIMM, ticket 4711"}]


def test_quickcheck_drain_is_not_the_nccl_checks_to_lift() -> None:
    reason = "warden-quickcheck: 7 of 8 GPU device files"
    fake = FakeSlurm([FakeNode("gpu-0", state=["IDLE", "DRAIN"], reason=reason)])
    run(fake)
    assert fake.updates("gpu-0") == [] and fake.nodes["gpu-0"].reason == reason


@pytest.mark.parametrize("state", [["MIXED"], ["ALLOCATED"], ["MIXED", "DRAIN"]])
def test_busy_node_is_skipped(state: list[str]) -> None:
    reason = SLOW_REASON if "DRAIN" in state else ""
    fake = FakeSlurm([FakeNode("gpu-0", state=state, reason=reason)])
    summary = run(fake)
    assert fake.sruns("gpu-0") == [] and fake.updates("gpu-0") == []
    (skipped,) = summary["skipped"]
    assert skipped["why"].startswith("busy (")


def test_down_node_is_skipped_even_with_our_reason() -> None:
    fake = FakeSlurm([FakeNode("gpu-0", state=["IDLE", "DRAIN", "NOT_RESPONDING"], reason=SLOW_REASON)])
    summary = run(fake)
    assert fake.calls == [("scontrol", "show", "node", "--json")]
    assert outcome(summary, "gpu-0")["outcome"] == "skipped"


def test_timeout_is_reported_distinctly_and_drained() -> None:
    fake = FakeSlurm([FakeNode("gpu-0")])
    fake.behaviour["gpu-0"] = hangs()
    summary = run(fake, CheckConfig(time_limit_s=120))
    assert outcome(summary, "gpu-0")["outcome"] == "timedOut"
    assert fake.nodes["gpu-0"].reason == "warden-health: nccl all_reduce_perf timed out after 120s"


def test_slurm_time_limit_kill_counts_as_timeout() -> None:
    fake = FakeSlurm([FakeNode("gpu-0")])
    msg = "slurmstepd: error: *** STEP 7.0 ON gpu-0 CANCELLED AT 2026-11-22T04:01:48 DUE TO TIME LIMIT ***\n"
    fake.behaviour["gpu-0"] = prints("h100_8gpu_truncated.txt", rc=143, stderr=msg)
    assert outcome(run(fake), "gpu-0")["outcome"] == "timedOut"


def test_nonzero_exit_fails_with_the_nccl_message() -> None:
    fake = FakeSlurm([FakeNode("gpu-0")])
    fake.behaviour["gpu-0"] = prints(
        "h100_8gpu_nccl_failure.txt", rc=3, stderr="srun: error: gpu-0: task 0: Exited with exit code 3\n"
    )
    summary = run(fake)
    reason = fake.nodes["gpu-0"].reason
    assert reason.startswith("warden-health: nccl all_reduce_perf failed: exit 3: gpu-b-9: Test NCCL failure")
    assert len(reason) <= 100
    assert outcome(summary, "gpu-0")["outcome"] == "failed"


@pytest.mark.parametrize(
    ("fixture", "detail"), [("empty.txt", "no all_reduce_perf output"), ("h100_8gpu_truncated.txt", "output truncated")]
)
def test_unreadable_output_fails(fixture: str, detail: str) -> None:
    fake = FakeSlurm([FakeNode("gpu-0")])
    fake.behaviour["gpu-0"] = prints(fixture)
    run(fake)
    assert fake.nodes["gpu-0"].reason == f"{REASON_PREFIX} nccl all_reduce_perf failed: {detail}"


def test_node_taken_before_srun_is_skipped_not_drained() -> None:
    fake = FakeSlurm([FakeNode("gpu-0")])
    fake.behaviour["gpu-0"] = lambda argv: (1, "", BUSY, False)
    summary = run(fake)
    assert fake.updates("gpu-0") == []
    assert outcome(summary, "gpu-0")["detail"] == (
        "not allocated: srun: error: Unable to allocate resources: Requested nodes are busy"
    )


def test_retest_that_never_ran_puts_the_old_drain_back() -> None:
    fake = FakeSlurm([FakeNode("gpu-0", state=["IDLE", "DRAIN"], reason=SLOW_REASON)])
    fake.behaviour["gpu-0"] = lambda argv: (1, "", BUSY, False)
    summary = run(fake)
    assert fake.nodes["gpu-0"].state == ["IDLE", "DRAIN"] and fake.nodes["gpu-0"].reason == SLOW_REASON
    assert outcome(summary, "gpu-0")["action"] == "restored-drain"


def test_drain_placed_by_a_person_during_the_test_is_kept() -> None:
    fake = FakeSlurm([FakeNode("gpu-0")])
    fake.behaviour["gpu-0"] = prints("h100_8gpu_slow.txt")

    def person_drains(node: FakeNode) -> None:
        node.state, node.reason = ["ALLOCATED", "DRAIN"], "RMA: fan failure"

    fake.during_step["gpu-0"] = person_drains
    summary = run(fake)
    assert fake.nodes["gpu-0"].reason == "RMA: fan failure"
    assert summary["drained"] == []
    assert outcome(summary, "gpu-0")["action"] == "left-drained-by-other"


def test_parallel_bound_is_respected() -> None:
    fake = FakeSlurm([FakeNode(f"gpu-{i}") for i in range(9)], step_seconds=0.1)
    summary = run(fake, CheckConfig(concurrency=3))
    assert fake.max_in_flight == 3
    assert summary["nodesChecked"] == 9


def test_only_gpu_nodes_are_picked_unless_named() -> None:
    fake = FakeSlurm([FakeNode("gpu-0"), FakeNode("cpu-0", gres="")])
    assert [n["node"] for n in run(fake)["nodes"]] == ["gpu-0"]
    fake2 = FakeSlurm([FakeNode("cpu-0", gres=""), FakeNode("gpu-0")])
    summary = run(fake2, nodes=["cpu-0", "nope"])
    (srun,) = fake2.sruns("cpu-0")
    assert not any(a.startswith("--gpus-per-node") for a in srun) and srun[-2:] == ("-g", "1")
    assert outcome(summary, "nope")["detail"] == "not a Slurm node"


def test_gpu_node_outside_the_default_partition_is_tested_in_its_own() -> None:
    """The usual layout: CPU nodes in the default partition, GPU nodes only in `gpu`. srun without
    --partition asks the default partition, where Slurm refuses the node."""
    fake = FakeSlurm([FakeNode("gpu-0", partitions=["gpu"]), FakeNode("gpu-1", partitions=["gpu", "all"])])
    fake.behaviour["gpu-0"] = prints("h100_8gpu_slow.txt")
    summary = run(fake)
    assert summary["drained"] == [{"node": "gpu-0", "reason": SLOW_REASON}] and summary["passed"] == ["gpu-1"]
    assert "--partition=gpu" in fake.sruns("gpu-0")[0] and "--partition=gpu,all" in fake.sruns("gpu-1")[0]
    # an explicit --partition wins (and Slurm refuses a node that is not in it: not the node's fault)
    fake2 = FakeSlurm([FakeNode("gpu-0", partitions=["gpu"])])
    summary = run(fake2, CheckConfig(partition="debug"))
    assert "--partition=debug" in fake2.sruns("gpu-0")[0]
    assert fake2.updates("gpu-0") == [] and summary["drained"] == []


def test_single_gpu_node_passes_on_correctness_alone() -> None:
    fake = FakeSlurm([FakeNode("gpu-0", gres="gpu:l4:1")])
    fake.behaviour["gpu-0"] = prints("single_gpu.txt")
    summary = run(fake)
    assert summary["passed"] == ["gpu-0"] and fake.updates("gpu-0") == []


def test_dry_run_changes_nothing() -> None:
    fake = FakeSlurm([FakeNode("gpu-0"), FakeNode("gpu-1", state=["IDLE", "DRAIN"], reason=SLOW_REASON)])
    fake.behaviour["gpu-0"] = prints("h100_8gpu_slow.txt")
    summary = run(fake, CheckConfig(dry_run=True))
    assert fake.updates("gpu-0") == [] and fake.updates("gpu-1") == []
    assert outcome(summary, "gpu-0")["outcome"] == "slow"
    assert outcome(summary, "gpu-1")["outcome"] == "skipped"


def test_cli_prints_the_documented_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeSlurm(
        [
            FakeNode("gpu-0"),
            FakeNode("gpu-1"),
            FakeNode("gpu-2", state=["IDLE", "DRAIN"], reason=SLOW_REASON),
            FakeNode("gpu-3", state=["MIXED"]),
        ]
    )
    fake.behaviour["gpu-1"] = prints("h100_8gpu_slow.txt")
    monkeypatch.setenv("WARDEN_HEALTH_THRESHOLD_GBPS", "50")
    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(["--concurrency", "2", "--max-bytes", "2g"], slurm=Slurm(fake))
    assert rc == 0
    summary = json.loads(out.getvalue())
    assert summary["thresholdGBps"] == 50.0
    assert summary["nodesChecked"] == 3
    assert summary["passed"] == ["gpu-0", "gpu-2"]
    assert summary["resumed"] == ["gpu-2"]
    assert summary["drained"] == [
        {"node": "gpu-1", "reason": "warden-health: nccl all_reduce_perf busbw 12.3 GB/s < 50.0 GB/s"}
    ]
    assert summary["skipped"] == [{"node": "gpu-3", "why": "busy (MIXED)"}]
    assert set(summary) == {
        "lastRunTime", "thresholdGBps", "nodesChecked", "passed", "drained", "resumed", "skipped", "errors", "nodes",
        "checkFailed",
    }  # fmt: skip
    assert summary["checkFailed"] is None
    assert all("-e" in c and c[c.index("-e") + 1] == "2G" for c in fake.calls if c[0] == "srun")


def test_cli_rejects_bad_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARDEN_HEALTH_CONCURRENCY", "zero")
    with pytest.raises(SystemExit) as e:
        main([], slurm=Slurm(FakeSlurm([])))
    assert e.value.code == 2


def test_cli_fails_when_slurm_cannot_list_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    def broken(argv: Sequence[str], timeout: float) -> CommandResult:
        return CommandResult(tuple(argv), 1, "", "slurm_load_node error: Unable to contact slurm controller\n")

    waits: list[float] = []
    assert main([], slurm=Slurm(broken, sleep=waits.append)) == 1
    assert "Unable to contact slurm controller" in capsys.readouterr().err
    assert len(waits) == 2, "tried again twice before giving up"


def test_srun_failing_before_the_step_reaches_the_node_drains_nothing() -> None:
    """Seen for real (dataplane tier): a check pod whose plugstack.conf names a plugin it lacks makes
    every srun fail at once; that is the pod's fault, not the nodes', so no node may be drained."""
    fake = FakeSlurm([FakeNode("gpu-0"), FakeNode("gpu-1", state=["IDLE", "DRAIN"], reason=SLOW_REASON)])
    local_failure = (
        "srun: error: spank: /etc/slurm/plugstack.conf:4: Failed to load plugin /usr/lib/warden/spank_jail.so.\n"
        "srun: error: Plug-in initialization failed\n"
    )
    fake.behaviour["gpu-0"] = fake.behaviour["gpu-1"] = lambda argv: (1, "", local_failure, False)
    summary = run(fake)
    assert fake.nodes["gpu-0"].state == ["IDLE"]
    assert fake.nodes["gpu-1"].state == ["IDLE", "DRAIN"] and fake.nodes["gpu-1"].reason == SLOW_REASON
    assert summary["drained"] == []
    assert outcome(summary, "gpu-0")["detail"].startswith("srun failed before reaching the node: srun: error: spank:")
    assert any(e.startswith("gpu-0: srun failed before reaching the node") for e in summary["errors"])


def test_task_launch_failure_on_the_node_is_the_nodes_fault() -> None:
    fake = FakeSlurm([FakeNode("gpu-0")])
    fake.behaviour["gpu-0"] = lambda argv: (
        1,
        "",
        "srun: error: Task launch for StepId=7.0 failed on node gpu-0: Communication connection failure\n",
        False,
    )
    summary = run(fake)
    assert outcome(summary, "gpu-0")["outcome"] == "failed"
    assert fake.nodes["gpu-0"].reason.startswith(
        "warden-health: nccl all_reduce_perf failed: exit 1: srun: error: Task"
    )


# --- the check's own failures: nobody is drained for them ------------------------------------------

NO_BINARY = (
    "slurmstepd: error: execve(): all_reduce_perf: No such file or directory\n"
    "srun: error: {node}: task 0: Exited with exit code 2\n"
)


def fails(rc: int, stderr: str) -> Behaviour:
    """srun exits ``rc`` having printed ``stderr`` and nothing on stdout."""
    return lambda argv: (rc, "", stderr, False)


def cuda_failure(node: str) -> str:
    """nccl-tests' message when CUDA cannot start (here: the driver is older than the runtime)."""
    return (
        f"{node}: Test CUDA failure common.cu:1049 'CUDA driver version is insufficient for CUDA runtime version'\n"
        f"srun: error: {node}: task 0: Exited with exit code 1\n"
    )


def test_program_missing_everywhere_drains_nobody_and_says_so() -> None:
    fake = FakeSlurm([FakeNode("gpu-0"), FakeNode("gpu-1")])
    for n in ("gpu-0", "gpu-1"):
        fake.behaviour[n] = fails(2, NO_BINARY.format(node=n))
    summary = run(fake)
    assert fake.updates("gpu-0") == [] and fake.updates("gpu-1") == []
    assert summary["drained"] == [] and summary["nodesChecked"] == 2
    assert summary["checkFailed"] == (
        "all_reduce_perf failed the same way on all 2 nodes tested: "
        "exit 2: slurmstepd: error: execve(): all_reduce_perf: No such file or directory"
    )
    assert [outcome(summary, n)["action"] for n in ("gpu-0", "gpu-1")] == ["none", "none"]


def test_program_missing_on_the_only_node_is_the_checks_failure_too() -> None:
    fake = FakeSlurm([FakeNode("gpu-0")])
    fake.behaviour["gpu-0"] = lambda argv: (2, "", NO_BINARY.format(node="gpu-0"), False)
    summary = run(fake)
    assert fake.updates("gpu-0") == []
    assert summary["checkFailed"] is not None and "the only node tested" in summary["checkFailed"]


def test_cuda_failing_the_same_way_on_every_node_drains_nobody() -> None:
    # each node names itself in the message: the same failure once the names are taken out
    fake = FakeSlurm([FakeNode("gpu-0"), FakeNode("gpu-1"), FakeNode("gpu-2", state=["MIXED"])])
    for n in ("gpu-0", "gpu-1"):
        fake.behaviour[n] = fails(1, cuda_failure(n))
    summary = run(fake)
    assert summary["drained"] == []
    assert summary["checkFailed"] is not None
    assert "on all 2 nodes tested" in summary["checkFailed"]
    assert "CUDA driver version is insufficient" in summary["checkFailed"]
    assert fake.nodes["gpu-0"].state == ["IDLE"] and fake.nodes["gpu-1"].state == ["IDLE"]


def test_cuda_failing_on_one_node_only_drains_that_node() -> None:
    fake = FakeSlurm([FakeNode("gpu-0"), FakeNode("gpu-1")])
    fake.behaviour["gpu-1"] = lambda argv: (1, "", cuda_failure("gpu-1"), False)
    summary = run(fake)
    assert summary["checkFailed"] is None
    assert [d["node"] for d in summary["drained"]] == ["gpu-1"]
    assert fake.nodes["gpu-1"].reason.startswith("warden-health: nccl all_reduce_perf failed: exit 1: ")
    # and alone on a node, CUDA failing is that node's result
    single = FakeSlurm([FakeNode("gpu-0")])
    single.behaviour["gpu-0"] = lambda argv: (1, "", cuda_failure("gpu-0"), False)
    assert run(single)["checkFailed"] is None and single.nodes["gpu-0"].state == ["IDLE", "DRAIN"]


def test_different_failures_are_the_nodes_own() -> None:
    fake = FakeSlurm([FakeNode("gpu-0"), FakeNode("gpu-1")])
    fake.behaviour["gpu-0"] = prints("h100_8gpu_wrong.txt")
    fake.behaviour["gpu-1"] = lambda argv: (1, "", cuda_failure("gpu-1"), False)
    summary = run(fake)
    assert summary["checkFailed"] is None
    assert sorted(d["node"] for d in summary["drained"]) == ["gpu-0", "gpu-1"]


def test_check_failure_keeps_the_drains_this_check_made_before() -> None:
    fake = FakeSlurm([FakeNode("gpu-0"), FakeNode("gpu-1", state=["IDLE", "DRAIN"], reason=SLOW_REASON)])
    for n in ("gpu-0", "gpu-1"):
        fake.behaviour[n] = fails(2, NO_BINARY.format(node=n))
    summary = run(fake)
    assert summary["checkFailed"] is not None
    assert fake.nodes["gpu-0"].state == ["IDLE"]
    assert fake.nodes["gpu-1"].state == ["IDLE", "DRAIN"] and fake.nodes["gpu-1"].reason == SLOW_REASON
    assert outcome(summary, "gpu-1")["action"] == "restored-drain" and summary["resumed"] == []
