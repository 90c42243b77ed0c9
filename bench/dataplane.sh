#!/usr/bin/env bash
# Dataplane figures (issue 4): populate-jail throughput against `tar -c | tar -x` of the same tree
# (what the jail costs a job step: bench/jobcost.sh). Printed, never asserted.
# Needs Docker and the images (make images).
set -euo pipefail
cd "$(dirname "$0")/.."
hack/docker.sh ensure >/dev/null
"${PY:-python3}" -m bench.dataplane "${WARDEN_BENCH_COPIES:-5}"
