"""A cluster held on an older release's images (an operator upgrade keeps them: spec.images.version from
status.imagesVersion) gets only what those images understand (warden.imagecompat): the 0.1.0 plugin
refuses jobtmpfs= and nproc= (and with them every job step), its login image has no session limits, its
controller image no config check. tests/e2e/test_warden_upgrade.py holds the upgrade itself."""

from __future__ import annotations

from typing import Any

import pytest

from warden.imagecompat import has_limits, release_of
from warden.model import parse_spec
from warden.render.config import plugstack_conf, sshd_config
from warden.render.context import Cluster
from warden.render.nodes import login_statefulset, worker_set


def _cluster(version: str | None) -> Cluster:
    images = {"version": version} if version else {}
    return Cluster("c", "ns", parse_spec({"images": images, "workerGroups": [{"name": "a"}]}))


def _plugin_line(cluster: Cluster) -> str:
    text = plugstack_conf(cluster, cluster.spec.worker_groups[0])
    (line,) = [ln for ln in text.splitlines() if "spank_jail.so" in ln and not ln.startswith("#")]
    return line


def _env(pod: dict[str, Any]) -> set[str]:
    return {e["name"] for c in pod["spec"]["template"]["spec"]["containers"] for e in c.get("env", [])}


@pytest.mark.parametrize(
    ("tag", "release", "limits"),
    [
        ("0.1.0", (0, 1, 0), False),
        ("v0.1.3", (0, 1, 3), False),
        ("0.2.0", (0, 2, 0), True),
        ("0.2.0-rc1", (0, 2, 0), True),
        ("1.0.0", (1, 0, 0), True),
        ("dev", None, True),
        (None, None, True),
    ],
)
def test_a_tag_names_a_release_or_is_taken_as_this_ones(tag: str | None, release: Any, limits: bool) -> None:
    assert release_of(tag) == release
    assert has_limits(tag) is limits


def test_a_cluster_on_the_previous_releases_images_gets_files_and_pods_those_images_understand() -> None:
    old, new = _cluster("0.1.0"), _cluster(None)
    # the plugin's arguments: 0.1.0 knows root=, bind=, seccomp=, containers= only
    line = _plugin_line(old)
    assert "jobtmpfs=" not in line and "nproc=" not in line, line
    assert line.endswith("root=/mnt/jail bind=/tmp bind=/dev/shm"), line
    assert "jobtmpfs=/tmp" in _plugin_line(new)
    # /tmp and /dev/shm stay the pod's emptyDirs there, as the old images expect
    volumes = {v["name"] for v in worker_set(old, old.spec.worker_groups[0])["spec"]["template"]["spec"]["volumes"]}
    assert {"local-tmp", "local-shm"} <= volumes
    # no session limits: the old login image has no hook for them, and its sshd keeps PAM off
    assert not {n for n in _env(login_statefulset(old)) if n.startswith("WARDEN_SESSION_")}
    assert "WARDEN_SESSION_MEMORY" in _env(login_statefulset(new))
    assert "UsePAM yes" not in sshd_config(old) and "UsePAM yes" in sshd_config(new)


def test_the_process_switch_is_not_sent_to_images_that_ignore_it() -> None:
    spec = {"images": {"version": "0.1.0"}, "security": {"hideOtherUsersProcesses": False}}
    old = Cluster("c", "ns", parse_spec({**spec, "workerGroups": [{"name": "a"}]}))
    assert "WARDEN_HIDE_PROCESSES" not in _env(login_statefulset(old))


def test_login_slurmdbd_worker_and_slurmctld_probes_stay_as_the_previous_release_rendered_them() -> None:
    """The startup probes came with this release: a cluster on the previous release's images keeps the probes
    it was made with (a changed pod template would replace the login pod, and its users' sessions, on the
    operator's upgrade)."""
    from warden.render.accounting import slurmdbd_statefulset
    from warden.render.slurmctld import controller_statefulset

    def probes(pod: dict[str, Any]) -> dict[str, Any]:
        (c,) = [c for c in pod["spec"]["template"]["spec"]["containers"] if c["name"] in ("sshd", "slurmdbd")]
        return {k: v for k, v in c.items() if k.endswith("Probe")}

    for version, startup in (("0.1.0", False), (None, True)):
        cluster = _cluster(version)
        for pod, delay in ((login_statefulset(cluster), 30), (slurmdbd_statefulset(cluster), 60)):
            got = probes(pod)
            assert ("startupProbe" in got) is startup, (version, got)
            assert got["livenessProbe"]["initialDelaySeconds"] == (0 if startup else delay), (version, got)
        (slurmd,) = worker_set(cluster, cluster.spec.worker_groups[0])["spec"]["template"]["spec"]["containers"]
        readiness = slurmd["readinessProbe"]
        assert (readiness["periodSeconds"], readiness["timeoutSeconds"]) == ((10, 15) if startup else (5, 5)), version
        # slurmctld's liveness: the time of its last answer on this release's images (their health check has
        # that form), the reads themselves on the previous release's
        (ctld,) = controller_statefulset(cluster)["spec"]["template"]["spec"]["containers"]
        command = ctld["livenessProbe"]["exec"]["command"]
        assert command[1:] == (["--answered-within", "60", "20"] if startup else ["8"]), (version, command)
