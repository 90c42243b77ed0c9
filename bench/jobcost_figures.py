"""The pure part of bench/jobcost.py: the plugstack variants compared, their order, and the figures'
maths (percentiles, ratios, their spread) and table. No Docker here: tests/unit/test_jobcost_bench.py."""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

#: the worker plugstacks compared, all on the same nodes and the same Slurm: Warden's (as rendered for a
#: worker group with containers on: pyxis, then the jail plugin), plain Slurm with pyxis listed but unused,
#: and plain Slurm (no SPANK plugin at all)
WARDEN, PYXIS, PLAIN = "warden", "pyxis", "plain"
VARIANTS = (WARDEN, PYXIS, PLAIN)
PLAIN_TEXT = "# bench: plain Slurm, no SPANK plugin on this node\n"
_PYXIS_LINE = re.compile(r"^(required|optional)\s+\S*spank_pyxis\.so\b")


def plugstacks(rendered: str) -> dict[str, str]:
    """The plugstack.conf of each variant, from the one Warden rendered for the workers' group: Warden's
    unchanged, its pyxis line alone, nothing. Raises ValueError when the rendered file has no pyxis or no
    jail line (the bench would then compare nothing)."""
    lines = rendered.splitlines()
    pyxis = [line for line in lines if _PYXIS_LINE.match(line)]
    jail = [line for line in lines if re.match(r"^(required|optional)\s+\S*spank_jail\.so\b", line)]
    if len(pyxis) != 1 or len(jail) != 1:
        raise ValueError(f"expected one pyxis and one jail plugin line in the rendered plugstack.conf:\n{rendered}")
    return {
        WARDEN: rendered,
        PYXIS: f"# bench: plain Slurm with pyxis listed, no Warden plugin\n{pyxis[0]}\n",
        PLAIN: PLAIN_TEXT,
    }


def rounds(variants: Sequence[str], count: int) -> list[list[str]]:
    """The order of `count` rounds: every variant once a round, each round starting one further along
    (A B C, B C A, C A B, ...), so neither drift nor a warm cache after a switch favours one of them."""
    n = len(variants)
    return [[variants[(r + i) % n] for i in range(n)] for r in range(count)]


def percentile(values: Sequence[float], p: float) -> float:
    """The p-quantile (0..1) with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    k = (len(ordered) - 1) * p
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def timings(out: str, tag: str = "t") -> list[float]:
    """Milliseconds from the `<tag> <microseconds>` lines a timed shell loop printed (other lines,
    srun's own messages among them, are not figures)."""
    return [int(m) / 1000.0 for m in re.findall(rf"^{re.escape(tag)} (\d+)$", out, re.M)]


@dataclass
class Row:
    """One figure measured for every variant, in rounds: `samples[variant][round]` holds that round's
    values (latencies: many; a throughput: one). `higher_is_better`: a rate (jobs/s), else a time."""

    label: str
    unit: str
    higher_is_better: bool = False
    stat: str = "median"  # or "p99": which figure of each round's values, and of all of them
    samples: dict[str, list[list[float]]] = field(default_factory=dict)

    def add(self, variant: str, values: Sequence[float]) -> None:
        if values:
            self.samples.setdefault(variant, []).append(list(values))

    def figure(self, values: Sequence[float]) -> float:
        return percentile(values, 0.99) if self.stat == "p99" else statistics.median(values)

    def value(self, variant: str) -> float | None:
        rounds_ = self.samples.get(variant)
        return self.figure([v for r in rounds_ for v in r]) if rounds_ else None

    def cost(self, variant: str, base: str) -> float | None:
        """Warden's cost against `base` as a ratio > 1 when Warden is slower: time/time, or rate/rate
        inverted (base jobs/s over Warden's), so every ratio reads the same way."""
        a, b = self.value(variant), self.value(base)
        if a is None or b is None or a <= 0 or b <= 0:
            return None
        return b / a if self.higher_is_better else a / b

    def spread(self, variant: str, base: str) -> tuple[float, float] | None:
        """The cost ratio round by round (pairs measured next to each other): its min and max."""
        a, b = self.samples.get(variant, []), self.samples.get(base, [])
        pairs = [(self.figure(x), self.figure(y)) for x, y in zip(a, b, strict=False) if x and y]
        ratios = [(q / p if self.higher_is_better else p / q) for p, q in pairs if p > 0 and q > 0]
        return (min(ratios), max(ratios)) if ratios else None


def _cell(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def table(rows: Sequence[Row], variants: Sequence[str] = VARIANTS, notes: Mapping[str, str] | None = None) -> str:
    """The bench's output: a line per row, each variant's absolute figure, then Warden's cost against each
    other variant (x, > 1: Warden slower) with its spread over the rounds in brackets."""
    others = [v for v in variants if v != WARDEN]
    head = f"{'':52}" + "".join(f"{v:>10}" for v in variants)
    head += "".join(f"{'warden/' + v:>26}" for v in others)
    lines = [head]
    for row in rows:
        line = f"{row.label + ' (' + row.unit + ')':52}" + "".join(f"{_cell(row.value(v)):>10}" for v in variants)
        for base in others:
            cost, spread = row.cost(WARDEN, base), row.spread(WARDEN, base)
            cell = _cell(cost, "{:.2f}x")
            if spread is not None and len(row.samples.get(WARDEN, [])) > 1:
                cell += f" [{spread[0]:.2f}-{spread[1]:.2f}]"
            line += f"{cell:>26}"
        lines.append(line)
    for key, text in (notes or {}).items():
        lines.append(f"  {key}: {text}")
    return "\n".join(lines)
