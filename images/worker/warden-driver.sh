# shellcheck shell=bash
# The node's NVIDIA driver in every job step of a GPU worker. Sourced by the worker entrypoint after
# warden-lib.sh; installed at /usr/lib/warden/warden-driver.sh. See docs/architecture.md, "The node's driver in GPU job steps".
#
# The GPU runtime (NVIDIA container toolkit, CDI, GKE's driver installer) gives the worker CONTAINER
# the driver's user-space files (libcuda, libnvidia-ml, libnvidia-ptxjitcompiler, libnvidia-nvvm,
# libnvidia-gpucomp, ... and nvidia-smi) at the usual paths. Job steps run in the jail, which has none
# of them and must not: each node shows its OWN driver, and nothing is written to the shared volume.
# So, in this container's mount namespace only (job steps copy it when the SPANK plugin enters the jail):
#   1. stage: a tmpfs at $WARDEN_DRIVER_STAGE gets lib/ (a read-only bind of every driver library
#      found, first directory wins, plus its soname links), bin/ (the driver's programs) and `version`;
#   2. show: the stage is bound at $WARDEN_DRIVER_JAIL_DIR in the jail, and the node's nvidia-smi over
#      the jail's /usr/bin/nvidia-smi (a stub saying that the node has no driver);
#   3. find: the dynamic loader reads /etc/ld.so.cache only. A cache of the jail's own libraries plus
#      $WARDEN_DRIVER_JAIL_DIR/lib, built for this node (ldconfig -r on the jail, in a private mount
#      namespace whose tmpfs take every write ldconfig makes), is bound over the jail's. When the
#      jail's own cache changes (packages installed from a login node), warden_driver_refresh builds
#      it again. Jobs need no LD_LIBRARY_PATH.
# Environment:
#   WARDEN_DRIVER_LIB_DIRS   where the runtime puts libraries (default: GKE's, then the distributions')
#   WARDEN_DRIVER_BIN_DIRS   where it puts programs
# Sets WARDEN_DRIVER_PROBLEM (empty when the driver is in place) and WARDEN_DRIVER_VERSION.

WARDEN_DRIVER_STAGE="${WARDEN_DRIVER_STAGE:-/run/warden/driver}"
WARDEN_DRIVER_JAIL_DIR=/usr/lib/warden/driver
WARDEN_DRIVER_LIB_DIRS="${WARDEN_DRIVER_LIB_DIRS:-/usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64}"
WARDEN_DRIVER_BIN_DIRS="${WARDEN_DRIVER_BIN_DIRS:-/usr/local/nvidia/bin /usr/bin /usr/local/bin}"
# What NVIDIA's container toolkit calls the compute and utility driver libraries, and their programs.
WARDEN_DRIVER_LIB_GLOBS="libcuda.so* libcudadebugger.so* libnvidia-*.so* libnvcuvid.so*"
WARDEN_DRIVER_PROGRAMS="nvidia-smi nvidia-debugdump nvidia-cuda-mps-control nvidia-cuda-mps-server"
# The jail volume itself, without this container's binds over it (to notice the jail's own changes).
WARDEN_JAIL_VOLUME=/run/warden/jail-volume
WARDEN_DRIVER_PROBLEM=""
WARDEN_DRIVER_VERSION=""
WARDEN_DRIVER_CACHE_OF=""

# Bind FILE read-only at the staged path DST (an empty file on the stage's tmpfs).
warden_driver_bind_file() {
    : >"$2" && mount --bind "$1" "$2" && mount -o remount,bind,ro "$2"
}

