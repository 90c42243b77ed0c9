"""The Grafana dashboard the slurm-operator chart ships, read as its PromQL queries (pure).

``load_dashboard`` reads charts/slurm-operator/dashboards/warden-slurm.json, ``dashboard_expressions``
lists every query in it (panels, panels of collapsed rows, query variables) and
``promql_metric_names`` the metrics one expression selects, from a small tokenizer: identifiers that
are not functions, aggregations, keywords or label names (``by (...)``, ``on (...)``, ``group_left
(...)`` lists, label matchers, strings, the label argument of Grafana's ``label_values``).
tests/unit/test_dashboard.py checks the names against the code, tests/e2e against a real scrape.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "slurm-operator"
DASHBOARD_FILE = "dashboards/warden-slurm.json"


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


AGGREGATIONS = _words("sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio")
FUNCTIONS = _words(
    """abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time ceil changes clamp clamp_max
    clamp_min cos cosh count_over_time day_of_month day_of_week day_of_year days_in_month deg delta deriv
    double_exponential_smoothing exp floor histogram_avg histogram_count histogram_fraction histogram_quantile
    histogram_stddev histogram_stdvar histogram_sum holt_winters hour idelta increase irate label_join
    label_replace last_over_time ln log10 log2 mad_over_time max_over_time min_over_time minute month pi
    predict_linear present_over_time quantile_over_time rad rate resets round scalar sgn sin sinh sort
    sort_by_label sort_by_label_desc sort_desc sqrt stddev_over_time stdvar_over_time sum_over_time tan tanh
    time timestamp vector year"""
)
#: Grafana's template-variable functions for Prometheus (``label_values(metric, label)``...)
GRAFANA_FUNCTIONS = _words("label_values label_names metrics query_result")
#: modifiers followed by a parenthesised list of label names
LABEL_LIST_MODIFIERS = _words("by without on ignoring group_left group_right")
KEYWORDS = LABEL_LIST_MODIFIERS | _words("and or unless bool offset atan2 inf nan")

_TOKEN = re.compile(
    r"""(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
      | (?P<matchers>\{(?:[^{}"'`]|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)*\})
      | (?P<range>\[[^\[\]]*\])
      | (?P<variable>\$\{?\w+\}?)
      | (?P<number>\d[\w.]*(?:[eE][-+]?\d+)?)
      | (?P<ident>[A-Za-z_:][\w:]*)
      | (?P<space>\s+)
      | (?P<other>.)""",
    re.VERBOSE | re.DOTALL,
)
_NAME_MATCHER = re.compile(r"""__name__\s*=\s*"([A-Za-z_:][\w:]*)\"""")
_OPEN, _CLOSE, _COMMA = ("other", "("), ("other", ")"), ("other", ",")


@dataclass(frozen=True)
class Selector:
    """One vector selector: the metric's name and its label matchers (``{...}``, or ``""``)."""

    name: str
    matchers: str


def _tokens(expr: str) -> list[tuple[str, str]]:
    return [(m.lastgroup or "other", m.group()) for m in _TOKEN.finditer(expr) if m.lastgroup != "space"]


def _closing(tokens: list[tuple[str, str]], start: int) -> int:
    """Index of the ``)`` closing the ``(`` at ``start``."""
    depth = 0
    for i in range(start, len(tokens)):
        if tokens[i] == _OPEN:
            depth += 1
        elif tokens[i] == _CLOSE:
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"unbalanced parentheses after token {start}: {tokens}")


def promql_selectors(expr: str) -> list[Selector]:
    """The vector selectors of a PromQL expression (or of Grafana's ``label_values(...)``)."""
    tokens = _tokens(expr)
    out: list[Selector] = []
    skip: set[int] = set()
    for i, (kind, text) in enumerate(tokens):
        if i in skip:
            continue
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ("end", "")
        if kind == "matchers":  # a selector with its name among the matchers: {__name__="x"}
            named = _NAME_MATCHER.search(text)
            if named:
                out.append(Selector(named.group(1), text))
            continue
        if kind != "ident":
            continue
        if text in LABEL_LIST_MODIFIERS and nxt == _OPEN:
            skip.update(range(i + 1, _closing(tokens, i + 1) + 1))
            continue
        if text in KEYWORDS or text in AGGREGATIONS:
            continue
        if nxt == _OPEN:
            if text in GRAFANA_FUNCTIONS:
                # label_values(metric, label) / label_values(label): the last argument names a label
                end = _closing(tokens, i + 1)
                commas = [j for j in range(i + 2, end) if tokens[j] == _COMMA]
                skip.update(range(commas[-1] if commas else i + 2, end))
            continue  # a function call
        out.append(Selector(text, nxt[1] if nxt[0] == "matchers" else ""))
    return out


def promql_metric_names(expr: str) -> set[str]:
    """The metrics a PromQL expression selects."""
    return {s.name for s in promql_selectors(expr)}


def promql_functions(expr: str) -> set[str]:
    """Identifiers called like functions (``name(``), and aggregations (also those with ``by (...)``)."""
    tokens = _tokens(expr)
    called = set()
    for i, (kind, text) in enumerate(tokens[:-1]):
        if kind == "ident" and text not in LABEL_LIST_MODIFIERS and (tokens[i + 1] == _OPEN or text in AGGREGATIONS):
            called.add(text)
    return called


def load_dashboard() -> dict[str, Any]:
    out: dict[str, Any] = json.loads((CHART / DASHBOARD_FILE).read_text())
    return out


def dashboard_panels(board: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside (collapsed) rows included."""
    for panel in board["panels"]:
        yield panel
        yield from panel.get("panels", [])


def dashboard_expressions(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) of every query: panel targets, then query variables (``variable <name>``)."""
    out = []
    for panel in dashboard_panels(board):
        for target in panel.get("targets", []):
            out.append((f"panel {panel['title']!r} {target['refId']}", str(target["expr"])))
    for var in board["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            out.append((f"variable {var['name']}", str(query)))
    return out
