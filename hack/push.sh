#!/usr/bin/env bash
# Push Warden's images and Helm charts to a registry, where a cluster pulls them (docs/install.md;
# `make up` pushes to the local cluster's own registry, docs/local-cluster.md).
#
#   hack/push.sh REGISTRY [NAME...]
#
# REGISTRY is host[:port]/path, e.g. 127.0.0.1:5000/warden or registry.example.com/warden.
# Images: each warden/<name>:<tag> is tagged REGISTRY/<name>:<tag> (the tag stays in Docker) and pushed;
# stdout gets one line per image, <name>:<tag>@sha256:<digest> and how long it took, then one per chart
# (charts/<chart>:<version>@sha256:<digest>); progress goes to stderr. Default: the images hack/images.sh builds
# by default (its ALL list) at <version>, plus the Slurm images of the other series
# (warden/<name>:<version>-slurm24.11) that Docker has. NAME: an image name (`controller`, at <version>)
# or a local reference (`warden/controller:0.1.0-slurm24.11`).
# A push is skipped when the same local image id was pushed to that reference before (stamps under
# ${WARDEN_CACHE:-~/.cache/warden}/push/) and the registry still has that digest.
# Charts: slurm-operator-crds, slurm-operator (after `helm dependency build`) and slurm-cluster are
# packaged with chart version and appVersion <version> and pushed to oci://REGISTRY/charts/<chart>.
#
# Needs Docker (logged in to REGISTRY when it asks: `docker login`, `helm registry login`) and helm
# (hack/build-k8s-bins.sh helm). Docker Engine talks plain HTTP to 127.0.0.0/8 registries by itself; helm
# and the manifest check do so for 127.0.0.1 and localhost, or everywhere with WARDEN_REGISTRY_PLAIN_HTTP=1.
# Environment: WARDEN_VERSION (default: pyproject's, as hack/images.sh), WARDEN_REGISTRY_PLAIN_HTTP,
#              WARDEN_CACHE (stamps).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; }
if [ $# -lt 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
    usage
    exit 2
fi
REGISTRY="${1%/}"
shift
case "$REGISTRY" in
    "" | *" "* | *://*)
        echo "push.sh: REGISTRY is host[:port]/path, without a scheme (got '$REGISTRY')" >&2
        exit 2
        ;;
esac

VERSION="${WARDEN_VERSION:-$(sed -n 's/^version *= *"\(.*\)"/\1/p' pyproject.toml | head -n 1)}"
[ -n "$VERSION" ] || { echo "push.sh: no version in pyproject.toml" >&2; exit 1; }
# the default image list is hack/images.sh's own (ALL, and the images without Slurm in them)
read -r -a ALL <<<"$(sed -n 's/^ALL=(\(.*\))$/\1/p' hack/images.sh)"
SERIES_NEUTRAL="$(sed -n 's/^SERIES_NEUTRAL="\(.*\)"$/\1/p' hack/images.sh)"
[ ${#ALL[@]} -gt 0 ] || { echo "push.sh: no ALL=(...) list in hack/images.sh" >&2; exit 1; }
OTHER_SERIES=(24.11)

host="${REGISTRY%%/*}"
plain_http=0
case "${host%:*}" in 127.* | localhost) plain_http=1 ;; esac
[ "${WARDEN_REGISTRY_PLAIN_HTTP:-}" = 1 ] && plain_http=1

STAMPS="${WARDEN_CACHE:-$HOME/.cache/warden}/push/stamps"
mkdir -p "$(dirname "$STAMPS")"
touch "$STAMPS"
exec 9>"$STAMPS.lock"
flock 9 # one push at a time (make up and the e2e tier may both push)

refs=()
if [ $# -gt 0 ]; then
    for arg in "$@"; do
        case "$arg" in
            *:*) refs+=("$arg") ;;
            */*) refs+=("$arg:$VERSION") ;;
            *) refs+=("warden/$arg:$VERSION") ;;
        esac
    done
else
    for name in "${ALL[@]}"; do
        refs+=("warden/$name:$VERSION")
    done
    for series in "${OTHER_SERIES[@]}"; do
        for name in "${ALL[@]}"; do
            [[ " $SERIES_NEUTRAL " == *" $name "* ]] && continue
            ref="warden/$name:$VERSION-slurm$series"
            docker image inspect "$ref" >/dev/null 2>&1 && refs+=("$ref")
        done
    done
fi

# the digest REGISTRY holds for $1 ("" when none or unreachable)
remote_digest() {
    local flags=(-v)
    [ "$plain_http" = 1 ] && flags+=(--insecure)
    docker manifest inspect "${flags[@]}" "$1" 2>/dev/null |
        sed -n 's/^[[:space:]]*"digest": "\(sha256:[0-9a-f]*\)".*/\1/p' | head -n 1
}

total=$SECONDS
echo "==> images to $REGISTRY" >&2
pushed=0
skipped=0
for ref in "${refs[@]}"; do
    start=$SECONDS
    local_id="$(docker image inspect -f '{{.Id}}' "$ref" 2>/dev/null)" || {
        echo "push.sh: $ref is not in Docker (make images)" >&2
        exit 1
    }
    name_tag="${ref##*/}"
    target="$REGISTRY/$name_tag"
    docker tag "$ref" "$target"
    stamped="$(awk -v t="$target" -v i="$local_id" '$1 == t && $2 == i { d = $3 } END { print d }' "$STAMPS")"
    if [ -n "$stamped" ] && [ "$(remote_digest "$target")" = "$stamped" ]; then
        printf '%s\t%ss, already there\n' "$name_tag@$stamped" "$((SECONDS - start))"
        skipped=$((skipped + 1))
        continue
    fi
    log="$(mktemp)"
    if ! docker push "$target" >"$log" 2>&1; then
        cat "$log" >&2
        rm -f "$log"
        echo "push.sh: docker push $target failed" >&2
        exit 1
    fi
    digest="$(sed -n 's/.*digest: \(sha256:[0-9a-f]*\).*/\1/p' "$log" | tail -n 1)"
    rm -f "$log"
    [ -n "$digest" ] || { echo "push.sh: docker push $target printed no digest" >&2; exit 1; }
    awk -v t="$target" '$1 != t' "$STAMPS" >"$STAMPS.new"
    printf '%s %s %s\n' "$target" "$local_id" "$digest" >>"$STAMPS.new"
    mv "$STAMPS.new" "$STAMPS"
    printf '%s\t%ss, pushed\n' "$name_tag@$digest" "$((SECONDS - start))"
    pushed=$((pushed + 1))
done
echo "--- ${#refs[@]} image(s) in $((SECONDS - total))s: $pushed pushed, $skipped already there" >&2

start=$SECONDS
echo "==> charts to oci://$REGISTRY/charts ($VERSION)" >&2
bins="$(hack/build-k8s-bins.sh --print-dir)"
[ -x "$bins/helm" ] || hack/build-k8s-bins.sh helm >/dev/null
helm="$bins/helm"
helm_flags=()
[ "$plain_http" = 1 ] && helm_flags+=(--plain-http)
work="$(mktemp -d "${TMPDIR:-/tmp}/warden-push.XXXXXX")"
trap 'rm -rf "$work"' EXIT
"$helm" dependency build charts/slurm-operator >/dev/null
for chart in slurm-operator-crds slurm-operator slurm-cluster; do
    "$helm" package "charts/$chart" --version "$VERSION" --app-version "$VERSION" -d "$work" >/dev/null
    out="$("$helm" push "$work/$chart-$VERSION.tgz" "oci://$REGISTRY/charts" "${helm_flags[@]}" 2>&1)" || {
        printf '%s\n' "$out" >&2
        echo "push.sh: helm push of $chart failed" >&2
        exit 1
    }
    digest="$(printf '%s\n' "$out" | sed -n 's/^Digest: //p' | tail -n 1)"
    printf '%s\n' "charts/$chart:$VERSION@$digest"
done
echo "--- 3 charts in $((SECONDS - start))s; pushed to $REGISTRY in $((SECONDS - total))s in all" >&2
