"""Slurm upgrades in Slurm's order (warden.upgrade.planner): which parts get the new series when, what is
refused, and what status and Events say."""

from __future__ import annotations

import dataclasses

import pytest

from warden import __version__
from warden.model import SLURM_IMAGES, SlurmNodesStatus, parse_spec
from warden.render.cluster import render
from warden.render.context import Cluster
from warden.status import Observed, Workload, fold, spec_images
from warden.upgrade import planner
from warden.upgrade.planner import Observation, PodSeries, Previous, plan

OLD, NEW = "24.11", "26.05"
OLD_IMAGES = {key: f"warden/{name}:{__version__}-slurm24.11" for key, name in SLURM_IMAGES.items()}
SETTLED_OLD = Previous(version=OLD, target=OLD, step=None, images=OLD_IMAGES)
T0 = "2026-11-22T00:00:00Z"


def pods(series: str, n: int = 1, *, ready: bool = True, ran: bool = True, part: str = "x") -> tuple[PodSeries, ...]:
    return tuple(PodSeries(f"{part}-{series}-{i}", series, ready, ran) for i in range(n))


def cluster_on(
    accounting: str = OLD,
    controller: str = OLD,
    workers: str = OLD,
    login: str = OLD,
    jail: str = OLD,
    **kw: object,
) -> Observation:
    """Every part's pods Ready on the series given (2 workers), the populate Job complete."""
    return Observation(
        pods={
            "accounting": pods(accounting),
            "controller": pods(controller),
            "restapi": pods(controller),
            "worker": pods(workers, 2),
            "login": pods(login),
        },
        desired={"accounting": 1, "controller": 1, "restapi": 1, "worker": 2, "login": 1},
        jail_series=jail,
        jail_complete=True,
        **kw,  # type: ignore[arg-type]
    )


def upgrading(step: str) -> Previous:
    return Previous(version=OLD, target=NEW, step=step, images=OLD_IMAGES)


# --- the order ---------------------------------------------------------------------------------


def test_a_new_cluster_starts_on_its_series_with_everything_released() -> None:
    p = plan(OLD, None, Observation(), accounting=True)
    assert (p.settled, p.step, p.refusal) == (OLD, None, None)
    assert p.released == frozenset(SLURM_IMAGES)


def test_a_newer_series_releases_accounting_alone_first() -> None:
    p = plan(NEW, SETTLED_OLD, cluster_on(), accounting=True)
    assert (p.settled, p.step) == (OLD, "Accounting")
    assert p.released == {"accounting"}
    assert p.changes == (("Accounting", "begun"),)
    images = planner.images(p, {k: f"new/{k}" for k in SLURM_IMAGES}, p.settled)
    assert images["accounting"] == ("new/accounting", NEW)
    # every other part keeps the settled images of status, on the old series
    assert {k: v for k, v in images.items() if k != "accounting"} == {
        k: (OLD_IMAGES[k], OLD) for k in SLURM_IMAGES if k != "accounting"
    }


def test_each_step_waits_until_the_previous_runs_the_new_series() -> None:
    # accounting released, its new pod not Ready yet: nothing else moves
    starting = cluster_on(accounting=NEW)
    starting = dataclasses.replace(starting, pods={**starting.pods, "accounting": pods(NEW, ready=False)})
    p = plan(NEW, upgrading("Accounting"), starting, accounting=True)
    assert (p.step, p.released, p.changes) == ("Accounting", frozenset({"accounting"}), ())
    # the old pod still there beside the new one: not yet
    both = dataclasses.replace(starting, pods={**starting.pods, "accounting": pods(NEW) + pods(OLD, part="old")})
    assert plan(NEW, upgrading("Accounting"), both, accounting=True).step == "Accounting"
    # Ready on 26.05: the controller step is released (slurmctld, slurmrestd, the health check)
    p = plan(NEW, upgrading("Accounting"), cluster_on(accounting=NEW), accounting=True)
    assert p.step == "Controller"
    assert p.released == {"accounting", "controller", "healthCheck"}
    assert p.changes == (("Accounting", "done"), ("Controller", "begun"))


def test_each_step_begun_or_done_is_one_event_note_in_order_and_a_refusal_none() -> None:
    p = plan(NEW, upgrading("Accounting"), cluster_on(accounting=NEW), accounting=True)
    assert planner.step_notes(p) == [
        "Slurm 26.05: step 1/5 Accounting done: slurmdbd run 26.05",
        "Slurm 26.05: step 2/5 Controller begun: slurmctld and slurmrestd get 26.05's images",
    ]
    done = plan(NEW, upgrading("Jail"), cluster_on(NEW, NEW, NEW, NEW, NEW), accounting=True)
    assert planner.step_notes(done)[-1].endswith("step 5/5 Jail done: the jail's Slurm client packages (the populate "
                                                 "Job) run 26.05; Slurm 26.05 runs everywhere")  # fmt: skip
    assert planner.step_notes(plan("23.11", SETTLED_OLD, cluster_on(), accounting=True)) == []
    assert planner.step_notes(None) == []


