"""Containers in jobs: what pyxis and enroot cost a job step.

One cluster from the operator's renderers (dev/warden_dev/dockercluster.py) with containers on, one
worker, and the test registry on its network (tests/support/registry.py). As a user of the jail, on the
login node:

1. first pull vs cached: the worker's first `srun --container-image=...` of the test image (digest asked,
   layers downloaded, image file made, container unpacked), then the same step three times more (the
   image file is in the node's store: digest asked, container unpacked). A first run happens once per
   node, user and image, so it is timed once, against the median of the next ones.
2. start latency: N sequential `srun -N1 true` in the jail and `srun -N1 --container-image=... true`,
   alternating (A B A B ...) so drift hits both alike, after one warm-up each. Timed on the login node
   around srun (what the user waits for).

Never asserted: figures for the record. Usage (from the repository root): python -m bench.containers [N]
"""

from __future__ import annotations

import re
import statistics
import sys

from tests.support.jailuser import JailUser
from tests.support.registry import Registry
from warden_dev.dockercluster import DockerCluster, sweep_stale

SPEC = {
    "login": {"replicas": 1},
    "workerGroups": [{"name": "cpu", "replicas": 1, "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}],
    "partitions": [{"name": "cpu", "workerGroups": ["cpu"], "default": True}],
    "accounting": {"mode": "Disabled"},
    "healthChecks": {"quick": {"enabled": False}},
    "containers": {"enabled": True, "allowHttpRegistries": True},
}


def timed(user: JailUser, args: str, times: int = 1) -> list[float]:
    """Seconds each of `times` sequential `srun args true` took, measured on the login node."""
    script = f'for i in $(seq {times}); do s=$(date +%s%N); srun -N1 {args} true; e=$(date +%s%N); ' \
             'echo "took $(( (e - s) / 1000 ))"; done'  # fmt: skip
    out = user.ssh(script, timeout=900)
    return [int(m) / 1e6 for m in re.findall(r"^took (\d+)$", out, re.M)]


def row(label: str, t: list[float]) -> str:
    return f"{label:34}{statistics.median(t):10.2f}{min(t):10.2f}{max(t):10.2f}{len(t):6}"


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    sweep_stale()
    cluster = DockerCluster(SPEC, name="benchctr")
    registry = Registry(cluster)
    try:
        cluster.start(timeout=180)
        registry.start()
        print(f"cluster up in {cluster.startup_seconds:.1f}s; image {registry.reference()}")
        user = JailUser.added_by_root(cluster, "bench")
        image = f"--container-image={registry.reference()}"
        first = timed(user, image)
        again = timed(user, image, 3)
        print("\nimage on a node, seconds (srun -N1 --container-image=... true)")
        print(f"{'':34}{'median':>10}{'min':>10}{'max':>10}{'runs':>6}")
        print(row("first: pull, import, create", first))
        print(row("again: image file cached", again))
        print(f"{'ratio first/again':34}{first[0] / statistics.median(again):10.2f}")

        jail: list[float] = []
        ctr: list[float] = []
        timed(user, "")  # warm-up of the jail step; the container's was `again`
        for _ in range(steps):
            jail += timed(user, "")
            ctr += timed(user, image)
        print(f"\nstep start, seconds, {steps} alternating steps each")
        print(f"{'':34}{'median':>10}{'min':>10}{'max':>10}{'runs':>6}")
        print(row("jail step (srun true)", jail))
        print(row("container step", ctr))
        print(f"{'ratio container/jail':34}{statistics.median(ctr) / statistics.median(jail):10.2f}")
    finally:
        registry.stop()
        cluster.stop()


if __name__ == "__main__":
    main()
