"""Fold observed state into SlurmCluster status. Pure: observations in, status out."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from warden import imagepulls, kubetime
from warden.configcheck.render import Verdict
from warden.ldapcheck import DirectoryCheck
from warden.model import (
    SLURM_IMAGES,
    Condition,
    DrainedNode,
    HealthCheckStatus,
    JailBackupStatus,
    SlurmClusterSpec,
    SlurmClusterStatus,
    Slurmctld,
    SlurmNodesStatus,
    SlurmVersionStatus,
    WorkerGroupStatus,
)
from warden.upgrade import planner


@dataclass(frozen=True)
class Workload:
    """A StatefulSet, Deployment or WorkerSet as observed: does it exist, how many pods are ready."""

    exists: bool = False
    desired: int = 0
    ready: int = 0
    #: a WorkerSet whose upgrade waits for the maintenance window: when it opens (RFC 3339), else ""
    waits_for_window: str = ""

    @property
    def is_ready(self) -> bool:
        return self.exists and self.ready >= self.desired


#: ControllerReady's reason while slurmctld's pod may be Ready but slurmctld answers no reads
UNRESPONSIVE = "SlurmctldUnresponsive"


@dataclass(frozen=True)
class Observed:
    controller: Workload = Workload()
    restapi: Workload = Workload()
    login: Workload = Workload()
    workers: dict[str, Workload] = field(default_factory=dict)
    jail_populated: bool = False
    jail_failed: bool = False
    accounting: Workload | None = None  # None when accounting is disabled
    health_report: dict[str, Any] | None = None
    #: what slurmctld said of the worker nodes (warden.nodesync); None: not asked this time
    slurm: SlurmNodesStatus | None = None
    #: whether slurmctld answered reads; None: not asked this time (the last answer stands)
    slurmctld: Slurmctld | None = None
    #: the series every Slurm pod and the populate Job were given (``warden.upgrade.planner``)
    parts: planner.Observation = field(default_factory=planner.Observation)
    #: how spec.identity.ldap's directory answered (``warden.directorysync``); None: not checked this time
    directory: DirectoryCheck | None = None
    #: the containers whose image cannot be pulled now
    image_pulls: tuple[imagepulls.ImagePull, ...] = ()
    #: what Slurm's check said of the rendered configuration (``warden.configcheck``); None: not asked this
    #: time (the last word stands)
    config_check: Verdict | None = None
    #: the stamp of the Slurm files the cluster's ConfigMap holds (``warden.slurm.confighash``); "" when none
    config_stamp: str = ""
    #: the jail's backups (``backup_status``); None without spec.jail.backup
    jail_backup: JailBackupStatus | None = None


def _condition(
    type_: str, ok: bool, reason: str, message: str, previous: dict[str, Condition], now: str, generation: int
) -> Condition:
    status = "True" if ok else "False"
    before = previous.get(type_)
    # lastTransitionTime moves only when the status flips (metav1.Condition semantics).
    since = before.last_transition_time if before is not None and before.status == status else now
    return Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=since,
        observed_generation=generation,
    )


def _ratio(w: Workload) -> str:
    return f"{w.ready}/{w.desired}"


WAITING = "waiting: "

#: the condition that says whether Slurm took the rendered configuration (``warden.configcheck``)
CONFIG_CONDITION = "SlurmConfigAccepted"
CONFIG_REASONS = {
    "Accepted": "SlurmAcceptedConfig",
    "Checking": "SlurmCheckingConfig",
    "Refused": "SlurmRefusedConfig",
    "CannotCheck": "SlurmConfigCheckFailed",
}


def config_message(verdict: Verdict) -> str:
    """The condition's message: for a refusal, what it means, then Slurm's words."""
    if verdict.state == "Refused":
        return (
            f"Slurm refused the new configuration (check Job {verdict.job}); nothing of this generation is applied and"
            " the cluster keeps running its last good configuration; fix the spec (spec.slurmConfig) and it is"
            f" checked again. Slurm said: {verdict.message}"
        )[:1024]
    if verdict.state == "CannotCheck" and verdict.final:
        return (f"{verdict.message}; nothing of this generation is applied; delete Job {verdict.job} to check again")[
            :1024
        ]
    return verdict.message[:1024]


def config_condition(
    verdict: Verdict | None, cond: Callable[[str, bool, str, str], Condition], prev: dict[str, Condition]
) -> Condition | None:
    if verdict is None:
        return prev.get(CONFIG_CONDITION)
    return cond(CONFIG_CONDITION, verdict.state == "Accepted", CONFIG_REASONS[verdict.state], config_message(verdict))


#: a condition of this round: (type, ok, reason, message) stamped with the round's time and generation
Cond = Callable[[str, bool, str, str], Condition]


def fold(
    spec: SlurmClusterSpec,
    generation: int,
    observed: Observed,
    previous: SlurmClusterStatus | None,
    now: str,
    errors: list[str] | None = None,
    waiting: list[str] | None = None,
    slurm_required: bool = False,
    upgrade: planner.Plan | None = None,
) -> SlurmClusterStatus:
    """``upgrade``: the Slurm upgrade plan the reconcile that just ran carried out; None: looked at
    again from ``previous`` without moving on (``warden.upgrade.planner``).

    ``slurm_required``: the operator reads Slurm's node states (always, unless started with
    ``--slurm-sync-interval=0``): then Ready waits for slurmctld's word that the workers registered.

    ``errors``/``waiting``: what the reconcile that just ran could not do, or must wait for (an object
    still being deleted); None when no reconcile ran (a child changed): the last reconcile's then still
    stand until the next one, which passes its own (possibly empty) lists."""
    prev = {c.type: c for c in (previous.conditions if previous else [])}
    last = prev.get("Ready")
    if errors is None:
        errors = [last.message] if last is not None and last.reason == "ReconcileFailed" else []
    if waiting is None:
        waiting = [last.message.removeprefix(WAITING)] if last is not None and last.reason == "Waiting" else []

    def cond(type_: str, ok: bool, reason: str, message: str) -> Condition:
        return _condition(type_, ok, reason, message, prev, now, generation)

    jail = _jail_condition(observed, cond)
    in_charge = _in_charge(spec, observed, previous)
    controller = _controller_condition(observed, prev.get("ControllerReady"), in_charge, cond)
    lg = observed.login
    login_ok = lg.is_ready or (spec.login.replicas == 0)
    login = cond(
        "LoginReady",
        login_ok,
        "LoginNodesReady" if login_ok else "LoginNodesNotReady",
        f"{lg.ready}/{spec.login.replicas} login nodes ready",
    )
    groups, ready_total, desired_total, workers = _workers(spec, observed, cond)
    if spec.accounting.mode == "Disabled" or observed.accounting is None:
        accounting = cond("AccountingReady", True, "AccountingDisabled", "accounting is disabled")
    else:
        accounting = _daemon(
            "AccountingReady", observed.accounting, "Slurmdbd", "slurmdbd", cond, "slurmdbd (or its database)"
        )
    restapi = _daemon("RestApiReady", observed.restapi, "Slurmrestd", "slurmrestd", cond)
    # Slurm: Ready needs the workers registered with slurmctld, not just running
    slurm = observed.slurm if observed.slurm is not None else (previous.slurm_nodes if previous else None)
    registered = _registered_condition(slurm, desired_total, prev, now, generation, cond)

    accounting_on = spec.accounting.mode != "Disabled"
    if upgrade is None:
        upgrade = planner.plan(
            spec.slurm_version,
            settled_before(previous),
            observed.parts,
            accounting=accounting_on,
            advance=False,
        )
    ok, reason, message = planner.condition(upgrade, observed.parts, accounting_on)
    version = cond("SlurmVersion", ok, reason, message)
    directory = _directory_condition(spec, observed, prev, now, generation, cond)

    images = imagepulls.condition(observed.image_pulls, cond)
    running = config_running_condition(observed.config_stamp, slurm, prev, now, cond)
    config = config_condition(observed.config_check, cond, prev)
    parts = [images, jail, controller, restapi, login, workers, accounting, registered]
    ready = _ready_condition(parts, upgrade, config, errors, waiting, slurm_required, cond)
    phase = _phase(observed, ready, errors, previous)

    return SlurmClusterStatus(
        phase=phase,
        observed_generation=generation,
        conditions=[
            ready,
            images,
            jail,
            controller,
            restapi,
            login,
            workers,
            accounting,
            registered,
            version,
            *([directory] if directory is not None else []),
            *([config] if config is not None else []),
            *([running] if running is not None else []),
        ],
        workers=f"{ready_total}/{desired_total}",
        login=f"{min(lg.ready, spec.login.replicas)}/{spec.login.replicas}",
        jail_populated=observed.jail_populated,
        worker_groups=groups,
        health_check=health_status(observed.health_report, previous),
        jail_backup=observed.jail_backup,
        slurm_nodes=slurm,
        slurm=slurm_status(spec, upgrade, observed.parts, slurm),
        slurmctld_in_charge=in_charge,
        images_version=spec.images.version,
    )


def _jail_condition(observed: Observed, cond: Cond) -> Condition:
    if observed.jail_populated:
        return cond("JailPopulated", True, "PopulateSucceeded", "the jail volume holds the jail image")
    if observed.jail_failed:
        return cond("JailPopulated", False, "PopulateFailed", "the populate-jail Job failed; see its pod logs")
    return cond("JailPopulated", False, "PopulatePending", "waiting for the populate-jail Job")


def _daemon(type_: str, w: Workload, reason: str, what: str, cond: Cond, waiting_for: str | None = None) -> Condition:
    """The condition of a daemon's workload: ``<reason>Ready``/``<reason>NotReady``."""
    if w.is_ready:
        return cond(type_, True, f"{reason}Ready", f"{what} is ready")
    return cond(type_, False, f"{reason}NotReady", f"{waiting_for or what} is not ready yet")