def test_workers_wait_for_every_pod_and_for_the_slurmd_versions_slurm_reports() -> None:
    half = cluster_on(accounting=NEW, controller=NEW)
    half = dataclasses.replace(half, pods={**half.pods, "worker": pods(NEW) + pods(OLD, part="w")})
    assert plan(NEW, upgrading("Workers"), half, accounting=True).step == "Workers"
    pods_new = cluster_on(accounting=NEW, controller=NEW, workers=NEW, slurmd_versions={"26.05.5": 1, "24.11.5": 1})
    assert plan(NEW, upgrading("Workers"), pods_new, accounting=True).step == "Workers"  # slurmd says otherwise
    done = dataclasses.replace(pods_new, slurmd_versions={"26.05.5": 2})
    p = plan(NEW, upgrading("Workers"), done, accounting=True)
    assert (p.step, p.released) == ("Login", frozenset({"accounting", "controller", "healthCheck", "worker", "login"}))


def test_the_jail_is_last_and_its_job_completing_settles_the_new_series() -> None:
    everything = cluster_on(NEW, NEW, NEW, NEW, jail=OLD)
    p = plan(NEW, upgrading("Login"), everything, accounting=True)
    assert (p.step, p.released) == ("Jail", frozenset(SLURM_IMAGES))
    running = dataclasses.replace(everything, jail_series=NEW, jail_complete=False)
    assert plan(NEW, upgrading("Jail"), running, accounting=True).step == "Jail"
    p = plan(NEW, upgrading("Jail"), dataclasses.replace(running, jail_complete=True), accounting=True)
    assert (p.settled, p.step, p.changes) == (NEW, None, (("Jail", "done"),))


def test_without_accounting_the_first_step_is_the_controller() -> None:
    p = plan(NEW, SETTLED_OLD, cluster_on(), accounting=False)
    assert p.step == "Controller"
    assert p.changes == (("Accounting", "begun"), ("Accounting", "done"), ("Controller", "begun"))


def test_a_status_refresh_looks_but_never_moves_on() -> None:
    p = plan(NEW, upgrading("Accounting"), cluster_on(accounting=NEW), accounting=True, advance=False)
    assert p.step == "Accounting"
    # nor takes up a target the reconcile has not seen yet
    p = plan(NEW, SETTLED_OLD, cluster_on(), accounting=True, advance=False)
    assert (p.target, p.step, p.refusal) == (OLD, None, None)


def test_a_step_released_stays_released_when_its_pods_restart() -> None:
    flapping = cluster_on(accounting=NEW)
    flapping = dataclasses.replace(flapping, pods={**flapping.pods, "accounting": pods(NEW, ready=False)})
    p = plan(NEW, upgrading("Workers"), flapping, accounting=True)
    assert p.step == "Workers" and "controller" in p.released


# --- refusals ----------------------------------------------------------------------------------


def test_a_downgrade_is_refused_naming_both_series_and_the_way_back() -> None:
    settled_new = Previous(version=NEW, target=NEW, step=None, images={})
    p = plan(OLD, settled_new, cluster_on(NEW, NEW, NEW, NEW, NEW), accounting=True)
    assert p.refusal is not None and p.refusal.reason == "DowngradeRefused"
    assert p.refusal.message == (
        "spec.slurmVersion 24.11 is older than the 26.05 this cluster runs: Slurm cannot be downgraded (its state "
        "files and database are converted on upgrade); set spec.slurmVersion back to 26.05"
    )
    assert p.released == frozenset() and (p.settled, p.target) == (NEW, NEW)


def test_going_back_mid_upgrade_is_refused_once_a_part_ran_the_new_series() -> None:
    p = plan(OLD, upgrading("Controller"), cluster_on(accounting=NEW), accounting=True)
    assert p.refusal is not None and p.refusal.reason == "DowngradeRefused"
    assert "older than the 26.05 that accounting already ran" in p.refusal.message
    # status keeps the upgrade it had, so setting 26.05 again resumes it
    assert (p.target, p.step) == (NEW, "Controller")


def test_going_back_before_any_new_pod_ran_cancels_the_upgrade() -> None:
    never_ran = cluster_on()
    never_ran = dataclasses.replace(never_ran, pods={**never_ran.pods, "accounting": pods(NEW, ran=False)})
    p = plan(OLD, upgrading("Accounting"), never_ran, accounting=True)
    assert (p.refusal, p.step, p.settled) == (None, None, OLD)
    assert p.released == frozenset(SLURM_IMAGES)  # all of it from the spec's 24.11 images again


