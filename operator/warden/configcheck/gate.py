"""Whether a reconcile may apply its configuration: the one place that asks Slurm's check (I/O)."""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException

from warden.configcheck.render import (
    COMPONENT,
    FIRST,
    OLD_IMAGES,
    Verdict,
    check_hash,
    check_name,
    config_map,
    fold,
    job,
    needs_no_check,
)
from warden.kube.apply import Applier, ApplyResult, Owner, RetryLater, owned_by
from warden.render.context import Cluster
from warden.render.pods import Manifest


def slurm_files(cluster: Cluster, objects: list[Manifest]) -> dict[str, str] | None:
    """The rendered slurm-config ConfigMap's files (None: not rendered)."""
    for obj in objects:
        if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == cluster.names.slurm_config:
            return dict(obj.get("data") or {})
    return None


def controller_pod(cluster: Cluster, objects: list[Manifest]) -> Manifest | None:
    for obj in objects:
        if obj["kind"] == "StatefulSet" and obj["metadata"]["name"] == cluster.names.controller:
            spec: Manifest = obj["spec"]["template"]["spec"]
            return spec
    return None


def job_pods(applier: Applier, cluster: Cluster, name: str) -> list[Manifest]:
    pods = applier.kube.list("v1", "Pod", cluster.namespace, cluster.names.selector(COMPONENT))
    return [
        p
        for p in pods
        if any(r.get("kind") == "Job" and r.get("name") == name for r in p["metadata"].get("ownerReferences") or [])
    ]


def forget_others(applier: Applier, cluster: Cluster, owner: Owner, keep: str, result: ApplyResult) -> None:
    """Delete the checks of other contents (an older change, or one the spec no longer asks for)."""
    kube = applier.kube
    for api_version, kind in (("batch/v1", "Job"), ("v1", "ConfigMap")):
        for item in kube.list(api_version, kind, cluster.namespace, cluster.names.selector(COMPONENT)):
            name = item["metadata"]["name"]
            if (
                name != keep
                and owned_by(item, owner)
                and kube.delete(api_version, kind, cluster.namespace, name, "Background")
            ):
                result.pruned.append(f"{kind}/{name}")


def gate(applier: Applier, cluster: Cluster, owner: Owner, objects: list[Manifest], result: ApplyResult) -> Verdict:
    """Whether the rendered ``objects`` may be applied: ``Accepted`` when the Slurm files are the live ones
    (or the cluster has none yet and no slurmctld: nothing runs them) or Slurm's check of them succeeded;
    else what holds them (the check is made here when missing: its ConfigMap, then its Job, both owned by
    the cluster)."""
    files = slurm_files(cluster, objects)
    live = applier.kube.get("v1", "ConfigMap", cluster.namespace, cluster.names.slurm_config)
    running = live is not None or (
        applier.kube.get("apps/v1", "StatefulSet", cluster.namespace, cluster.names.controller) is not None
    )
    unchecked = needs_no_check(files, live, running)
    if unchecked is not None or files is None:
        return unchecked or FIRST
    if not cluster.has_limits:
        # its controller image has no warden-config-check (an older release's, kept at an operator upgrade)
        return OLD_IMAGES
    digest = check_hash(files, cluster.image("controller"))
    name = check_name(cluster, digest)
    forget_others(applier, cluster, owner, name, result)
    try:
        # applied as every object of the cluster is (its field manager: no drift to heal), each time: the
        # same Job again changes nothing, and one deleted by hand is made again (a check asked again)
        applier.apply(config_map(cluster, files, digest), owner, result)
        applier.apply(job(cluster, digest, controller_pod(cluster, objects)), owner, result)
        current = applier.kube.get("batch/v1", "Job", cluster.namespace, name)
    except (ApiException, RetryLater) as e:  # a quota, a webhook, the old check still going: said, tried again
        why = _api_message(e) if isinstance(e, ApiException) else str(e)
        return Verdict("CannotCheck", f"Slurm's check (Job {name}) cannot be made: {why}", name, False)
    return fold(name, current, job_pods(applier, cluster, name))


def _api_message(e: ApiException) -> str:
    try:
        body = json.loads(e.body or "{}")
        return str(body.get("message") or e.reason)
    except (ValueError, TypeError, AttributeError):
        return str(e.reason)
