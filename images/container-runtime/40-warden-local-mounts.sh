#!/bin/bash
# enroot hook (/etc/enroot/hooks.d): the worker group's node-local mounts (spec.workerGroups[].localMounts:
# /tmp, /dev/shm, scratch...) in a job step's container, at the paths the jail shows them, over enroot's
# own /tmp. They are the jail plugin's bind= and jobtmpfs= arguments in the group's plugstack.conf (the worker's
# /etc/slurm, which the jail shows), less the container store. Off a worker (a login node) nothing.
set -euo pipefail

plugstack=/etc/slurm/plugstack.conf
store=/var/lib/warden/containers
[ -r "$plugstack" ] || exit 0
line="$(grep -E '^[[:space:]]*required[[:space:]]+[^[:space:]]*spank_jail\.so' "$plugstack" || true)"
for arg in $line; do
    case "$arg" in
        bind=*)
            IFS=: read -r src dst _ <<<"${arg#bind=}"
            dst="${dst:-$src}"
            ;;
        # the job's own tmpfs (perJob), which the step's jail view shows at DST
        jobtmpfs=*) dst="${arg#jobtmpfs=}" && dst="${dst%%:*}" ;;
        *) continue ;;
    esac
    [ "$dst" = "$store" ] && continue
    [ -d "$dst" ] || continue
    printf '%s %s none x-create=dir,rbind,rw,nosuid,nodev\n' "$dst" "$dst" >>"${ENROOT_MOUNTS:?}"
done