def test_more_than_three_releases_at_once_is_refused() -> None:
    old = Previous(version="23.11", target="23.11", step=None, images={})
    p = plan(NEW, old, Observation(), accounting=True)
    assert p.refusal is not None and p.refusal.reason == "UpgradeTooLarge"
    assert p.refusal.message == (
        "spec.slurmVersion 26.05 is 5 releases ahead of the 23.11 this cluster runs: Slurm upgrades across at most "
        "3 releases at once; upgrade to 25.05 or older first, or set spec.slurmVersion back to 23.11"
    )
    assert planner.refusal(NEW, OLD, Observation()) is None  # 24.11 -> 26.05: two releases


def test_a_cluster_without_a_recorded_series_settles_on_what_its_pods_run() -> None:
    held = {OLD: OLD_IMAGES}
    assert planner.settled_from_pods(Observation(), held) is None  # new
    legacy = Observation(pods={"controller": (PodSeries("c", None, True, True),)})
    assert planner.settled_from_pods(legacy, held) == SETTLED_OLD


# --- images and the pods' series -------------------------------------------------------------------


def test_images_default_to_the_series_and_every_slurm_pod_is_told_its_series() -> None:
    spec = parse_spec({"slurmVersion": "24.11", "workerGroups": [{"name": "cpu"}], "accounting": {"mode": "InCluster"},
                       "healthChecks": {"nccl": {"enabled": True}}})  # fmt: skip
    assert spec.image("worker") == f"warden/worker:{__version__}-slurm24.11"
    assert spec.image("worker", NEW) == f"warden/worker:{__version__}"
    assert parse_spec({"workerGroups": [{"name": "cpu"}], "images": {"worker": "r/w:1"}}).image("worker") == "r/w:1"
    assert spec.own_image("mariadb") == f"warden/mariadb:{__version__}"  # no Slurm in it: one image
    gpu = parse_spec({**spec.model_dump(by_alias=True), "workerGroups": [{"name": "g", "gpus": {"count": 1}}]})
    objects = render(Cluster("demo", "ns", gpu)).objects
    seen = {}
    for obj in objects:
        template = (obj.get("spec") or {}).get("template") or (obj.get("spec") or {}).get("jobTemplate")
        if obj["kind"] == "CronJob":
            template = obj["spec"]["jobTemplate"]["spec"]["template"]
        if not template:
            continue
        for c in template["spec"]["containers"]:
            env = {e["name"]: e.get("value") for e in c.get("env") or []}
            seen[f"{obj['kind']}/{obj['metadata']['name']}"] = (c["image"], env.get("WARDEN_SLURM_SERIES"))
    suffix = f"{__version__}-slurm24.11"
    assert seen == {
        "StatefulSet/demo-accounting": (f"warden/accounting:{suffix}", OLD),
        "StatefulSet/demo-mariadb": (f"warden/mariadb:{__version__}", None),
        "StatefulSet/demo-controller": (f"warden/controller:{suffix}", OLD),
        "Deployment/demo-restapi": (f"warden/controller:{suffix}", OLD),
        "Deployment/demo-exporter": (f"warden/operator:{__version__}", None),
        "Deployment/demo-read-gate": (f"warden/operator:{__version__}", None),
        "StatefulSet/demo-login": (f"warden/login:{suffix}", OLD),
        "WorkerSet/demo-worker-g": (f"warden/worker:{suffix}", OLD),
        "Job/demo-populate-jail": (f"warden/populate-jail:{suffix}", OLD),
        "CronJob/demo-nccl-check": (f"warden/health-check:{suffix}", OLD),
    }


def test_an_upgrade_renders_released_parts_new_and_the_others_as_settled() -> None:
    spec = parse_spec({"workerGroups": [{"name": "cpu"}], "accounting": {"mode": "InCluster"}})
    p = plan(NEW, SETTLED_OLD, cluster_on(), accounting=True)
    cluster = Cluster("demo", "ns", spec, slurm_images=planner.images(p, spec_images(spec), p.settled))
    by_name = {o["metadata"]["name"]: o for o in render(cluster).objects if o["kind"] in ("StatefulSet", "WorkerSet")}

    def container(name: str) -> dict[str, object]:
        c: dict[str, object] = by_name[name]["spec"]["template"]["spec"]["containers"][0]
        return c

    assert container("demo-accounting")["image"] == f"warden/accounting:{__version__}"
    assert {"name": "WARDEN_SLURM_SERIES", "value": NEW} in container("demo-accounting")["env"]  # type: ignore[operator]
    assert container("demo-controller")["image"] == OLD_IMAGES["controller"]
    assert container("demo-worker-cpu")["image"] == OLD_IMAGES["worker"]
    assert {"name": "WARDEN_SLURM_SERIES", "value": OLD} in container("demo-worker-cpu")["env"]  # type: ignore[operator]


# --- status ------------------------------------------------------------------------------------


