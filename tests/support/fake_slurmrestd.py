"""A stand-in for one SlurmCluster's slurmrestd, for the operator's Slurm sync and the bridge in the
integration tier.

It stands in because that tier has no Slurm daemons: its pods run on kwok nodes, which run nothing, so
the cluster's real slurmrestd (and the slurmctld behind it) never answers there. The real one answers
in the dataplane tier (tests/dataplane). This one is a threaded HTTP server on 127.0.0.1 (a free port)
that serves what ``warden.slurm.rest.SlurmRest`` asks of slurmrestd for the sync and for the bridge, in
slurmrestd's own JSON, and remembers what was done to Slurm's nodes and jobs, so that later reads
reflect it:

- ``GET  /slurm/v0.0.42/nodes``: the registered nodes. Each node record is a copy of a node record of
  ``tests/unit/fixtures/slurm/slurmrestd_nodes_three.json`` (Slurm 24.11.5's slurmrestd, three dynamic
  workers: one MIXED, one drained by a person with reason "hands off", one GPU) renamed, with the
  state, reason and CPU count a test gives it; the document around them is that capture's.
- ``GET  /slurm/v0.0.42/jobs``: the jobs, each a copy of the first job of
  ``tests/unit/fixtures/slurm/slurmrestd_jobs_four.json`` (same slurmrestd; a RUNNING ``sbatch``), with
  its id, state, nodes (everywhere the capture names them), times and, for a submitted job, what was
  submitted; the document around them is that capture's.
- ``GET  /slurm/v0.0.42/job/<id>``: that job; a job it does not hold (the sync's absent-job lookup)
  is answered "Invalid job id specified".
- ``POST /slurm/v0.0.42/node/<name>``: ``{"state": ["DRAIN"], "reason": ...}`` sets the DRAIN flag and
  the reason, ``{"state": ["RESUME"]}`` clears it (Slurm keeps the reason text); both recorded.
- ``DELETE /slurm/v0.0.42/node/<name>``: the node record goes; recorded.
- ``POST /slurm/v0.0.42/node/<name>`` with ``features`` (and ``features_act``) sets the node's feature
  lists; recorded as ``place``.
- ``/slurm/v0.0.44/...`` (``RESTAPI_VERSION_TOPOLOGY``, what the sync speaks to a cluster with a
  topology, and ``RESTAPI_VERSION_2605``, what the bridge speaks): the same, and node records carry
  ``topology`` (Slurm 26.05's v0.0.44 node record is v0.0.42's with that field and two about TLS
  certificates, which the sync does not read), which ``topology_str`` in a node update sets. v0.0.42
  refuses ``topology_str``, as it has no such field. Job records are copies of the first job of
  ``slurmrestd_v0044_jobs_external.json`` (Slurm 26.05.5: a RUNNING external job on two nodes; the
  captures are described in ``slurmrestd_v0044.md`` beside it), filled in the same way.

What the bridge does, at v0.0.44, as Slurm 26.05.5 answered it in those captures:

- ``POST job/submit`` takes an external job (``"flags": ["EXTERNAL_JOB"]``, no ``script``) as the
  user of ``X-SLURM-USER-NAME``, PENDING, and answers its ``job_id``. One with a ``script`` is refused
  (HTTP 500, "Invalid configuration for external job"). When one task needs more CPUs than any
  registered node has, the answer warns "Requested partition configuration not available now" (twice,
  as slurmrestd does) and the job stays PENDING with reason ``PartitionConfig``. ``partitions`` (None:
  any) names the partitions there are; another is refused (HTTP 422, "Invalid partition name
  specified"). ``accounts`` (None: any) names the accounts the submitting user has an association in
  (accounting enforced); a job in another, or in none, is refused (HTTP 422, "Invalid account or
  account/partition combination specified", ESLURM_INVALID_ACCOUNT). Jobs without ``EXTERNAL_JOB`` are
  not taken (this stand-in runs no batch scripts). At v0.0.42 ``EXTERNAL_JOB`` is an unknown flag, refused
  with the data_parser's words (the real slurmrestd drops the flag and submits the job without it).
- ``schedule()``, after every submit, cancel, end, preemption and node change: the PENDING jobs in id
  order, each placed first-fit: ``tasks`` tasks of ``cpus_per_task`` CPUs on the registered nodes'
  free CPUs (``tasks_per_node`` at most per node, ``maximum_nodes`` nodes at most), all or nothing,
  skipping nodes that are DOWN, drained or not responding. A placed job is RUNNING with
  ``job_resources.nodes.allocation`` (``name``, ``cpus.count`` per node), ``nodes``, start and end time
  (``time_limit`` minutes, else ``DEFAULT_TIME_LIMIT_MIN``), never on its ``excluded_nodes`` (a job that
  excludes every node is refused, HTTP 422, "Requested node configuration is not available", as Slurm
  26.05 refuses one excluding every node of its partition); one that does not fit waits with reason
  ``Resources``. A ``run_job`` job holds its whole node; a job that ends frees its CPUs. Partitions,
  memory, priorities and time limits are not enforced.
- ``DELETE job/<id>`` and ``DELETE jobs/`` (``{"jobs": ["5", "7"]}``) cancel (CANCELLED, CPUs freed).
  As slurmrestd does, the answer is HTTP 200 with a ``status`` entry for each job it did not cancel:
  "Invalid job id specified" (2017), "Job/step already completing or completed" (2021), and "Access/
  permission denied" (2002) for another user's job asked by a user who is not ``root`` or ``slurm``
  (Warden's guarded slurmctld; an unguarded one freezes).
- ``GET jobs?update_time=T``: no jobs and the warning "No job changes since update_time[T]=..." when no
  job changed since second ``T - 1`` (slurmctld's comparison), every job otherwise. With
  ``private_jobs`` (Warden's ``PrivateData=jobs``) a user other than ``root`` and ``slurm`` sees only
  their own jobs.
- ``POST new/node/`` (v0.0.44 only) with ``{"node_conf": "NodeName=x CPUs=4 RealMemory=4000
  State=EXTERNAL ..."}``: an external node registers, a copy of the first node of
  ``slurmrestd_v0044_nodes_external.json``; recorded as ``create``. Another state, an existing name,
  and a user who is not ``root`` or ``slurm`` are refused with slurmctld's words (HTTP 422).

A test plays Slurm's own side with ``register``/``unregister``/``set_state`` (nodes), ``run_job``/
``end_job`` (a user's job that holds a whole node), ``cancel`` (scancel), ``preempt`` (slurmctld
preempting a RUNNING job: ``preempt_time`` now, ``end_time`` after the grace time, then PREEMPTED), and
reads jobs with ``job`` and ``jobs_of`` (their v0.0.44 records).

An unknown node is "Invalid node name specified" (error 2017); the error documents have slurmrestd's
shape (``{"errors": [{"description", "error"}], ...}`` with HTTP 500), as in tests/unit/test_slurmrest.py.

Every request must carry ``X-SLURM-USER-NAME`` and an ``X-SLURM-USER-TOKEN`` that is an HS256 JWT; once
the test gives it the cluster's JWT key (``jwt_key``), the token's signature and expiry are checked
too. A request that fails that is answered 401 "Authentication failure", as slurmrestd does, and noted
in ``auth_failures``.

``silent = True`` plays a slurmctld that does not answer: every read and update is answered with
slurmrestd's words for a request to slurmctld that timed out after its MessageTimeout ("Socket timed
out on send/recv operation", one of ``warden.slurm.rest.CONTROLLER_SILENT``), at once rather than
after ten seconds.

The server answers under a path prefix ``/<namespace>/<cluster>`` (``url_template`` is what to pass as
``warden-operator --slurmrestd-url``): a request for any other cluster is answered 404 and noted in
``strays``, which shows that the operator filled the template in.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
import math
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.support.jsonserver import JsonServer
from warden.naming import RESTAPI_VERSION, RESTAPI_VERSION_2605, RESTAPI_VERSION_TOPOLOGY
from warden.slurm.rest import CONTROLLER_SILENT

FIXTURES = Path(__file__).resolve().parents[1] / "unit" / "fixtures" / "slurm"
NODES_CAPTURE = FIXTURES / "slurmrestd_nodes_three.json"
JOBS_CAPTURE = FIXTURES / "slurmrestd_jobs_four.json"
JOBS_CAPTURE_2605 = FIXTURES / "slurmrestd_v0044_jobs_external.json"
UNCHANGED_CAPTURE_2605 = FIXTURES / "slurmrestd_v0044_jobs_unchanged.json"
EXTERNAL_NODES_CAPTURE_2605 = FIXTURES / "slurmrestd_v0044_nodes_external.json"
#: the captured node record a node is copied from unless a test names another
TEMPLATE_NODE = "dp-worker-cpu-0"
#: users who see and cancel every job and create nodes (root and SlurmUser)
ADMINS = frozenset({"root", "slurm"})
#: minutes a started job's end time lies ahead when it was submitted without a time limit
DEFAULT_TIME_LIMIT_MIN = 60
#: node state words that keep the scheduler off a node
UNUSABLE = frozenset({"DOWN", "DRAIN", "FUTURE", "ERROR", "NOT_RESPONDING", "POWERED_DOWN"})
#: the end of a job's life: its CPUs are free
ENDED = frozenset({"CANCELLED", "COMPLETED", "PREEMPTED", "FAILED", "TIMEOUT", "NODE_FAIL"})
PARTITION_CONFIG = "Requested partition configuration not available now"
SUBMIT_SOURCE = "slurm_submit_batch_job()"
NON_ZERO = "Job submission resulted in non-zero return code: "


@dataclass(frozen=True)
class Action:
    """What was done to a Slurm node: ``drain`` (with its reason), ``resume``, ``delete``, ``place``,
    ``create`` (with its node line)."""

    verb: str
    node: str
    reason: str = ""  # a drain's; a place's: what it set (``features=a,b topology=default:b1``); a create's line


@dataclass
class _Job:
    """A job as this slurmctld holds it; served as a copy of a captured record (``_record``)."""

    id: int
    user: str
    name: str
    state: str
    submit_time: float
    partition: str = ""
    account: str = ""
    comment: str = ""
    flags: list[str] | None = None  # None: the captured record's
    tasks: int = 1
    cpus_per_task: int = 1
    tasks_per_node: int | None = None
    max_nodes: int | None = None
    memory_per_cpu: int | None = None  # MB
    time_limit: int | None = None  # minutes
    #: nodes it may not have (``excluded_nodes``)
    excluded: tuple[str, ...] = ()
    reason: str = "None"
    #: (node, CPUs) it holds or held, in order; its CPUs count only while it is RUNNING
    allocation: list[tuple[str, int]] = field(default_factory=list)
    start_time: float = 0.0
    end_time: float = 0.0
    preempt_time: float = 0.0


def _unb64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _number(value: float | int) -> dict[str, Any]:
    return {"set": True, "infinite": False, "number": int(value)}


def _count(value: Any, default: int | None) -> int | None:
    """A count of a job description: ``4`` or ``{"set": true, "number": 4}``."""
    if isinstance(value, dict):
        value = value.get("number") if value.get("set", True) and not value.get("infinite") else None
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else default


class FakeSlurmrestd:
    def __init__(self, namespace: str, cluster: str) -> None:
        self.namespace = namespace
        self.cluster = cluster
        self.prefix = f"/{namespace}/{cluster}/slurm/"
        nodes_doc = json.loads(NODES_CAPTURE.read_text())
        jobs_doc = json.loads(JOBS_CAPTURE.read_text())
        jobs_doc_2605 = json.loads(JOBS_CAPTURE_2605.read_text())
        self._captured_nodes = {n["name"]: n for n in nodes_doc["nodes"]}
        self._captured_external_node = json.loads(EXTERNAL_NODES_CAPTURE_2605.read_text())["nodes"][0]
        self._captured_jobs = {RESTAPI_VERSION: jobs_doc["jobs"][0], RESTAPI_VERSION_2605: jobs_doc_2605["jobs"][0]}
        self._nodes_doc = {k: v for k, v in nodes_doc.items() if k != "nodes"}
        self._jobs_docs = {
            RESTAPI_VERSION: {k: v for k, v in jobs_doc.items() if k != "jobs"},
            RESTAPI_VERSION_2605: {k: v for k, v in jobs_doc_2605.items() if k != "jobs"},
        }
        self._unchanged_doc = json.loads(UNCHANGED_CAPTURE_2605.read_text())
        self._meta = nodes_doc["meta"]
        self._meta_2605 = jobs_doc_2605["meta"]
        self._lock = threading.Lock()
        self.nodes: dict[str, dict[str, Any]] = {}  # name -> node record, as served
        self._jobs: dict[int, _Job] = {}
        self._next_job = 100
        #: when a job last changed (submitted, started, ended, preempted): what ``update_time`` is held to
        self._jobs_changed = time.time()
        #: what was done to Slurm's nodes, in order
        self.actions: list[Action] = []
        #: requests served, by (method, path below the API prefix), e.g. ("GET", "nodes")
        self.served: Counter[tuple[str, str]] = Counter()
        #: requests served, by the API version they asked for
        self.versions: Counter[str] = Counter()
        #: each node's place in the topology (served from v0.0.44 on), by node
        self.topology: dict[str, str] = {}
        #: requests whose token was checked against ``jwt_key`` and held
        self.verified = 0
        self.auth_failures: list[str] = []
        #: paths asked for outside this cluster's prefix
        self.strays: list[str] = []
        self.silent = False
        #: the cluster's JWT key (the Secret ``<cluster>-jwt-key``); None: tokens are checked for shape only
        self.jwt_key: bytes | None = None
        #: the partitions a submit may name; None: any
        self.partitions: set[str] | None = None
        #: the accounts a submit may name (associations enforced); None: any, or none
        self.accounts: set[str] | None = None
        #: PrivateData=jobs: users other than ADMINS list only their own jobs
        self.private_jobs = True
        self._server: JsonServer | None = None

    # --- the server ----------------------------------------------------------------------------
    def start(self) -> FakeSlurmrestd:
        self._server = JsonServer(self._answer, name="fake-slurmrestd").start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> FakeSlurmrestd:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        return self._server.port

    @property
    def url_template(self) -> str:
        """For ``warden-operator --slurmrestd-url``."""
        return f"http://127.0.0.1:{self.port}/{{namespace}}/{{name}}"

    # --- what a test sets: Slurm's side ------------------------------------------------------------
    def register(
        self,
        name: str,
        state: tuple[str, ...] = ("IDLE",),
        reason: str = "",
        like: str = TEMPLATE_NODE,
        cpus: int | None = None,
    ) -> None:
        """A dynamic node registers (as a worker pod's slurmd would): a copy of captured node ``like``
        named ``name``, in ``state`` (base state and flags) with ``reason``, with ``cpus`` CPUs (None:
        the captured node's)."""
        record = copy.deepcopy(self._captured_nodes[like])
        record.update(name=name, hostname=name, reason="", reason_set_by_user="")
        if cpus is not None:
            record.update(cpus=cpus, effective_cpus=cpus)
        with self._lock:
            self.nodes[name] = record
            self.topology.pop(name, None)  # registering afresh, as slurmd -Z does: no place given yet
            self._set_state(record, list(state), reason)
            self._schedule()

    def unregister(self, name: str) -> None:
        """A node's record goes, as a worker's slurmd deletes its own when its pod stops."""
        with self._lock:
            self.nodes.pop(name, None)
            self.topology.pop(name, None)
            self._schedule()

    def set_state(self, name: str, *state: str, reason: str | None = None) -> None:
        """What a person's ``scontrol update`` or slurmctld itself would change: the node's state words
        (base state first), and its reason when given."""
        with self._lock:
            self._set_state(self.nodes[name], list(state), reason)
            self._schedule()

    def run_job(self, node: str, seconds: float) -> int:
        """A user's job starts on ``node`` with a time limit of ``seconds`` (its end time is now + that);
        it holds every CPU of the node (ALLOCATED) while it runs."""
        now = time.time()
        captured = self._captured_jobs[RESTAPI_VERSION]
        with self._lock:
            cpus = int(self.nodes[node]["cpus"]) if node in self.nodes else 1
            job = self._new_job(str(captured["user_name"]), str(captured["name"]), now)
            job.partition = str(captured["partition"])
            job.cpus_per_task = cpus
            job.time_limit = math.ceil(seconds / 60)
            self._start(job, [(node, cpus)], now)
            job.end_time = now + seconds
        return job.id

    def end_job(self, job_id: int) -> None:
        """The job completes; its CPUs are free (its node IDLE when no other job runs there, its flags,
        DRAIN included, kept) and waiting jobs may start."""
        with self._lock:
            self._end(self._jobs[job_id], "COMPLETED", time.time())
            self._schedule()

    def cancel(self, job_id: int) -> None:
        """``scancel``: a PENDING or RUNNING job is CANCELLED; its CPUs are free."""
        with self._lock:
            job = self._jobs[job_id]
            if job.state not in ENDED:
                self._end(job, "CANCELLED", time.time())
                self._schedule()

    def preempt(self, job_id: int, grace_s: float) -> None:
        """slurmctld preempts a RUNNING job (PreemptMode=CANCEL): ``preempt_time`` is now and
        ``end_time`` now + ``grace_s`` (the GraceTime); once that has passed the job is PREEMPTED and its
        CPUs free (at once when ``grace_s`` is 0)."""
        now = time.time()
        with self._lock:
            job = self._jobs[job_id]
            if job.state != "RUNNING":
                raise ValueError(f"job {job_id} is {job.state}, not RUNNING")
            job.preempt_time, job.end_time = now, now + grace_s
            self._touch()
            self._expire()

    # --- what a test reads -----------------------------------------------------------------------
    def actions_on(self, node: str) -> list[Action]:
        with self._lock:
            return [a for a in self.actions if a.node == node]

    def features_of(self, name: str) -> list[str] | None:
        with self._lock:
            record = self.nodes.get(name)
            return list(record["features"]) if record is not None else None

    def state_of(self, name: str) -> list[str] | None:
        """The node's state words as served; None once it is deleted."""
        with self._lock:
            record = self.nodes.get(name)
            return list(record["state"]) if record is not None else None

    def reads(self) -> int:
        """Node list reads served so far (one per sync round that reached Slurm)."""
        with self._lock:
            return self.served[("GET", "nodes")]

    def job(self, job_id: int) -> dict[str, Any]:
        """The job's record as served at v0.0.44 (KeyError when there is no such job)."""
        with self._lock:
            self._expire()
            return self._record(self._jobs[job_id], RESTAPI_VERSION_2605)

    def jobs_of(self, user: str) -> list[dict[str, Any]]:
        """The v0.0.44 records of ``user``'s jobs, in id order."""
        with self._lock:
            self._expire()
            return [
                self._record(j, RESTAPI_VERSION_2605) for j in sorted(self._jobs.values(), key=_id) if j.user == user
            ]

    # --- jobs: the scheduler ----------------------------------------------------------------------
    def schedule(self) -> None:
        """Place the PENDING jobs that fit now (what every change does by itself)."""
        with self._lock:
            self._schedule()

    def _new_job(self, user: str, name: str, now: float) -> _Job:
        job = _Job(id=self._next_job, user=user, name=name, state="PENDING", submit_time=now)
        self._next_job += 1
        self._jobs[job.id] = job
        self._touch()
        return job

    def _touch(self) -> None:
        self._jobs_changed = time.time()

    def _used(self, node: str) -> int:
        return sum(c for j in self._jobs.values() if j.state == "RUNNING" for n, c in j.allocation if n == node)

    def _free(self) -> dict[str, int]:
        """Free CPUs of each node the scheduler may use, in registration order."""
        free = {}
        for name, record in self.nodes.items():
            if record["state"][0] in ("DOWN", "ERROR", "FUTURE") or UNUSABLE & set(record["state"]):
                continue
            free[name] = max(0, int(record["cpus"]) - self._used(name))
        return free

    def _fit(self, job: _Job, free: dict[str, int], order: list[str]) -> list[tuple[str, int]] | None:
        left, placed = job.tasks, []
        for name in order:
            fits = free[name] // job.cpus_per_task
            if job.tasks_per_node is not None:
                fits = min(fits, job.tasks_per_node)
            n = min(fits, left)
            if n <= 0:
                continue
            placed.append((name, n * job.cpus_per_task))
            left -= n
            if left == 0 or (job.max_nodes is not None and len(placed) >= job.max_nodes):
                break
        return placed if left == 0 else None

    def _schedule(self) -> None:
        self._expire(schedule=False)
        biggest = max((int(r["cpus"]) for r in self.nodes.values()), default=0)
        for job in sorted(self._jobs.values(), key=_id):
            if job.state != "PENDING":
                continue
            if job.cpus_per_task > biggest:
                self._wait(job, "PartitionConfig")
                continue
            free = {n: c for n, c in self._free().items() if n not in job.excluded}
            # first fit in registration order; with a node limit, the emptiest nodes first if that fails
            placed = self._fit(job, free, list(free)) or self._fit(job, free, sorted(free, key=lambda n: -free[n]))
            if placed is None:
                self._wait(job, "Resources")
            else:
                self._start(job, placed, time.time())

    def _wait(self, job: _Job, reason: str) -> None:
        if job.reason != reason:
            job.reason = reason
            self._touch()

    def _start(self, job: _Job, placed: list[tuple[str, int]], now: float) -> None:
        job.state, job.reason, job.allocation = "RUNNING", "None", placed
        job.start_time = now
        job.end_time = now + 60 * (job.time_limit or DEFAULT_TIME_LIMIT_MIN)
        self._touch()
        for name, _ in placed:
            self._refresh(name)

    def _end(self, job: _Job, state: str, now: float) -> None:
        job.state, job.end_time = state, now
        if state == "PREEMPTED":
            job.preempt_time = now  # as slurmctld shows it once the grace time is over
        self._touch()
        for name, _ in job.allocation:
            self._refresh(name)

    def _expire(self, schedule: bool = True) -> None:
        """Preempted jobs whose grace time is over are PREEMPTED."""
        now = time.time()
        ended = [j for j in self._jobs.values() if j.state == "RUNNING" and j.preempt_time and j.end_time <= now]
        for job in ended:
            self._end(job, "PREEMPTED", now)
        if ended and schedule:
            self._schedule()

    def _refresh(self, name: str) -> None:
        """A node's base state and CPU counts after a job started or ended there: IDLE when no job runs
        there, else MIXED or ALLOCATED; its flags stay."""
        record = self.nodes.get(name)
        if record is None:
            return
        used, cpus = self._used(name), int(record["cpus"])
        base = "IDLE" if used == 0 else "ALLOCATED" if used >= cpus else "MIXED"
        self._set_state(record, [base, *record["state"][1:]], None)
        record["alloc_cpus"] = min(used, cpus)
        record["alloc_idle_cpus"] = cpus - record["alloc_cpus"]

    # --- jobs: the records served -------------------------------------------------------------------
    def _record(self, job: _Job, version: str) -> dict[str, Any]:
        """A copy of the version's captured job record, with what this job is."""
        captured = self._captured_jobs[RESTAPI_VERSION if version == RESTAPI_VERSION else RESTAPI_VERSION_2605]
        record: dict[str, Any] = copy.deepcopy(captured)
        names = [n for n, _ in job.allocation]
        cpus = job.tasks * job.cpus_per_task
        record.update(
            job_id=job.id,
            name=job.name,
            user_name=job.user,
            partition=job.partition,
            account=job.account,
            job_state=[job.state],
            state_reason=job.reason,
            nodes=",".join(names),
            excluded_nodes=",".join(job.excluded),
            batch_host=names[0] if names else "",
            submit_time=_number(job.submit_time),
            start_time=_number(job.start_time),
            end_time=_number(job.end_time),
            preempt_time=_number(job.preempt_time),
            tasks=_number(job.tasks),
            cpus_per_task=_number(job.cpus_per_task),
            cpus=_number(cpus),
            node_count=_number(len(names) or 1),
            job_resources=self._resources(captured, job) if job.allocation else None,
        )
        if job.flags is not None:
            record.update(comment=job.comment, flags=list(job.flags))
        if job.time_limit is not None:
            record["time_limit"] = _number(job.time_limit)
        if job.memory_per_cpu is not None:
            record["memory_per_cpu"] = _number(job.memory_per_cpu)
        if job.max_nodes is not None:
            record["max_nodes"] = _number(job.max_nodes)
        if isinstance(record.get("step_id"), dict) and "job_id" in record["step_id"]:
            record["step_id"]["job_id"] = _number(job.id)
        return record

    def _resources(self, captured: dict[str, Any], job: _Job) -> dict[str, Any]:
        resources: dict[str, Any] = copy.deepcopy(captured["job_resources"])
        entry = resources["nodes"]["allocation"][0]
        allocation = []
        for i, (name, cpus) in enumerate(job.allocation):
            a = copy.deepcopy(entry)
            a.update(index=i, name=name, cpus={"count": cpus, "used": 0})
            if job.memory_per_cpu is not None:
                a["memory"] = {"used": 0, "allocated": job.memory_per_cpu * cpus}
            allocation.append(a)
        names = ",".join(n for n, _ in job.allocation)
        resources["nodes"].update(count=len(job.allocation), list=names, allocation=allocation)
        resources["cpus"] = sum(c for _, c in job.allocation)
        return resources

    def _jobs_answer(self, version: str, user: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        since = query.get("update_time", [""])[0]
        if since.isdigit() and int(since) - 1 >= int(self._jobs_changed):
            said = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(int(since)))
            warning = {"description": f"No job changes since update_time[{since}]={said}", "source": "op_handler_jobs"}
            return 200, {**self._unchanged_doc, "jobs": [], "warnings": [warning]}
        visible = [
            j for j in sorted(self._jobs.values(), key=_id) if not self.private_jobs or user in ADMINS or j.user == user
        ]
        doc = {**self._jobs_docs[self._job_version(version)], "last_update": _number(time.time())}
        return 200, {"jobs": [self._record(j, version) for j in visible], **doc}

    @staticmethod
    def _job_version(version: str) -> str:
        return RESTAPI_VERSION if version == RESTAPI_VERSION else RESTAPI_VERSION_2605

    def _submit(self, version: str, user: str, body: dict[str, Any]) -> tuple[int, Any]:
        desc = body.get("job")
        if not isinstance(desc, dict):
            return self._error(400, "no job description ('job') in the request", meta=self._meta_2605)
        flags = [str(f) for f in desc.get("flags") or []]
        if "EXTERNAL_JOB" in flags and version == RESTAPI_VERSION:
            i = flags.index("EXTERNAL_JOB")
            return self._error(
                500, 'Unknown flag "EXTERNAL_JOB"', "Data parser unable to parse invalid flag", 9207,
                source=f"#/job/flags[{i}]/",
            )  # fmt: skip
        if "EXTERNAL_JOB" not in flags:
            return self._error(400, "the stand-in slurmrestd takes only external jobs (flags: EXTERNAL_JOB)")
        if desc.get("script"):
            return self._submit_refused(500, "Invalid configuration for external job", 2189)
        partition = str(desc.get("partition") or "")
        if self.partitions is not None and partition not in self.partitions:
            return self._submit_refused(422, "Invalid partition name specified", 2000)
        account = str(desc.get("account") or "")
        if self.accounts is not None and account not in self.accounts:
            return self._submit_refused(422, "Invalid account or account/partition combination specified", 2045)
        excluded = desc.get("excluded_nodes") or []
        excluded = excluded.split(",") if isinstance(excluded, str) else [str(n) for n in excluded]
        if self.nodes and set(self.nodes) <= set(excluded):  # every node excluded: Slurm refuses at once
            return self._submit_refused(422, "Requested node configuration is not available", 2014)
        job = self._new_job(user, str(desc.get("name") or ""), time.time())
        job.partition, job.comment, job.flags = partition, str(desc.get("comment") or ""), flags
        job.account = account
        job.tasks = _count(desc.get("tasks"), 1) or 1
        job.cpus_per_task = _count(desc.get("cpus_per_task"), 1) or 1
        job.tasks_per_node = _count(desc.get("tasks_per_node"), None)
        job.max_nodes = _count(desc.get("maximum_nodes"), None)
        job.memory_per_cpu = _count(desc.get("memory_per_cpu"), None)
        job.time_limit = _count(desc.get("time_limit"), None)
        job.excluded = tuple(excluded)
        warnings = []
        if job.cpus_per_task > max((int(r["cpus"]) for r in self.nodes.values()), default=0):
            warnings = [
                {"description": f"{NON_ZERO}{PARTITION_CONFIG}", "source": SUBMIT_SOURCE},
                {"description": PARTITION_CONFIG, "source": SUBMIT_SOURCE},
            ]
        self._schedule()
        answer = {"job_id": job.id, "step_id": "batch", "job_submit_user_msg": ""}
        return 200, {**answer, "meta": self._meta_2605, "errors": [], "warnings": warnings}

    def _submit_refused(self, status: int, error: str, number: int) -> tuple[int, Any]:
        return self._error(status, "Batch job submission failed", error, number, source=SUBMIT_SOURCE)

    def _cancel(self, user: str, ids: list[str]) -> tuple[int, Any]:
        """Cancel each job; the answer lists those not cancelled, as slurmrestd does."""
        now, status = time.time(), []
        for raw in ids:
            job = self._jobs.get(int(raw)) if raw.isdigit() else None
            if job is None:
                status.append(_kill_status(raw, None, 2017, "Invalid job id specified"))
            elif job.state in ENDED:
                status.append(_kill_status(raw, job.id, 2021, "Job/step already completing or completed"))
            elif user not in ADMINS and job.user != user:
                status.append(_kill_status(raw, job.id, 2002, "Access/permission denied"))
            else:
                self._end(job, "CANCELLED", now)
        self._schedule()
        return 200, {"status": status, "meta": self._meta_2605, "errors": [], "warnings": []}

    def _create_node(self, user: str, body: dict[str, Any]) -> tuple[int, Any]:
        conf = str(body.get("node_conf") or "")
        said = {}
        for word in conf.split():
            key, _, value = word.partition("=")
            said[key.lower()] = value
        name = said.get("nodename", "")
        if user not in ADMINS:
            return self._node_refused("Invalid user id", 2010)
        if said.get("state", "").upper() != "EXTERNAL":
            if said.get("state", "").upper() in ("FUTURE", "CLOUD"):
                return self._error(400, "the stand-in slurmrestd creates only State=EXTERNAL nodes")
            return self._node_refused("Invalid node state specified", 2028)
        if not name:
            return self._error(400, f"no NodeName in {conf!r}")
        if name in self.nodes:
            return self._node_refused("Node already exists in the node table", 2168)
        record = copy.deepcopy(self._captured_external_node)
        cpus = int(said.get("cpus", record["cpus"]))
        features = [f for f in said.get("feature", said.get("features", "")).split(",") if f]
        record.update(
            name=name,
            hostname=name,
            address=said.get("nodeaddr", name),
            cpus=cpus,
            effective_cpus=cpus,
            real_memory=int(said.get("realmemory", record["real_memory"])),
            features=features,
            active_features=list(features),
            gres=said.get("gres", ""),
            partitions=[],
            state=["IDLE", "EXTERNAL", "DYNAMIC_NORM"],
        )
        self.nodes[name] = record
        self._refresh(name)
        self.actions.append(Action("create", name, conf))
        self._schedule()
        return 200, {"meta": self._meta_2605, "errors": [], "warnings": []}

    def _node_refused(self, error: str, number: int) -> tuple[int, Any]:
        return self._error(422, "Failure to create node", error, number, source="_create_node", meta=self._meta_2605)

    # --- internals --------------------------------------------------------------------------------
    def _set_state(self, record: dict[str, Any], state: list[str], reason: str | None, by: str = "root") -> None:
        # a dynamic node stays one, an external node external
        kept = [w for w in record["state"] if w.startswith("DYNAMIC") or w == "EXTERNAL"]
        record["state"] = [*state, *[f for f in kept if f not in state]]
        if reason is not None:
            record["reason"] = reason
            record["reason_set_by_user"] = by if reason else ""
            record["reason_changed_at"] = _number(time.time() if reason else 0)
        busy = record["state"][0] in ("ALLOCATED", "MIXED")
        record["alloc_cpus"] = record["cpus"] if busy else 0
        record["alloc_idle_cpus"] = 0 if busy else record["cpus"]

    def _error(
        self,
        status: int,
        description: str,
        error: str = "",
        number: int | None = None,
        source: str = "",
        meta: dict[str, Any] | None = None,
    ) -> tuple[int, Any]:
        e: dict[str, Any] = {"description": description}
        if number is not None:
            e["error_number"] = number
        if error:
            e["error"] = error
        if source:
            e["source"] = source
        return status, {"meta": meta or self._meta, "errors": [e], "warnings": []}

    def _authenticate(self, headers: dict[str, str]) -> str | None:
        """Why the request is refused, or None."""
        lower = {k.lower(): v for k, v in headers.items()}
        user, token = lower.get("x-slurm-user-name"), lower.get("x-slurm-user-token")
        if not user or not token:
            return "no X-SLURM-USER-NAME or X-SLURM-USER-TOKEN header"
        parts = token.split(".")
        if len(parts) != 3:
            return "the token is no JWT"
        try:
            header, claims = json.loads(_unb64(parts[0])), json.loads(_unb64(parts[1]))
        except ValueError:
            return "the token's header or claims are no JSON"
        if header.get("alg") != "HS256" or claims.get("sun") != user:
            return f"token {header}/{claims} is not HS256 for user {user}"
        if self.jwt_key is not None:
            want = hmac.new(self.jwt_key, f"{parts[0]}.{parts[1]}".encode(), hashlib.sha256).digest()
            if not hmac.compare_digest(want, _unb64(parts[2])):
                return "the token is not signed with the cluster's JWT key"
            if not claims.get("exp", 0) > time.time():
                return "the token has expired"
            self.verified += 1
        return None

    def _answer(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        with self._lock:
            if not path.startswith(self.prefix):
                self.strays.append(f"{method} {path}")
                return self._error(404, f"no such path: {path}")
            why = self._authenticate(headers)
            if why is not None:
                self.auth_failures.append(f"{method} {path}: {why}")
                return self._error(401, "Authentication failure")
            user = {k.lower(): v for k, v in headers.items()}["x-slurm-user-name"]
            url = urlsplit(path[len(self.prefix) :])
            version, _, below = url.path.partition("/")
            if version not in (RESTAPI_VERSION, RESTAPI_VERSION_TOPOLOGY, RESTAPI_VERSION_2605):
                return self._error(404, f"no such path: {path}")
            self.versions[version] += 1
            self.served[(method, below)] += 1
            if self.silent:
                return self._error(500, f"Failed to {method} {below}", CONTROLLER_SILENT[0])
            body = json.loads(raw) if raw else {}
            self._expire()
            if (method, below) == ("GET", "nodes"):
                if version == RESTAPI_VERSION_TOPOLOGY:
                    nodes = [{**n, "topology": self.topology.get(n["name"], "")} for n in self.nodes.values()]
                    return 200, {"nodes": nodes, **self._nodes_doc}
                return 200, {"nodes": list(self.nodes.values()), **self._nodes_doc}
            if method == "GET" and below in ("jobs", "jobs/"):
                return self._jobs_answer(version, user, parse_qs(url.query))
            if (method, below) == ("POST", "job/submit"):
                return self._submit(version, user, body)
            if method == "DELETE" and below in ("jobs", "jobs/"):
                return self._cancel(user, [str(i) for i in body.get("jobs") or []])
            if (method, below.rstrip("/")) == ("POST", "new/node") and version == RESTAPI_VERSION_2605:
                return self._create_node(user, body)
            if m := re.fullmatch(r"job/(\d+)", below):
                if method == "DELETE":
                    return self._cancel(user, [m[1]])
                if method == "GET" and int(m[1]) in self._jobs:
                    record = self._record(self._jobs[int(m[1])], version)
                    return 200, {"jobs": [record], **self._jobs_docs[self._job_version(version)]}
                return self._error(500, f"Unable to query JobId={m[1]}", "Invalid job id specified")
            if m := re.fullmatch(r"node/([^/]+)", below):
                answer = self._node(method, unquote(m[1]), body, version)
                self._schedule()
                return answer
            return self._error(404, f"no such path: {below}")

    def _node(self, method: str, name: str, body: dict[str, Any], version: str) -> tuple[int, Any]:
        record = self.nodes.get(name)
        if record is None:
            return self._error(500, "Invalid node name specified", number=2017)
        ok = {"meta": self._meta, "errors": [], "warnings": []}
        if method == "DELETE":
            del self.nodes[name]
            self.actions.append(Action("delete", name))
            return 200, ok
        if method == "POST" and body.get("state") == ["DRAIN"] and body.get("reason"):
            state = [w for w in record["state"] if w != "DRAIN"]
            self._set_state(record, [state[0], "DRAIN", *state[1:]], str(body["reason"]), by="slurm")
            self.actions.append(Action("drain", name, str(body["reason"])))
            return 200, ok
        if method == "POST" and body.get("state") == ["RESUME"]:
            self._set_state(record, [w for w in record["state"] if w != "DRAIN"], None)
            self.actions.append(Action("resume", name))
            return 200, ok
        if method == "POST" and "state" not in body and ("features" in body or "topology_str" in body):
            if "topology_str" in body and version != RESTAPI_VERSION_TOPOLOGY:
                return self._error(400, f"{version} has no field topology_str")
            said = []
            if "features" in body:
                record["features"] = record["active_features"] = str(body["features"]).split(",")
                said.append(f"features={body['features']}")
            if "topology_str" in body:
                self.topology[name] = str(body["topology_str"])
                said.append(f"topology={body['topology_str']}")
            self.actions.append(Action("place", name, " ".join(said)))
            return 200, ok
        return self._error(400, f"node update not understood: {method} {body}")


def _id(job: _Job) -> int:
    return job.id


def _kill_status(asked: str, job_id: int | None, code: int, text: str) -> dict[str, Any]:
    """One entry of a cancel's ``status``, as slurmrestd 26.05 writes it."""
    return {
        "error": {"string": text, "code": code, "message": text},
        "step_id": asked,
        "job_id": _number(job_id) if job_id is not None else {"set": False, "infinite": False, "number": 0},
        "federation": {"sibling": ""},
    }
