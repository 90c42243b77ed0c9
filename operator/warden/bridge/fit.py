"""Whether a pod may run on a Kubernetes node by the rules kube-scheduler would hold it to (pure): the
node's NoSchedule and NoExecute taints against the pod's tolerations, its nodeSelector, and its required
node affinity. The bridge binds pods itself, so it checks these before every binding: Slurm chose the
node, Kubernetes' rules still say whether the pod may go there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Manifest = dict[str, Any]

#: taint effects that keep a pod off a node (PreferNoSchedule only prefers)
HARD_EFFECTS = ("NoSchedule", "NoExecute")


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' rule: the effect matches (an empty effect matches every one), and the key with Exists (an
    empty key with Exists tolerates every taint) or the key and value with Equal (the default)."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key, operator = toleration.get("key") or "", toleration.get("operator") or "Equal"
    if operator == "Exists":
        return not key or key == taint.get("key")
    return key == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")


def _expression_holds(expr: Mapping[str, Any], values_of: Mapping[str, str]) -> bool:
    key, operator, values = expr.get("key", ""), expr.get("operator", ""), list(expr.get("values") or [])
    have = values_of.get(key)
    if operator == "In":
        return have is not None and have in values
    if operator == "NotIn":
        return have is None or have not in values
    if operator == "Exists":
        return have is not None
    if operator == "DoesNotExist":
        return have is None
    if operator in ("Gt", "Lt") and have is not None and values:
        try:
            mine, theirs = int(have), int(values[0])
        except ValueError:
            return False
        return mine > theirs if operator == "Gt" else mine < theirs
    return False


def _term_holds(term: Mapping[str, Any], labels: Mapping[str, str], name: str) -> bool:
    exprs: Sequence[Mapping[str, Any]] = term.get("matchExpressions") or []
    fields: Sequence[Mapping[str, Any]] = term.get("matchFields") or []
    if not exprs and not fields:
        return False  # an empty term matches no node (Kubernetes' rule)
    return all(_expression_holds(e, labels) for e in exprs) and all(
        _expression_holds(f, {"metadata.name": name}) for f in fields
    )


def why_not(pod_spec: Mapping[str, Any], node: Manifest) -> str | None:
    """Why the pod of ``pod_spec`` may not run on ``node``, or None when it may."""
    name = str(node["metadata"]["name"])
    labels: Mapping[str, str] = node["metadata"].get("labels") or {}
    tolerations: Sequence[Mapping[str, Any]] = pod_spec.get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in HARD_EFFECTS and not any(tolerates(t, taint) for t in tolerations):
            value = f"={taint['value']}" if taint.get("value") else ""
            return f"its taint {taint.get('key')}{value}:{taint.get('effect')}, which the pod does not tolerate"
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return f"its labels do not match the pod's nodeSelector {key}={value}"
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms: Sequence[Mapping[str, Any]] = required.get("nodeSelectorTerms") or []
    if terms and not any(_term_holds(t, labels, name) for t in terms):
        return "it matches none of the pod's required node affinity terms"
    return None
