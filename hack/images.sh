#!/usr/bin/env bash
# Build Warden's container images, in dependency order, tagged warden/<name>:<version> (version from
# pyproject.toml). Prints the time each image took and its size.
#
#   hack/images.sh [NAME...]      default: all images of ALL below
#   hack/images.sh gpu            the GPU jail: jail-gpu populate-jail-gpu (not in ALL: big; after jail)
#   hack/images.sh test           the test tiers' registry, image and directory: test-registry test-image test-ldap (not in ALL)
#
# Needs Docker (hack/docker.sh ensure) and the base image (hack/base-image.sh); the Makefile target
# `images` runs both first. Build context: the repository root (.dockerignore keeps it small), except
# jail-gpu: a temporary context with jail/gpu/ and the nccl-tests archive (never copied into the repo);
# backup: one with images/backup/ and restic (hack/build-restic.sh builds it from its Go module, once).
# Slurm series (docs/images.md, "Slurm series"): WARDEN_SLURM_SERIES picks the one the Slurm images
# carry (default: SLURM_SERIES of hack/versions.env, 26.05). The default series' images are tagged
# <version>; another series' <version>-slurm<series> (warden/controller:0.1.0-slurm24.11), and a build
# of another series without names builds only the images that carry Slurm.
#
# Environment: WARDEN_VERSION (default: pyproject's), WARDEN_BUILD_ARGS (extra docker build flags),
#              WARDEN_THIRDPARTY_DIR (container-runtime: where the pyxis and enroot release archives are;
#              default ../shared/thirdparty from the repository root),
#              WARDEN_EXTRA_CA_DIR (PEM certificates trusted for pip; default /usr/local/share/ca-certificates),
#              WARDEN_NCCL_TESTS_ARCHIVE (jail-gpu: the pristine nccl-tests release archive; default
#              ../shared/thirdparty/nccl-tests-2.19.6.tar.gz from the repository root; its sha256 must
#              match the one jail/gpu/Dockerfile names).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
VERSION="${WARDEN_VERSION:-$(sed -n 's/^version *= *"\(.*\)"/\1/p' pyproject.toml | head -n 1)}"
[ -n "$VERSION" ] || { echo "images.sh: no version in pyproject.toml" >&2; exit 1; }
DEFAULT_SERIES="$(sed -n 's/^SLURM_SERIES=//p' hack/versions.env)"
SERIES="${WARDEN_SLURM_SERIES:-$DEFAULT_SERIES}"
case "$SERIES" in
    24.11 | 26.05) ;;
    *) echo "images.sh: WARDEN_SLURM_SERIES='$SERIES' (want 26.05 or 24.11)" >&2; exit 2 ;;
esac
# images without Slurm in them: built once, with the default series
SERIES_NEUTRAL=" mariadb backup operator test-registry test-image test-ldap "
TAG="$VERSION"
[ "$SERIES" = "$DEFAULT_SERIES" ] || TAG="$VERSION-slurm$SERIES"

# name -> Dockerfile; order matters (an image builds after the images it starts FROM)
ALL=(spank container-runtime slurm-base controller worker login accounting health-check jail populate-jail mariadb backup operator)
# Built on request only (after jail): the GPU jail and its populate image.
GPU=(jail-gpu populate-jail-gpu)
# Built on request only: what the test tiers run beside a cluster (a registry, an image to push to it).
TEST=(test-registry test-image test-ldap)
dockerfile() {
    case "$1" in
        jail) echo jail/Dockerfile ;;
        jail-gpu) echo jail/gpu/Dockerfile ;;
        test-*) echo "tests/images/$1/Dockerfile" ;;
        populate-jail-gpu) echo images/populate-jail/Dockerfile ;;
        *) echo "images/$1/Dockerfile" ;;
    esac
}

# container-runtime's build context: its Dockerfile plus the pyxis and enroot release archives
# (sha256 checked in the Dockerfile), staged in a temporary directory like jail-gpu's.
THIRDPARTY="${WARDEN_THIRDPARTY_DIR:-$ROOT/../shared/thirdparty}"
runtime_context() {  # sets $context
    local archive
    context="$(mktemp -d "${TMPDIR:-/tmp}/warden-container-runtime.XXXXXX")"
    tmp_contexts+=("$context")
    cp -p images/container-runtime/Dockerfile "$context/"
    for archive in pyxis-0.24.0 enroot-4.1.2; do
        [ -f "$THIRDPARTY/$archive.tar.gz" ] || {
            echo "images.sh: no $archive.tar.gz in $THIRDPARTY (set WARDEN_THIRDPARTY_DIR)" >&2
            return 1
        }
        cp "$THIRDPARTY/$archive.tar.gz" "$context/${archive%%-*}.tar.gz"
    done
}

