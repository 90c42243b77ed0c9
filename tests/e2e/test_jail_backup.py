"""The jail backed up and restored (issue 57), as an admin lives it: a cluster with `jail.backup` to a
backup volume, a user's file in their home and a package root installed in the jail (`dpkg -i`), a backup
run now (`kubectl create job --from=cronjob/...`), the cluster uninstalled with its jail deleted, a new
cluster installed with `jail.restoreFrom`, and the user logs in again: the file and the package are back.

The stores are made here: a PVC holding a restic repository (restic's local backend) and the Secret with its
password; and a remote one for the restored cluster's own backups, restic's REST protocol served by
tests/support/restic_rest.py in a pod (a URL repository: credentials from the Secret, reached through the
backup's egress policy). Its own installation (module fixture); one test, as its steps depend on each other.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_slurmcluster import NAME, RESOURCES, Installed, _eventually
from warden_dev.localcluster import Kube, install_charts, new_ssh_key, uninstall_charts, wait_slurmcluster_ready

SECRET = "jail-backup"
STORE = "jail-backups"
REPOSITORY = {"claimName": STORE, "credentialsSecret": SECRET}
PACKAGE = "warden-e2e-tool"
#: a remote store: restic's REST protocol served by tests/support/restic_rest.py in a pod of its own
REST = "restic-rest"
REST_SECRET = "jail-backup-rest"
REST_SERVER = Path(__file__).resolve().parents[1] / "support" / "restic_rest.py"


def _values(pubkey: str, **jail: Any) -> dict[str, Any]:
    return {
        "nameOverride": NAME,
        "jail": {"size": "2Gi", "retainOnDelete": False, **jail},
        "login": {"sshAuthorizedKeys": [pubkey], "service": {"type": "NodePort"}},
        "workerGroups": [{"name": "cpu", "replicas": 1, "resources": RESOURCES}],
    }


def _store(kube: Kube, namespace: str, operator: str) -> None:
    """The backup volume and the repository's password: what an admin makes before enabling backups; and a
    remote store (a REST server with its own user and password, in the operator's image: it has Python)."""
    image = kube.json("-n", namespace, "get", "deployment", f"{operator}-slurm-operator")["spec"]["template"]
    image = image["spec"]["containers"][0]["image"]
    rest_user = {"RESTIC_REST_USERNAME": "backup", "RESTIC_REST_PASSWORD": uuid.uuid4().hex}
    labels = {"app": REST}
    kube.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": REST, "namespace": namespace},
                "data": {"restic_rest.py": REST_SERVER.read_text()},
            },
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": f"{REST}-users", "namespace": namespace},
                "stringData": rest_user,
            },
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": REST, "namespace": namespace, "labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "server",
                            "image": image,
                            "command": ["/opt/warden/bin/python3", "/srv/restic_rest.py", "/store", "8000"],
                            "envFrom": [{"secretRef": {"name": f"{REST}-users"}}],
                            "ports": [{"containerPort": 8000}],
                            "volumeMounts": [
                                {"name": "code", "mountPath": "/srv"},
                                {"name": "store", "mountPath": "/store"},
                            ],
                        }
                    ],
                    "volumes": [{"name": "code", "configMap": {"name": REST}}, {"name": "store", "emptyDir": {}}],
                },
            },
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": REST, "namespace": namespace},
                "spec": {"selector": labels, "ports": [{"port": 8000, "targetPort": 8000}]},
            },
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": REST_SECRET, "namespace": namespace},
                "stringData": {"RESTIC_PASSWORD": uuid.uuid4().hex, **rest_user},
            },
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": STORE, "namespace": namespace},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            },
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": SECRET, "namespace": namespace},
                "stringData": {"RESTIC_PASSWORD": uuid.uuid4().hex},
            },
        ]
    )


