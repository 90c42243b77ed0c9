#!/usr/bin/env bash
# Build restic (the jail's backups: images/backup, spec.jail.backup) from its Go module (no binary
# downloads), static, at RESTIC_VERSION of hack/versions.env.
#
#   hack/build-restic.sh            prints the path of the restic binary (building it when absent)
#
# The binary lands in ${WARDEN_CACHE:-~/.cache/warden}/restic/<version>/restic and is built once; the
# module and build caches are the Kubernetes builds' (${WARDEN_CACHE}/go).
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=versions.env
source "${HACK_DIR}/versions.env"
CACHE="${WARDEN_CACHE:-${HOME}/.cache/warden}"
OUT="${CACHE}/restic/${RESTIC_VERSION}"

log() { printf '[build-restic] %s\n' "$*" >&2; }

if [[ -x "${OUT}/restic" ]]; then
    echo "${OUT}/restic"
    exit 0
fi
command -v go >/dev/null || { log "ERROR: go is not installed (restic ${RESTIC_VERSION} needs a recent Go)"; exit 1; }
mkdir -p "${OUT}"
log "building restic ${RESTIC_VERSION} (a few minutes the first time)"
start=$SECONDS
(
    export GOMODCACHE="${CACHE}/go/mod" GOCACHE="${CACHE}/go/build" GOFLAGS="-mod=mod -buildvcs=false"
    export GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN="${OUT}/.bin"
    go install -trimpath -ldflags=-s "github.com/restic/restic/cmd/restic@${RESTIC_VERSION}"
)
mv "${OUT}/.bin/restic" "${OUT}/restic"
rmdir "${OUT}/.bin"
log "built ${OUT}/restic in $((SECONDS - start))s ($("${OUT}/restic" version))"
echo "${OUT}/restic"
