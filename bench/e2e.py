"""End-to-end figure on the local cluster: `helm install slurm-cluster` to the first job COMPLETED.

The operator chart is installed first (not timed: it is there before anyone makes a cluster), watching
a fresh namespace. Then the clock starts: `helm install` of slurm-cluster with one small CPU worker
(the jail populated, slurmctld, login, the worker; accounting off, the chart default), the SlurmCluster Ready
(status.phase), then over SSH through the login Service `sbatch --wrap hostname`, retried until the
login answers, and `scontrol show job` polled until COMPLETED. Everything is removed afterwards.

On the same cluster, then: a SlurmCluster edit (`spec.slurmConfig.extraLines`, by kubectl patch) to the
new value in `scontrol show config` on the controller, and in the slurm.conf a worker's slurmd runs
with, with the number of slurmctld restarts and pod replacements it caused; and a deleted child
(the slurm-config ConfigMap) to its return; and the Slurm exporter's RSS and scrape latency, beside the
slurmrestd reads one scrape makes, done directly from the exporter's pod (alternated, 30 each).

Never asserted: figures for the record. Usage (from the repository root): python -m bench.e2e
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from warden_dev.controlplane import REPO_ROOT
from warden_dev.localcluster import (
    Kube,
    LocalCluster,
    LocalClusterError,
    chart_images,
    install_charts,
    new_ssh_key,
    uninstall_charts,
    wait_slurmcluster_ready,
)

NAME = "bench"


def ssh(kube: Kube, namespace: str, key: Path, command: str) -> subprocess.CompletedProcess[str]:
    svc = kube.json("-n", namespace, "get", "service", f"{NAME}-login")
    port = next(p["nodePort"] for p in svc["spec"]["ports"] if p["name"] == "ssh")
    node = kube.json("get", "nodes")["items"][0]
    ip = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    return subprocess.run(
        ["ssh", "-i", str(key), "-p", str(port), "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
         "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
         f"root@{ip}", command],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def first_job(kube: Kube, namespace: str, key: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    job = ""
    while not job:
        out = ssh(kube, namespace, key, "sbatch --parsable --wrap hostname")
        if out.returncode == 0 and out.stdout.strip():
            job = out.stdout.strip().split(";")[0]
        elif time.monotonic() > deadline:
            raise LocalClusterError(f"sbatch never succeeded: {out.stderr.strip()}")
        else:
            time.sleep(0.5)
    state = ""
    while time.monotonic() < deadline:
        out = ssh(kube, namespace, key, f"scontrol show job -o {job}")
        fields = dict(f.split("=", 1) for f in out.stdout.split() if "=" in f)
        state = fields.get("JobState", "")
        if state == "COMPLETED":
            return
        if state in ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            raise LocalClusterError(f"job {job} ended {state}")
        time.sleep(0.5)
    raise LocalClusterError(f"job {job} still {state or 'unknown'} after {timeout:.0f}s")


def until(what: str, check: Callable[[], bool], t0: float, timeout: float = 180) -> float:
    while not check():
        if time.monotonic() - t0 > timeout:
            raise LocalClusterError(f"{what}: not within {timeout:.0f}s")
        time.sleep(0.25)
    return time.monotonic() - t0


def controller_pod(kube: Kube, ns: str) -> tuple[str, int]:
    pod = kube.json("-n", ns, "get", "pod", f"{NAME}-controller-0")
    return pod["metadata"]["uid"], sum(c.get("restartCount", 0) for c in pod["status"].get("containerStatuses", []))


def config_change(kube: Kube, ns: str) -> dict[str, float]:
    """Seconds from the CR edit to the value on the controller and in a worker's file; restarts."""
    before = controller_pod(kube, ns)
    value = str(10 + int(time.time()) % 50)
    patch = json.dumps({"spec": {"slurmConfig": {"extraLines": [f"MessageTimeout={value}"]}}})
    t0 = time.monotonic()
    kube.kubectl("-n", ns, "patch", "slurmcluster", NAME, "--type=merge", "-p", patch)

    def ctld() -> bool:
        out = kube.kubectl("-n", ns, "exec", f"{NAME}-controller-0", "--", "scontrol", "show", "config", check=False)
        return re.search(rf"^MessageTimeout\s*=\s*{value} sec$", out, re.M) is not None

    def worker() -> bool:
        pod = f"{NAME}-worker-cpu-0"
        out = kube.kubectl("-n", ns, "exec", pod, "-c", "slurmd", "--", "cat", "/etc/slurm/slurm.conf", check=False)
        return f"MessageTimeout={value}" in out

    figures = {"controller": until("slurmctld with the new value", ctld, t0)}
    figures["worker"] = until("the worker's slurm.conf", worker, t0)
    after = controller_pod(kube, ns)
    figures["restarts"] = after[1] - before[1]
    figures["replaced"] = float(after[0] != before[0])
    return figures


