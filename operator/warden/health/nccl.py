"""Parse the text that nccl-tests' ``all_reduce_perf`` prints.

The format (nccl-tests ``src/util.cu``; the other ``*_perf`` programs share it)::

    # nccl-tests version 2.17.1 nccl-headers=22703 nccl-library=22703      (newer releases only)
    # nThread 1 nGpus 8 minBytes 536870912 maxBytes 2147483648 step: 2(factor) ...
    #
    # Using devices
    #  Rank  0 Group  0 Pid  4242 on    gpu-0 device  0 [0000:18:00] NVIDIA H100 80GB HBM3
    #
    #                                                       out-of-place                       in-place
    #       size         count      type   redop    root     time   algbw   busbw  #wrong     time ...
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us) ...
       536870912     134217728     float     sum      -1   2398.1  223.87  391.78       0   2391.5 ...
    # Out of bounds values : 0 OK
    # Avg bus bandwidth    : 392.145
    #
    # Collective test concluded: all_reduce_perf

Column positions are read from the ``size count type ...`` header when there is one, so the optional
timestamp and per-iteration columns of newer releases do not shift anything. ``#wrong`` reads ``N/A``
when validation is off (``-c 0``); a value that is not a number becomes ``None``.

NCCL's own log lines (``host:pid:tid [dev] NCCL INFO ...``, ``NCCL WARN``) go to the same stdout and
can land anywhere, even in the middle of a table row (the row's first half is printed before the
collective runs); they are cut out before a row is read, and a row split by them is joined again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Device", "Measurement", "NcclResult", "ParseStatus", "Row", "parse_all_reduce_perf"]


class ParseStatus(StrEnum):
    """What the output as a whole says."""

    OK = "ok"  # table and summary present, no wrong values
    WRONG_VALUES = "wrong_values"  # a #wrong cell or the out-of-bounds count is above zero
    ERROR = "error"  # nccl-tests reported a failure ("Test NCCL failure", "Test failure")
    TRUNCATED = "truncated"  # output started but the "Avg bus bandwidth" line never came
    EMPTY = "empty"  # nothing nccl-tests printed at all


@dataclass(frozen=True)
class Measurement:
    """One half of a table row (out-of-place or in-place); ``None`` where the cell was not a number."""

    time_us: float | None
    algbw_gbps: float | None
    busbw_gbps: float | None
    wrong: int | None


@dataclass(frozen=True)
class Row:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int | None
    out_of_place: Measurement | None
    in_place: Measurement | None


@dataclass(frozen=True)
class Device:
    rank: int
    host: str
    device: int
    name: str


@dataclass(frozen=True)
class NcclResult:
    status: ParseStatus
    avg_busbw_gbps: float | None
    rows: tuple[Row, ...]
    devices: tuple[Device, ...]
    wrong: int  # sum of every #wrong cell plus the out-of-bounds count
    out_of_bounds: int | None
    errors: tuple[str, ...]  # failure lines nccl-tests printed

    @property
    def ok(self) -> bool:
        return self.status is ParseStatus.OK

    @property
    def max_busbw_gbps(self) -> float | None:
        values = [
            m.busbw_gbps
            for r in self.rows
            for m in (r.out_of_place, r.in_place)
            if m is not None and m.busbw_gbps is not None
        ]
        return max(values) if values else None


# "host:pid:tid [dev] NCCL INFO ..." (also WARN, ERROR, TRACE, ABORT); runs to the end of the line.
# The host must start with a letter, so that a row's "-1" root column just before it is kept.
_NCCL_LOG = re.compile(r"[A-Za-z][\w.-]*:\d+:\d+ \[\d+\] NCCL (?:INFO|WARN|ERROR|TRACE|ABORT)\b.*$")
_DEVICE = re.compile(r"^#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+\[[^\]]*\]\s*(.*)$")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
_FAILURE = re.compile(r"\bTest (?:NCCL |CUDA )?failure\b")
_INT = re.compile(r"^-?\d+$")

# The classic table when no header was seen: size count type redop root, then twice time algbw busbw #wrong.
_DEFAULT_COLUMNS = ("size", "count", "type", "redop", "root") + ("time", "algbw", "busbw", "#wrong") * 2
_PREAMBLE = 5  # size count type redop root


def _number(token: str) -> float | None:
    try:
        value = float(token)
    except ValueError:
        return None
    return value if value == value else None  # NaN reads as "not a number"


def _integer(token: str) -> int | None:
    value = _number(token)
    return int(value) if value is not None else None


class _Layout:
    """Where each measured column sits in a row, learnt from the header line."""

    def __init__(self, columns: tuple[str, ...]) -> None:
        self.columns = columns
        halves: list[dict[str, int]] = []
        for i, name in enumerate(columns):
            key = "time" if name in ("time", "cputime") else name
            if key == "time":
                halves.append({})
            if halves and key in ("time", "algbw", "busbw", "#wrong") and key not in halves[-1]:
                halves[-1][key] = i
        self.halves = halves[:2]
        self.has_root = "root" in columns[:_PREAMBLE]
        self.preamble = _PREAMBLE if self.has_root else _PREAMBLE - 1
        self.width = max((i for h in self.halves for i in h.values()), default=0) + 1

    def measurement(self, tokens: list[str], half: int) -> Measurement | None:
        if half >= len(self.halves):
            return None
        cols = self.halves[half]
        if any(i >= len(tokens) for i in cols.values()):
            return None

        def cell(name: str) -> str:
            return tokens[cols[name]] if name in cols else "N/A"

        return Measurement(
            time_us=_number(cell("time")),
            algbw_gbps=_number(cell("algbw")),
            busbw_gbps=_number(cell("busbw")),
            wrong=_integer(cell("#wrong")),
        )

    def row(self, tokens: list[str]) -> Row | None:
        if len(tokens) < self.width or not (_INT.match(tokens[0]) and _INT.match(tokens[1])):
            return None
        root = _integer(tokens[4]) if self.has_root else None
        return Row(
            size_bytes=int(tokens[0]),
            count=int(tokens[1]),
            dtype=tokens[2],
            redop=tokens[3],
            root=root,
            out_of_place=self.measurement(tokens, 0),
            in_place=self.measurement(tokens, 1),
        )


def _header_columns(line: str) -> tuple[str, ...] | None:
    tokens = line.lstrip("#").split()
    if len(tokens) >= 4 and tokens[0] == "size" and tokens[1] == "count":
        return tuple(tokens)
    return None


def _is_cell(token: str) -> bool:
    return token == "N/A" or _number(token) is not None


def _starts_row(tokens: list[str]) -> bool:
    return len(tokens) >= 2 and bool(_INT.match(tokens[0]) and _INT.match(tokens[1]))


def parse_all_reduce_perf(text: str) -> NcclResult:
    """Read ``all_reduce_perf`` output (stdout, optionally with stderr mixed in) into an ``NcclResult``."""
    layout = _Layout(_DEFAULT_COLUMNS)
    rows: list[Row] = []
    devices: list[Device] = []
    errors: list[str] = []
    pending: list[str] = []  # a row whose second half has not arrived yet
    avg: float | None = None
    oob: int | None = None
    saw_avg = False
    saw_output = False

    def flush_pending() -> None:
        if pending:
            row = layout.row(pending)
            if row is not None:
                rows.append(row)
            pending.clear()

    for raw in text.splitlines():
        line = _NCCL_LOG.sub("", raw).rstrip()
        if not line.strip():
            continue
        stripped = line.strip()
        if stripped.startswith("#"):
            if (cols := _header_columns(stripped)) is not None:
                layout = _Layout(cols)
                saw_output = True
            elif m := _DEVICE.match(stripped):
                devices.append(Device(int(m[1]), m[2], int(m[3]), m[4].strip()))
                saw_output = True
            elif m := _AVG.match(stripped):
                flush_pending()
                avg, saw_avg = _number(m[1]), True
            elif m := _OOB.match(stripped):
                flush_pending()
                oob = int(m[1])
            elif stripped.startswith(("# nThread", "# Collective test", "# nccl-tests", "# Using devices")):
                saw_output = True
            continue
        if _FAILURE.search(stripped):
            errors.append(stripped)
            continue
        tokens = stripped.split()
        if pending and len(pending) < layout.width and all(_is_cell(t) for t in tokens):
            pending.extend(tokens)  # the rest of a row that a log line interrupted
        elif _starts_row(tokens):
            flush_pending()
            saw_output = True
            pending.extend(tokens)
        else:
            continue
        if len(pending) >= layout.width:
            flush_pending()
    flush_pending()

    wrong = sum(
        m.wrong for r in rows for m in (r.out_of_place, r.in_place) if m is not None and m.wrong is not None
    ) + (oob or 0)
    if errors:
        status = ParseStatus.ERROR
    elif wrong > 0:
        status = ParseStatus.WRONG_VALUES
    elif not saw_output and not rows and not saw_avg:
        status = ParseStatus.EMPTY
    elif not saw_avg or avg is None:
        status = ParseStatus.TRUNCATED
    else:
        status = ParseStatus.OK
    return NcclResult(
        status=status,
        avg_busbw_gbps=avg,
        rows=tuple(rows),
        devices=tuple(devices),
        wrong=wrong,
        out_of_bounds=oob,
        errors=tuple(errors),
    )
