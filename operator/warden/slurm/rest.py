"""The operator's client of slurmrestd: one pinned OpenAPI version (``naming.RESTAPI_VERSION``; a cluster with a
topology, ``naming.RESTAPI_VERSION_TOPOLOGY``), JWT auth.

Everything the operator and the exporter ask of or do to slurmctld goes through ``SlurmRest``
(``warden.slurm.cli`` is the command-line half, used by the health checks inside the cluster). The node
JSON slurmrestd serves is what ``scontrol show node --json`` prints for the same data_parser version, so
both halves share ``warden.slurm.model.Node``.

The bridge (``warden.bridge``) submits, lists and cancels its placeholder jobs through it as well, at
data_parser v0.0.44 (``naming.RESTAPI_VERSION_2605``): ``submit_job``, ``jobs_since``, ``cancel_job``
and ``cancel_jobs``, and creates external nodes with ``create_node``. What slurmrestd 26.05.5 answers to
each, refusals included, is captured in tests/unit/fixtures/slurm/slurmrestd_v0044_*.json (described in
slurmrestd_v0044.md there).

Tokens: ``mint_token`` signs an HS256 JSON Web Token with the cluster's JWT key (Secret
``<cluster>-jwt-key``), the same way slurmctld signs ``scontrol token``'s: claims ``iat``, ``exp`` and
``sun`` (the Slurm user name). The operator acts as ``slurm`` (SlurmUser: a Slurm administrator).
"""

from __future__ import annotations

import base64
import codecs
import copy
import hashlib
import hmac
import json
import re
import time
from collections.abc import Callable, Collection, Generator, Iterable
from contextlib import closing
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import urllib3

from warden.leader import fence
from warden.naming import RESTAPI_VERSION, RESTAPI_VERSION_2605
from warden.slurm.model import (
    Job,
    Node,
    Reservation,
    SlurmError,
    SlurmNodeUnknown,
    SlurmParseError,
    diag_from_doc,
    jobs_from_doc,
    nodes_from_pieces,
    reservations_from_doc,
)

__all__ = [
    "ControllerPing",
    "SlurmNodeExists",
    "SlurmRest",
    "SlurmRestError",
    "SlurmSubmitError",
    "SlurmUnreachable",
    "Submitted",
    "mint_token",
    "token_claims",
]

OPERATOR_USER = "slurm"
#: the most bytes of an answer read at once when it is decoded as it arrives
PIECE = 65536
#: a job id below Slurm's largest (0x7fffffff) that no cluster reaches: its MaxJobId is at most 0x03ff0000
ABSENT_JOB_ID = 2147483646


class SlurmRestError(SlurmError):
    """slurmrestd answered with an error status; ``str()`` says what for and Slurm's own words.
    ``answer``: the document it answered with (None when it sent none)."""

    def __init__(self, what: str, status: int, errors: list[str], answer: Any = None) -> None:
        self.status = status
        self.errors = errors
        self.answer = answer
        super().__init__(f"{what}: HTTP {status}: {'; '.join(errors) or '(no error text)'}")


class SlurmSubmitError(SlurmRestError):
    """A job submit answered with errors. ``job_id`` is not None when Slurm made the job all the same:
    slurmrestd 26.05 drops a field it cannot parse (an unknown flag), says so in ``errors`` with HTTP 500,
    and submits the rest (tests/unit/fixtures/slurm/slurmrestd_v0044_submit_parse_error.json)."""

    def __init__(self, what: str, status: int, errors: list[str], answer: Any, job_id: int | None) -> None:
        super().__init__(what, status, errors, answer)
        self.job_id = job_id


class SlurmNodeExists(SlurmRestError):
    """``create_node``: slurmctld already has a node of that name."""


@dataclass(frozen=True)
class Submitted:
    """A job slurmctld took: its id, and what Slurm said about it, in its words (``Requested partition
    configuration not available now`` for a job no node of its partition can ever hold: it stays
    PENDING with reason ``PartitionConfig``)."""

    job_id: int
    warnings: tuple[str, ...] = ()


class SlurmUnreachable(SlurmError):
    """No answer: slurmrestd did not answer (not running, not resolvable, timed out), or it answered
    that slurmctld did not (``CONTROLLER_SILENT``)."""


