"""The spank_jail plugin's pure C helpers (spank/jail_helpers.c), called through cffi.

The shared library is (re)built with ``make -C spank helpers`` when the module loads, so a fresh
clone only needs a C compiler and make.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support import spanklib

cffi = pytest.importorskip("cffi")


CDEF = """
#define JAIL_PATH_MAX 4096
#define JAIL_MAX_BINDS 64
#define JAIL_ERR_MAX 512
struct jail_bind { char *src; char *dst; bool ro; };
struct jail_config {
    bool disabled;
    bool seccomp_off;
    bool containers;
    char *root;
    size_t nbinds;
    struct jail_bind binds[64];
};
enum jail_mount_kind {
    JAIL_MOUNT_ROOT = 0, JAIL_MOUNT_PROC = 1, JAIL_MOUNT_DEV = 2,
    JAIL_MOUNT_SYS = 3, JAIL_MOUNT_BIND = 4,
};
struct jail_mount {
    enum jail_mount_kind kind;
    const char *src;
    char target[4096];
    char rel[4096];
    bool ro;
};
int jail_config_parse(struct jail_config *cfg, int argc, char *const argv[], char *err, size_t errlen);
void jail_config_clear(struct jail_config *cfg);
int jail_path_normalize(const char *in, char *out, size_t outlen, char *err, size_t errlen);
int jail_path_join(const char *root, const char *path, char *out, size_t outlen,
                   char *err, size_t errlen);
int jail_build_mounts(const struct jail_config *cfg, struct jail_mount *out, size_t max,
                      char *err, size_t errlen);
