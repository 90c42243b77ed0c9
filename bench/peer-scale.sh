#!/usr/bin/env bash
# Scale against the peer (issues 33, 59): Warden, Slinky's slurm-operator (built from its source archive by
# hack/build-slinky.sh, cached outside the repository) and a bare client on one kwok control plane, at
# 1,000 and 10,000 workers (WARDEN_BENCH_PEER_SIZES), every run's room checked before it starts; then
# Warden's Slurm sync over as many nodes (WARDEN_BENCH_PEER_SLURM_SIDE=0 leaves it out).
set -euo pipefail
cd "$(dirname "$0")/.."
hack/build-k8s-bins.sh >/dev/null
hack/build-slinky.sh >/dev/null
# shellcheck disable=SC2086  # the sizes are words
"${PY:-python3}" -m bench.peer_scale ${WARDEN_BENCH_PEER_SIZES:-1000 10000}
