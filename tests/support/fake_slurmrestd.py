"""A stand-in for one SlurmCluster's slurmrestd, for the operator's Slurm sync in the integration tier.

It stands in because that tier has no Slurm daemons: its pods run on kwok nodes, which run nothing, so
the cluster's real slurmrestd (and the slurmctld behind it) never answers there. The real one answers
in the dataplane tier (tests/dataplane). This one is a threaded HTTP server on 127.0.0.1 (a free port)
that serves what ``warden.slurm.rest.SlurmRest`` asks of slurmrestd for the sync, in slurmrestd's
own JSON, and remembers what the sync did to Slurm's nodes, so that later reads reflect it:

- ``GET  /slurm/v0.0.42/nodes``: the registered nodes. Each node record is a copy of a node record of
  ``tests/unit/fixtures/slurm/slurmrestd_nodes_three.json`` (Slurm 24.11.5's slurmrestd, three dynamic
  workers: one MIXED, one drained by a person with reason "hands off", one GPU) renamed, with the
  state and reason a test gives it; the document around them is that capture's.
- ``GET  /slurm/v0.0.42/jobs``: the jobs the test runs. Each job record is a copy of the first job of
  ``tests/unit/fixtures/slurm/slurmrestd_jobs_four.json`` (same slurmrestd; a RUNNING ``sbatch``), with
  its id, state, node (everywhere the capture names it), start and end time set; the document around
  them is that capture's.
- ``GET  /slurm/v0.0.42/job/<id>``: that job; a job it does not hold (the sync's absent-job lookup)
  is answered "Invalid job id specified".
- ``POST /slurm/v0.0.42/node/<name>``: ``{"state": ["DRAIN"], "reason": ...}`` sets the DRAIN flag and
  the reason, ``{"state": ["RESUME"]}`` clears it (Slurm keeps the reason text); both recorded.
- ``DELETE /slurm/v0.0.42/node/<name>``: the node record goes; recorded.
- ``POST /slurm/v0.0.42/node/<name>`` with ``features`` (and ``features_act``) sets the node's feature
  lists; recorded as ``place``.
- ``/slurm/v0.0.44/...`` (``RESTAPI_VERSION_TOPOLOGY``, what the sync speaks to a cluster with a
  topology): the same, and node records carry ``topology`` (Slurm 26.05's v0.0.44 node record is
  v0.0.42's with that field and two about TLS certificates, which the sync does not read), which
  ``topology_str`` in a node update sets. v0.0.42 refuses ``topology_str``, as it has no such field.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from tests.support.jsonserver import JsonServer
from warden.naming import RESTAPI_VERSION, RESTAPI_VERSION_TOPOLOGY
from warden.slurm.rest import CONTROLLER_SILENT

FIXTURES = Path(__file__).resolve().parents[1] / "unit" / "fixtures" / "slurm"
NODES_CAPTURE = FIXTURES / "slurmrestd_nodes_three.json"
JOBS_CAPTURE = FIXTURES / "slurmrestd_jobs_four.json"
#: the captured node record a node is copied from unless a test names another
TEMPLATE_NODE = "dp-worker-cpu-0"


@dataclass(frozen=True)
class Action:
    """What the operator did to a Slurm node: ``drain`` (with its reason), ``resume``, ``delete``."""

    verb: str
    node: str
    reason: str = ""  # a drain's; a place's: what it set (``features=a,b topology=default:b1``)


def _unb64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _number(value: float | int) -> dict[str, Any]:
    return {"set": True, "infinite": False, "number": int(value)}


class FakeSlurmrestd:
    def __init__(self, namespace: str, cluster: str) -> None:
        self.namespace = namespace
        self.cluster = cluster
        self.prefix = f"/{namespace}/{cluster}/slurm/"
        nodes_doc = json.loads(NODES_CAPTURE.read_text())
        jobs_doc = json.loads(JOBS_CAPTURE.read_text())
        self._captured_nodes = {n["name"]: n for n in nodes_doc["nodes"]}
        self._captured_job = jobs_doc["jobs"][0]
        self._nodes_doc = {k: v for k, v in nodes_doc.items() if k != "nodes"}
        self._jobs_doc = {k: v for k, v in jobs_doc.items() if k != "jobs"}
        self._meta = nodes_doc["meta"]
        self._lock = threading.Lock()
        self.nodes: dict[str, dict[str, Any]] = {}  # name -> node record, as served
        self.jobs: dict[int, dict[str, Any]] = {}  # id -> job record, as served
        self._next_job = 100
        #: what the operator did, in order
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
        self, name: str, state: tuple[str, ...] = ("IDLE",), reason: str = "", like: str = TEMPLATE_NODE
    ) -> None:
        """A dynamic node registers (as a worker pod's slurmd would): a copy of captured node ``like``
        named ``name``, in ``state`` (base state and flags) with ``reason``."""
        record = copy.deepcopy(self._captured_nodes[like])
        record.update(name=name, hostname=name, reason="", reason_set_by_user="")
        with self._lock:
            self.nodes[name] = record
            self.topology.pop(name, None)  # registering afresh, as slurmd -Z does: no place given yet
            self._set_state(record, list(state), reason)

    def unregister(self, name: str) -> None:
        """A node's record goes, as a worker's slurmd deletes its own when its pod stops."""
        with self._lock:
            self.nodes.pop(name, None)
            self.topology.pop(name, None)

    def set_state(self, name: str, *state: str, reason: str | None = None) -> None:
        """What a person's ``scontrol update`` or slurmctld itself would change: the node's state words
        (base state first), and its reason when given."""
        with self._lock:
            self._set_state(self.nodes[name], list(state), reason)

    def run_job(self, node: str, seconds: float) -> int:
        """A job starts on ``node`` with a time limit of ``seconds`` (its end time is now + that); the
        node is ALLOCATED while it runs."""
        now = time.time()
        with self._lock:
            job_id = self._next_job
            self._next_job += 1
            job = copy.deepcopy(self._captured_job)
            job.update(
                job_id=job_id,
                job_state=["RUNNING"],
                nodes=node,
                batch_host=node,
                submit_time=_number(now),
                start_time=_number(now),
                end_time=_number(now + seconds),
                time_limit=_number(math.ceil(seconds / 60)),
            )
            allocated = job["job_resources"]["nodes"]
            allocated["list"] = node
            for a in allocated["allocation"]:
                a["name"] = node
            self.jobs[job_id] = job
            self._set_base(node, "ALLOCATED")
        return job_id

    def end_job(self, job_id: int) -> None:
        """The job completes; its node is IDLE (its flags, DRAIN included, stay) unless another job runs there."""
        with self._lock:
            job = self.jobs[job_id]
            job.update(job_state=["COMPLETED"], end_time=_number(time.time()))
            node = job["nodes"]
            if node in self.nodes and not any(
                j["nodes"] == node and j["job_state"] == ["RUNNING"] for j in self.jobs.values()
            ):
                self._set_base(node, "IDLE")

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

    # --- internals --------------------------------------------------------------------------------
    def _set_state(self, record: dict[str, Any], state: list[str], reason: str | None, by: str = "root") -> None:
        flags = [w for w in record["state"] if w.startswith("DYNAMIC")]  # a dynamic node stays one
        record["state"] = [*state, *[f for f in flags if f not in state]]
        if reason is not None:
            record["reason"] = reason
            record["reason_set_by_user"] = by if reason else ""
            record["reason_changed_at"] = _number(time.time() if reason else 0)
        busy = record["state"][0] in ("ALLOCATED", "MIXED")
        record["alloc_cpus"] = record["cpus"] if busy else 0
        record["alloc_idle_cpus"] = 0 if busy else record["cpus"]

    def _set_base(self, name: str, base: str) -> None:
        record = self.nodes.get(name)
        if record is not None:
            self._set_state(record, [base, *record["state"][1:]], None)

    def _error(self, status: int, description: str, error: str = "", number: int | None = None) -> tuple[int, Any]:
        e: dict[str, Any] = {"description": description}
        if error:
            e["error"] = error
        if number is not None:
            e["error_number"] = number
        return status, {"meta": self._meta, "errors": [e], "warnings": []}

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
            version, _, below = path[len(self.prefix) :].split("?")[0].partition("/")
            if version not in (RESTAPI_VERSION, RESTAPI_VERSION_TOPOLOGY):
                return self._error(404, f"no such path: {path}")
            self.versions[version] += 1
            self.served[(method, below)] += 1
            if self.silent:
                return self._error(500, f"Failed to {method} {below}", CONTROLLER_SILENT[0])
            body = json.loads(raw) if raw else {}
            if (method, below) == ("GET", "nodes"):
                if version == RESTAPI_VERSION_TOPOLOGY:
                    nodes = [{**n, "topology": self.topology.get(n["name"], "")} for n in self.nodes.values()]
                    return 200, {"nodes": nodes, **self._nodes_doc}
                return 200, {"nodes": list(self.nodes.values()), **self._nodes_doc}
            if (method, below) == ("GET", "jobs"):
                return 200, {"jobs": list(self.jobs.values()), **self._jobs_doc}
            if m := re.fullmatch(r"job/(\d+)", below):
                if method == "GET" and int(m[1]) in self.jobs:
                    return 200, {"jobs": [self.jobs[int(m[1])]], **self._jobs_doc}
                return self._error(500, f"Unable to query JobId={m[1]}", "Invalid job id specified")
            if m := re.fullmatch(r"node/([^/]+)", below):
                return self._node(method, unquote(m[1]), body, version)
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
