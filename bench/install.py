"""Installing and upgrading Warden as a platform team does, on the local cluster and its registry.

1. `make up` (``python -m warden_dev up``: the cluster, the images built when missing, pushed to the
   registry beside the node, the three charts installed from it, the kubelet pulling every image, the
   demo SlurmCluster Ready) on a machine whose registry is empty (cold: every image and chart pushed),
   then again after `make down` with the registry holding them (warm). The images are built before the
   first run, so neither figure holds an image build.
2. On that cluster, the operator upgraded by `helm upgrade` (a new pod: a changed annotation) until the
   new operator pod is Ready and has taken the cluster over (its first Reconciled Event about it).

Printed, never asserted. The local cluster is down before and after. Usage: python -m bench.install
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

from warden_dev.controlplane import REPO_ROOT, cache_dir
from warden_dev.localcluster import (
    DEMO_NAME,
    NAMESPACE_DEMO,
    NAMESPACE_OPERATOR,
    REGISTRY,
    LocalCluster,
    chart_args,
    registry_dir,
)


def _dev(command: str, log: Path) -> float:
    """Seconds ``python -m warden_dev <command>`` took (its output to ``log``)."""
    t0 = time.monotonic()
    with log.open("a") as out:
        done = subprocess.run([sys.executable, "-m", "warden_dev", command], cwd=REPO_ROOT, stdout=out, stderr=out)
    if done.returncode != 0:
        sys.exit(f"python -m warden_dev {command} failed; see {log}")
    return time.monotonic() - t0


def _operator_taken_over(cluster: LocalCluster, old: set[str], since: str) -> str | None:
    """The operator pod that replaced those in ``old`` and acts, once Ready and the demo reconciled: its
    Reconciled Event posted, or the previous one's counted up (the same words: its series moved)."""
    pods = cluster.kube().json("-n", NAMESPACE_OPERATOR, "get", "pods", "-l", "app.kubernetes.io/component=operator")
    for pod in pods["items"]:
        name = pod["metadata"]["name"]
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))
        if name in old or pod["metadata"].get("deletionTimestamp") or not ready:
            continue
        events = cluster.kube().json("-n", NAMESPACE_DEMO, "get", "events.events.k8s.io")["items"]
        if any(e["reason"] == "Reconciled" and e["regarding"]["name"] == DEMO_NAME
               and ((e.get("reportingInstance") == name and e["eventTime"] > since)
                    or (e.get("series") or {}).get("lastObservedTime", "") > since) for e in events):  # fmt: skip
            return str(name)
    return None


def main() -> None:
    log = Path(cache_dir()) / "bench-install.log"
    log.unlink(missing_ok=True)
    cluster = LocalCluster()
    subprocess.run(["hack/images.sh"], cwd=REPO_ROOT, check=True, stdout=subprocess.DEVNULL)
    _dev("down", log)
    shutil.rmtree(registry_dir(), ignore_errors=True)
    (Path(cache_dir()) / "push" / "stamps").unlink(missing_ok=True)
    cold = _dev("up", log)
    _dev("down", log)
    warm = _dev("up", log)

    kube = cluster.kube()
    pods = kube.json("-n", NAMESPACE_OPERATOR, "get", "pods", "-l", "app.kubernetes.io/component=operator")
    old = {str(p["metadata"]["name"]) for p in pods["items"]}  # the leader and its standby
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    t0 = time.monotonic()
    kube.helm("upgrade", "slurm-operator", *chart_args(REGISTRY, "slurm-operator"), "-n", NAMESPACE_OPERATOR,
              "--reuse-values", "--set-string", f"podAnnotations.bench/upgraded={int(time.time())}")  # fmt: skip
    helm = time.monotonic() - t0
    deadline = time.monotonic() + 600
    while (new := _operator_taken_over(cluster, old, since)) is None:
        if time.monotonic() > deadline:
            sys.exit("the upgraded operator did not take the cluster over within 600 s")
        time.sleep(0.5)
    taken = time.monotonic() - t0
    _dev("down", log)

    print("Installing Warden from its registry on the local cluster (make up: cluster, push, charts, pulls, Ready)")
    print(f"  cold (registry empty)       {cold:7.0f} s")
    print(f"  warm (registry holds all)   {warm:7.0f} s   warm/cold {warm / cold:.2f}")
    print("helm upgrade of the operator (a new pod) to the new operator Ready and reconciling the cluster")
    print(f"  helm upgrade returned       {helm:7.1f} s")
    print(f"  taken over ({new})  {taken:7.1f} s")


if __name__ == "__main__":
    main()
