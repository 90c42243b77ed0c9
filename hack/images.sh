#!/usr/bin/env bash
# Build Warden's container images, in dependency order, tagged warden/<name>:<version> (version from
# pyproject.toml). Prints the time each image took and its size.
#
#   hack/images.sh [NAME...]      default: all images
#
# Needs Docker (hack/docker.sh ensure) and the base image (hack/base-image.sh); the Makefile target
# `images` runs both first. Build context: the repository root (.dockerignore keeps it small).
# Environment: WARDEN_VERSION (default: pyproject's), WARDEN_BUILD_ARGS (extra docker build flags),
#              WARDEN_EXTRA_CA_DIR (PEM certificates trusted for pip; default /usr/local/share/ca-certificates).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
VERSION="${WARDEN_VERSION:-$(sed -n 's/^version *= *"\(.*\)"/\1/p' pyproject.toml | head -n 1)}"
[ -n "$VERSION" ] || { echo "images.sh: no version in pyproject.toml" >&2; exit 1; }

# name -> Dockerfile; order matters (an image builds after the images it starts FROM)
ALL=(spank slurm-base controller worker login accounting health-check jail populate-jail mariadb operator)
dockerfile() {
    case "$1" in
        jail) echo jail/Dockerfile ;;
        *) echo "images/$1/Dockerfile" ;;
    esac
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

names=("$@")
[ ${#names[@]} -gt 0 ] || names=("${ALL[@]}")
summary=()
total=$SECONDS
for name in "${names[@]}"; do
    file="$(dockerfile "$name")"
    [ -f "$file" ] || { echo "images.sh: no $file" >&2; exit 1; }
    args=(--build-arg "WARDEN_VERSION=$VERSION")
    case "$name" in operator) args+=(--build-arg "WARDEN_EXTRA_CA=$extra_ca") ;; esac
    start=$SECONDS
    echo "==> warden/$name:$VERSION ($file)" >&2
    log="$(mktemp)"
    # shellcheck disable=SC2086
    if ! docker build -q -f "$file" -t "warden/$name:$VERSION" "${args[@]}" ${WARDEN_BUILD_ARGS:-} . >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        echo "images.sh: warden/$name failed" >&2
        exit 1
    fi
    rm -f "$log"
    secs=$((SECONDS - start))
    size="$(docker image inspect -f '{{.Size}}' "warden/$name:$VERSION")"
    line="$(printf '%-28s %5ss %6s MB' "warden/$name:$VERSION" "$secs" "$((size / 1000000))")"
    echo "    $line" >&2
    summary+=("$line")
done
echo "--- images built in $((SECONDS - total))s" >&2
printf '%s\n' "${summary[@]}" >&2
