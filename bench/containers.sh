#!/usr/bin/env bash
# Containers in jobs (docs/containers.md): a node's first pull and import of an image against the next
# run, with enroot's layer cache warm, and a container step's start against a jail step's (ratio,
# alternating in one run). Printed, never asserted. Needs Docker, the images (make images) and the test
# registry and image (make images-test).
set -euo pipefail
cd "$(dirname "$0")/.."
hack/docker.sh ensure >/dev/null
"${PY:-python3}" -m bench.containers "${WARDEN_BENCH_CONTAINER_STEPS:-10}"
