"""The controller pods' verdict of which slurmctld is in charge, asked by the operator (the client side
of ``GET /in-charge``; ``warden.ha.ctld`` serves it in every controller pod with backup controllers).

The pods decide, from the heartbeat file Slurm writes in the StateSaveLocation they share: the one in
charge is the heartbeat's writer while its beat is at most SlurmctldTimeout old, and nobody when it is
older (the one that was hangs or died, and no backup took over yet). Every pod reads the same file, so
any one that answers will do: the operator asks them in pod name order, each at most ``TIMEOUT_S``
seconds, and the first valid answer wins. A wrong answer (not 200, not JSON, not the contract's shape,
names that are not the cluster's controller pods) is no answer, and the next pod is asked.

The answer (200, ``application/json``)::

    {"inCharge": "<cluster>-controller-N" | null, "writer": "<cluster>-controller-N" | null,
     "beatAgeSeconds": <int> | null, "slurmctldTimeout": <int>}
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from warden import naming
from warden.render.pods import Manifest

log = logging.getLogger(__name__)

#: seconds to wait for one pod's answer (connecting and reading)
TIMEOUT_S = 2.0
PATH = "/in-charge"
#: the most of an answer read: the contract's is under 200 bytes
MAX_ANSWER = 4096
# straight to the pod: a proxy in the operator's environment (HTTP_PROXY) never reaches pod addresses
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Verdict:
    """Which slurmctld is in charge, as controller pod ``asked`` read Slurm's heartbeat file.
    ``in_charge``: None when nobody is (``writer``'s beat is older than ``timeout_s``, or there is no
    heartbeat yet)."""

    in_charge: str | None
    writer: str | None
    beat_age_s: int | None
    timeout_s: int
    asked: str

    def nobody(self) -> str:
        """Why nobody is in charge, in words (for the pods' conditions)."""
        if self.writer is None:
            why = "no heartbeat in the state directory yet"
        elif self.beat_age_s is None:
            why = f"the heartbeat names {self.writer} but no time"
        else:
            why = f"{self.writer}'s last beat is {self.beat_age_s} s old"
        return f"no slurmctld is in charge: {why} (SlurmctldTimeout {self.timeout_s})"


class WrongAnswer(ValueError):
    """An answer that is not the contract's."""


def _name(doc: dict[str, Any], key: str, pattern: re.Pattern[str]) -> str | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise WrongAnswer(f"{key} {value!r} is no controller pod of this cluster")
    return value


def _count(doc: dict[str, Any], key: str) -> int | None:
    value = doc.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise WrongAnswer(f"{key} {value!r} is no count of seconds")
    return value


def parse(doc: Any, asked: str) -> Verdict:
    """The verdict in a decoded answer of pod ``asked``; ``WrongAnswer`` when it is not the contract's.
    The names must be controller pods of the asked pod's cluster (``<cluster>-controller-N``)."""
    if not isinstance(doc, dict):
        raise WrongAnswer(f"a {type(doc).__name__}, not an object")
    if "inCharge" not in doc or "slurmctldTimeout" not in doc:
        raise WrongAnswer("no inCharge or slurmctldTimeout")
    stem = asked.rsplit("-", 1)[0]
    pattern = re.compile(re.escape(stem) + r"-[0-9]+")
    in_charge = _name(doc, "inCharge", pattern)
    writer = _name(doc, "writer", pattern)
    timeout = _count(doc, "slurmctldTimeout")
    if timeout is None or timeout == 0:
        raise WrongAnswer(f"slurmctldTimeout {doc.get('slurmctldTimeout')!r} is no timeout")
    if in_charge is not None and in_charge != writer:
        raise WrongAnswer(f"inCharge {in_charge} is not the heartbeat's writer {writer}")
    return Verdict(in_charge, writer, _count(doc, "beatAgeSeconds"), timeout, asked)


def _address(pod: Manifest) -> str | None:
    """The pod's IP when it may answer: Running and not being deleted."""
    status = pod.get("status") or {}
    if (pod.get("metadata") or {}).get("deletionTimestamp") or status.get("phase") != "Running":
        return None
    ip = status.get("podIP")
    return ip if isinstance(ip, str) and ip else None


def url_of(ip: str, port: int) -> str:
    host = f"[{ip}]" if ":" in ip else ip  # an IPv6 pod
    return f"http://{host}:{port}{PATH}"


def ask_one(name: str, ip: str, port: int, timeout_s: float) -> Verdict:
    """Pod ``name``'s verdict; an ``OSError`` (unreachable, refused, timed out, not 200), an
    ``http.client.HTTPException`` or a ``ValueError`` (not JSON, ``WrongAnswer``) when it has none."""
    request = urllib.request.Request(url_of(ip, port), headers={"Accept": "application/json"})
    with _OPENER.open(request, timeout=timeout_s) as resp:
        if resp.status != 200:
            raise WrongAnswer(f"HTTP {resp.status}")
        raw = resp.read(MAX_ANSWER + 1)
    if len(raw) > MAX_ANSWER:
        raise WrongAnswer(f"an answer over {MAX_ANSWER} bytes")
    return parse(json.loads(raw), name)


def ask(
    pods: Iterable[Manifest], port: int = naming.IN_CHARGE_PORT, timeout_s: float = TIMEOUT_S, who: str = ""
) -> Verdict | None:
    """The first valid verdict of the controller pods ``pods`` (manifests), asked in name order; None when
    none gave one (logged: each pod and why; ``who`` names the cluster in that line)."""
    why: list[str] = []
    for pod in sorted(pods, key=lambda p: str(p["metadata"]["name"])):
        name = str(pod["metadata"]["name"])
        ip = _address(pod)
        if ip is None:
            why.append(f"{name}: not running")
            continue
        try:
            return ask_one(name, ip, port, timeout_s)
        except urllib.error.HTTPError as e:
            why.append(f"{name} ({ip}): HTTP {e.code}")
        except urllib.error.URLError as e:
            why.append(f"{name} ({ip}): {e.reason}")
        except (OSError, http.client.HTTPException, ValueError) as e:
            why.append(f"{name} ({ip}): {str(e) or type(e).__name__}")
    log.warning(
        "%sno controller pod said which slurmctld is in charge (GET %s on port %s): %s",
        f"{who}: " if who else "",
        PATH,
        port,
        "; ".join(why) or "no controller pods",
    )
    return None
