#!/bin/bash
# Copy the jail's root filesystem into the jail volume, once.
#
#   warden-populate-jail [overwrite]
#
# A sentinel file (<jail>/.warden-populated, holding the jail release) marks a finished copy: with it
# present the script returns at once. It is written last, so an interrupted copy is redone.
# `overwrite` (or WARDEN_POPULATE_OVERWRITE=1) copies again over a populated jail and removes files
# the image no longer has, EXCEPT what users own: /home, /root, and the account databases
# (/etc/passwd, group, shadow, gshadow, subuid, subgid) — see WARDEN_POPULATE_KEEP — and what is in
# directories users can write (/tmp, /var/tmp...), which it never walks.
# WARDEN_POPULATE_OVERWRITE=once:<id> (what the operator's Job sets for `jail.populate.overwrite`)
# overwrites once per <id>: the sentinel records it, and a run with the same <id> does nothing.
# Keeps permissions, ownership (numeric ids), hard links, ACLs and xattrs (file capabilities):
# rsync -aHAX --numeric-ids (tar with the same into an empty volume: fewer round trips on NFS).
# Slurm upgrades: run (without overwrite) over a jail populated with an older Slurm than the image's,
# it copies nothing and upgrades the jail's Slurm packages in place instead (dpkg -i, chrooted into
# the jail, of the image's /usr/share/warden/slurm-debs that the jail lacks): users' files, accounts
# and the software they installed stay as they are. An image with an OLDER Slurm than the jail's is
# refused (exit 1): Slurm cannot be downgraded. The sentinel records slurm=<version>.
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
    -h | --help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
# The Slurm (slurm-client's Debian version) a root filesystem carries; empty when it has none.
slurm_of() { dpkg-query --admindir="$1/var/lib/dpkg" -W -f '${Version}' slurm-client 2>/dev/null || true; }
image_slurm="$(slurm_of "$src")"

write_sentinel() { # [overwrite-id]
    {
        printf '%s\npopulated_at=%s\n' "$release" "${populated_at:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}"
        [ -z "${1:-}" ] || printf 'overwrite=%s\n' "$1"
        [ -z "$image_slurm" ] || printf 'slurm=%s\n' "$(slurm_of "$dst")"
        [ -z "${slurm_upgraded_at:-}" ] || printf 'slurm_upgraded_at=%s\n' "$slurm_upgraded_at"
    } >"$sentinel.tmp"
    mv "$sentinel.tmp" "$sentinel"
}

