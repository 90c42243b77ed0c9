"""The bridge's half of the slurmrestd client: external jobs submitted, listed, cancelled, and external
nodes created, at data_parser v0.0.44, against what Slurm 26.05.5 answered.

The answers are tests/unit/fixtures/slurm/slurmrestd_v0044_*.json, captured from Warden's controller
image (slurmctld and slurmrestd 26.05.5). slurmrestd_v0044.md beside them says what was asked and the
HTTP status of each; the statuses are repeated in ``CAPTURED``. A loopback server replays them, as
tests/unit/test_slurmrest.py does for the rest of the client.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.jsonserver import JsonServer
from warden.naming import RESTAPI_VERSION, RESTAPI_VERSION_2605, RESTAPI_VERSION_TOPOLOGY
from warden.slurm.model import Job, SlurmParseError, jobs_from_doc
from warden.slurm.rest import (
    SlurmNodeExists,
    SlurmRest,
    SlurmRestError,
    SlurmSubmitError,
    SlurmUnreachable,
    Submitted,
)

FIXTURES = Path(__file__).parent / "fixtures" / "slurm"
#: the HTTP status slurmrestd answered each capture with (slurmrestd_v0044.md)
CAPTURED = {
    "submit": 200,
    "submit_refused": 500,
    "submit_bad_partition": 422,
    "submit_parse_error": 500,
    "submit_timeout": 504,
    "jobs_external": 200,
    "jobs_preempting": 200,
    "jobs_unchanged": 200,
    "cancel": 200,
    "cancel_completed": 200,
    "cancel_unknown": 200,
    "cancel_denied": 200,
    "cancel_bulk": 200,
    "create_node": 200,
    "create_node_exists": 422,
    "create_node_denied": 422,
    "create_node_bad_state": 422,
}
API = f"/slurm/{RESTAPI_VERSION_2605}"
EXTERNAL = {
    "name": "k8s:default/demo",
    "partition": "k8s",
    "flags": ["EXTERNAL_JOB"],
    "comment": "warden-bridge/v1 Pod/default/demo/uid size=1",
    "tasks": 2,
    "cpus_per_task": 1,
    "memory_per_cpu": {"set": True, "number": 100},
    "minimum_nodes": 1,
    "maximum_nodes": 2,
}


def doc(name: str) -> Any:
    return json.loads((FIXTURES / f"slurmrestd_v0044_{name}.json").read_text())


def answer(name: str) -> tuple[int, Any]:
    """A captured answer: its status and body."""
    return CAPTURED[name], doc(name)


class Slurmrestd:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.replies: dict[tuple[str, str], tuple[int, Any]] = {}


@pytest.fixture
def slurmrestd() -> Iterator[tuple[Slurmrestd, SlurmRest]]:
    fake = Slurmrestd()

    def reply(method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        fake.requests.append((method, path, headers, json.loads(raw) if raw else None))
        return fake.replies.get((method, path), (404, {"errors": [{"description": f"no route {method} {path}"}]}))

    httpd = JsonServer(reply).start()
    try:
        yield fake, SlurmRest(httpd.url, token=lambda: "T", user="warden-bridge", api_version=RESTAPI_VERSION_2605)
    finally:
        httpd.stop()


# --- the job records ---------------------------------------------------------------------------------


def test_external_jobs_are_read_with_their_name_owner_comment_flags_and_allocation() -> None:
    running, resources, partition_config = jobs_from_doc(doc("jobs_external"))
    assert running == Job(
        id=1,
        state="RUNNING",
        nodes=("k8s-a", "k8s-b"),
        end_time=1795850867.0,
        partition="k8s",
        cpus=5,
        name="k8s:default/demo",
        user="slurm",
        comment="warden-bridge/v1 Pod/default/demo/0b7c5e0e-5f0e-4c39-9d5c-2f8f0c1a6b11 size=5",
        flags=(
            "EXACT_TASK_COUNT_REQUESTED",
            "JOB_WAS_RUNNING",
            "EXACT_MEMORY_REQUESTED",
            "EXTERNAL_JOB",
            "USING_DEFAULT_ACCOUNT",
            "USING_DEFAULT_QOS",
            "USING_DEFAULT_WCKEY",
        ),
        allocation=(("k8s-a", 4), ("k8s-b", 1)),
        preempt_time=None,
    )
    assert (resources.state, resources.state_reason, resources.nodes, resources.allocation) == (
        "PENDING",
        "Resources",
        (),
        (),
    )
    assert resources.name == "k8s:default/second" and "EXTERNAL_JOB" in resources.flags
    assert (partition_config.state, partition_config.state_reason) == ("PENDING", "PartitionConfig")


def test_a_job_being_preempted_is_running_with_its_preempt_time_and_ends_after_the_grace_time() -> None:
    jobs = {j.id: j for j in jobs_from_doc(doc("jobs_preempting"))}
    for job_id in (2, 4):
        job = jobs[job_id]
        assert job.state == "RUNNING"  # ["RUNNING", "SIGNALING"]: the grace time's SIGTERM is being sent
        assert job.preempt_time is not None and job.end_time == job.preempt_time + 30  # GraceTime=30
    assert jobs[4].user == "warden-bridge" and jobs[4].allocation == (("k8s-a", 1),)
    assert jobs[5].preempt_time is None and jobs[5].state_reason == "Resources"  # the preemptor, waiting
    assert jobs[1].state == "CANCELLED" and jobs[1].preempt_time is None


def test_records_of_older_parsers_leave_what_they_lack_at_its_default() -> None:
    """A v0.0.42 record (Slurm 24.11.5) still reads; one without any of the bridge's fields too."""
    [first, *_] = jobs_from_doc(json.loads((FIXTURES / "slurmrestd_jobs_four.json").read_text()))
    assert (first.name, first.user, first.comment, first.preempt_time) == ("wrap", "root", "", None)
    assert first.allocation == (("dp-worker-cpu-0", 1),) and "EXTERNAL_JOB" not in first.flags
    [bare] = jobs_from_doc({"jobs": [{"job_id": 3, "job_state": "PENDING"}]})
    assert bare == Job(id=3, state="PENDING", nodes=(), end_time=None)
    assert (bare.name, bare.user, bare.comment, bare.flags, bare.allocation) == ("", "", "", (), ())


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"preempt_time": "soon"}, "preempt_time is not a number"),
        ({"job_resources": {"nodes": {"allocation": [{"name": "a", "cpus": {"count": -1}}]}}}, "CPUs on a"),
        ({"job_resources": {"nodes": {"allocation": [{"cpus": {"count": 1}}]}}}, "without a name"),
    ],
)
def test_malformed_bridge_fields_are_refused(fields: dict[str, Any], why: str) -> None:
    with pytest.raises(SlurmParseError, match=why):
        jobs_from_doc({"jobs": [{"job_id": 3, "job_state": ["RUNNING"], **fields}]})