def _in_charge(spec: SlurmClusterSpec, observed: Observed, previous: SlurmClusterStatus | None) -> str | None:
    """With backup controllers: the one in charge, as the Slurm sync last saw it (``warden.ha.incharge``)."""
    if not spec.controller.has_backup:
        return None
    if observed.slurmctld is not None and observed.slurmctld.in_charge is not None:
        return observed.slurmctld.in_charge
    return previous.slurmctld_in_charge if previous is not None else None


def _controller_condition(observed: Observed, before: Condition | None, in_charge: str | None, cond: Cond) -> Condition:
    """ControllerReady: its pod's readiness, unless slurmctld itself was found not answering reads (its pod
    may be Ready for a while then). The last such finding stands until the Slurm sync asks again."""
    if observed.slurmctld is not None and not observed.slurmctld.answers:
        return cond(
            "ControllerReady",
            False,
            UNRESPONSIVE,
            f"slurmctld does not answer: {observed.slurmctld.why}; users' commands hang too. Its liveness probe "
            "restarts it after about a minute",
        )
    if observed.slurmctld is None and before is not None and before.reason == UNRESPONSIVE:
        return cond("ControllerReady", False, UNRESPONSIVE, before.message)
    controller = _daemon("ControllerReady", observed.controller, "Slurmctld", "slurmctld", cond)
    if in_charge is not None:
        controller = controller.model_copy(update={"message": f"{controller.message}; in charge: {in_charge}"})
    return controller


