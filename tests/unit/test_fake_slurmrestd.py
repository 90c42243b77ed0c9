"""The stand-in slurmrestd (tests/support/fake_slurmrestd.py) as the bridge's integration test uses it:
external jobs submitted, placed first-fit on the nodes' CPUs, cancelled, preempted, listed since a
time, and external nodes created, all through ``warden.slurm.rest.SlurmRest`` on loopback.

What it answers is held to what Slurm 26.05.5 answered (tests/unit/test_slurmrest_jobs.py replays
those captures against the client); here it is held to behaving like one slurmctld over time.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3

from tests.support.fake_slurmrestd import Action, FakeSlurmrestd
from warden.naming import RESTAPI_VERSION, RESTAPI_VERSION_2605
from warden.slurm.rest import (
    SlurmNodeExists,
    SlurmRest,
    SlurmRestError,
    SlurmSubmitError,
    Submitted,
    mint_token,
)

BRIDGE = "warden-bridge"


@pytest.fixture
def fake() -> Iterator[FakeSlurmrestd]:
    with FakeSlurmrestd("ns", "c") as slurm:
        yield slurm


def client(fake: FakeSlurmrestd, user: str = BRIDGE, version: str = RESTAPI_VERSION_2605) -> SlurmRest:
    return SlurmRest(
        f"http://127.0.0.1:{fake.port}/ns/c", token=lambda: mint_token(b"k" * 32, user), user=user, api_version=version
    )


def external(name: str, tasks: int = 1, cpus_per_task: int = 1, **more: Any) -> dict[str, Any]:
    return {
        "name": f"k8s:team/{name}",
        "partition": "k8s",
        "flags": ["EXTERNAL_JOB"],
        "comment": f"warden-bridge/v1 Pod/team/{name}/uid-{name} size={tasks}",
        "tasks": tasks,
        "cpus_per_task": cpus_per_task,
        "memory_per_cpu": {"set": True, "number": 100},
        "minimum_nodes": 1,
        "maximum_nodes": tasks,
        **more,
    }


def placed(fake: FakeSlurmrestd, job_id: int) -> tuple[str, list[tuple[str, int]]]:
    record = fake.job(job_id)
    resources = record["job_resources"]
    allocation = resources["nodes"]["allocation"] if resources else []
    return record["job_state"][0], [(a["name"], a["cpus"]["count"]) for a in allocation]


def test_a_submitted_external_job_runs_where_there_are_cpus_and_reads_back_as_slurm_lists_it(
    fake: FakeSlurmrestd,
) -> None:
    fake.register("n1", cpus=4)
    fake.register("n2", cpus=4)
    rest = client(fake)
    submitted = rest.submit_job(external("web", tasks=2, time_limit={"set": True, "number": 5}))
    assert submitted == Submitted(submitted.job_id, ())
    record = fake.job(submitted.job_id)
    assert (record["name"], record["user_name"], record["partition"]) == ("k8s:team/web", BRIDGE, "k8s")
    assert record["comment"] == "warden-bridge/v1 Pod/team/web/uid-web size=2" and "EXTERNAL_JOB" in record["flags"]
    assert placed(fake, submitted.job_id) == ("RUNNING", [("n1", 2)])
    assert record["nodes"] == "n1" and record["job_resources"]["nodes"]["allocation"][0]["memory"]["allocated"] == 200
    assert record["end_time"]["number"] - record["start_time"]["number"] == 300
    [job] = rest.jobs()
    assert (job.id, job.state, job.user, job.allocation, job.nodes) == (
        submitted.job_id,
        "RUNNING",
        BRIDGE,
        (("n1", 2),),
        ("n1",),
    )
    assert job.comment == record["comment"] and job.name == "k8s:team/web" and "EXTERNAL_JOB" in job.flags
    assert fake.state_of("n1") == ["MIXED", "DYNAMIC_NORM"] and fake.nodes["n1"]["alloc_cpus"] == 2
    assert fake.jobs_of(BRIDGE) == [fake.job(submitted.job_id)] and fake.jobs_of("someone") == []


def test_jobs_are_placed_first_fit_in_id_order_all_or_nothing_and_freed_cpus_are_used_again(
    fake: FakeSlurmrestd,
) -> None:
    fake.register("n1", cpus=4)
    fake.register("n2", cpus=4)
    rest = client(fake)
    wide = rest.submit_job(external("wide", tasks=3, cpus_per_task=2)).job_id
    assert placed(fake, wide) == ("RUNNING", [("n1", 4), ("n2", 2)])
    # two tasks of 2 CPUs on one node: n2 has 2 CPUs left, so none of it starts
    narrow = rest.submit_job(external("narrow", tasks=2, cpus_per_task=2, maximum_nodes=1)).job_id
    assert placed(fake, narrow) == ("PENDING", []) and fake.job(narrow)["state_reason"] == "Resources"
    small = rest.submit_job(external("small", tasks=1, cpus_per_task=2)).job_id
    assert placed(fake, small) == ("RUNNING", [("n2", 2)])  # a later job that fits goes ahead
    assert fake.state_of("n2") == ["ALLOCATED", "DYNAMIC_NORM"]
    rest.cancel_job(wide)
    assert placed(fake, narrow) == ("RUNNING", [("n1", 4)])
    assert fake.job(wide)["job_state"] == ["CANCELLED"] and fake.job(narrow)["state_reason"] == "None"
    spread = rest.submit_job(external("spread", tasks=2, tasks_per_node=1)).job_id
    assert placed(fake, spread) == ("PENDING", [])  # one task per node, and no node has a CPU free
    rest.cancel_jobs([narrow, small])
    assert placed(fake, spread) == ("RUNNING", [("n1", 1), ("n2", 1)])


def test_a_user_job_holds_its_whole_node_and_its_end_lets_a_waiting_job_run(fake: FakeSlurmrestd) -> None:
    fake.register("n1", cpus=4)
    held = fake.run_job("n1", 600)
    assert fake.state_of("n1") == ["ALLOCATED", "DYNAMIC_NORM"]
    rest = client(fake)
    waiting = rest.submit_job(external("waits")).job_id
    assert placed(fake, waiting) == ("PENDING", [])
    assert [j.state_reason for j in rest.jobs()] == ["Resources"]  # the bridge sees only its own job
    assert {j.id for j in client(fake, "slurm").jobs()} == {held, waiting}  # an administrator sees both
    fake.end_job(held)
    assert placed(fake, waiting) == ("RUNNING", [("n1", 1)])
    assert fake.job(held)["job_state"] == ["COMPLETED"] and fake.state_of("n1") == ["MIXED", "DYNAMIC_NORM"]


def test_drained_and_down_nodes_get_no_job_until_they_are_back(fake: FakeSlurmrestd) -> None:
    fake.register("n1", state=("IDLE", "DRAIN"), reason="hands off", cpus=2)
    fake.register("n2", state=("DOWN", "NOT_RESPONDING"), cpus=2)
    waiting = client(fake).submit_job(external("waits")).job_id
    assert placed(fake, waiting) == ("PENDING", [])
    client(fake, "slurm").resume("n1")
    assert placed(fake, waiting) == ("RUNNING", [("n1", 1)])
    assert fake.state_of("n1") == ["MIXED", "DYNAMIC_NORM"]


def test_a_job_bigger_than_every_node_is_taken_with_slurms_warning_and_waits_for_partition_config(
    fake: FakeSlurmrestd,
) -> None:
    fake.register("n1", cpus=4)
    rest = client(fake)
    huge = rest.submit_job(external("huge", cpus_per_task=64))
    assert huge.warnings == ("Requested partition configuration not available now",)
    assert placed(fake, huge.job_id) == ("PENDING", []) and fake.job(huge.job_id)["state_reason"] == "PartitionConfig"
    fake.register("big", cpus=64)
    assert placed(fake, huge.job_id) == ("RUNNING", [("big", 64)])


def test_submits_slurm_refuses(fake: FakeSlurmrestd) -> None:
    fake.register("n1", cpus=4)
    rest = client(fake)
    with pytest.raises(SlurmSubmitError, match="Invalid configuration for external job") as raised:
        rest.submit_job(external("script", script="#!/bin/sh\ntrue\n"))
    assert raised.value.status == 500 and raised.value.job_id is None
    fake.partitions = {"k8s"}
    with pytest.raises(SlurmSubmitError, match="Invalid partition name specified") as raised:
        rest.submit_job({**external("lost"), "partition": "nosuch"})
    assert raised.value.status == 422
    assert fake.jobs_of(BRIDGE) == []
    # data_parser v0.0.42 has no EXTERNAL_JOB flag (the client does not even try it there)
    status, said = raw(fake, "POST", f"{RESTAPI_VERSION}/job/submit", {"job": external("old")})
    assert status == 500 and said["errors"][0]["description"] == 'Unknown flag "EXTERNAL_JOB"'
    assert fake.jobs_of(BRIDGE) == []


def test_cancel_answers_as_slurmrestd_does_for_jobs_gone_done_and_of_others(fake: FakeSlurmrestd) -> None:
    fake.register("n1", cpus=4)
    fake.register("n2", cpus=4)
    rest = client(fake)
    mine = rest.submit_job(external("mine")).job_id
    rest.cancel_job(mine)
    assert placed(fake, mine)[0] == "CANCELLED" and fake.state_of("n1") == ["IDLE", "DYNAMIC_NORM"]
    rest.cancel_job(mine)  # already done
    rest.cancel_job(424242)  # never was
    theirs = fake.run_job("n2", 600)
    with pytest.raises(SlurmRestError, match="Access/permission denied"):
        rest.cancel_job(theirs)
    status, said = raw(fake, "DELETE", f"{RESTAPI_VERSION_2605}/jobs/", {"jobs": [str(mine), "424242", str(theirs)]})
    assert status == 200
    assert [(s["step_id"], s["error"]["code"]) for s in said["status"]] == [
        (str(mine), 2021),
        ("424242", 2017),
        (str(theirs), 2002),
    ]
    client(fake, "slurm").cancel_job(theirs)
    assert placed(fake, theirs)[0] == "CANCELLED" and fake.state_of("n2") == ["IDLE", "DYNAMIC_NORM"]
    fake.cancel(rest.submit_job(external("scancelled")).job_id)  # scancel, as an administrator would
    assert [j["job_state"] for j in fake.jobs_of(BRIDGE)] == [["CANCELLED"], ["CANCELLED"]]


def test_jobs_since_says_nothing_changed_until_a_job_changes(fake: FakeSlurmrestd) -> None:
    fake.register("n1", cpus=1)
    rest = client(fake)
    before = int(time.time())
    first = rest.submit_job(external("first")).job_id
    later = int(time.time()) + 1  # slurmctld: no change when its last change is before update_time - 1
    assert rest.jobs_since(later) is None
    status, said = raw(fake, "GET", f"{RESTAPI_VERSION_2605}/jobs?update_time={later}")
    assert status == 200 and said["jobs"] == []
    assert said["warnings"][0]["description"].startswith(f"No job changes since update_time[{later}]=")
    assert [j.id for j in rest.jobs_since(before) or []] == [first]  # the second of the change itself counts
    second = rest.submit_job(external("second")).job_id  # waits: n1 is full
    assert [(j.id, j.state) for j in rest.jobs_since(before) or []] == [(first, "RUNNING"), (second, "PENDING")]
    assert rest.jobs_since(int(time.time()) + 1) is None
    before = int(time.time())
    fake.cancel(first)  # the second starts
    changed = rest.jobs_since(before)
    assert changed is not None and [j.state for j in changed] == ["CANCELLED", "RUNNING"]


def test_a_preempted_job_runs_out_its_grace_time_then_frees_its_cpus(fake: FakeSlurmrestd) -> None:
    fake.register("n1", cpus=1)
    rest = client(fake)
    low = rest.submit_job(external("low")).job_id
    waiting = rest.submit_job(external("waiting")).job_id
    before = time.time()
    fake.preempt(low, 1)
    [going, still] = rest.jobs()
    assert going.state == "RUNNING" and going.preempt_time is not None and going.preempt_time >= int(before)
    assert going.end_time is not None and going.end_time - going.preempt_time <= 1
    assert still.state == "PENDING"
    with pytest.raises(ValueError, match="not RUNNING"):
        fake.preempt(waiting, 30)
    time.sleep(1.1)
    assert [(j.id, j.state) for j in rest.jobs()] == [(low, "PREEMPTED"), (waiting, "RUNNING")]
    fake.preempt(waiting, 0)  # no grace time: at once
    assert placed(fake, waiting)[0] == "PREEMPTED" and fake.state_of("n1") == ["IDLE", "DYNAMIC_NORM"]


def test_an_external_node_is_created_by_an_administrator_and_takes_jobs(fake: FakeSlurmrestd) -> None:
    rest, admin = client(fake), client(fake, "slurm")
    waiting = rest.submit_job(external("waiting", tasks=2))
    assert waiting.warnings  # no node yet
    conf = "NodeName=kwok-0 CPUs=4 RealMemory=4000 Feature=warden-bridge State=EXTERNAL"
    with pytest.raises(SlurmRestError, match="Invalid user id"):
        rest.create_node(conf)
    with pytest.raises(SlurmRestError, match="Invalid node state specified"):
        admin.create_node("NodeName=kwok-0 CPUs=4 State=IDLE")
    admin.create_node(conf)
    with pytest.raises(SlurmNodeExists):
        admin.create_node(conf)
    [node] = admin.nodes()
    assert (node.name, node.cpus, node.features, node.flags) == (
        "kwok-0",
        4,
        ("warden-bridge",),
        frozenset({"EXTERNAL", "DYNAMIC_NORM"}),
    )
    assert placed(fake, waiting.job_id) == ("RUNNING", [("kwok-0", 2)])
    assert node.state == "MIXED" and fake.state_of("kwok-0") == ["MIXED", "EXTERNAL", "DYNAMIC_NORM"]
    assert fake.actions == [Action("create", "kwok-0", conf)]
    admin.drain("kwok-0", "going")  # an external node drains as any node does, and stays external
    assert fake.state_of("kwok-0") == ["MIXED", "DRAIN", "EXTERNAL", "DYNAMIC_NORM"]


def test_the_v0042_job_list_still_serves_the_2411_record_of_a_users_job(fake: FakeSlurmrestd) -> None:
    fake.register("n1")
    held = fake.run_job("n1", 120)
    assert raw(fake, "GET", f"{RESTAPI_VERSION}/jobs")[1]["jobs"] == []  # PrivateData=jobs: root's job
    status, said = raw(fake, "GET", f"{RESTAPI_VERSION}/jobs", user="slurm")
    [record] = said["jobs"]
    assert status == 200 and said["meta"]["plugin"]["data_parser"] == "data_parser/v0.0.42"
    assert (record["job_id"], record["job_state"], record["nodes"], record["batch_host"]) == (
        held,
        ["RUNNING"],
        "n1",
        "n1",
    )
    assert record["end_time"]["number"] - record["start_time"]["number"] == 120
    assert record["job_resources"]["nodes"]["allocation"][0]["name"] == "n1"
    assert fake.job(held)["job_state"] == ["RUNNING"]  # and v0.0.44's is the 26.05 record
    assert client(fake, "slurm").jobs()[0].allocation == (("n1", 2),)  # the captured node's 2 CPUs
    fake.end_job(held)
    assert fake.state_of("n1") == ["IDLE", "DYNAMIC_NORM"]


def raw(fake: FakeSlurmrestd, method: str, path: str, body: Any = None, user: str = BRIDGE) -> tuple[int, Any]:
    """A request as slurmrestd's clients send it, the answer as it comes."""
    headers = {"X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": mint_token(b"k" * 32, user)}
    data = json.dumps(body).encode() if body is not None else None
    url = f"http://127.0.0.1:{fake.port}/ns/c/slurm/{path}"
    response = urllib3.request(method, url, body=data, headers=headers, retries=False)
    return response.status, json.loads(response.data)
