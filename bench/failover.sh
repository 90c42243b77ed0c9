#!/usr/bin/env bash
# Backup controllers (docs/operations.md, "Backup controllers"): seconds from the controller pod's
# deletion, and from slurmctld in charge hanging (SIGSTOP), to the first sbatch Slurm accepts again, with
# one controller and with two, side by side. Printed, never asserted. Needs Docker and the images
# (make images).
set -euo pipefail
cd "$(dirname "$0")/.."
hack/docker.sh ensure >/dev/null
"${PY:-python3}" -m bench.failover "${WARDEN_BENCH_FAILOVER_ROUNDS:-2}"
