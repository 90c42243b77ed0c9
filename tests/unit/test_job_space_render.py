"""Per-job /tmp and /dev/shm and the process limit, as the operator renders them: the jail plugin's
jobtmpfs= and nproc= arguments in a worker group's plugstack.conf, and no pod volume for a per-job mount
(tests/dataplane/test_job_space.py holds what a job then sees)."""

from __future__ import annotations

from typing import Any

from warden.model import parse_spec
from warden.render.config import plugstack_conf
from warden.render.context import Cluster
from warden.render.nodes import worker_set


def _cluster(group: dict[str, Any]) -> Cluster:
    return Cluster("c", "ns", parse_spec({"workerGroups": [{"name": "a", **group}]}))


def _plugin_line(cluster: Cluster) -> str:
    text = plugstack_conf(cluster, cluster.spec.worker_groups[0])
    (line,) = [ln for ln in text.splitlines() if "spank_jail.so" in ln and not ln.startswith("#")]
    return line


def _pod(cluster: Cluster) -> dict[str, Any]:
    pod: dict[str, Any] = worker_set(cluster, cluster.spec.worker_groups[0])["spec"]["template"]["spec"]
    return pod


def test_by_default_each_job_has_its_own_tmp_and_shm_and_a_process_limit() -> None:
    cluster = _cluster({})
    line = _plugin_line(cluster)
    assert line.endswith("root=/mnt/jail jobtmpfs=/tmp jobtmpfs=/dev/shm nproc=8192")
    assert "bind=" not in line
    pod = _pod(cluster)
    assert not [v for v in pod["volumes"] if v["name"].startswith("local-")]
    mounts = [m["mountPath"] for m in pod["containers"][0]["volumeMounts"]]
    assert "/tmp" not in mounts and "/dev/shm" not in mounts


def test_size_limit_of_a_per_job_mount_caps_each_job_in_bytes() -> None:
    cluster = _cluster(
        {
            "localMounts": [
                {"name": "tmp", "jailPath": "/tmp", "perJob": True, "sizeLimit": "2Gi"},
                {"name": "scratch", "jailPath": "/scratch", "sizeLimit": "1Ti"},
            ],
            "maxUserProcesses": 0,
        }
    )
    line = _plugin_line(cluster)
    assert line.endswith("root=/mnt/jail bind=/scratch jobtmpfs=/tmp:2147483648")  # no nproc= with 0
    # a shared mount stays an emptyDir (with its sizeLimit), a per-job one has none
    volumes = {v["name"]: v for v in _pod(cluster)["volumes"]}
    assert volumes["local-scratch"]["emptyDir"] == {"sizeLimit": "1Ti"}
    assert "local-tmp" not in volumes


def test_a_size_under_one_byte_is_one_byte_not_a_refused_argument() -> None:
    line = _plugin_line(
        _cluster({"localMounts": [{"name": "t", "jailPath": "/tmp", "perJob": True, "sizeLimit": "500m"}]})
    )
    assert "jobtmpfs=/tmp:1 " in line


def test_shared_mounts_as_before() -> None:
    line = _plugin_line(_cluster({"localMounts": [{"name": "tmp", "jailPath": "/tmp"}], "maxUserProcesses": 100}))
    assert line.endswith("root=/mnt/jail bind=/tmp nproc=100")