def _workers(
    spec: SlurmClusterSpec, observed: Observed, cond: Cond
) -> tuple[list[WorkerGroupStatus], int, int, Condition]:
    """Each group's status, the ready and wanted worker totals, and WorkersReady."""
    groups: list[WorkerGroupStatus] = []
    not_ready: list[str] = []
    ready_total = desired_total = 0
    for g in spec.worker_groups:
        w = observed.workers.get(g.name, Workload())
        # an autoscaled group wants what its WorkerSet says now, not what it started with
        want = w.desired if g.autoscaled and w.exists else g.replicas
        group_ready = min(w.ready, want)
        groups.append(
            WorkerGroupStatus(
                name=g.name,
                replicas=want,
                ready_replicas=group_ready,
                upgrade_waits_for_window=w.waits_for_window or None,
            )
        )
        ready_total += group_ready
        desired_total += want
        if not (w.exists and group_ready >= want):
            not_ready.append(f"{g.name} {group_ready}/{want}")
    workers = cond(
        "WorkersReady",
        not not_ready,
        "WorkersReady" if not not_ready else "WorkersNotReady",
        f"{ready_total}/{desired_total} worker nodes ready"
        + (f" (not ready: {', '.join(not_ready)})" if not_ready else ""),
    )
    return groups, ready_total, desired_total, workers


