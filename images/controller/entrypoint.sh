#!/bin/bash
# slurmctld in the foreground, logs on stderr. Extra arguments go to slurmctld;
# `-V`/`--help` print and exit without any configuration.
set -euo pipefail
WARDEN_COMPONENT=controller
. /usr/lib/warden/warden-lib.sh
warden_passthrough slurmctld "$@"

warden_slurm_config
warden_jail_users
state="${WARDEN_STATE_DIR:-/var/spool/slurmctld}"
install -d -o slurm -g slurm -m 0755 "$state"
# a PVC arrives root-owned; slurmctld runs as SlurmUser and must own its state
chown slurm:slurm "$state"
warden_log "starting slurmctld $(slurmctld -V | awk '{print $2}')"
# shellcheck disable=SC2086
exec slurmctld -D ${WARDEN_SLURMCTLD_ARGS:-} "$@"
