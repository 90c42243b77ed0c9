"""warden-quickcheck: device files, nvidia-smi, the jail, and the drains it owns.

GPU device files and nvidia-smi cannot exist in the unit tier: the device directory is a temporary
directory with files named like /dev/nvidia0, nvidia-smi is a small script printing `nvidia-smi -L`'s
format, and Slurm is health_fakes.FakeSlurm.
"""

from __future__ import annotations

import io
import stat
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from tests.unit.health_fakes import FakeNode, FakeSlurm
from warden.health.quickcheck import main
from warden.slurm import Slurm


@pytest.fixture
def node_dirs(tmp_path: Path) -> tuple[Path, Path]:
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ["nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-caps", "null"]:
        (dev / name).touch()
    jail = tmp_path / "jail"
    (jail / "etc").mkdir(parents=True)
    (jail / "etc" / "warden-jail-release").write_text("warden-jail 0.1.0\n")
    return dev, jail


def smi(tmp_path: Path, script: str) -> str:
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + script + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


SMI_OK = 'echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1d5b)"; echo "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-77a0)"'


def quickcheck(fake: FakeSlurm, dev: Path, jail: Path, *extra: str) -> tuple[int, str]:
    out = io.StringIO()
    with redirect_stdout(out):
        rc = main(["--node", "gpu-0", "--dev-dir", str(dev), "--jail", str(jail), *extra], slurm=Slurm(fake))
    return rc, out.getvalue()


def test_healthy_node_is_left_alone(node_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    dev, jail = node_dirs
    fake = FakeSlurm([FakeNode("gpu-0", gres="gpu:h100:2")])
    rc, out = quickcheck(fake, dev, jail, "--nvidia-smi", smi(tmp_path, SMI_OK))
    assert rc == 0 and "healthy" in out
    assert fake.updates("gpu-0") == []


def test_missing_gpu_device_drains_with_own_prefix(node_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    dev, jail = node_dirs
    (dev / "nvidia1").unlink()
    fake = FakeSlurm([FakeNode("gpu-0", gres="gpu:h100:2")])
    rc, _ = quickcheck(fake, dev, jail, "--nvidia-smi", smi(tmp_path, 'echo "GPU 0: NVIDIA H100 80GB HBM3"'))
    assert rc == 1
    assert fake.nodes["gpu-0"].state == ["IDLE", "DRAIN"]
    assert fake.nodes["gpu-0"].reason == ("warden-quickcheck: 1 of 2 GPU device files; nvidia-smi lists 1 of 2 GPUs")


def test_hung_nvidia_smi_and_missing_jail(node_dirs: tuple[Path, Path], tmp_path: Path) -> None:
    dev, jail = node_dirs
    (jail / "etc" / "warden-jail-release").unlink()
    fake = FakeSlurm([FakeNode("gpu-0", gres="gpu:h100:2")])
    fake_smi = smi(tmp_path, "exec sleep 30")
    from warden.health import quickcheck as qc

    settings = qc.Settings("gpu-0", 2, dev_dir=dev, jail=jail, nvidia_smi=fake_smi, smi_timeout_s=0.3)
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
    rc, out = quickcheck(fake, dev, jail, "--nvidia-smi", smi(tmp_path, SMI_OK))
    assert rc == 0 and "resumed" in out
    assert fake.nodes["gpu-0"].state == ["IDLE"]


@pytest.mark.parametrize(
    "reason", ["bad DIMM, ticket 4711", "warden-health: nccl all_reduce_perf busbw 12.3 GB/s < 100.0 GB/s"]
)
def test_other_drains_are_never_lifted_or_rewritten(node_dirs: tuple[Path, Path], reason: str) -> None:
    dev, jail = node_dirs
    fake = FakeSlurm([FakeNode("gpu-0", state=["IDLE", "DRAIN"], reason=reason, gres="gpu:2")])
    assert quickcheck(fake, dev, jail, "--nvidia-smi", "")[0] == 0
    (dev / "nvidia0").unlink()
    assert quickcheck(fake, dev, jail, "--nvidia-smi", "")[0] == 1
    assert fake.updates("gpu-0") == [] and fake.nodes["gpu-0"].reason == reason


def test_expected_count_override_and_cpu_nodes(node_dirs: tuple[Path, Path]) -> None:
    dev, jail = node_dirs
    fake = FakeSlurm([FakeNode("gpu-0", gres="")])
    # no gres: two device files are one surprise, and the expected count can be given explicitly
    assert quickcheck(fake, dev, jail, "--nvidia-smi", "")[0] == 1
    assert fake.nodes["gpu-0"].reason == "warden-quickcheck: 2 of 0 GPU device files"
    fake2 = FakeSlurm([FakeNode("gpu-0", gres="")])
    assert quickcheck(fake2, dev, jail, "--nvidia-smi", "", "--expected-gpus", "2")[0] == 0


def test_slurm_unreachable_changes_nothing(node_dirs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    dev, jail = node_dirs
    fake = FakeSlurm([])  # the node is unknown: scontrol fails
    assert main(["--node", "gpu-0", "--dev-dir", str(dev), "--jail", str(jail)], slurm=Slurm(fake)) == 2
    assert "cannot ask Slurm" in capsys.readouterr().err


def test_stale_reason_of_a_resumed_node_does_not_block_a_drain(node_dirs: tuple[Path, Path]) -> None:
    # after RESUME, Slurm keeps the old reason text and shows the node NOT_RESPONDING for a moment
    dev, jail = node_dirs
    (dev / "nvidia0").unlink()
    fake = FakeSlurm([FakeNode("gpu-0", state=["IDLE", "NOT_RESPONDING"], reason="RMA: fan failure", gres="gpu:2")])
    assert quickcheck(fake, dev, jail, "--nvidia-smi", "")[0] == 1
    assert fake.nodes["gpu-0"].reason == "warden-quickcheck: 1 of 2 GPU device files"


def test_node_set_down_by_a_person_keeps_its_reason(node_dirs: tuple[Path, Path]) -> None:
    dev, jail = node_dirs
    (dev / "nvidia0").unlink()
    fake = FakeSlurm([FakeNode("gpu-0", state=["DOWN"], reason="PSU swap", gres="gpu:2")])
    rc, out = quickcheck(fake, dev, jail, "--nvidia-smi", "")
    assert rc == 1 and "held by someone else (PSU swap)" in out
    assert fake.updates("gpu-0") == []