SPEC_NEW = parse_spec({"workerGroups": [{"name": "cpu", "replicas": 2}], "accounting": {"mode": "InCluster"}})


def observed(parts: Observation) -> Observed:
    return Observed(
        controller=Workload(True, 1, 1),
        restapi=Workload(True, 1, 1),
        login=Workload(True, 1, 1),
        workers={"cpu": Workload(True, 2, 2)},
        jail_populated=True,
        accounting=Workload(True, 1, 1),
        parts=parts,
    )


def test_status_shows_the_step_and_what_every_part_runs() -> None:
    parts = cluster_on(slurmd_versions={"24.11.5": 2})
    acct = pods(NEW, ready=False)  # its new pod is starting
    parts = dataclasses.replace(
        parts, pods={**parts.pods, "accounting": acct, "worker": pods(NEW) + pods(OLD, 2, part="w")}
    )
    p = plan(NEW, SETTLED_OLD, parts, accounting=True)
    status = fold(SPEC_NEW, 2, observed(parts), None, T0, upgrade=p)
    s = status.slurm
    assert s is not None
    assert (s.version, s.target, s.phase, s.step) == (OLD, NEW, "Upgrading", "Accounting")
    assert s.images == OLD_IMAGES
    assert (s.accounting, s.controller, s.restapi, s.login, s.jail) == (NEW, OLD, OLD, OLD, OLD)
    assert s.workers == "24.11.5"  # what slurmd reports wins over the pods' series
    cond = {c.type: c for c in status.conditions}["SlurmVersion"]
    assert (cond.status, cond.reason) == ("False", "Upgrading")
    assert cond.message.startswith("upgrading Slurm 24.11 -> 26.05: step 1/5 Accounting (slurmdbd)")
    assert status.model_dump(by_alias=True)["slurm"]["step"] == "Accounting"
    assert planner.counted([NEW, OLD, OLD]) == "24.11 x2, 26.05 x1"


def test_status_when_settled_and_when_something_runs_another_series() -> None:
    parts = cluster_on(NEW, NEW, NEW, NEW, NEW)
    status = fold(SPEC_NEW, 2, observed(parts), None, T0)
    s = status.slurm
    assert s is not None and (s.version, s.phase, s.step) == (NEW, "Settled", None)
    assert s.images == spec_images(SPEC_NEW)
    cond = {c.type: c for c in status.conditions}["SlurmVersion"]
    assert (cond.status, cond.reason, cond.message) == ("True", "SlurmVersionCurrent", "every part runs Slurm 26.05")
    odd = dataclasses.replace(parts, pods={**parts.pods, "login": pods(OLD)})
    cond = {c.type: c for c in fold(SPEC_NEW, 2, observed(odd), status, T0).conditions}["SlurmVersion"]
    assert (cond.status, cond.reason, cond.message) == (
        "False",
        "Mismatch",
        "spec.slurmVersion is 26.05, but login runs 24.11",
    )


def test_a_refusal_makes_ready_false_and_keeps_the_recorded_upgrade() -> None:
    settled_new = fold(SPEC_NEW, 2, observed(cluster_on(NEW, NEW, NEW, NEW, NEW)), None, T0)
    back = parse_spec({**SPEC_NEW.model_dump(by_alias=True), "slurmVersion": "24.11"})
    status = fold(back, 3, observed(cluster_on(NEW, NEW, NEW, NEW, NEW)), settled_new, T0)
    conds = {c.type: c for c in status.conditions}
    assert (conds["Ready"].status, conds["Ready"].reason) == ("False", "DowngradeRefused")
    assert (conds["SlurmVersion"].status, conds["SlurmVersion"].reason) == ("False", "DowngradeRefused")
    assert status.slurm is not None and (status.slurm.version, status.slurm.phase) == (NEW, "Refused")


def test_slurmd_versions_reach_status_through_the_node_summary() -> None:
    parts = cluster_on(NEW, NEW, NEW, NEW, NEW)
    nodes = SlurmNodesStatus(registered=2, usable=2, slurmd_versions={"26.05.5": 1, "24.11.5": 1})
    status = fold(SPEC_NEW, 2, dataclasses.replace(observed(parts), slurm=nodes), None, T0)
    assert status.slurm is not None and status.slurm.workers == "24.11.5 x1, 26.05.5 x1"


@pytest.mark.parametrize("series", ["26.05", "24.11"])
def test_the_spec_accepts_the_series_warden_carries(series: str) -> None:
    assert parse_spec({"slurmVersion": series, "workerGroups": [{"name": "cpu"}]}).slurm_version == series


def test_the_spec_refuses_a_series_warden_does_not_carry() -> None:
    with pytest.raises(ValueError, match="slurmVersion"):
        parse_spec({"slurmVersion": "25.05", "workerGroups": [{"name": "cpu"}]})
