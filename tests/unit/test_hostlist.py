"""warden.slurm.model: Slurm hostlist expressions and the job list slurmrestd serves (data_parser v0.0.42).

fixtures/slurm/slurmrestd_jobs_running.json is ``GET /slurm/v0.0.42/jobs`` from Slurm 24.11.5's slurmrestd
(the dataplane tier), taken while a user's ``sbatch -t 2 --wrap 'sleep 30'`` ran.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from warden.slurm.model import HOSTLIST_LIMIT, Job, SlurmParseError, expand_hostlist, jobs_from_doc


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ("", []),
        ("  ", []),
        ("demo-worker-cpu-0", ["demo-worker-cpu-0"]),
        (
            "demo-worker-cpu-[0-2,5]",
            ["demo-worker-cpu-0", "demo-worker-cpu-1", "demo-worker-cpu-2", "demo-worker-cpu-5"],
        ),
        ("a-1,b-[3-4]", ["a-1", "b-3", "b-4"]),
        ("node[01-03]", ["node01", "node02", "node03"]),
        ("node[098-101]", ["node098", "node099", "node100", "node101"]),
        ("n[9-10]", ["n9", "n10"]),
        ("n[7]", ["n7"]),
        ("r[1-2]-n[0,3]", ["r1-n0", "r1-n3", "r2-n0", "r2-n3"]),
        ("gpu-[0-1]-ib", ["gpu-0-ib", "gpu-1-ib"]),
        ("a,b[1-2],c", ["a", "b1", "b2", "c"]),
    ],
)
def test_expand_hostlist(expr: str, names: list[str]) -> None:
    assert expand_hostlist(expr) == names


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        ("node[0-2", "unbalanced"),
        ("node0-2]", "unbalanced"),
        ("node]0[", "unbalanced"),
        ("node[[0-1]]", "nested"),
        ("node[]", "bad range"),
        ("node[a-b]", "bad range"),
        ("node[1-]", "bad range"),
        ("node[-1]", "bad range"),
        ("node[1,,2]", "bad range"),
        ("node[1-2-3]", "bad range"),
        ("node[5-3]", "backwards"),
        ("a,,b", "empty name"),
        ("a,", "empty name"),
        ("n[0-99999999]", "more than"),
        (f"a[1-{HOSTLIST_LIMIT // 2}]-b[1-3]", "more than"),
    ],
)
def test_malformed_hostlists_are_refused(expr: str, why: str) -> None:
    with pytest.raises(SlurmParseError, match=why):
        expand_hostlist(expr)


def test_real_capture_of_a_running_job() -> None:
    doc = json.loads((Path(__file__).parent / "fixtures" / "slurm" / "slurmrestd_jobs_running.json").read_text())
    [job] = jobs_from_doc(doc)
    start = doc["jobs"][0]["start_time"]["number"]
    partition, flags = doc["jobs"][0]["partition"], tuple(doc["jobs"][0]["flags"])
    assert job == Job(
        id=1, state="RUNNING", nodes=("dp-worker-cpu-0",), end_time=float(start + 120), partition=partition, cpus=1,
        name="wrap", flags=flags, allocation=(("dp-worker-cpu-0", 1),),
    )  # fmt: skip


def _job(job_id: Any = 7, **fields: Any) -> dict[str, Any]:
    """A job as slurmrestd v0.0.42 lists it (the fields jobs_from_doc reads, and a few it does not)."""
    job: dict[str, Any] = {
        "job_id": job_id,
        "name": "wrap",
        "user_name": "erin",
        "job_state": ["RUNNING"],
        "nodes": "demo-worker-cpu-[0-1]",
        "start_time": {"set": True, "infinite": False, "number": 1_700_000_000},
        "end_time": {"set": True, "infinite": False, "number": 1_700_000_120},
        "time_limit": {"set": True, "infinite": False, "number": 2},
    }
    job.update(fields)
    return job


def _doc(*jobs: Any, **extra: Any) -> dict[str, Any]:
    return {"jobs": list(jobs), "last_backfill": {}, "errors": [], "warnings": [], **extra}


def test_running_pending_and_completing_jobs() -> None:
    running = _job(7)
    pending = _job(8, job_state=["PENDING"], nodes="", end_time={"set": True, "infinite": False, "number": 0})
    completing = _job(9, job_state=["COMPLETED", "COMPLETING"], nodes="demo-worker-gpu-0")
    unlimited = _job(10, end_time={"set": True, "infinite": True, "number": 0}, nodes="n1")
    jobs = jobs_from_doc(_doc(running, pending, completing, unlimited))
    assert {(j.name, j.user) for j in jobs} == {("wrap", "erin")}
    assert [replace(j, name="", user="") for j in jobs] == [
        Job(id=7, state="RUNNING", nodes=("demo-worker-cpu-0", "demo-worker-cpu-1"), end_time=1_700_000_120.0),
        Job(id=8, state="PENDING", nodes=(), end_time=None),
        Job(id=9, state="COMPLETING", nodes=("demo-worker-gpu-0",), end_time=1_700_000_120.0),
        Job(id=10, state="RUNNING", nodes=("n1",), end_time=None),
    ]
    assert jobs_from_doc(_doc()) == []


def test_allocated_node_names_are_preferred_to_the_hostlist() -> None:
    resources = {
        "select_type": ["CR_CPU"],
        "nodes": {
            "count": 2,
            "list": "n[1-2]",
            "allocation": [{"index": 0, "name": "n2", "cpus": {"count": 1}}, {"index": 1, "name": "n1"}],
        },
    }
    [job] = jobs_from_doc(_doc(_job(nodes="n[1-2]", job_resources=resources)))
    assert job.nodes == ("n2", "n1")
    # no allocation (a pending job has none): the hostlist it is given
    [job] = jobs_from_doc(_doc(_job(nodes="n[3-4]", job_resources={"nodes": {"allocation": []}})))
    assert job.nodes == ("n3", "n4")


def test_end_time_unset_or_plain() -> None:
    unset = _job(end_time={"set": False, "infinite": False, "number": 1_700_000_120})
    plain = _job(8, end_time=1_700_000_060)  # data_parser before v0.0.40
    missing = _job(9)
    del missing["end_time"]
    assert [j.end_time for j in jobs_from_doc(_doc(unset, plain, missing))] == [None, 1_700_000_060.0, None]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"nodes": []}, "no 'jobs' list"),
        ([], "no 'jobs' list"),
        (_doc(errors=[{"error": "Unable to query jobs"}]), "Unable to query jobs"),
        (_doc("not a job"), "not an object"),
        (_doc(_job(job_id="7")), "numeric job_id"),
        (_doc(_job(job_id=True)), "numeric job_id"),
        (_doc(_job(job_state=[])), "job 7: no job_state"),
        (_doc(_job(nodes="n[1-")), "job 7: hostlist 'n\\[1-': unbalanced"),
        (_doc(_job(nodes=["n1"])), "job 7: nodes is not a hostlist string"),
        (_doc(_job(end_time={"set": True, "number": "soon"})), "job 7: end_time is not a number"),
        (_doc(_job(job_resources={"nodes": {"allocation": [{"index": 0}]}})), "job 7: an allocated node without"),
    ],
)
def test_malformed_job_documents_are_refused(doc: Any, message: str) -> None:
    with pytest.raises(SlurmParseError, match=message):
        jobs_from_doc(doc)
