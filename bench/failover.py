"""Backup controllers: how long users cannot submit when the controller pod is deleted or slurmctld hangs.

Two clusters from the operator's renderers (dev/warden_dev/dockercluster.py), one after the other: one
controller, and two (`controller.replicas: 2`, `takeoverSeconds` 10). Per round and cluster, with the
queue idle:

- deletion: SIGTERM to the pod in charge's first process, as the kubelet sends when the pod is deleted,
  and its container started again (its StatefulSet making the pod again);
- hang: SIGSTOP to slurmctld in charge. With one controller nothing but the kubelet's liveness probe
  brings it back: the bench runs the rendered probe as the kubelet would (its period and failure
  threshold, then SIGKILL and a new start; the dataplane has no kubelet). With two, the backup takes
  control and the hung one is fenced by its own pod.

Then `sbatch` from the login node (as root, each try bounded at 15 s) until one is accepted; the figure is
the seconds from the event to that answer. The clusters alternate which goes first each round. Never
asserted: figures for the record. Usage: python -m bench.failover [ROUNDS]
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from collections.abc import Callable

from warden import naming
from warden_dev.dockercluster import DockerCluster, docker, sweep_stale

BASE = {
    "login": {"replicas": 1},
    "workerGroups": [{"name": "cpu", "replicas": 1, "resources": {"limits": {"cpu": "1", "memory": "512Mi"}}}],
    "accounting": {"mode": "Disabled"},
    "healthChecks": {"quick": {"enabled": False}},
}
TAKEOVER_S = 10


def _in_charge(c: DockerCluster) -> str:
    pods = c.names.controller_pods(c.cluster.spec.controller.replicas)
    if len(pods) == 1:
        return pods[0]
    for pod in pods:
        r = c.exec(pod, f"od -An -v -tu8 --endian=big -N16 {naming.STATE_SAVE_LOCATION}/heartbeat", check=False)
        if len(r.out.split()) == 2:
            return pods[int(r.out.split()[1])]
    raise RuntimeError("no controller in charge")


def _until_accepted(c: DockerCluster, t0: float) -> float:
    login = f"{c.names.login}-0"
    while True:
        r = c.exec(login, "timeout 15 sbatch --parsable --wrap true", check=False, timeout=60)
        if r.ok and r.out.strip().isdigit():
            return time.monotonic() - t0
        if time.monotonic() - t0 > 600:
            raise RuntimeError(f"no sbatch accepted in 600 s: {r.err}")


def _liveness(c: DockerCluster, pod: str, stop: threading.Event) -> None:
    """The rendered liveness probe of `pod`, run as the kubelet does until `stop`: after its failure
    threshold, the container is killed and started again."""
    (sts,) = [o for o in c.objects("StatefulSet") if o["metadata"]["name"] == c.names.controller]
    probe = sts["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]
    failures = 0
    while not stop.wait(probe["periodSeconds"]):
        r = c.exec(pod, " ".join(probe["exec"]["command"]), check=False, timeout=probe["timeoutSeconds"] + 5)
        failures = 0 if r.ok else failures + 1
        if failures >= probe["failureThreshold"]:
            docker("kill", c.container(pod), check=False)
            docker("start", c.container(pod))
            failures = 0


def _wait_settled(c: DockerCluster) -> None:
    """Every controller's probe healthy (the one in charge answers, the others stand by)."""
    pods = c.names.controller_pods(c.cluster.spec.controller.replicas)
    deadline = time.monotonic() + 300
    while not all(c.exec(p, f"{naming.SLURMCTLD_HEALTH_CHECK} 8", check=False, timeout=40).ok for p in pods):
        if time.monotonic() > deadline:
            raise RuntimeError("controllers never settled")
        time.sleep(2)


def deletion(c: DockerCluster) -> float:
    _wait_settled(c)
    pod = _in_charge(c)
    t0 = time.monotonic()
    c.exec(pod, "kill -TERM 1", check=False)
    return _until_accepted(c, t0)


def hang(c: DockerCluster) -> float:
    _wait_settled(c)
    pod = _in_charge(c)
    stop = threading.Event()
    kubelet = threading.Thread(target=_liveness, args=(c, pod, stop), daemon=True)
    kubelet.start()
    try:
        t0 = time.monotonic()
        c.exec(pod, "pkill -STOP -of '^slurmctld '")
        return _until_accepted(c, t0)
    finally:
        stop.set()
        c.exec(pod, "pkill -CONT -of '^slurmctld '", check=False)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    sweep_stale()
    clusters = {
        1: DockerCluster(BASE, name="benchone", restart_containers=True, names_fail_fast=True),
        2: DockerCluster(
            {**BASE, "controller": {"replicas": 2, "takeoverSeconds": TAKEOVER_S}},
            name="benchha",
            restart_containers=True,
            names_fail_fast=True,
        ),
    }
    figures: dict[tuple[str, int], list[float]] = {}
    events: dict[str, Callable[[DockerCluster], float]] = {"deletion": deletion, "hang": hang}
    try:
        for c in clusters.values():
            c.start(timeout=240)
        for r in range(rounds):
            order = [1, 2] if r % 2 == 0 else [2, 1]
            for name, event in events.items():
                for n in order:
                    seconds = event(clusters[n])
                    figures.setdefault((name, n), []).append(seconds)
                    print(f"round {r + 1}: {name:8} {n} controller(s): first sbatch accepted after {seconds:.1f} s")
    finally:
        for c in clusters.values():
            c.stop()
    print(f"\nseconds to the first accepted sbatch (median of {rounds}; min-max); takeoverSeconds {TAKEOVER_S}")
    print(f"{'event':10}{'1 controller':>22}{'2 controllers':>22}{'ratio 2/1':>12}")
    for name in events:
        one, two = figures[(name, 1)], figures[(name, 2)]
        cell = [f"{statistics.median(t):6.1f} ({min(t):.1f}-{max(t):.1f})" for t in (one, two)]
        print(f"{name:10}{cell[0]:>22}{cell[1]:>22}{statistics.median(two) / statistics.median(one):12.2f}")


if __name__ == "__main__":
    main()
