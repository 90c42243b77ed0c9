"""The Docker host the dataplane tier runs on, beside the local cluster (`make test` runs them side by side).

kube-router's firewall (the local cluster's NetworkPolicy enforcement) replaces the whole iptables filter
table on each of its syncs: it saves the table, changes its own chains and restores all of it. A Docker
network made between its save and its restore loses the rules Docker added for it. With Docker's FORWARD
policy DROP, that network's containers then never reach each other (seen in a run: every slurmd of a
dataplane cluster "Unable to contact slurm controller" for nine minutes, the module's tests all failed).
`hack/docker.sh` keeps the policy ACCEPT for the engine it starts; this test takes a network's rules away as
that restore does (those of its own network only) and connects across it.
"""

from __future__ import annotations

import shlex
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from warden_dev.dockercluster import docker
from warden_dev.localcluster import project_version

IMAGE = f"warden/slurm-base:{project_version()}"  # python3 for a server, bash for the client's /dev/tcp


def _forget_rules_of(bridge: str) -> list[str]:
    """Delete the filter table's rules that name ``bridge``, as a restore of a table saved before the network
    existed does (kube-router's), and only those: the other lanes' networks and the cluster's chains keep theirs."""
    rules = subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True, check=True).stdout
    mine = [r for r in rules.splitlines() if r.startswith("-A ") and bridge in r.split()]
    for rule in mine:
        subprocess.run(["iptables", "-w", "-D", *shlex.split(rule)[1:]], check=True, capture_output=True)
    return mine


@pytest.fixture
def raced_network() -> Iterator[str]:
    """A network with a server on it whose filter rules were lost, as to kube-router's restore."""
    name = f"warden-raced-{uuid.uuid4().hex[:6]}"
    try:
        docker("network", "create", name)
        docker("run", "-d", "--rm", "--name", f"{name}-server", "--network", name, IMAGE,
               "python3", "-m", "http.server", "8000")  # fmt: skip
        bridge = "br-" + docker("network", "inspect", "-f", "{{.Id}}", name).stdout.strip()[:12]
        assert _forget_rules_of(bridge), f"Docker made no filter rules for {bridge}"
        yield name
    finally:
        docker("rm", "-f", f"{name}-server", check=False)
        docker("network", "rm", name, check=False)


def test_a_network_made_during_another_programs_filter_table_restore_still_connects(raced_network: str) -> None:
    connect = (f"for i in $(seq 20); do exec 3<>/dev/tcp/{raced_network}-server/8000 2>/dev/null && "
               "echo connected && exit 0; sleep 0.5; done; echo 'no connection'; exit 1")  # fmt: skip
    out = docker("run", "--rm", "--network", raced_network, IMAGE, "timeout", "30", "bash", "-c", connect,
                 check=False, timeout=60)  # fmt: skip
    rules = subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True, text=True).stdout
    assert out.stdout.strip() == "connected", f"{out.stdout}{out.stderr}\nFORWARD now:\n{rules}"
