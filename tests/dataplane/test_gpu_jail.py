"""The GPU jail (warden/jail-gpu, jail/gpu/) and its populate image, from outside: all_reduce_perf
runs far enough to print its usage (no GPU needed), links the image's own CUDA runtime and NCCL, and
no NVIDIA driver file is anywhere in the root (each node brings its own into job steps).

The images are built on request only: `make images-gpu` (hack/images.sh gpu). Without them these
tests skip, except under WARDEN_REQUIRE_GPU_JAIL=1 (`make dataplane` and `make gpu-jail`, which build
them first), where a missing image fails.
"""

from __future__ import annotations

import os
import shlex

import pytest

from warden_dev.dockercluster import docker, docker_available, missing_images, version

JAIL = f"warden/jail-gpu:{version()}"
POPULATE = f"warden/populate-jail-gpu:{version()}"

#: The driver's user-space files: what a GPU worker shows job steps from its node (the names
#: images/worker/warden-driver.sh looks for; DESIGN's H100 node: libcuda, libnvidia-ml,
#: libnvidia-ptxjitcompiler, libnvidia-nvvm, libnvidia-gpucomp, nvidia-smi).
DRIVER_FILES = (
    "libcuda.so*",
    "libcudadebugger.so*",
    "libnvidia-*.so*",
    "libnvcuvid.so*",
    "nvidia-smi",
    "nvidia-debugdump",
    "nvidia-cuda-mps-*",
)
#: The jail's nvidia-smi stub (jail/setup.sh), which GPU workers bind their node's over.
STUB = "/usr/bin/nvidia-smi"
SYSTEM_DIRS = ("/usr", "/lib", "/lib64", "/opt", "/etc", "/bin", "/sbin", "/var")
HOW_TO_BUILD = "build them with `make images-gpu`, i.e. hack/images.sh spank jail gpu"


@pytest.fixture(scope="module", autouse=True)
def _images() -> None:
    required = os.environ.get("WARDEN_REQUIRE_GPU_JAIL") == "1"
    ok, why = docker_available()
    missing = missing_images([JAIL, POPULATE]) if ok else [JAIL, POPULATE]
    if not missing:
        return
    msg = f"{', '.join(missing)} not built ({why if not ok else HOW_TO_BUILD})"
    if required:
        pytest.fail(f"{msg}; WARDEN_REQUIRE_GPU_JAIL=1 needs it")
    pytest.skip(msg)


def sh(image: str, script: str) -> tuple[int, str]:
    proc = docker("run", "--rm", "--network", "none", "--entrypoint", "bash", image, "-c", script, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def find_driver_files(root: str) -> str:
    """A script printing every driver file under `root`, except the jail's own nvidia-smi stub."""
    names = " -o ".join(f"-name {shlex.quote(n)}" for n in DRIVER_FILES)
    dirs = " ".join(f"{root}{d}" for d in SYSTEM_DIRS)
    stub = f"{root}{STUB}"
    return (
        f"find {dirs} -xdev \\( {names} \\) -print 2>/dev/null | while read -r f; do "
        f'if [ "$f" = {stub} ] && [ "$(head -c 2 "$f")" = "#!" ] && grep -q "no NVIDIA driver" "$f"; '
        'then continue; fi; echo "$f"; done; true'
    )


def test_all_reduce_perf_prints_usage() -> None:
    rc, out = sh(JAIL, "all_reduce_perf -h")
    assert rc == 0, out
    assert out.startswith("USAGE: all_reduce_perf"), out
    for option in ("-g,--ngpus", "-b,--minbytes", "-e,--maxbytes", "-f,--stepfactor"):
        assert option in out, out


def test_all_reduce_perf_links_the_jails_cuda_runtime_and_nccl() -> None:
    rc, out = sh(JAIL, "readlink -f /usr/local/bin/all_reduce_perf; ldd /usr/local/bin/all_reduce_perf")
    assert rc == 0, out
    assert out.startswith("/opt/nccl-tests/bin/all_reduce_perf\n"), out
    assert "not found" not in out, out
    assert "libnccl.so.2 => /" in out and "libcudart.so.12 => /" in out, out
    # libcuda.so.1 is the driver's: loaded at run time from the node, never linked from the image
    assert "libcuda.so" not in out, out


def test_no_nvidia_driver_files_in_the_jail() -> None:
    rc, out = sh(JAIL, find_driver_files(""))
    assert rc == 0 and out == "", f"driver files in {JAIL}:\n{out}"
    rc, out = sh(JAIL, "dpkg-query -W -f='${Package}\\n' | grep -E '^(libcuda1|libnvidia-|nvidia-smi|nvidia-driver)'")
    assert rc == 1 and out == "", f"driver packages installed in {JAIL}:\n{out}"
    # apt refuses them later too (users install into the running jail)
    rc, out = sh(JAIL, "cat /etc/apt/preferences.d/warden-no-gpu-driver")
    assert rc == 0 and "Pin-Priority: -1" in out and "libcuda1" in out, out


def test_release_file_names_cuda_nccl_and_nccl_tests() -> None:
    rc, out = sh(JAIL, "cat /etc/warden-jail-release")
    assert rc == 0, out
    fields = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert fields["NCCL_TESTS_VERSION"] == "2.19.6", out
    assert fields["CUDA_RUNTIME_VERSION"].startswith("12."), out
    assert fields["NCCL_VERSION"].startswith("2."), out
    assert "code=sm_80" in fields["NCCL_TESTS_GENCODE"] and "code=sm_90" in fields["NCCL_TESTS_GENCODE"], out


def test_populate_image_carries_the_gpu_jail() -> None:
    rc, out = sh(
        POPULATE,
        "readlink /jail-rootfs/usr/local/bin/all_reduce_perf; "
        "grep ^NCCL_VERSION= /jail-rootfs/etc/warden-jail-release; " + find_driver_files("/jail-rootfs"),
    )
    assert rc == 0, out
    lines = out.splitlines()
    assert lines[0] == "/opt/nccl-tests/bin/all_reduce_perf", out
    assert lines[1].startswith("NCCL_VERSION=2."), out
    assert lines[2:] == [], f"driver files in {POPULATE}:\n{out}"