def child_deleted(kube: Kube, ns: str) -> float:
    cm = f"{NAME}-slurm-config"
    kube.kubectl("-n", ns, "delete", "configmap", cm)
    t0 = time.monotonic()

    def back() -> bool:
        return bool(kube.kubectl("-n", ns, "get", "configmap", cm, "--ignore-not-found", check=False).strip())

    return until(f"ConfigMap {cm} back", back, t0)


def scale_in(kube: Kube, ns: str, key: Path) -> tuple[float, float]:
    """Group 1 -> 2, a 20 s job on the new node, then 2 -> 0 (both nodes leave: the idle one at once,
    the busy one once drained and idle): seconds from the CR edit to the job's end (it is never
    killed), and from the job's end to its pod gone."""
    patch = json.dumps({"spec": {"workerGroups": [{"name": "cpu", "replicas": 2}]}})
    kube.kubectl("-n", ns, "patch", "slurmcluster", NAME, "--type=merge", "-p", patch)

    def usable(n: int) -> bool:
        status = kube.json("-n", ns, "get", "slurmcluster", NAME).get("status", {})
        return int(status.get("slurmNodes", {}).get("usable", 0)) == n

    until("2 usable workers", lambda: usable(2), time.monotonic(), timeout=300)
    leaving = f"{NAME}-worker-cpu-1"
    out = ssh(kube, ns, key, f"sbatch --parsable -w {leaving} -o /dev/null --wrap 'sleep 20'")
    job = out.stdout.strip().split(";")[0]
    until(f"job {job} running", lambda: "RUNNING" in ssh(kube, ns, key, f"squeue -h -j {job} -o %T").stdout,
          time.monotonic())  # fmt: skip
    patch = json.dumps({"spec": {"workerGroups": [{"name": "cpu", "replicas": 0}]}})
    t0 = time.monotonic()
    kube.kubectl("-n", ns, "patch", "slurmcluster", NAME, "--type=merge", "-p", patch)

    def job_done() -> bool:
        return not ssh(kube, ns, key, f"squeue -h -j {job} -t running,completing -o %T").stdout.strip()

    ended = until(f"job {job} ended", job_done, t0, timeout=120)
    t1 = time.monotonic()
    gone = until(f"pod {leaving} gone", lambda: not kube.kubectl(
        "-n", ns, "get", "pod", leaving, "--ignore-not-found", check=False).strip(), t1)  # fmt: skip
    return ended, gone


# Run inside the exporter's pod (the operator's image has the warden package): scrapes of its /metrics
# alternated with the same four slurmrestd reads a scrape makes, done directly; and the exporter's RSS.
EXPORTER_PROBE = """
import json, statistics, time, urllib.request
from pathlib import Path
from warden.slurm.rest import SlurmRest, mint_token
key = Path("/etc/warden/jwt/jwt_hs256.key").read_bytes().strip()
rest = SlurmRest("http://%(restapi)s:6820", lambda: mint_token(key, "slurm"))
def timed(f):
    t = time.monotonic(); f(); return time.monotonic() - t
def scrape():
    with urllib.request.urlopen("http://127.0.0.1:9341/metrics", timeout=30) as r:
        r.read()
def direct():
    rest.ping(); rest.nodes(); rest.jobs(); rest.diag()
scrapes, directs = [], []
for _ in range(%(rounds)d):
    scrapes.append(timed(scrape)); directs.append(timed(direct))
rss = next(int(l.split()[1]) for l in Path("/proc/1/status").read_text().splitlines() if l.startswith("VmRSS:"))
p95 = lambda xs: sorted(xs)[min(len(xs) - 1, int(0.95 * len(xs)))]
print(json.dumps({"rss_mib": rss / 1024, "scrape_median": statistics.median(scrapes), "scrape_p95": p95(scrapes),
                  "direct_median": statistics.median(directs), "direct_p95": p95(directs)}))
"""


