"""The spec model refuses malformed SlurmClusters and names the field at fault."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.cases.malformed import CASES, Case
from warden import __version__
from warden.model import parse_spec, parse_spec_unknown
from warden.reconcile import validation_message


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_malformed_spec_is_rejected_naming_the_field(case: Case) -> None:
    if case.unknown:
        _, unknown = parse_spec_unknown(case.spec)
        assert [u for u in unknown if case.field in u], unknown
        return
    with pytest.raises(ValidationError) as err:
        parse_spec(case.spec)
    message = validation_message(err.value)
    assert case.field in message, message
    assert message.startswith("spec."), message


def test_there_are_at_least_fifteen_cases() -> None:
    assert len({c.id for c in CASES}) >= 15


def test_minimal_spec_gets_production_defaults() -> None:
    spec = parse_spec({"workerGroups": [{"name": "cpu"}]})
    group = spec.worker_groups[0]
    assert group.replicas == 1
    assert [(m.name, m.jail_path, m.medium) for m in group.local_mounts] == [
        ("tmp", "/tmp", "Disk"),
        ("shm", "/dev/shm", "Memory"),
    ]
    assert spec.login.replicas == 1 and spec.login.service.type == "NodePort"
    # SSH forwards nothing; other users' jobs and usage are private (docs/security.md)
    forwarding = spec.login.forwarding
    assert (forwarding.tcp, forwarding.agent, forwarding.x11) == ("Disabled", False, False)
    assert not forwarding.forwards_anything
    assert spec.slurm_config.private_data == ["jobs", "usage"]
    assert spec.accounting.mode == "Disabled"
    assert spec.health_checks.quick.enabled and not spec.health_checks.nccl.enabled
    # Slurm 26.05 and Warden's own images of it
    assert spec.slurm_version == "26.05" and spec.images.worker is None
    assert spec.image("worker") == f"warden/worker:{__version__}"
    # One default partition holding every group.
    (main,) = spec.effective_partitions()
    assert (main.name, main.worker_groups, main.default) == ("main", ["cpu"], True)


def test_numbers_are_accepted_as_quantities() -> None:
    spec = parse_spec({"workerGroups": [{"name": "cpu", "resources": {"limits": {"cpu": 4}}}]})
    assert spec.worker_groups[0].resources.limits["cpu"] == "4"


def test_first_partition_becomes_default_when_none_is_marked() -> None:
    spec = parse_spec(
        {
            "workerGroups": [{"name": "a"}, {"name": "b"}],
            "partitions": [{"name": "pa", "workerGroups": ["a"]}, {"name": "pb", "workerGroups": ["b"]}],
        }
    )
    assert [(p.name, p.default) for p in spec.effective_partitions()] == [("pa", True), ("pb", False)]


def test_extra_lines_may_set_keys_warden_does_not_own() -> None:
    spec = parse_spec(
        {"workerGroups": [{"name": "a"}], "slurmConfig": {"extraLines": ["SchedulerParameters=bf_continue"]}}
    )
    assert spec.slurm_config.extra_lines == ["SchedulerParameters=bf_continue"]


def test_privacy_is_set_one_way_and_may_be_turned_off() -> None:
    """PrivateData has its field; a slurm.conf line setting it is refused, naming the field. `[]` is
    Slurm's own default (everyone sees everything)."""
    with pytest.raises(
        ValidationError, match=r"privatedata is set by Warden; set it through spec\.slurmConfig\.privateData"
    ):
        parse_spec({"workerGroups": [{"name": "a"}], "slurmConfig": {"extraLines": ["MaxJobCount=9 privatedata=none"]}})
    spec = parse_spec({"workerGroups": [{"name": "a"}], "slurmConfig": {"privateData": []}})
    assert spec.slurm_config.private_data == []


def test_owned_keys_are_refused_whatever_their_case() -> None:
    with pytest.raises(ValidationError, match="AUTHTYPE is set by Warden"):
        parse_spec({"workerGroups": [{"name": "a"}], "slurmConfig": {"extraLines": ["AUTHTYPE=auth/none"]}})
