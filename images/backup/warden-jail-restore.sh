#!/bin/bash
# Restore a backup of a jail (warden-jail-backup) into a NEW jail: the populate Job's first container
# with spec.jail.restoreFrom.
#
#   warden-jail-restore --host NAME [--snapshot latest|ID] [--path /mnt/jail]
#
# NAME: the SlurmCluster whose backups to restore (restic's host); --snapshot: `latest` (default, the
# newest of NAME's snapshots tagged `warden`) or an ID; --path: the jail's path in the snapshot (the
# backups mount it at /mnt/jail). Writes into WARDEN_JAIL (default /mnt/jail).
# Only a jail that was never populated is restored into: one with .warden-populated is left as it is
# (exit 0), so the Job made again over a live jail changes nothing. A marker (.warden-restoring) is held
# while the restore runs: a restore cut short is done again by the next try, never taken for a jail.
# The restored jail keeps the snapshot's .warden-populated, put in place last (login and worker pods wait
# for it): the populate program then copies nothing, or upgrades the jail's Slurm in place when its image
# carries a newer one.
# The repository is restic's environment (RESTIC_REPOSITORY, RESTIC_PASSWORD, the backend's keys).
set -euo pipefail
log() { printf '[jail-restore] %s\n' "$*" >&2; }

jail="${WARDEN_JAIL:-/mnt/jail}"
host=""
snapshot=latest
path=/mnt/jail
while [ $# -gt 0 ]; do
    case "$1" in
        --host) host="${2:?--host needs a name}"; shift 2 ;;
        --snapshot) snapshot="${2:?--snapshot needs latest or an ID}"; shift 2 ;;
        --path) path="${2:?--path needs a path}"; shift 2 ;;
        -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) log "error: unknown argument '$1'"; exit 2 ;;
    esac
done
[ -n "$host" ] || { log "error: --host NAME is required"; exit 2; }
[[ "$snapshot" =~ ^(latest|[0-9a-f]{8,64})$ ]] || { log "error: --snapshot '$snapshot' (want latest or an ID)"; exit 2; }
[ -d "$jail" ] || { log "error: $jail is not a directory (mount the jail volume there)"; exit 1; }
: "${RESTIC_REPOSITORY:?the repository (RESTIC_REPOSITORY) is not set}"
[ -n "${RESTIC_PASSWORD:-}${RESTIC_PASSWORD_FILE:-}" ] || {
    log "error: no RESTIC_PASSWORD: the repository's Secret (spec.jail.restoreFrom.repository.credentialsSecret) lacks it"
    exit 2
}
marker="$jail/.warden-restoring"

if [ -f "$jail/.warden-populated" ] && [ ! -f "$marker" ]; then
    log "$jail is already populated ($(tr '\n' ' ' <"$jail/.warden-populated")): a restore only fills a new jail; nothing restored"
    exit 0
fi
if [ -f "$marker" ]; then
    log "a restore was cut short ($(cat "$marker")): restoring again"
elif [ -n "$(find "$jail" -mindepth 1 -maxdepth 1 ! -name lost+found -print -quit)" ]; then
    log "warning: $jail holds files but was never populated (a copy cut short): the snapshot is restored over them"
fi

# the snapshot's ID, so a retry restores the same one even if a backup ran in between
id="$(cat "$marker" 2>/dev/null || true)"
if [ -z "$id" ]; then
    if [ "$snapshot" = latest ]; then
        id="$(restic snapshots --host "$host" --tag warden --latest 1 --json | grep -o '"id":"[0-9a-f]\{64\}"' | tail -n 1 | cut -d'"' -f4)"
        [ -n "$id" ] || { log "error: $RESTIC_REPOSITORY has no snapshot of $host (tag warden)"; exit 1; }
    else
        id="$snapshot"
    fi
    printf '%s\n' "$id" >"$marker"
fi
start=$SECONDS
log "restoring snapshot $id ($host, $path) into $jail"
# The sentinel last: login and worker pods wait for it (a jail with it is whole), so it is left out of
# the restore and put in place by rename once everything else is there
restic restore "$id:$path" --target "$jail" --exclude /.warden-populated
if restic dump "$id" "$path/.warden-populated" >"$jail/.warden-populated.tmp" 2>/dev/null; then
    restored_sentinel=1
else
    rm -f "$jail/.warden-populated.tmp"
    restored_sentinel=0
fi
# what sshd's ChrootDirectory needs of the jail's root, whatever the volume made it
chown 0:0 "$jail"
chmod 0755 "$jail"
sync -f "$jail" 2>/dev/null || true
if [ "$restored_sentinel" = 1 ]; then
    mv -f "$jail/.warden-populated.tmp" "$jail/.warden-populated"
else
    log "warning: snapshot $id holds no .warden-populated: the populate Job copies the jail image over it"
fi
rm -f "$marker"
log "restored snapshot $id in $((SECONDS - start))s ($(du -sh --one-file-system "$jail" 2>/dev/null | cut -f1))"
