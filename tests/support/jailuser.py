"""A user of the jail in a Docker dataplane cluster (dev/warden_dev/dockercluster.py): made by root with
warden-useradd over SSH on the login node, with an SSH key of their own. Used by the dataplane and
conformance tiers."""

from __future__ import annotations

import shlex

from warden_dev.dockercluster import DockerCluster, wait_for


class JailUser:
    """A user created in the jail with warden-useradd, with their own SSH key."""

    def __init__(self, cluster: DockerCluster, name: str) -> None:
        self.cluster = cluster
        self.name = name
        self.identity, self.public_key = cluster.user_key(name)

    @classmethod
    def added_by_root(cls, cluster: DockerCluster, name: str) -> JailUser:
        """`warden-useradd` run by root in an SSH session on the login node (chrooted into the jail)."""
        user = cls(cluster, name)
        cluster.ssh("root", f"warden-useradd --key {shlex.quote(user.public_key)} {name}")
        return user

    def add_to_accounting(self, account: str = "lab") -> None:
        """What docs/operations.md has an admin do with accounting: the user gets an association in
        `account` (sacctmgr as root on the controller), unless they have one; returns once slurmctld
        knows it, so the user's next jobs carry it. With job privacy (slurmdbd's PrivateData) sacct
        shows a user only the jobs they submitted with an association."""
        ctl = self.cluster.names.controller_pod
        if self.name not in self.cluster.exec(ctl, f"sacctmgr -n -P show user {self.name} format=user").out.split():
            self.cluster.exec(ctl, f"sacctmgr -i add account {account} >/dev/null 2>&1; "
                                   f"sacctmgr -i add user {self.name} account={account}")  # fmt: skip
        known = f"scontrol show assoc_mgr flags=assoc users={self.name}"
        wait_for(
            f"slurmctld knows {self.name}'s association",
            lambda: f"UserName={self.name}(" in self.cluster.exec(ctl, known).out,
            timeout=30,
        )

    def ssh(self, script: str, check: bool = True, timeout: float = 120, input: str | None = None) -> str:
        r = self.cluster.ssh(self.name, script, check=check, timeout=timeout, identity=self.identity, input=input)
        return r.out