@pytest.fixture(scope="module")
def setup(kube: Kube, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Kube, str, str, Path]]:
    tmp = tmp_path_factory.mktemp("backup")
    suffix = uuid.uuid4().hex[:6]
    namespace = f"warden-backup-{suffix}"
    operator = f"op-{suffix}"
    try:
        # the operator first: its image serves the REST store
        install_charts(kube, namespace, namespace, {}, tmp / "values.json", operator_release=operator, crds="chart",
                       cluster=False)  # fmt: skip
        _store(kube, namespace, operator)
        yield kube, namespace, operator, tmp
    finally:
        uninstall_charts(kube, namespace, NAME, operator, "slurm-operator-crds")


def _install(setup: tuple[Kube, str, str, Path], key: Path, **jail: Any) -> Installed:
    kube, namespace, operator, tmp = setup
    values = _values(key.with_suffix(".pub").read_text().strip(), **jail)
    install_charts(kube, namespace, namespace, values, tmp / "values.json", operator_release=operator, crds="chart")
    status = wait_slurmcluster_ready(kube, namespace, NAME, timeout=600)
    return Installed(kube, namespace, values, tmp / "values.json", key, status, False, tmp, {})


def _ok(out: Any) -> str:
    assert out.returncode == 0, f"exit {out.returncode}: {out.stderr.strip()}\n{out.stdout}"
    return str(out.stdout)


def _install_package(installed: Installed, token: str) -> None:
    """root on the login node (in the jail) builds a .deb and installs it with dpkg, as software gets installed."""
    _ok(
        installed.ssh(
            f"""set -e
d=$(mktemp -d)
mkdir -p $d/DEBIAN $d/usr/local/bin
printf '%s\\n' 'Package: {PACKAGE}' 'Version: 1.0' 'Architecture: all' 'Maintainer: e2e <e2e@example.com>' \\
  'Description: a tool a user asked for' > $d/DEBIAN/control
printf '#!/bin/sh\\necho {token}\\n' > $d/usr/local/bin/{PACKAGE}
chmod 0755 $d/usr/local/bin/{PACKAGE}
dpkg-deb --root-owner-group --build $d /root/{PACKAGE}.deb >/dev/null
dpkg -i /root/{PACKAGE}.deb >/dev/null
rm -rf $d""",
            timeout=120,
        )
    )


def _finished(kube: Kube, namespace: str, job: str) -> str:
    """ "Complete" or "Failed" once the Job ended, else ""."""
    conditions = kube.json("-n", namespace, "get", "job", job).get("status", {}).get("conditions", [])
    return next((c["type"] for c in conditions if c["type"] in ("Complete", "Failed") and c["status"] == "True"), "")


def _job_figures(kube: Kube, namespace: str, job: str) -> tuple[float, str]:
    """A finished Job's run time (its status) and what its container said last (termination message)."""
    status = kube.json("-n", namespace, "get", "job", job)["status"]
    start = time.strptime(status["startTime"], "%Y-%m-%dT%H:%M:%SZ")
    end = time.strptime(status["completionTime"], "%Y-%m-%dT%H:%M:%SZ")
    pods = kube.json("-n", namespace, "get", "pods", "-l", f"job-name={job}")["items"]
    ended = [p["status"]["containerStatuses"][0]["state"].get("terminated") or {} for p in pods]
    message = next((e.get("message", "") for e in ended if e.get("exitCode") == 0), "")
    return time.mktime(end) - time.mktime(start), str(message).strip()


