"""Slurm upgrades against a real control plane (issue 28): a cluster made on 24.11 runs Warden's
-slurm24.11 images; 26.05 is then rolled out in Slurm's order, each part only once the one before runs
it (kwok pods stand in for the daemons: Ready with WARDEN_SLURM_SERIES is what the entrypoints
guarantee); a downgrade is refused before anything is touched."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kubernetes import client

from tests.support.operator import OperatorProcess, apply_cluster, get_cluster, load_example, owned_objects, wait_ready
from warden import __version__
from warden.model import WORKER_SET_PLURAL
from warden.naming import Names
from warden.upgrade.planner import STEP_NAMES
from warden_dev.controlplane import wait_for

GROUP, VERSION = "slurm.warden.dev", "v1alpha1"
OLD, NEW = "24.11", "26.05"


def image(name: str, series: str) -> str:
    return f"warden/{name}:{__version__}" + ("" if series == NEW else f"-slurm{series}")


def cluster_body(ns: str, series: str) -> dict[str, Any]:
    body = load_example("cpu-only", ns)
    body["spec"]["slurmVersion"] = series
    body["spec"]["accounting"] = {"mode": "InCluster"}
    return body


def templates(api: Any, ns: str, names: Names) -> dict[str, tuple[str, str | None]]:
    """(image, WARDEN_SLURM_SERIES) of every Slurm workload's pod template, as the API has them now."""
    apps, batch = client.AppsV1Api(api), client.BatchV1Api(api)
    custom = client.CustomObjectsApi(api)
    raw = {
        "accounting": apps.read_namespaced_stateful_set(names.accounting, ns),
        "controller": apps.read_namespaced_stateful_set(names.controller, ns),
        "restapi": apps.read_namespaced_deployment(names.restapi, ns),
        "login": apps.read_namespaced_stateful_set(names.login, ns),
        "jail": batch.read_namespaced_job(names.populate_jail, ns),
    }
    out: dict[str, tuple[str, str | None]] = {}
    for part, obj in raw.items():
        container = api.sanitize_for_serialization(obj)["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e.get("value") for e in container.get("env") or []}
        out[part] = (container["image"], env.get("WARDEN_SLURM_SERIES"))
    ws: Any = custom.get_namespaced_custom_object(GROUP, VERSION, ns, WORKER_SET_PLURAL, names.worker("cpu"))
    container = ws["spec"]["template"]["spec"]["containers"][0]
    out["worker"] = (container["image"], {e["name"]: e.get("value") for e in container["env"]}["WARDEN_SLURM_SERIES"])
    return out


def on(series: str) -> dict[str, tuple[str, str]]:
    return {
        "accounting": (image("accounting", series), series),
        "controller": (image("controller", series), series),
        "restapi": (image("controller", series), series),
        "login": (image("login", series), series),
        "jail": (image("populate-jail", series), series),
        "worker": (image("worker", series), series),
    }


def slurm_status(api: Any, ns: str) -> dict[str, Any]:
    status: dict[str, Any] = get_cluster(api, ns, "cpu").get("status", {}).get("slurm") or {}
    return status


def version_condition(api: Any, ns: str) -> dict[str, Any]:
    for c in get_cluster(api, ns, "cpu").get("status", {}).get("conditions", []):
        if c["type"] == "SlurmVersion":
            return dict(c)
    return {}


def events(api: Any, ns: str, reason: str) -> list[str]:
    items = client.CoreV1Api(api).list_namespaced_event(ns).items
    return [str(e.message) for e in items if e.reason == reason and e.involved_object.name == "cpu"]


@contextmanager
def nothing_schedules(api: Any) -> Iterator[None]:
    """Every node cordoned: a pod made now stays Pending (what a slow image pull or a crashing new
    daemon looks like to the operator); uncordoned again on the way out."""
    core = client.CoreV1Api(api)
    nodes = [str(n.metadata.name) for n in core.list_node().items if not n.spec.unschedulable]
    for node in nodes:
        core.patch_node(node, {"spec": {"unschedulable": True}})
    try:
        yield
    finally:
        for node in nodes:
            core.patch_node(node, {"spec": {"unschedulable": False}})


def test_upgrade_from_24_11_to_26_05_goes_part_by_part_in_slurms_order(
    api_client: Any, cluster_namespace: str, operator: OperatorProcess
) -> None:
    ns, api = cluster_namespace, api_client
    names = Names(cluster="cpu", namespace=ns)
    body = cluster_body(ns, OLD)
    apply_cluster(api, body)
    wait_ready(api, ns, "cpu", operator)
    # made on 24.11: every Slurm part runs Warden's -slurm24.11 images, and is told so
    assert templates(api, ns, names) == on(OLD)
    assert slurm_status(api, ns)["version"] == OLD and slurm_status(api, ns)["phase"] == "Settled"
    assert version_condition(api, ns)["status"] == "True"
    mariadb = client.AppsV1Api(api).read_namespaced_stateful_set(names.mariadb, ns)
    assert mariadb.spec.template.spec.containers[0].image == f"warden/mariadb:{__version__}"

    upgraded = copy.deepcopy(body)
    upgraded["spec"]["slurmVersion"] = NEW
    with nothing_schedules(api):
        apply_cluster(api, upgraded)

        def accounting_released() -> dict[str, Any] | None:
            s = slurm_status(api, ns)
            return s if s.get("step") == "Accounting" and s.get("accounting") == NEW else None

        s = wait_for("slurmdbd released first", accounting_released, 60, on_fail=operator.log_tail)
        assert (s["version"], s["target"], s["phase"]) == (OLD, NEW, "Upgrading")
        # step 1: only slurmdbd moved; its new pod cannot start, so nothing else does
        held = templates(api, ns, names)
        assert held == {**on(OLD), "accounting": (image("accounting", NEW), NEW)}
        cond = version_condition(api, ns)
        assert (cond["status"], cond["reason"]) == ("False", "Upgrading")
        assert "step 1/5 Accounting" in cond["message"]
        assert any("step 1/5 Accounting begun" in m for m in events(api, ns, "SlurmUpgradeStep"))
        assert s["images"]["controller"] == image("controller", OLD)
        # looked at again (a child's event): still holding
        client.AppsV1Api(api).patch_namespaced_stateful_set(
            names.login, ns, {"metadata": {"annotations": {"example.com/touch": "1"}}}
        )
        assert templates(api, ns, names)["controller"] == on(OLD)["controller"]

    # slurmdbd Ready on 26.05: slurmctld, slurmrestd (and their health check) follow; workers not yet
    def controller_released() -> bool:
        return templates(api, ns, names)["controller"] == on(NEW)["controller"]

    wait_for("slurmctld released once slurmdbd runs 26.05", controller_released, 90, on_fail=operator.log_tail)

    def accounting_done() -> bool:
        return any("step 1/5 Accounting done" in m for m in events(api, ns, "SlurmUpgradeStep"))

    wait_for("an Event: step 1 done", accounting_done, 30, on_fail=operator.log_tail)

    # workers: the WorkerSet moves to 26.05; each pod is replaced once its node runs no job (the Slurm
    # sync's rollout, which has no Slurm to read here: the test replaces them as it would)
    def workers_released() -> bool:
        step = slurm_status(api, ns).get("step")
        return step == "Workers" and templates(api, ns, names)["worker"] == on(NEW)["worker"]

    wait_for("workers released once slurmctld runs 26.05", workers_released, 90, on_fail=operator.log_tail)
    assert templates(api, ns, names)["login"] == on(OLD)["login"]  # login nodes wait for the workers
    core = client.CoreV1Api(api)
    for pod in core.list_namespaced_pod(ns, label_selector="app.kubernetes.io/component=worker").items:
        core.delete_namespaced_pod(str(pod.metadata.name), ns)

    def settled() -> dict[str, Any] | None:
        s = slurm_status(api, ns)
        return s if s.get("version") == NEW and s.get("phase") == "Settled" else None

    s = wait_for("26.05 settled after login and the jail", settled, 120, on_fail=operator.log_tail)
    assert templates(api, ns, names) == on(NEW)
    assert (s["accounting"], s["controller"], s["restapi"], s["workers"], s["login"], s["jail"]) == (NEW,) * 6
    assert s["images"]["worker"] == image("worker", NEW)
    assert version_condition(api, ns)["reason"] == "SlurmVersionCurrent"

    def every_step_done() -> bool:
        steps = [m.split(": ", 1)[1] for m in events(api, ns, "SlurmUpgradeStep")]
        done = [m.split(" done")[0] for m in steps if " done" in m]
        return sorted(done) == sorted(f"step {i}/5 {n}" for i, n in enumerate(STEP_NAMES, 1))

    wait_for("an Event for every step done", every_step_done, 30, on_fail=operator.log_tail)
    wait_ready(api, ns, "cpu", operator)


def test_a_downgrade_touches_nothing_and_says_why(
    api_client: Any, cluster_namespace: str, operator: OperatorProcess
) -> None:
    ns, api = cluster_namespace, api_client
    body = cluster_body(ns, NEW)
    created = apply_cluster(api, body)
    wait_ready(api, ns, "cpu", operator)
    assert slurm_status(api, ns)["version"] == NEW
    uid = created["metadata"]["uid"]
    before = {k: o["metadata"]["resourceVersion"] for k, o in owned_objects(api, ns, uid).items()}

    back = copy.deepcopy(body)
    back["spec"]["slurmVersion"] = OLD
    back["spec"]["workerGroups"][0]["replicas"] = 3  # nothing of a refused spec is applied
    apply_cluster(api, back)

    def refused() -> dict[str, Any] | None:
        c = version_condition(api, ns)
        return c if c.get("reason") == "DowngradeRefused" else None

    cond = wait_for("the downgrade refused", refused, 60, on_fail=operator.log_tail)
    assert cond["status"] == "False"
    assert cond["message"] == (
        "spec.slurmVersion 24.11 is older than the 26.05 this cluster runs: Slurm cannot be downgraded (its state "
        "files and database are converted on upgrade); set spec.slurmVersion back to 26.05"
    )
    obj = get_cluster(api, ns, "cpu")
    ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "DowngradeRefused")
    assert obj["status"]["slurm"]["phase"] == "Refused" and obj["status"]["slurm"]["version"] == NEW
    [warning] = wait_for("a DowngradeRefused Event", lambda: events(api, ns, "DowngradeRefused") or None, 30)
    assert warning == cond["message"]
    after = {k: o["metadata"]["resourceVersion"] for k, o in owned_objects(api, ns, uid).items()}
    assert after == before
    # still running what it had: two workers, not the three of the refused spec
    workers = client.CoreV1Api(api).list_namespaced_pod(ns, label_selector="app.kubernetes.io/component=worker")
    assert len(workers.items) == 2

    # set back: applied again, the refusal gone, told once only
    apply_cluster(api, {**back, "spec": {**back["spec"], "slurmVersion": NEW}})
    obj = wait_ready(api, ns, "cpu", operator)
    assert obj["status"]["workers"] == "3/3"
    assert version_condition(api, ns)["status"] == "True"
    assert len(events(api, ns, "DowngradeRefused")) == 1
