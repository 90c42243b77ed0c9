#!/usr/bin/env bash
# Build the peer operator, Slinky's slurm-operator manager, from its pristine source archive, for
# side-by-side benchmarks only (bench/peer-scale.sh): never in CI, never into the repository.
#
#   hack/build-slinky.sh            prints the path of the manager binary (building it when absent)
#
# The archive: ${WARDEN_SLINKY_ARCHIVE:-../shared/thirdparty/slurm-operator-1.2.1.tar.gz} from the repository
# root (its sha256 is checked). Every Go dependency comes from the Go module proxy; the module and build
# caches are the Kubernetes builds' (${WARDEN_CACHE:-~/.cache/warden}/go). The binary lands in
# ${WARDEN_CACHE}/slinky/1.2.1/manager and is built once.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION=1.2.1
SHA256=f279480a662f7310b8da50099f2f9d702c536005eba135f1faca969651b4d725
ARCHIVE="${WARDEN_SLINKY_ARCHIVE:-${REPO}/../shared/thirdparty/slurm-operator-${VERSION}.tar.gz}"
CACHE="${WARDEN_CACHE:-${HOME}/.cache/warden}"
OUT="${CACHE}/slinky/${VERSION}"

log() { printf '[build-slinky] %s\n' "$*" >&2; }

if [[ -x "${OUT}/manager" ]]; then
    echo "${OUT}/manager"
    exit 0
fi
command -v go >/dev/null || { log "ERROR: go is not installed (Slinky ${VERSION} needs Go >= 1.26)"; exit 1; }
[[ -f "${ARCHIVE}" ]] || { log "ERROR: no ${ARCHIVE} (set WARDEN_SLINKY_ARCHIVE)"; exit 1; }
echo "${SHA256}  ${ARCHIVE}" | sha256sum --check --quiet - || { log "ERROR: ${ARCHIVE}: sha256 mismatch"; exit 1; }

mkdir -p "${OUT}"
src="$(mktemp -d "${OUT}/src.XXXXXX")"
trap 'rm -rf "${src}"' EXIT
tar -xzf "${ARCHIVE}" -C "${src}" --strip-components=1
log "building Slinky slurm-operator ${VERSION}'s manager (a few minutes the first time)"
(
    cd "${src}"
    export GOMODCACHE="${CACHE}/go/mod" GOCACHE="${CACHE}/go/build" GOFLAGS="-mod=mod -buildvcs=false"
    export GOTOOLCHAIN=local CGO_ENABLED=0
    go build -o "${OUT}/manager.tmp" ./cmd/manager
)
mkdir -p "${OUT}/crds"
cp "${src}"/config/crd/bases/*.yaml "${OUT}/crds/"
mv "${OUT}/manager.tmp" "${OUT}/manager"
log "built ${OUT}/manager"
echo "${OUT}/manager"
