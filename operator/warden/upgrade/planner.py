"""Slurm upgrades in Slurm's own order: a pure planner (the spec's series, what status settled, what
the pods run in; which parts get the new series' images, what status and Events say).

Slurm's rule (its upgrade guide): slurmdbd first, then slurmctld, then slurmd, then the clients. Since
24.11 each daemon accepts the daemons and clients of up to three releases before its own and converts
their state files and database records (releases every six months: 24.11 -> 26.05 is three, allowed).
State files and the database are converted when the newer daemon starts, so there is no way back.

A cluster's status records the *settled* series (``status.slurm.version``) and the images of it
(``status.slurm.images``). When ``spec.slurmVersion`` is newer, the steps below are released one at a
time, each only once the previous one is observed on the new series (every pod of it Ready with
``WARDEN_SLURM_SERIES`` = the new series, which the images' entrypoints check against the Slurm they
carry; for workers also the slurmd version each Slurm node reports, when slurmrestd answered). Parts
not yet released keep the settled images. When every step is done, the new series is the settled one.

Refused before anything is touched: a series older than the settled one or than any part has run
(``DowngradeRefused``), and a jump of more than ``MAX_RELEASES_AHEAD`` releases (``UpgradeTooLarge``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from warden.model import SLURM_IMAGES
from warden.naming import SLURM_SERIES_ENV

#: Slurm's releases in order (two a year); Warden's images carry some of them (model.SLURM_SERIES)
RELEASES = ("23.11", "24.05", "24.11", "25.05", "25.11", "26.05")
#: Slurm upgrades across at most this many releases at once
MAX_RELEASES_AHEAD = 3
#: the series of images made before Warden knew of series (no WARDEN_SLURM_SERIES in their pods)
LEGACY_SERIES = "24.11"

SERIES_ENV = SLURM_SERIES_ENV


@dataclass(frozen=True)
class Step:
    name: str
    #: the spec.images keys this step moves to the new series
    images: tuple[str, ...]
    #: the observed parts (``Observation.pods`` keys) that must run the new series for it to be done
    parts: tuple[str, ...]
    what: str


STEPS: tuple[Step, ...] = (
    Step("Accounting", ("accounting",), ("accounting",), "slurmdbd"),
    Step("Controller", ("controller", "healthCheck"), ("controller", "restapi"), "slurmctld and slurmrestd"),
    Step("Workers", ("worker",), ("worker",), "slurmd on every worker"),
    Step("Login", ("login",), ("login",), "the login nodes"),
    Step("Jail", ("populateJail",), (), "the jail's Slurm client packages (the populate Job)"),
)
STEP_NAMES = tuple(s.name for s in STEPS)


def release_index(series: str) -> int:
    """Position of a series among Slurm's releases; ValueError for one Warden does not know."""
    return RELEASES.index(series)


def newer(a: str, b: str) -> bool:
    return release_index(a) > release_index(b)


@dataclass(frozen=True)
class PodSeries:
    """One pod of a part as observed: the series its Slurm container was given, whether it is Ready,
    and whether that container ever ran (a daemon that ran may have converted its state)."""

    name: str
    series: str | None
    ready: bool
    ran: bool
    deleting: bool = False


@dataclass(frozen=True)
class Observation:
    #: pods by part: accounting, controller, restapi, worker, login
    pods: Mapping[str, tuple[PodSeries, ...]] = field(default_factory=dict)
    #: how many pods each part wants
    desired: Mapping[str, int] = field(default_factory=dict)
    #: the populate Job: the series its pod template carries, and whether it completed
    jail_series: str | None = None
    jail_complete: bool = False
    #: registered worker nodes by slurmd version (slurmrestd); empty when not read
    slurmd_versions: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Previous:
    """What status recorded: the settled series and its images, and an upgrade's target and step."""

    version: str
    target: str
    step: str | None
    images: Mapping[str, str]


@dataclass(frozen=True)
class Refusal:
    reason: str  # DowngradeRefused | UpgradeTooLarge
    message: str


@dataclass(frozen=True)
class Plan:
    target: str
    #: the settled series after this round (the target once every step is done)
    settled: str
    #: the step under way; None: settled (or refused)
    step: str | None
    #: spec.images keys that get the target series' images; the others keep ``held`` images
    released: frozenset[str]
    #: images of the settled series for the parts not released
    held: Mapping[str, str]
    refusal: Refusal | None = None
    #: (step, "begun" | "done") that happened this round, in order
    changes: tuple[tuple[str, str], ...] = ()

    @property
    def upgrading(self) -> bool:
        return self.step is not None