# The jail's Slurm packages brought to the image's: the image's .deb files of packages the jail lacks
# or has older, installed by the jail's own dpkg (maintainer scripts run chrooted in the jail).
upgrade_slurm() {
    local have="$1" debs=/usr/share/warden/slurm-debs work="$dst/var/cache/warden-slurm-upgrade" deb pkg ver cur n=0 made_null=0
    [ -d "$debs" ] || { log "error: this image has no $debs to upgrade the jail's Slurm with"; exit 1; }
    log "upgrading the jail's Slurm in place: $have -> $image_slurm (users' files untouched)"
    rm -rf "$work"
    install -d -m 0700 "$work"
    for deb in "$debs"/*.deb; do
        pkg="$(dpkg-deb -f "$deb" Package)"
        ver="$(dpkg-deb -f "$deb" Version)"
        cur="$(dpkg-query --admindir="$dst/var/lib/dpkg" -W -f '${db:Status-Abbrev}${Version}' "$pkg" 2>/dev/null || true)"
        case "$cur" in ii\ *) dpkg --compare-versions "${cur#ii }" ge "$ver" && continue ;; esac
        cp "$deb" "$work/"
        n=$((n + 1))
    done
    # maintainer scripts write to /dev/null: give the jail one while they run (pods bind /dev over it)
    if [ ! -e "$dst/dev/null" ]; then
        install -d -m 0755 "$dst/dev"
        mknod -m 0666 "$dst/dev/null" c 1 3 && made_null=1
    fi
    local rc=0 dpkg=(chroot "$dst" env DEBIAN_FRONTEND=noninteractive PATH=/usr/sbin:/usr/bin:/sbin:/bin dpkg)
    # dpkg's own dry run first: a dependency the jail cannot meet stops the upgrade before any change
    if [ "$n" != 0 ] && ! out="$("${dpkg[@]}" --no-act -R -i /var/cache/warden-slurm-upgrade 2>&1)"; then
        [ "$made_null" = 0 ] || rm -f "$dst/dev/null"
        rm -rf "$work"
        log "error: the jail cannot take Slurm $image_slurm's packages (dpkg's dry run; nothing was changed):"
        printf '%s\n' "$out" >&2
        exit 1
    fi
    [ "$n" = 0 ] || "${dpkg[@]}" --force-confold -R -i /var/cache/warden-slurm-upgrade || rc=$?
    [ "$made_null" = 0 ] || rm -f "$dst/dev/null"
    rm -rf "$work"
    [ "$rc" = 0 ] || {
        log "error: dpkg -i in the jail failed ($rc): finish it by hand in the jail (dpkg --configure -a as root on a login node)"
        exit 1
    }
    # Warden's SPANK plugin in the jail is built against Slurm too (clients load it through
    # plugstack.conf and refuse one of another release): the image's, put in place by rename; pyxis'
    # (containers in jobs) likewise
    local plugin plugins=()
    for plugin in usr/lib/warden/spank_jail.so usr/lib/warden/spank_pyxis.so; do
        if [ -f "$src/$plugin" ]; then
            install -m 0755 "$src/$plugin" "$dst/$plugin.new" && mv -f "$dst/$plugin.new" "$dst/$plugin"
            plugins+=("$plugin")
        fi
    done
    log "jail's Slurm is $(slurm_of "$dst") ($n packages installed, and ${plugins[*]})"
}

if [ -f "$sentinel" ] && [ "$overwrite" = 0 ]; then
    jail_slurm="$(slurm_of "$dst")"
    if [ -n "$image_slurm" ] && [ -n "$jail_slurm" ] && [ "$jail_slurm" != "$image_slurm" ]; then
        if dpkg --compare-versions "$jail_slurm" gt "$image_slurm"; then
            log "error: the jail runs Slurm $jail_slurm, newer than this image's $image_slurm: Slurm cannot be downgraded; use an image of Slurm $jail_slurm or newer"
            exit 1
        fi
        populated_at="$(sed -n 's/^populated_at=//p' "$sentinel")"
        upgrade_slurm "$jail_slurm"
        slurm_upgraded_at="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
        release="$(sed -n '/^populated_at=/q;p' "$sentinel" | tr '\n' ' ' | sed 's/ $//')"
        write_sentinel "$(sed -n 's/^overwrite=//p' "$sentinel")"
        exit 0
    fi
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
# Directories users can write (group- or world-writable, or not root's: /tmp, /var/tmp, a project
# directory given to a user) are never walked: rsync would delete the files users made there, by path,
# while a user could swap a directory for a link and have root delete through it. find stops at each of
# them (-prune) and walks only root's own directories, which no user can change under it; it follows
# no link. Their contents are excluded (and so never deleted); the directories themselves are synced.
users=""
while IFS= read -r -d '' d; do
    d="${d#"$dst"}"
    args+=(--exclude="$d/*")
    users="$users $d"
done < <(find "$dst" -xdev \( -path "$dst/home" -o -path "$dst/root" \) -prune -o \
    -type d \( -perm /0022 -o ! -uid 0 \) -prune -print0)
[ -z "$users" ] || log "leaving alone what users can write in:$users"
if [ -f "$sentinel" ]; then
    log "overwrite: re-populating $dst, keeping:$kept"
    # --delete never touches excluded paths (rsync only deletes them with --delete-excluded)
    args+=(--delete)
else
    log "populating $dst from $src ($release)${kept:+, keeping:$kept}"
fi
rm -f "$sentinel"
if [ -z "$(find "$dst" -mindepth 1 -maxdepth 1 ! -name lost+found -print -quit)" ]; then
    # A first copy into an empty volume: one tar stream, each file written once where it belongs. rsync
    # writes each file to a temporary name and renames it: on a network volume (NFS) that is several
    # round trips more per file, for 11,000 files. Same result: modes, numeric owners, hard links, ACLs,
    # xattrs (file capabilities).
    tar_args=(--numeric-owner --acls --xattrs --xattrs-include='*' --one-file-system)
    (cd "$src" && tar "${tar_args[@]}" -cf - .) | (cd "$dst" && tar "${tar_args[@]}" -xpf -)
else
    rsync "${args[@]}" "$src/" "$dst/"
fi
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
case "$overwrite" in once:*) write_sentinel "$overwrite" ;; *) write_sentinel ;; esac
log "done in $((SECONDS - start))s ($(du -sh --one-file-system "$dst" 2>/dev/null | cut -f1))"