def exporter_figures(kube: Kube, ns: str, rounds: int = 30) -> dict[str, float]:
    """The exporter's RSS and scrape latency, beside the slurmrestd reads a scrape is made of."""
    pods = kube.json("-n", ns, "get", "pods", "-l", "app.kubernetes.io/component=exporter")["items"]
    pod = next(p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running")
    script = EXPORTER_PROBE % {"restapi": f"{NAME}-restapi", "rounds": rounds}
    out = kube.kubectl("-n", ns, "exec", pod, "--", "python3", "-c", script, timeout=300)
    figures: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return figures


def measure(
    kube: Kube, tmp: Path
) -> tuple[float, float, dict[str, float], list[dict[str, float]], float, tuple[float, float]]:
    key = new_ssh_key(tmp / "id_ed25519", "warden-bench")
    suffix = uuid.uuid4().hex[:6]
    ns, operator = f"warden-bench-{suffix}", f"op-{suffix}"
    values = {
        "nameOverride": NAME,
        "jail": {"size": "2Gi"},
        "login": {"sshAuthorizedKeys": [key.with_suffix(".pub").read_text().strip()], "service": {"type": "NodePort"}},
        "workerGroups": [
            {
                "name": "cpu",
                "replicas": 1,
                "resources": {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
            }
        ],
    }
    try:
        # the operator (and the CRD) first, untimed: install_charts with no cluster values would
        # install slurm-cluster too, so the cluster release goes in below, on the clock
        install_charts(kube, ns, ns, values, tmp / "values.json", operator_release=operator, crds="chart",
                       cluster=False)  # fmt: skip
        (tmp / "values.json").write_text(json.dumps(values, indent=2) + "\n")
        t0 = time.monotonic()
        chart = REPO_ROOT / "charts" / "slurm-cluster"
        kube.helm("install", NAME, str(chart), "-n", ns, "-f", str(tmp / "values.json"))
        wait_slurmcluster_ready(kube, ns, NAME, timeout=600)
        t1 = time.monotonic()
        first_job(kube, ns, key)
        t2 = time.monotonic()
        exporter = exporter_figures(kube, ns)
        changes = [config_change(kube, ns) for _ in range(3)]
        healed = child_deleted(kube, ns)
        return t1 - t0, t2 - t1, exporter, changes, healed, scale_in(kube, ns, key)
    finally:
        uninstall_charts(kube, ns, NAME, operator, "slurm-operator-crds")


def main() -> int:
    cluster = LocalCluster()
    started = False
    try:
        if not cluster.running():
            up = subprocess.run([sys.executable, "-m", "warden_dev", "cluster"])
            if up.returncode != 0:
                print("bench/e2e: the local cluster did not come up", file=sys.stderr)
                return 1
            started = True
        cluster.import_images(chart_images())
        with tempfile.TemporaryDirectory(prefix="warden-bench-e2e-") as tmp:
            ready, job, exporter, changes, healed, (ended, gone) = measure(cluster.kube(), Path(tmp))
    except LocalClusterError as e:
        print(f"bench/e2e: {e}", file=sys.stderr)
        return 1
    finally:
        if started:
            cluster.down()
    print("\ne2e on the local cluster (one CPU worker, no accounting):")
    print(f"  helm install slurm-cluster -> first job COMPLETED  {ready + job:6.1f} s")
    print(f"    helm install -> SlurmCluster Ready              {ready:6.1f} s")
    print(f"    Ready -> first job COMPLETED (sbatch over SSH)  {job:6.1f} s")
    for i, c in enumerate(changes, 1):
        print(
            f"  CR edit {i} (extraLines) -> slurmctld's running config {c['controller']:5.1f} s, worker's slurm.conf "
            f"{c['worker']:5.1f} s; slurmctld restarts {c['restarts']:.0f}, pod replaced {c['replaced']:.0f}"
        )
    print(f"  deleted child (slurm-config ConfigMap) -> back      {healed:6.1f} s")
    print(f"  Slurm exporter RSS                                  {exporter['rss_mib']:6.1f} MiB")
    print(f"  exporter scrape (GET /metrics in its pod) median {exporter['scrape_median'] * 1000:6.1f} ms, "
          f"p95 {exporter['scrape_p95'] * 1000:6.1f} ms")  # fmt: skip
    ratio = exporter["scrape_median"] / exporter["direct_median"]
    print(f"    its slurmrestd reads done directly     median {exporter['direct_median'] * 1000:6.1f} ms, "
          f"p95 {exporter['direct_p95'] * 1000:6.1f} ms; scrape/direct {ratio:.2f}x")  # fmt: skip
    print(f"  scale-in 2 -> 0 with a 20 s job on one node: CR edit -> job ended (not killed) {ended:5.1f} s,")
    print(f"    last job on a draining node ended -> its pod gone   {gone:5.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
