#!/usr/bin/env bash
# Build the upstream Kubernetes test binaries from their Go modules (no binary downloads).
#
#   hack/build-k8s-bins.sh [--print-dir | --check] [NAME...]
#
# NAME is any of: etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm
#                 kubelet kube-proxy coredns kube-router
# and the groups: controlplane (etcd, the three control-plane daemons, kubectl, kwok, helm)
#                 node (kubelet, kube-proxy)   all (default: controlplane + node)
#                 cluster (all + coredns + kube-router: what the local single-node cluster of `make up` runs)
# kubelet and kube-proxy share almost every package with the control-plane binaries: building them in the
# same `go build` costs well under a minute more, so the default builds them too.
#
# Binaries land in ${WARDEN_CACHE:-$HOME/.cache/warden}/bin/<KUBERNETES_VERSION>/ (override with
# WARDEN_BIN_DIR). A stamp there records the pinned versions and the Go version; a binary that already
# exists under a matching stamp is not rebuilt. The Go module and build caches live under the same cache
# dir, so a second run (or a bump of one component) only compiles what changed.
# CoreDNS (only for the local cluster, never part of `all`) has its own stamp (.stamp.coredns), so
# bumping COREDNS_VERSION rebuilds CoreDNS alone.
# kube-router (its firewall alone enforces the NetworkPolicies of the local cluster) is built from its source
# archive (${WARDEN_THIRDPARTY:-<repo>/../shared/thirdparty}/kube-router-<version>.tar.gz, sha256 checked): its
# own module is not served by the module proxy, its dependencies are; its stamp is .stamp.kube-router.
# --print-dir prints the bin dir and exits; --check exits 0 when the NAMEs are built for the pinned
# versions, 1 (saying what is missing) otherwise. Neither builds anything.
set -euo pipefail

HACK_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source-path=SCRIPTDIR source=versions.env
source "${HACK_DIR}/versions.env"

CACHE="${WARDEN_CACHE:-${HOME}/.cache/warden}"
BIN_DIR="${WARDEN_BIN_DIR:-${CACHE}/bin/${KUBERNETES_VERSION}}"
MOD_ROOT="${CACHE}/k8s-build"

export GOMODCACHE="${CACHE}/go/mod"
export GOCACHE="${CACHE}/go/build"
export GOFLAGS="-mod=mod -buildvcs=false"
export GOTOOLCHAIN=local   # never fetch another Go toolchain behind the user's back
export CGO_ENABLED=0       # static, like upstream release binaries

K8S_STAGING_VERSION="v0.${KUBERNETES_VERSION#v1.}"
HELM_MAJOR="${HELM_VERSION%%.*}"   # v3 or v4

CONTROLPLANE=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm)
NODE=(kubelet kube-proxy)

log() { printf '[build-k8s-bins] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

mode=build
case "${1:-}" in
    --print-dir) echo "${BIN_DIR}"; exit 0 ;;
    --check) mode=check; shift ;;
esac

command -v go >/dev/null || die "go is not installed (need Go >= 1.26 to build Kubernetes ${KUBERNETES_VERSION})"

KUBE_ROUTER_ARCHIVE="${WARDEN_THIRDPARTY:-${HACK_DIR}/../../shared/thirdparty}/kube-router-${KUBE_ROUTER_VERSION#v}.tar.gz"
# kube-router's go.mod pins a netlink commit (a pseudo-version) that the module proxy does not serve; the
# nearest release it serves compiles the same packages
KUBE_ROUTER_REPLACE="github.com/vishvananda/netlink=github.com/vishvananda/netlink@v1.3.1"

kube_router_stamp_text() {
    printf 'KUBE_ROUTER_VERSION=%s\nKUBE_ROUTER_SHA256=%s\nREPLACE=%s\nGO=%s\n' "${KUBE_ROUTER_VERSION}" \
        "${KUBE_ROUTER_SHA256}" "${KUBE_ROUTER_REPLACE}" "$(go env GOVERSION)"
}

coredns_stamp_text() {
    printf 'COREDNS_VERSION=%s\nGO=%s\n' "${COREDNS_VERSION}" "$(go env GOVERSION)"
}

stamp_text() {
    printf 'KUBERNETES_VERSION=%s\nETCD_VERSION=%s\nKWOK_VERSION=%s\nHELM_VERSION=%s\nGO=%s\n' \
        "${KUBERNETES_VERSION}" "${ETCD_VERSION}" "${KWOK_VERSION}" "${HELM_VERSION}" "$(go env GOVERSION)"
}

