"""Pods whose slurmd never registered, pure: a worker pod whose slurmd has run ``timeout`` seconds
while slurmctld still lists no node of its name is deleted, so its WorkerSet makes it afresh (a
slurmd that cannot reach slurmctld, or registered under another name, would otherwise sit unseen)."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from warden.workers.pod import SetPod


def overdue(pods: Iterable[SetPod], registered: Collection[str], timeout: float, now: float) -> list[tuple[str, str]]:
    """(pod, why) for each pod to make afresh; ``registered``: the node names slurmctld listed at ``now``
    (epoch seconds)."""
    out = []
    for pod in sorted(pods, key=lambda p: p.name):
        ran = None if pod.slurmd_started is None else now - pod.slurmd_started
        if pod.deleting or pod.name in registered or ran is None or ran <= timeout:
            continue
        out.append((pod.name, f"slurmd has run {ran:.0f}s without registering with slurmctld"))
    return out
