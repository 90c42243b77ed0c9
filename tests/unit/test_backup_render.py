"""The jail's backups and restores as rendered: the CronJob an admin schedules, the populate Job that
restores a new jail, and who gets the repository's Secret."""

from __future__ import annotations

from typing import Any

from warden import naming
from warden.model import JailBackupStatus, SlurmClusterStatus, parse_spec
from warden.render.cluster import render
from warden.render.context import Cluster
from warden.status import backup_status, new_backup_run

SECRET = "jail-backup"
BASE: dict[str, Any] = {"workerGroups": [{"name": "cpu", "replicas": 2}]}
CLAIM_REPO = {"claimName": "backups", "credentialsSecret": SECRET}
S3_REPO = {"url": "s3:https://s3.example.com/bucket/warden", "credentialsSecret": SECRET}


def objects(jail: dict[str, Any], **spec: Any) -> dict[str, dict[str, Any]]:
    cluster = Cluster(name="demo", namespace="hpc", spec=parse_spec({**BASE, **spec, "jail": jail}))
    return {f"{o['kind']}/{o['metadata']['name']}": o for o in render(cluster).objects}


def pods(objs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for key, obj in objs.items():
        spec = obj.get("spec") or {}
        if obj["kind"] == "CronJob":
            spec = spec["jobTemplate"]["spec"]
        if isinstance(spec.get("template"), dict):
            out[key] = spec["template"]["spec"]
    return out


def backup_pod(objs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    pod: dict[str, Any] = objs["CronJob/demo-jail-backup"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return pod


def env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


def test_no_backup_and_no_restore_by_default() -> None:
    objs = objects({})
    assert not [k for k in objs if "jail-backup" in k]
    assert "initContainers" not in objs["Job/demo-populate-jail"]["spec"]["template"]["spec"]


def test_a_scheduled_backup_reads_the_jail_and_writes_only_its_repository() -> None:
    objs = objects({"backup": {"enabled": True, "schedule": "30 2 * * *", "repository": CLAIM_REPO}})
    cron = objs["CronJob/demo-jail-backup"]
    assert cron["spec"]["schedule"] == "30 2 * * *"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = backup_pod(objs)
    (container,) = pod["containers"]
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts[naming.JAIL_MOUNT]["readOnly"] is True
    assert not mounts[naming.BACKUP_REPOSITORY_MOUNT].get("readOnly")
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["jail"]["persistentVolumeClaim"]["claimName"] == "demo-jail"
    assert volumes["repository"]["persistentVolumeClaim"]["claimName"] == "backups"
    assert env(container)["RESTIC_REPOSITORY"] == "/repository/restic"
    assert container["envFrom"] == [{"secretRef": {"name": SECRET}}]
    # root that may read users' homes and nothing more; no API token
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["DAC_READ_SEARCH"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["automountServiceAccountToken"] is False
    assert container["terminationMessagePath"] == naming.TERMINATION_LOG


def test_the_keep_policy_and_exclusions_reach_restic() -> None:
    objs = objects(
        {"backup": {"enabled": True, "repository": CLAIM_REPO, "keep": {"last": 3, "daily": 2, "weekly": 0}}}
    )
    args = backup_pod(objs)["containers"][0]["args"]
    assert args == [
        "--host", "demo",
        "--keep-last", "3", "--keep-daily", "2", "--keep-monthly", "6",
        "--exclude", "/tmp", "--exclude", "/var/tmp",
    ]  # fmt: skip


def test_a_repository_by_url_is_reached_through_its_own_egress_policy() -> None:
    objs = objects({"backup": {"enabled": True, "repository": S3_REPO}})
    assert env(backup_pod(objs)["containers"][0])["RESTIC_REPOSITORY"] == S3_REPO["url"]
    assert "repository" not in {v["name"] for v in backup_pod(objs)["volumes"]}
    policy = objs["NetworkPolicy/demo-jail-backup"]["spec"]
    assert policy["podSelector"]["matchExpressions"][0]["values"] == ["jail-backup"]
    assert policy["policyTypes"] == ["Egress"]
    # a backup volume needs no network
    assert "NetworkPolicy/demo-jail-backup" not in objects({"backup": {"enabled": True, "repository": CLAIM_REPO}})


def test_a_new_jail_is_restored_before_the_copy_and_only_the_restore_sees_the_secret() -> None:
    objs = objects({"restoreFrom": {"repository": CLAIM_REPO, "cluster": "old", "snapshot": "1a2b3c4d"}})
    pod = objs["Job/demo-populate-jail"]["spec"]["template"]["spec"]
    (restore,) = pod["initContainers"]
    assert restore["command"] == ["warden-jail-restore"]
    assert restore["args"] == ["--host", "old", "--snapshot", "1a2b3c4d", "--path", naming.JAIL_MOUNT]
    assert restore["envFrom"] == [{"secretRef": {"name": SECRET}}]
    assert "envFrom" not in pod["containers"][0]
    assert {m["mountPath"] for m in restore["volumeMounts"]} >= {naming.JAIL_MOUNT, naming.BACKUP_REPOSITORY_MOUNT}
    assert "SETFCAP" in restore["securityContext"]["capabilities"]["add"]
    # the restore defaults to this cluster's own latest snapshot
    objs = objects({"restoreFrom": {"repository": CLAIM_REPO}})
    args = objs["Job/demo-populate-jail"]["spec"]["template"]["spec"]["initContainers"][0]["args"]
    assert args[:4] == ["--host", "demo", "--snapshot", "latest"]


def test_restoring_replaces_the_populate_job() -> None:
    def template_hash(jail: dict[str, Any]) -> str:
        job = objects(jail)["Job/demo-populate-jail"]
        return str(job["metadata"]["annotations"][naming.TEMPLATE_HASH_ANNOTATION])

    plain = template_hash({})
    restoring = template_hash({"restoreFrom": {"repository": CLAIM_REPO}})
    assert plain != restoring != template_hash({"restoreFrom": {"repository": CLAIM_REPO, "snapshot": "abcdef12"}})


def test_no_other_pod_gets_the_repository_secret() -> None:
    objs = objects(
        {"backup": {"enabled": True, "repository": S3_REPO}, "restoreFrom": {"repository": S3_REPO}},
        images={"pullSecrets": ["regcred"]},
    )
    holders = []
    for key, pod in pods(objs).items():
        for c in [*pod.get("initContainers", []), *pod["containers"]]:
            if {"secretRef": {"name": SECRET}} in c.get("envFrom", []):
                holders.append(f"{key}:{c['name']}")
            assert SECRET not in str(c.get("env", [])), key
        assert SECRET not in str(pod.get("volumes", [])), key
    assert sorted(holders) == ["CronJob/demo-jail-backup:backup", "Job/demo-populate-jail:restore-jail"]
    # the backup pods pull their image like every other pod
    assert backup_pod(objs)["imagePullSecrets"] == [{"name": "regcred"}]
    policy = objs["NetworkPolicy/demo-jail-backup"]["spec"]
    assert policy["podSelector"]["matchExpressions"][0]["values"] == ["jail-backup", "jail"]


def _run(finished: str, exit_code: int, message: str) -> dict[str, Any]:
    terminated = {"finishedAt": finished, "exitCode": exit_code, "message": message}
    return {
        "metadata": {"name": f"run-{finished}"},
        "status": {"containerStatuses": [{"state": {"terminated": terminated}}]},
    }


def test_status_says_when_the_last_backup_ran_and_what_it_saved() -> None:
    cron = {"status": {"lastScheduleTime": "2026-11-29T03:00:00Z", "lastSuccessfulTime": "2026-11-28T03:01:10Z"}}
    saved = "snapshot 3f2a1c9e saved in 14s: processed 11893 files, added 1.204 MiB; 7 snapshots of demo kept"
    failed = "failed: cannot open the repository (restic exit 12): wrong password or no key found"
    running = {"metadata": {"name": "now"}, "status": {"containerStatuses": [{"state": {"running": {}}}]}}
    status = backup_status(
        cron, [_run("2026-11-28T03:01:10Z", 0, saved), _run("2026-11-29T03:00:40Z", 12, failed), running]
    )
    assert status.last_schedule_time == "2026-11-29T03:00:00Z"
    assert status.last_successful_time == "2026-11-28T03:01:10Z"
    assert (status.last_run, status.last_run_succeeded) == (failed, False)
    assert status.model_dump(by_alias=True)["lastRunTime"] == "2026-11-29T03:00:40Z"
    # before any run: nothing said
    assert backup_status({}, []).last_run is None and backup_status(None, []).last_run_succeeded is None


def test_each_finished_backup_run_is_told_once() -> None:
    def status(run_time: str | None, ok: bool = True) -> SlurmClusterStatus:
        backup = JailBackupStatus(last_run_time=run_time, last_run_succeeded=ok, last_run="snapshot 1a2b3c4d saved")
        return SlurmClusterStatus(jail_backup=backup if run_time != "none" else None)

    first = status("2026-11-29T03:00:40Z")
    assert new_backup_run(None, first) == first.jail_backup
    assert new_backup_run(first, status("2026-11-29T03:00:40Z")) is None  # the same run, refreshed again
    failed = new_backup_run(first, status("2026-11-30T03:00:40Z", ok=False))
    assert failed is not None and failed.last_run_succeeded is False
    assert new_backup_run(first, status(None)) is None and new_backup_run(first, status("none")) is None