def test_an_unset_or_zero_preempt_time_is_none() -> None:
    for raw in ({"set": False, "infinite": False, "number": 5}, {"set": True, "infinite": False, "number": 0}, 0):
        [job] = jobs_from_doc({"jobs": [{"job_id": 3, "job_state": ["RUNNING"], "preempt_time": raw}]})
        assert job.preempt_time is None


# --- submit ----------------------------------------------------------------------------------------------


def test_a_submit_posts_the_description_and_returns_the_id_and_slurms_warning_once(
    slurmrestd: tuple[Slurmrestd, SlurmRest],
) -> None:
    fake, rest = slurmrestd
    fake.replies[("POST", f"{API}/job/submit")] = answer("submit")
    assert rest.submit_job(EXTERNAL) == Submitted(3, ("Requested partition configuration not available now",))
    method, path, headers, body = fake.requests[0]
    assert (method, path, body) == ("POST", f"{API}/job/submit", {"job": EXTERNAL})
    assert headers["X-SLURM-USER-NAME"] == "warden-bridge" and headers["X-SLURM-USER-TOKEN"] == "T"
    quiet = {**doc("submit"), "job_id": 14, "warnings": []}
    fake.replies[("POST", f"{API}/job/submit")] = (200, quiet)
    assert rest.submit_job(EXTERNAL) == Submitted(14, ())
    # what job_submit.lua tells the user is Slurm's word too; an older answer's result.job_id
    told = {"result": {"job_id": 15}, "job_submit_user_msg": "placeholder queued", "warnings": []}
    fake.replies[("POST", f"{API}/job/submit")] = (200, told)
    assert rest.submit_job(EXTERNAL) == Submitted(15, ("placeholder queued",))


@pytest.mark.parametrize(
    ("captured", "status", "words"),
    [
        ("submit_refused", 500, "Batch job submission failed: Invalid configuration for external job"),
        ("submit_bad_partition", 422, "Batch job submission failed: Invalid partition name specified"),
    ],
)
def test_a_refused_submit_raises_with_slurms_words_and_no_job(
    slurmrestd: tuple[Slurmrestd, SlurmRest], captured: str, status: int, words: str
) -> None:
    fake, rest = slurmrestd
    fake.replies[("POST", f"{API}/job/submit")] = answer(captured)
    with pytest.raises(SlurmSubmitError) as raised:
        rest.submit_job(EXTERNAL)
    assert (raised.value.status, raised.value.errors, raised.value.job_id) == (status, [words], None)
    assert isinstance(raised.value, SlurmRestError)  # what callers of the other calls catch


