"""Dataplane benchmark: the cost of the SPANK jail plugin per job step, and populate-jail's copy speed.

1. srun step latency: one cluster from the operator's renderers (dev/warden_dev/dockercluster.py) with
   two one-node worker groups, `jail` (the rendered plugstack.conf) and `nojail` (its plugstack file
   replaced by an empty one, so slurmd loads no plugin). From the controller container, N sequential
   `srun -N1 true` per partition, alternating between them (A B A B ...) so drift hits both alike,
   after 3 warm-up steps each. Timed inside the container (no docker exec in the figure).
2. populate-jail: the rendered populate Job's image copies its /jail-rootfs into a fresh volume
   (rsync -aHAX, as the Job does), against `tar -c | tar -x` of the same tree into another fresh
   volume, alternating, each timed inside its container including a final `sync -f`.

Never asserted: figures for the record. Usage (from the repository root): python -m bench.dataplane [SRUNS] [COPIES]
"""

from __future__ import annotations

import statistics
import sys

from warden_dev.dockercluster import DockerCluster, docker, sweep_stale

SPEC = {
    "login": {"replicas": 0},
    "workerGroups": [
        {"name": "jail", "replicas": 1, "resources": {"limits": {"cpu": "1", "memory": "512Mi"}}},
        {"name": "nojail", "replicas": 1, "resources": {"limits": {"cpu": "1", "memory": "512Mi"}}},
    ],
    "partitions": [
        {"name": "jail", "workerGroups": ["jail"], "default": True},
        {"name": "nojail", "workerGroups": ["nojail"]},
    ],
    "accounting": {"mode": "Disabled"},
    "healthChecks": {"quick": {"enabled": False}},
}
NO_PLUGIN = "# bench: this group runs job steps without the SPANK jail plugin\n"
WARMUP = 3


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def srun_latency(cluster: DockerCluster, runs: int) -> dict[str, list[float]]:
    script = f"""
for i in $(seq 1 {WARMUP}); do srun -p jail -N1 true; srun -p nojail -N1 true; done
for i in $(seq 1 {runs}); do
  for p in jail nojail; do
    s=$(date +%s%N); srun -p $p -N1 true; e=$(date +%s%N); echo "$p $(( (e - s) / 1000 ))"
  done
done
"""
    out = cluster.exec(cluster.names.controller_pod, script, timeout=600).out
    times: dict[str, list[float]] = {"jail": [], "nojail": []}
    for line in out.splitlines():
        part, micros = line.split()
        times[part].append(int(micros) / 1000.0)
    return times


def check_plugin(cluster: DockerCluster) -> tuple[str, str]:
    """What a step sees in each group: the jail's release file or not (proves the toggle works)."""
    probe = "test -f /etc/warden-jail-release && echo in-jail || echo not-in-jail"
    ctl = cluster.names.controller_pod
    return (
        cluster.exec(ctl, f"srun -p jail -N1 sh -c '{probe}'").out.strip(),
        cluster.exec(ctl, f"srun -p nojail -N1 sh -c '{probe}'").out.strip(),
    )


def timed_copy(cluster: DockerCluster, how: str) -> tuple[float, int]:
    """(seconds, bytes) for one copy of /jail-rootfs into a fresh volume."""
    vol = f"{cluster.prefix}-bench-{how}-{len(cluster.inspected)}"
    cluster.create_volume(vol)
    copy = {
        "populate": "warden-populate-jail >/dev/null 2>&1",
        "tar": "tar -C /jail-rootfs --numeric-owner --xattrs -cf - . "
        "| tar -C /mnt/jail --numeric-owner --xattrs -xpf -",
    }[how]
    script = f"""set -e
bytes=$(du -sb --apparent-size /jail-rootfs | cut -f1)
s=$(date +%s%N); {copy}; sync -f /mnt/jail; e=$(date +%s%N)
echo "$bytes $(( (e - s) / 1000 ))"
"""
    args = ["run", "--rm", *cluster.labels_args("bench"), "--mount", f"type=volume,source={vol},target=/mnt/jail"]
    out = docker(*args, "--entrypoint", "bash", cluster.image("populate-jail"), "-c", script, timeout=600).stdout
    cluster.inspected[vol] = {}
    docker("volume", "rm", "-f", vol, check=False)
    size, micros = out.split()
    return int(micros) / 1e6, int(size)


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    copies = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    sweep_stale()
    cluster = DockerCluster(SPEC, name="bench", config_overrides={"plugstack.nojail.conf": NO_PLUGIN})
    try:
        cluster.start(timeout=180)
        print(f"cluster up in {cluster.startup_seconds:.1f}s (populate-jail {cluster.populate_seconds:.1f}s)")
        inside, outside = check_plugin(cluster)
        print(f"step in group 'jail': {inside}; in group 'nojail': {outside}")
        times = srun_latency(cluster, runs)
        print(f"\nsrun -N1 true, {runs} sequential steps per group (ms)")
        print(f"{'':24}{'median':>10}{'p90':>10}{'min':>10}{'max':>10}")
        for label, key in (("with SPANK jail plugin", "jail"), ("without plugin", "nojail")):
            t = times[key]
            print(f"{label:24}{statistics.median(t):10.1f}{percentile(t, 0.9):10.1f}{min(t):10.1f}{max(t):10.1f}")
        ratio = statistics.median(times["jail"]) / statistics.median(times["nojail"])
        p90 = percentile(times["jail"], 0.9) / percentile(times["nojail"], 0.9)
        print(f"{'ratio with/without':24}{ratio:10.2f}{p90:10.2f}")

        results: dict[str, list[float]] = {"populate": [], "tar": []}
        size = 0
        for _ in range(copies):
            for how in ("populate", "tar"):
                seconds, size = timed_copy(cluster, how)
                results[how].append(seconds)
        mb = size / 1e6
        print(f"\ncopy of the jail tree ({mb:.0f} MB apparent), {copies} fresh volumes each")
        print(f"{'':34}{'median s':>10}{'MB/s':>10}{'min s':>10}{'max s':>10}")
        for label, key in (("populate-jail (rsync -aHAX)", "populate"), ("tar -c | tar -x", "tar")):
            t = results[key]
            med = statistics.median(t)
            print(f"{label:34}{med:10.2f}{mb / med:10.1f}{min(t):10.2f}{max(t):10.2f}")
        tput = statistics.median(results["tar"]) / statistics.median(results["populate"])
        print(f"{'throughput populate/tar':34}{tput:10.2f}")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
