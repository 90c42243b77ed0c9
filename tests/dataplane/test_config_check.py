"""Slurm's own check of a configuration before any daemon sees it (``warden.configcheck``): the check Job's
pod, as the operator renders it, run from the controller image(s) against this cluster's own rendered
files. A good change is accepted; a wrong type, an unknown plugin and a partition naming nodes that do
not exist are each refused with Slurm's words in the termination message, which the operator folds into
the verdict status shows. The running cluster never hears of any of it."""

from __future__ import annotations

import copy
import dataclasses
import re
from typing import Any, cast

import pytest

from warden.configcheck import render as configcheck
from warden.configcheck.render import Verdict
from warden.model import parse_spec
from warden.render import config
from warden.render.context import Cluster
from warden_dev.dockercluster import DockerCluster, missing_images, version

#: the series the cluster does not run by default, whose controller image must check the same way
OTHER_SERIES_IMAGE = f"warden/controller:{version()}-slurm24.11"


def _files(cluster: DockerCluster, extra_lines: list[str]) -> dict[str, str]:
    """The cluster's Slurm files as the operator renders them with ``extra_lines`` in spec.slurmConfig."""
    spec: dict[str, Any] = copy.deepcopy(cluster.spec_with_key)
    spec.setdefault("slurmConfig", {})["extraLines"] = extra_lines
    return config.slurm_config_files(Cluster(name=cluster.name, namespace=cluster.namespace, spec=parse_spec(spec)))


def _check(cluster: DockerCluster, files: dict[str, str], image: str | None = None) -> tuple[int, str, Verdict]:
    """Run the rendered check Job's pod on ``files``: its exit status, its termination message, and the
    verdict the operator makes of them (``configcheck.fold``, as the kubelet would report the pod)."""
    digest = configcheck.check_hash(files, image or cluster.cluster.image("controller"))
    name = configcheck.check_name(cluster.cluster, digest)
    cast(dict[str, Any], cluster.translator.configmaps)[name] = dict(files)
    controller = cluster.manifest("StatefulSet", cluster.names.controller)["spec"]["template"]["spec"]
    job = configcheck.job(cluster.cluster, digest, controller)
    pod = cluster.job_pod(job["spec"]["template"], f"{name}-x")
    if image is not None:
        pod = dataclasses.replace(pod, image=image)
    ran = cluster.run_to_completion(pod, timeout=configcheck.DEADLINE_SECONDS)
    message = (cluster.dir / "termination" / pod.container).read_text()
    failed = ran.rc != 0
    status = {"conditions": [{"type": "Failed" if failed else "Complete", "status": "True"}], "failed": int(failed)}
    ended = {"exitCode": ran.rc, "reason": "Error" if failed else "Completed", "message": message}
    reported = {"status": {"containerStatuses": [{"name": configcheck.COMPONENT, "state": {"terminated": ended}}]}}
    return ran.rc, message, configcheck.fold(name, {"status": status}, [reported])


SERIES = [pytest.param(None, id="default-series"), pytest.param(OTHER_SERIES_IMAGE, id="slurm24.11")]


def _image_or_skip(image: str | None) -> None:
    if image is not None and missing_images([image]):
        pytest.skip(f"image missing: {image} (WARDEN_SLURM_SERIES=24.11 hack/images.sh controller)")


@pytest.mark.parametrize("image", SERIES)
def test_slurm_accepts_the_clusters_own_files_and_a_good_change(cluster: DockerCluster, image: str | None) -> None:
    _image_or_skip(image)
    for lines in ([], ["MaxJobCount=5000", "DefMemPerCPU=512"]):
        rc, message, verdict = _check(cluster, _files(cluster, lines), image)
        assert (rc, verdict.state) == (0, "Accepted"), message
        assert message.startswith("accepted by slurm-wlm "), message


#: (what is wrong, how the files get it, Slurm's words that must be in the verdict)
BAD = [
    pytest.param(["DefMemPerCPU=lots"], None, r"DefMemPerCPU value \(lots\) is not a valid number", id="wrong-type"),
    pytest.param(["SchedulerType=sched/nope"], None, r"sched/nope", id="unknown-plugin"),
    # the spec cannot name nodes in a partition (extraLines may not set PartitionName): whatever wrote the
    # file, the check reads it as slurmctld would
    pytest.param(
        [],
        "PartitionName=bogus Nodes=nosuch[1-4] State=UP\n",
        r"fatal: Invalid node names in partition bogus",
        id="nodes-that-do-not-exist",
    ),
]


@pytest.mark.parametrize("image", SERIES)
@pytest.mark.parametrize(("lines", "appended", "words"), BAD)
def test_slurm_refuses_a_bad_value_with_its_own_words(
    cluster: DockerCluster, image: str | None, lines: list[str], appended: str | None, words: str
) -> None:
    _image_or_skip(image)
    files = _files(cluster, lines)
    if appended is not None:
        files["slurm.conf"] += appended
    rc, message, verdict = _check(cluster, files, image)
    assert rc == 1, message
    assert re.search(words, message), message
    assert re.search(r"^fatal: ", message, re.M), message  # slurmctld's own fatal line, as it wrote it
    assert verdict.state == "Refused" and verdict.holds and verdict.final
    assert re.search(words, verdict.message)
    # the cluster's slurmctld never heard of it: it answers, with the configuration it had
    out = cluster.exec(cluster.names.controller_pod, "scontrol show config").out
    assert re.search(r"^SchedulerType\s*=\s*sched/backfill$", out, re.M), out
    partitions = cluster.exec(cluster.names.controller_pod, "sinfo -h -o %R").out.split()
    assert "cpu" in partitions and "bogus" not in partitions
