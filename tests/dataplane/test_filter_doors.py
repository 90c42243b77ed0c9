"""Every process a user starts on a worker runs under the job step's seccomp filter (spank/README.md,
"Seccomp filter"; docs/security.md, "What a job step may do"), also the ones Slurm and enroot start for
the user outside the tasks: a task epilog (`srun --task-epilog`), which slurmstepd forks when a task
ends, and the hooks enroot would run from the user's own ~/.config/enroot/hooks.d while it sets up a
step's container. io_uring is refused in every step (the filter for users, the worker's profile for
everyone). Each attempt writes what it got to a file in the user's home, which the test reads."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterator

import pytest

from tests.support import registry as reg
from tests.support.eventually import eventually
from tests.support.jailuser import JailUser
from warden_dev.dockercluster import DockerCluster

IMAGE_OS = 'PRETTY_NAME="Warden test image 1.0"'

#: io_uring_setup(1, &params) from the jail's python3 (no compiler there): 425 on x86_64 and aarch64
IO_URING = r"""
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
params = ctypes.create_string_buffer(120)
r = libc.syscall(ctypes.c_long(425), ctypes.c_long(1), params)
print("io_uring_setup", "fd" if r >= 0 else errno.errorcode[ctypes.get_errno()])
"""

#: what a task epilog tries (Slurm gives it no arguments): it writes the result next to itself
#: (x.sh -> x.out), ending with a marker section
ATTEMPTS = f"""#!/bin/bash
out="${{0%.sh}}.out"
{{
echo "## userns"; unshare -Ur true 2>&1; echo "exit=$?"
echo "## mount"; unshare -Urm mount -t tmpfs none /mnt 2>&1; echo "exit=$?"
echo "## io_uring"; python3 -c {shlex.quote(IO_URING)} 2>&1
echo "## whoami"; id -un; grep -E '^(Seccomp|Seccomp_filters):' /proc/self/status
echo "## done"
}} > "$out.part" && mv "$out.part" "$out"
"""


def _sections(out: str) -> dict[str, str]:
    """Output split at "## NAME" lines: NAME -> the lines after it."""
    sections: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in out.splitlines():
        if line.startswith("## "):
            lines = sections.setdefault(line[3:], [])
        else:
            lines.append(line)
    return {name: "\n".join(body) for name, body in sections.items()}


def _epilog_result(ssh: Callable[..., str], home: str, group: str, worker: str) -> dict[str, str]:
    """Install the attempts as `home/epilog-GROUP.sh`, run a step with it as --task-epilog, and wait
    for the result file it writes (the positive marker: its "## done" section)."""
    script, result = f"{home}/epilog-{group}.sh", f"{home}/epilog-{group}.out"
    ssh(f"rm -f {result}; cat > {script} && chmod 755 {script}", input=ATTEMPTS)
    ssh(f"srun -p {group} -N1 -w {worker} --task-epilog={script} true", timeout=180)
    out = eventually(
        f"the task epilog's {result}", lambda: ssh(f"cat {result} 2>/dev/null || true"), lambda o: "## done" in o, 60
    )
    return _sections(out)


@pytest.mark.parametrize("group", ["plain", "cpu"])  # containers off, on
def test_a_users_task_epilog_runs_under_the_filter(cluster: DockerCluster, alice: JailUser, group: str) -> None:
    """`srun --task-epilog=~/x.sh`: slurmstepd forks the script as alice when the task ends; it gets
    the job filter as a task does: no user namespace, no mount, no io_uring."""
    got = _epilog_result(alice.ssh, "/home/alice", group, cluster.worker_pods(group)[0])
    assert "unshare failed: Operation not permitted" in got["userns"], got
    assert re.search(r"^exit=[1-9]", got["userns"], re.M), got
    assert "unshare failed: Operation not permitted" in got["mount"], got
    assert got["io_uring"].strip() == "io_uring_setup EPERM", got
    assert got["whoami"].splitlines()[0] == "alice", got


def test_roots_task_epilog_is_not_filtered(cluster: DockerCluster) -> None:
    """Root's jobs get no job filter, their task epilogs neither: root's epilog makes a user namespace.
    io_uring is refused to root too, by the worker's own profile (images/worker/seccomp.json)."""

    def ssh(script: str, timeout: float = 120, input: str | None = None) -> str:
        return cluster.ssh("root", script, timeout=timeout, input=input).out

    got = _epilog_result(ssh, "/root", "plain", cluster.worker_pods("plain")[0])
    assert re.search(r"^exit=0$", got["userns"], re.M), got
    assert got["io_uring"].strip() == "io_uring_setup EPERM", got
    assert got["whoami"].splitlines()[0] == "root", got


