#!/usr/bin/env bash
# Dataplane figures (issue 4): srun step latency with and without the SPANK jail plugin, and
# populate-jail throughput against `tar -c | tar -x` of the same tree. Printed, never asserted.
# Needs Docker and the images (make images).
set -euo pipefail
cd "$(dirname "$0")/.."
hack/docker.sh ensure >/dev/null
"${PY:-python3}" -m bench.dataplane "${WARDEN_BENCH_SRUNS:-30}" "${WARDEN_BENCH_COPIES:-5}"
