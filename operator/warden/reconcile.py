"""One reconcile of a SlurmCluster: render, apply, prune, then fold what is observed into status.

Level-based and idempotent: every step reads the current state and acts on the difference, so the
operator may be killed at any line and the next run finishes the job.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from pydantic import ValidationError

from warden import __version__, kubetime, naming, opmetrics
from warden.configcheck.gate import gate
from warden.configcheck.render import Verdict
from warden.kube.apply import Applier, ApplyResult, Owner, run_steps, with_owner
from warden.kube.client import Kube
from warden.kube.retention import apply_jail_claim
from warden.ldapcheck import DirectoryCheck
from warden.model import (
    API_GROUP,
    API_VERSION,
    SLURM_IMAGES,
    SLURM_SERIES,
    WORKER_SET_KIND,
    SlurmClusterSpec,
    SlurmClusterStatus,
    Slurmctld,
    SlurmNodesStatus,
    default_image,
    images_version_of,
    parse_spec_unknown,
    previous_status,
)
from warden.observe import observe
from warden.render.cluster import render
from warden.render.context import Cluster, ServiceAccountRef
from warden.render.pods import Manifest, content_hash
from warden.render.slurmctld import state_class_problem
from warden.restarts import template_changes
from warden.status import (
    CONFIG_CONDITION,
    config_message,
    fold,
    invalid_spec_status,
    settled_before,
    spec_images,
)
from warden.topology.planner import observed_blocks
from warden.upgrade import planner

log = logging.getLogger(__name__)


def now() -> str:
    return kubetime.stamp()


#: a field, or a path of fields below a model, as a cross-field check names it at the head of its message
FIELD_PATH = re.compile(r"^[A-Za-z_]\w*(\[\d+\])?(\.[A-Za-z_]\w*(\[\d+\])?)*$")


def validation_message(err: ValidationError) -> str:
    """pydantic errors as `spec.<path>: <message>` lines, the way kubectl shows schema errors."""
    lines = []
    for e in err.errors():
        loc = ["spec"]
        for part in e["loc"]:
            if isinstance(part, int):
                loc[-1] += f"[{part}]"
            else:
                loc.append(str(part))
        msg = e["msg"].removeprefix("Value error, ")
        # Cross-field checks of a model name the field they are about: "<field>: <message>", where the
        # field may be a path below the model ("bridge.partition", "workerGroups[0].resources").
        head, sep, rest = msg.partition(": ")
        if sep and FIELD_PATH.match(head):
            loc.append(head)
            msg = rest
        lines.append(f"{'.'.join(loc)}: {msg}")
    return "; ".join(lines)


@dataclass(frozen=True)
class Outcome:
    status: SlurmClusterStatus
    result: ApplyResult | None
    invalid: str | None = None
    #: the Slurm upgrade plan this reconcile carried out (or the refusal it stopped at)
    upgrade: planner.Plan | None = None
    #: a refusal the status did not show before this reconcile (told once, as a Warning Event)
    new_refusal: bool = False
    #: fields of the spec this operator does not know and left out (a CRD newer than the operator)
    unknown: tuple[str, ...] = ()
    #: what Slurm's check said of the rendered configuration (``warden.configcheck``); None: not asked
    config_check: Verdict | None = None
    #: a refusal of Slurm's check the status did not show before this reconcile (told once, as an Event)
    new_config_refusal: bool = False


def config_hash(objects: list[Manifest]) -> str:
    """One hash of every ConfigMap the pods mount (what a pod's daemons follow in place)."""
    maps = sorted((o["metadata"]["name"], o.get("data") or {}) for o in objects if o["kind"] == "ConfigMap")
    return content_hash(maps)


def stamp_config(objects: list[Manifest], config: str) -> list[Manifest]:
    """The objects, each WorkerSet annotated with the configuration hash (its own metadata, not its pod
    template: no pod is replaced for it). Its pods are made with that mark, so ``Applier.mark_pods`` has
    nothing to write to a pod made after the configuration: one write less per worker at scale."""
    out = []
    for obj in objects:
        if obj["kind"] == WORKER_SET_KIND:
            meta = obj["metadata"]
            obj = {**obj, "metadata": {**meta, "annotations": {**(meta.get("annotations") or {}),
                                                               naming.POD_CONFIG_ANNOTATION: config}}}  # fmt: skip
        out.append(obj)
    return out


WORKLOADS = (("apps/v1", "StatefulSet"), (f"{API_GROUP}/{API_VERSION}", WORKER_SET_KIND))


def live_workloads(kube: Kube, cluster: Cluster) -> dict[str, Manifest]:
    """The cluster's StatefulSets and WorkerSets as they are now (read before applying), by kind/name."""
    out = {}
    for api_version, kind in WORKLOADS:
        for obj in kube.list(api_version, kind, cluster.namespace, cluster.names.instance_selector()):
            out[f"{kind}/{obj['metadata']['name']}"] = obj
    return out


def replaced_pods(live: dict[str, Manifest], objects: list[Manifest]) -> list[str]:
    """For each StatefulSet or WorkerSet whose pods the apply is about to replace: which one and why
    (a WorkerSet's are replaced one drained, idle node at a time: ``warden.workers.rollout``)."""
    out = []
    for obj in objects:
        key = f"{obj['kind']}/{obj['metadata']['name']}"
        if key in live:
            changes = template_changes(live[key]["spec"]["template"], obj["spec"]["template"])
            if changes:
                out.append(f"{obj['metadata']['name']}: {'; '.join(changes)}")
    return out


def pin_images(spec: SlurmClusterSpec, previous: SlurmClusterStatus | None) -> SlurmClusterSpec:
    """``spec`` with the version of Warden's images it runs where it names none (spec.images.version):
    the one it names, else the one status recorded (a cluster keeps the images it was made with when the
    operator is upgraded), else the version of the settled Slurm images status recorded (a cluster an
    operator made before status recorded the version), else the operator's own (a new cluster)."""
    if spec.images.version is not None:
        return spec
    version = previous.images_version if previous is not None else None
    settled = previous.slurm if previous is not None else None
    if version is None and settled is not None and settled.version is not None:
        controller = settled.images.get("controller")
        found = images_version_of(controller)
        if found is not None and controller == default_image("controller", settled.version, found):
            version = found
    return spec.model_copy(update={"images": spec.images.model_copy(update={"version": version or __version__})})


def _with_removals(old: Manifest, new: Manifest) -> Manifest:
    out = dict(new)
    for key, value in old.items():
        if key not in new:
            out[key] = None
        elif isinstance(value, dict) and isinstance(new[key], dict):
            out[key] = _with_removals(value, new[key])
    return out


def status_patch(previous: SlurmClusterStatus | None, status: SlurmClusterStatus) -> Manifest:
    """The merge patch that makes the stored status ``status``. A JSON merge patch keeps every key it
    does not name, so each key the previous status had and this one lacks (a map entry such as a slurmd
    version no node reports any more, an optional field now unset) is named with null."""
    new = status.model_dump(by_alias=True, exclude_none=True)
    if previous is None:
        return new
    return _with_removals(previous.model_dump(by_alias=True, exclude_none=True), new)


def reconcile(
    applier: Applier,
    body: Manifest,
    slurm_required: bool = False,
    bridge_account: ServiceAccountRef | None = None,
) -> Outcome:
    """Render, apply, prune and fold status for one SlurmCluster; counted and timed (``warden.opmetrics``).
    ``bridge_account``: the bridge's ServiceAccount (``--bridge-service-account``), if the operator knows it."""
    start = time.monotonic()
    outcome = _reconcile(applier, body, slurm_required, bridge_account)
    if outcome.unknown:
        meta = body["metadata"]
        log.warning("SlurmCluster %s/%s: fields this operator does not know, left out: %s",
                    meta["namespace"], meta["name"], ", ".join(outcome.unknown))  # fmt: skip
    opmetrics.RECONCILE_SECONDS.observe(time.monotonic() - start)
    if outcome.invalid is not None:
        result = "invalid"
    else:
        result = "complete" if outcome.result is not None and outcome.result.complete else "incomplete"
    meta = body["metadata"]
    opmetrics.RECONCILES.labels(f"{meta['namespace']}/{meta['name']}", result).inc()
    return outcome


DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"


def create_claim(applier: Applier, claim: Manifest, result: ApplyResult) -> None:
    """A claim that holds data (the controllers' shared state): made when absent, never patched."""
    applier.create_if_absent(claim, result)


def state_volume_problem(kube: Kube, cluster: Cluster) -> str | None:
    """With backup controllers: why their shared state volume's StorageClass (named, or the cluster's
    default) cannot serve it (``warden.render.slurmctld.state_class_problem``), or None."""
    if not cluster.spec.controller.has_backup:
        return None
    name = cluster.spec.controller.state_volume.storage_class_name
    if name:
        storage_class = kube.get("storage.k8s.io/v1", "StorageClass", "", name)
    else:
        defaults = [
            c
            for c in kube.list("storage.k8s.io/v1", "StorageClass", "", {})
            if (c.get("metadata", {}).get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true"
        ]
        storage_class = defaults[0] if defaults else None
    return state_class_problem(cluster, storage_class)


#: clusters with an enabled bridge that were told, once, that the operator knows no bridge ServiceAccount
_TOLD_NO_BRIDGE_ACCOUNT: set[tuple[str, str]] = set()


def tell_no_bridge_account(cluster: Cluster) -> None:
    """Log, once per cluster, that its enabled bridge gets no access to its token: the operator was not
    given the bridge's ServiceAccount."""
    key = (cluster.namespace, cluster.name)
    if cluster.spec.active_bridge is None or cluster.bridge_account is not None or key in _TOLD_NO_BRIDGE_ACCOUNT:
        return
    _TOLD_NO_BRIDGE_ACCOUNT.add(key)
    log.warning(
        "SlurmCluster %s/%s enables the bridge, but the operator runs without --bridge-service-account: no Role"
        " lets the bridge read Secret %s; install the operator chart with bridge.enabled=true, or pass the flag",
        cluster.namespace, cluster.name, cluster.names.bridge_token_secret,
    )  # fmt: skip


def _reconcile(
    applier: Applier, body: Manifest, slurm_required: bool, bridge_account: ServiceAccountRef | None = None
) -> Outcome:
    kube = applier.kube
    meta = body["metadata"]
    generation = int(meta.get("generation", 0))
    previous = previous_status(body)
    try:
        spec, unknown = parse_spec_unknown(body.get("spec") or {})
    except ValidationError as e:
        message = validation_message(e)
        status = invalid_spec_status(generation, message, previous, now())
        kube.patch_status(meta["name"], meta["namespace"], status_patch(previous, status))
        return Outcome(status=status, result=None, invalid=message)
    spec = pin_images(spec, previous)

    monitors = spec.metrics.service_monitor.mode == "Auto" and kube.serves("monitoring.coreos.com/v1", "ServiceMonitor")
    cluster = Cluster(name=meta["name"], namespace=meta["namespace"], spec=spec, service_monitor_crd=monitors,
                      blocks=observed_blocks(previous), bridge_account=bridge_account)  # fmt: skip
    tell_no_bridge_account(cluster)
    upgrade = plan_upgrade(kube, cluster, previous)
    if upgrade.refusal is not None:
        # Refused before anything is touched: the cluster keeps running what it has; status is refreshed.
        status = refresh_status(kube, cluster, generation, previous, [], [], slurm_required=slurm_required,
                                upgrade=upgrade)  # fmt: skip
        told = previous is not None and any(
            c.type == "SlurmVersion" and c.reason == upgrade.refusal.reason and c.message == upgrade.refusal.message
            for c in previous.conditions
        )
        return Outcome(status=status, result=None, upgrade=upgrade, new_refusal=not told, unknown=tuple(unknown))
    cluster = dataclasses.replace(cluster, slurm_images=planner.images(upgrade, spec_images(spec), upgrade.settled))
    owner = Owner(name=cluster.name, namespace=cluster.namespace, uid=meta["uid"])
    try:
        rendered = render(cluster)
    except Exception as e:
        # Rendering is pure: retrying cannot help. Say so once (InvalidSpec, a Warning Event) instead.
        log.exception("rendering %s/%s failed", cluster.namespace, cluster.name)
        message = f"the operator cannot render this spec ({type(e).__name__}: {e}); change it, or report a bug"
        status = invalid_spec_status(generation, message, previous, now())
        kube.patch_status(meta["name"], meta["namespace"], status_patch(previous, status))
        return Outcome(status=status, result=None, invalid=message, unknown=tuple(unknown))
    problem = state_volume_problem(kube, cluster)
    if problem is not None:
        # refused before anything changes (the state volume would never be shared)
        status = invalid_spec_status(generation, problem, previous, now())
        kube.patch_status(meta["name"], meta["namespace"], status_patch(previous, status))
        return Outcome(status=status, result=None, invalid=problem, unknown=tuple(unknown))
    result = ApplyResult()
    # A running cluster's Slurm files change only once Slurm's own check took them (``warden.configcheck``):
    # until then nothing of this generation is applied, and a refusal leaves the last good config running.
    check = gate(applier, cluster, owner, rendered.objects, result)
    if check.holds:
        if not check.final:
            result.waiting.append(check.message)
        status = refresh_status(kube, cluster, generation, previous, list(result.errors), list(result.waiting),
                                slurm_required=slurm_required, upgrade=upgrade, config_check=check)  # fmt: skip
        told = previous is not None and any(
            c.type == CONFIG_CONDITION and c.status == "False" and c.message == config_message(check)
            for c in previous.conditions
        )
        return Outcome(status=status, result=None if check.final else result, upgrade=upgrade, unknown=tuple(unknown),
                       config_check=check, new_config_refusal=check.final and not told)  # fmt: skip
    config = config_hash(rendered.objects)
    objects = stamp_config(rendered.objects, config)
    result.replaced = replaced_pods(live_workloads(kube, cluster), objects)

    steps: list[tuple[str, Callable[[], None]]] = [
        (f"Secret/{s.name}", partial(applier.ensure_secret, s, owner, result)) for s in rendered.secrets
    ]
    for obj in objects:
        label = f"{obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] == "PersistentVolumeClaim" and obj["metadata"]["name"] == cluster.names.jail:
            # the jail: never owned or deleted unless asked
            retain = spec.jail.retain_on_delete
            steps.append((label, partial(apply_jail_claim, applier, obj, owner, retain, result)))
        elif obj["kind"] == "PersistentVolumeClaim":  # the controllers' shared state: made once, never patched
            steps.append((label, partial(create_claim, applier, with_owner(obj, owner), result)))
        else:
            steps.append((label, partial(applier.apply, obj, owner, result)))
    steps.append(("prune", partial(applier.prune, owner, cluster.names.instance_selector(), objects, result)))
    # Daemons follow their mounted configuration in place (slurmctld by `scontrol reconfigure`); tell
    # the kubelets, so the new files reach the pods in seconds rather than a minute.
    mark = partial(
        applier.mark_pods,
        cluster.namespace,
        cluster.names.instance_selector(),
        naming.POD_CONFIG_ANNOTATION,
        config,
    )
    steps.append(("pods: new configuration", mark))
    run_steps(steps, result, cluster=f"{cluster.namespace}/{cluster.name}")
    status = refresh_status(
        kube,
        cluster,
        generation,
        previous,
        list(result.errors),
        list(result.waiting),
        slurm_required=slurm_required,
        upgrade=upgrade,
        config_check=check,
    )
    return Outcome(status=status, result=result, upgrade=upgrade, unknown=tuple(unknown), config_check=check)


def held_images(spec: SlurmClusterSpec) -> dict[str, dict[str, str]]:
    """The spec's images of every series Warden's images carry (what a cluster without a recorded series holds)."""
    return {series: {key: spec.image(key, series) for key in SLURM_IMAGES} for series in SLURM_SERIES}


def plan_upgrade(kube: Kube, cluster: Cluster, previous: SlurmClusterStatus | None) -> planner.Plan:
    """Which parts get the spec's Slurm series this time (``warden.upgrade.planner``), from what status
    settled and what the pods run now."""
    spec = cluster.spec
    versions = previous.slurm_nodes.slurmd_versions if previous is not None and previous.slurm_nodes else {}
    parts = observe(kube, cluster, dict(versions)).parts
    settled = settled_before(previous) or planner.settled_from_pods(parts, held_images(spec))
    return planner.plan(spec.slurm_version, settled, parts, accounting=spec.accounting.mode != "Disabled")


def refresh_status(
    kube: Kube,
    cluster: Cluster,
    generation: int,
    previous: SlurmClusterStatus | None,
    errors: list[str] | None = None,
    waiting: list[str] | None = None,
    slurm: SlurmNodesStatus | None = None,
    slurm_required: bool = False,
    slurmctld: Slurmctld | None = None,
    upgrade: planner.Plan | None = None,
    directory: DirectoryCheck | None = None,
    config_check: Verdict | None = None,
) -> SlurmClusterStatus:
    nodes = slurm or (previous.slurm_nodes if previous is not None else None)
    versions = dict(nodes.slurmd_versions) if nodes is not None else {}
    observed = dataclasses.replace(
        observe(kube, cluster, versions), slurm=slurm, slurmctld=slurmctld, directory=directory,
        config_check=config_check,
    )  # fmt: skip
    status = fold(cluster.spec, generation, observed, previous, now(), errors, waiting, slurm_required, upgrade)
    if previous is None or status != previous:
        kube.patch_status(cluster.name, cluster.namespace, status_patch(previous, status))
    return status