#: Slurm's error numbers for a job that is gone already (ESLURM_INVALID_JOB_ID: never known or purged after
#: MinJobAge) or is ending or has ended (ESLURM_ALREADY_DONE): cancelling it again is nothing to do
JOB_GONE_CODES = frozenset({2017, 2021})
JOB_GONE_TEXTS = ("Invalid job id specified", "Job/step already completing or completed")
#: slurmrestd's warning when ``GET jobs?update_time=`` finds no job changed since then
NO_JOB_CHANGES = "No job changes since"
#: the first data_parser that knows the ``EXTERNAL_JOB`` flag (Slurm 25.05); older ones drop it, and
#: slurmrestd then submits the job without it
EXTERNAL_JOB_SINCE = 43

#: slurmrestd's words when slurmctld took no request or sent no answer in time (Slurm's own error
#: texts for SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT and SLURMCTLD_COMMUNICATIONS_*_ERROR)
CONTROLLER_SILENT = ("Socket timed out on send/recv operation", "Unable to contact slurm controller")


@dataclass(frozen=True)
class ControllerPing:
    """One slurmctld as slurmrestd's ping found it. ``pings()`` lists them in SlurmctldHost order. A ping
    tells whether a slurmctld answers, not whether it is in charge (a standby backup answers too; the
    answer's ``primary`` and ``mode`` name the position in the list only): the controller pods say who is,
    from Slurm's heartbeat (``warden.ha.beat``, relayed by ``warden.ha.incharge``)."""

    hostname: str
    responding: bool
    latency_us: int | None = None


