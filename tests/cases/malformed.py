"""Malformed SlurmCluster specs, each with the field its rejection must name.

Used twice: by the unit tier against the spec model (what the operator itself enforces) and by the
integration tier against a real kube-apiserver with the generated CRD installed (admission).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

BASE: dict[str, Any] = {"workerGroups": [{"name": "cpu", "replicas": 1}]}


@dataclass(frozen=True)
class Case:
    id: str
    spec: dict[str, Any]
    field: str  # must appear in the error message (dotted path, as kubectl prints it)


def _with(**changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(BASE)
    spec.update(copy.deepcopy(changes))
    return spec


def _group(**changes: Any) -> dict[str, Any]:
    return _with(workerGroups=[{"name": "cpu", "replicas": 1, **changes}])


CASES = [
    Case("no-worker-groups", _with(workerGroups=[]), "workerGroups"),
    Case("negative-replicas", _group(replicas=-1), "replicas"),
    Case("group-name-uppercase", _with(workerGroups=[{"name": "GPU"}]), "name"),
    Case(
        "duplicate-group",
        _with(workerGroups=[{"name": "cpu"}, {"name": "cpu"}]),
        "workerGroups",
    ),
    Case("gpu-count-negative", _group(gpus={"count": -2}), "count"),
    Case("gpu-type-bad", _group(gpus={"count": 1, "type": "H 100"}), "type"),
    Case("bad-quantity", _group(resources={"limits": {"memory": "lots"}}), "limits"),
    Case("unknown-field", _with(workerGroup=[{"name": "x"}]), "workerGroup"),
    Case("login-service-type", _with(login={"service": {"type": "Ingress"}}), "type"),
    Case("login-nodeport-range", _with(login={"service": {"nodePort": 80}}), "nodePort"),
    Case("ssh-key-not-a-key", _with(login={"sshAuthorizedKeys": ["hunter2"]}), "sshAuthorizedKeys"),
    Case(
        "partition-unknown-group",
        _with(partitions=[{"name": "p", "workerGroups": ["gpu"]}]),
        "partitions",
    ),
    Case(
        "two-default-partitions",
        _with(
            partitions=[
                {"name": "a", "workerGroups": ["cpu"], "default": True},
                {"name": "b", "workerGroups": ["cpu"], "default": True},
            ]
        ),
        "partitions",
    ),
    Case(
        "extra-line-owned-key",
        _with(slurmConfig={"extraLines": ["SlurmctldHost=evil"]}),
        "extraLines",
    ),
    Case(
        "extra-line-injection",
        _with(slurmConfig={"extraLines": ["MaxJobCount=10\nSlurmUser=root"]}),
        "extraLines",
    ),
    Case("accounting-external-missing", _with(accounting={"mode": "External"}), "external"),
    Case("accounting-mode", _with(accounting={"mode": "Sometimes"}), "mode"),
    Case(
        "jail-claim-and-class",
        _with(jail={"existingClaim": "mine", "storageClassName": "nfs"}),
        "existingClaim",
    ),
    Case("nccl-threshold-zero", _with(healthChecks={"nccl": {"minBusBandwidthGbps": 0}}), "minBusBandwidthGbps"),
    Case("nccl-schedule", _with(healthChecks={"nccl": {"schedule": "every hour"}}), "schedule"),
    Case("quick-interval", _with(healthChecks={"quick": {"intervalSeconds": 1}}), "intervalSeconds"),
    Case(
        "local-mount-relative",
        _group(localMounts=[{"name": "scratch", "jailPath": "scratch"}]),
        "jailPath",
    ),
    Case("pull-policy", _with(images={"pullPolicy": "Sometimes"}), "pullPolicy"),
]