def _registered_condition(
    slurm: SlurmNodesStatus | None, desired_total: int, prev: dict[str, Condition], now: str, generation: int,
    cond: Cond,
) -> Condition:  # fmt: skip
    """SlurmNodesRegistered: Unknown until slurmrestd answered once (that blocks Ready only when the
    operator reads Slurm at all)."""
    if slurm is None:
        before = prev.get("SlurmNodesRegistered")
        return Condition(
            type="SlurmNodesRegistered",
            status="Unknown",
            reason="NotObserved",
            message="slurmrestd has not answered yet",
            last_transition_time=before.last_transition_time if before is not None and before.status == "Unknown"
            else now,
            observed_generation=generation,
        )  # fmt: skip
    all_in = slurm.registered >= desired_total
    return cond(
        "SlurmNodesRegistered",
        all_in,
        "NodesRegistered" if all_in else "NodesNotRegistered",
        f"{slurm.registered}/{desired_total} worker nodes registered with slurmctld, {slurm.usable} usable"
        + (f", {len(slurm.drained)} drained" if slurm.drained else "")
        + (f", {len(slurm.down)} down" if slurm.down else ""),
    )


def _directory_condition(
    spec: SlurmClusterSpec, observed: Observed, prev: dict[str, Condition], now: str, generation: int, cond: Cond
) -> Condition | None:
    """DirectoryReachable (spec.identity.ldap): the last check stands until the next; never part of Ready
    (the jail's users keep working, SSSD serves directory users from its cache)."""
    if spec.identity.ldap is None:
        return None
    d = observed.directory
    if d is not None:
        return cond("DirectoryReachable", d.ok, d.reason, d.message[:1024])
    if "DirectoryReachable" in prev:
        return prev["DirectoryReachable"]
    return Condition(
        type="DirectoryReachable",
        status="Unknown",
        reason="NotChecked",
        message="the directory has not been checked yet",
        last_transition_time=now,
        observed_generation=generation,
    )


def _ready_condition(
    parts: list[Condition], upgrade: planner.Plan, config: Condition | None, errors: list[str],
    waiting: list[str], slurm_required: bool, cond: Cond,
) -> Condition:  # fmt: skip
    """Ready: a refused upgrade or configuration first, then what the reconcile could not do or waits for,
    then every part that is not ready (Unknown ones too when the operator reads Slurm)."""
    config_held = config is not None and config.reason in ("SlurmRefusedConfig", "SlurmConfigCheckFailed")
    if config_held and config is not None and config.reason == "SlurmConfigCheckFailed" and waiting:
        config_held = False  # a check that cannot start yet: Ready says what it waits for
    failing = [p.type for p in parts if p.status == "False" or (p.status == "Unknown" and slurm_required)]
    if upgrade.refusal is not None:
        return cond("Ready", False, upgrade.refusal.reason, upgrade.refusal.message[:1024])
    if config_held and config is not None:
        return cond("Ready", False, config.reason, config.message)
    if errors:
        return cond("Ready", False, "ReconcileFailed", "; ".join(errors)[:1024])
    if waiting:
        return cond("Ready", False, "Waiting", (WAITING + "; ".join(waiting))[:1024])
    if failing:
        return cond("Ready", False, "ComponentsNotReady", "not ready: " + ", ".join(failing))
    return cond("Ready", True, "ClusterReady", "every component is ready")


