"""Each job's own tmpfs and the process limit: the pure part of the plugin (spank/job_space.c), through
cffi. The mounts themselves: `make -C spank test-job-space` (root) and tests/dataplane/test_job_space.py."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from tests.support import spanklib

pytest.importorskip("cffi")

CDEF = """
struct jail_bind { char *src; char *dst; bool ro; };
struct jail_config {
    bool disabled; bool seccomp_off; bool containers; char *root;
    size_t nbinds; struct jail_bind binds[64];
};
struct job_space { char dst[4096]; unsigned long long max_bytes; };
struct job_space_config { size_t nspaces; struct job_space spaces[8]; unsigned long nproc; };
void jail_config_clear(struct jail_config *cfg);
int job_space_config_parse(struct jail_config *cfg, struct job_space_config *js, int argc,
                           char *const argv[], char *err, size_t errlen);
int job_space_parse_size(const char *text, unsigned long long *out, char *err, size_t errlen);
unsigned long long job_space_size(const struct job_space_config *js, uint64_t job_mem_mib);
int job_space_mount_data(unsigned long long size, char *out, size_t outlen, char *err, size_t errlen);
int job_space_add_binds(struct jail_config *cfg, const struct job_space_config *js, const char *base,
                        uint32_t jobid, char *err, size_t errlen);
"""

FFI, LIB = spanklib.load(CDEF)
ERR_MAX = 512
MIB = 1 << 20


class Refused(Exception):
    pass


@dataclass(frozen=True)
class Parsed:
    spaces: tuple[tuple[str, int], ...]
    nproc: int
    binds: tuple[tuple[str, str], ...]  # after job_space_add_binds for job 42


def parse(args: Sequence[str]) -> Parsed:
    keep = [FFI.new("char[]", a.encode()) for a in args]
    argv = FFI.new("char *[]", keep)
    err = FFI.new("char[]", ERR_MAX)
    cfg = FFI.new("struct jail_config *")
    js = FFI.new("struct job_space_config *")
    try:
        if LIB.job_space_config_parse(cfg, js, len(args), argv, err, ERR_MAX) != 0:
            raise Refused(FFI.string(err).decode())
        spaces = tuple((FFI.string(s.dst).decode(), int(s.max_bytes)) for s in js.spaces[0 : js.nspaces])
        if LIB.job_space_add_binds(cfg, js, b"/run/warden/jobs", 42, err, ERR_MAX) != 0:
            raise Refused(FFI.string(err).decode())
        binds = tuple((FFI.string(b.src).decode(), FFI.string(b.dst).decode()) for b in cfg.binds[0 : cfg.nbinds])
        return Parsed(spaces, int(js.nproc), binds)
    finally:
        LIB.jail_config_clear(cfg)


def refused(args: Sequence[str]) -> str:
    with pytest.raises(Refused) as caught:
        parse(args)
    return str(caught.value)


def size(text: str) -> int:
    out = FFI.new("unsigned long long *")
    err = FFI.new("char[]", ERR_MAX)
    if LIB.job_space_parse_size(text.encode(), out, err, ERR_MAX) != 0:
        raise Refused(FFI.string(err).decode())
    return int(out[0])


def test_what_warden_renders() -> None:
    """The default worker group: /tmp and /dev/shm of each job's own, 8192 processes; each is bound
    from the job's directory (job 42 here) after the node-local binds."""
    got = parse(["root=/mnt/jail", "bind=/scratch", "jobtmpfs=/tmp", "jobtmpfs=/dev/shm:1g", "nproc=8192"])
    assert got.spaces == (("/tmp", 0), ("/dev/shm", 1 << 30))
    assert got.nproc == 8192
    assert got.binds == (
        ("/scratch", "/scratch"),
        ("/run/warden/jobs/42/0", "/tmp"),
        ("/run/warden/jobs/42/1", "/dev/shm"),
    )


