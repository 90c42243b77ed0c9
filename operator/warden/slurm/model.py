"""What Slurm says, as values: node and job records, their states, hostlists, scheduler statistics,
and the errors of talking to Slurm, whichever way (``warden.slurm.cli``, ``warden.slurm.rest``).

Node records come from ``scontrol show node --json`` or slurmrestd's ``/nodes`` (data_parser v0.0.42,
Slurm 24.11 and 26.05): each node has ``state`` as a list of flags (``["IDLE", "DRAIN"]``, ``["MIXED",
"PLANNED"]``, ``["DOWN", "NOT_RESPONDING"]``), ``reason`` (kept by Slurm after a RESUME, so it only means
something while the node is drained or down), ``gres`` (``gpu:h100:8(S:0-1)``) and ``features`` (a list).
Who drained a node is read from its reason by ``warden.slurm.reasons``.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

BASE_STATES = frozenset({"IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN"})
BUSY_STATES = frozenset({"ALLOCATED", "MIXED"})
# Flags that make a node unusable, whoever set them.
UNAVAILABLE_FLAGS = frozenset({"NOT_RESPONDING", "POWERED_DOWN", "POWERING_DOWN", "POWERING_UP", "REBOOT_ISSUED"})


class SlurmError(Exception):
    """A Slurm command failed; ``str()`` names the command and what it printed on stderr."""


class SlurmParseError(SlurmError):
    pass


class SlurmNodeUnknown(SlurmParseError):
    """slurmctld does not know the node (a dynamic node that has not registered yet, or is gone)."""


_GRES_ITEM = re.compile(r"^gpu(?::[^:(]+)?:(\d+)")


def gpu_count(gres: str) -> int:
    """GPUs in a gres string: ``gpu:8``, ``gpu:h100:4(S:0),gpu:h100:4(S:1)``, ``(null)`` (0)."""
    total = 0
    # Split on commas that start a new item, not those inside "(S:0,1)".
    for item in re.split(r",(?![^(]*\))", gres):
        m = _GRES_ITEM.match(item.strip())
        if m:
            total += int(m[1])
    return total


@dataclass(frozen=True, slots=True)
class Node:
    """One node record. Ten thousand of them are held by a sync round (and the round before it, which the
    WorkerSet controller still reads): slots, and values shared between records (``_Shared``)."""

    name: str
    state: str  # base state: IDLE, ALLOCATED, MIXED, DOWN, ...
    flags: frozenset[str]  # DRAIN, NOT_RESPONDING, COMPLETING, PLANNED, ...
    reason: str
    gres: str
    features: tuple[str, ...]
    partitions: tuple[str, ...]
    cpus: int = 0
    alloc_cpus: int = 0
    gres_used: str = ""  # ``gpu:h100:2(IDX:0-1)``: the GPUs jobs hold now
    version: str = ""  # the slurmd release the node registered with (``26.05.5``); "" when not reported
    topology: str = ""  # where it is placed (``default:b1``); data_parser v0.0.44 on, "" before or when none
    extra: str = ""  # the node's Extra: a Warden worker records there the config its slurmd runs (confighash)
    slurmd_started: int = 0  # when its slurmd (last) started, Unix time: a reconfigure starts it again in place

    @property
    def gpus(self) -> int:
        return gpu_count(self.gres)

    @property
    def gpus_used(self) -> int:
        return gpu_count(self.gres_used)

    @property
    def drained(self) -> bool:
        """Drained or draining (DRAIN flag set): no new jobs start here."""
        return "DRAIN" in self.flags

    @property
    def down(self) -> bool:
        return self.state in ("DOWN", "ERROR", "FUTURE") or bool(self.flags & UNAVAILABLE_FLAGS)

    @property
    def busy(self) -> bool:
        return self.state in BUSY_STATES or "COMPLETING" in self.flags

    @property
    def held_reason(self) -> str:
        """The reason while the node is drained or DOWN, else ``""``: Slurm keeps the text after a
        RESUME, and a node that is merely NOT_RESPONDING (as every node is for a moment after RESUME)
        still shows it."""
        return self.reason if (self.drained or self.state == "DOWN") else ""

    def describe_state(self) -> str:
        return "+".join([self.state, *sorted(self.flags)])


def _str_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, list):
        return tuple(str(v) for v in value if str(v))
    if isinstance(value, str) and value not in ("", "(null)"):
        return tuple(v for v in value.split(",") if v)
    return ()


class _Shared:
    """One instance of each equal value (state words, reasons, gres, feature and partition lists) across
    the records of one document: most nodes of a cluster say the same things."""

    def __init__(self) -> None:
        self._seen: dict[Any, Any] = {}

    def __call__(self, value: Any) -> Any:
        return self._seen.setdefault(value, value)


def _node_from_json(raw: dict[str, Any], same: _Shared | None = None) -> Node:
    same = same or _Shared()
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise SlurmParseError(f"node without a name: {str(raw)[:200]}")
    words = [w.upper() for w in _str_list(raw.get("state"))]
    words += [w.upper() for w in _str_list(raw.get("state_flags"))]  # data_parser before v0.0.40
    base = next((w for w in words if w in BASE_STATES), "UNKNOWN")
    reason = raw.get("reason")
    gres = raw.get("gres")
    gres_used = raw.get("gres_used")
    version = raw.get("version")
    topology = raw.get("topology")
    extra = raw.get("extra")
    return Node(
        name=name,
        state=same(base),
        flags=same(frozenset(w for w in words if w != base)),
        reason=same(reason if isinstance(reason, str) else ""),
        gres=same(gres if isinstance(gres, str) and gres != "(null)" else ""),
        features=same(_str_list(raw.get("features"))),
        partitions=same(_str_list(raw.get("partitions"))),
        cpus=_count(raw.get("cpus"), f"node {name}: cpus"),
        alloc_cpus=_count(raw.get("alloc_cpus"), f"node {name}: alloc_cpus"),
        gres_used=same(gres_used if isinstance(gres_used, str) and gres_used != "(null)" else ""),
        version=same(version if isinstance(version, str) and version != "(null)" else ""),
        topology=same(topology if isinstance(topology, str) and topology != "(null)" else ""),
        extra=same(extra if isinstance(extra, str) and extra != "(null)" else ""),
        slurmd_started=_time(raw.get("slurmd_start_time")),
    )


def _time(raw: Any) -> int:
    """A time as data_parser writes it (``{"set": true, "number": t}`` or a plain number); 0 when unset or
    unreadable (a field only reported, never acted on blindly)."""
    if isinstance(raw, dict):
        raw = raw.get("number", 0) if raw.get("set", True) and not raw.get("infinite") else 0
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0 else 0


def _count(raw: Any, what: str) -> int:
    """A count as data_parser writes it: a plain number or ``{"set": true, "number": n}``; absent: 0."""
    if isinstance(raw, dict):
        raw = raw.get("number", 0) if raw.get("set", True) and not raw.get("infinite") else 0
    if raw is None:
        return 0
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
        raise SlurmParseError(f"{what} is not a count: {raw!r}")
    return raw


def parse_nodes_json(text: str) -> list[Node]:
    """Nodes from ``scontrol show node --json``."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise SlurmParseError(f"scontrol printed no JSON: {e}: {text[:200]!r}") from e
    return nodes_from_doc(doc)