def test_a_submit_error_that_still_made_a_job_says_which(slurmrestd: tuple[Slurmrestd, SlurmRest]) -> None:
    """slurmrestd drops a field it cannot parse, answers HTTP 500 with the error, and submits the rest:
    the job exists (26.05.5 ran it), and the caller must know its id."""
    fake, rest = slurmrestd
    fake.replies[("POST", f"{API}/job/submit")] = answer("submit_parse_error")
    with pytest.raises(SlurmSubmitError, match='Unknown flag "NO_SUCH_FLAG"') as raised:
        rest.submit_job({**EXTERNAL, "flags": ["EXTERNAL_JOB", "NO_SUCH_FLAG"]})
    assert raised.value.job_id == 13 and raised.value.status == 500
    lua = {"errors": [{"description": "Batch job submission failed"}], "job_submit_user_msg": "no scripts, bridge"}
    fake.replies[("POST", f"{API}/job/submit")] = (500, lua)
    with pytest.raises(SlurmSubmitError) as raised:
        rest.submit_job(EXTERNAL)
    assert raised.value.errors == ["Batch job submission failed", "no scripts, bridge"]


def test_a_submit_slurmctld_did_not_answer_in_time_is_unreachable(slurmrestd: tuple[Slurmrestd, SlurmRest]) -> None:
    """HTTP 504 "Socket timed out": no job id, though slurmctld may have made the job (it did, in the
    capture); the caller looks for it before submitting again."""
    fake, rest = slurmrestd
    fake.replies[("POST", f"{API}/job/submit")] = answer("submit_timeout")
    with pytest.raises(SlurmUnreachable, match="Socket timed out"):
        rest.submit_job(EXTERNAL)


def test_an_answer_without_a_job_id_is_no_submit(slurmrestd: tuple[Slurmrestd, SlurmRest]) -> None:
    fake, rest = slurmrestd
    fake.replies[("POST", f"{API}/job/submit")] = (200, {"errors": [], "warnings": []})
    with pytest.raises(SlurmParseError, match="no job id"):
        rest.submit_job(EXTERNAL)


def test_an_external_job_is_not_sent_to_a_parser_that_would_drop_the_flag(
    slurmrestd: tuple[Slurmrestd, SlurmRest],
) -> None:
    fake, rest = slurmrestd
    old = SlurmRest(rest.base_url, token=lambda: "T", api_version=RESTAPI_VERSION)
    with pytest.raises(ValueError, match="does not know EXTERNAL_JOB"):
        old.submit_job(EXTERNAL)
    assert fake.requests == []


# --- jobs since ----------------------------------------------------------------------------------------------


def test_jobs_since_is_none_when_slurm_says_nothing_changed(slurmrestd: tuple[Slurmrestd, SlurmRest]) -> None:
    fake, rest = slurmrestd
    fake.replies[("GET", f"{API}/jobs?update_time=1795847341")] = answer("jobs_unchanged")
    fake.replies[("GET", f"{API}/jobs?update_time=1795847300")] = answer("jobs_external")
    fake.replies[("GET", f"{API}/jobs")] = answer("jobs_external")
    assert rest.jobs_since(1795847341.9) is None  # whole seconds, never later than asked
    every = jobs_from_doc(doc("jobs_external"))
    assert rest.jobs_since(1795847300) == every
    assert rest.jobs_since(None) == every
    assert [r[1] for r in fake.requests] == [
        f"{API}/jobs?update_time=1795847341",
        f"{API}/jobs?update_time=1795847300",
        f"{API}/jobs",
    ]


def test_no_jobs_at_all_is_not_no_change(slurmrestd: tuple[Slurmrestd, SlurmRest]) -> None:
    """An empty list without slurmrestd's warning: every job is gone, which the caller must see."""
    fake, rest = slurmrestd
    empty = {**doc("jobs_unchanged"), "warnings": []}
    fake.replies[("GET", f"{API}/jobs?update_time=1795847341")] = (200, empty)
    assert rest.jobs_since(1795847341) == []
    errors = {**doc("jobs_unchanged"), "errors": [{"description": "Unable to query jobs"}]}
    fake.replies[("GET", f"{API}/jobs?update_time=1795847341")] = (200, errors)
    with pytest.raises(SlurmRestError, match="Unable to query jobs"):
        rest.jobs_since(1795847341)


# --- cancel -------------------------------------------------------------------------------------------------


