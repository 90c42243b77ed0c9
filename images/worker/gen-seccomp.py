#!/usr/bin/env python3
"""Write images/worker/seccomp.json: Docker's default seccomp profile, changed where spank/syscalls.txt
(Warden's one list of system-call decisions, with a reason for each) says so in its ``profile`` column:

- ``sysadmin``: allowed under the same condition as ``mount``/``unshare``/``setns``, only when the
  container holds CAP_SYS_ADMIN. ``pivot_root``: the worker's SPANK plugin enters the jail with mount +
  pivot_root, which Docker's (and containerd's) default profile never allows.
- ``allow``: allowed unconditionally. Calls newer than this release of the profile that only touch the
  caller's own things (``fchmodat2``: glibc 2.39 changes a file's mode through it, e.g. tar -p when
  enroot unpacks an image's layers in a job step; ``mseal``, ``map_shadow_stack``, futex2...); a kernel
  that knows a call the profile does not name answers EPERM.
- ``refuse``: taken out of every rule that allows it (``io_uring_*``, as Docker's own profile since
  25.0): refused for every process on a worker, root's steps and slurmd included.
- ``docker``: left as Docker's default decides.

Everything else keeps the default's semantics (default action ERRNO, the same allow list and argument
filters).

    python3 images/worker/gen-seccomp.py [DEFAULT_JSON]

DEFAULT_JSON defaults to Docker's own profile as Debian ships it in golang-github-docker-docker-dev
(profiles/seccomp/default.json, Apache-2.0); without it the package is fetched with `apt-get download`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OUT = HERE / "seccomp.json"
POLICY = HERE.parent.parent / "spank" / "syscalls.txt"
DEB_PATH = "usr/share/gocode/src/github.com/docker/docker/profiles/seccomp/default.json"


def load_policy(path: Path = POLICY) -> dict[str, str]:
    """name -> the profile column of spank/syscalls.txt (name, job, profile, nr, reason)."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _job, profile, _nr, _reason = line.split(maxsplit=4)
            if profile not in ("docker", "sysadmin", "allow", "refuse"):
                raise SystemExit(f"{path}: {name}: unknown profile decision '{profile}'")
            out[name] = profile
    return out


def load_default(arg: str | None) -> dict[str, Any]:
    if arg:
        profile: dict[str, Any] = json.loads(Path(arg).read_text())
        return profile
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["apt-get", "download", "golang-github-docker-docker-dev"], cwd=tmp, check=True)
        deb = next(Path(tmp).glob("*.deb"))
        subprocess.run(["dpkg-deb", "-x", str(deb), f"{tmp}/x"], check=True)
        fetched: dict[str, Any] = json.loads(Path(f"{tmp}/x/{DEB_PATH}").read_text())
        return fetched


def add_sysadmin(profile: dict[str, Any], added: list[str]) -> dict[str, Any]:
    rules = profile["syscalls"]
    gated = [
        r
        for r in rules
        if r.get("action") == "SCMP_ACT_ALLOW"
        and "mount" in r["names"]
        and r.get("includes", {}).get("caps") == ["CAP_SYS_ADMIN"]
        and not r.get("args")
    ]
    if len(gated) != 1:
        raise SystemExit("expected exactly one CAP_SYS_ADMIN rule that allows mount")
    for name in added:
        if any(name in r["names"] for r in rules if r.get("action") == "SCMP_ACT_ALLOW" and r is not gated[0]):
            raise SystemExit(f"{name} is already allowed by another rule of this profile")
    gated[0]["names"] = sorted({*gated[0]["names"], *added})
    return profile


def add_allowed(profile: dict[str, Any], added: list[str]) -> dict[str, Any]:
    plain = [
        r
        for r in profile["syscalls"]
        if r.get("action") == "SCMP_ACT_ALLOW" and not r.get("args") and not r.get("includes") and not r.get("excludes")
    ]
    if not plain:
        raise SystemExit("expected an unconditional allow rule")
    names = plain[0]["names"]
    for name in added:
        if name not in names:
            names.append(name)
    return profile


def refuse(profile: dict[str, Any], refused: list[str]) -> dict[str, Any]:
    """Take each name out of every allow rule; a rule left with no name goes."""
    kept = []
    for rule in profile["syscalls"]:
        if rule.get("action") == "SCMP_ACT_ALLOW":
            rule["names"] = [n for n in rule["names"] if n not in refused]
            if not rule["names"]:
                continue
        kept.append(rule)
    profile["syscalls"] = kept
    return profile


def apply(profile: dict[str, Any], policy: dict[str, str]) -> dict[str, Any]:
    def names(decision: str) -> list[str]:
        return [n for n, d in policy.items() if d == decision]

    return refuse(add_allowed(add_sysadmin(profile, names("sysadmin")), names("allow")), names("refuse"))


def main() -> int:
    profile = apply(load_default(sys.argv[1] if len(sys.argv) > 1 else None), load_policy())
    OUT.write_text(json.dumps(profile, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
