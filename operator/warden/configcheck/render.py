"""The check of a candidate Slurm configuration: its ConfigMap and Job, and what its Job's state says (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from warden import naming
from warden.render.context import Cluster
from warden.render.pods import (
    POD_DEFAULTS,
    Manifest,
    config_map_volume,
    content_hash,
    meta,
    mount,
    runtime_files_outside_jail,
)

#: the check's pods: their own component, so that no NetworkPolicy but the cluster's isolation selects
#: them (they reach nothing and nothing reaches them: ``warden.render.network``)
COMPONENT = "config-check"
#: the script in the controller's image (images/controller/warden-config-check)
COMMAND = "/usr/local/bin/warden-config-check"
#: how long slurmctld may take to say it runs (the script's bound)
CHECK_SECONDS = 60
#: the whole Job's bound, pulling the image included: past it the check says it could not run
DEADLINE_SECONDS = 300
#: the pod fields copied from the controller's pod, so the check runs where slurmctld may
PLACEMENT = ("nodeSelector", "tolerations", "imagePullSecrets", "priorityClassName")

State = Literal["Accepted", "Checking", "Refused", "CannotCheck"]


@dataclass(frozen=True)
class Verdict:
    """What Slurm's check says of a candidate configuration.

    ``Accepted``: apply it; ``Checking``: not yet known (``message`` says what it waits for, or why it
    cannot go on, such as an image it cannot pull); ``Refused``: slurmctld refused it, ``message`` holds
    its words; ``CannotCheck``: the check ended without an answer from Slurm (nothing is applied)."""

    state: State
    message: str
    job: str = ""
    #: whether another look can change it without a change of the spec (a check that cannot start yet,
    #: such as an image not pulled, may still run)
    final: bool = True

    @property
    def holds(self) -> bool:
        return self.state != "Accepted"


#: the verdicts when nothing needs checking
UNCHANGED = Verdict("Accepted", "the applied Slurm configuration is the rendered one")
FIRST = Verdict("Accepted", "the first Slurm configuration of a new cluster (no daemon runs yet)")
OLD_IMAGES = Verdict(
    "Accepted",
    "applied unchecked: the cluster's images predate Slurm's check of a change (set spec.images.version to "
    "this release's to have it)",
)


def needs_no_check(files: dict[str, str] | None, live: Manifest | None, running: bool) -> Verdict | None:
    """Why the rendered Slurm files (``files``, None: not rendered) may be applied unchecked, given the live
    slurm-config ConfigMap (None: there is none) and whether the cluster's slurmctld runs (its StatefulSet
    exists); None: Slurm must check them first (they differ from the ones the daemons follow, or the
    ConfigMap of a running cluster is gone: its pods still hold the last files)."""
    if files is None or (live is None and not running):
        return FIRST
    if live is not None and dict(live.get("data") or {}) == files:
        return UNCHANGED
    return None


def check_hash(files: dict[str, str], image: str) -> str:
    """What a check answers for: the files and the image (its Slurm series) that reads them."""
    return content_hash(sorted(files.items()), image)[:8]


def check_name(cluster: Cluster, digest: str) -> str:
    return f"{cluster.name}-config-check-{digest}"


def config_map(cluster: Cluster, files: dict[str, str], digest: str) -> Manifest:
    """The candidate files, in a ConfigMap of their own (no pod of the cluster mounts it)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(cluster, check_name(cluster, digest), COMPONENT),
        "data": dict(files),
    }


def job(cluster: Cluster, digest: str, controller_pod: Manifest | None = None) -> Manifest:
    """The Job that asks slurmctld, of the controller's image and series, about the candidate files.

    One try (``backoffLimit`` 0), bounded in time, no API token, the cluster's pod defaults (seccomp,
    no Service links), placed as the controller's pod is (``controller_pod``: its rendered pod spec)."""
    name = check_name(cluster, digest)
    container: Manifest = {
        "name": COMPONENT,
        "image": cluster.image("controller"),
        "imagePullPolicy": cluster.spec.images.pull_policy,
        "command": [COMMAND],
        "env": [
            {"name": "WARDEN_CHECK_SECONDS", "value": str(CHECK_SECONDS)},
            {"name": "WARDEN_TERMINATION_LOG", "value": naming.TERMINATION_LOG},
        ],
        "volumeMounts": [mount("candidate", naming.SLURM_CONFIG_DIR, read_only=True)],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
    }
    pod_spec: Manifest = {
        **POD_DEFAULTS,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 5,
        "containers": [container],
        "volumes": [config_map_volume("candidate", name)],
    }
    for key in PLACEMENT:
        if controller_pod is not None and controller_pod.get(key):
            pod_spec[key] = controller_pod[key]
    labels = cluster.names.labels(COMPONENT)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta(cluster, name, COMPONENT),
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": DEADLINE_SECONDS,
            "template": {"metadata": {"labels": labels}, "spec": runtime_files_outside_jail(pod_spec)},
        },
    }


#: a container's waiting reasons that mean it cannot start (the kubelet's words follow)
CANNOT_START = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError",
     "CreateContainerError", "RunContainerError"}
)  # fmt: skip


def _terminated(pods: list[Manifest]) -> Manifest | None:
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            if cs.get("name") == COMPONENT and (cs.get("state") or {}).get("terminated"):
                return dict(cs["state"]["terminated"])
    return None


def fold(name: str, job: Manifest | None, pods: list[Manifest]) -> Verdict:
    """A check Job (None: not made yet) and its pods, as a verdict. Slurm's words are the container's
    termination message (the script writes slurmctld's ``error:``/``fatal:`` lines there)."""
    if job is None:
        return Verdict("Checking", f"waiting for Slurm's check of the new configuration (Job {name})", name, False)
    status = job.get("status") or {}
    done = {c.get("type"): c for c in status.get("conditions") or [] if c.get("status") == "True"}
    if "Complete" in done or int(status.get("succeeded") or 0) > 0:
        return Verdict("Accepted", f"slurmctld took the configuration (Job {name})", name)
    failed = done.get("Failed") or done.get("FailureTarget")
    if failed is not None or int(status.get("failed") or 0) > 0:
        ended = _terminated(pods)
        words = str((ended or {}).get("message") or "").strip()
        if ended is not None and int(ended.get("exitCode", 0)) == 1 and words:
            return Verdict("Refused", words, name)
        why = f"{(failed or {}).get('reason', 'Failed')}: {(failed or {}).get('message', '')}".strip(": ")
        if ended is not None:
            why += f"; its container ended {ended.get('reason', '')} (exit {ended.get('exitCode')}) {words}".rstrip()
        return Verdict("CannotCheck", f"Slurm's check (Job {name}) ended without an answer: {why}", name)
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in CANNOT_START:
                why = f"{waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
                return Verdict("CannotCheck", f"Slurm's check (Job {name}) cannot start: {why}", name, False)
    return Verdict("Checking", f"waiting for Slurm's check of the new configuration (Job {name})", name, False)