def ran_series(observation: Observation) -> list[tuple[str, str]]:
    """(part, series) of every pod whose Slurm container has run, and of a populate Job that completed."""
    out = [(part, p.series) for part, pods in observation.pods.items() for p in pods if p.ran and p.series]
    if observation.jail_complete and observation.jail_series:
        out.append(("jail", observation.jail_series))
    return out


def refusal(target: str, settled: str, observation: Observation) -> Refusal | None:
    """Why ``target`` cannot be run by a cluster settled on ``settled`` whose parts ran what is observed."""
    path = f"set spec.slurmVersion back to {settled}"
    if newer(settled, target):
        return Refusal(
            "DowngradeRefused",
            f"spec.slurmVersion {target} is older than the {settled} this cluster runs: Slurm cannot be downgraded "
            f"(its state files and database are converted on upgrade); {path}",
        )
    ahead = [(part, s) for part, s in ran_series(observation) if s in RELEASES and newer(s, target)]
    if ahead:
        newest = max((s for _, s in ahead), key=release_index)
        parts = sorted({part for part, s in ahead if s == newest})
        return Refusal(
            "DowngradeRefused",
            f"spec.slurmVersion {target} is older than the {newest} that {', '.join(parts)} already ran: Slurm "
            f"cannot be downgraded (its state files and database are converted on upgrade); set spec.slurmVersion "
            f"back to {newest} to finish that upgrade",
        )
    jump = release_index(target) - release_index(settled)
    if jump > MAX_RELEASES_AHEAD:
        between = RELEASES[release_index(settled) + MAX_RELEASES_AHEAD]
        return Refusal(
            "UpgradeTooLarge",
            f"spec.slurmVersion {target} is {jump} releases ahead of the {settled} this cluster runs: Slurm upgrades "
            f"across at most {MAX_RELEASES_AHEAD} releases at once; upgrade to {between} or older first, or {path}",
        )
    return None


def part_on(part: str, series: str, observation: Observation) -> bool:
    """Every pod a part wants exists, is Ready and was given ``series`` (none still going)."""
    pods = observation.pods.get(part, ())
    on = [p for p in pods if p.series == series and p.ready and not p.deleting]
    others = [p for p in pods if not (p.series == series and not p.deleting)]
    return len(on) >= observation.desired.get(part, 0) and not others


def slurmd_on(series: str, observation: Observation) -> bool:
    """Every slurmd that registered reports a release of ``series`` (vacuous when not read)."""
    return all(v == series or v.startswith(f"{series}.") for v in observation.slurmd_versions)


def step_done(step: Step, series: str, observation: Observation, accounting: bool) -> bool:
    if step.name == "Accounting" and not accounting:
        return True
    if step.name == "Jail":
        return observation.jail_series == series and observation.jail_complete
    if not all(part_on(part, series, observation) for part in step.parts):
        return False
    return step.name != "Workers" or slurmd_on(series, observation)


def plan(
    target: str,
    previous: Previous | None,
    observation: Observation,
    *,
    accounting: bool,
    advance: bool = True,
) -> Plan:
    """``target``: spec.slurmVersion; ``previous``: None for a cluster that never settled (new: it starts
    on the target). ``advance``: release the next step when the current one is done (the reconcile
    does, and applies what it released); a status refresh only looks: it neither moves on nor takes up a
    target the reconcile has not seen yet (but reports a refusal all the same)."""
    everything = frozenset(SLURM_IMAGES)
    if previous is None:
        return Plan(target=target, settled=target, step=None, released=everything, held={})
    settled = previous.version
    refused = refusal(target, settled, observation)
    if refused is not None:
        # nothing is applied: status keeps the upgrade it had (target, step), so setting the spec back resumes it
        return Plan(
            target=previous.target,
            settled=settled,
            step=previous.step if previous.target != settled else None,
            released=frozenset(),
            held=previous.images,
            refusal=refused,
        )
    if not advance and previous.target != target:
        return plan(previous.target, previous, observation, accounting=accounting, advance=False)
    if target == settled:
        return Plan(target=target, settled=target, step=None, released=everything, held={})
    changes: list[tuple[str, str]] = []
    if previous.target == target and previous.step in STEP_NAMES:
        index = STEP_NAMES.index(previous.step)
    else:
        index = 0
        changes.append((STEPS[0].name, "begun"))
    while advance and index < len(STEPS) and step_done(STEPS[index], target, observation, accounting):
        changes.append((STEPS[index].name, "done"))
        index += 1
        if index < len(STEPS):
            changes.append((STEPS[index].name, "begun"))
    if index == len(STEPS):
        return Plan(target=target, settled=target, step=None, released=everything, held={}, changes=tuple(changes))
    step = STEPS[index].name
    return Plan(
        target=target,
        settled=settled,
        step=step,
        released=_released(step),
        held={k: v for k, v in previous.images.items() if k in SLURM_IMAGES},
        changes=tuple(changes),
    )


