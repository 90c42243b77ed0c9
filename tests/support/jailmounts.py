"""What of the pod's runtime an ordinary user can write to from inside the jail: a probe run as that user
(in an SSH session, in a job step) that walks the mounts it sees, and the reviewed allow-list it is held to.

The probe (`PROBE`, a Python program for the jail's python3) reads /proc/self/mountinfo and reports, for
every mount point: its file type, whether the user may write it (``access(W_OK)``, which also says no on a
read-only mount), and, for each read-write mount that is not the jail itself nor allow-listed nor /proc,
every file, directory or device below it (on that mount) the user may write. It also tries to open the
kubelet's default termination message file, /dev/termination-log, for writing. `problems` reads the report:
anything writable outside the allow-list is a problem.

Allowed: the users' own places (/home, /tmp, /var/tmp, /dev/shm and /dev/mqueue: POSIX shared memory and
message queues of the pod's IPC namespace, as /dev/shm) and character devices anyone may use: the memory
devices (null, zero, full, random, urandom: major 1; the runtime masks /proc files with /dev/null), the
terminals (tty, ptmx: major 5; a session's own pty: 136-143) and GPUs (NVIDIA's major, 195, and
/dev/nvidia*), which the job's devices cgroup gates. On a group with containers on, the user's own directory
of the node-local container store (naming.CONTAINER_STORE/<uid>, enroot's places: docs/containers.md); the
store's root and everyone else's directories stay closed. Sockets cannot be opened for writing and are how users
reach Slurm (sackd's and slurmstepd's): not reported. Symbolic links are not followed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from warden import naming

#: mount points users may write to (and below which nothing is walked)
WRITABLE_MOUNTS = ("/home", "/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue")
#: character device majors anyone may write: memory devices, terminals, ptys, NVIDIA GPUs
DEVICE_MAJORS = frozenset({1, 5, 136, 137, 138, 139, 140, 141, 142, 143, 195})
TERMINATION_LOG_DEFAULT = "/dev/termination-log"

PROBE = r"""
import json, os, re, stat, sys

ALLOWED = sys.argv[1:]
def allowed(path):
    return any(path == a or path.startswith(a + "/") for a in ALLOWED)

def kind(mode):
    for test, name in ((stat.S_ISDIR, "dir"), (stat.S_ISREG, "file"), (stat.S_ISCHR, "chr"), (stat.S_ISBLK, "blk"),
                       (stat.S_ISSOCK, "sock"), (stat.S_ISFIFO, "fifo"), (stat.S_ISLNK, "link")):
        if test(mode):
            return name
    return "other"

def entry(path, st):
    return {"path": path, "kind": kind(st.st_mode), "major": os.major(st.st_rdev), "minor": os.minor(st.st_rdev)}

mounts = []
for line in open("/proc/self/mountinfo"):
    f = line.split()
    path = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), f[4])
    mounts.append((path, f[5].split(","), f[f.index("-") + 1]))
points = {m[0] for m in mounts}

report = []
for path, options, fstype in mounts:
    rec = {"path": path, "fstype": fstype, "rw": "rw" in options}
    try:
        st = os.stat(path)
    except OSError as e:
        rec["error"] = e.strerror
        report.append(rec)
        continue
    rec.update(entry(path, st))
    rec["writable"] = os.access(path, os.W_OK)
    walk = rec["rw"] and rec["kind"] == "dir" and path != "/" and not allowed(path)
    if walk and not (path == "/proc" or path.startswith("/proc/")):
        inside = []
        for root, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if os.path.join(root, d) not in points]
            for name in dirs + files:
                p = os.path.join(root, name)
                try:
                    sub = os.lstat(p)
                except OSError:
                    continue
                if sub.st_dev != st.st_dev or stat.S_ISLNK(sub.st_mode) or stat.S_ISSOCK(sub.st_mode):
                    continue
                if os.access(p, os.W_OK):
                    inside.append(entry(p, sub))
        rec["writable_inside"] = inside
    report.append(rec)

termination = {}
for label, flags in (("open", os.O_WRONLY), ("create", os.O_WRONLY | os.O_CREAT)):
    try:
        os.close(os.open("/dev/termination-log", flags, 0o600))
        termination[label] = "opened"
    except OSError as e:
        termination[label] = e.strerror
print(json.dumps({"user": os.getuid(), "mounts": report, "termination_log": termination}))
"""


def probe_command(path: str) -> str:
    """The shell command that runs the probe saved at `path` (in the jail) with the allow-list."""
    return f"python3 {path} {' '.join(WRITABLE_MOUNTS)}"


@dataclass(frozen=True)
class Report:
    user: int
    mounts: list[dict[str, Any]]
    termination_log: dict[str, str]

    @classmethod
    def parse(cls, output: str) -> Report:
        """The probe's report: the last line of its output that is a JSON object."""
        line = next(line for line in reversed(output.splitlines()) if line.startswith("{"))
        data = json.loads(line)
        return cls(int(data["user"]), list(data["mounts"]), dict(data["termination_log"]))

    def mount_points(self) -> set[str]:
        return {m["path"] for m in self.mounts}


def _allowed_path(path: str, user: int) -> bool:
    own = (*WRITABLE_MOUNTS, f"{naming.CONTAINER_STORE}/{user}")
    return any(path == a or path.startswith(a + "/") for a in own)


def _harmless_device(e: dict[str, Any]) -> bool:
    return e.get("kind") == "chr" and (e["major"] in DEVICE_MAJORS or e["path"].startswith("/dev/nvidia"))


def problems(report: Report) -> list[str]:
    """Everything the probe's user may write that is neither allow-listed nor a harmless device, and the
    termination log if it opened; empty when all is well."""
    out = []
    for m in report.mounts:
        if m.get("writable") and not (_allowed_path(m["path"], report.user) or _harmless_device(m)):
            out.append(f"mount point {m['path']} ({m['fstype']}, {m.get('kind')}) is writable")
        for e in m.get("writable_inside", []):
            if not (_harmless_device(e) or _allowed_path(e["path"], report.user)):
                out.append(f"{e['path']} ({e['kind']}, on the {m['fstype']} mount {m['path']}) is writable")
    for how, result in report.termination_log.items():
        if result == "opened":
            out.append(f"{TERMINATION_LOG_DEFAULT} could be opened for writing ({how})")
    return out
