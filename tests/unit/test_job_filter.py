"""The job step's seccomp filter (spank/job_filter.c), built through cffi and run in a small classic-BPF
interpreter over every system call number of each ABI, for both architectures whatever this machine
is. What it must decide is written here from the kernel's headers and the documented policy
(spank/README.md, "Seccomp filter"), not from the C tables; spank/tests/job_filter_test.c checks
the same filter against the running kernel, as root.
"""

from __future__ import annotations

import platform
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support import spanklib

cffi = pytest.importorskip("cffi")


CDEF = """
struct sock_filter { uint16_t code; uint8_t jt; uint8_t jf; uint32_t k; };
enum job_filter_action { JOB_FILTER_EPERM = 0, JOB_FILTER_ENOSYS = 1, JOB_FILTER_EPERM_IF_FLAGS = 2 };
struct job_filter_rule { const char *name; uint32_t nr; enum job_filter_action action; uint32_t mask; };
struct job_filter_abi {
    const char *name; uint32_t arch; uint32_t nr_limit;
    const struct job_filter_rule *rules; size_t nrules;
};
uint32_t job_filter_native_arch(void);
const struct job_filter_abi *job_filter_abi(uint32_t native, size_t i);
int job_filter_build(uint32_t native, struct sock_filter *out, size_t max, char *err, size_t errlen);
"""


FFI, LIB = spanklib.load(CDEF)
ERR_MAX = 512

