"""What the pods may do: no privileged container, exactly the documented capabilities, names resolved
inside the test network only, and job steps of ordinary users that cannot leave the jail nor make
namespaces or mounts (the plugin's seccomp filter), while root's steps can."""

from __future__ import annotations

import re
import shlex

import pytest

from tests.support.jailuser import JailUser
from warden_dev.dockercluster import DOCKER_DEFAULT_CAPS, DockerCluster
from warden_dev.fakedriver import gpu_device

#: docs/images.md ("Images" table, "needs"): capabilities each component adds to Docker's defaults.
DOCUMENTED_CAPS: dict[str, set[str]] = {
    "worker": {"SYS_ADMIN", "SYS_NICE"},
    "login": {"SYS_ADMIN"},
    "controller": set(),
    "accounting": set(),
    "database": set(),
}

#: Linux capability numbers (include/uapi/linux/capability.h), to read CapBnd from /proc/1/status.
CAP_NAMES = [
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
    "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
    "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
    "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
    "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
    "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
]  # fmt: skip


def _decode_caps(hex_mask: str) -> set[str]:
    mask = int(hex_mask, 16)
    return {f"CAP_{name}" for bit, name in enumerate(CAP_NAMES) if mask >> bit & 1}


def test_no_container_is_privileged(cluster: DockerCluster) -> None:
    """Every container of the run, the finished populate-jail Job's included, runs unprivileged."""
    containers = [p.container for p in cluster.pods.values()] + [
        name for name in cluster.inspected if "-populate-" in name
    ]
    assert any("-populate-" in c for c in containers), "the populate-jail container was not recorded"
    for name in containers:
        info = cluster.inspected[name] if "-populate-" in name else cluster.inspect(name)
        assert info["HostConfig"]["Privileged"] is False, name
        # the only devices: the GPU stand-ins of GPU workers (what a device plugin would pass)
        assert all(
            d["PathOnHost"] == str(gpu_device(int(d["PathInContainer"].removeprefix("/dev/nvidia"))))
            for d in info["HostConfig"].get("Devices") or []
        ), f"{name}: host devices passed through: {info['HostConfig']['Devices']}"


def test_jail_is_shared_read_write_only_where_the_contract_says(cluster: DockerCluster) -> None:
    """Workers and login mount the one jail volume read-write, the controller and slurmdbd read-only
    (user lookup only), the database not at all."""
    want = {"worker": True, "login": True, "controller": False, "accounting": False}
    for pod in cluster.pods.values():
        mounts = [m for m in cluster.inspect(pod.container)["Mounts"] if m["Destination"] == "/mnt/jail"]
        if pod.component not in want:
            assert not mounts, pod.name
            continue
        (mount,) = mounts
        assert mount["Name"] == cluster.jail_volume, pod.name
        assert mount["RW"] is want[pod.component], pod.name
    r = cluster.exec(cluster.names.controller_pod, "touch /mnt/jail/etc/controller-was-here", check=False)
    assert r.rc != 0 and "Read-only file system" in r.err, r


@pytest.mark.parametrize("component", sorted(DOCUMENTED_CAPS))
def test_capabilities_are_exactly_the_documented_ones(cluster: DockerCluster, component: str) -> None:
    """The renderer asks for the documented capabilities, Docker grants them, and the container's
    bounding set (what any process in it can ever hold, read from PID 1) is Docker's default set plus
    exactly those: nothing more."""
    pods = [p for p in cluster.pods.values() if p.component == component]
    assert pods, f"no {component} pod"
    want = DOCUMENTED_CAPS[component]
    for pod in pods:
        rendered = set((pod.spec.get("securityContext") or {}).get("capabilities", {}).get("add", []))
        assert rendered == want, f"{pod.name}: rendered {rendered}, documented {want}"
        host = cluster.inspect(pod.container)["HostConfig"]
        assert {c.removeprefix("CAP_") for c in host.get("CapAdd") or []} == want
        assert not host.get("CapDrop")
        status = cluster.exec(pod.name, "cat /proc/1/status").out
        cap_bnd = re.search(r"^CapBnd:\s*([0-9a-f]+)$", status, re.M)
        assert cap_bnd, status
        assert _decode_caps(cap_bnd.group(1)) == DOCKER_DEFAULT_CAPS | {f"CAP_{c}" for c in want}, pod.name


