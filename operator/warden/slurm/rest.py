"""The operator's client of slurmrestd: one pinned OpenAPI version (``naming.RESTAPI_VERSION``; a cluster with a
topology, ``naming.RESTAPI_VERSION_TOPOLOGY``), JWT auth.

Everything the operator and the exporter ask of or do to slurmctld goes through ``SlurmRest``
(``warden.slurm.cli`` is the command-line half, used by the health checks inside the cluster). The node
JSON slurmrestd serves is what ``scontrol show node --json`` prints for the same data_parser version, so
both halves share ``warden.slurm.model.Node``.

Tokens: ``mint_token`` signs an HS256 JSON Web Token with the cluster's JWT key (Secret
``<cluster>-jwt-key``), the same way slurmctld signs ``scontrol token``'s: claims ``iat``, ``exp`` and
``sun`` (the Slurm user name). The operator acts as ``slurm`` (SlurmUser: a Slurm administrator).
"""

from __future__ import annotations

import base64
import codecs
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Generator
from contextlib import closing
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import urllib3

from warden.naming import RESTAPI_VERSION
from warden.slurm.model import (
    Job,
    Node,
    SlurmError,
    SlurmNodeUnknown,
    SlurmParseError,
    diag_from_doc,
    jobs_from_doc,
    nodes_from_pieces,
)

__all__ = ["ControllerPing", "SlurmRest", "SlurmRestError", "SlurmUnreachable", "mint_token", "token_claims"]

OPERATOR_USER = "slurm"
#: the most bytes of an answer read at once when it is decoded as it arrives
PIECE = 65536
#: a job id below Slurm's largest (0x7fffffff) that no cluster reaches: its MaxJobId is at most 0x03ff0000
ABSENT_JOB_ID = 2147483646


class SlurmRestError(SlurmError):
    """slurmrestd answered with an error status; ``str()`` says what for and Slurm's own words."""

    def __init__(self, what: str, status: int, errors: list[str]) -> None:
        self.status = status
        self.errors = errors
        super().__init__(f"{what}: HTTP {status}: {'; '.join(errors) or '(no error text)'}")


class SlurmUnreachable(SlurmError):
    """No answer: slurmrestd did not answer (not running, not resolvable, timed out), or it answered
    that slurmctld did not (``CONTROLLER_SILENT``)."""


#: slurmrestd's words when slurmctld took no request or sent no answer in time (Slurm's own error
#: texts for SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT and SLURMCTLD_COMMUNICATIONS_*_ERROR)
CONTROLLER_SILENT = ("Socket timed out on send/recv operation", "Unable to contact slurm controller")


@dataclass(frozen=True)
class ControllerPing:
    """One slurmctld as slurmrestd's ping found it. ``pings()`` lists them in SlurmctldHost order; which
    one is in charge is the first that responds (``warden.controllersync``): the answer's ``primary``
    and ``mode`` name the position in that list only."""

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
            raise SlurmRestError(what, 200, errors)
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
        raise SlurmRestError(what, response.status, errors)

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

    def delete_node(self, name: str) -> None:
        """Remove a (dynamic) node record; one that is already gone is not an error."""
        try:
            self._request("DELETE", f"node/{quote(name, safe='')}", f"delete node {name}")
        except SlurmRestError as e:
            if not _unknown_node(e):
                raise


def _unknown_node(e: SlurmRestError) -> bool:
    return e.status == 404 or any("Invalid node name" in t or "not found" in t.lower() for t in e.errors)
