"""Who asked the API server what: the audit log a ControlPlane(audit=True) writes, counted by client.

The API server's own record (one JSON line per request and stage, with the client's user agent): how
the benchmarks (bench/peer_scale.py) and the integration tier count an operator's requests.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Requests:
    """Requests counted: reads (get, list, watch), writes (the rest), and each "verb resource"."""

    reads: int = 0
    writes: int = 0
    by: Counter[str] = field(default_factory=Counter)  # "verb resource" -> count


def audit_requests(
    log: Path, agents: tuple[str, ...], since: str, until: str, namespace: str | None = None
) -> Requests:
    """Requests by clients whose user agent starts with one of ``agents``, received between the two
    RFC 3339 times (the audit log's ``requestReceivedTimestamp``); with ``namespace``, only those in it
    and those of cluster-scoped objects."""
    out = Requests()
    seen: set[str] = set()
    with log.open() as f:
        for line in f:
            if not any(f'"userAgent":"{a}' in line for a in agents):
                continue
            event = json.loads(line)
            received = event.get("requestReceivedTimestamp", "")
            if not since <= received <= until or event["auditID"] in seen:
                continue
            seen.add(event["auditID"])
            verb = event.get("verb", "")
            ref = event.get("objectRef") or {}
            if namespace is not None and ref.get("namespace", namespace) != namespace:
                continue
            resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            out.by[f"{verb} {resource}"] += 1
            if verb in ("get", "list", "watch"):
                out.reads += 1
            else:
                out.writes += 1
    return out


def rfc3339(t: float) -> str:
    """A time as the audit log writes it (microseconds, UTC): comparable as text."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


def wait_written(log: Path, until: str, timeout: float = 30.0) -> None:
    """Wait until the log has a request received at ``until`` or later: every earlier one is written
    (the API server writes its audit events in batches, at least once a second here)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - 65536))
            tail = f.read().decode(errors="replace").splitlines()[1:]
        if any(json.loads(line).get("requestReceivedTimestamp", "") >= until for line in tail if line.strip()):
            return
        time.sleep(0.5)
    raise TimeoutError(f"{log}: nothing received after {until} written in {timeout:.0f} s")
