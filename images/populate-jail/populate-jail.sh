#!/bin/bash
# Copy the jail's root filesystem into the jail volume, once.
#
#   warden-populate-jail [overwrite]
#
# A sentinel file (<jail>/.warden-populated, holding the jail release) marks a finished copy: with it
# present the script returns at once. It is written last, so an interrupted copy is redone.
# `overwrite` (or WARDEN_POPULATE_OVERWRITE=1) copies again over a populated jail and removes files
# the image no longer has, EXCEPT what users own: /home, /root, and the account databases
# (/etc/passwd, group, shadow, gshadow, subuid, subgid) — see WARDEN_POPULATE_KEEP.
# WARDEN_POPULATE_OVERWRITE=once:<id> (what the operator's Job sets for `jail.populate.overwrite`)
# overwrites once per <id>: the sentinel records it, and a run with the same <id> does nothing.
# Keeps permissions, ownership (numeric ids), hard links, ACLs and xattrs (file capabilities):
# rsync -aHAX --numeric-ids.
#   WARDEN_JAIL          target (default /mnt/jail)
#   WARDEN_JAIL_ROOTFS   source (default /jail-rootfs)
#   WARDEN_POPULATE_KEEP paths (relative to the jail) an overwrite leaves alone
set -euo pipefail
log() { printf '[populate-jail] %s\n' "$*" >&2; }

src="${WARDEN_JAIL_ROOTFS:-/jail-rootfs}"
dst="${WARDEN_JAIL:-/mnt/jail}"
keep="${WARDEN_POPULATE_KEEP:-/home /root /etc/passwd /etc/passwd- /etc/group /etc/group- /etc/shadow /etc/shadow- /etc/gshadow /etc/gshadow- /etc/subuid /etc/subgid}"
sentinel="$dst/.warden-populated"
overwrite="${WARDEN_POPULATE_OVERWRITE:-0}"
case "${1:-}" in
    overwrite) overwrite=1 ;;
    '') ;;
    -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) log "unknown argument '$1'"; exit 2 ;;
esac

[ -f "$src/etc/warden-jail-release" ] || { log "error: $src holds no jail (no etc/warden-jail-release)"; exit 1; }
[ -d "$dst" ] || { log "error: $dst is not a directory (mount the jail volume there)"; exit 1; }
release="$(tr '\n' ' ' <"$src/etc/warden-jail-release")"

case "$overwrite" in
    0 | '') overwrite=0 ;;
    1) ;;
    once:?*) ;;
    *) log "error: WARDEN_POPULATE_OVERWRITE='$overwrite' (want 0, 1 or once:<id>)"; exit 2 ;;
esac
if [ -f "$sentinel" ] && [ "$overwrite" = 0 ]; then
    log "$dst already populated ($(tr '\n' ' ' <"$sentinel")); nothing to do"
    exit 0
fi
if [ -f "$sentinel" ] && grep -qxF "overwrite=$overwrite" "$sentinel"; then
    log "$dst already overwritten for this request ($overwrite); nothing to do"
    exit 0
fi

start=$SECONDS
args=(-aHAX --numeric-ids --one-file-system --exclude=/.warden-populated)
# What users own is never copied over once it exists, whatever the run: an overwrite, or a copy that
# starts again after one was interrupted (its sentinel gone). A first copy brings the image's own.
kept=""
for p in $keep; do
    if [ -e "$dst$p" ] || [ -L "$dst$p" ]; then args+=(--exclude="$p"); kept="$kept $p"; fi
done
if [ -f "$sentinel" ]; then
    log "overwrite: re-populating $dst, keeping:$kept"
    # --delete never touches excluded paths (rsync only deletes them with --delete-excluded)
    args+=(--delete)
else
    log "populating $dst from $src ($release)${kept:+, keeping:$kept}"
fi
rm -f "$sentinel"
rsync "${args[@]}" "$src/" "$dst/"
# Mount points the pods bind over, made here (the one writer) rather than by each pod at start: the
# node's driver directory on GPU workers (jail images other than Warden's lack it), and the files a
# container image cannot carry (Docker mounts its own /etc/hosts and friends over them while building).
install -d -m 0755 "$dst/usr/lib/warden/driver"
[ -e "$dst/etc/hosts" ] || printf '127.0.0.1 localhost\n' >"$dst/etc/hosts"
for f in resolv.conf hostname; do [ -e "$dst/etc/$f" ] || : >"$dst/etc/$f"; done
# sshd's ChrootDirectory needs a root-owned, not group/other-writable jail root
chown 0:0 "$dst"
chmod 0755 "$dst"
sync -f "$dst" 2>/dev/null || true
{
    printf '%s\npopulated_at=%s\n' "$release" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    case "$overwrite" in once:*) printf 'overwrite=%s\n' "$overwrite" ;; esac
} >"$sentinel.tmp"
mv "$sentinel.tmp" "$sentinel"
log "done in $((SECONDS - start))s ($(du -sh --one-file-system "$dst" 2>/dev/null | cut -f1))"