# 1. Fill the stage from the container's driver files. Returns 1 (WARDEN_DRIVER_PROBLEM set) when the
# driver is not complete enough for CUDA and nvidia-smi.
warden_driver_stage() {
    local lib="$WARDEN_DRIVER_STAGE/lib" bin="$WARDEN_DRIVER_STAGE/bin" d real seen=" " g f name target p
    install -d -m 0755 "$WARDEN_DRIVER_STAGE"
    mountpoint -q "$WARDEN_DRIVER_STAGE" ||
        mount -t tmpfs -o mode=0755,size=4m warden-driver "$WARDEN_DRIVER_STAGE" || {
        WARDEN_DRIVER_PROBLEM="cannot mount a tmpfs at $WARDEN_DRIVER_STAGE (CAP_SYS_ADMIN?)"
        return 1
    }
    install -d -m 0755 "$lib" "$bin"
    for d in $WARDEN_DRIVER_LIB_DIRS; do
        [ -d "$d" ] || continue
        real="$(readlink -f "$d")"
        case "$seen" in *" $real "*) continue ;; esac
        seen+="$real "
        for g in $WARDEN_DRIVER_LIB_GLOBS; do
            for f in "$d"/$g; do
                name="${f##*/}"
                [ -e "$f" ] || continue # no match, or a dangling link
                [ -e "$lib/$name" ] || [ -L "$lib/$name" ] && continue
                target="$(readlink -f "$f")"
                if [ -L "$f" ] && [ "$(dirname "$target")" = "$real" ]; then
                    ln -s "${target##*/}" "$lib/$name" # libcuda.so.1 -> libcuda.so.580.159.04
                    [ -e "$lib/${target##*/}" ] || warden_driver_bind_file "$target" "$lib/${target##*/}"
                else
                    warden_driver_bind_file "$target" "$lib/$name"
                fi || warden_log "driver: warning: cannot stage $f"
            done
        done
    done
    for p in $WARDEN_DRIVER_PROGRAMS; do
        for d in $WARDEN_DRIVER_BIN_DIRS; do
            [ -x "$d/$p" ] || continue
            warden_driver_bind_file "$(readlink -f "$d/$p")" "$bin/$p" || warden_log "driver: warning: cannot stage $d/$p"
            break
        done
    done
    # soname links the runtime did not make (the toolkit mounts libcuda.so.<version> alone); they are
    # written on the stage's tmpfs only
    ldconfig -n "$lib" 2>/dev/null || true
    WARDEN_DRIVER_VERSION="$(find "$lib" -maxdepth 1 -name 'libcuda.so.*.*' -printf '%f\n' | sed 's/^libcuda\.so\.//' | sort -V | tail -n 1)"
    printf '%s\n' "${WARDEN_DRIVER_VERSION:-unknown}" >"$WARDEN_DRIVER_STAGE/version"
    local missing=() list
    for f in lib/libcuda.so.1 lib/libnvidia-ml.so.1 bin/nvidia-smi; do
        [ -e "$WARDEN_DRIVER_STAGE/$f" ] || missing+=("${f#*/}")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        list="$(printf '%s, ' "${missing[@]}")"
        WARDEN_DRIVER_PROBLEM="no NVIDIA driver (${list%, } missing)" # as warden-quickcheck says it
        return 1
    fi
}

# The jail's /etc/ld.so.cache on the volume, as "inode mtime size": it changes when anyone runs
# ldconfig in the jail.
warden_driver_jail_cache_id() {
    stat -c '%i %Y %s' "$WARDEN_JAIL_VOLUME/etc/ld.so.cache" 2>/dev/null || echo none
}

# 3. Build this node's loader cache into the stage and bind it over the jail's /etc/ld.so.cache.
warden_driver_cache() {
    local out="$WARDEN_DRIVER_STAGE/ld.so.cache" id
    id="$(warden_driver_jail_cache_id)"
    # ldconfig -r reads the jail's /etc/ld.so.conf and writes its cache and aux cache INSIDE the root:
    # private tmpfs over the jail's /tmp and /var/cache/ldconfig take them (-X: no links made)
    if ! unshare -m --propagation private sh -euc '
        jail="$1" out="$2" dir="$3"
        mount -t tmpfs -o size=64m warden-ldconfig "$jail/tmp"
        if [ -d "$jail/var/cache/ldconfig" ]; then mount -t tmpfs -o size=4m warden-ldconfig "$jail/var/cache/ldconfig"; fi
        ldconfig -r "$jail" -X -C /tmp/ld.so.cache "$dir/lib"
        cp "$jail/tmp/ld.so.cache" "$out"
    ' sh "$WARDEN_JAIL" "$out.new" "$WARDEN_DRIVER_JAIL_DIR"; then
        rm -f "$out.new"
        warden_log "driver: error: ldconfig for the jail failed"
        return 1
    fi
    mv -f "$out.new" "$out"
    chmod 0644 "$out"
    if mountpoint -q "$WARDEN_JAIL/etc/ld.so.cache"; then umount "$WARDEN_JAIL/etc/ld.so.cache" || true; fi
    mount --bind "$out" "$WARDEN_JAIL/etc/ld.so.cache" && mount -o remount,bind,ro "$WARDEN_JAIL/etc/ld.so.cache" || {
        warden_log "driver: error: cannot bind the loader cache at $WARDEN_JAIL/etc/ld.so.cache"
        return 1
    }
    WARDEN_DRIVER_CACHE_OF="$id"
}

