#!/usr/bin/env bash
# What the jail costs a job (issue 58; docs/operations.md, "What the jail costs a job"): srun latency, steps
# in one allocation, sbatch and array throughput and a container step, Warden's plugstack against plain
# Slurm with and without pyxis on the same nodes, in rounds. Printed, never asserted. Needs Docker, the
# images (make images) and the test registry and image (make images-test). WARDEN_BENCH_JOBCOST_ARGS:
# python -m bench.jobcost's options (--quick: a few minutes; --help).
set -euo pipefail
cd "$(dirname "$0")/.."
hack/docker.sh ensure >/dev/null
# shellcheck disable=SC2086
"${PY:-python3}" -m bench.jobcost ${WARDEN_BENCH_JOBCOST_ARGS:-}
