#!/bin/bash
# Slurm client configuration + key into /etc/slurm, then the health runner
# (`python -m warden.health.main`, options/env in that module; WARDEN_HEALTH_MODULE overrides it)
# with this container's arguments. An argument that is not an option runs as a command (e.g. bash).
set -euo pipefail
WARDEN_COMPONENT=health-check
. /usr/lib/warden/warden-lib.sh
case "${1:-}" in
    -h | --help) exec python3 -m "${WARDEN_HEALTH_MODULE:-warden.health.main}" --help ;;
    '' | -*) ;;
    *) exec "$@" ;;
esac
warden_slurm_config
# Slurm 24.11 clients (scontrol, srun) authenticate through a SACK socket, never with slurm.key
# directly: sackd (as SlurmUser, like on the login node) serves /run/slurm/sack.socket. It stops
# with the container when the runner exits.
install -d -o slurm -g slurm -m 0755 /run/slurm
# shellcheck disable=SC2086
setpriv --reuid slurm --regid slurm --init-groups sackd -D ${WARDEN_SACKD_ARGS:-} &
sackd_pid=$!
for _ in $(seq 1 50); do
    [ -S /run/slurm/sack.socket ] && break
    kill -0 "$sackd_pid" 2>/dev/null || warden_die "sackd exited"
    sleep 0.1
done
[ -S /run/slurm/sack.socket ] || warden_die "sackd did not create /run/slurm/sack.socket"
exec python3 -m "${WARDEN_HEALTH_MODULE:-warden.health.main}" "$@"
