#!/usr/bin/env bash
# Operator RSS and time-to-converge for a SlurmCluster with 1,000 kwok worker nodes (issue 3).
set -euo pipefail
cd "$(dirname "$0")/.."
hack/build-k8s-bins.sh >/dev/null
"${PY:-python3}" -m bench.operator_scale "${WARDEN_BENCH_WORKERS:-1000}"