def test_without_these_arguments_nothing_changes() -> None:
    got = parse(["root=/mnt/jail", "bind=/tmp"])
    assert got == Parsed((), 0, (("/tmp", "/tmp"),))


def test_destination_is_normalised() -> None:
    assert parse(["root=/j", "jobtmpfs=//var/./tmp/"]).spaces == (("/var/tmp", 0),)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["jobtmpfs=/tmp", "jobtmpfs=/tmp/"], "'/tmp' given more than once"),
        (["jobtmpfs=/"], "must not be '/'"),
        (["jobtmpfs="], "expected jobtmpfs=DST[:SIZE]"),
        (["jobtmpfs=tmp"], "not an absolute path"),
        (["jobtmpfs=/a/../b"], "'..'"),
        (["jobtmpfs=/tmp:"], "size is empty"),
        (["jobtmpfs=/tmp:0"], "is zero"),
        (["jobtmpfs=/tmp:1x"], "unknown suffix"),
        (["jobtmpfs=/tmp:1gb"], "unknown suffix"),
        (["jobtmpfs=/tmp:-1"], "not a number"),
        (["jobtmpfs=/tmp:99999999999999999999"], "too large"),
        (["jobtmpfs=/tmp:20000000000t"], "too large"),
        (["bind=/tmp", "jobtmpfs=/tmp"], "also a bind= destination"),
        (["nproc="], "expected nproc=N"),
        (["nproc=12a"], "a whole number"),
        (["nproc=99999999999"], "too large"),
        (["nproc=1", "nproc=2"], "more than once"),
        ([f"jobtmpfs=/t{i}" for i in range(9)], "more than 8 jobtmpfs="),
        (["jobtmpfs=/tmp", "bogus"], "unknown argument 'bogus'"),
    ],
)
def test_refused(args: list[str], message: str) -> None:
    assert message in refused(["root=/mnt/jail", *args])


def test_sizes_are_binary_multiples() -> None:
    assert [size(s) for s in ("1", "4k", "4K", "3m", "2G", "1t")] == [1, 4096, 4096, 3 * MIB, 2 << 30, 1 << 40]


@pytest.mark.parametrize(
    ("caps", "mem_mib", "expected"),
    [
        ((0, 0), 512, 448 * MIB),  # no cap: the job's memory on the node, less 64 MiB for slurmstepd
        ((0,), 100, 50 * MIB),  # ... less at most half of it
        ((0,), 1, 1 * MIB),
        ((1 << 30, 0), 512, 448 * MIB),  # the smallest of all that bound it
        ((0, 100 * MIB), 512, 100 * MIB),
        ((300 * MIB, 100 * MIB), 0, 100 * MIB),  # the job's memory unknown: the caps alone
        ((0, 0), 0, 0),  # nothing: the kernel's default
    ],
)
def test_one_tmpfs_per_job_sized_by_its_memory_and_the_caps(caps: tuple[int, ...], mem_mib: int, expected: int) -> None:
    js = FFI.new("struct job_space_config *")
    js.nspaces = len(caps)
    for i, cap in enumerate(caps):
        js.spaces[i].max_bytes = cap
    assert LIB.job_space_size(js, mem_mib) == expected


def test_mount_data() -> None:
    out = FFI.new("char[]", 64)
    err = FFI.new("char[]", ERR_MAX)
    assert LIB.job_space_mount_data(5 * MIB, out, 64, err, ERR_MAX) == 0
    assert FFI.string(out) == b"mode=0700,size=5242880"
    assert LIB.job_space_mount_data(0, out, 64, err, ERR_MAX) == 0
    assert FFI.string(out) == b"mode=0700"
    assert LIB.job_space_mount_data(5 * MIB, out, 8, err, ERR_MAX) == -1


def test_too_many_binds_are_refused() -> None:
    args = ["root=/j", *[f"bind=/b{i}" for i in range(63)], "jobtmpfs=/tmp", "jobtmpfs=/dev/shm"]
    assert "more than 64 bind= and jobtmpfs=" in refused(args)
