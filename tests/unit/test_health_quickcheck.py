"""warden-quickcheck: device files, the node's driver, nvidia-smi, the jail, and the drains it owns.

GPU device files and a driver cannot exist in the unit tier: the device directory is a temporary
directory with files named like /dev/nvidia0; the driver directory (what the worker entrypoint stages
at /run/warden/driver) holds empty files named like the driver's libraries and an nvidia-smi that is a
small script printing `nvidia-smi -L`'s format; Slurm is health_fakes.FakeSlurm. The dataplane tier
runs the check against the stand-in driver built from hack/fakedriver.
"""

from __future__ import annotations

import io
import stat
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from tests.unit.health_fakes import FakeNode, FakeSlurm
from warden.health.quickcheck import main
from warden.slurm.cli import Slurm

SMI_OK = 'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1d5b)"; echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-77a0)"'


@pytest.fixture
def node_dirs(tmp_path: Path) -> tuple[Path, Path]:
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-caps", "null"]:
        (dev / name).touch()
    jail = tmp_path / "jail"
    (jail / "etc").mkdir(parents=True)
    (jail / "etc" / "warden-jail-release").write_text("warden-jail 0.1.0\n")
    (tmp_path / "driver" / "lib").mkdir(parents=True)
    for name in ["libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1"]:
        (tmp_path / "driver" / "lib" / name).touch()
    smi(tmp_path, SMI_OK)
    return dev, jail


