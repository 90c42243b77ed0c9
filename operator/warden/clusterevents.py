"""What a reconcile or a status refresh of a SlurmCluster tells people: its Events (``warden.events`` fixes
each reason's type and action). Used by the spec handler (``warden.handlers``) and the cluster's worker
(``warden.clusterwork``), so that a reconcile says the same whoever ran it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from warden import __version__
from warden.events import Event, Ref
from warden.kube.apply import ApplyResult
from warden.kube.events import EventRecorder
from warden.model import SlurmClusterStatus
from warden.reconcile import Outcome
from warden.status import CONFIG_RUNNING, new_backup_run
from warden.upgrade import planner


@dataclass(frozen=True)
class ClusterEvents:
    recorder: EventRecorder

    def say(self, cluster: Mapping[str, Any], reason: str, note: str, related: Ref | None = None) -> None:
        """One Event about a SlurmCluster."""
        self.recorder.post_event(Event(Ref.of(cluster), reason, note, related))

    def unknown_fields(self, body: Mapping[str, Any], outcome: Outcome) -> None:
        if outcome.unknown:
            self.say(
                body,
                "UnknownFields",
                f"this operator ({__version__}) does not know spec."
                + ", spec.".join(outcome.unknown)
                + ": left out, the cluster runs on the rest; upgrade the operator to its CRD's version",
            )

    def reconciled(self, body: Mapping[str, Any], outcome: Outcome) -> None:
        """A reconcile's upgrade steps and refusals, Slurm's refusal of its files, and what it applied."""
        self._upgrade(body, outcome)
        self._config_check(body, outcome)
        if outcome.result is not None:
            self._applied(body, outcome.result)

    def _upgrade(self, body: Mapping[str, Any], outcome: Outcome) -> None:
        """A Normal Event per upgrade step begun or done; a Warning when a series is refused (once)."""
        plan = outcome.upgrade
        for note in planner.step_notes(plan):
            self.say(body, "SlurmUpgradeStep", note)
        if plan is not None and plan.refusal is not None and outcome.new_refusal:
            if plan.refusal.reason == "DowngradeRefused":
                self.say(body, "DowngradeRefused", plan.refusal.message)
            else:
                self.say(body, "UpgradeTooLarge", plan.refusal.message)

    def _config_check(self, body: Mapping[str, Any], outcome: Outcome) -> None:
        """A Warning Event, once, when Slurm's check refused the rendered configuration (or ended without an
        answer): nothing was applied (``warden.configcheck``)."""
        check = outcome.config_check
        if check is None or not outcome.new_config_refusal:
            return
        if check.state == "Refused":
            self.say(
                body,
                "SlurmRefusedConfig",
                f"nothing applied, the last good configuration runs on; Slurm said: {check.message}",
            )
        elif check.state == "CannotCheck":
            self.say(body, "SlurmConfigCheckFailed", f"nothing applied: {check.message}")

    def _applied(self, body: Mapping[str, Any], result: ApplyResult) -> None:
        if result.created_secrets:
            self.say(body, "SecretCreated", "generated " + ", ".join(result.created_secrets))
        if result.recreated:
            self.say(body, "ObjectRecreated", "immutable fields changed: " + ", ".join(result.recreated))
        for what in result.replaced:
            self.say(
                body,
                "PodsReplaced",
                f"{what} (a pod's make-up cannot change live; Slurm configuration changes never replace pods)",
            )
        if result.pruned:
            self.say(body, "ObjectsPruned", "no longer needed: " + ", ".join(result.pruned))
        for error in result.errors:
            self.say(body, "ApplyFailed", error)

    def status_changed(
        self, body: Mapping[str, Any], previous: SlurmClusterStatus | None, status: SlurmClusterStatus
    ) -> None:
        """What a status refresh found that people hear of: the configuration slurmd runs, a backup run."""
        self._config_running(body, previous, status)
        self._jail_backup(body, previous, status)

    def _jail_backup(
        self, body: Mapping[str, Any], previous: SlurmClusterStatus | None, status: SlurmClusterStatus
    ) -> None:
        """One Event per finished run of the jail's backup, once status shows it: what it saved, or why it failed."""
        run = new_backup_run(previous, status)
        if run is None:
            return
        if run.last_run_succeeded:
            self.say(body, "JailBackedUp", run.last_run or "a snapshot was saved")
        else:
            self.say(body, "JailBackupFailed", run.last_run or "the backup pod ended without a summary: see its log")

    def _config_running(
        self, body: Mapping[str, Any], previous: SlurmClusterStatus | None, status: SlurmClusterStatus
    ) -> None:
        """Workers whose slurmd runs another configuration than the ConfigMap's past the grace (a reconfigure
        that failed anyway): a Warning Event when SlurmConfigRunning turns to it, a Normal one when all run it
        again."""

        def condition(s: SlurmClusterStatus | None) -> Any:
            return next((c for c in (s.conditions if s is not None else []) if c.type == CONFIG_RUNNING), None)

        before, now = condition(previous), condition(status)
        was = None if before is None else str(before.reason)
        if now is None or str(now.reason) == was:
            return
        if now.reason == "SlurmdOnOtherConfig":
            self.say(body, "SlurmConfigNotTaken", now.message)
        elif now.reason == "AllRunRendered" and was == "SlurmdOnOtherConfig":
            self.say(body, "SlurmConfigTaken", now.message)
