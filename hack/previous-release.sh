#!/usr/bin/env bash
# Warden's previous release (WARDEN_PREVIOUS_RELEASE of hack/versions.env), built from its tag the way
# that release builds itself: what the e2e upgrade test installs first and upgrades from.
#
#   hack/previous-release.sh build              its images (warden/<name>:<release>), with its own hack/images.sh
#   hack/previous-release.sh push REGISTRY      those images and its charts, with its own hack/push.sh
#
# The images are those a cluster of the release's default values (accounting in the cluster, no GPUs)
# runs (IMAGES below) and the ones they start FROM; a build for the same commit whose images Docker still
# has is skipped.
#   hack/previous-release.sh version            print the release
#
# The source is the tag v<release>, or WARDEN_PREVIOUS_RELEASE_COMMIT where a clone lacks the tag;
# it is exported (git archive) to a directory of the cache, never into the working tree. Docker's layer
# cache shares what did not change since.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
# shellcheck source=versions.env
. hack/versions.env
release="$WARDEN_PREVIOUS_RELEASE"
ref="v$release"
git rev-parse -q --verify "$ref^{commit}" >/dev/null || ref="$WARDEN_PREVIOUS_RELEASE_COMMIT"
tree="${WARDEN_CACHE:-$HOME/.cache/warden}/release-$release"
thirdparty="${WARDEN_THIRDPARTY_DIR:-$ROOT/../shared/thirdparty}"
BASES=(spank container-runtime slurm-base jail)
IMAGES=(controller worker login accounting mariadb populate-jail operator)

export_tree() {
    local commit stamp="$tree/.warden-source"
    commit="$(git rev-parse "$ref^{commit}")"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$commit" ]; then
        return
    fi
    rm -rf "$tree"
    mkdir -p "$tree"
    git archive "$commit" | tar -x -C "$tree"
    echo "$commit" >"$stamp"
    echo "previous release $release: $ref ($commit) in $tree" >&2
}

case "${1:-}" in
    version) echo "$release" ;;
    build)
        export_tree
        built="$tree/.warden-built"
        refs=()
        for name in "${IMAGES[@]}"; do refs+=("warden/$name:$release"); done
        if [ -f "$built" ] && [ "$(cat "$built")" = "$(cat "$tree/.warden-source")" ] &&
            docker image inspect "${refs[@]}" >/dev/null 2>&1; then
            echo "previous release $release: images already built" >&2
            exit 0
        fi
        cd "$tree"
        WARDEN_THIRDPARTY_DIR="$thirdparty" hack/images.sh "${BASES[@]}" "${IMAGES[@]}"
        cp .warden-source .warden-built
        ;;
    push)
        [ -n "${2:-}" ] || { echo "usage: hack/previous-release.sh push REGISTRY" >&2; exit 2; }
        export_tree
        cd "$tree"
        hack/push.sh "$2" "${IMAGES[@]}"
        ;;
    *)
        echo "usage: hack/previous-release.sh build | push REGISTRY | version" >&2
        exit 2
        ;;
esac