# Steps 1-3, once at start on a GPU worker (after warden_jail_binds). Returns 1 with
# WARDEN_DRIVER_PROBLEM set when job steps cannot get the driver; the caller drains the node.
warden_driver_setup() {
    install -d -m 0755 "$WARDEN_JAIL_VOLUME"
    mountpoint -q "$WARDEN_JAIL_VOLUME" || mount --bind "$WARDEN_JAIL" "$WARDEN_JAIL_VOLUME" || {
        WARDEN_DRIVER_PROBLEM="cannot bind the jail volume at $WARDEN_JAIL_VOLUME"
        return 1
    }
    mount -o remount,bind,ro "$WARDEN_JAIL_VOLUME" || true
    warden_driver_stage || return 1
    if [ ! -d "$WARDEN_JAIL_VOLUME$WARDEN_DRIVER_JAIL_DIR" ]; then
        WARDEN_DRIVER_PROBLEM="the jail has no $WARDEN_DRIVER_JAIL_DIR (populate it from a current jail image)"
        return 1
    fi
    warden_driver_show || return 1
    warden_driver_cache || {
        WARDEN_DRIVER_PROBLEM="could not build the jail's loader cache with the driver"
        return 1
    }
    warden_log "driver: NVIDIA $WARDEN_DRIVER_VERSION for job steps: $(cd "$WARDEN_DRIVER_STAGE" && echo lib/* bin/*) at $WARDEN_DRIVER_JAIL_DIR"
}

# 2. The stage at its jail path (recursively: its files are bind mounts) and nvidia-smi on PATH.
warden_driver_show() {
    local jail_dir="$WARDEN_JAIL$WARDEN_DRIVER_JAIL_DIR"
    if ! mountpoint -q "$jail_dir"; then
        mount --rbind "$WARDEN_DRIVER_STAGE" "$jail_dir" || {
            WARDEN_DRIVER_PROBLEM="cannot bind $WARDEN_DRIVER_STAGE at $jail_dir"
            return 1
        }
    fi
    if [ -f "$WARDEN_JAIL_VOLUME/usr/bin/nvidia-smi" ] && ! mountpoint -q "$WARDEN_JAIL/usr/bin/nvidia-smi"; then
        mount --bind "$WARDEN_DRIVER_STAGE/bin/nvidia-smi" "$WARDEN_JAIL/usr/bin/nvidia-smi" &&
            mount -o remount,bind,ro "$WARDEN_JAIL/usr/bin/nvidia-smi" ||
            warden_log "driver: warning: nvidia-smi only at $WARDEN_DRIVER_JAIL_DIR/bin in the jail"
    fi
}

# Each poll of warden_follow: put the driver back where a replaced jail file took it away, and build
# the loader cache again when the jail's own cache changed.
warden_driver_refresh() {
    [ -z "$WARDEN_DRIVER_PROBLEM" ] && [ -n "$WARDEN_DRIVER_CACHE_OF" ] || return 0
    warden_driver_show || warden_log "driver: $WARDEN_DRIVER_PROBLEM"
    local id
    id="$(warden_driver_jail_cache_id)"
    if [ "$id" != "$WARDEN_DRIVER_CACHE_OF" ] || ! mountpoint -q "$WARDEN_JAIL/etc/ld.so.cache"; then
        warden_driver_cache && warden_log "driver: the jail's loader cache changed; built it again with the driver"
    fi
}
