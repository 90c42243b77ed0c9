"""End-to-end figure on the local cluster: `helm install slurm-cluster` to the first job COMPLETED.

The operator chart is installed first (not timed: it is there before anyone makes a cluster), watching
a fresh namespace. Then the clock starts: `helm install` of slurm-cluster with one small CPU worker
(the jail populated, slurmctld, login, the worker; accounting off, the chart default), the SlurmCluster Ready
(status.phase), then over SSH through the login Service `sbatch --wrap hostname`, retried until the
login answers, and `scontrol show job` polled until COMPLETED. Everything is removed afterwards.

Never asserted: figures for the record. Usage: python bench/e2e.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.localcluster import (  # noqa: E402
    Kube,
    LocalCluster,
    LocalClusterError,
    chart_images,
    install_charts,
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


def measure(kube: Kube, tmp: Path) -> tuple[float, float]:
    key = tmp / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "warden-bench", "-f", str(key)], check=True)
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
        kube.helm("install", NAME, str(ROOT / "charts" / "slurm-cluster"), "-n", ns, "-f", str(tmp / "values.json"))
        wait_slurmcluster_ready(kube, ns, NAME, timeout=600)
        t1 = time.monotonic()
        first_job(kube, ns, key)
        t2 = time.monotonic()
        return t1 - t0, t2 - t1
    finally:
        for release in (NAME, operator, "slurm-operator-crds"):
            kube.helm("uninstall", release, "-n", ns, "--ignore-not-found", "--wait", check=False)
        kube.kubectl("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)


def main() -> int:
    cluster = LocalCluster()
    started = False
    try:
        if not cluster.running():
            up = subprocess.run(["bash", str(ROOT / "hack" / "localcluster.sh"), "up"])
            if up.returncode != 0:
                print("bench/e2e: the local cluster did not come up", file=sys.stderr)
                return 1
            started = True
        cluster.import_images(chart_images())
        with tempfile.TemporaryDirectory(prefix="warden-bench-e2e-") as tmp:
            ready, job = measure(cluster.kube(), Path(tmp))
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
