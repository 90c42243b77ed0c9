"""Dataplane benchmark: populate-jail's copy speed.

The rendered populate Job's image copies its /jail-rootfs into a fresh volume (rsync -aHAX, as the Job
does), against `tar -c | tar -x` of the same tree into another fresh volume, alternating, each timed
inside its container including a final `sync -f`. (What the jail costs a job step: bench/jobcost.py.)

Never asserted: figures for the record. Usage (from the repository root): python -m bench.dataplane [COPIES]
"""

from __future__ import annotations

import statistics
import sys

from warden_dev.dockercluster import DockerCluster, docker, sweep_stale

SPEC = {
    "login": {"replicas": 0},
    "workerGroups": [{"name": "cpu", "replicas": 1, "resources": {"limits": {"cpu": "1", "memory": "512Mi"}}}],
    "partitions": [{"name": "cpu", "workerGroups": ["cpu"], "default": True}],
    "accounting": {"mode": "Disabled"},
    "healthChecks": {"quick": {"enabled": False}},
}


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
    copies = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    sweep_stale()
    cluster = DockerCluster(SPEC, name="bench")
    try:
        cluster.start(timeout=180)
        print(f"cluster up in {cluster.startup_seconds:.1f}s (populate-jail {cluster.populate_seconds:.1f}s)")
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