def nodes_from_doc(doc: Any) -> list[Node]:
    """Nodes from a data_parser document (``scontrol ... --json``, slurmrestd's ``/nodes``)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        raise SlurmParseError(f"no 'nodes' list in Slurm's JSON: {str(doc)[:200]!r}")
    errors = doc.get("errors") or []
    if errors:
        raise SlurmParseError(f"Slurm reported errors: {errors}")
    same = _Shared()
    return [_node_from_json(n, same) for n in doc["nodes"] if isinstance(n, dict)]


_WHITESPACE = " \t\n\r"


class _Reader:
    """A JSON text arriving in pieces, read forward: ``buf[pos:]`` is what is not consumed yet. Only the
    piece being decoded and what follows it are held, never the whole text."""

    def __init__(self, pieces: Iterable[str]) -> None:
        self._pieces = iter(pieces)
        self.buf, self.pos, self.ended = "", 0, False

    def more(self) -> bool:
        """Append the next piece (dropping what was consumed); False once the text has ended."""
        for piece in self._pieces:
            if piece:
                self.buf, self.pos = self.buf[self.pos :] + piece, 0
                return True
        self.ended = True
        return False

    def peek(self, also: str = "") -> str:
        """The next character that is not whitespace (nor in ``also``), consuming those; "" at the end."""
        while True:
            buf, i = self.buf, self.pos
            while i < len(buf) and (buf[i] in _WHITESPACE or buf[i] in also):
                i += 1
            self.pos = i
            if i < len(buf) or not self.more():
                return buf[i : i + 1] if i < len(buf) else ""

    def expect(self, char: str) -> None:
        got = self.peek()
        if got != char:
            raise SlurmParseError(f"Slurm's JSON: {char!r} expected, found {got or 'the end'!r}")
        self.pos += 1

    def value(self, decoder: json.JSONDecoder) -> Any:
        """Decode the next JSON value. One that runs to the end of what has arrived may go on in the next
        piece (a number, or a value cut in two): it counts only once something follows it or the text ended."""
        self.peek()
        while True:
            try:
                value, end = decoder.raw_decode(self.buf, self.pos)
                if end < len(self.buf) or self.ended:
                    self.pos = end
                    return value
            except json.JSONDecodeError:
                if self.ended:
                    raise
            if not self.more():
                continue  # ended: decode once more, and a value cut short raises


def nodes_from_text(text: str) -> tuple[list[Node], Any]:
    """``nodes_from_pieces`` of one whole text."""
    return nodes_from_pieces([text])


def nodes_from_pieces(pieces: Iterable[str]) -> tuple[list[Node], Any]:
    """Nodes from the text of a data_parser document, as ``nodes_from_doc`` finds them, and the
    document's ``errors`` (for the caller to judge), decoded as the text arrives (slurmrestd's answer
    read in chunks), each node record decoded and converted in turn: ten thousand nodes cost their
    ``Node``s, not the whole text (25 MB) nor a document of dictionaries (tens of megabytes more)."""
    decoder = json.JSONDecoder()
    reader = _Reader(pieces)
    same = _Shared()
    nodes: list[Node] | None = None
    errors: Any = None
    try:
        if reader.peek() != "{":
            raise SlurmParseError(f"Slurm's JSON is no object: {reader.buf[reader.pos : reader.pos + 200]!r}")
        reader.pos += 1
        while reader.peek(",") != "}":
            key = reader.value(decoder)
            reader.expect(":")
            if key == "nodes" and reader.peek() == "[":
                nodes = []
                reader.pos += 1
                while reader.peek(",") != "]":
                    if reader.peek() == "":
                        raise SlurmParseError("Slurm's JSON is cut short in its node list")
                    record = reader.value(decoder)
                    if isinstance(record, dict):
                        nodes.append(_node_from_json(record, same))
                reader.pos += 1
            else:
                value = reader.value(decoder)
                if key == "errors":
                    errors = value
            if reader.peek(",") == "":
                raise SlurmParseError("Slurm's JSON is cut short: no closing '}'")
    except json.JSONDecodeError as e:
        raise SlurmParseError(f"Slurm's JSON is cut short or malformed: {e}") from e
    if nodes is None:
        raise SlurmParseError("no 'nodes' list in Slurm's JSON")
    return nodes, errors


#: the most names one hostlist expression may expand to (a typo like ``n[0-99999999]`` is an error)
HOSTLIST_LIMIT = 65536
_DIGITS = re.compile(r"[0-9]+")


def _hostlist_items(expr: str) -> list[str]:
    """Split at the commas outside brackets; brackets must pair up and not nest."""
    items, depth, start = [], 0, 0
    for i, c in enumerate(expr):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(expr[start:i])
            start = i + 1
        if depth not in (0, 1):
            raise SlurmParseError(f"hostlist {expr!r}: unbalanced or nested brackets")
    if depth:
        raise SlurmParseError(f"hostlist {expr!r}: unbalanced brackets")
    items.append(expr[start:])
    if not all(items):
        raise SlurmParseError(f"hostlist {expr!r}: empty name")
    return items


def _hostlist_range(body: str, expr: str) -> list[str]:
    """``0-2,5`` -> 0 1 2 5; ``01-03`` keeps the width of its lower bound (01 02 03)."""
    out: list[str] = []
    for part in body.split(","):
        lo, dash, hi = part.partition("-")
        if not _DIGITS.fullmatch(lo) or (dash and not _DIGITS.fullmatch(hi)):
            raise SlurmParseError(f"hostlist {expr!r}: bad range {part!r}")
        first, last = int(lo), int(hi if dash else lo)
        if last < first:
            raise SlurmParseError(f"hostlist {expr!r}: range {part!r} runs backwards")
        if len(out) + last - first + 1 > HOSTLIST_LIMIT:
            raise SlurmParseError(f"hostlist {expr!r}: more than {HOSTLIST_LIMIT} names")
        out += [str(n).zfill(len(lo)) for n in range(first, last + 1)]
    return out


def expand_hostlist(expr: str) -> list[str]:
    """Node names in a Slurm hostlist: ``demo-worker-cpu-[0-2,5]``, ``a-1,b-[3-4]``, ``node[01-03]``,
    ``r[1-2]-n[1-2]`` (every combination, in order); ``""`` is none. Raises SlurmParseError."""
    expr = expr.strip()
    if not expr:
        return []
    names: list[str] = []
    for item in _hostlist_items(expr):
        # "r[1-2]-n[3]" -> [["r"], ["1", "2"], ["-n"], ["3"]]: literal text and bracket bodies alternate
        pieces = re.split(r"\[([^\]]*)\]", item)
        parts = [[p] if i % 2 == 0 else _hostlist_range(p, expr) for i, p in enumerate(pieces)]
        if len(names) + math.prod(len(p) for p in parts) > HOSTLIST_LIMIT:
            raise SlurmParseError(f"hostlist {expr!r}: more than {HOSTLIST_LIMIT} names")
        names += ["".join(combo) for combo in itertools.product(*parts)]
    return names


@dataclass(frozen=True)
class Job:
    """A job as slurmctld lists it (slurmrestd's ``/jobs``, data_parser v0.0.42 and v0.0.44).

    The fields after ``cpus`` are what the bridge (``warden.bridge``) reads of its placeholder jobs
    (external jobs, data_parser v0.0.44, Slurm 25.05 on); a record that lacks one (v0.0.42, Slurm 24.11)
    leaves its default."""

    id: int
    #: base state (PENDING, RUNNING, COMPLETED, CANCELLED, ...), or COMPLETING while Slurm is still
    #: cleaning up after the job on its nodes (as squeue shows it: CG)
    state: str
    nodes: tuple[str, ...]  # the nodes allocated to it, expanded; () while pending
    #: epoch seconds: for a running job, its start plus its time limit; None when Slurm sets none
    end_time: float | None
    partition: str = ""
    #: why a pending job waits (``Resources``, ``Priority``, ``ReqNodeNotAvail...``); ``None`` otherwise
    state_reason: str = "None"
    cpus: int = 0
    name: str = ""
    user: str = ""  # the owner's Slurm user name (``user_name``)
    comment: str = ""  # the owner's comment (not ``admin_comment``)
    #: Slurm's job flags as it lists them (``EXTERNAL_JOB``, ``USING_DEFAULT_QOS``, ...)
    flags: tuple[str, ...] = ()
    #: (Slurm node, CPUs allocated on it) in Slurm's order (``job_resources.nodes.allocation``); () while
    #: pending, or when the record does not say
    allocation: tuple[tuple[str, int], ...] = ()
    #: epoch seconds at which slurmctld chose to preempt the job (it then ends at ``end_time``, after the
    #: grace time); None when it was not
    preempt_time: float | None = None


def _epoch(raw: Any, job_id: int, field: str) -> float | None:
    """``{"set": true, "infinite": false, "number": 1700000000}`` (data_parser v0.0.40+) or a number;
    None when unset, infinite or 0."""
    if raw is None:
        return None
    if isinstance(raw, dict):
        if not raw.get("set") or raw.get("infinite"):
            return None
        raw = raw.get("number")
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        raise SlurmParseError(f"job {job_id}: {field} is not a number: {raw!r}")
    return float(raw) if raw > 0 else None


def _allocation(raw: Any, job_id: int) -> tuple[tuple[str, int], ...] | None:
    """``job_resources.nodes.allocation`` as (node, CPUs); None when the record has none (pending)."""
    resources = raw.get("job_resources")
    allocated = resources.get("nodes") if isinstance(resources, dict) else None
    entries = allocated.get("allocation") if isinstance(allocated, dict) else None
    if not isinstance(entries, list) or not entries:
        return None
    out = []
    for entry in entries:
        name = entry.get("name") if isinstance(entry, dict) else None
        if not isinstance(name, str) or not name:
            raise SlurmParseError(f"job {job_id}: an allocated node without a name: {str(entries)[:200]!r}")
        cpus = entry.get("cpus")
        count = cpus.get("count") if isinstance(cpus, dict) else cpus
        out.append((name, _count(count, f"job {job_id}: CPUs on {name}")))
    return tuple(out)


def _text(raw: Any) -> str:
    return raw if isinstance(raw, str) else ""


def _job_from_json(raw: Any) -> Job:
    if not isinstance(raw, dict):
        raise SlurmParseError(f"job entry is not an object: {str(raw)[:200]!r}")
    job_id = raw.get("job_id")
    if isinstance(job_id, bool) or not isinstance(job_id, int):
        raise SlurmParseError(f"job without a numeric job_id: {str(raw)[:200]!r}")
    words = [w.upper() for w in _str_list(raw.get("job_state"))]
    if not words:
        raise SlurmParseError(f"job {job_id}: no job_state: {raw.get('job_state')!r}")
    state = "COMPLETING" if "COMPLETING" in words else words[0]
    allocation = _allocation(raw, job_id)
    if allocation is not None:
        nodes = tuple(name for name, _ in allocation)
    else:
        hostlist = raw.get("nodes") or ""
        if not isinstance(hostlist, str):
            raise SlurmParseError(f"job {job_id}: nodes is not a hostlist string: {hostlist!r}")
        try:
            nodes = tuple(expand_hostlist("" if hostlist == "(null)" else hostlist))
        except SlurmParseError as e:
            raise SlurmParseError(f"job {job_id}: {e}") from e
    reason = raw.get("state_reason")
    return Job(
        id=job_id,
        state=state,
        nodes=nodes,
        end_time=_epoch(raw.get("end_time"), job_id, "end_time"),
        partition=_text(raw.get("partition")),
        state_reason=reason if isinstance(reason, str) and reason else "None",
        cpus=_count(raw.get("cpus"), f"job {job_id}: cpus"),
        name=_text(raw.get("name")),
        user=_text(raw.get("user_name")),
        comment=_text(raw.get("comment")),
        flags=_str_list(raw.get("flags")),
        allocation=allocation or (),
        preempt_time=_epoch(raw.get("preempt_time"), job_id, "preempt_time"),
    )


def jobs_from_doc(doc: Any) -> list[Job]:
    """Jobs from slurmrestd's ``GET /slurm/v0.0.4x/jobs`` (or ``job/<id>``)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), list):
        raise SlurmParseError(f"no 'jobs' list in Slurm's JSON: {str(doc)[:200]!r}")
    errors = doc.get("errors") or []
    if errors:
        raise SlurmParseError(f"Slurm reported errors: {errors}")
    return [_job_from_json(j) for j in doc["jobs"]]


def diag_from_doc(doc: Any) -> dict[str, float]:
    """The scheduler statistics of slurmrestd's ``GET /slurm/v0.0.42/diag`` (what ``sdiag`` prints):
    every number in ``statistics``, nested objects flattened with ``_`` (``schedule_exit_max_job_start``),
    booleans as 0/1; lists (RPCs by type and user) left out."""
    stats = doc.get("statistics") if isinstance(doc, dict) else None
    if not isinstance(stats, dict):
        raise SlurmParseError(f"no 'statistics' object in Slurm's diag JSON: {str(doc)[:200]!r}")
    out: dict[str, float] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, int | float):  # bool is an int
            out[prefix] = float(value)
        elif isinstance(value, dict) and "number" in value and "set" in value:
            if value.get("set") and not value.get("infinite"):
                walk(prefix, value["number"])
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}_{k}", v)

    for key, value in stats.items():
        walk(str(key), value)
    return out


@dataclass(frozen=True)
class Reservation:
    """A reservation as slurmctld holds it: start and end (UNIX times), its nodes, its flags."""

    name: str
    start: int
    end: int
    nodes: tuple[str, ...]
    flags: frozenset[str]

    @property
    def minutes(self) -> int:
        return (self.end - self.start) // 60


def reservations_from_doc(doc: Any) -> list[Reservation]:
    """The reservations of a ``GET reservations`` answer (data_parser v0.0.44)."""
    raw = doc.get("reservations") if isinstance(doc, dict) else None
    out = []
    for r in raw if isinstance(raw, list) else []:
        if not isinstance(r, dict) or not r.get("name"):
            continue
        nodes = r.get("node_list") or ""
        out.append(
            Reservation(
                name=str(r["name"]),
                start=_time(r.get("start_time")),
                end=_time(r.get("end_time")),
                nodes=tuple(expand_hostlist(nodes)) if isinstance(nodes, str) and nodes else (),
                flags=frozenset(str(f) for f in r.get("flags") or ()),
            )
        )
    return out