def test_io_uring_is_refused_in_every_step(cluster: DockerCluster, alice: JailUser) -> None:
    """A step's io_uring_setup fails with EPERM: alice's (the job filter) and root's (the worker's
    profile), on both kinds of worker group; ordinary I/O goes on."""
    for group in ("plain", "cpu"):
        worker = cluster.worker_pods(group)[0]
        step = f"srun -p {group} -N1 -w {worker} python3 -c {shlex.quote(IO_URING)}"
        assert alice.ssh(step).strip() == "io_uring_setup EPERM", group
        assert cluster.ssh("root", step).out.strip() == "io_uring_setup EPERM", group


# --- containers: the user's enroot hooks ------------------------------------------------------


@pytest.fixture(scope="module")
def registry(cluster: DockerCluster) -> Iterator[reg.Registry]:
    with reg.running(cluster) as r:
        yield r


HOOK = """#!/bin/bash
# a user's enroot hook: it would run while enroot sets up the container, before the job filter
{ echo "hook ran as $(id -un)"; unshare -Ur id -u 2>&1; echo "exit=$?"; } > "$HOME/hook-ran.txt"
"""


def test_a_users_enroot_hook_does_not_run_and_credentials_still_work(
    cluster: DockerCluster, registry: reg.Registry
) -> None:
    """dora keeps an executable hook in ~/.config/enroot/hooks.d (enroot would run it unfiltered, in a
    user namespace of hers) and her registry credentials in ~/.config/enroot/.credentials: her step from
    the private registry runs in the image (the credentials still work), and the hook never ran."""
    dora = JailUser.added_by_root(cluster, "dora")
    node = cluster.worker_pods("cpu")[0]
    dora.ssh(
        "mkdir -p ~/.config/enroot/hooks.d && chmod 700 ~/.config/enroot && rm -f ~/hook-ran.txt && "
        f"printf 'machine private-registry login %s password %s\\n' {reg.USER} {reg.PASSWORD} "
        "> ~/.config/enroot/.credentials && cat > ~/.config/enroot/hooks.d/99-mine.sh && "
        "chmod 755 ~/.config/enroot/hooks.d/99-mine.sh",
        input=HOOK,
    )
    out = dora.ssh(
        f"srun -p cpu -N1 -w {node} --container-image={registry.reference(private=True)} "
        "grep PRETTY_NAME /etc/os-release",
        timeout=300,
    )
    assert IMAGE_OS in out, out
    # the step has run in its container: enroot's hooks had run before it started
    assert (
        dora.ssh("if test -e ~/hook-ran.txt; then cat ~/hook-ran.txt; else echo no-hook-ran; fi").strip()
        == "no-hook-ran"
    )


BASH_ENV = '{ echo "ran in $0"; unshare -Ur true 2>&1; echo "exit=$?"; } >> "$HOME/bash-env-ran.txt" 2>&1\n'