def test_a_users_home_and_installed_package_come_back_in_a_new_cluster(
    setup: tuple[Kube, str, str, Path],
) -> None:
    kube, namespace, _, tmp = setup
    key = new_ssh_key(tmp / "id_ed25519", "warden-e2e")
    token = uuid.uuid4().hex
    backup = {"enabled": True, "schedule": "0 3 * * *", "keep": {"last": 3}, "repository": REPOSITORY}
    first = _install(setup, key, backup=backup)

    # a user's work and root's software install, in the jail
    user_key = first.make_user("hana")
    _ok(first.ssh(f"echo {token} > ~/results.txt && chmod 600 ~/results.txt", key=user_key, user="hana"))
    _install_package(first, token)
    assert _ok(first.ssh(PACKAGE)).strip() == token

    # the scheduled backup, run now
    cron = kube.json("-n", namespace, "get", "cronjob", f"{NAME}-jail-backup")
    assert cron["spec"]["schedule"] == "0 3 * * *"
    kube.kubectl("-n", namespace, "create", "job", "--from", f"cronjob/{NAME}-jail-backup", "backup-now")
    done = _eventually("the backup Job finished", lambda: _finished(kube, namespace, "backup-now"), 600, 2)
    logs = kube.kubectl("-n", namespace, "logs", "job/backup-now", check=False)
    assert done == "Complete", f"backup Job {done}:\n{logs[-3000:]}"
    took, summary = _job_figures(kube, namespace, "backup-now")
    print(f"backup: {took:.0f}s; {summary}")
    assert summary.startswith("snapshot ") and " saved " in summary, summary
    snapshot = summary.split()[1]
    # the SlurmCluster's status and an Event say it too
    _eventually(
        "status.jailBackup.lastRun naming the snapshot",
        lambda: snapshot in str(kube.json("-n", namespace, "get", "slurmcluster", NAME)["status"].get("jailBackup")),
        120,
    )
    events = ("-n", namespace, "get", "events", "--field-selector", "reason=JailBackedUp", "-o", "name")
    _eventually("a JailBackedUp Event", lambda: kube.kubectl(*events).strip(), 120)

    # the cluster uninstalled, its jail deleted with it (retainOnDelete: false)
    old_claim = kube.json("-n", namespace, "get", "pvc", f"{NAME}-jail")["metadata"]["uid"]
    kube.helm("uninstall", NAME, "-n", namespace, "--wait")
    _eventually(
        "the jail's claim deleted",
        lambda: not kube.kubectl("-n", namespace, "get", "pvc", f"{NAME}-jail", "--ignore-not-found").strip(),
        300,
    )

    # a new cluster restored from the backup (its latest snapshot: the one just made), backing up to a remote
    # store from now on
    rest = {"url": f"rest:http://{REST}.{namespace}.svc.cluster.local:8000/", "credentialsSecret": REST_SECRET}
    second = _install(
        setup,
        key,
        restoreFrom={"repository": REPOSITORY},
        backup={"enabled": True, "keep": {"last": 2}, "repository": rest},
    )
    assert kube.json("-n", namespace, "get", "pvc", f"{NAME}-jail")["metadata"]["uid"] != old_claim
    logs = kube.kubectl("-n", namespace, "logs", f"job/{NAME}-populate-jail", "-c", "restore-jail")
    print(f"restore: {logs.strip().splitlines()[-1]}")
    assert f"restored snapshot {snapshot}" in logs, logs

    # the user logs in with their key (passwd and authorized_keys came back) and finds their file, theirs alone
    home = _ok(second.ssh("cat ~/results.txt; stat -c '%U %a' ~/results.txt", key=user_key, user="hana"))
    assert home.split() == [token, "hana", "600"], home
    # root's package: dpkg knows it and its program runs
    status = _ok(second.ssh(f"dpkg-query -W -f '${{Status}} ${{Version}}' {PACKAGE}; echo; {PACKAGE}"))
    assert status.split("\n")[:2] == ["install ok installed 1.0", token], status

    # the restored jail backed up to the REST store, over the network: its egress policy lets the backup pod out
    assert kube.json("-n", namespace, "get", "networkpolicy", f"{NAME}-jail-backup")["spec"]["policyTypes"] == [
        "Egress"
    ]
    kube.kubectl("-n", namespace, "create", "job", "--from", f"cronjob/{NAME}-jail-backup", "backup-rest")
    done = _eventually("the backup Job finished", lambda: _finished(kube, namespace, "backup-rest"), 600, 2)
    logs = kube.kubectl("-n", namespace, "logs", "job/backup-rest", check=False)
    assert done == "Complete", f"backup Job {done}:\n{logs[-3000:]}"
    took_rest, summary_rest = _job_figures(kube, namespace, "backup-rest")
    print(f"backup to the REST store: {took_rest:.0f}s; {summary_rest}")
    assert summary_rest.startswith("snapshot ") and "kept: 1" in summary_rest, summary_rest
    print(json.dumps({"snapshot": snapshot, "backup_s": took}))