def test_cancelling_a_job_and_one_that_is_already_gone_or_done(slurmrestd: tuple[Slurmrestd, SlurmRest]) -> None:
    fake, rest = slurmrestd
    fake.replies[("DELETE", f"{API}/job/1")] = answer("cancel")
    rest.cancel_job(1)
    fake.replies[("DELETE", f"{API}/job/1")] = answer("cancel_completed")
    rest.cancel_job(1)
    fake.replies[("DELETE", f"{API}/job/999")] = answer("cancel_unknown")
    rest.cancel_job(999)
    # an older slurmrestd says "no such job" as an error document
    gone = {"errors": [{"description": "Failed to kill job", "error": "Invalid job id specified"}]}
    fake.replies[("DELETE", f"{API}/job/998")] = (500, gone)
    rest.cancel_job(998)
    assert [(r[0], r[1]) for r in fake.requests] == [
        ("DELETE", f"{API}/job/1"),
        ("DELETE", f"{API}/job/1"),
        ("DELETE", f"{API}/job/999"),
        ("DELETE", f"{API}/job/998"),
    ]


def test_cancelling_another_users_job_raises(slurmrestd: tuple[Slurmrestd, SlurmRest]) -> None:
    fake, rest = slurmrestd
    fake.replies[("DELETE", f"{API}/job/2")] = answer("cancel_denied")
    with pytest.raises(SlurmRestError, match="cancel job 2: HTTP 200: job 2: Access/permission denied"):
        rest.cancel_job(2)
    # what an unguarded slurmctld answers just before it freezes (docs/security.md)
    refused = {"errors": [{"description": "Signal request failed", "error": "Operation not permitted"}]}
    fake.replies[("DELETE", f"{API}/job/2")] = (403, refused)
    with pytest.raises(SlurmRestError, match="HTTP 403"):
        rest.cancel_job(2)


def test_cancelling_several_jobs_is_one_request(slurmrestd: tuple[Slurmrestd, SlurmRest]) -> None:
    fake, rest = slurmrestd
    fake.replies[("DELETE", f"{API}/jobs/")] = answer("cancel_bulk")
    rest.cancel_jobs([3, 5, 1, 998])  # 1 already done, 998 unknown: nothing to do about them
    assert fake.requests[0][0:2] == ("DELETE", f"{API}/jobs/")
    assert fake.requests[0][3] == {"jobs": ["3", "5", "1", "998"]}
    rest.cancel_jobs([])
    assert len(fake.requests) == 1
    denied = doc("cancel_denied")["status"][0]
    fake.replies[("DELETE", f"{API}/jobs/")] = (200, {**doc("cancel_bulk"), "status": [denied]})
    with pytest.raises(SlurmRestError, match="job 2: Access/permission denied"):
        rest.cancel_jobs([2, 3])


# --- external nodes -------------------------------------------------------------------------------------------


def test_an_external_node_is_created_from_its_node_line(slurmrestd: tuple[Slurmrestd, SlurmRest]) -> None:
    fake, rest = slurmrestd
    conf = "NodeName=k8s-a CPUs=4 RealMemory=4000 State=EXTERNAL Feature=k8s NodeAddr=10.0.0.7"
    fake.replies[("POST", f"{API}/new/node/")] = answer("create_node")
    rest.create_node(conf)
    assert fake.requests[0][0:2] == ("POST", f"{API}/new/node/") and fake.requests[0][3] == {"node_conf": conf}
    fake.replies[("POST", f"{API}/new/node/")] = answer("create_node_exists")
    with pytest.raises(SlurmNodeExists, match="Node already exists in the node table"):
        rest.create_node(conf)


@pytest.mark.parametrize(
    ("captured", "words"),
    [
        ("create_node_denied", "Failure to create node: Invalid user id"),  # not a Slurm administrator
        ("create_node_bad_state", "Failure to create node: Invalid node state specified"),  # State=IDLE
    ],
)
def test_a_refused_node_raises_with_slurms_words(
    slurmrestd: tuple[Slurmrestd, SlurmRest], captured: str, words: str
) -> None:
    fake, rest = slurmrestd
    fake.replies[("POST", f"{API}/new/node/")] = answer(captured)
    with pytest.raises(SlurmRestError) as raised:
        rest.create_node("NodeName=k8s-c CPUs=2 State=EXTERNAL")
    assert raised.value.errors == [words] and raised.value.status == 422
    assert not isinstance(raised.value, SlurmNodeExists)


def test_the_2605_version_is_the_topology_version() -> None:
    assert RESTAPI_VERSION_2605 == RESTAPI_VERSION_TOPOLOGY == doc("submit")["meta"]["plugin"]["data_parser"][-7:]
