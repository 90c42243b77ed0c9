"""python -m warden_dev: the development clusters from the shell (`make up`, `make down`, docs/local-cluster.md).

    python -m warden_dev up        # everything `make up` does: Debian packages, Docker, Kubernetes binaries,
                                   # the local cluster and its registry, `make images`, the images and charts
                                   # pushed to the registry, the charts installed from it, a Ready SlurmCluster
    python -m warden_dev down      # stop and remove what `up` (and `controlplane up`) made, and only that
    eval "$(python -m warden_dev env)"   # KUBECONFIG and the pinned kubectl/helm on PATH
    python -m warden_dev status    # exit 0 when every component of the local cluster runs
    python -m warden_dev check     # would `up` start here? (another kubelet, its ports, KUBE-*/CNI-* chains, ...)
    python -m warden_dev cluster   # up's first half: packages, Docker, binaries, the cluster (the e2e tier's)
    python -m warden_dev demo      # up's second half: images and charts pushed (hack/push.sh), installed, Ready
    python -m warden_dev deps | pause-image | fake-gpu-plugin
    python -m warden_dev controlplane up|down|env [--nodes N] [--gpu-nodes N]   # a control plane with kwok nodes
    python -m warden_dev vm-node join|leave [--index N]   # a VM node (Debian's kernel) joins the local cluster
    python -m warden_dev vm-node boot|down|image [--index N] [--once]   # boot one alone (no kubelet)
    WARDEN_VM_NODES=N python -m warden_dev up   # `make up NODES=N`: up, then N VM nodes join (down leaves them)

The local cluster needs root; its state (certs, etcd, logs, kubeconfig, the host record) lives in
${WARDEN_LOCALCLUSTER_DIR:-~/.cache/warden/localcluster}, the control plane's in
${WARDEN_CONTROLPLANE_DIR:-~/.cache/warden/controlplane}; its registry (127.0.0.1:5000) keeps what was
pushed in ~/.cache/warden/registry, across `down` (remove that directory to start cold).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from warden_dev import controlplane
from warden_dev.controlplane import REPO_ROOT, ControlPlaneError
from warden_dev.hostcheck import HostInUse
from warden_dev.localcluster import LocalCluster, LocalClusterError, build_fake_gpu_plugin, demo, log

#: Debian packages the local cluster needs
DEBIAN_PACKAGES = ("containerd", "runc", "containernetworking-plugins", "iptables", "ipset", "iproute2",
                   "openssh-client", "gcc", "libc6-dev", "tar", "docker-registry")  # fmt: skip


def missing_packages(packages: Sequence[str] = DEBIAN_PACKAGES) -> list[str]:
    missing = []
    for p in packages:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True, text=True)
        if "ok installed" not in out.stdout:
            missing.append(p)
    return missing


def deps() -> None:
    """Install the Debian packages that are missing."""
    missing = missing_packages()
    if not missing:
        return
    log(f"installing: {' '.join(missing)}")
    script(["apt-get", "update", "-qq"])
    subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], check=True,
                   stdout=subprocess.DEVNULL, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})  # fmt: skip


def script(argv: Sequence[str], quiet: bool = False) -> None:
    """Run a step of the repository's own (hack/..., make) from its root; raise when it fails."""
    proc = subprocess.run(list(argv), cwd=REPO_ROOT, stdout=subprocess.DEVNULL if quiet else sys.stderr)
    if proc.returncode != 0:
        raise LocalClusterError(f"{' '.join(argv)} failed ({proc.returncode})")


def timed(label: str, step: Callable[[], object]) -> None:
    t0 = time.monotonic()
    step()
    log(f"{label}: {time.monotonic() - t0:.0f}s")


def cluster_up(cluster: LocalCluster) -> None:
    """Packages, Docker, the Kubernetes binaries (CoreDNS included), the pause image, the cluster."""
    timed("deps", deps)
    timed("docker", lambda: script(["hack/docker.sh", "ensure"], quiet=True))
    timed("binaries", lambda: script(["hack/build-k8s-bins.sh", "cluster"], quiet=True))

    def start() -> None:
        cluster.ensure_pause_image()
        cluster.up()

    timed("cluster", start)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["controlplane"]:
        return controlplane.main(args[1:], prog="python -m warden_dev controlplane")
    if args[:1] == ["vm-node"]:
        from warden_dev import vmnode

        return vmnode.main(args[1:])
    parser = argparse.ArgumentParser(prog="python -m warden_dev", description=(__doc__ or "").split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=(__doc__ or "").split("\n\n", 1)[1])  # fmt: skip
    commands = ["up", "down", "env", "status", "check", "cluster", "demo", "deps", "pause-image", "fake-gpu-plugin",
                "controlplane", "vm-node"]  # fmt: skip
    parser.add_argument("command", choices=commands)
    ns = parser.parse_args(args)
    cluster = LocalCluster()
    try:
        if ns.command == "up":
            t0 = time.monotonic()
            cluster_up(cluster)
            timed("images", lambda: script(["make", "--no-print-directory", "images"]))
            timed("demo", lambda: demo(cluster))
            nodes = int(os.environ.get("WARDEN_VM_NODES") or 0)
            if nodes:
                from warden_dev import vmimages, vmjoin

                script(["bash", str(REPO_ROOT / "hack" / "install-deps.sh"), "nodes"])  # qemu, nfs-ganesha
                timed(f"{nodes} VM node(s)", lambda: vmjoin.join_all(range(1, nodes + 1), cpus=2,
                                                                    images=vmimages.slurm_images()))  # fmt: skip
            log(f"make up: {time.monotonic() - t0:.0f}s in all")
        elif ns.command == "cluster":
            cluster_up(cluster)
        elif ns.command == "down":
            from warden_dev import vmjoin

            for index in reversed(vmjoin.node_indexes()):  # VM nodes first: they use the cluster's CA and API
                vmjoin.leave(index)
            cluster.down()
            controlplane.main(["down"])
        elif ns.command == "env":
            if not cluster.running():
                raise LocalClusterError("no local cluster is up: python -m warden_dev up")
            print(f"export KUBECONFIG={cluster.kubeconfig}")
            print(f"export PATH={cluster.bin_dir()}:$PATH")
        elif ns.command == "status":
            up = cluster.running()
            print("up" if up else "down")
            return 0 if up else 1
        elif ns.command == "check":
            if cluster.running():
                print(f"warden_dev's local cluster is up ({cluster.state}): the host's node is its own")
                return 0
            cluster.check_host()
            print("the host is free: no other kubelet, its ports, KUBE-*/CNI-* chains or node files")
        elif ns.command == "demo":
            if not cluster.running():
                raise LocalClusterError("no local cluster is up: python -m warden_dev cluster")
            demo(cluster)
        elif ns.command == "deps":
            deps()
        elif ns.command == "pause-image":
            cluster.ensure_pause_image()
        elif ns.command == "fake-gpu-plugin":
            print(build_fake_gpu_plugin())
    except HostInUse as e:
        print(e, file=sys.stderr)
        return 3
    except (LocalClusterError, ControlPlaneError, subprocess.CalledProcessError) as e:
        log(f"ERROR: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
