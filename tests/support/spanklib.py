"""The plugin's pure C code (spank/build/libjailhelpers.so) for the unit tier, through cffi."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

SPANK = Path(__file__).resolve().parents[2] / "spank"
LIBRARY = SPANK / "build" / "libjailhelpers.so"


def load(cdef: str) -> tuple[Any, Any]:
    """(ffi, lib) for the declarations ``cdef``. The library is (re)built first: make rebuilds it only
    when a source changed, so a fresh clone needs only a C compiler and make."""
    cffi = pytest.importorskip("cffi")

    if shutil.which("make") is None or shutil.which("cc") is None:
        pytest.skip("needs make and a C compiler to build spank/build/libjailhelpers.so")
    done = subprocess.run(["make", "-s", "-C", str(SPANK), "helpers"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"make -C spank helpers failed:\n{done.stdout}{done.stderr}"
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    return ffi, ffi.dlopen(str(LIBRARY))