def test_worker_runs_under_the_worker_seccomp_profile(cluster: DockerCluster) -> None:
    """Workers are confined by images/worker/seccomp.json (filter mode), not unconfined."""
    for pod in cluster.worker_pods("cpu") + cluster.worker_pods("gpu") + cluster.worker_pods("plain"):
        opts = cluster.inspect(cluster.container(pod))["HostConfig"]["SecurityOpt"] or []
        assert any(o.startswith("seccomp=") and "pivot_root" in o for o in opts), f"{pod}: {opts}"
        assert "seccomp=unconfined" not in opts
        status = cluster.exec(pod, "cat /proc/1/status").out
        assert re.search(r"^Seccomp:\s*2$", status, re.M), f"{pod}: no seccomp filter on slurmd"


def test_names_resolve_through_the_test_network_only(cluster: DockerCluster) -> None:
    """slurm.conf's controller address resolves, from a worker and from inside a job step, to the
    controller container through Docker's embedded DNS (127.0.0.11) and the pods' search domains;
    short node names resolve from the login node's jail."""
    address = cluster.names.controller_address
    assert f"({address})" in (cluster.dir / "configmap" / cluster.names.slurm_config / "slurm.conf").read_text()
    ctl_ip = cluster.ip(cluster.names.controller_pod)
    worker = cluster.worker_pods("cpu")[0]
    resolv = cluster.exec(worker, "cat /etc/resolv.conf").out
    assert re.findall(r"^nameserver\s+(\S+)", resolv, re.M) == ["127.0.0.11"], resolv
    assert cluster.names.nodes_domain in resolv
    assert cluster.exec(worker, f"getent hosts {address}").out.split()[0] == ctl_ip
    step = cluster.ssh("root", f"srun -p cpu -N1 -w {worker} sh -c 'cat /etc/resolv.conf; getent hosts {address}'")
    assert "nameserver 127.0.0.11" in step.out
    assert f"{ctl_ip} " in step.out
    other = cluster.worker_pods("cpu")[1]
    assert cluster.ssh("root", f"getent hosts {other}").out.split()[0] == cluster.ip(other)


# --- escapes ----------------------------------------------------------------------------------
# Each attempt runs as the jail user alice in a job step on a CPU worker. `control` runs as root in
# the worker container, outside the jail, and shows that what the attempt is after does exist there.