def test_the_jobs_environment_and_credentials_run_no_code_while_enroot_sets_up(
    cluster: DockerCluster, registry: reg.Registry
) -> None:
    """pyxis hands enroot and its importer the job's environment, and they run before the job filter:
    gina's BASH_ENV (which bash runs at start) does not run there, and her step runs in the image. A
    `password $(command)` line in her .credentials is taken as text, not run: the registry refuses it."""
    gina = JailUser.added_by_root(cluster, "gina")
    node = cluster.worker_pods("cpu")[0]
    gina.ssh("rm -f ~/bash-env-ran.txt ~/creds-ran.txt && cat > ~/bash-env.sh", input=BASH_ENV)
    out = gina.ssh(
        f"BASH_ENV=$HOME/bash-env.sh srun -p cpu -N1 -w {node} --container-image={registry.reference()} "
        "grep PRETTY_NAME /etc/os-release",
        timeout=300,
    )
    assert IMAGE_OS in out, out
    assert gina.ssh(
        "if test -e ~/bash-env-ran.txt; then cat ~/bash-env-ran.txt; else echo nothing-ran; fi"
    ).strip() == ("nothing-ran")
    creds = f"machine private-registry login {reg.USER} password $(touch $HOME/creds-ran.txt; echo {reg.PASSWORD})\n"
    gina.ssh("mkdir -p ~/.config/enroot && chmod 700 ~/.config/enroot && cat > ~/.config/enroot/.credentials",
             input=creds)  # fmt: skip
    step = f"srun -p cpu -N1 -w {node} --container-image={registry.reference(private=True)} true 2>&1; echo rc=$?"
    failed = gina.ssh(step, timeout=300)
    assert re.search(r"^rc=[1-9]\d*$", failed, re.M) and "pyxis:" in failed, failed
    assert gina.ssh("if test -e ~/creds-ran.txt; then echo ran; else echo not-run; fi").strip() == "not-run"


RC = """# a user's image: its start-up file, run by enroot-switchroot before the step's program
{ echo "rc ran as $(id -un)"; unshare -Ur true 2>&1; echo "exit=$?"; grep '^Seccomp:' /proc/self/status; } \\
    > "/home/erin/rc-ran.txt" 2>&1
"""


def test_an_images_own_start_up_file_runs_under_the_filter(cluster: DockerCluster, registry: reg.Registry) -> None:
    """erin builds an image of her own on the login node (the registry's, unpacked, with lines of hers at
    the top of /etc/rc, which enroot runs in the container's user namespace when the container starts)
    and runs a step from it: her /etc/rc ran, filtered (no user namespace), and the step ran in the image."""
    erin = JailUser.added_by_root(cluster, "erin")
    build = (
        "cd ~ && rm -rf rcimg base.sqsh rc.sqsh rc-ran.txt && "
        f"enroot import --output base.sqsh docker://{registry.reference()} >/dev/null 2>&1 && "
        "unsquashfs -d rcimg base.sqsh >/dev/null && cat - rcimg/etc/rc > rc.new && mv rc.new rcimg/etc/rc && "
        "mksquashfs rcimg rc.sqsh -all-root -noappend >/dev/null && rm -rf rcimg base.sqsh && echo built"
    )
    assert erin.ssh(build, input=RC, timeout=300).strip().endswith("built")
    node = cluster.worker_pods("cpu")[0]
    out = erin.ssh(f"srun -p cpu -N1 -w {node} --container-image=$HOME/rc.sqsh grep PRETTY_NAME /etc/os-release",
                   timeout=300)  # fmt: skip
    assert IMAGE_OS in out, out
    ran = erin.ssh("cat ~/rc-ran.txt")
    assert ran.startswith("rc ran as erin"), ran
    assert "unshare failed: Operation not permitted" in ran and re.search(r"^exit=[1-9]", ran, re.M), ran
    assert re.search(r"^Seccomp:\s+2$", ran, re.M), ran


def test_the_node_still_serves_other_users(cluster: DockerCluster, alice: JailUser) -> None:
    """After the refused attempts above, the nodes they ran on are not drained and take the next job."""
    for group in ("plain", "cpu"):
        node = cluster.worker_pods(group)[0]
        reasons = cluster.exec(cluster.names.controller_pod, f"sinfo -R -h -N -n {node} -o '%N %E'").out.strip()
        assert reasons == "", reasons
        assert alice.ssh(f"srun -p {group} -N1 -w {node} hostname").strip() == node