"""


FFI, LIB = spanklib.load(CDEF)
ERR_MAX = 512


@dataclass(frozen=True)
class Bind:
    src: str
    dst: str
    ro: bool = False


@dataclass(frozen=True)
class Config:
    disabled: bool
    root: str | None
    binds: tuple[Bind, ...]
    seccomp: bool = True
    containers: bool = False


@dataclass(frozen=True)
class Mount:
    kind: str
    src: str
    target: str
    rel: str
    ro: bool


KINDS = {0: "root", 1: "proc", 2: "dev", 3: "sys", 4: "bind"}


def _text(ptr: Any) -> str | None:
    return None if ptr == FFI.NULL else FFI.string(ptr).decode()


class ParseError(Exception):
    pass


@pytest.fixture
def parsed() -> Iterator[Any]:
    """A zeroed struct jail_config, cleared (its strings freed) after the test."""
    cfg = FFI.new("struct jail_config *")
    yield cfg
    LIB.jail_config_clear(cfg)


def _parse_into(cfg: Any, args: Sequence[str]) -> Config:
    keep = [FFI.new("char[]", a.encode()) for a in args]
    argv = FFI.new("char *[]", keep)
    err = FFI.new("char[]", ERR_MAX)
    if LIB.jail_config_parse(cfg, len(args), argv, err, ERR_MAX) != 0:
        raise ParseError(FFI.string(err).decode())
    binds = tuple(Bind(str(_text(b.src)), str(_text(b.dst)), bool(b.ro)) for b in cfg.binds[0 : cfg.nbinds])
    return Config(bool(cfg.disabled), _text(cfg.root), binds, not cfg.seccomp_off, bool(cfg.containers))


def parse(args: Sequence[str]) -> Config:
    cfg = FFI.new("struct jail_config *")
    try:
        return _parse_into(cfg, args)
    finally:
        LIB.jail_config_clear(cfg)


def parse_error(args: Sequence[str]) -> str:
    with pytest.raises(ParseError) as caught:
        parse(args)
    return str(caught.value)


def join(root: str, path: str, outlen: int = 4096) -> str:
    out = FFI.new("char[]", outlen)
    err = FFI.new("char[]", ERR_MAX)
    if LIB.jail_path_join(root.encode(), path.encode(), out, outlen, err, ERR_MAX) != 0:
        raise ParseError(FFI.string(err).decode())
    return str(FFI.string(out).decode())


def normalize(path: str) -> str:
    out = FFI.new("char[]", 4096)
    err = FFI.new("char[]", ERR_MAX)
    if LIB.jail_path_normalize(path.encode(), out, 4096, err, ERR_MAX) != 0:
        raise ParseError(FFI.string(err).decode())
    return str(FFI.string(out).decode())


def mounts(args: Sequence[str], max_mounts: int = 68) -> list[Mount]:
    cfg = FFI.new("struct jail_config *")
    try:
        _parse_into(cfg, args)
        out = FFI.new("struct jail_mount[]", max(max_mounts, 1))
        err = FFI.new("char[]", ERR_MAX)
        n = LIB.jail_build_mounts(cfg, out, max_mounts, err, ERR_MAX)
        if n < 0:
            raise ParseError(FFI.string(err).decode())
        return [
            Mount(
                KINDS[int(m.kind)],
                str(_text(m.src)),
                FFI.string(m.target).decode(),
                FFI.string(m.rel).decode(),
                bool(m.ro),
            )
            for m in out[0:n]
        ]
    finally:
        LIB.jail_config_clear(cfg)


# --- argument parsing: accepted --------------------------------------------------------------


def test_root_alone() -> None:
    assert parse(["root=/mnt/jail"]) == Config(False, "/mnt/jail", ())


def test_root_is_normalised() -> None:
    assert parse(["root=//mnt//jail/./"]).root == "/mnt/jail"


def test_bind_forms_and_order() -> None:
    cfg = parse(
        [
            "root=/mnt/jail",
            "bind=/run/slurm",
            "bind=/mnt/warden/local/tmp:/tmp",
            "bind=/etc/hosts:/etc/hosts:ro",
        ]
    )
    assert cfg.binds == (
        Bind("/run/slurm", "/run/slurm"),
        Bind("/mnt/warden/local/tmp", "/tmp"),
        Bind("/etc/hosts", "/etc/hosts", ro=True),
    )


def test_bind_paths_are_normalised() -> None:
    assert parse(["root=/j", "bind=/a//b/:/c/./d/"]).binds == (Bind("/a/b", "/c/d"),)


def test_disabled_needs_no_root() -> None:
    assert parse(["disabled"]) == Config(True, None, ())
    assert parse(["root=/mnt/jail", "disabled"]) == Config(True, "/mnt/jail", ())


def test_seccomp_filter_is_on_unless_turned_off() -> None:
    assert parse(["root=/j"]).seccomp is True
    assert parse(["root=/j", "seccomp=on"]).seccomp is True
    assert parse(["seccomp=off", "root=/j"]) == Config(False, "/j", (), seccomp=False)
    assert parse(["disabled", "seccomp=off"]) == Config(True, None, (), seccomp=False)


def test_containers_are_off_unless_turned_on() -> None:
    assert parse(["root=/j"]).containers is False
    assert parse(["root=/j", "containers=off"]).containers is False
    assert parse(["containers=on", "root=/j"]) == Config(False, "/j", (), containers=True)
    assert parse(["root=/j", "containers=on", "seccomp=off"]) == Config(False, "/j", (), False, True)


def test_sixty_four_binds_fit() -> None:
    args = ["root=/j", *(f"bind=/src/{i}:/dst/{i}" for i in range(64))]
    assert len(parse(args).binds) == 64


# --- argument parsing: refused, each with its message --------------------------------------


def _unknown(arg: str) -> str:
    return f"unknown argument '{arg}' (expected root=, bind=, seccomp=, containers= or disabled)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "missing required argument root="),
        (["bind=/a"], "missing required argument root="),
        (["foo"], _unknown("foo")),
        (["root=/j", "Root=/k"], _unknown("Root=/k")),
        (["disabled=1"], _unknown("disabled=1")),
        ([""], _unknown("")),
        (["root=/j", "seccomp="], "argument 'seccomp=': expected seccomp=on or seccomp=off"),
        (["root=/j", "seccomp=no"], "argument 'seccomp=no': expected seccomp=on or seccomp=off"),
        (["root=/j", "seccomp=OFF"], "argument 'seccomp=OFF': expected seccomp=on or seccomp=off"),
        (["root=/j", "seccomp"], _unknown("seccomp")),
        (["root=/j", "containers=yes"], "argument 'containers=yes': expected containers=on or containers=off"),
        (
            ["root=/j", "containers=on", "containers=off"],
            "argument 'containers=off': containers= given more than once",
        ),
        (
            ["root=/j", "seccomp=off", "seccomp=off"],
            "argument 'seccomp=off': seccomp= given more than once",
        ),
        (["root="], "argument 'root=': jail root: path is empty"),
        (["root=mnt/jail"], "argument 'root=mnt/jail': jail root: 'mnt/jail' is not an absolute path"),
        (["root=/"], "argument 'root=/': jail root must not be '/'"),
        (["root=//./"], "argument 'root=//./': jail root must not be '/'"),
        (["root=/mnt/../etc"], "argument 'root=/mnt/../etc': jail root: '/mnt/../etc' has a '..' component"),
        (["root=/a\tb"], "argument 'root=/a\tb': jail root: path contains a control character"),
        (["root=/a", "root=/b"], "argument 'root=/b': root= given more than once"),
        (["root=/j", "bind="], "argument 'bind=': bind source is empty"),
        (["root=/j", "bind=:/x"], "argument 'bind=:/x': bind source is empty"),
        (["root=/j", "bind=/a:"], "argument 'bind=/a:': bind destination is empty"),
        (["root=/j", "bind=/a::ro"], "argument 'bind=/a::ro': bind destination is empty"),
        (["root=/j", "bind=tmp"], "argument 'bind=tmp': bind source: 'tmp' is not an absolute path"),
        (
            ["root=/j", "bind=/a:tmp"],
            "argument 'bind=/a:tmp': bind destination: 'tmp' is not an absolute path",
        ),
        (["root=/j", "bind=/a:/b:rw"], "argument 'bind=/a:/b:rw': unknown bind option 'rw' (only 'ro')"),
        (["root=/j", "bind=/a:/b:"], "argument 'bind=/a:/b:': unknown bind option '' (only 'ro')"),
        (["root=/j", "bind=/a:/b:ro:x"], "argument 'bind=/a:/b:ro:x': expected bind=SRC[:DST[:ro]]"),
        (["root=/j", "bind=/a:/"], "argument 'bind=/a:/': bind destination must not be '/'"),
        (["root=/j", "bind=/a:/./"], "argument 'bind=/a:/./': bind destination must not be '/'"),
        (
            ["root=/j", "bind=/a/..:/b"],
            "argument 'bind=/a/..:/b': bind source: '/a/..' has a '..' component",
        ),
        (
            ["root=/j", "bind=/a:/../etc"],
            "argument 'bind=/a:/../etc': bind destination: '/../etc' has a '..' component",
        ),
        (
            ["root=/j", "bind=/a:/x", "bind=/b:/x/"],
            "argument 'bind=/b:/x/': bind destination '/x' given more than once",
        ),
        (
            ["root=/j", "bind=/tmp", "bind=/other:/tmp"],
            "argument 'bind=/other:/tmp': bind destination '/tmp' given more than once",
        ),
    ],
)
def test_refused_arguments(args: list[str], message: str) -> None:
    assert parse_error(args) == message


def test_too_many_binds() -> None:
    args = ["root=/j", *(f"bind=/src/{i}:/dst/{i}" for i in range(65))]
    assert parse_error(args) == "argument 'bind=/src/64:/dst/64': more than 64 bind="


def test_overlong_path_names_the_reason() -> None:
    message = parse_error(["root=/" + "a" * 5000])
    assert message.startswith("argument 'root=/aaa")
    assert message.endswith("' is too long")


def test_error_after_valid_arguments_still_frees(parsed: Any) -> None:
    # the fixture's jail_config_clear must free what was parsed before the error
    with pytest.raises(ParseError, match="unknown argument 'nope'"):
        _parse_into(parsed, ["root=/j", "bind=/a:/b", "nope"])
    assert _text(parsed.root) == "/j"
    assert parsed.nbinds == 1


# --- path normalisation and joining --------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/", "/"),
        ("//", "/"),
        ("/./.", "/"),
        ("/a//b///c", "/a/b/c"),
        ("/a/b/", "/a/b"),
        ("/a/./b/.", "/a/b"),
        ("/a/..b/.../c..", "/a/..b/.../c.."),
    ],
)
def test_normalize(path: str, expected: str) -> None:
    assert normalize(path) == expected


@pytest.mark.parametrize(
    ("root", "path", "expected"),
    [
        ("/mnt/jail", "/home/alice", "/mnt/jail/home/alice"),
        ("/mnt/jail/", "//home//alice/", "/mnt/jail/home/alice"),
        ("//mnt//jail", "/tmp", "/mnt/jail/tmp"),
        ("/mnt/jail", "/", "/mnt/jail"),
        ("/mnt/jail", "/./a/./b/.", "/mnt/jail/a/b"),
        ("/", "/etc", "/etc"),
    ],
)
def test_join(root: str, path: str, expected: str) -> None:
    assert join(root, path) == expected


@pytest.mark.parametrize(
    ("root", "path", "message"),
    [
        ("/mnt/jail", "/../etc", "'/../etc' has a '..' component"),
        ("/mnt/jail", "/a/b/..", "'/a/b/..' has a '..' component"),
        ("/mnt/jail", "/a/../../etc/shadow", "'/a/../../etc/shadow' has a '..' component"),
        ("/mnt/jail", "etc", "'etc' is not an absolute path"),
        ("/mnt/jail", "", "path is empty"),
        ("mnt", "/etc", "jail root: 'mnt' is not an absolute path"),
        ("/mnt/../x", "/etc", "jail root: '/mnt/../x' has a '..' component"),
    ],
)
def test_join_refuses(root: str, path: str, message: str) -> None:
    with pytest.raises(ParseError) as caught:
        join(root, path)
    assert str(caught.value) == message


def test_join_respects_the_output_size() -> None:
    assert join("/mnt/jail", "/abc", outlen=14) == "/mnt/jail/abc"
    with pytest.raises(ParseError, match="too long"):
        join("/mnt/jail", "/abcd", outlen=14)


def test_join_never_leaves_the_root() -> None:
    parts = ["a", "..", ".", "", "...", "..a"]
    for combo in itertools.product(parts, repeat=4):
        path = "/" + "/".join(combo)
        try:
            out = join("/mnt/jail", path)
        except ParseError as e:
            assert ".." in combo, f"{path!r} refused: {e}"
            continue
        assert ".." not in combo, f"{path!r} accepted as {out!r}"
        assert out == "/mnt/jail" or out.startswith("/mnt/jail/"), (path, out)
        assert "//" not in out and not out.endswith("/"), (path, out)


# --- mount list ----------------------------------------------------------------------------


def test_mount_order_root_then_proc_dev_sys_then_binds() -> None:
    got = mounts(
        [
            "root=/mnt/jail/",
            "bind=/mnt/warden/local/tmp:/tmp",
            "bind=/run/slurm",
            "bind=/mnt/warden/local/shm:/dev/shm:ro",
        ]
    )
    assert got == [
        Mount("root", "/mnt/jail", "/mnt/jail", "/", False),
        Mount("proc", "/proc", "/mnt/jail/proc", "/proc", False),
        Mount("dev", "/dev", "/mnt/jail/dev", "/dev", False),
        Mount("sys", "/sys", "/mnt/jail/sys", "/sys", False),
        Mount("bind", "/mnt/warden/local/tmp", "/mnt/jail/tmp", "/tmp", False),
        Mount("bind", "/run/slurm", "/mnt/jail/run/slurm", "/run/slurm", False),
        Mount("bind", "/mnt/warden/local/shm", "/mnt/jail/dev/shm", "/dev/shm", True),
    ]


def test_mounts_for_the_most_binds() -> None:
    args = ["root=/j", *(f"bind=/s{i}:/d{i}" for i in range(64))]
    got = mounts(args)
    assert len(got) == 68
    assert [m.target for m in got[4:]] == [f"/j/d{i}" for i in range(64)]


def test_mount_list_too_small() -> None:
    with pytest.raises(ParseError) as caught:
        mounts(["root=/j", "bind=/a"], max_mounts=4)
    assert str(caught.value) == "more than 4 mounts"


def test_mount_list_needs_a_root() -> None:
    with pytest.raises(ParseError) as caught:
        mounts(["disabled"])
    assert str(caught.value) == "no jail root configured"