# ---- what to build -------------------------------------------------------------------------------
want=()
[[ $# -eq 0 ]] && set -- all
for arg in "$@"; do
    case "${arg}" in
        controlplane) want+=("${CONTROLPLANE[@]}") ;;
        node) want+=("${NODE[@]}") ;;
        all) want+=("${CONTROLPLANE[@]}" "${NODE[@]}") ;;
        cluster) want+=("${CONTROLPLANE[@]}" "${NODE[@]}" coredns kube-router) ;;
        etcd | kube-apiserver | kube-controller-manager | kube-scheduler | kubectl | kwok | helm | kubelet | kube-proxy | coredns | kube-router)
            want+=("${arg}") ;;
        *) die "unknown binary or group '${arg}'" ;;
    esac
done

if [[ "${mode}" == check ]]; then
    absent=()
    for w in "${want[@]}"; do [[ -x "${BIN_DIR}/${w}" ]] || absent+=("${w}"); done
    [[ " ${want[*]} " == *" kwok "* && ! -f "${BIN_DIR}/kwok-stages.yaml" ]] && absent+=(kwok-stages.yaml)
    if [[ " ${want[*]} " == *" coredns "* ]] &&
        [[ "$(cat "${BIN_DIR}/.stamp.coredns" 2>/dev/null)" != "$(coredns_stamp_text)" ]]; then
        absent+=("coredns ${COREDNS_VERSION}")
    fi
    if [[ " ${want[*]} " == *" kube-router "* ]] &&
        [[ "$(cat "${BIN_DIR}/.stamp.kube-router" 2>/dev/null)" != "$(kube_router_stamp_text)" ]]; then
        absent+=("kube-router ${KUBE_ROUTER_VERSION}")
    fi
    if [[ ! -f "${BIN_DIR}/.stamp" ]] || [[ "$(cat "${BIN_DIR}/.stamp")" != "$(stamp_text)" ]]; then
        echo "${BIN_DIR} was not built for the pinned versions (hack/versions.env)"
        exit 1
    fi
    if [[ ${#absent[@]} -gt 0 ]]; then echo "missing in ${BIN_DIR}: ${absent[*]}"; exit 1; fi
    exit 0
fi

mkdir -p "${BIN_DIR}" "${MOD_ROOT}"
exec 9>"${BIN_DIR}/.lock"
flock 9   # the stamps one run at a time (make and pytest may both ask); each project's build has its own lock below

STAMP="${BIN_DIR}/.stamp"
if [[ -f "${STAMP}" ]] && [[ "$(cat "${STAMP}")" != "$(stamp_text)" ]]; then
    log "pinned versions changed since the last build: discarding old binaries in ${BIN_DIR}"
    for b in "${CONTROLPLANE[@]}" "${NODE[@]}" kwok-stages.yaml; do rm -f "${BIN_DIR:?}/${b}"; done
fi
stamp_text >"${STAMP}"   # what this dir holds from now on
if [[ "$(cat "${BIN_DIR}/.stamp.coredns" 2>/dev/null)" != "$(coredns_stamp_text)" ]]; then
    rm -f "${BIN_DIR}/coredns"   # built for another COREDNS_VERSION or Go (or never)
fi
if [[ "$(cat "${BIN_DIR}/.stamp.kube-router" 2>/dev/null)" != "$(kube_router_stamp_text)" ]]; then
    rm -f "${BIN_DIR}/kube-router"
fi
exec 9>&-   # from here on two runs build different projects side by side (tier-builds' two lanes do)

needs() {  # needs NAME... -- true when one of these wanted files is still to be made
    [[ -n "$(missing "$@")" ]] && return 0
    [[ " $* " == *" kwok "* && " ${want[*]} " == *" kwok "* && ! -f "${BIN_DIR}/kwok-stages.yaml" ]]
}

# with_lock "NAME..." CMD... -- when one of the NAMEs (one project's binaries, the first naming the project) is
# to be made: CMD while holding that project's lock, so a project builds once at a time and another run
# building another project goes on meanwhile
with_lock() {
    local names="$1"
    shift
    # shellcheck disable=SC2086  # the names are words
    needs ${names} || return 0
    exec 8>"${BIN_DIR}/.lock.${names%% *}"
    flock 8
    "$@"
    exec 8>&-
}

missing() {  # the wanted binaries (of the given set) that do not exist yet
    local b w
    for b in "$@"; do
        for w in "${want[@]}"; do
            if [[ "${w}" == "${b}" && ! -x "${BIN_DIR}/${b}" ]]; then echo "${b}"; break; fi
        done
    done
}

# ---- module scaffolding --------------------------------------------------------------------------
# One tiny main module per upstream project, generated from versions.env. Each project keeps the
# dependency versions its own release chose (they disagree with each other), and identical packages are
# still compiled once thanks to the shared GOCACHE.
new_module() {  # new_module DIR MODULE@VERSION -> writes DIR/go.mod requiring MODULE
    local dir="$1" modver="$2"
    mkdir -p "${dir}"
    rm -f "${dir}/go.mod" "${dir}/go.sum"
    printf 'module warden.local/k8sbuild/%s\n\ngo 1.26.0\n\nrequire %s %s\n' \
        "$(basename "${dir}")" "${modver%@*}" "${modver#*@}" >"${dir}/go.mod"
}

kubernetes_module() {
    local dir="${MOD_ROOT}/kubernetes"
    new_module "${dir}" "k8s.io/kubernetes@${KUBERNETES_VERSION}"
    # k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with ./staging/...;
    # replace directives of a dependency do not apply, so repeat them pointing at the published tags.
    local gomod
    gomod="$(cd "${dir}" && go mod download -json "k8s.io/kubernetes@${KUBERNETES_VERSION}" |
        sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
    [[ -f "${gomod}" ]] || die "could not download k8s.io/kubernetes@${KUBERNETES_VERSION}"
    local staging
    staging="$(sed -n 's#^[[:space:]]*\(k8s\.io/[A-Za-z0-9._-]*\) => \./staging/.*#\1#p' "${gomod}" | sort -u)"
    [[ -n "${staging}" ]] || die "found no staging replace lines in ${gomod}"
    {
        echo
        echo "replace ("
        local m
        for m in ${staging}; do echo "	${m} => ${m} ${K8S_STAGING_VERSION}"; done
        echo ")"
    } >>"${dir}/go.mod"
    echo "${dir}"
}

# go build of several main packages in ONE invocation: shared packages are compiled once.
gobuild() {  # gobuild MODDIR LDFLAGS PKG...
    local dir="$1" ldflags="$2"
    shift 2
    (cd "${dir}" && go build -trimpath -ldflags="-s -w ${ldflags}" -o "${BIN_DIR}/" "$@")
}

timed() {  # timed LABEL CMD...
    local label="$1" t0 t1
    shift
    t0=$(date +%s)
    log "${label}: building ..."
    "$@"
    t1=$(date +%s)
    log "${label}: done in $((t1 - t0))s"
}

# ---- the builds ----------------------------------------------------------------------------------
build_kubernetes() {
    local names=("$@") pkgs=() n dir
    for n in "${names[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/${n}"); done
    dir="$(kubernetes_module)"
    local v="${KUBERNETES_VERSION#v}"
    local major="${v%%.*}" rest="${v#*.}"
    local minor="${rest%%.*}"
    local ld="-X k8s.io/component-base/version.gitVersion=${KUBERNETES_VERSION}"
    ld+=" -X k8s.io/component-base/version.gitMajor=${major} -X k8s.io/component-base/version.gitMinor=${minor}"
    ld+=" -X k8s.io/component-base/version.gitTreeState=clean"
    ld+=" -X k8s.io/client-go/pkg/version.gitVersion=${KUBERNETES_VERSION}"
    ld+=" -X k8s.io/client-go/pkg/version.gitMajor=${major} -X k8s.io/client-go/pkg/version.gitMinor=${minor}"
    gobuild "${dir}" "${ld}" "${pkgs[@]}"
}

build_etcd() {
    local dir="${MOD_ROOT}/etcd"
    new_module "${dir}" "go.etcd.io/etcd/server/v3@${ETCD_VERSION}"
    # The etcd main package is the module root; go build would name it "server".
    (cd "${dir}" && go build -trimpath -ldflags="-s -w" -o "${BIN_DIR}/etcd" go.etcd.io/etcd/server/v3)
}

build_kwok() {
    local dir="${MOD_ROOT}/kwok"
    new_module "${dir}" "sigs.k8s.io/kwok@${KWOK_VERSION}"
    gobuild "${dir}" "-X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION}" sigs.k8s.io/kwok/cmd/kwok
}

# kwok simulates nothing without Stage objects. Assemble its upstream "fast" stages (nodes become Ready and
# keep a Lease; pods become Running+Ready; pods owned by a Job then Succeed; deleted pods go away) from
# the pinned kwok module itself, into one multi-document config file next to the binary.
write_kwok_stages() {
    local dir="${MOD_ROOT}/kwok" src out="${BIN_DIR}/kwok-stages.yaml" sub f
    [[ -f "${dir}/go.mod" ]] || new_module "${dir}" "sigs.k8s.io/kwok@${KWOK_VERSION}"
    src="$(cd "${dir}" && go mod download -json "sigs.k8s.io/kwok@${KWOK_VERSION}" |
        sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [[ -d "${src}/kustomize/stage" ]] || die "kwok module has no kustomize/stage dir (${src})"
    {
        echo "# Generated by hack/build-k8s-bins.sh from sigs.k8s.io/kwok@${KWOK_VERSION}/kustomize/stage"
        for sub in node/fast node/heartbeat-with-lease pod/fast; do
            # the resources a kustomization lists, in its order
            sed -n 's/^- *\([A-Za-z0-9._-]*\.yaml\) *$/\1/p' "${src}/kustomize/stage/${sub}/kustomization.yaml" |
                while read -r f; do
                    echo "---"
                    cat "${src}/kustomize/stage/${sub}/${f}"
                done
        done
    } >"${out}.tmp"
    grep -q 'name: pod-complete' "${out}.tmp" || die "kwok stages lack pod-complete"
    mv "${out}.tmp" "${out}"
}

build_helm() {
    local dir="${MOD_ROOT}/helm" mod="helm.sh/helm/${HELM_MAJOR}"
    new_module "${dir}" "${mod}@${HELM_VERSION}"
    gobuild "${dir}" "-X ${mod}/internal/version.version=${HELM_VERSION}" "${mod}/cmd/helm"
}

# CoreDNS: the main package is the module root (coremain carries the version itself).
build_coredns() {
    local dir="${MOD_ROOT}/coredns"
    new_module "${dir}" "github.com/coredns/coredns@${COREDNS_VERSION}"
    (cd "${dir}" && go build -trimpath -ldflags="-s -w" -o "${BIN_DIR}/coredns" github.com/coredns/coredns)
    coredns_stamp_text >"${BIN_DIR}/.stamp.coredns"
}

# kube-router: from its source archive (not served as a module), into a fresh tree each build
build_kube_router() {
    local src="${MOD_ROOT}/kube-router-src"
    [[ -f "${KUBE_ROUTER_ARCHIVE}" ]] || die "${KUBE_ROUTER_ARCHIVE} missing (set WARDEN_THIRDPARTY to the folder holding it)"
    echo "${KUBE_ROUTER_SHA256}  ${KUBE_ROUTER_ARCHIVE}" | sha256sum --check --quiet - ||
        die "${KUBE_ROUTER_ARCHIVE}: sha256 is not ${KUBE_ROUTER_SHA256}"
    rm -rf "${src}"
    mkdir -p "${src}"
    tar -xzf "${KUBE_ROUTER_ARCHIVE}" -C "${src}" --strip-components=1
    (cd "${src}" && go mod edit -replace "${KUBE_ROUTER_REPLACE}" &&
        go build -trimpath -ldflags="-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=${KUBE_ROUTER_VERSION}" \
            -o "${BIN_DIR}/kube-router" ./cmd/kube-router)
    kube_router_stamp_text >"${BIN_DIR}/.stamp.kube-router"
}

total0=$(date +%s)
log "bin dir: ${BIN_DIR} (Go $(go env GOVERSION), GOMAXPROCS=${GOMAXPROCS:-$(nproc)})"
built=0
# each step asks again what is missing once it holds its project's lock: another run may have built it meanwhile
step_kubernetes() {
    local kube
    mapfile -t kube < <(missing kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
    if [[ ${#kube[@]} -gt 0 ]]; then timed "kubernetes ${KUBERNETES_VERSION} (${kube[*]})" build_kubernetes "${kube[@]}"; built=1; fi
}
step_kwok() {
    if [[ -n "$(missing kwok)" ]]; then timed "kwok ${KWOK_VERSION}" build_kwok; built=1; fi
    if [[ " ${want[*]} " == *" kwok "* && ! -f "${BIN_DIR}/kwok-stages.yaml" ]]; then
        timed "kwok stages" write_kwok_stages
    fi
}
step() {  # step NAME LABEL BUILD_FN -- the one-binary projects
    if [[ -n "$(missing "$1")" ]]; then timed "$2" "$3"; built=1; fi
}
with_lock "kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy" step_kubernetes
with_lock etcd step etcd "etcd ${ETCD_VERSION}" build_etcd
with_lock kwok step_kwok
with_lock helm step helm "helm ${HELM_VERSION}" build_helm
with_lock coredns step coredns "coredns ${COREDNS_VERSION}" build_coredns
with_lock kube-router step kube-router "kube-router ${KUBE_ROUTER_VERSION}" build_kube_router

for w in "${want[@]}"; do [[ -x "${BIN_DIR}/${w}" ]] || die "${w} was not built"; done
if [[ ${built} -eq 1 ]]; then
    log "all done in $(($(date +%s) - total0))s"
else
    log "up to date (${want[*]})"
fi
echo "${BIN_DIR}"
