"""The SlurmClusters the dataplane and conformance tiers run (as a manifest's `spec:`)."""

from __future__ import annotations

import copy
from typing import Any

from tests.support import directory

#: Two CPU workers, one GPU worker with two (fake) GPUs of type "fake", a login node, in-cluster
#: accounting, dcgm-exporter's GPU job mapping (so every job runs slurmd's Prolog and Epilog). Each
#: worker claims 2 CPUs and 1 GiB, which every CI machine has. The conformance tier runs SchedMD's suite
#: on this one: its tests count nodes and partitions.
BASE_SPEC: dict[str, Any] = {
    # SchedMD's test_138_2 starts 1000 sinfo and squeue at once in one session, each with its threads: past
    # the login's default per-user limit of 1024 processes and threads some fail with EAGAIN
    "login": {"replicas": 1, "userLimits": {"processes": 16384}},
    "workerGroups": [
        {"name": "cpu", "replicas": 2, "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}},
        {
            "name": "gpu",
            "replicas": 1,
            "gpus": {"count": 2, "type": "fake"},
            "resources": {"limits": {"cpu": "2", "memory": "1Gi"}},
        },
    ],
    "partitions": [
        {"name": "cpu", "workerGroups": ["cpu"], "default": True},
        {"name": "gpu", "workerGroups": ["gpu"]},
    ],
    # no default account: SchedMD's suite makes and counts its own accounts and associations; and nothing
    # enforced (Slurm's default, which the suite expects: its users have no association)
    "accounting": {"mode": "InCluster", "defaultAccount": "", "enforce": []},
    "metrics": {"dcgmJobMapping": {"enabled": True}},
}

#: The dataplane tier's: BASE_SPEC with containers in jobs (pyxis; the test registry speaks plain HTTP)
#: on those groups, one worker of group `plain` without containers (partition `plain`): the jail's
#: behaviour either way; accounting's default account, as the chart has it; and an LDAP directory.
SPEC: dict[str, Any] = copy.deepcopy(BASE_SPEC)
SPEC["workerGroups"].append(
    {"name": "plain", "replicas": 1, "containers": False, "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}
)
SPEC["partitions"].append({"name": "plain", "workerGroups": ["plain"]})
# a user's steps on `plain` stop at 1024 processes and threads (tests/dataplane/test_job_space.py goes past it)
SPEC["workerGroups"][-1]["maxUserProcesses"] = 1024
# and have, beside their own /tmp and /dev/shm, a node-local /scratch every job on the node shares
# (tests/dataplane/test_root_helpers.py: sbcast and MPI steps' files land there)
SPEC["workerGroups"][-1]["localMounts"] = [
    {"name": "tmp", "jailPath": "/tmp", "perJob": True},
    {"name": "shm", "jailPath": "/dev/shm", "medium": "Memory", "perJob": True},
    {"name": "scratch", "jailPath": "/scratch", "sizeLimit": "256Mi"},
]
SPEC["containers"] = {"enabled": True, "allowHttpRegistries": True, "store": {"sizeLimit": "4Gi"}}
# jail users join the default account `users` on their own; associations, limits and QoS are enforced
SPEC["accounting"] = {"mode": "InCluster"}
# directory users beside the jail's (tests/support/directory.py: slapd on the cluster's network, TLS on);
# partition `physics` admits only members of the directory group physics (on group `plain`, whose node
# the other tests never list: `sinfo -N` shows a node once per partition)
SPEC["identity"] = directory.spec()
SPEC["partitions"].append({"name": "physics", "workerGroups": ["plain"], "allowGroups": ["physics"]})
# each user's SSH sessions on the login node share 384 MiB, one CPU and 200 processes
# (tests/dataplane/test_identity_limits.py goes past memory and processes)
SPEC["login"]["userLimits"] = {"memory": "384Mi", "cpu": "1", "processes": 200}
