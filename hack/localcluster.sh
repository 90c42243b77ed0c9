#!/usr/bin/env bash
# A real single-node Kubernetes on this machine, from upstream binaries (docs/local-cluster.md).
#
#   hack/localcluster.sh deps         # Debian packages: containerd, runc, CNI plugins, iptables, ssh
#   hack/localcluster.sh up           # deps + binaries (incl. CoreDNS) + pause image + the cluster
#   hack/localcluster.sh demo         # images into containerd, the three charts, a Ready SlurmCluster
#   hack/localcluster.sh all          # up + make images + demo: what `make up` runs
#   eval "$(hack/localcluster.sh env)"
#   hack/localcluster.sh status | down
#   hack/localcluster.sh fake-gpu-plugin   # go build hack/fakegpu (the stand-in GPU device plugin)
#
# State (certs, etcd, logs, kubeconfig) lives in ${WARDEN_LOCALCLUSTER_DIR:-~/.cache/warden/localcluster};
# containerd, volumes and pods under /var/lib/warden-local, /run/warden-local and /var/lib/kubelet.
# The implementation is tests/support/localcluster.py, the same code the e2e tests use. Needs root.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"
if [[ -z "${PYTHON:-}" ]]; then
    PYTHON=python3
    [[ -x "${ROOT}/.venv/bin/python" ]] && PYTHON="${ROOT}/.venv/bin/python"
fi
export PYTHONPATH="${ROOT}${PYTHONPATH:+:${PYTHONPATH}}"

log() { printf '[localcluster] %s\n' "$*" >&2; }

deps() {
    local pkgs=(containerd runc containernetworking-plugins iptables iproute2 openssh-client gcc libc6-dev tar)
    local missing=() p
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
    done
    if [[ ${#missing[@]} -gt 0 ]]; then
        log "installing: ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

py() { "${PYTHON}" -m tests.support.localcluster "$@"; }

timed() {  # timed LABEL CMD...
    local label="$1" t0
    shift
    t0=$(date +%s)
    "$@"
    log "${label}: $(($(date +%s) - t0))s"
}

up() {
    timed deps deps
    timed "docker" hack/docker.sh ensure
    timed "binaries" hack/build-k8s-bins.sh cluster >/dev/null
    timed "cluster" py up
}

case "${1:-}" in
    deps) deps ;;
    up) up ;;
    demo) py demo ;;
    all)
        t0=$(date +%s)
        up
        timed "images" make --no-print-directory images
        timed "demo" py demo
        log "make up: $(($(date +%s) - t0))s in all"
        ;;
    down | env | status | pause-image | fake-gpu-plugin) py "$1" ;;
    *) echo "usage: $0 {deps|up|demo|all|env|status|down|fake-gpu-plugin}" >&2; exit 2 ;;
esac
