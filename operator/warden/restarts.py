"""Which changes replace pods, and why: pure, old pod template against the newly rendered one.

Slurm configuration never replaces a pod: slurmctld, slurmd and sshd follow their mounted files in
place (`scontrol reconfigure`, SIGHUP). What Slurm cannot take live is what a pod is made of: its
image, resources, environment, volumes. A change there makes the StatefulSet replace its pods, and
the operator says so (Event ``PodsReplaced``) naming the fields, so nobody wonders why slurmctld
restarted.
"""

from __future__ import annotations

from typing import Any

from warden.render.pods import Manifest


def _containers(template: Manifest) -> dict[str, Manifest]:
    spec = template.get("spec") or {}
    return {c["name"]: c for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]}


def _mounts(container: Manifest) -> list[tuple[str, str]]:
    return sorted((m["name"], m["mountPath"]) for m in container.get("volumeMounts") or [])


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def template_changes(old: Manifest, new: Manifest) -> list[str]:
    """What differs between a live pod template and the rendered one, in the fields the operator sets
    (the live one also holds API defaults), as short phrases; [] when the pods stay."""
    out: list[str] = []
    before, after = _containers(old), _containers(new)
    for name in sorted(set(after) - set(before)):
        out.append(f"container {name} added")
    for name in sorted(set(before) - set(after)):
        out.append(f"container {name} removed")
    for name in sorted(set(before) & set(after)):
        b, a = before[name], after[name]
        if b.get("image") != a.get("image"):
            out.append(f"{name}: image {b.get('image')} -> {a.get('image')}")
        if (b.get("resources") or {}) != (a.get("resources") or {}):
            out.append(f"{name}: resources {_short(b.get('resources') or {})} -> {_short(a.get('resources') or {})}")
        old_env = {e["name"]: e.get("value") for e in b.get("env") or []}
        new_env = {e["name"]: e.get("value") for e in a.get("env") or []}
        changed = sorted(k for k in set(old_env) | set(new_env) if old_env.get(k) != new_env.get(k))
        if changed:
            out.append(f"{name}: environment {', '.join(changed)}")
        if _mounts(b) != _mounts(a):
            out.append(f"{name}: volume mounts")
    old_vols = sorted(v["name"] for v in (old.get("spec") or {}).get("volumes") or [])
    new_vols = sorted(v["name"] for v in (new.get("spec") or {}).get("volumes") or [])
    if old_vols != new_vols:
        out.append(f"volumes {', '.join(old_vols)} -> {', '.join(new_vols)}")
    return out
