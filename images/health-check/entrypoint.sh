#!/bin/bash
# Slurm client configuration + key into /etc/slurm, then the health runner
# (`python -m warden.health.main`, options/env in that module; WARDEN_HEALTH_MODULE overrides it)
# with this container's arguments. An argument that is not an option runs as a command (e.g. bash).
set -euo pipefail
WARDEN_COMPONENT=health-check
# shellcheck source=../slurm-base/warden-lib.sh
. /usr/lib/warden/warden-lib.sh
case "${1:-}" in
    -h | --help) exec python3 -m "${WARDEN_HEALTH_MODULE:-warden.health.main}" --help ;;
    '' | -*) ;;
    *) exec "$@" ;;
esac
warden_slurm_config
# scontrol/srun authenticate through sackd's socket; sackd stops with the container when the runner exits.
warden_start_sackd
exec python3 -m "${WARDEN_HEALTH_MODULE:-warden.health.main}" "$@"
