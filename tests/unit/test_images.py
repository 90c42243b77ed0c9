"""Where a cluster's images come from: the operator's registry and version by default, the spec's pull
secrets on every pod, pulls that fail named in status, and specs from a newer CRD run on what is known."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from warden import __version__
from warden.imagepulls import ImagePull, PullWatch
from warden.imagepulls import failures as image_pull_failures
from warden.model import IMAGE_REGISTRY_ENV, SlurmClusterStatus, parse_spec, parse_spec_unknown
from warden.reconcile import pin_images
from warden.render.cluster import pod_spec, render
from warden.render.context import Cluster
from warden.status import Observed, fold

SPEC: dict[str, Any] = {
    "workerGroups": [{"name": "cpu"}, {"name": "gpu", "gpus": {"count": 1}}],
    "accounting": {"mode": "InCluster"},
    "healthChecks": {"nccl": {"enabled": True}},
}


def _images(spec: dict[str, Any]) -> set[str]:
    out = set()
    for obj in render(Cluster("demo", "ns", parse_spec(spec))).objects:
        pod = pod_spec(obj)
        for c in [*(pod or {}).get("initContainers", []), *(pod or {}).get("containers", [])]:
            out.add(c["image"])
    return out


def test_every_image_a_spec_does_not_name_comes_from_the_operators_registry_at_its_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _images(SPEC) == {f"warden/{n}:{__version__}" for n in
                             ("controller", "worker", "login", "accounting", "mariadb", "populate-jail",
                              "health-check", "operator")}  # fmt: skip
    monkeypatch.setenv(IMAGE_REGISTRY_ENV, "registry.example.com:5000/hpc/warden")
    images = _images(SPEC)
    assert len(images) == 8 and all(i.startswith("registry.example.com:5000/hpc/warden/") for i in images), images
    assert f"registry.example.com:5000/hpc/warden/operator:{__version__}" in images  # the exporter
    old = parse_spec({**SPEC, "slurmVersion": "24.11"})
    assert old.image("worker") == f"registry.example.com:5000/hpc/warden/worker:{__version__}-slurm24.11"
    named = {**SPEC, "images": {"worker": "site.example.com/w:1", "mariadb": "site.example.com/db:11"}}
    assert {"site.example.com/w:1", "site.example.com/db:11"} <= _images(named)


def test_the_images_an_old_crd_wrote_into_stored_specs_follow_the_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Warden 0.1.0's CRD defaulted images.mariadb and images.exporter into every stored spec."""
    monkeypatch.setenv(IMAGE_REGISTRY_ENV, "registry.example.com/warden")
    stored = parse_spec({**SPEC, "images": {"mariadb": "warden/mariadb:0.1.0", "exporter": "warden/operator:0.1.0"}})
    assert stored.own_image("mariadb") == f"registry.example.com/warden/mariadb:{__version__}"
    assert stored.own_image("exporter") == f"registry.example.com/warden/operator:{__version__}"


