"""Kubernetes resource quantities (`4`, `500m`, `16Gi`, `1e3`), read exactly.

One parser for the spec model (which refuses what it cannot read, or what is out of range, naming the
field) and the renderers (which turn CPU and memory limits into Slurm's CPUs and RealMemory). Decimal
arithmetic: no float overflow (`1e999`), no rounding surprises (`0.1Gi`).
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

# The grammar Kubernetes accepts, with the exponent kept to two digits (anything larger is no size a
# cluster has). RE2 (CEL) and Python read it alike.
PATTERN = r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]{1,2})?$"
_SYNTAX = re.compile(PATTERN)

_SUFFIX = {
    "Ki": Decimal(2**10), "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
    "Pi": Decimal(2**50), "Ei": Decimal(2**60),
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
    "P": Decimal(10**15), "E": Decimal(10**18),
}  # fmt: skip

#: the largest value Kubernetes itself keeps in a quantity (int64)
MAX = Decimal(2**63 - 1)
MEBIBYTE = Decimal(2**20)


def parse(text: str) -> Decimal:
    """The value of a quantity; ValueError naming what is wrong."""
    match = _SYNTAX.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a quantity (e.g. `4`, `500m`, `16Gi`)")
    number, _, suffix = match.groups()
    suffix = suffix or ""
    try:
        if suffix[:1] in ("e", "E") and suffix not in _SUFFIX:
            value = Decimal(number) * Decimal(10) ** int(suffix[1:])
        else:
            value = Decimal(number) * _SUFFIX[suffix]
    except InvalidOperation as e:  # pragma: no cover - the pattern admits only numbers
        raise ValueError(f"{text!r} is not a quantity") from e
    if value > MAX:
        raise ValueError(f"{text!r} is larger than Kubernetes allows (2^63-1)")
    return value


def whole_cpus(text: str) -> int:
    """Whole CPUs in a CPU quantity (`4`, `4000m`); fractions round down, except that a limit under one
    CPU (`500m`) is one: a Slurm node has at least one CPU, and none known would let slurmd count the
    host's. Zero stays zero."""
    value = parse(text)
    return 1 if 0 < value < 1 else int(value)


def mebibytes(text: str) -> int:
    """A memory quantity in whole MiB (Slurm's RealMemory unit); fractions round down."""
    return int(parse(text) / MEBIBYTE)
