"""warden.slurm.model and .cli: parsing real ``scontrol show node --json`` captures, the commands it sends, its errors.

The captures in fixtures/slurm come from Slurm 24.11.5; the command runner is replaced where a test
checks what would be sent (no Slurm in the unit tier), and is the real one where it runs plain processes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from warden.slurm.cli import CommandResult, Slurm, SlurmCommandError, SlurmTimeout, run_command
from warden.slurm.model import SlurmParseError, gpu_count, parse_nodes_json

CAPTURES = Path(__file__).parent / "fixtures" / "slurm"


def test_drained_capture() -> None:
    node1, node2 = parse_nodes_json((CAPTURES / "scontrol_show_node_drained.json").read_text())
    assert node1.name == "node1"
    assert (node1.state, node1.flags) == ("IDLE", frozenset({"DRAIN"}))
    assert node1.drained and not node1.busy and not node1.down
    assert node1.reason == "warden-health: nccl all_reduce_perf busbw 12.3 GB/s < 100.0 GB/s"
    assert node1.gpus == 2 and node1.features == ("warden-group-gpu", "h100")
    assert node1.partitions == ("main",)
    assert node2.gpus == 0 and node2.state == "UNKNOWN"


def test_mixed_capture() -> None:
    node1, node2 = parse_nodes_json((CAPTURES / "scontrol_show_node_mixed.json").read_text())
    assert node1.busy and not node1.drained and node1.describe_state() == "MIXED+PLANNED"
    assert node2.down and node2.held_reason == "bad DIMM, ticket 4711"


def test_stale_reason_of_a_resumed_node_is_not_held() -> None:
    text = (CAPTURES / "scontrol_show_node_drained.json").read_text().replace('"DRAIN"', '"PLANNED"')
    node1 = parse_nodes_json(text)[0]
    assert not node1.drained and node1.reason and node1.held_reason == ""


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("gpu:8", 8),
        ("gpu:h100:8(S:0-1)", 8),
        ("gpu:h100:4(S:0),gpu:h100:4(S:1)", 8),
        ("gpu:fake1:1(S:0),gpu:fake2:1(S:0)", 2),
        ("gpu:a100:2(S:0,1),shard:a100:8", 2),
        ("", 0),
        ("shard:4", 0),
    ],
)
def test_gpu_count(gres: str, gpus: int) -> None:
    assert gpu_count(gres) == gpus


@pytest.mark.parametrize("text", ["", "not json", '{"nodes": 3}', '{"nodes": [], "errors": [{"error": "x"}]}'])
def test_bad_json_is_a_parse_error(text: str) -> None:
    with pytest.raises(SlurmParseError):
        parse_nodes_json(text)


class Recorder:
    def __init__(self, result: CommandResult | None = None) -> None:
        self.calls: list[tuple[tuple[str, ...], float]] = []
        self.result = result

    def __call__(self, argv: Sequence[str], timeout: float) -> CommandResult:
        self.calls.append((tuple(argv), timeout))
        return self.result or CommandResult(tuple(argv), 0, "", "")


def test_drain_and_resume_commands() -> None:
    rec = Recorder()
    slurm = Slurm(rec, timeout=7)
    slurm.drain("gpu-0", "warden-health: nccl all_reduce_perf busbw 1.0 GB/s < 2.0 GB/s")
    slurm.resume("gpu-0")
    assert rec.calls == [
        (
            (
                "scontrol",
                "update",
                "NodeName=gpu-0",
                "State=DRAIN",
                "Reason=warden-health: nccl all_reduce_perf busbw 1.0 GB/s < 2.0 GB/s",
            ),
            7,
        ),
        (("scontrol", "update", "NodeName=gpu-0", "State=RESUME"), 7),
    ]
    with pytest.raises(ValueError):
        slurm.drain("gpu-0", " ")


def test_failed_command_names_command_and_stderr() -> None:
    rec = Recorder(CommandResult(("scontrol",), 1, "", "slurm_update error: Invalid node state specified\n"))
    with pytest.raises(SlurmCommandError) as e:
        Slurm(rec).resume("gpu-0")
    assert str(e.value) == (
        "`scontrol` failed with exit 1: slurm_update error: Invalid node state specified"
    )  # the runner's argv is what is named


BUSY_CTLD = "slurm_load_node error: Socket timed out on send/recv operation\n"  # seen with a busy slurmctld


class Flaky(Recorder):
    """Answers ``failures`` times with slurmctld not answering, then succeeds."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def __call__(self, argv: Sequence[str], timeout: float) -> CommandResult:
        self.calls.append((tuple(argv), timeout))
        if len(self.calls) <= self.failures:
            return CommandResult(tuple(argv), 1, "", BUSY_CTLD)
        return CommandResult(tuple(argv), 0, (CAPTURES / "scontrol_show_node_drained.json").read_text(), "")