def settled_from_pods(observation: Observation, held: Mapping[str, Mapping[str, str]]) -> Previous | None:
    """For a cluster whose status records no series yet: None when none of its Slurm pods exists (a new
    cluster); else the oldest series its pods were given, ``LEGACY_SERIES`` for pods made before
    Warden knew of series (no ``WARDEN_SLURM_SERIES``). ``held``: images by series (the spec's)."""
    seen = [p.series for pods in observation.pods.values() for p in pods]
    if not seen and observation.jail_series is None:
        return None
    known = [s for s in seen if s in RELEASES]
    series = LEGACY_SERIES if len(known) < len(seen) or not known else min(known, key=release_index)
    return Previous(version=series, target=series, step=None, images=held.get(series, {}))


def _released(step: str) -> frozenset[str]:
    """The images of every step up to and including ``step``."""
    upto = STEP_NAMES.index(step)
    return frozenset(key for s in STEPS[: upto + 1] for key in s.images)


def images(plan_: Plan, spec_images: Mapping[str, str], settled_series: str) -> dict[str, tuple[str, str]]:
    """(image, series) for every Slurm-carrying image key: the target's for released parts, the settled
    images (from status) for the others (the spec's image of the settled series when status has none)."""
    out = {}
    for key in SLURM_IMAGES:
        if key in plan_.released or key not in plan_.held:
            out[key] = (spec_images[key], plan_.target if key in plan_.released else settled_series)
        else:
            out[key] = (plan_.held[key], settled_series)
    return out


# --- what status shows --------------------------------------------------------------------------


def counted(values: list[str]) -> str:
    """``26.05`` when all agree, else ``26.05 x2, 24.11 x1`` (most first); "" for none."""
    counts = Counter(values)
    if not counts:
        return ""
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{v} x{n}" for v, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def part_series(part: str, observation: Observation) -> str:
    """What a part runs: the series of its live pods, with counts when they differ."""
    return counted([p.series or "unknown" for p in observation.pods.get(part, ()) if not p.deleting])


def workers_series(observation: Observation) -> str:
    if observation.slurmd_versions:
        return counted([v for v, n in observation.slurmd_versions.items() for _ in range(n)])
    return part_series("worker", observation)


def jail_series(observation: Observation) -> str:
    if observation.jail_series is None:
        return ""
    return observation.jail_series + ("" if observation.jail_complete else " (populating)")


def describe_step(step: str) -> str:
    return next(s.what for s in STEPS if s.name == step)


def step_notes(plan_: Plan | None) -> list[str]:
    """The notes of the round's SlurmUpgradeStep Events: each step begun or done, in order (none for a
    refused or settled plan)."""
    if plan_ is None or plan_.refusal is not None:
        return []
    notes = []
    for step, what in plan_.changes:
        number = f"{STEP_NAMES.index(step) + 1}/{len(STEP_NAMES)}"
        if what == "begun":
            notes.append(f"Slurm {plan_.target}: step {number} {step} begun: {describe_step(step)} get "
                         f"{plan_.target}'s images")  # fmt: skip
        else:
            last = f"; Slurm {plan_.target} runs everywhere" if step == STEP_NAMES[-1] else ""
            notes.append(f"Slurm {plan_.target}: step {number} {step} done: {describe_step(step)} run "
                         f"{plan_.target}{last}")  # fmt: skip
    return notes


def condition(plan_: Plan, observation: Observation, accounting: bool) -> tuple[bool, str, str]:
    """(ok, reason, message) of the SlurmVersion condition."""
    if plan_.refusal is not None:
        return False, plan_.refusal.reason, plan_.refusal.message
    if plan_.step is not None:
        number = STEP_NAMES.index(plan_.step) + 1
        return (
            False,
            "Upgrading",
            f"upgrading Slurm {plan_.settled} -> {plan_.target}: step {number}/{len(STEPS)} {plan_.step} "
            f"({describe_step(plan_.step)}); the parts after it keep {plan_.settled} until it runs {plan_.target}",
        )
    odd = []
    for part in ("accounting", "controller", "restapi", "worker", "login"):
        if part == "accounting" and not accounting:
            continue
        seen = {p.series for p in observation.pods.get(part, ()) if not p.deleting and p.ready}
        if seen - {plan_.target}:
            odd.append(f"{part} runs {', '.join(sorted(s or 'an unknown series' for s in seen))}")
    if observation.slurmd_versions and not slurmd_on(plan_.target, observation):
        odd.append(f"slurmd reports {workers_series(observation)}")
    if odd:
        return False, "Mismatch", f"spec.slurmVersion is {plan_.target}, but " + "; ".join(odd)
    return True, "SlurmVersionCurrent", f"every part runs Slurm {plan_.target}"
