#!/usr/bin/env python3
"""Write images/worker/seccomp.json: Docker's default seccomp profile plus ``pivot_root``, and
``fchmodat2``.

The worker's SPANK plugin enters the jail with mount + pivot_root. Docker's (and containerd's)
default profile never allows pivot_root; this profile allows it under the same condition as
``mount``/``unshare``/``setns``: only when the container holds CAP_SYS_ADMIN. Everything else keeps
the default's semantics (default action ERRNO, the same allow list and argument filters).
``fchmodat2`` (Linux 6.6; glibc 2.39 changes a file's mode through it, e.g. tar -p when enroot unpacks
an image's layers in a job step) is allowed unconditionally, as Docker's own later profiles do; this
Debian release of the profile predates it, and a kernel that knows the call then answers EPERM.

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

OUT = Path(__file__).resolve().parent / "seccomp.json"
DEB_PATH = "usr/share/gocode/src/github.com/docker/docker/profiles/seccomp/default.json"
ADDED = "pivot_root"
#: newer than this release of the profile, allowed by Docker's later ones without conditions
NEWER = ("fchmodat2",)


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


def add_pivot_root(profile: dict[str, Any]) -> dict[str, Any]:
    rules = profile["syscalls"]
    if any(ADDED in r["names"] for r in rules if r.get("action") == "SCMP_ACT_ALLOW"):
        raise SystemExit(f"{ADDED} is already allowed by this profile")
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
    gated[0]["names"] = sorted([*gated[0]["names"], ADDED])
    return profile


def add_newer(profile: dict[str, Any]) -> dict[str, Any]:
    plain = [
        r
        for r in profile["syscalls"]
        if r.get("action") == "SCMP_ACT_ALLOW" and not r.get("args") and not r.get("includes") and not r.get("excludes")
    ]
    if not plain:
        raise SystemExit("expected an unconditional allow rule")
    names = plain[0]["names"]
    for name in NEWER:
        if name not in names:
            names.append(name)
    return profile


def main() -> int:
    profile = add_newer(add_pivot_root(load_default(sys.argv[1] if len(sys.argv) > 1 else None)))
    OUT.write_text(json.dumps(profile, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
