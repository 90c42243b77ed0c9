"""The spec model refuses malformed SlurmClusters and names the field at fault."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from tests.cases.malformed import CASES, Case
from warden import __version__
from warden.model import (
    ALLOWED_SLURM_KEYS,
    OPERATOR_OWNED_SLURM_KEYS,
    REFUSED_SLURM_KEYS,
    parse_spec,
    parse_spec_unknown,
)
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


@pytest.mark.parametrize(
    "line",
    [
        # Slurm 25.05 on: a program that makes a node's TLS key and certificate, as root
        "CertmgrType=certmgr/script",
        "CertmgrParameters=certificate_key_script=/home/alice/x",
        "CertgenType=certgen/script",
        "TLSType=tls/s2n",
        # X11 forwarding, contained steps, a prolog run at allocation, and Warden's own PrologFlags=Alloc
        "PrologFlags=X11",
        "NamespaceType=namespace/linux",
        "HashPlugin=hash/k12",
        "NoSuchKey=1",
    ],
)
def test_extra_lines_may_set_only_the_keys_warden_lists(line: str) -> None:
    """An allow-list: a key Warden has not read and listed (a new Slurm release's included) is refused, named."""
    key = line.split("=")[0]
    with pytest.raises(ValidationError, match=f"{key} is not a key extraLines may set"):
        parse_spec({"workerGroups": [{"name": "a"}], "slurmConfig": {"extraLines": [line]}})


def test_the_keys_extra_lines_may_set_run_nothing_and_name_no_file_host_or_identity() -> None:
    """What a listed key's name says it is about: none names a program, a file, a directory, a host, a password
    or a user; a key naming a plugin chooses among Slurm's own (PluginDir is Warden's) for what runs nothing."""
    words = ("Prog", "Prolog", "Epilog", "File", "Dir", "Loc", "Host", "Addr", "Pass", "User", "Type", "Plugin",
             "Cert", "TLS", "Script", "Command", "Path", "Namespace", "Container", "Auth", "Cred", "Key")  # fmt: skip
    reviewed = {
        # timeouts of prologs and epilogs Warden runs (the keys naming them stay refused)
        "PrologEpilogTimeout", "EpilogMsgTime",
        # plugin choices among Slurm's own that run no program: scheduling, priorities, preemption, labels
        "SchedulerType", "PriorityType", "PreemptType", "MCSPlugin",
        # parameters of plugins Warden chose (cons_tres's CR_* flags, the task plugin's binding), wckeys
        "SelectTypeParameters", "TaskPluginParam", "TrackWCKey",
        # whether a job's output files are appended to or truncated (the user's files, as the user)
        "JobFileAppend",
    }  # fmt: skip
    flagged = {k for k in ALLOWED_SLURM_KEYS if any(w.lower() in k.lower() for w in words)}
    assert flagged == reviewed, f"review these keys, then list them here: {sorted(flagged ^ reviewed)}"
    assert not {k.lower() for k in ALLOWED_SLURM_KEYS} & {k.lower() for k in OPERATOR_OWNED_SLURM_KEYS}
    assert not {k.lower() for k in ALLOWED_SLURM_KEYS} & {k.lower() for k in REFUSED_SLURM_KEYS}


def test_extra_lines_are_one_key_value_each_with_a_comment_at_most() -> None:
    """One Key=Value a line: a second pair (slurm.conf would read one) would be a key no rule looked at."""
    ok = ["MaxJobCount=10 # ten thousand was too many", 'SchedulerParameters="bf_continue,bf_interval=30"',
          "maxjobcount=3", "PreemptMode=CANCEL"]  # fmt: skip
    assert parse_spec({"workerGroups": [{"name": "a"}], "slurmConfig": {"extraLines": ok}}).slurm_config.extra_lines
    for line in ("MaxJobCount=1 and more", "MaxJobCount=5 CertmgrType=certmgr/script"):
        with pytest.raises(ValidationError, match="is not one Key=Value"):
            parse_spec({"workerGroups": [{"name": "a"}], "slurmConfig": {"extraLines": [line]}})


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
