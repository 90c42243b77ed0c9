"""The all_reduce_perf parser on outputs in nccl-tests' own layout (see fixtures/nccl/README.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from warden.health.nccl import ParseStatus, parse_all_reduce_perf

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_eight_gpu_run_gives_average_rows_and_devices() -> None:
    result = parse_all_reduce_perf(fixture("h100_8gpu_ok.txt"))
    assert result.status is ParseStatus.OK
    assert result.avg_busbw_gbps == pytest.approx(411.857)
    assert [r.size_bytes for r in result.rows] == [2**29, 2**30, 2**31, 2**32, 2**33]
    first = result.rows[0]
    assert (first.count, first.dtype, first.redop, first.root) == (134217728, "float", "sum", -1)
    assert first.out_of_place is not None and first.in_place is not None
    assert first.out_of_place.time_us == pytest.approx(2534.89)
    assert first.out_of_place.busbw_gbps == pytest.approx(370.64)
    assert first.in_place.busbw_gbps == pytest.approx(369.17)
    assert result.max_busbw_gbps == pytest.approx(438.45)
    assert len(result.devices) == 8
    assert {d.host for d in result.devices} == {"gpu-b-3"}
    assert result.devices[7].device == 7 and result.devices[7].name == "NVIDIA H100 80GB HBM3"
    assert result.wrong == 0 and result.out_of_bounds == 0


def test_single_gpu_reports_zero_bus_bandwidth() -> None:
    result = parse_all_reduce_perf(fixture("single_gpu.txt"))
    assert result.status is ParseStatus.OK
    assert result.avg_busbw_gbps == 0.0
    assert len(result.devices) == 1
    assert len(result.rows) == 3
    assert all(r.out_of_place and r.out_of_place.algbw_gbps and r.out_of_place.algbw_gbps > 200 for r in result.rows)


def test_nccl_log_lines_are_ignored_even_inside_a_row() -> None:
    clean = parse_all_reduce_perf(fixture("h100_8gpu_ok.txt"))
    noisy = parse_all_reduce_perf(fixture("h100_8gpu_nccl_info.txt"))
    assert noisy.status is ParseStatus.OK
    assert noisy.avg_busbw_gbps == clean.avg_busbw_gbps
    # the first row was split by "Channel ... via P2P" lines and must come back whole, root included
    assert noisy.rows == clean.rows
    assert len(noisy.devices) == 8


def test_wrong_values_fail_the_run() -> None:
    result = parse_all_reduce_perf(fixture("h100_8gpu_wrong.txt"))
    assert result.status is ParseStatus.WRONG_VALUES
    assert not result.ok
    assert result.out_of_bounds == 12
    assert result.wrong == 3 + 9 + 12
    assert result.rows[2].out_of_place is not None and result.rows[2].out_of_place.wrong == 3
    assert result.avg_busbw_gbps is not None  # the bandwidth is still there to report


def test_validation_off_reads_na_as_unknown_not_zero() -> None:
    result = parse_all_reduce_perf(fixture("h100_8gpu_nocheck.txt"))
    assert result.status is ParseStatus.OK
    assert all(r.out_of_place and r.out_of_place.wrong is None for r in result.rows)
    assert all(r.in_place and r.in_place.wrong is None for r in result.rows)
    assert result.rows[0].in_place is not None and result.rows[0].in_place.busbw_gbps == pytest.approx(369.17)


def test_output_cut_mid_table_is_truncated() -> None:
    result = parse_all_reduce_perf(fixture("h100_8gpu_truncated.txt"))
    assert result.status is ParseStatus.TRUNCATED
    assert result.avg_busbw_gbps is None
    assert len(result.rows) == 3  # the half-written fourth row is not taken as a row


def test_nccl_failure_is_an_error_with_its_message() -> None:
    result = parse_all_reduce_perf(fixture("h100_8gpu_nccl_failure.txt"))
    assert result.status is ParseStatus.ERROR
    assert any("Test NCCL failure common.cu:1085" in e for e in result.errors)
    assert len(result.rows) == 2


@pytest.mark.parametrize("text", ["", "\n\n", "srun: error: Unable to allocate resources: Requested nodes are busy\n"])
def test_no_nccl_tests_output_is_empty(text: str) -> None:
    result = parse_all_reduce_perf(text)
    assert result.status is ParseStatus.EMPTY
    assert result.rows == () and result.avg_busbw_gbps is None


def test_empty_fixture_file_is_empty() -> None:
    assert parse_all_reduce_perf(fixture("empty.txt")).status is ParseStatus.EMPTY


def test_header_only_is_truncated_not_empty() -> None:
    head = fixture("h100_8gpu_ok.txt").split("   536870912")[0]
    result = parse_all_reduce_perf(head)
    assert result.status is ParseStatus.TRUNCATED
    assert len(result.devices) == 8


def test_optional_timestamp_column_does_not_shift_cells() -> None:
    text = (
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong"
        "     time   algbw   busbw  #wrong           timestamp\n"
        "     1048576        262144     float     sum      -1    21.93   47.81   83.67       0"
        "    21.52   48.72   85.27       0  2026-11-22 04:00:01\n"
        "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 84.47 \n"
    )
    result = parse_all_reduce_perf(text)
    assert result.status is ParseStatus.OK
    assert result.rows[0].in_place is not None and result.rows[0].in_place.busbw_gbps == pytest.approx(85.27)
    assert result.avg_busbw_gbps == pytest.approx(84.47)


def test_stderr_warnings_between_rows_are_ignored() -> None:
    lines = fixture("h100_8gpu_ok.txt").splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  1073741824"))
    lines.insert(at, "WARNING: could not set CPU affinity for rank 3")
    lines.insert(at, "srun: Warning: can't honor --ntasks-per-node set to 1")
    result = parse_all_reduce_perf("\n".join(lines))
    assert result.status is ParseStatus.OK
    assert len(result.rows) == 5