def _phase(observed: Observed, ready: Condition, errors: list[str], previous: SlurmClusterStatus | None) -> str:
    was_ready = previous is not None and previous.phase in ("Ready", "Degraded")
    if observed.jail_failed:
        return "Failed"
    if ready.status == "True":
        return "Ready"
    if errors or was_ready:
        return "Degraded"
    if observed.controller.exists or observed.login.exists or any(w.exists for w in observed.workers.values()):
        return "Provisioning"
    return "Pending"


#: SlurmConfigRunning: how long workers may run another configuration than the ConfigMap's before it is a
#: problem (the kubelet shows a changed ConfigMap within about a minute; each worker then reloads)
CONFIG_GRACE_SECONDS = 180.0
CONFIG_RUNNING = "SlurmConfigRunning"


def config_running_condition(
    stamp: str,
    slurm: SlurmNodesStatus | None,
    prev: dict[str, Condition],
    now: str,
    cond: Callable[[str, bool, str, str], Condition],
) -> Condition | None:
    """SlurmConfigRunning: whether every worker's slurmd runs the Slurm files the ConfigMap holds, as each
    records it in its node's Extra (``warden.slurm.confighash``; workers that record none are not counted).
    A difference is ``Reloading`` for ``CONFIG_GRACE_SECONDS``, then ``SlurmdOnOtherConfig``: a reconfigure
    that failed anyway, said in status (and a Warning Event) instead of silently. None: nothing to say
    (no stamp yet, or Slurm not read)."""
    if not stamp or slurm is None or not slurm.slurm_configs:
        return prev.get(CONFIG_RUNNING) if stamp and slurm is None else None
    other = {s: n for s, n in slurm.slurm_configs.items() if s != stamp}
    if not other:
        count = slurm.slurm_configs.get(stamp, 0)
        return cond(CONFIG_RUNNING, True, "AllRunRendered", f"every worker's slurmd runs {stamp} ({count} nodes)")
    behind = sum(other.values())
    what = ", ".join(f"{s} on {n}" for s, n in sorted(other.items()))
    before = prev.get(CONFIG_RUNNING)
    since = before.last_transition_time if before is not None and before.status == "False" else now
    if kubetime.seconds_between(since, now) < CONFIG_GRACE_SECONDS:
        return cond(CONFIG_RUNNING, False, "Reloading", f"{behind} worker nodes' slurmd run {what}, not yet {stamp}")
    return cond(
        CONFIG_RUNNING,
        False,
        "SlurmdOnOtherConfig",
        f"{behind} worker nodes' slurmd still run another configuration than the ConfigMap's {stamp}: {what}"
        f" (for {CONFIG_GRACE_SECONDS:.0f}s and more); `scontrol show node` shows each node's Extra, the worker"
        " pod's log why its reload failed; deleting the pod once it is idle starts it on the new files",
    )


def spec_images(spec: SlurmClusterSpec) -> dict[str, str]:
    """The Slurm-carrying images the spec resolves to for its own series."""
    return {key: spec.image(key) for key in SLURM_IMAGES}


def settled_before(previous: SlurmClusterStatus | None) -> planner.Previous | None:
    """What status recorded of the Slurm series (None: nothing yet)."""
    if previous is None or previous.slurm is None:
        return None
    s = previous.slurm
    return planner.Previous(version=s.version, target=s.target, step=s.step, images=dict(s.images))