# include/uapi/linux/audit.h
ARCH_X86_64, ARCH_I386, ARCH_AARCH64, ARCH_ARM = 0xC000003E, 0x40000003, 0xC00000B7, 0x40000028
ARCH_NAMES = {ARCH_X86_64: "x86_64", ARCH_I386: "i386", ARCH_AARCH64: "aarch64"}
# include/uapi/linux/seccomp.h
RET_KILL_PROCESS, RET_ERRNO, RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
EPERM, ENOSYS = 1, 38
ALLOW, KILL = "allow", "kill"
# include/uapi/linux/sched.h
CLONE_NEW = {
    "CLONE_NEWTIME": 0x80,
    "CLONE_NEWNS": 0x20000,
    "CLONE_NEWCGROUP": 0x2000000,
    "CLONE_NEWUTS": 0x4000000,
    "CLONE_NEWIPC": 0x8000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
CLONE_VM, CLONE_FS, CLONE_FILES, CLONE_SIGHAND, CLONE_THREAD = 0x100, 0x200, 0x400, 0x800, 0x10000
SIGCHLD = 17
X32_BIT = 0x40000000

REPO = Path(__file__).resolve().parents[2]
POLICY_FILE = REPO / "spank" / "syscalls.txt"
WORKER_PROFILE = REPO / "images" / "worker" / "seccomp.json"


@dataclass(frozen=True)
class Decision:
    job: str  # eperm, ns, enosys or "-"
    profile: str  # docker, sysadmin, allow or refuse
    nr: int | None  # calls since 5.1: the number on every ABI
    reason: str


def _policy() -> dict[str, Decision]:
    """spank/syscalls.txt: the one list (name, job filter, worker profile, number, reason)."""
    out: dict[str, Decision] = {}
    for line in POLICY_FILE.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, job, profile, nr, reason = line.split(maxsplit=4)
        assert name not in out, f"{name} twice in {POLICY_FILE}"
        out[name] = Decision(job, profile, None if nr == "-" else int(nr), reason)
    return out


POLICY = _policy()
# calls that always fail with EPERM, those that fail with ENOSYS (clone3: libc then uses clone), and
# those that fail when their flags ask for a new namespace
ALWAYS_EPERM = {n for n, d in POLICY.items() if d.job == "eperm"}
ALWAYS_ENOSYS = {n for n, d in POLICY.items() if d.job == "enosys"}
NS_FLAGS = {n for n, d in POLICY.items() if d.job == "ns"}
# Left alone on purpose, each with its reason in the list (chroot needs CAP_SYS_CHROOT, which no user
# gets without a user namespace; the keyrings serve Kerberos and NFS and the worker's profile refuses
# them; the newer calls only touch the caller's own things).
NOT_FILTERED = {n for n, d in POLICY.items() if d.job == "-"}

# Calls newer than the installed headers (linux-libc-dev 6.1 here) take their number from the list.
NEWER_THAN_HEADERS = {n: d.nr for n, d in POLICY.items() if d.nr is not None}


def test_the_list_is_complete_and_says_why() -> None:
    assert {"io_uring_setup", "io_uring_enter", "io_uring_register", "mount", "setns"} <= ALWAYS_EPERM
    assert {"unshare", "clone"} == NS_FLAGS and {"clone3"} == ALWAYS_ENOSYS
    for name, d in POLICY.items():
        assert d.job in {"eperm", "ns", "enosys", "-"}, name
        assert d.profile in {"docker", "sysadmin", "allow", "refuse"}, name
        assert len(d.reason) >= 8, f"{name}: no reason"
    for name in ("userfaultfd", "kexec_load", "kexec_file_load", "open_by_handle_at", "landlock_create_ruleset",
                 "process_madvise", "memfd_secret", "mseal", "listmount", "statmount", "lsm_get_self_attr",
                 "lsm_set_self_attr", "lsm_list_modules", "map_shadow_stack"):  # fmt: skip
        assert name in POLICY, f"{name}: no decision"


INCLUDE = Path("/usr/include")
HEADERS = {
    ARCH_X86_64: INCLUDE / "x86_64-linux-gnu/asm/unistd_64.h",
    ARCH_I386: INCLUDE / "x86_64-linux-gnu/asm/unistd_32.h",
    ARCH_AARCH64: INCLUDE / "asm-generic/unistd.h",  # arm64 uses the generic table
}


def _syscalls(arch: int) -> dict[str, int]:
    """name -> number from the kernel headers installed here (linux-libc-dev)."""
    header = HEADERS[arch]
    if not header.exists():
        pytest.skip(f"no {header} (linux-libc-dev) to read the {ARCH_NAMES[arch]} system call numbers from")
    found = {m[1]: int(m[2]) for m in re.finditer(r"^#define __NR_(\w+)\s+(\d+)\s*$", header.read_text(), re.M)}
    for name, nr in NEWER_THAN_HEADERS.items():  # the list's numbers agree with the headers that have them
        assert found.get(name, nr) == nr, f"{name}: {nr} in {POLICY_FILE.name}, {found[name]} in {header}"
    return {**NEWER_THAN_HEADERS, **found}


# --- a classic BPF interpreter, as much of one as seccomp filters may use -----------------------

BPF_LD_W_ABS = 0x20
BPF_JEQ_K, BPF_JGT_K, BPF_JGE_K, BPF_JSET_K, BPF_JA = 0x15, 0x25, 0x35, 0x45, 0x05
BPF_RET_K = 0x06


@dataclass(frozen=True)
class Insn:
    code: int
    jt: int
    jf: int
    k: int


def build(native: int, max_insns: int = 256) -> list[Insn]:
    out = FFI.new("struct sock_filter[]", max(max_insns, 1))
    err = FFI.new("char[]", ERR_MAX)
    n = LIB.job_filter_build(native, out, max_insns, err, ERR_MAX)
    if n < 0:
        raise ValueError(FFI.string(err).decode())
    return [Insn(i.code, i.jt, i.jf, i.k) for i in out[0:n]]


def validate(prog: list[Insn]) -> None:
    """What the kernel's seccomp_check_filter and bpf_check_classic insist on, for the subset used."""
    assert 0 < len(prog) <= 4096
    for pc, insn in enumerate(prog):
        if insn.code == BPF_LD_W_ABS:
            assert insn.k % 4 == 0 and insn.k < 64, f"{pc}: load outside struct seccomp_data"
        elif insn.code in (BPF_JEQ_K, BPF_JGT_K, BPF_JGE_K, BPF_JSET_K):
            assert pc + 1 + max(insn.jt, insn.jf) < len(prog), f"{pc}: jump out of the program"
        elif insn.code == BPF_RET_K:
            pass
        else:
            raise AssertionError(f"{pc}: unexpected instruction {insn}")
    assert prog[-1].code == BPF_RET_K, "the program must end with a return"


def run(prog: list[Insn], arch: int, nr: int, arg0: int = 0) -> int:
    data = struct.pack("<iIQ6Q", nr, arch, 0x7F0000001000, arg0 & (2**64 - 1), 0, 0, 0, 0, 0)
    a, pc = 0, 0
    while True:
        insn = prog[pc]
        pc += 1
        if insn.code == BPF_LD_W_ABS:
            (a,) = struct.unpack_from("<I", data, insn.k)
        elif insn.code == BPF_JEQ_K:
            pc += insn.jt if a == insn.k else insn.jf
        elif insn.code == BPF_JGE_K:
            pc += insn.jt if a >= insn.k else insn.jf
        elif insn.code == BPF_JGT_K:
            pc += insn.jt if a > insn.k else insn.jf
        elif insn.code == BPF_JSET_K:
            pc += insn.jt if a & insn.k else insn.jf
        elif insn.code == BPF_RET_K:
            return insn.k
        else:
            raise AssertionError(f"unexpected instruction {insn}")


def outcome(ret: int) -> str | int:
    """ALLOW, KILL or the errno the call fails with."""
    if ret == RET_ALLOW:
        return ALLOW
    if ret == RET_KILL_PROCESS:
        return KILL
    assert ret & 0xFFFF0000 == RET_ERRNO, hex(ret)
    return ret & 0xFFFF


def expected(name: str | None, arg0: int) -> str | int:
    """The policy, for a call of an ABI the filter knows."""
    if name in ALWAYS_EPERM:
        return EPERM
    if name in ALWAYS_ENOSYS:
        return ENOSYS
    flags = arg0 & 0xFFFFFFFF  # the kernel reads the low 32 bits of clone's flags
    if name == "unshare":
        return EPERM if flags & sum(CLONE_NEW.values()) else ALLOW
    if name == "clone":  # the low byte is the exit signal: 0x80 is no CLONE_NEWTIME there
        return EPERM if flags & ~0xFF & sum(CLONE_NEW.values()) else ALLOW
    return ALLOW


NATIVE = {"x86_64": ARCH_X86_64, "aarch64": ARCH_AARCH64}
ABIS = {ARCH_X86_64: [ARCH_X86_64, ARCH_I386], ARCH_AARCH64: [ARCH_AARCH64]}
ARG0_SAMPLES = [
    0,
    SIGCHLD,
    CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD,
    CLONE_FILES,
    0x80,
    0xFFFFFFFF00000000,  # only high bits: the kernel ignores (clone) or refuses (unshare) them
    *CLONE_NEW.values(),
    *(v | SIGCHLD | CLONE_FILES for v in CLONE_NEW.values()),
    0xFFFFFFFF,
]


@pytest.mark.parametrize("native", [ARCH_X86_64, ARCH_AARCH64], ids=["x86_64", "aarch64"])
def test_every_call_of_every_abi_gets_what_the_policy_says(native: int) -> None:
    prog = build(native)
    validate(prog)
    for arch in ABIS[native]:
        names = {nr: name for name, nr in _syscalls(arch).items()}
        for nr in range(0, max(names) + 64):  # numbers no kernel has yet are allowed (ENOSYS there)
            for arg0 in ARG0_SAMPLES:
                got = outcome(run(prog, arch, nr, arg0))
                want = expected(names.get(nr), arg0)
                assert got == want, f"{ARCH_NAMES[arch]} {names.get(nr, '?')} ({nr}) arg0={arg0:#x}: {got} != {want}"


@pytest.mark.parametrize("native", [ARCH_X86_64, ARCH_AARCH64], ids=["x86_64", "aarch64"])
def test_what_is_left_alone_is_allowed(native: int) -> None:
    """Spelled out: the calls README says stay open, and the calls threads and fork use."""
    prog = build(native)
    calls = _syscalls(native)
    for name in sorted(NOT_FILTERED & calls.keys()):
        assert outcome(run(prog, native, calls[name])) == ALLOW, name
    thread = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD
    assert outcome(run(prog, native, calls["clone"], thread)) == ALLOW
    assert outcome(run(prog, native, calls["clone"], SIGCHLD)) == ALLOW
    assert outcome(run(prog, native, calls["unshare"], CLONE_FILES | CLONE_FS)) == ALLOW


def test_x32_calls_fail_with_enosys() -> None:
    prog = build(ARCH_X86_64)
    for nr in (0, 39, 272, 435, 512, 547, 0x3FFFFFFF, 0x7FFFFFFF):
        assert outcome(run(prog, ARCH_X86_64, X32_BIT | nr)) == ENOSYS, nr
    assert outcome(run(prog, ARCH_X86_64, -1)) == ENOSYS  # 0xffffffff: no call, ENOSYS anyway


@pytest.mark.parametrize(
    ("native", "foreign"),
    [
        (ARCH_X86_64, ARCH_AARCH64),
        (ARCH_X86_64, ARCH_ARM),
        (ARCH_X86_64, 0),
        (ARCH_AARCH64, ARCH_ARM),  # a 32-bit ARM program on arm64
        (ARCH_AARCH64, ARCH_X86_64),
        (ARCH_AARCH64, ARCH_I386),
    ],
)
def test_an_abi_the_filter_does_not_know_is_killed(native: int, foreign: int) -> None:
    prog = build(native)
    for nr in (0, 1, 20, 39, 97, 272, 310, 435):
        assert outcome(run(prog, foreign, nr)) == KILL


def _abis(native: int) -> list[Any]:
    out: list[Any] = []
    while (abi := LIB.job_filter_abi(native, len(out))) != FFI.NULL:
        out.append(abi)
    return out


@pytest.mark.parametrize("native", [ARCH_X86_64, ARCH_AARCH64], ids=["x86_64", "aarch64"])
def test_the_tables_use_the_kernel_headers_numbers(native: int) -> None:
    abis = _abis(native)
    assert [a.arch for a in abis] == ABIS[native]
    for abi in abis:
        calls = _syscalls(abi.arch)
        names = {FFI.string(r.name).decode(): r.nr for r in abi.rules[0 : abi.nrules]}
        assert names == {n: calls[n] for n in names}, FFI.string(abi.name).decode()
        # every call of the policy this ABI has is in the table
        assert names.keys() == (ALWAYS_EPERM | ALWAYS_ENOSYS | NS_FLAGS) & calls.keys()


def test_the_native_architecture() -> None:
    assert LIB.job_filter_native_arch() == NATIVE.get(platform.machine(), 0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: build(ARCH_I386), "no seccomp filter for architecture 0x40000003 (only x86_64 and aarch64)"),
        (lambda: build(0), "no seccomp filter for architecture 0x00000000 (only x86_64 and aarch64)"),
        (lambda: build(ARCH_X86_64, max_insns=10), "seccomp filter: 104 instructions do not fit in 10"),
    ],
)
def test_build_errors(call: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def test_the_program_fits_exactly_and_is_the_same_every_time() -> None:
    prog = build(ARCH_X86_64)
    assert build(ARCH_X86_64, max_insns=len(prog)) == prog
    with pytest.raises(ValueError, match="do not fit"):
        build(ARCH_X86_64, max_insns=len(prog) - 1)
    assert len(build(ARCH_AARCH64)) < len(prog) < 256  # JOB_FILTER_MAX_INSNS


def test_the_worker_profile_says_what_the_list_says() -> None:
    """images/worker/seccomp.json (gen-seccomp.py from Docker's default and the list's profile column):
    io_uring is refused for every process on a worker, root's steps too; the newer calls the list allows
    are allowed without conditions; pivot_root and open_tree_attr only with CAP_SYS_ADMIN."""
    import json

    profile = json.loads(WORKER_PROFILE.read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    allow = [r for r in profile["syscalls"] if r["action"] == "SCMP_ACT_ALLOW"]
    plain = {
        n for r in allow if not r.get("args") and not r.get("includes") and not r.get("excludes") for n in r["names"]
    }
    sysadmin = {n for r in allow if r.get("includes", {}).get("caps") == ["CAP_SYS_ADMIN"] for n in r["names"]}
    anywhere = {n for r in allow for n in r["names"]}
    for name, d in POLICY.items():
        if d.profile == "refuse":
            assert name not in anywhere, f"{name}: allowed by the worker profile"
        elif d.profile == "allow":
            assert name in plain, f"{name}: not allowed by the worker profile"
        elif d.profile == "sysadmin":
            assert name in sysadmin and name not in plain, f"{name}: not gated on CAP_SYS_ADMIN"
    assert {"io_uring_setup", "io_uring_enter", "io_uring_register"} <= {
        n for n, d in POLICY.items() if d.profile == "refuse"
    }