def ping_of(doc: Any) -> ControllerPing | None:
    """A ping record of either spelling: ``responding`` (a bool, from data_parser v0.0.42 on) or, where
    that is absent, ``pinged`` ("UP"/"DOWN", deprecated later); None when it is no record at all."""
    if not isinstance(doc, dict):
        return None
    responding = doc.get("responding")
    if not isinstance(responding, bool):
        responding = str(doc.get("pinged", "")).upper() == "UP"
    latency = doc.get("latency")
    return ControllerPing(
        hostname=str(doc.get("hostname") or ""),
        responding=responding,
        latency_us=int(latency) if isinstance(latency, int | float) and not isinstance(latency, bool) else None,
    )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint_token(key: bytes, user: str, lifetime_s: int = 300, now: float | None = None) -> str:
    """An HS256 JWT for Slurm user ``user``, valid ``lifetime_s`` seconds from ``now``."""
    if not key:
        raise ValueError("empty JWT key")
    issued = int(time.time() if now is None else now)
    header = _b64(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = {"iat": issued, "exp": issued + lifetime_s, "sun": user}
    payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
    signature = hmac.new(key, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{_b64(signature)}"


def token_claims(token: str, key: bytes) -> dict[str, Any] | None:
    """The claims of an HS256 JWT signed with ``key`` (``mint_token``'s or slurmctld's); None when it is
    malformed or another key signed it. Expiry is the caller's to judge (``exp``)."""
    parts = token.strip().split(".")
    if len(parts) != 3 or not key:
        return None
    header, payload, signature = parts
    expected = hmac.new(key, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    try:
        if not hmac.compare_digest(base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)), expected):
            return None
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (ValueError, json.JSONDecodeError):
        return None
    return claims if isinstance(claims, dict) else None


def _error_texts(doc: Any) -> list[str]:
    if not isinstance(doc, dict):
        return []
    out = []
    for e in doc.get("errors") or []:
        if isinstance(e, dict):
            text = ": ".join(str(e[k]) for k in ("description", "error") if e.get(k))
            out.append(str(text) if text else json.dumps(e))
    return out


class SlurmRest:
    """slurmrestd at ``base_url`` (``http://<cluster>-restapi.<ns>.svc.cluster.local:6820``).

    ``token`` is called for each request (so a caller may cache and renew); requests run as ``user``."""

    def __init__(
        self,
        base_url: str,
        token: Callable[[], str],
        user: str = OPERATOR_USER,
        timeout: float = 10.0,
        http: urllib3.PoolManager | None = None,
        api_version: str = RESTAPI_VERSION,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        #: data_parser version of every request; ``RESTAPI_VERSION_TOPOLOGY`` reads and sets node topology
        self.api_version = api_version
        self.token = token
        self.user = user
        self.timeout = urllib3.Timeout(connect=min(3.0, timeout), read=timeout)
        self.http = http or urllib3.PoolManager(retries=False)

    def _request(self, method: str, path: str, what: str, body: dict[str, Any] | None = None) -> Any:
        text = self._request_text(method, path, what, body)
        try:
            doc = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError:
            raise SlurmParseError(f"{what}: slurmrestd sent no JSON: {text[:200]!r}") from None
        errors = _error_texts(doc)
        if errors:
            raise SlurmRestError(what, 200, errors, doc)
        return doc

    def _request_text(self, method: str, path: str, what: str, body: dict[str, Any] | None = None) -> str:
        """The text of a successful answer (2xx); an error answer raises what it says."""
        response = self._open(method, path, what, body)
        try:
            return response.data.decode(errors="replace")
        except urllib3.exceptions.HTTPError as e:
            raise SlurmUnreachable(f"{what}: {self.base_url} stopped answering: {e}") from e
        finally:
            response.release_conn()

    def _pieces(self, method: str, path: str, what: str) -> Generator[str, None, None]:
        """The text of a successful answer as it arrives, in pieces of at most ``PIECE`` bytes' text: a
        list of ten thousand nodes is never held whole."""
        response = self._open(method, path, what, None)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        read_whole = False
        try:
            for chunk in response.stream(PIECE):
                yield decoder.decode(chunk)
            yield decoder.decode(b"", final=True)
            read_whole = True
        except urllib3.exceptions.HTTPError as e:
            raise SlurmUnreachable(f"{what}: {self.base_url} stopped answering: {e}") from e
        finally:
            if not read_whole:  # the rest is not read: this connection cannot carry another request
                response.close()
            response.release_conn()

    def _open(self, method: str, path: str, what: str, body: dict[str, Any] | None) -> urllib3.BaseHTTPResponse:
        """A successful answer (2xx), its body not read yet; an error answer raises what it says."""
        url = f"{self.base_url}/slurm/{self.api_version}/{path}"
        if method != "GET":
            fence.check(f"{what} through slurmrestd")  # a replica whose lease ran out acts on no node (warden.leader)
        headers = {
            "X-SLURM-USER-NAME": self.user,
            "X-SLURM-USER-TOKEN": self.token(),
            "Accept": "application/json",
        }
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body).encode()
        try:
            response = self.http.request(
                method, url, body=data, headers=headers, timeout=self.timeout, preload_content=False
            )
        except urllib3.exceptions.HTTPError as e:
            raise SlurmUnreachable(f"{what}: {self.base_url} did not answer: {e}") from e
        if 200 <= response.status <= 299:
            return response
        try:
            text = response.data.decode(errors="replace")
        except urllib3.exceptions.HTTPError as e:
            raise SlurmUnreachable(f"{what}: {self.base_url} stopped answering: {e}") from e
        finally:
            response.release_conn()
        try:
            doc = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError:
            doc = None
        errors = _error_texts(doc) or ([text.strip()[:200]] if text.strip() else [])
        if any(silent in e for e in errors for silent in CONTROLLER_SILENT):
            raise SlurmUnreachable(f"{what}: slurmctld did not answer slurmrestd: {'; '.join(errors)}")
        raise SlurmRestError(what, response.status, errors, doc)

    def pings(self) -> list[ControllerPing]:
        """Every slurmctld of the cluster (its SlurmctldHost lines, in order) and whether it answered
        slurmrestd's ping; empty when the answer lists none."""
        doc = self._request("GET", "ping", "ping")
        raw = doc.get("pings") if isinstance(doc, dict) else None
        found = (ping_of(p) for p in (raw if isinstance(raw, list) else []))
        return [p for p in found if p is not None]

    def ping(self) -> None:
        """slurmctld answers through slurmrestd (raises otherwise): one of them, primary or backup."""
        pings = self.pings()
        if not any(p.responding for p in pings):
            said = ", ".join(f"{p.hostname or '?'} not responding" for p in pings) or "no controller listed"
            raise SlurmUnreachable(f"ping: slurmctld did not answer through slurmrestd: {said}")

    def nodes(self) -> list[Node]:
        """Every node slurmctld knows (dynamic worker nodes register themselves)."""
        with closing(self._pieces("GET", "nodes", "list nodes")) as pieces:
            nodes, errors = nodes_from_pieces(pieces)
            for _ in pieces:  # read to the end (whitespace): the connection then carries the next request
                pass
        said = _error_texts({"errors": errors})
        if said:
            raise SlurmRestError("list nodes", 200, said)
        return nodes

    def jobs(self) -> list[Job]:
        """Every job slurmctld still lists (pending, running, completing, recently ended), with the nodes
        each runs on and when it will end."""
        return jobs_from_doc(self._request("GET", "jobs", "list jobs"))

    def jobs_since(self, update_time: float | None) -> list[Job] | None:
        """Every job, as ``jobs()``, or None when slurmctld says no job changed since ``update_time``
        (epoch seconds; None: no earlier read, every job). slurmctld compares whole seconds on its own
        clock and reports a change in the second of ``update_time`` too (no change only when its last
        job change is before ``update_time - 1``); slurmrestd answers "no change" with no jobs and the
        warning "No job changes since update_time[T]=...". The answer's ``last_update`` (slurmctld's
        clock) is what to pass next; a caller that uses its own clock should go back a little."""
        if update_time is None:
            return self.jobs()
        doc = self._request("GET", f"jobs?update_time={int(update_time)}", "list jobs")
        raw_jobs = doc.get("jobs") if isinstance(doc, dict) else None
        if raw_jobs == [] and any(t.startswith(NO_JOB_CHANGES) for t in _warning_texts(doc)):
            return None
        return jobs_from_doc(doc)

    def submit_job(self, desc: dict[str, Any]) -> Submitted:
        """Submit a job description (data_parser's ``job``: an external job, ``"flags": ["EXTERNAL_JOB"]``
        with no script, needs v0.0.43 on). slurmctld's refusal raises ``SlurmSubmitError`` with its words
        (``Invalid configuration for external job``, ``Invalid partition name specified``, and what
        job_submit.lua told the user); a job it takes but can never run now is taken, with a warning.

        slurmrestd gives up on slurmctld after MessageTimeout and answers "Socket timed out on send/recv
        operation" (``SlurmUnreachable``) while slurmctld may still make the job: seen on 26.05.5, so a
        caller that finds no job id must look for the job (by its name or comment) before submitting again."""
        flags = desc.get("flags") or ()
        if "EXTERNAL_JOB" in flags and _parser_number(self.api_version) < EXTERNAL_JOB_SINCE:
            raise ValueError(f"data_parser {self.api_version} does not know EXTERNAL_JOB: slurmrestd would drop it")
        what = f"submit job {desc.get('name') or '(no name)'}"
        try:
            doc = self._request("POST", "job/submit", what, {"job": desc})
        except SlurmRestError as e:
            said = e.errors + [m for m in [_user_message(e.answer)] if m and m not in e.errors]
            raise SlurmSubmitError(what, e.status, said, e.answer, _submitted_id(e.answer)) from e
        job_id = _submitted_id(doc)
        if job_id is None:
            raise SlurmParseError(f"{what}: slurmrestd answered no job id: {str(doc)[:200]!r}")
        told = [*_warning_texts(doc), _user_message(doc)]
        return Submitted(job_id=job_id, warnings=_distinct(t for t in told if t))

    def cancel_job(self, job_id: int) -> None:
        """Cancel a job (SIGKILL to the whole job; an external job's nodes are free at once). A job that
        is unknown, ending or ended is nothing to do: slurmrestd says so with HTTP 200 and a ``status``
        entry ("Invalid job id specified", "Job/step already completing or completed"). Another user's
        job raises ("Access/permission denied")."""
        self._cancel("DELETE", f"job/{int(job_id)}", f"cancel job {job_id}", None)

    def cancel_jobs(self, job_ids: Collection[int]) -> None:
        """``cancel_job`` for several jobs in one request (``DELETE jobs/``); nothing when there are none."""
        if job_ids:
            ids = [str(int(i)) for i in job_ids]
            self._cancel("DELETE", "jobs/", f"cancel jobs {','.join(ids)}", {"jobs": ids})

    def _cancel(self, method: str, path: str, what: str, body: dict[str, Any] | None) -> None:
        try:
            doc = self._request(method, path, what, body)
        except SlurmRestError as e:
            if e.errors and all(any(t in text for t in JOB_GONE_TEXTS) for text in e.errors):
                return
            raise
        failed = _cancel_failures(doc)
        if failed:
            raise SlurmRestError(what, 200, failed, doc)

    def create_node(self, conf: str) -> None:
        """Create a node record from a slurm.conf node line (``NodeName=k8s-a CPUs=4 RealMemory=4000
        Feature=warden-bridge State=EXTERNAL``; slurmctld takes only State=FUTURE, CLOUD or EXTERNAL).
        ``POST new/node/``: data_parser v0.0.44 on (slurmrestd 25.11), and a Slurm administrator's token.
        One that exists raises ``SlurmNodeExists``. A name slurmctld cannot resolve stalls its scheduler
        for some 10 s at each job start there (26.05.5): give ``NodeAddr=`` an address."""
        what = f"create node {conf.split()[0] if conf.split() else '(empty)'}"
        try:
            self._request("POST", "new/node/", what, {"node_conf": conf})
        except SlurmRestError as e:
            if any("already exists" in t for t in e.errors):
                raise SlurmNodeExists(what, e.status, e.errors, e.answer) from e
            raise

    def look_up_absent_job(self) -> None:
        """Ask for a job that cannot exist: slurmctld answers "no such job" under its job read lock,
        in constant time however many jobs it holds. Raises ``SlurmUnreachable`` when it does not
        answer (a job lock held for good: every user's squeue and sbatch hang too)."""
        try:
            self._request("GET", f"job/{ABSENT_JOB_ID}", "look up a job")
        except SlurmRestError as e:
            if not any("Invalid job id" in t for t in e.errors):
                raise

    def diag(self) -> dict[str, float]:
        """slurmctld's scheduler statistics (``sdiag``), see ``warden.slurm.model.diag_from_doc``."""
        return diag_from_doc(self._request("GET", "diag", "scheduler statistics"))

    def _update(self, name: str, what: str, body: dict[str, Any]) -> None:
        try:
            self._request("POST", f"node/{quote(name, safe='')}", what, body)
        except SlurmRestError as e:
            if _unknown_node(e):
                raise SlurmNodeUnknown(str(e)) from e
            raise

    def drain(self, name: str, reason: str) -> None:
        if not reason.strip():
            raise ValueError("Slurm requires a reason to drain a node")
        self._update(name, f"drain {name}", {"state": ["DRAIN"], "reason": reason})

    def resume(self, name: str) -> None:
        self._update(name, f"resume {name}", {"state": ["RESUME"]})

    def place(self, name: str, features: tuple[str, ...] | None, topology: str | None) -> None:
        """Give a node these features (available and active; None: leave them) and this place in the
        topology (``default:b1``, "" for none; None: leave it; needs ``RESTAPI_VERSION_TOPOLOGY``)."""
        body: dict[str, Any] = {}
        if features is not None:
            body["features"] = body["features_act"] = ",".join(features)
        if topology is not None:
            body["topology_str"] = topology
        if body:
            self._update(name, f"place node {name}", body)

    def _v44(self) -> SlurmRest:
        """This client speaking data_parser v0.0.44 (slurmrestd 25.11 on): reservations are made from it on."""
        if self.api_version == RESTAPI_VERSION_2605:
            return self
        other = copy.copy(self)
        other.api_version = RESTAPI_VERSION_2605
        return other

    def reservations(self) -> list[Reservation]:
        """Every reservation slurmctld holds (data_parser v0.0.44 on)."""
        return reservations_from_doc(self._v44()._request("GET", "reservations", "list reservations"))

    def put_reservation(
        self,
        name: str,
        start: int,
        minutes: int,
        nodes: Collection[str],
        flags: Collection[str],
        users: Collection[str],
    ) -> None:
        """Make or change the reservation ``name`` (``start``: a UNIX time; data_parser v0.0.44 on, a Slurm
        administrator's token). slurmctld's refusal (a node it does not know, a start in the past) raises
        ``SlurmRestError`` with its words."""
        body = {
            "name": name,
            "start_time": {"set": True, "number": int(start)},
            "duration": {"set": True, "number": int(minutes)},
            "node_list": sorted(nodes),
            "flags": list(flags),
            "users": list(users),
        }
        try:
            self._v44()._request("POST", "reservation", f"reserve {name}", body)
        except SlurmRestError as e:
            # slurmrestd 26.05 makes the reservation, then asks slurmdbd something with the caller's token, which
            # slurmdbd (no auth/jwt) refuses: "Slurmdb query failed". What slurmctld holds is the answer then.
            if not any("Slurmdb query failed" in t for t in e.errors):
                raise
            held = next((r for r in self.reservations() if r.name == name), None)
            want = (int(start), int(minutes), sorted(nodes))
            if held is None or (held.start, held.minutes, sorted(held.nodes)) != want:
                raise

    def delete_reservation(self, name: str) -> None:
        """Delete a reservation; one that is already gone is not an error."""
        try:
            self._v44()._request("DELETE", f"reservation/{quote(name, safe='')}", f"delete reservation {name}")
        except SlurmRestError:
            if any(r.name == name for r in self.reservations()):  # gone, whatever slurmrestd answered
                raise

    def delete_node(self, name: str) -> None:
        """Remove a (dynamic) node record; one that is already gone is not an error."""
        try:
            self._request("DELETE", f"node/{quote(name, safe='')}", f"delete node {name}")
        except SlurmRestError as e:
            if not _unknown_node(e):
                raise


def _warning_texts(doc: Any) -> list[str]:
    warnings = doc.get("warnings") if isinstance(doc, dict) else None
    out = []
    for w in warnings if isinstance(warnings, list) else []:
        if isinstance(w, dict) and w.get("description"):
            out.append(str(w["description"]))
        elif w:
            out.append(json.dumps(w))
    return out


def _user_message(doc: Any) -> str:
    """What job_submit.lua told the user (``job_submit_user_msg``), "" when nothing."""
    said = doc.get("job_submit_user_msg") if isinstance(doc, dict) else None
    return said.strip() if isinstance(said, str) else ""


def _submitted_id(doc: Any) -> int | None:
    """The job id of a submit's answer: ``job_id``, or ``result.job_id`` (data_parser v0.0.40-41)."""
    if not isinstance(doc, dict):
        return None
    result = doc.get("result")
    for raw in (doc.get("job_id"), result.get("job_id") if isinstance(result, dict) else None):
        if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0:
            return raw
    return None


def _distinct(texts: Iterable[str]) -> tuple[str, ...]:
    """Slurm's warnings without repeats: slurmrestd says a submit's warning twice, once as is and once
    behind "Job submission resulted in non-zero return code: "; the plain one is kept."""
    seen = list(dict.fromkeys(texts))
    return tuple(t for t in seen if not any(u != t and t.endswith(f": {u}") for u in seen))


def _cancel_failures(doc: Any) -> list[str]:
    """The ``status`` entries of a cancel's answer that are more than a job already gone, as text."""
    status = doc.get("status") if isinstance(doc, dict) else None
    out = []
    for entry in status if isinstance(status, list) else []:
        error = entry.get("error") if isinstance(entry, dict) else None
        if not isinstance(error, dict):
            continue
        code = error.get("code")
        text = str(error.get("string") or error.get("message") or "")
        if code in JOB_GONE_CODES or any(t in text for t in JOB_GONE_TEXTS) or (code == 0 and not text):
            continue
        job = entry.get("step_id") or entry.get("job_id")
        out.append(f"job {job}: {text or f'error {code}'}")
    return out


def _parser_number(version: str) -> int:
    """43 for ``v0.0.43``; 0 for a version spelled otherwise."""
    m = re.fullmatch(r"v0\.0\.(\d+)", version)
    return int(m[1]) if m else 0


def _unknown_node(e: SlurmRestError) -> bool:
    return e.status == 404 or any("Invalid node name" in t or "not found" in t.lower() for t in e.errors)
