#!/usr/bin/env bash
# The bridge (docs/bridge.md): pods per second from creation to binding through Slurm (the stand-in
# slurmrestd), beside kube-scheduler's rate on the same kwok control plane. Printed, never asserted.
set -euo pipefail
cd "$(dirname "$0")/.."
hack/build-k8s-bins.sh >/dev/null
"${PY:-python3}" -m bench.bridge "${WARDEN_BENCH_BRIDGE_PODS:-1000}"
