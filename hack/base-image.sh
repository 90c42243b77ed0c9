#!/usr/bin/env bash
# Build the base image every Dockerfile starts FROM (debian:trixie-slim) without a registry:
# debootstrap a minbase trixie root, trim it, `docker import` it under that name.
# Does nothing when the image already exists (WARDEN_BASE_FORCE=1 rebuilds it).
#
# Environment: WARDEN_BASE_IMAGE (default debian:trixie-slim), WARDEN_BASE_SUITE (default trixie),
#              WARDEN_BASE_FORCE=1 to rebuild.
# debootstrap uses its own default mirror; this script names none.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
IMAGE="${WARDEN_BASE_IMAGE:-debian:trixie-slim}"
SUITE="${WARDEN_BASE_SUITE:-trixie}"

log() { printf '[base-image] %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

"$HERE/docker.sh" ensure

if [ "${WARDEN_BASE_FORCE:-0}" != 1 ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
    log "$IMAGE exists; nothing to do"
    exit 0
fi

if ! command -v debootstrap >/dev/null 2>&1; then
    log "installing debootstrap"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

start=$SECONDS
root="$(mktemp -d "${TMPDIR:-/tmp}/warden-rootfs.XXXXXX")"
cleanup() { as_root rm -rf --one-file-system "$root"; }
trap cleanup EXIT

log "debootstrap --variant=minbase $SUITE -> $root"
as_root debootstrap --variant=minbase "$SUITE" "$root" >"$root.log" 2>&1 || {
    tail -n 30 "$root.log" >&2
    exit 1
}
rm -f "$root.log"
t_boot=$((SECONDS - start))

log "trimming"
# Keep the image small like the upstream slim images: no docs, man pages, locales other than
# C, apt lists or caches, and dpkg excludes so later installs stay small too.
as_root rm -rf "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
    "$root"/usr/share/locale/* "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
    "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/debconf/*-old "$root"/var/log/*.log \
    "$root"/var/log/apt/* "$root"/tmp/* "$root"/root/.bash_history
as_root tee "$root/etc/dpkg/dpkg.cfg.d/docker-slim" >/dev/null <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
CFG
as_root tee "$root/etc/apt/apt.conf.d/docker-clean" >/dev/null <<'CFG'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CFG
as_root tee "$root/etc/apt/apt.conf.d/docker-no-recommends" >/dev/null <<'CFG'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
CFG
# the build host's name and resolver must not leak into the image
as_root sh -c ": >'$root/etc/hostname'; : >'$root/etc/resolv.conf'; rm -f '$root/etc/machine-id'; : >'$root/etc/machine-id'"

log "docker import -> $IMAGE"
t_import0=$SECONDS
as_root tar -C "$root" --numeric-owner --xattrs --xattrs-include='*' -c . |
    docker import --change 'CMD ["bash"]' --change 'ENV LANG=C.UTF-8' \
        -m "debootstrap --variant=minbase $SUITE" - "$IMAGE" >/dev/null
t_import=$((SECONDS - t_import0))
size="$(docker image inspect -f '{{.Size}}' "$IMAGE")"
log "done: $IMAGE $((size / 1000000)) MB; debootstrap ${t_boot}s, import ${t_import}s, total $((SECONDS - start))s"