def test_reads_and_drains_are_repeated_while_slurmctld_does_not_answer() -> None:
    slept: list[float] = []
    rec = Flaky(failures=2)
    assert Slurm(rec, sleep=slept.append).get_node("node1").name == "node1"
    assert len(rec.calls) == 3 and slept == [2.0, 5.0]
    rec = Flaky(failures=1)
    Slurm(rec, sleep=slept.append).drain("node1", "warden-health: x")
    assert len(rec.calls) == 2
    # three strikes: the error is the command's, naming slurmctld's failure
    with pytest.raises(SlurmCommandError, match="Socket timed out"):
        Slurm(Flaky(failures=3), sleep=slept.append).list_nodes()


def test_commands_that_must_not_run_twice_are_not_repeated() -> None:
    """A RESUME or a reservation that did reach slurmctld would fail a second time for another reason."""
    calls: list[Callable[[Slurm], None]] = [
        lambda s: s.resume("node1"),
        lambda s: s.create_reservation("r", ["node1"], "root", 5),
    ]
    for call in calls:
        rec = Flaky(failures=1)
        with pytest.raises(SlurmCommandError):
            call(Slurm(rec, sleep=lambda _: None))
        assert len(rec.calls) == 1


def test_timeout_is_its_own_error() -> None:
    rec = Recorder(CommandResult(("scontrol", "show", "node", "--json"), -15, "", "", timed_out=True))
    with pytest.raises(SlurmTimeout, match=r"timed out after 30s"):
        Slurm(rec).list_nodes()


def test_run_step_argv_and_not_allocated() -> None:
    busy = (
        "srun: Required node not available (down, drained or reserved)\n"
        "srun: error: Unable to allocate resources: Requested nodes are busy\n"
    )
    rec = Recorder(CommandResult(("srun",), 1, "", busy))
    step = Slurm(rec).run_step(
        "gpu-0", ["all_reduce_perf", "-g", "8"], gpus=8, time_limit_s=90, timeout=200, reservation="r1", partition="gpu"
    )
    assert step.not_allocated and not step.hit_time_limit
    argv, timeout = rec.calls[0]
    assert timeout == 200
    assert argv == (
        "srun", "--nodelist=gpu-0", "--nodes=1", "--ntasks=1", "--exclusive", "--immediate=30", "--time=1:30",
        "--job-name=warden-health", "--gpus-per-node=8", "--reservation=r1", "--partition=gpu",
        "all_reduce_perf", "-g", "8",
    )  # fmt: skip


def test_run_command_real_process() -> None:
    result = run_command(
        [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"], 10
    )
    assert (result.returncode, result.stdout, result.stderr, result.timed_out) == (3, "out\n", "err\n", False)


def test_run_command_timeout_keeps_partial_output() -> None:
    t0 = time.monotonic()
    result = run_command([sys.executable, "-u", "-c", "import time; print('started'); time.sleep(30)"], 0.5)
    assert result.timed_out and result.stdout == "started\n"
    assert time.monotonic() - t0 < 10


def test_run_command_missing_program() -> None:
    result = run_command(["/nonexistent/scontrol", "show"], 5)
    assert result.returncode == 127 and "/nonexistent/scontrol" in result.stderr
