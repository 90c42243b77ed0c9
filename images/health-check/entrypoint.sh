#!/bin/bash
# Slurm client configuration + key into /etc/slurm, then the health runner: `python -m warden.health`
# with this container's arguments (WARDEN_HEALTH_MODULE overrides the module).
# An argument that is not an option runs as a command instead (e.g. `bash`).
set -euo pipefail
WARDEN_COMPONENT=health-check
. /usr/lib/warden/warden-lib.sh
case "${1:-}" in
    '' | -*) ;;
    *) exec "$@" ;;
esac
warden_slurm_config
exec python3 -m "${WARDEN_HEALTH_MODULE:-warden.health}" "$@"