def smi(tmp_path: Path, script: str) -> Path:
    """The staged nvidia-smi: SCRIPT, run only with the staged libraries on LD_LIBRARY_PATH."""
    path = tmp_path / "driver" / "bin" / "nvidia-smi"
    path.parent.mkdir(parents=True, exist_ok=True)
    lib = tmp_path / "driver" / "lib"
    guard = f'[ "$LD_LIBRARY_PATH" = "{lib}" ] || {{ echo "no libnvidia-ml.so" >&2; exit 12; }}'
    path.write_text(f"#!/bin/sh\n{guard}\n{script}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def quickcheck(fake: FakeSlurm, dev: Path, jail: Path, *extra: str) -> tuple[int, str]:
    out = io.StringIO()
    driver = dev.parent / "driver"
    with redirect_stdout(out):
        rc = main(
            ["--node", "gpu-0", "--dev-dir", str(dev), "--jail", str(jail), "--driver-dir", str(driver), *extra],
            slurm=Slurm(fake),
        )
    return rc, out.getvalue()


def test_healthy_node_is_left_alone(node_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    dev, jail = node_dirs
    fake = FakeSlurm([FakeNode("gpu-0", gres="gpu:h100:2")])
    rc, out = quickcheck(fake, dev, jail)
    assert rc == 0 and "healthy" in out
    assert fake.updates("gpu-0") == []


def test_missing_gpu_device_drains_with_own_prefix(node_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    dev, jail = node_dirs
    (dev / "nvidia1").unlink()
    fake = FakeSlurm([FakeNode("gpu-0", gres="gpu:h100:2")])
    smi(tmp_path, 'echo "GPU 0: NVIDIA H100 80GB HBM3"')
    rc, _ = quickcheck(fake, dev, jail)
    assert rc == 1
    assert fake.nodes["gpu-0"].state == ["IDLE", "DRAIN"]
    assert fake.nodes["gpu-0"].reason == ("warden-quickcheck: 1 of 2 GPU device files; nvidia-smi lists 1 of 2 GPUs")


def test_hung_nvidia_smi_and_missing_jail(node_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    dev, jail = node_dirs
    (jail / "etc" / "warden-jail-release").unlink()
    fake = FakeSlurm([FakeNode("gpu-0", gres="gpu:h100:2")])
    fake_smi = smi(tmp_path, "exec sleep 30")
    from warden.health import quickcheck as qc

    settings = qc.Settings("gpu-0", 2, dev_dir=dev, jail=jail, driver_dir=fake_smi.parent.parent, smi_timeout_s=0.3)
    problems = qc.find_problems(settings, 2)
    assert problems == [
        "nvidia-smi hung for 0.3s",
        f"jail not mounted ({jail}/etc/warden-jail-release missing)",
    ]
    assert len(qc.reason_for(problems)) <= 100 and qc.reason_for(problems).startswith("warden-quickcheck: ")
    assert fake.calls == []


def test_recovered_node_is_resumed(node_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    dev, jail = node_dirs
    fake = FakeSlurm(
        [FakeNode("gpu-0", state=["IDLE", "DRAIN"], reason="warden-quickcheck: 1 of 2 GPU device files", gres="gpu:2")]
    )
    rc, out = quickcheck(fake, dev, jail)
    assert rc == 0 and "resumed" in out
    assert fake.nodes["gpu-0"].state == ["IDLE"]


@pytest.mark.parametrize(
    "reason", ["bad DIMM, ticket 4711", "warden-health: nccl all_reduce_perf busbw 12.3 GB/s < 100.0 GB/s"]
)
def test_other_drains_are_never_lifted_or_rewritten(node_dirs: tuple[Path, Path], reason: str) -> None:
    dev, jail = node_dirs
    fake = FakeSlurm([FakeNode("gpu-0", state=["IDLE", "DRAIN"], reason=reason, gres="gpu:2")])
    assert quickcheck(fake, dev, jail)[0] == 0
    (dev / "nvidia0").unlink()
    assert quickcheck(fake, dev, jail)[0] == 1
    assert fake.updates("gpu-0") == [] and fake.nodes["gpu-0"].reason == reason


def test_expected_count_override_and_cpu_nodes(node_dirs: tuple[Path, Path]) -> None:
    dev, jail = node_dirs
    fake = FakeSlurm([FakeNode("gpu-0", gres="")])
    # no gres: two device files are one surprise, and the expected count can be given explicitly
    assert quickcheck(fake, dev, jail)[0] == 1
    assert fake.nodes["gpu-0"].reason == "warden-quickcheck: 2 of 0 GPU device files"
    fake2 = FakeSlurm([FakeNode("gpu-0", gres="")])
    assert quickcheck(fake2, dev, jail, "--expected-gpus", "2")[0] == 0


def test_node_not_registered_yet_is_not_an_error(
    node_dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    # slurmd runs the check once before a dynamic node registers: slurmctld lists no such node
    dev, jail = node_dirs
    fake = FakeSlurm([])
    assert main(["--node", "gpu-0", "--dev-dir", str(dev), "--jail", str(jail)], slurm=Slurm(fake)) == 0
    assert "not registered with slurmctld yet" in capsys.readouterr().out
    assert fake.updates("gpu-0") == []


def test_slurm_unreachable_changes_nothing(node_dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    dev, jail = node_dirs
    fake = FakeSlurm([FakeNode("gpu-0", gres="gpu:2")])
    fake.fail_with = "scontrol: error: slurm_load_node error: Access/permission denied\n"
    assert main(["--node", "gpu-0", "--dev-dir", str(dev), "--jail", str(jail)], slurm=Slurm(fake)) == 2
    assert "cannot ask Slurm" in capsys.readouterr().err


def test_stale_reason_of_a_resumed_node_does_not_block_a_drain(node_dirs: tuple[Path, Path]) -> None:
    # after RESUME, Slurm keeps the old reason text and shows the node NOT_RESPONDING for a moment
    dev, jail = node_dirs
    (dev / "nvidia0").unlink()
    fake = FakeSlurm([FakeNode("gpu-0", state=["IDLE", "NOT_RESPONDING"], reason="RMA: fan failure", gres="gpu:2")])
    assert quickcheck(fake, dev, jail)[0] == 1
    assert fake.nodes["gpu-0"].reason == "warden-quickcheck: 1 of 2 GPU device files"


def test_node_set_down_by_a_person_keeps_its_reason(node_dirs: tuple[Path, Path]) -> None:
    dev, jail = node_dirs
    (dev / "nvidia0").unlink()
    fake = FakeSlurm([FakeNode("gpu-0", state=["DOWN"], reason="PSU swap", gres="gpu:2")])
    rc, out = quickcheck(fake, dev, jail)
    assert rc == 1 and "held by someone else (PSU swap)" in out
    assert fake.updates("gpu-0") == []


@pytest.mark.parametrize(
    ("remove", "reason"),
    [
        (["lib/libcuda.so.1"], "warden-quickcheck: no NVIDIA driver (libcuda.so.1 missing)"),
        (
            ["lib/libcuda.so.1", "lib/libnvidia-ml.so.1", "bin/nvidia-smi"],
            "warden-quickcheck: no NVIDIA driver (libcuda.so.1, libnvidia-ml.so.1, nvidia-smi missing)",
        ),
        (["bin/nvidia-smi"], "warden-quickcheck: no NVIDIA driver (nvidia-smi missing)"),
    ],
)
def test_gpu_node_without_its_driver_is_drained_not_skipped(
    node_dirs: tuple[Path, Path], tmp_path: Path, remove: list[str], reason: str
) -> None:
    dev, jail = node_dirs
    for f in remove:
        (tmp_path / "driver" / f).unlink()
    fake = FakeSlurm([FakeNode("gpu-0", gres="gpu:h100:2")])
    assert quickcheck(fake, dev, jail)[0] == 1
    assert fake.nodes["gpu-0"].state == ["IDLE", "DRAIN"]
    assert fake.nodes["gpu-0"].reason == reason


def test_driver_that_does_not_answer_drains(node_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    dev, jail = node_dirs
    smi(tmp_path, 'echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver." >&2; exit 9')
    fake = FakeSlurm([FakeNode("gpu-0", gres="gpu:h100:2")])
    assert quickcheck(fake, dev, jail)[0] == 1
    assert fake.nodes["gpu-0"].reason.startswith("warden-quickcheck: nvidia-smi exit 9: NVIDIA-SMI has failed")


def test_cpu_node_needs_no_driver(node_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    dev, jail = node_dirs
    for name in ("nvidia0", "nvidia1"):
        (dev / name).unlink()
    (tmp_path / "driver" / "bin" / "nvidia-smi").unlink()
    fake = FakeSlurm([FakeNode("gpu-0", gres="")])
    rc, out = quickcheck(fake, dev, jail)
    assert rc == 0 and "healthy" in out
