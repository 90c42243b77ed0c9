"""What each daemon runs: the stamp of the rendered Slurm files (warden.slurm.confighash), the nodes' records of
it (warden.nodesync) and the SlurmConfigRunning condition (warden.status). The supervisor's part:
tests/unit/test_node_lifecycle.py; real slurmd: tests/dataplane/test_reconfigure.py."""

from __future__ import annotations

from tests.support.examples import load
from warden.model import Condition, SlurmNodesStatus
from warden.nodesync import WorkerPod, plan
from warden.render.config import slurm_config_files
from warden.slurm import confighash
from warden.slurm.model import Node
from warden.status import CONFIG_GRACE_SECONDS, CONFIG_RUNNING, config_running_condition

FILES = {"slurm.conf": "ClusterName=demo\n", "gres.conf": "AutoDetect=off\n"}


def test_slurm_conf_names_the_hash_of_every_file_in_its_first_line() -> None:
    stamped = confighash.stamped(FILES)
    stamp = confighash.of_text(stamped["slurm.conf"])
    assert stamped["slurm.conf"] == f"# warden-config-hash: {stamp}\nClusterName=demo\n" and len(stamp) == 12
    assert confighash.stamped(stamped) == stamped, "stamping again changes nothing"
    assert confighash.compute({**FILES, "gres.conf": "AutoDetect=nvml\n"}) != stamp, "any file moves it"
    assert confighash.of_text("ClusterName=demo\n") == ""


def test_the_rendered_files_carry_the_stamp() -> None:
    files = slurm_config_files(load("cpu-only"))
    assert files["slurm.conf"].startswith(confighash.PREFIX)
    assert confighash.of_text(files["slurm.conf"]) == confighash.compute(files)


def test_a_nodes_extra_gives_the_stamp_its_slurmd_runs() -> None:
    assert confighash.from_extra(confighash.extra("0123456789ab")) == "0123456789ab"
    assert confighash.from_extra("rack=7 warden-config=0123456789ab") == "0123456789ab"
    assert confighash.from_extra("") == confighash.from_extra("rack=7") == ""


def _node(name: str, extra: str = "") -> Node:
    return Node(name=name, state="IDLE", flags=frozenset(), reason="", gres="", features=(), partitions=(), extra=extra)


def test_the_sync_counts_the_nodes_by_the_configuration_they_record() -> None:
    pods = [WorkerPod(name=n, k8s_node="k1", condition=None) for n in ("a", "b", "c", "d")]
    nodes = [_node("a", "warden-config=new"), _node("b", "warden-config=new"), _node("c", "warden-config=old"),
             _node("d")]  # fmt: skip
    assert plan(pods, nodes, {}).summary.slurm_configs == {"new": 2, "old": 1}


def _cond(type_: str, ok: bool, reason: str, message: str) -> Condition:
    return Condition(type=type_, status="True" if ok else "False", reason=reason, message=message,
                     last_transition_time="2026-11-29T07:00:00Z", observed_generation=1)  # fmt: skip


def test_workers_on_another_configuration_are_reloading_then_said_to_run_another_one() -> None:
    slurm = SlurmNodesStatus(registered=3, slurm_configs={"new": 1, "old": 2})
    now = "2026-11-29T07:00:00Z"
    first = config_running_condition("new", slurm, {}, now, _cond)
    assert first is not None and (first.status, first.reason) == ("False", "Reloading")
    assert "2 worker nodes' slurmd run old on 2, not yet new" in first.message
    later = "2026-11-29T07:03:01Z"  # past the grace since the condition turned False
    assert CONFIG_GRACE_SECONDS <= 181
    stuck = config_running_condition("new", slurm, {CONFIG_RUNNING: first}, later, _cond)
    assert stuck is not None and (stuck.status, stuck.reason) == ("False", "SlurmdOnOtherConfig")
    assert "still run another configuration than the ConfigMap's new: old on 2" in stuck.message
    taken = SlurmNodesStatus(registered=3, slurm_configs={"new": 3})
    done = config_running_condition("new", taken, {CONFIG_RUNNING: stuck}, later, _cond)
    assert done is not None and (done.status, done.reason) == ("True", "AllRunRendered")


def test_nothing_is_said_without_a_stamp_or_records() -> None:
    slurm = SlurmNodesStatus(registered=2)
    assert config_running_condition("new", slurm, {}, "2026-11-29T07:00:00Z", _cond) is None
    assert config_running_condition("", SlurmNodesStatus(slurm_configs={"x": 1}), {}, "2026-11-29T07:00:00Z",
                                    _cond) is None  # fmt: skip
