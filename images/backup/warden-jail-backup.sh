#!/bin/bash
# Back the jail up into a restic repository, then forget (and prune) what the keep policy lets go.
#
#   warden-jail-backup --host NAME [--keep-RULE N]... [--exclude PATH]...
#
# NAME: the SlurmCluster (restic's host of the snapshot; restores pick snapshots by it). RULE: last,
# hourly, daily, weekly, monthly, yearly (restic forget --keep-RULE). PATH: a directory of the jail
# (a path inside it) whose contents are left out. Every snapshot is tagged `warden`.
# The repository is restic's environment: RESTIC_REPOSITORY, RESTIC_PASSWORD (or RESTIC_PASSWORD_FILE) and
# the backend's keys; it is initialised on first use. Reads the jail at WARDEN_JAIL (default /mnt/jail),
# which must be a populated jail (.warden-populated).
# Exit status: 0 (a snapshot saved; files that vanished or could not be read while it ran are named in
# the log and the summary), else restic's. A summary goes to the container's termination message
# (WARDEN_TERMINATION_LOG, default /run/termination-log): `kubectl get pod -o
# jsonpath='{.status.containerStatuses[0].state.terminated.message}'` shows it.
set -euo pipefail
log() { printf '[jail-backup] %s\n' "$*" >&2; }

jail="${WARDEN_JAIL:-/mnt/jail}"
report="${WARDEN_TERMINATION_LOG:-/run/termination-log}"
host=""
keep=()
exclude=()
while [ $# -gt 0 ]; do
    case "$1" in
        --host) host="${2:?--host needs a name}"; shift 2 ;;
        --keep-last | --keep-hourly | --keep-daily | --keep-weekly | --keep-monthly | --keep-yearly)
            [[ "${2:-}" =~ ^[0-9]+$ ]] || { log "error: $1 needs a count"; exit 2; }
            keep+=("$1" "$2"); shift 2 ;;
        --exclude)
            [[ "${2:-}" == /* ]] || { log "error: --exclude needs a path inside the jail (/tmp)"; exit 2; }
            # the directory's contents: the directory itself stays in the snapshot
            exclude+=(--exclude "$jail${2%/}/*"); shift 2 ;;
        -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) log "error: unknown argument '$1'"; exit 2 ;;
    esac
done
[ -n "$host" ] || { log "error: --host NAME is required"; exit 2; }
[ ${#keep[@]} -gt 0 ] || { log "error: no --keep-* rule: every snapshot would be forgotten"; exit 2; }
: "${RESTIC_REPOSITORY:?the repository (RESTIC_REPOSITORY) is not set}"
[ -n "${RESTIC_PASSWORD:-}${RESTIC_PASSWORD_FILE:-}" ] || {
    log "error: no RESTIC_PASSWORD: the repository's Secret (spec.jail.backup.repository.credentialsSecret) lacks it"
    exit 2
}
[ -f "$jail/.warden-populated" ] || { log "error: $jail holds no populated jail (no .warden-populated): nothing backed up"; exit 1; }
summary() {
    printf '%s\n' "$*" >&2
    printf '%s\n' "$*" 2>/dev/null >"$report" || true
}

# The repository, made on first use: restic exits 10 when there is none (and 1 with a wrong password)
err="$(mktemp)"
rc=0
restic cat config >/dev/null 2>"$err" || rc=$?
if [ "$rc" = 10 ]; then
    log "no repository at $RESTIC_REPOSITORY yet: initialising it"
    restic init
elif [ "$rc" != 0 ]; then
    cat "$err" >&2
    summary "failed: cannot open the repository (restic exit $rc): $(tail -n 1 "$err")"
    exit "$rc"
fi

start=$SECONDS
out="$(mktemp)"
rc=0
# --one-file-system: the jail's own volume only; the restore marker of an interrupted restore never
restic backup --host "$host" --tag warden --one-file-system --exclude "$jail/.warden-restoring" \
    "${exclude[@]}" "$jail" 2>&1 | tee "$out" >&2 || rc=$?
# 3: a snapshot was saved, but some files could not be read (users' files that vanished while it ran)
incomplete=""
case "$rc" in
    0) ;;
    3) incomplete=" (incomplete: some files could not be read, see the log)" ;;
    *)
        summary "failed: restic backup exit $rc after $((SECONDS - start))s: $(tail -n 1 "$out")"
        exit "$rc"
        ;;
esac
snapshot="$(sed -n 's/^snapshot \([0-9a-f]*\) saved$/\1/p' "$out" | tail -n 1)"
added="$(sed -n 's/^Added to the repository: //p' "$out" | tail -n 1)"
processed="$(sed -n 's/^processed //p' "$out" | tail -n 1)"
took=$((SECONDS - start))
log "snapshot $snapshot saved in ${took}s$incomplete"

start=$SECONDS
rc=0
restic forget --host "$host" --tag warden --prune "${keep[@]}" 2>&1 | tee "$out" >&2 || rc=$?
kept="$(restic snapshots --host "$host" --tag warden --json 2>/dev/null | grep -o '"short_id":' | wc -l)"
rm -f "$out" "$err"
if [ "$rc" != 0 ]; then
    summary "snapshot $snapshot saved$incomplete, but restic forget --prune failed (exit $rc)"
    exit "$rc"
fi
summary "snapshot $snapshot saved in ${took}s$incomplete: processed $processed, added $added; forget+prune $((SECONDS - start))s, snapshots of $host kept: $kept"