def slurm_status(
    spec: SlurmClusterSpec,
    upgrade: planner.Plan,
    parts: planner.Observation,
    nodes: SlurmNodesStatus | None,
) -> SlurmVersionStatus:
    """status.slurm: the settled series and its images, the upgrade's progress, what each part runs."""
    phase = "Refused" if upgrade.refusal is not None else "Upgrading" if upgrade.step is not None else "Settled"
    if upgrade.step is None and upgrade.refusal is None:
        images = spec_images(spec)
    else:
        images = {k: v for k, v in upgrade.held.items() if k in SLURM_IMAGES}
    if nodes is not None and nodes.slurmd_versions and not parts.slurmd_versions:
        parts = dataclasses.replace(parts, slurmd_versions=dict(nodes.slurmd_versions))
    return SlurmVersionStatus(
        version=upgrade.settled,
        target=upgrade.target,
        phase=phase,
        step=upgrade.step,
        images=images,
        accounting=planner.part_series("accounting", parts) if spec.accounting.mode != "Disabled" else None,
        controller=planner.part_series("controller", parts),
        restapi=planner.part_series("restapi", parts),
        workers=planner.workers_series(parts),
        login=planner.part_series("login", parts),
        jail=planner.jail_series(parts),
    )


def health_status(report: dict[str, Any] | None, previous: SlurmClusterStatus | None) -> HealthCheckStatus:
    """The NCCL check's last report (its shape: warden.health.check), or what status had before."""
    if report is None:
        return previous.health_check if previous else HealthCheckStatus()
    return HealthCheckStatus(
        last_run_time=report.get("lastRunTime"),
        nodes_checked=int(report.get("nodesChecked", 0)),
        nodes_passed=len(report.get("passed", [])),
        drained=[DrainedNode(node=d["node"], reason=d["reason"]) for d in report.get("drained", [])],
        skipped=[DrainedNode(node=d["node"], reason=d.get("why", "")) for d in report.get("skipped", [])],
        check_failed=report.get("checkFailed") or None,
    )


def invalid_spec_status(
    generation: int, message: str, previous: SlurmClusterStatus | None, now: str
) -> SlurmClusterStatus:
    """Status of an object whose spec the operator cannot accept (it made nothing from it)."""
    base = previous or SlurmClusterStatus()
    prev = {c.type: c for c in base.conditions}
    ready = _condition("Ready", False, "InvalidSpec", message[:1024], prev, now, generation)
    others = [c for c in base.conditions if c.type != "Ready"]
    return base.model_copy(
        update={"phase": "Failed", "observed_generation": generation, "conditions": [ready, *others]}
    )


def backup_status(cronjob: dict[str, Any] | None, pods: list[dict[str, Any]]) -> JailBackupStatus:
    """The jail's backups: the CronJob's own times, and what the last finished backup pod said when it
    ended (its termination message, ``warden-jail-backup``'s summary)."""
    cron = (cronjob or {}).get("status") or {}
    last: tuple[str, dict[str, Any]] | None = None
    for pod in pods:
        for c in (pod.get("status") or {}).get("containerStatuses") or []:
            ended = (c.get("state") or {}).get("terminated")
            if ended and ended.get("finishedAt") and (last is None or ended["finishedAt"] > last[0]):
                last = (ended["finishedAt"], ended)
    return JailBackupStatus(
        last_schedule_time=cron.get("lastScheduleTime"),
        last_successful_time=cron.get("lastSuccessfulTime"),
        last_run=(str(last[1].get("message") or "").strip() or None) if last else None,
        last_run_succeeded=last[1].get("exitCode") == 0 if last else None,
        last_run_time=last[0] if last else None,
    )


def new_backup_run(previous: SlurmClusterStatus | None, status: SlurmClusterStatus) -> JailBackupStatus | None:
    """The jail's backups as ``status`` shows them when it shows a finished run ``previous`` did not (told
    once, as an Event), else None."""
    now = status.jail_backup
    before = previous.jail_backup if previous is not None else None
    if now is None or now.last_run_time is None:
        return None
    if before is not None and before.last_run_time == now.last_run_time:
        return None
    return now
