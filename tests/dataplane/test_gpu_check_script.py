"""hack/gpu-check.sh --stand-in: the GPU path of a job step on a machine without a GPU (issue 13).

The script builds the plugin's jail-entry code, makes a jail root from this machine's own system with
no NVIDIA driver in it, and enters it exactly as the SPANK plugin does, before and after injecting the
node's driver with images/worker/warden-driver.sh. Here the driver is the STAND-IN of hack/fakedriver
(its libcuda and libnvidia-ml count stand-in /dev/nvidia<N> that exist only in the script's own mount
namespace); no CUDA kernel can run, so the NCCL check's parser and classifier read a constructed
fixture instead of all_reduce_perf's output. On a GPU machine the same script runs the real driver,
nvidia-smi and all_reduce_perf (docs/health-checks.md).

Needs root, unshare and overlayfs (the script exits 77 otherwise: skipped), no Docker.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack" / "gpu-check.sh"
FIXTURES = REPO / "tests" / "unit" / "fixtures" / "nccl"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mount namespaces, pivot_root)")


class Run:
    def __init__(self, returncode: int, output: str) -> None:
        self.returncode = returncode
        self.output = output
        summary = output.split("\n== summary ==\n", 1)
        assert len(summary) == 2, f"no summary in the output:\n{output[-4000:]}"
        self.figures = dict(
            line.split(": ", 1) for line in summary[1].splitlines() if ": " in line and not line.startswith(" ")
        )

    def section(self, title: str) -> str:
        """The output of one numbered step ("3. control: ...")."""
        return self.output.split(f"\n== {title}", 1)[1].split("\n== ", 1)[0]


def run_script(**env: str) -> Run:
    proc = subprocess.run(
        [str(SCRIPT), "--stand-in"],
        env={**os.environ, "WARDEN_GPU_CHECK_PYTHON": sys.executable, **env},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = proc.stdout + proc.stderr
    if proc.returncode == 77:
        pytest.skip(f"gpu-check.sh cannot run here: {output.strip()[-300:]}")
    return Run(proc.returncode, output)


@pytest.fixture(scope="module")
def default_run() -> Run:
    return run_script()


def test_the_stand_in_driver_reaches_the_jail_only_through_the_injection(default_run: Run) -> None:
    run, fig = default_run, default_run.figures
    assert run.returncode == 0, run.output[-4000:]
    assert fig["result"] == "OK"
    # without the injection: nothing in the jail's loader cache, the jail's stub nvidia-smi, no libcuda
    control = run.section("3. control")
    assert "(no driver library in the loader cache)" in control
    assert "nvidia-smi: no NVIDIA driver on" in control and "[exit 9]" in control
    assert fig["loader_without_injection"] == "libcuda.so.1 not found"
    # with it: the node's driver, found by soname through the loader cache bound over the jail's
    assert fig["driver_version"] == "580.159.04"
    assert fig["driver_version_in_jail"] == "580.159.04 (nvidia-smi in the jail)"
    assert fig["loader_with_injection"] == "/usr/lib/warden/driver/lib/libcuda.so.1 cuInit=0 version=13000 devices=2"
    assert fig["gpus"] == "2 (nvidia-smi -L in the jail)"
    after = run.section("5. in the jail WITH the driver")
    assert "libcuda.so.1 (libc6,x86-64) => /usr/lib/warden/driver/lib/libcuda.so.1" in after
    assert "NVML: /usr/lib/warden/driver/lib/libnvidia-ml.so.1" in after
    assert fig["quickcheck"].startswith("healthy")
    assert fig["jail_entry"].endswith(" ms)")
    # the machine itself is left as it was: no mount, no device file
    assert "host: nothing left behind" in run.output


def test_the_nccl_figures_come_from_the_checks_own_parser_and_classifier(default_run: Run) -> None:
    fig = default_run.figures
    assert fig["all_reduce_perf"].startswith("not run: the stand-in driver runs no CUDA kernel")
    assert fig["nccl_input"].startswith("the fixture tests/unit/fixtures/nccl/h100_8gpu_ok.txt")
    assert fig["nccl_avg_busbw"] == "411.857 GB/s"
    assert fig["nccl_largest_size"] == "8589934592 B: algbw 250.54 GB/s, busbw 438.45 GB/s (out-of-place)"
    assert fig["nccl_outcome"] == "passed: busbw 411.9 GB/s"
    assert fig["nccl_drain_reason"] == "none (passed)"


def test_another_driver_one_gpu_and_a_slow_node_fail_the_run() -> None:
    run = run_script(
        WARDEN_STAND_IN_VERSION="550.54.15",
        WARDEN_STAND_IN_CUDA_VERSION="12040",
        WARDEN_STAND_IN_GPUS="1",
        WARDEN_GPU_CHECK_NCCL_FIXTURE=str(FIXTURES / "h100_8gpu_slow.txt"),
    )
    fig = run.figures
    assert fig["driver_version"] == "550.54.15"
    assert fig["loader_with_injection"] == "/usr/lib/warden/driver/lib/libcuda.so.1 cuInit=0 version=12040 devices=1"
    assert fig["gpus"] == "1 (nvidia-smi -L in the jail)"
    assert fig["quickcheck"].startswith("healthy")
    assert fig["nccl_outcome"].startswith("slow: busbw ")
    assert fig["nccl_drain_reason"].startswith("warden-health: nccl all_reduce_perf busbw ")
    assert run.returncode == 1
    assert fig["result"] == "FAILED (1)"
    assert "host: nothing left behind" in run.output
