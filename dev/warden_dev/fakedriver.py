"""STAND-IN NVIDIA drivers (user-space files only) for the tiers that have no GPU.

`hack/fakedriver` builds a libcuda.so.1, libnvidia-ml.so.1, libnvidia-ptxjitcompiler.so.1 and an
nvidia-smi that answer like a driver of a given version (see its libcuda.c). Two versions are built so
that two GPU workers can run different drivers at once, as nodes of a real cluster do during a driver
roll-out. Each build lands in ``$WARDEN_CACHE/fakedriver/<version>`` laid out as GKE gives the driver to
a container (``lib64/``, ``bin/``: mounted at /usr/local/nvidia); `toolkit_mounts` lays the same files
out the way NVIDIA's container toolkit and CDI do (versioned libraries in the distribution's library
directory, nvidia-smi in /usr/bin, no soname links).
"""

from __future__ import annotations

import os
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from warden_dev.controlplane import cache_dir

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "hack" / "fakedriver"
#: (driver version, CUDA version cuDriverGetVersion reports): an older and a current release
VERSIONS = (("550.54.15", 12040), ("580.159.04", 13000))
#: where GKE's driver installer puts the driver in a GPU container
GKE_DIR = "/usr/local/nvidia"
#: where NVIDIA's container toolkit (and CDI) put driver libraries and programs
TOOLKIT_LIB_DIR = "/usr/lib/x86_64-linux-gnu"
TOOLKIT_BIN_DIR = "/usr/bin"


class FakeDriverError(RuntimeError):
    pass


@dataclass(frozen=True)
class FakeDriver:
    version: str
    cuda_version: int
    path: Path  # holds lib64/ and bin/

    def libraries(self) -> list[Path]:
        """The versioned library files (no links)."""
        return sorted(p for p in (self.path / "lib64").iterdir() if p.is_file() and not p.is_symlink())

    def gke_mounts(self) -> list[tuple[Path, str]]:
        return [(self.path, GKE_DIR)]

    def toolkit_mounts(self) -> list[tuple[Path, str]]:
        files = [(lib, f"{TOOLKIT_LIB_DIR}/{lib.name}") for lib in self.libraries()]
        return [*files, (self.path / "bin" / "nvidia-smi", f"{TOOLKIT_BIN_DIR}/nvidia-smi")]


def build(version: str, cuda_version: int) -> FakeDriver:
    out = cache_dir() / "fakedriver" / version
    proc = subprocess.run(
        ["make", "-s", "-C", str(SOURCE), f"OUT={out}", f"VERSION={version}", f"CUDA_VERSION={cuda_version}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise FakeDriverError(f"building the stand-in driver {version} failed: {proc.stderr.strip()[-2000:]}")
    return FakeDriver(version, cuda_version, out)


def build_all() -> list[FakeDriver]:
    return [build(v, c) for v, c in VERSIONS]


if __name__ == "__main__":
    for d in build_all():
        print(f"{d.version} {d.path}")


#: NVIDIA's character-device major number: /dev/nvidia<N> is (195, N) on every driver.
NVIDIA_MAJOR = 195


def gpu_device(index: int) -> Path:
    """A STAND-IN GPU device file: a character device (195, index) made in the cache, mode 0666 as the
    driver makes its own. No driver owns major 195 here, so opening it fails with ENXIO where the
    devices cgroup allows it and with EPERM where it does not: what job isolation tests look at.
    Distinct numbers matter: a cgroup that denies one GPU must not deny the others (or /dev/null)."""
    path = cache_dir() / "gpudev" / f"nvidia{index}"
    if (
        path.is_char_device()
        and os.major(path.stat().st_rdev) == NVIDIA_MAJOR
        and os.minor(path.stat().st_rdev) == index
    ):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, index))
    os.chmod(path, 0o666)
    return path
