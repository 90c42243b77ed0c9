"""A login pod whose mounts are refused never serves a broken jail: it stops, saying why.

On a node with AppArmor, the runtime's default profile denies ``mount`` to a container that has
CAP_SYS_ADMIN (docs/nodes.md, "AppArmor"). This host has no AppArmor; the same refusal is made here by a
seccomp profile that fails mount(2) with EPERM, as AppArmor does, while the container keeps every capability
it asks for. The login pod is started again from the cluster's own arguments with only that changed."""

from __future__ import annotations

import json

from warden_dev.dockercluster import DockerCluster, docker

#: every system call allowed except the ones the jail is made of: EPERM, as AppArmor's denial returns
NO_MOUNTS = {
    "defaultAction": "SCMP_ACT_ALLOW",
    "syscalls": [{"names": ["mount", "umount2", "pivot_root", "move_mount", "open_tree", "fsmount"],
                  "action": "SCMP_ACT_ERRNO", "errnoRet": 1}],
}  # fmt: skip


def test_a_login_pod_whose_mounts_are_refused_stops_and_says_why(cluster: DockerCluster) -> None:
    (login,) = [p for p in cluster.pods.values() if p.component == "login"][:1]
    profile = cluster.dir / "no-mounts.json"
    profile.write_text(json.dumps(NO_MOUNTS))
    name = f"{login.container}-no-mounts"
    args: list[str] = []
    skip = False
    for i, a in enumerate(login.args):
        if skip:
            skip = False
            continue
        # its own name, no DNS alias (the real login pod keeps its name), seccomp: the profile above
        if a in ("--name", "--network-alias", "--hostname") and i + 1 < len(login.args):
            skip = True
            continue
        if a.startswith(("--name=", "--network-alias=", "--hostname=")) or a.startswith("--security-opt=seccomp"):
            continue
        if a == "--security-opt" and login.args[i + 1].startswith("seccomp"):
            skip = True
            continue
        args.append(a)
    assert "--cap-add=SYS_ADMIN" in args or "SYS_ADMIN" in args, "the login pod asks for CAP_SYS_ADMIN"
    docker("run", "-d", "--name", name, "--security-opt", f"seccomp={profile}", *args, login.image, *login.argv)
    try:
        rc = int(docker("wait", name, timeout=180).stdout.strip())
        logs = docker("logs", name, check=False)
    finally:
        docker("rm", "-fv", name, check=False)
    out = logs.stdout + logs.stderr
    assert rc != 0, out[-3000:]
    # it stops at its first mount (the session cgroups, /proc, or the jail's binds), naming the fix
    assert "error: " in out and "spec.security.appArmorProfile" in out, out[-3000:]
    assert "sshd (" not in out, "sshd served a login pod whose mounts were refused"
