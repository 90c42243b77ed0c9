"""Pods whose slurmd never registered, pure: a worker pod whose slurmd has run ``timeout`` seconds
while slurmctld still lists no node of its name is deleted, so its WorkerSet makes it afresh (a
slurmd that cannot reach slurmctld, or registered under another name, would otherwise sit unseen)."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Pod:
    name: str
    #: seconds slurmd's container has run; None while it is not running
    running_for: float | None
    deleting: bool = False


def overdue(pods: Iterable[Pod], registered: Collection[str], timeout: float) -> list[tuple[str, str]]:
    """(pod, why) for each pod to make afresh; ``registered``: the node names slurmctld listed."""
    out = []
    for pod in sorted(pods, key=lambda p: p.name):
        if pod.deleting or pod.name in registered or pod.running_for is None or pod.running_for <= timeout:
            continue
        out.append((pod.name, f"slurmd has run {pod.running_for:.0f}s without registering with slurmctld"))
    return out