def test_every_pod_of_the_cluster_pulls_with_the_specs_secrets() -> None:
    objects = render(Cluster("demo", "ns", parse_spec({**SPEC, "images": {"pullSecrets": ["regcred", "mirror"]}})))
    pods = {f"{o['kind']}/{o['metadata']['name']}": pod_spec(o) for o in objects.objects if pod_spec(o) is not None}
    assert {"WorkerSet/demo-worker-gpu", "CronJob/demo-nccl-check", "Job/demo-populate-jail"} <= set(pods)
    for name, pod in pods.items():
        assert pod is not None and pod["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}], name
    plain = render(Cluster("demo", "ns", parse_spec(SPEC))).objects
    assert not any("imagePullSecrets" in (pod_spec(o) or {}) for o in plain)
    with pytest.raises(ValidationError, match="pullSecrets"):
        parse_spec({**SPEC, "images": {"pullSecrets": ["Not_A_Name"]}})


def test_every_container_of_every_pod_pulls_by_the_specs_policy() -> None:
    def policies(spec: dict[str, Any]) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for obj in render(Cluster("demo", "ns", parse_spec(spec))).objects:
            pod = pod_spec(obj) or {}
            for c in [*pod.get("initContainers", []), *pod.get("containers", [])]:
                out.setdefault(c.get("imagePullPolicy", "(none)"), set()).add(f"{obj['metadata']['name']}/{c['name']}")
        return out

    assert set(policies(SPEC)) == {"IfNotPresent"}
    always = policies({**SPEC, "images": {"pullPolicy": "Always"}})
    assert set(always) == {"Always"} and len(always["Always"]) >= 10, always


def _pod(name: str, *statuses: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """A pod whose containers (named after their position) run the images given with their states; as
    the kubelet reports it, a container's status names no image before it is pulled."""
    containers = [{"name": f"c{i}", "image": image} for i, (image, _) in enumerate(statuses)]
    return {"metadata": {"name": name}, "spec": {"containers": containers},
            "status": {"containerStatuses": [{"name": f"c{i}", "image": "", "state": state}
                                             for i, (_, state) in enumerate(statuses)]}}  # fmt: skip


def _waiting(image: str, reason: str, message: str = "") -> tuple[str, dict[str, Any]]:
    return image, {"waiting": {"reason": reason, "message": message}}


def test_a_pod_that_cannot_pull_is_named_in_status_whether_pulling_or_backing_off() -> None:
    unauthorized = "failed to pull and unpack image: 401 Unauthorized"
    pod = _pod("demo-controller-0", _waiting("r.example.com/warden/controller:1", "ErrImagePull", unauthorized),
               ("x", {"running": {}}))  # fmt: skip
    failures = image_pull_failures(pod)
    assert failures == [
        ImagePull("demo-controller-0", "r.example.com/warden/controller:1", "ErrImagePull", unauthorized)
    ]
    starting = _pod("demo-login-0", _waiting("r.example.com/warden/login:1", "ContainerCreating"))
    assert image_pull_failures(starting) == []

    spec = parse_spec(SPEC)

    def condition(pulls: tuple[ImagePull, ...]) -> tuple[str, str, str, str]:
        status = fold(spec, 1, Observed(image_pulls=pulls), None, "2026-11-27T00:00:00Z")
        (images,) = [c for c in status.conditions if c.type == "ImagesPulled"]
        (ready,) = [c for c in status.conditions if c.type == "Ready"]
        return images.status, images.reason, images.message, ready.message

    state, reason, message, ready = condition(tuple(failures))
    assert (state, reason) == ("False", "ImagePullFailed") and "ImagesPulled" in ready
    assert "demo-controller-0 (r.example.com/warden/controller:1)" in message and "pullSecrets" in message
    backoff = _pod("demo-controller-0", _waiting("r.example.com/warden/controller:1", "ImagePullBackOff", "Back-off"))
    assert condition(tuple(image_pull_failures(backoff)))[2] == message  # no flicker between the two
    assert condition(())[:2] == ("True", "ImagesPulled")


def test_fields_a_newer_crd_added_are_left_out_and_named_but_real_errors_still_refuse() -> None:
    newer = {**SPEC, "futureThing": {"on": True}, "workerGroups": [{"name": "cpu", "futureKnob": 3}],
             "login": {"service": {"type": "NodePort", "futureField": "x"}}}  # fmt: skip
    spec, unknown = parse_spec_unknown(newer)
    assert sorted(unknown) == ["futureThing", "login.service.futureField", "workerGroups[0].futureKnob"]
    assert spec.worker_groups[0].name == "cpu" and spec.login.service.type == "NodePort"
    assert parse_spec_unknown(SPEC)[1] == []
    with pytest.raises(ValidationError, match="replicas"):
        parse_spec_unknown({**newer, "workerGroups": [{"name": "cpu", "futureKnob": 3, "replicas": -1}]})


def _status(**fields: Any) -> SlurmClusterStatus:
    return SlurmClusterStatus.model_validate(fields)


def test_a_cluster_keeps_the_images_it_was_made_with_when_the_operator_is_upgraded() -> None:
    spec = parse_spec(SPEC)
    assert pin_images(spec, None).images.version == __version__  # a new cluster: the operator's
    kept = pin_images(spec, _status(imagesVersion="0.0.7"))
    assert kept.image("controller") == "warden/controller:0.0.7" and kept.own_image("mariadb") == "warden/mariadb:0.0.7"
    assert kept.image("worker", "24.11") == "warden/worker:0.0.7-slurm24.11"
    status = fold(kept, 1, Observed(), None, "2026-11-27T00:00:00Z")
    assert status.images_version == "0.0.7"  # recorded for the next operator

    # made by an operator that did not record it: the version of the Slurm images status settled on
    settled = {"version": "24.11", "target": "24.11", "images": {"controller": "warden/controller:0.1.0-slurm24.11"}}
    before = _status(slurm=settled)
    assert pin_images(spec, before).images.version == "0.1.0"
    named = _status(slurm={**settled, "images": {"controller": "site.example.com/ctl:3.1.4"}})
    assert pin_images(spec, named).images.version == __version__  # a tag of the user's own says nothing
    # the spec's word moves the cluster onto another release's images
    moved = pin_images(parse_spec({**SPEC, "images": {"version": "0.3.0"}}), _status(imagesVersion="0.0.7"))
    assert moved.image("login") == "warden/login:0.3.0"
    with pytest.raises(ValidationError, match="version"):
        parse_spec({**SPEC, "images": {"version": "not a tag"}})


def test_a_pod_event_makes_its_cluster_look_again_only_while_or_once_it_cannot_pull() -> None:
    watch = PullWatch()
    failing = _pod("demo-worker-cpu-0", _waiting("r.example.com/warden/worker:1", "ErrImagePull", "401"))
    failing["metadata"].update(namespace="hpc", labels={"app.kubernetes.io/instance": "demo"})
    pulled = _pod("demo-worker-cpu-0", ("r.example.com/warden/worker:1", {"running": {}}))
    pulled["metadata"].update(namespace="hpc", labels={"app.kubernetes.io/instance": "demo"})
    # a pod that pulls fine, never failed: nothing to look at
    assert watch.seen("MODIFIED", pulled) is None
    change = watch.seen("MODIFIED", failing)
    assert change is not None and (change.namespace, change.cluster) == ("hpc", "demo")
    assert [(f.pod, f.reason, f.message) for f in change.tell] == [("demo-worker-cpu-0", "ErrImagePull", "401")]
    # the kubelet backing off: the cluster looks again, nothing new is told
    backoff = _pod("demo-worker-cpu-0", _waiting("r.example.com/warden/worker:1", "ImagePullBackOff", "Back-off"))
    backoff["metadata"].update(namespace="hpc", labels={"app.kubernetes.io/instance": "demo"})
    assert (later := watch.seen("MODIFIED", backoff)) is not None and later.tell == ()
    # it pulled: once more (ImagesPulled turns True), then quiet again
    assert (healed := watch.seen("MODIFIED", pulled)) is not None and healed.tell == ()
    assert watch.seen("MODIFIED", pulled) is None
    # a failing pod deleted: its cluster looks again once; a pod of no cluster never matters
    watch.seen("MODIFIED", failing)
    assert watch.seen("DELETED", failing) is not None and watch.seen("DELETED", failing) is None
    del failing["metadata"]["labels"]
    assert watch.seen("MODIFIED", failing) is None
