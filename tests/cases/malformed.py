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
    #: a field the CRD does not have: the API server refuses it (strict field validation, kubectl's
    #: default); the operator itself leaves it out with a warning, as it must a newer CRD's field
    unknown: bool = False


_REPO = {"url": "s3:https://s3.example.com/bucket/warden", "credentialsSecret": "jail-backup"}


def _with(**changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(BASE)
    spec.update(copy.deepcopy(changes))
    return spec


def _external(**changes: Any) -> dict[str, Any]:
    external = {"host": "db.example.com", "passwordSecretRef": {"name": "db"}, **changes}
    return {"mode": "External", "external": external}


def _group(**changes: Any) -> dict[str, Any]:
    return _with(workerGroups=[{"name": "cpu", "replicas": 1, **changes}])


#: a worker group whose nodes the bridge's pods may share: requests below its limits
SHARED_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}


def bridge_spec(resources: dict[str, Any] = SHARED_RESOURCES, **changes: Any) -> dict[str, Any]:
    """spec.bridge on group cpu (with ``resources``), with ``changes`` to the spec."""
    spec = _group(resources=resources)
    spec["bridge"] = {"enabled": True, "workerGroups": ["cpu"]}
    spec.update(copy.deepcopy(changes))
    return spec


CASES = [
    Case("no-worker-groups", _with(workerGroups=[]), "workerGroups"),
    Case("negative-replicas", _group(replicas=-1), "replicas"),
    Case("four-controllers", _with(controller={"replicas": 4}), "controller.replicas"),
    Case("takeover-too-short", _with(controller={"replicas": 2, "takeoverSeconds": 3}), "controller.takeoverSeconds"),
    Case("group-name-uppercase", _with(workerGroups=[{"name": "GPU"}]), "name"),
    Case(
        "duplicate-group",
        _with(workerGroups=[{"name": "cpu"}, {"name": "cpu"}]),
        "workerGroups",
    ),
    Case("gpu-count-negative", _group(gpus={"count": -2}), "count"),
    Case("gpu-type-bad", _group(gpus={"count": 1, "type": "H 100"}), "type"),
    Case("bad-quantity", _group(resources={"limits": {"memory": "lots"}}), "limits"),
    Case("unknown-field", _with(workerGroup=[{"name": "x"}]), "workerGroup", unknown=True),
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
    # slurm.conf keys that run programs or change identities as root, wherever they stand on a line
    Case("extra-line-prolog", _with(slurmConfig={"extraLines": ["Prolog=/home/alice/p.sh"]}), "extraLines"),
    Case("extra-line-slurmd-user", _with(slurmConfig={"extraLines": ["SlurmdUser=alice"]}), "extraLines"),
    Case("extra-line-second-pair", _with(slurmConfig={"extraLines": ["MaxJobCount=5 Epilog=/tmp/e"]}), "extraLines"),
    Case("extra-line-lowercase-key", _with(slurmConfig={"extraLines": ["rebootprogram=/x"]}), "extraLines"),
    Case("extra-line-resume-program", _with(slurmConfig={"extraLines": ["ResumeProgram=/x"]}), "extraLines"),
    Case("extra-line-plugin-dir", _with(slurmConfig={"extraLines": ["PluginDir=/home/alice"]}), "extraLines"),
    # an allow-list: keys Warden has not listed, a newer Slurm's among them, are refused too
    Case("extra-line-certmgr", _with(slurmConfig={"extraLines": ["CertmgrType=certmgr/script"]}), "extraLines"),
    Case("extra-line-certmgr-params", _with(slurmConfig={"extraLines": ["CertmgrParameters=x=/y"]}), "extraLines"),
    Case("extra-line-prolog-flags", _with(slurmConfig={"extraLines": ["PrologFlags=X11"]}), "extraLines"),
    Case("extra-line-not-pairs", _with(slurmConfig={"extraLines": ["MaxJobCount=1 and more"]}), "extraLines"),
    Case("extra-line-auth-alt", _with(slurmConfig={"extraLines": ["AuthAltTypes=auth/jwt"]}), "extraLines"),
    Case("extra-line-task-prolog", _with(slurmConfig={"extraLines": ["TaskProlog=/home/a/t"]}), "extraLines"),
    # strings that reach slurmdbd.conf, a manifest or a command line keep to their grammar
    Case("db-host-newline", _with(accounting=_external(host="db\nStorageHost=evil")), "host"),
    Case("db-host-space", _with(accounting=_external(host="db host")), "host"),
    Case("db-user-quote", _with(accounting=_external(user="slurm'--")), "user"),
    Case("db-name-semicolon", _with(accounting=_external(database="acct;drop")), "database"),
    Case("db-secret-name", _with(accounting=_external(passwordSecretRef={"name": "My Secret"})), "name"),
    Case("db-secret-key", _with(accounting=_external(passwordSecretRef={"name": "db", "key": "a/b"})), "key"),
    Case("image-with-space", _with(images={"worker": "warden/worker:1 --privileged"}), "worker"),
    Case("image-newline", _with(images={"login": "warden/login\n:1"}), "login"),
    Case("populate-image", _with(jail={"populate": {"image": "not an image"}}), "image"),
    Case("storage-class-space", _with(jail={"storageClassName": "fast ssd"}), "storageClassName"),
    Case("existing-claim-path", _with(jail={"existingClaim": "../etc"}), "existingClaim"),
    Case("local-mount-dotdot", _group(localMounts=[{"name": "s", "jailPath": "/scratch/../etc"}]), "jailPath"),
    Case("local-mount-system-dir", _group(localMounts=[{"name": "s", "jailPath": "/usr"}]), "jailPath"),
    Case("toleration-key", _group(tolerations=[{"key": "a b", "operator": "Exists"}]), "key"),
    Case("toleration-value", _group(tolerations=[{"key": "gpu", "value": "x;y"}]), "value"),
    Case("toleration-seconds", _group(tolerations=[{"key": "gpu", "tolerationSeconds": -5}]), "tolerationSeconds"),
    Case("node-selector-key", _group(nodeSelector={"bad key": "x"}), "nodeSelector"),
    Case("node-selector-value", _group(nodeSelector={"zone": "a b"}), "nodeSelector"),
    Case("service-annotation-key", _with(login={"service": {"annotations": {"no spaces": "x"}}}), "annotations"),
    Case("gpu-resource-name", _group(gpus={"count": 1, "resourceName": "nvidia gpu"}), "resourceName"),
    Case(
        "seccomp-profile-escapes",
        _with(security={"workerSeccompProfile": {"localhostProfile": "../../etc/shadow"}}),
        "localhostProfile",
    ),
    # sizes: quantities Kubernetes reads, larger than zero, no exponent the renderers cannot hold
    Case("cpu-negative-number", _group(resources={"limits": {"cpu": -4}}), "limits"),
    Case("extra-line-control-character", _with(slurmConfig={"extraLines": ["MaxJobCount=5\x0cPrologx"]}), "extraLines"),
    Case("cpu-exponent", _group(resources={"limits": {"cpu": "1e999"}}), "limits"),
    Case("jail-size-zero", _with(jail={"size": "0"}), "size"),
    Case("jail-size-negative", _with(jail={"size": "-1Gi"}), "size"),
    Case("state-volume-exponent", _with(controller={"stateVolume": {"size": "1e999"}}), "size"),
    Case(
        "local-mount-size-zero",
        _group(localMounts=[{"name": "t", "jailPath": "/tmp", "sizeLimit": "0Mi"}]),
        "sizeLimit",
    ),
    Case("nccl-min-bytes-zero", _with(healthChecks={"nccl": {"minBytes": "0"}}), "minBytes"),
    # SSH forwarding and job privacy: their own fields, one way each
    Case("ssh-forwarding-tcp-yes", _with(login={"forwarding": {"tcp": "yes"}}), "tcp"),
    Case("ssh-forwarding-tunnels", _with(login={"forwarding": {"tunnels": True}}), "tunnels", unknown=True),
    Case("private-data-unknown", _with(slurmConfig={"privateData": ["jobs", "secrets"]}), "privateData"),
    Case("private-data-twice", _with(slurmConfig={"privateData": ["jobs", "jobs"]}), "privateData"),
    Case("extra-line-private-data", _with(slurmConfig={"extraLines": ["PrivateData=none"]}), "extraLines"),
    # specs that would break or weaken a cluster later, refused now (issue 34)
    Case(
        "request-above-limit",
        _group(resources={"requests": {"memory": "64Gi"}, "limits": {"memory": "16Gi"}}),
        "requests",
    ),
    Case(
        "request-above-limit-units",
        _group(resources={"requests": {"cpu": "5"}, "limits": {"cpu": "4000m"}}),
        "requests",
    ),
    Case("partition-named-default", _with(partitions=[{"name": "Default", "workerGroups": ["cpu"]}]), "name"),
    Case(
        "allow-groups-all",
        _with(partitions=[{"name": "p", "workerGroups": ["cpu"], "allowGroups": ["ALL"]}]),
        "allowGroups",
    ),
    Case("local-mount-slurm-config", _group(localMounts=[{"name": "s", "jailPath": "/etc/slurm"}]), "jailPath"),
    Case("local-mount-slurmd-spool", _group(localMounts=[{"name": "s", "jailPath": "/var/spool/slurmd"}]), "jailPath"),
    Case("local-mount-munge", _group(localMounts=[{"name": "s", "jailPath": "/run/munge"}]), "jailPath"),
    Case("local-mount-a-home", _group(localMounts=[{"name": "s", "jailPath": "/home/alice"}]), "jailPath"),
    Case("extra-line-continues", _with(slurmConfig={"extraLines": ["MaxJobCount=5 \\"]}), "extraLines"),
    Case("nccl-bytes-swapped", _with(healthChecks={"nccl": {"minBytes": "8G", "maxBytes": "1G"}}), "minBytes"),
    Case(
        "local-mounts-one-path",
        _group(localMounts=[{"name": "a", "jailPath": "/scratch"}, {"name": "b", "jailPath": "/scratch"}]),
        "localMounts",
    ),
    Case(
        "local-mounts-one-name",
        _group(localMounts=[{"name": "a", "jailPath": "/scratch"}, {"name": "a", "jailPath": "/scratch2"}]),
        "localMounts",
    ),
    Case(
        "extra-line-job-container",
        _with(slurmConfig={"extraLines": ["JobContainerType=job_container/tmpfs"]}),
        "extraLines",
    ),
    Case("extra-line-launch-type", _with(slurmConfig={"extraLines": ["LaunchType=launch/other"]}), "extraLines"),
    Case("extra-line-select-type", _with(slurmConfig={"extraLines": ["SelectType=select/linear"]}), "extraLines"),
    # limits between users (docs/security.md, "Tokens, identities and privacy", "Login sessions have per-user limits")
    Case("token-lifespan-ten-years", _with(security={"maxTokenLifespanSeconds": 315360000}), "maxTokenLifespanSeconds"),
    Case(
        "extra-line-auth-alt-parameters",
        _with(slurmConfig={"extraLines": ["AuthAltParameters=jwt_key=/etc/slurm/jwt_hs256.key"]}),
        "extraLines",
    ),
    Case("login-user-memory-too-small", _with(login={"userLimits": {"memory": "1Mi"}}), "userLimits.memory"),
    Case("login-user-cpu-too-small", _with(login={"userLimits": {"cpu": "1m"}}), "userLimits.cpu"),
    # the bridge: Slurm with external jobs, groups of this spec with room for pods, a partition of its own
    Case("bridge-on-slurm-24-11", bridge_spec(slurmVersion="24.11"), "bridge"),
    Case("bridge-without-groups", bridge_spec(bridge={"enabled": True}), "bridge.workerGroups"),
    Case("bridge-unknown-group", bridge_spec(bridge={"enabled": True, "workerGroups": ["gpu"]}), "bridge.workerGroups"),
    Case(
        "bridge-requests-unset", bridge_spec(resources={"limits": {"cpu": "1", "memory": "1Gi"}}), "bridge.workerGroups"
    ),
    Case(
        "bridge-requests-at-limits",
        bridge_spec(resources={"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}),
        "bridge.workerGroups",
    ),
    Case(
        "bridge-partition-taken",
        bridge_spec(bridge={"enabled": True, "workerGroups": ["cpu"], "partition": "main"}),
        "bridge.partition",
    ),
    Case(
        "bridge-partition-default",
        bridge_spec(bridge={"enabled": True, "workerGroups": ["cpu"], "partition": "DEFAULT"}),
        "bridge.partition",
    ),
    Case(
        "bridge-scheduler-name",
        bridge_spec(bridge={"enabled": True, "workerGroups": ["cpu"], "schedulerName": "Warden Slurm"}),
        "schedulerName",
    ),
    Case("backup-without-repository", _with(jail={"backup": {"enabled": True}}), "jail.backup.repository"),
    Case(
        "backup-two-repositories",
        _with(jail={"backup": {"enabled": True, "repository": {**_REPO, "claimName": "backups"}}}),
        "jail.backup.repository.url",
    ),
    Case(
        "backup-password-in-url",
        _with(jail={"backup": {"repository": {**_REPO, "url": "rest:https://admin:hunter2@backup.example.com/"}}}),
        "jail.backup.repository.url",
    ),
    Case("backup-url-with-space", _with(jail={"backup": {"repository": {**_REPO, "url": "s3:x y"}}}), "url"),
    Case(
        "backup-keeps-nothing",
        _with(jail={"backup": {"keep": {"daily": 0, "weekly": 0, "monthly": 0}}}),
        "jail.backup.keep",
    ),
    Case("backup-schedule", _with(jail={"backup": {"schedule": "daily"}}), "jail.backup.schedule"),
    Case("backup-exclude-relative", _with(jail={"backup": {"exclude": ["tmp"]}}), "exclude"),
    Case("backup-without-secret", _with(jail={"backup": {"repository": {"claimName": "b"}}}), "credentialsSecret"),
    Case(
        "restore-snapshot",
        _with(jail={"restoreFrom": {"repository": _REPO, "snapshot": "newest"}}),
        "jail.restoreFrom.snapshot",
    ),
    # SSH to the workers: root gets in by the spec's keys only, never as an admin; admins are user names
    Case("worker-ssh-root-admin", _with(workerSsh={"enabled": True, "admins": ["root"]}), "admins"),
    Case("worker-ssh-admin-name", _with(workerSsh={"enabled": True, "admins": ["Bad Name"]}), "admins"),
    Case(
        "worker-ssh-root-key",
        _with(workerSsh={"enabled": True, "rootAuthorizedKeys": ["not a key"]}),
        "rootAuthorizedKeys",
    ),
]
