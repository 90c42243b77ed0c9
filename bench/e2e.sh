#!/usr/bin/env bash
# Time from `helm install slurm-cluster` to the first job COMPLETED on the local cluster (make up),
# split into install -> SlurmCluster Ready and Ready -> first job COMPLETED. Printed, never asserted.
# Brings the local cluster up when it is down (and takes it down again afterwards); an up cluster is
# used as it is, next to whatever runs there (its own namespace and releases).
set -euo pipefail
cd "$(dirname "$0")/.."
"${PY:-python3}" -m bench.e2e