# backup's build context: images/backup/ plus restic, built from its Go module (hack/build-restic.sh, cached)
backup_context() {  # sets $context
    local restic
    restic="$(hack/build-restic.sh)" || return 1
    context="$(mktemp -d "${TMPDIR:-/tmp}/warden-backup.XXXXXX")"
    tmp_contexts+=("$context")
    cp -p images/backup/* "$context/"
    cp "$restic" "$context/restic"
}

# jail-gpu's build context: jail/gpu/ plus the nccl-tests archive (sha256 checked here and in the
# Dockerfile), staged in a temporary directory so the archive never enters the repository's context.
NCCL_TESTS_ARCHIVE="${WARDEN_NCCL_TESTS_ARCHIVE:-$ROOT/../shared/thirdparty/nccl-tests-2.19.6.tar.gz}"
tmp_contexts=()
cleanup_contexts() { [ ${#tmp_contexts[@]} -eq 0 ] || rm -rf "${tmp_contexts[@]}"; }
trap cleanup_contexts EXIT
gpu_context() {  # sets $context
    local want
    want="$(sed -n 's/^ARG NCCL_TESTS_SHA256=//p' jail/gpu/Dockerfile)"
    [ -f "$NCCL_TESTS_ARCHIVE" ] || {
        echo "images.sh: no nccl-tests archive at $NCCL_TESTS_ARCHIVE (set WARDEN_NCCL_TESTS_ARCHIVE)" >&2
        return 1
    }
    sha256sum "$NCCL_TESTS_ARCHIVE" | grep -q "^$want " || {
        echo "images.sh: $NCCL_TESTS_ARCHIVE: sha256 is not $want" >&2
        return 1
    }
    context="$(mktemp -d "${TMPDIR:-/tmp}/warden-jail-gpu.XXXXXX")"
    tmp_contexts+=("$context")
    cp -p jail/gpu/* "$context/"
    cp "$NCCL_TESTS_ARCHIVE" "$context/nccl-tests.tar.gz"
}

# BuildKit when the buildx plugin is there; Docker's classic builder otherwise (both read these files)
if docker buildx version >/dev/null 2>&1; then
    export DOCKER_BUILDKIT=1
else
    export DOCKER_BUILDKIT=0
fi

# Locally added CAs (TLS-inspecting proxies) are passed to the pip steps only.
extra_ca=""
ca_dir="${WARDEN_EXTRA_CA_DIR:-/usr/local/share/ca-certificates}"
if compgen -G "$ca_dir/*.crt" >/dev/null; then
    extra_ca="$(cat "$ca_dir"/*.crt)"
fi

names=()
for arg in "$@"; do
    case "$arg" in
        gpu) names+=("${GPU[@]}") ;;
        test) names+=("${TEST[@]}") ;;
        *) names+=("$arg") ;;
    esac
done
if [ ${#names[@]} -eq 0 ]; then
    for name in "${ALL[@]}"; do
        [ "$TAG" != "$VERSION" ] && [[ "$SERIES_NEUTRAL" == *" $name "* ]] && continue
        names+=("$name")
    done
fi
summary=()
total=$SECONDS
for name in "${names[@]}"; do
    file="$(dockerfile "$name")"
    [ -f "$file" ] || { echo "images.sh: no $file" >&2; exit 1; }
    args=(--build-arg "WARDEN_VERSION=$TAG" --build-arg "SLURM_SERIES=$SERIES")
    context=.
    build_file="$file"
    case "$name" in
        operator) args+=(--build-arg "WARDEN_EXTRA_CA=$extra_ca") ;;
        container-runtime)
            runtime_context || exit 1
            build_file="$context/Dockerfile"
            ;;
        backup)
            backup_context || exit 1
            build_file="$context/Dockerfile"
            ;;
        jail-gpu)
            gpu_context || exit 1
            build_file="$context/Dockerfile"
            ;;
        populate-jail-gpu) args+=(--build-arg "JAIL_IMAGE=warden/jail-gpu") ;;
    esac
    start=$SECONDS
    echo "==> warden/$name:$TAG ($file)" >&2
    log="$(mktemp)"
    # shellcheck disable=SC2086
    if ! docker build -q -f "$build_file" -t "warden/$name:$TAG" "${args[@]}" ${WARDEN_BUILD_ARGS:-} "$context" >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        echo "images.sh: warden/$name failed" >&2
        exit 1
    fi
    rm -f "$log"
    secs=$((SECONDS - start))
    size="$(docker image inspect -f '{{.Size}}' "warden/$name:$TAG")"
    line="$(printf '%-38s %5ss %6s MB' "warden/$name:$TAG" "$secs" "$((size / 1000000))")"
    echo "    $line" >&2
    summary+=("$line")
done
echo "--- images built in $((SECONDS - total))s" >&2
printf '%s\n' "${summary[@]}" >&2