KEY = "/etc/warden/auth/slurm.key"
ESCAPES: dict[str, tuple[str, str, str]] = {
    # name: (attempt, what its output must say, control in the worker container)
    # root's processes do not even exist for a user (/proc hidepid=invisible: docs/security.md, "Tokens,
    # identities and privacy"); without that, their root links answer "Permission denied"
    "proc-1-root": ("ls /proc/1/root/etc/warden/auth", "No such file or directory", f"test -f /proc/1/root{KEY}"),
    "slurmstepd-root": ('ls "/proc/$PPID/root/etc/warden"', "No such file or directory", "test -d /etc/warden"),
    "dotdot-walk": (
        "cd / && cd ../../../.. && ls -d ./etc/warden-jail-release ./etc/warden ./mnt/jail",
        "No such file or directory",
        "test -d /etc/warden && test -d /mnt/jail",
    ),
    "bind-mount-root": ('mkdir -p "$HOME/m" && mount --bind / "$HOME/m"', "must be superuser", "true"),
    "mount-proc": ('mkdir -p "$HOME/p" && mount -t proc proc "$HOME/p"', "must be superuser", "true"),
    "umount-config": ("umount /etc/slurm || umount -l /etc/slurm", "must be superuser", "test -f /etc/slurm/slurm.key"),
    "unshare-mount-ns": ("unshare -m true", "Operation not permitted", "true"),
    # the job step's seccomp filter (spank/job_filter.c) refuses the user namespace itself
    "user-ns-root": ("unshare -Ur ls /proc/1/root/etc/warden", "Operation not permitted", f"test -f {KEY}"),
    "chroot-out": ("/usr/sbin/chroot /proc/1/root /bin/true", "No such file", "test -x /proc/1/root/bin/true"),
    "read-slurm-key": (
        f"cat /etc/slurm/slurm.key {KEY}",
        "No such file or directory",
        f"test -f /etc/slurm/slurm.key && test -f {KEY}",
    ),
    "pivot-root": ('mkdir -p "$HOME/old" && /usr/sbin/pivot_root / "$HOME/old"', "Operation not permitted", "true"),
    "nsenter-pid-1": (f"nsenter -t 1 -m -- cat {KEY}", "Operation not permitted", f"test -f {KEY}"),
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_job_step_cannot_reach_the_containers_root(cluster: DockerCluster, alice: JailUser, name: str) -> None:
    attempt, message, control = ESCAPES[name]
    worker = cluster.worker_pods("cpu")[0]
    cluster.exec(worker, control)  # raises if the target does not exist outside the jail
    script = f'{attempt} 2>&1\necho "exit=$?"\nid -un\ntest -f /etc/warden-jail-release && echo still-in-jail\n'
    out = alice.ssh(
        f"cat >~/escape-{name}.sh && srun -p cpu -N1 -w {worker} bash ~/escape-{name}.sh",
        input=script,
    )
    assert message in out, out
    assert re.search(r"^exit=[1-9]\d*$", out, re.M), f"the attempt succeeded:\n{out}"
    assert "\nalice\n" in f"\n{out}", out
    assert "still-in-jail" in out, out


def test_escape_attempts_leave_the_node_intact(cluster: DockerCluster, alice: JailUser) -> None:
    """After all that, the user's next step on the same node still lands in the jail and sees the
    cluster's client config without the key."""
    worker = cluster.worker_pods("cpu")[0]
    out = alice.ssh(f"srun -p cpu -N1 -w {worker} sh -c {shlex.quote('ls /etc/slurm; cat /etc/warden-jail-release')}")
    assert "slurm.conf" in out
    assert "slurm.key" not in out
    assert "WARDEN_JAIL_VERSION" in out


# --- the job step's seccomp filter (spank/job_filter.c) ----------------------------------------
# Ordinary users' steps get one more seccomp filter than the worker container has; root's do not.

#: system calls made from the jail's python3 (no compiler there); numbers: x86_64, aarch64
RAW_CALLS = r"""
import ctypes, errno, os, threading
libc = ctypes.CDLL(None, use_errno=True)
arm = os.uname().machine == "aarch64"
calls = {
    "fsopen": (430, b"tmpfs", 0),
    "fsmount": (432, -1, 0, 0),
    "open_tree": (428, -100, b"/", 1),
    "mount_setattr": (442, -1, b"", 0, None, 0),
    "bpf": (280 if arm else 321, 0, None, 0),
    "perf_event_open": (241 if arm else 298, None, 0, -1, -1, 0),
    "clone3": (435, None, 0),
}
libc.syscall.restype = ctypes.c_long
for name, (nr, *args) in calls.items():
    r = libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) if isinstance(a, int) else a for a in args))
    print(name, "ok" if r >= 0 else errno.errorcode[ctypes.get_errno()])
t = threading.Thread(target=print, args=("thread ok",))
t.start()
t.join()
"""

#: what the attempts in an ordinary user's step must say
REFUSED = {
    "unshare -U true": "unshare failed: Operation not permitted",
    "unshare -Ur id -u": "unshare failed: Operation not permitted",
    "unshare -m true": "unshare failed: Operation not permitted",
    "unshare -Urm mount -t tmpfs none /mnt": "unshare failed: Operation not permitted",
    "mount -t tmpfs none /mnt": "mount: ",
}


def _sections(out: str) -> dict[str, str]:
    """Output split at the script's "## NAME" lines: NAME -> the lines after it."""
    sections: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in out.splitlines():
        if line.startswith("## "):
            lines = sections.setdefault(line[3:], [])
        else:
            lines.append(line)
    return {name: "\n".join(body) for name, body in sections.items()}


def _status(out: str) -> dict[str, str]:
    return dict(re.findall(r"^(Seccomp|Seccomp_filters|NoNewPrivs):\s*(\d+)$", out, re.M))


def test_users_steps_cannot_make_namespaces_or_mounts(cluster: DockerCluster, alice: JailUser) -> None:
    """unshare (user and mount namespaces), mount, the new mount API, bpf and perf_event_open fail in
    alice's step; clone3 fails with ENOSYS, so glibc starts threads with clone, and threads work."""
    worker = cluster.worker_pods("cpu")[0]
    script = "".join(f"echo '## {cmd}'; {cmd} 2>&1; echo \"exit=$?\"\n" for cmd in REFUSED)
    script += f"echo '## python'; python3 -c {shlex.quote(RAW_CALLS)} 2>&1\n"
    script += "test -f /etc/warden-jail-release && echo still-in-jail\n"
    out = alice.ssh(f"cat >~/filtered.sh && srun -p cpu -N1 -w {worker} bash ~/filtered.sh", input=script)
    sections = _sections(out)
    for cmd, message in REFUSED.items():
        got = sections.get(cmd, "")
        assert message in got and re.search(r"^exit=[1-9]\d*$", got, re.M), f"{cmd}:\n{out}"
    raw = dict(line.split(" ", 1) for line in sections.get("python", "").splitlines() if " " in line)
    assert raw == {
        "fsopen": "EPERM",
        "fsmount": "EPERM",
        "open_tree": "EPERM",
        "mount_setattr": "EPERM",
        "bpf": "EPERM",
        "perf_event_open": "EPERM",
        "clone3": "ENOSYS",
        "thread": "ok",
    }, out
    assert "still-in-jail" in out, out


@pytest.mark.parametrize(("group", "no_new_privs"), [("plain", "0"), ("cpu", "1")])
def test_the_filter_is_for_ordinary_users_only(
    cluster: DockerCluster, alice: JailUser, group: str, no_new_privs: str
) -> None:
    """alice's step runs under exactly one filter more than the worker container (the worker's profile,
    which slurmd and slurmstepd inherit from its PID 1); without containers in jobs (group `plain`)
    without no_new_privs (setuid programs in the jail keep working), with them (group `cpu`: the filter
    comes after pyxis' task_init, when the task is the user's) with it. Root's step has the container's
    filters only, is in the jail all the same, and may still make namespaces."""
    worker = cluster.worker_pods(group)[0]
    container = _status(cluster.exec(worker, "cat /proc/1/status").out)
    assert container.get("Seccomp") == "2", container
    status = "grep -E '^(Seccomp|Seccomp_filters|NoNewPrivs):' /proc/self/status"
    users = _status(alice.ssh(f"srun -p {group} -N1 -w {worker} {status}"))
    filters = str(int(container["Seccomp_filters"]) + 1)
    assert users == {**container, "Seccomp_filters": filters, "NoNewPrivs": no_new_privs}
    root_step = (
        f"{status}; test -f /etc/warden-jail-release && echo in-jail; "
        "unshare -m true && echo mount-ns-ok; unshare -U true && echo user-ns-ok"
    )
    out = cluster.ssh("root", f"srun -p {group} -N1 -w {worker} bash -c {shlex.quote(root_step)}").out
    assert _status(out) == {**container, "NoNewPrivs": "0"}, out
    for word in ("in-jail", "mount-ns-ok", "user-ns-ok"):
        assert word in out.split(), out


def test_nothing_written_into_the_jail_runs_as_root_outside_it(cluster: DockerCluster) -> None:
    """The worker's root has its own home (not the jail's /root), and slurmd's health check program,
    root's Python outside the jail, ignores user site directories even when HOME points into the jail."""
    worker = cluster.worker_pods("cpu")[0]
    version = cluster.exec(worker, "/opt/warden/bin/python -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'")
    site = f"/root/.local/lib/python{version.out.strip()}/site-packages"
    marker = "/var/tmp/warden-user-site-ran"
    # root in the jail (a login session) plants code where a careless root Python would import it
    cluster.ssh("root", f'mkdir -p {site} && echo \'open("{marker}", "w").close()\' > {site}/usercustomize.py')
    try:
        home = cluster.exec(worker, "getent passwd root | cut -d: -f6; echo $HOME").out.split()
        assert home == ["/var/lib/warden/root", "/var/lib/warden/root"], home
        cluster.exec(worker, f"test -f /mnt/jail{site}/usercustomize.py")  # it is there, seen from the worker
        cluster.exec(worker, "HOME=/root warden-quickcheck --help >/dev/null", check=False)
        ran = cluster.exec(worker, f"test -e {marker} && echo RAN; true").out
        assert "RAN" not in ran, "the health check imported Python code from the jail's /root"
    finally:
        cluster.ssh("root", "rm -rf /root/.local")
