#!/usr/bin/env bash
# hack/gpu-check.sh - the GPU path of a job step, end to end, on one machine with no Docker, no
# Kubernetes, no Slurm and no network (issue 13). As root it:
#
#   1. builds the plugin's jail-entry code (spank/jail_enter.c, through spank/tests/jail_run.c: the
#      plugin's argument parser and mount/pivot_root sequence, then exec) and, from the pristine
#      archive, nccl-tests' all_reduce_perf for this machine's GPUs;
#   2. makes a jail root out of this machine's own system: writable overlays of /usr, /etc, /opt (and
#      /bin, /sbin, /lib* where they are directories) whose writes land on a tmpfs, the jail image's
#      mount points and stub /usr/bin/nvidia-smi (copied from jail/setup.sh), and NO NVIDIA driver: the
#      machine's driver files are hidden in that view (/usr/local/nvidia under an empty tmpfs, every
#      libcuda/libnvidia-*/nvidia-smi elsewhere deleted from the overlay only), and the jail gets its
#      own loader cache (ldconfig -r), as a jail image has;
#   3. runs nvidia-smi, a libcuda probe (spank/tests/cuda_probe.c) and all_reduce_perf in that jail
#      WITHOUT the driver injection: the control, which must fail;
#   4. injects the node's driver exactly as a GPU worker does: sources images/worker/warden-driver.sh
#      and runs warden_driver_setup (stage on a tmpfs, bound at /usr/lib/warden/driver, the node's
#      nvidia-smi over the stub, a loader cache with the driver bound over the jail's);
#   5. runs the same in the jail WITH it: nvidia-smi, nvidia-smi -L, the probe (which file the loader
#      mapped), then all_reduce_perf -b 512M -e 8G -f 2 -g <GPUs>, and prints its output;
#   6. feeds that output to the NCCL health check's own parser and classifier
#      (warden.health.nccl.parse_all_reduce_perf, warden.health.check.classify): busbw, outcome, the
#      drain reason the check would set;
#   7. runs the quick health check's checks (warden.health.quickcheck.find_problems) against the
#      staged driver, the device files and the jail;
#   8. times jail entry against a plain exec, and prints a summary of the figures.
#
# Everything runs in a private mount namespace (unshare -m): no mount, device file or file written
# under the jail is left on the machine; builds are cached in git-ignored directories (spank/build,
# .cache/gpu-check). Job steps get a clean environment (env -i: PATH, HOME, NCCL_*,
# CUDA_VISIBLE_DEVICES), so nothing but the jail's loader cache can point them at a driver.
#
# Usage:
#   hack/gpu-check.sh              on a GPU machine: the node's real driver, nvcc, NCCL, the archive
#   hack/gpu-check.sh --stand-in   anywhere (CI): the STAND-IN driver of hack/fakedriver, stand-in
#                                  /dev/nvidia<N> (inside this run's namespace only); no CUDA kernel
#                                  can run, so all_reduce_perf is not run and the parser and
#                                  classifier read a constructed fixture of tests/unit/fixtures/nccl
#                                  (nccl-tests is still built when nvcc, NCCL and the archive exist)
#
# On a GPU machine that only gets the repository's working tree (the device machines of this
# workplace: docs/health-checks.md, "hack/gpu-check.sh on a GPU machine"), copy the nccl-tests archive
# into the git-ignored .cache/thirdparty/ first and send that folder along:
#   mkdir -p .cache/thirdparty && cp ../shared/thirdparty/nccl-tests-2.19.6.tar.gz .cache/thirdparty/
# The archive is never committed.
#
# Environment (all optional):
#   WARDEN_NCCL_TESTS_ARCHIVE   nccl-tests-2.19.6.tar.gz (default: .cache/thirdparty/, then
#                               ../shared/thirdparty/); its sha256 is checked
#   WARDEN_CUDA_HOME            the CUDA toolkit (default: $CUDA_HOME, /usr/local/cuda, nvcc on PATH)
#   WARDEN_NCCL_HOME            a directory with include/nccl.h and lib/libnccl.so.2 (default: searched
#                               under /opt, /usr/local, /usr/lib*: pip's nvidia-nccl-cu1x wheels too)
#   NVCC_GENCODE                default: the GPUs' own (nvidia-smi --query-gpu=compute_cap)
#   WARDEN_GPU_CHECK_GPUS       all_reduce_perf -g (default: the GPUs nvidia-smi -L lists in the jail)
#   WARDEN_GPU_CHECK_NCCL_ARGS  default "-b 512M -e 8G -f 2" (the NCCL check's defaults)
#   WARDEN_GPU_CHECK_NCCL_TIMEOUT  seconds (default 600)
#   WARDEN_GPU_CHECK_THRESHOLD_GBPS  the NCCL check's busbw threshold (default 100, as warden-health)
#   WARDEN_GPU_CHECK_BUILD      build cache (default .cache/gpu-check in the repository)
#   WARDEN_GPU_CHECK_PYTHON     python3 (>= 3.11) that runs the health-check code (default python3)
#   WARDEN_DRIVER_LIB_DIRS, WARDEN_DRIVER_BIN_DIRS   where the driver is (warden-driver.sh's defaults)
#   stand-in only: WARDEN_STAND_IN_VERSION (580.159.04), WARDEN_STAND_IN_CUDA_VERSION (13000),
#                  WARDEN_STAND_IN_GPUS (2), WARDEN_GPU_CHECK_NCCL_FIXTURE (h100_8gpu_ok.txt)
#
# Exit status: 0 every check passed; 1 a check failed (each failure is printed as "FAIL: ..." and
# listed at the end); 77 this machine cannot run it (not root, no unshare, no overlayfs, no compiler).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NCCL_TESTS_VERSION=2.19.6
NCCL_TESTS_SHA256=a93c09241f55985677caa5151caaa8b1fc7cd6dfa40201e2ea1534d3326c983f
NCCL_TESTS_ARCHIVE_NAME="nccl-tests-$NCCL_TESTS_VERSION.tar.gz"
DRIVER_FILE_NAMES=(libcuda.so\* libcudadebugger.so\* libnvidia-\*.so\* libnvcuvid.so\* nvidia-smi nvidia-debugdump nvidia-cuda-mps-\*)
JAIL_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

MODE=gpu
[ "${WARDEN_GPU_CHECK_STAND_IN:-}" = 1 ] && MODE=stand-in
for arg in "$@"; do
    case "$arg" in
        --stand-in) MODE=stand-in ;;
        -h | --help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) echo "gpu-check: unknown argument '$arg' (--stand-in, --help)" >&2; exit 2 ;;
    esac
done

say() { printf '%s\n' "$*"; }
step() { printf '\n== %s ==\n' "$*"; }
cannot_run() { echo "gpu-check: cannot run here: $*" >&2; exit 77; }
die() { echo "gpu-check: FAIL: $*" >&2; exit 1; }
FAILURES=()
fail() { say "FAIL: $*"; FAILURES+=("$*"); }
now() { printf '%s' "$EPOCHREALTIME"; }
# seconds since $1 (a now), 1 decimal
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }
# Indent a command's output so it stands apart from the script's own lines.
show() { sed 's/^/    /'; }

# ---------------------------------------------------------------------------------------------------
# Outside the namespace: check the machine, then run the rest in a private mount namespace and check
# afterwards that nothing stayed behind.
if [ -z "${WARDEN_GPU_CHECK_WORK:-}" ]; then
    [ "$(id -u)" = 0 ] || cannot_run "needs root (mount namespaces, bind mounts, pivot_root)"
    for tool in unshare mount umount findmnt mountpoint ldconfig make cc awk sha256sum tar; do
        command -v "$tool" >/dev/null || cannot_run "$tool is missing"
    done
    unshare -m --propagation private true 2>/dev/null || cannot_run "unshare -m is refused here"
    grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || cannot_run "no overlayfs in this kernel"
    work="$(mktemp -d "${TMPDIR:-/tmp}/warden-gpu-check.XXXXXX")"
    # The namespace's mounts are private to it: here $work is an empty directory again.
    trap 'rm -rf "$work"' EXIT
    devices_before="$(find /dev -mindepth 1 -maxdepth 1 -name 'nvidia*' 2>/dev/null | wc -l)"
    rc=0
    WARDEN_GPU_CHECK_WORK="$work" WARDEN_GPU_CHECK_MODE="$MODE" WARDEN_GPU_CHECK_HOST_NS="$(readlink /proc/self/ns/mnt)" \
        unshare -m --propagation private -- \
        bash "${BASH_SOURCE[0]}" "$@" || rc=$?
    left="$(findmnt -rn -o TARGET | grep -c "^$work" || true)"
    devices_after="$(find /dev -mindepth 1 -maxdepth 1 -name 'nvidia*' 2>/dev/null | wc -l)"
    if [ "$left" != 0 ] || [ "$devices_after" != "$devices_before" ]; then
        echo "gpu-check: FAIL: the run left $left mount(s) under $work and /dev nvidia* entries went from $devices_before to $devices_after" >&2
        exit 1
    fi
    echo "host: nothing left behind (no mount under $work, /dev unchanged)"
    [ "$rc" = 0 ] || echo "gpu-check: exit status $rc"
    exit "$rc"
fi

# ---------------------------------------------------------------------------------------------------
# Inside the private mount namespace.
# (never the caller's mount namespace, whatever the environment says)
[ "$(readlink /proc/self/ns/mnt)" != "${WARDEN_GPU_CHECK_HOST_NS:-}" ] && [ -n "${WARDEN_GPU_CHECK_HOST_NS:-}" ] ||
    die "WARDEN_GPU_CHECK_WORK is set, but this is not the script's own mount namespace; unset it"
MODE="$WARDEN_GPU_CHECK_MODE"
WORK="$WARDEN_GPU_CHECK_WORK"
mount -t tmpfs -o mode=0755 warden-gpu-check "$WORK" || cannot_run "cannot mount a tmpfs at $WORK"
PY="${WARDEN_GPU_CHECK_PYTHON:-python3}"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null ||
    cannot_run "$PY is missing or older than 3.11 (the health-check code needs 3.11)"
BUILD="${WARDEN_GPU_CHECK_BUILD:-$REPO/.cache/gpu-check}"
J="$WORK/jail"              # the jail root
VOL="$WORK/jail-volume"     # the jail as on its volume, without this node's binds (warden-driver.sh)
STAGE="$WORK/driver"        # WARDEN_DRIVER_STAGE
declare -A FIG=()           # figures for the summary
fig() { FIG[$1]="$2"; }
T0="$(now)"

say "gpu-check: mode $MODE on $(hostname), kernel $(uname -r), $(nproc) CPUs; work dir $WORK (tmpfs, this namespace only)"
fig mode "$MODE"

# ---------------------------------------------------------------------------------------------------
step "1. build"
t="$(now)"
make -s -C "$REPO/spank" jail-run >"$WORK/spank-build.log" 2>&1 || {
    show <"$WORK/spank-build.log"
    cannot_run "make -C spank jail-run failed (a C compiler?)"
}
JAIL_RUN="$REPO/spank/build/jail_run"
PROBE="$REPO/spank/build/cuda_probe"
say "jail_run, cuda_probe: make -C spank jail-run ($(since "$t") s): $JAIL_RUN"

if [ "$MODE" = stand-in ]; then
    STANDIN_VERSION="${WARDEN_STAND_IN_VERSION:-580.159.04}"
    STANDIN_GPUS="${WARDEN_STAND_IN_GPUS:-2}"
    [[ "$STANDIN_GPUS" =~ ^[1-9][0-9]*$ ]] || die "WARDEN_STAND_IN_GPUS must be 1 or more"
    t="$(now)"
    make -s -C "$REPO/hack/fakedriver" OUT="$WORK/stand-in" VERSION="$STANDIN_VERSION" \
        CUDA_VERSION="${WARDEN_STAND_IN_CUDA_VERSION:-13000}" >"$WORK/fakedriver.log" 2>&1 || {
        show <"$WORK/fakedriver.log"
        die "building the stand-in driver failed"
    }
    export WARDEN_DRIVER_LIB_DIRS="$WORK/stand-in/lib64" WARDEN_DRIVER_BIN_DIRS="$WORK/stand-in/bin"
    say "stand-in driver $STANDIN_VERSION: make -C hack/fakedriver ($(since "$t") s) into $WORK/stand-in (outside the jail)"
fi
# The driver's directories as warden-driver.sh searches them (its defaults unless set).
DRIVER_LIB_DIRS="${WARDEN_DRIVER_LIB_DIRS:-/usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64}"
DRIVER_BIN_DIRS="${WARDEN_DRIVER_BIN_DIRS:-/usr/local/nvidia/bin /usr/bin /usr/local/bin}"

# The node's nvidia-smi, outside the jail (for the GPUs' compute capability only).
host_smi() {
    local d libpath=""
    for d in $DRIVER_LIB_DIRS; do libpath+="$d:"; done
    for d in $DRIVER_BIN_DIRS; do
        if [ -x "$d/nvidia-smi" ]; then
            LD_LIBRARY_PATH="${libpath%:}" "$d/nvidia-smi" "$@"
            return
        fi
    done
    return 127
}

find_archive() {
    local f
    for f in "${WARDEN_NCCL_TESTS_ARCHIVE:-}" "$REPO/.cache/thirdparty/$NCCL_TESTS_ARCHIVE_NAME" \
        "$REPO/../shared/thirdparty/$NCCL_TESTS_ARCHIVE_NAME"; do
        [ -n "$f" ] && [ -f "$f" ] && { printf '%s\n' "$f"; return 0; }
    done
    return 1
}

find_cuda() {
    local c
    for c in "${WARDEN_CUDA_HOME:-}" "${CUDA_HOME:-}" /usr/local/cuda; do
        [ -n "$c" ] && [ -x "$c/bin/nvcc" ] && { printf '%s\n' "$c"; return 0; }
    done
    c="$(command -v nvcc 2>/dev/null)" || return 1
    dirname "$(dirname "$(readlink -f "$c")")"
}

# Prints "LIBDIR INCLUDEDIR" of an NCCL (libnccl.so.2 and nccl.h).
find_nccl() {
    local lib dir inc
    if [ -n "${WARDEN_NCCL_HOME:-}" ]; then
        for lib in "$WARDEN_NCCL_HOME"/lib/libnccl.so.2 "$WARDEN_NCCL_HOME"/lib64/libnccl.so.2; do
            [ -e "$lib" ] && [ -f "$WARDEN_NCCL_HOME/include/nccl.h" ] &&
                { printf '%s %s\n' "$(dirname "$(readlink -f "$lib")")" "$WARDEN_NCCL_HOME/include"; return 0; }
        done
        return 1
    fi
    while read -r lib; do
        dir="$(dirname "$(readlink -f "$lib")")"
        for inc in "$(dirname "$(dirname "$lib")")/include" /usr/include /usr/local/include; do
            [ -f "$inc/nccl.h" ] && { printf '%s %s\n' "$dir" "$inc"; return 0; }
        done
    done < <(find /opt /usr/local /usr/lib /usr/lib64 -name libnccl.so.2 ! -path '*/stubs/*' 2>/dev/null | sort)
    return 1
}

# Builds all_reduce_perf (cached by its inputs); sets ALL_REDUCE_PERF and NCCL_LIB_DIR. Returns 1
# with NCCL_SKIP set to why when a prerequisite is missing.
NCCL_SKIP="" ALL_REDUCE_PERF="" NCCL_LIB_DIR="" CUDA_LIB_DIR=""
build_nccl_tests() {
    local archive cuda inc gencode caps cap key bdir cudart t
    archive="$(find_archive)" || {
        NCCL_SKIP="no $NCCL_TESTS_ARCHIVE_NAME (set WARDEN_NCCL_TESTS_ARCHIVE or copy it into $REPO/.cache/thirdparty/)"
        return 1
    }
    cuda="$(find_cuda)" || { NCCL_SKIP="no nvcc (set WARDEN_CUDA_HOME)"; return 1; }
    read -r NCCL_LIB_DIR inc < <(find_nccl) || { NCCL_SKIP="no NCCL (libnccl.so.2 + nccl.h; set WARDEN_NCCL_HOME)"; return 1; }
    echo "$NCCL_TESTS_SHA256  $archive" | sha256sum -c --status - || die "$archive: sha256 is not $NCCL_TESTS_SHA256"
    if [ -n "${NVCC_GENCODE:-}" ]; then
        gencode="$NVCC_GENCODE"
    elif caps="$(host_smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d ' .' | sort -u)" && [ -n "$caps" ]; then
        gencode=""
        for cap in $caps; do gencode+="-gencode=arch=compute_$cap,code=sm_$cap "; done
        gencode="${gencode% }"
    else
        gencode="-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90"
        say "(no compute capability from nvidia-smi: building for sm_80, sm_90 and compute_90 PTX, as warden/jail-gpu)"
    fi
    # the CUDA runtime linked statically when the toolkit has it: only libnccl.so.2 is needed at run time
    cudart=cudart_static
    if [ ! -f "$cuda/lib64/libcudart_static.a" ]; then
        cudart=cudart
        CUDA_LIB_DIR="$(readlink -f "$cuda/lib64")"
    fi
    key="$(printf '%s|%s|%s|%s|%s' "$NCCL_TESTS_SHA256" "$cuda" "$NCCL_LIB_DIR" "$gencode" "$cudart" | sha256sum | cut -c1-12)"
    bdir="$BUILD/nccl-tests-$NCCL_TESTS_VERSION-$key"
    mkdir -p "$bdir/src" "$bdir/nccl-home/lib"
    [ -f "$bdir/src/src/all_reduce.cu" ] || tar -xzf "$archive" -C "$bdir/src" --strip-components=1
    # NCCL_HOME as nccl-tests wants it: include/ and lib/libnccl.so (pip's wheels have libnccl.so.2 only)
    ln -sfn "$inc" "$bdir/nccl-home/include"
    ln -sfn "$NCCL_LIB_DIR/libnccl.so.2" "$bdir/nccl-home/lib/libnccl.so"
    say "nccl-tests $NCCL_TESTS_VERSION from $archive (sha256 ok)"
    say "  CUDA $cuda ($("$cuda/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')), NCCL $NCCL_LIB_DIR, $cudart"
    say "  NVCC_GENCODE=$gencode"
    t="$(now)"
    if ! make -C "$bdir/src/src" -j"$(nproc)" MPI=0 CUDA_HOME="$cuda" NCCL_HOME="$bdir/nccl-home" \
        NVCC_GENCODE="$gencode" CUDARTLIB="$cudart" BUILDDIR="$bdir/build" "$bdir/build/all_reduce_perf" \
        >"$bdir/build.log" 2>&1; then
        tail -n 40 "$bdir/build.log" | show
        die "building all_reduce_perf failed (whole log: $bdir/build.log)"
    fi
    ALL_REDUCE_PERF="$bdir/build/all_reduce_perf"
    say "  built $ALL_REDUCE_PERF in $(since "$t") s (make is a no-op when nothing changed)"
    fig nccl_tests_build_s "$(since "$t")"
}

NCCL_BUILT=0
if build_nccl_tests; then
    NCCL_BUILT=1
elif [ "$MODE" = gpu ]; then
    die "cannot build all_reduce_perf: $NCCL_SKIP"
else
    say "nccl-tests: build skipped: $NCCL_SKIP"
fi

# ---------------------------------------------------------------------------------------------------
step "2. a jail root from this machine's system, without its NVIDIA driver"

# A writable view of host directory $1 at $2; the writes land on this run's tmpfs, never on $1.
overlay_dir() {
    local name="${2#"$J"}"
    name="${name//\//_}"
    mkdir -p "$WORK/ovl/$name/upper" "$WORK/ovl/$name/work" "$2"
    mount -t overlay -o "lowerdir=$1,upperdir=$WORK/ovl/$name/upper,workdir=$WORK/ovl/$name/work" \
        warden-gpu-check "$2" || cannot_run "cannot mount an overlay of $1 (overlayfs refused)"
}

if [ "$MODE" = stand-in ]; then
    # /dev/nvidia<N> for the stand-in driver, which counts them as the real one does: an overlay over
    # /dev in this namespace (its submounts put back), so the machine's /dev never changes.
    mkdir -p "$WORK/dev-host" "$WORK/ovl/dev/upper" "$WORK/ovl/dev/work"
    mount --rbind /dev "$WORK/dev-host"
    mapfile -t dev_subs < <(findmnt -rn -o TARGET -R /dev | tail -n +2)
    mount -t overlay -o "lowerdir=$WORK/dev-host,upperdir=$WORK/ovl/dev/upper,workdir=$WORK/ovl/dev/work" \
        warden-gpu-check-dev /dev || cannot_run "cannot mount an overlay over /dev"
    bound=" "
    for sub in "${dev_subs[@]}"; do
        skip=0
        for b in $bound; do case "$sub/" in "$b"/*) skip=1 ;; esac; done
        [ "$skip" = 1 ] && continue
        [ -d "$sub" ] || [ -e "$sub" ] || continue
        mount --rbind "$WORK/dev-host${sub#/dev}" "$sub" && bound+="$sub "
    done
    for ((i = 0; i < STANDIN_GPUS; i++)); do
        [ -e "/dev/nvidia$i" ] || mknod -m 0666 "/dev/nvidia$i" c 195 "$i" 2>/dev/null || : >"/dev/nvidia$i"
    done
    [ -e /dev/nvidiactl ] || mknod -m 0666 /dev/nvidiactl c 195 255 2>/dev/null || : >/dev/nvidiactl
    say "stand-in devices (this namespace only): $(cd /dev && echo nvidia*)"
fi

mkdir -p "$J"
for d in usr etc opt; do
    if [ -d "/$d" ]; then overlay_dir "/$d" "$J/$d"; else mkdir -p "$J/$d"; fi
done
for d in bin sbin lib lib32 lib64 libx32; do
    if [ -L "/$d" ]; then
        ln -s "$(readlink "/$d")" "$J/$d"
    elif [ -d "/$d" ]; then
        overlay_dir "/$d" "$J/$d"
    fi
done
mkdir -p "$J/proc" "$J/dev" "$J/sys" "$J/run" "$J/root" "$J/home" "$J/var/cache/ldconfig" \
    "$J/tmp" "$J/var/tmp" "$J/usr/lib/warden/driver"
chmod 1777 "$J/tmp" "$J/var/tmp"
say "jail root $J: overlays of $(findmnt -rn -o TARGET -t overlay | grep "^$J/" | sed "s|^$J||" | tr '\n' ' ')(writes on tmpfs)"

# Hide the machine's driver: what job steps find must come from the injection only.
hidden=()
if [ -d "$J/usr/local/nvidia" ]; then
    if [ -n "$(ls -A "$J/usr/local/nvidia" 2>/dev/null)" ]; then hidden+=("/usr/local/nvidia/ (all of it)"); fi
    mount -t tmpfs -o mode=0755,size=1m warden-gpu-check-hide "$J/usr/local/nvidia"
fi
scan_dirs=()
for d in usr etc opt bin sbin lib lib32 lib64 libx32; do
    [ -d "$J/$d" ] && [ ! -L "$J/$d" ] && scan_dirs+=("$J/$d")
done
name_args=()
for n in "${DRIVER_FILE_NAMES[@]}"; do name_args+=(-o -name "$n"); done
t="$(now)"
while read -r f; do
    # only ever in an overlay: deleting there hides the file in this view and leaves the machine's
    [ "$(stat -f -c %T "$(dirname "$f")")" = overlayfs ] || { fail "$f: not on an overlay; cannot hide it"; continue; }
    [ -d "$f" ] && [ ! -L "$f" ] && continue
    rm -f "$f"
    hidden+=("${f#"$J"}")
done < <(find "${scan_dirs[@]}" -xdev \( "${name_args[@]:1}" \) 2>/dev/null | sort)
say "the machine's NVIDIA driver files hidden in the jail (${#hidden[@]}, searched in $(since "$t") s):"
if [ ${#hidden[@]} = 0 ]; then say "    (none found)"; else printf '    %s\n' "${hidden[@]:0:40}"; fi
[ ${#hidden[@]} -le 40 ] || say "    ... and $((${#hidden[@]} - 40)) more"
std_libcuda="$(printf '%s\n' "${hidden[@]}" | grep -E '^/(usr/)?lib(64|/[a-z0-9_]+-linux-gnu)?/libcuda\.so' || true)"
if [ -n "$std_libcuda" ]; then
    say "NOTE: this machine has libcuda in a standard library directory ($(tr '\n' ' ' <<<"$std_libcuda")): hidden in the jail"
fi
fig host_driver_files_hidden "${#hidden[@]}"

# The jail image's own files: its stub nvidia-smi, its release file, its own loader cache.
sed -n "/^cat >\/usr\/bin\/nvidia-smi <<'SH'$/,/^SH$/{//!p}" "$REPO/jail/setup.sh" >"$J/usr/bin/nvidia-smi"
grep -q 'no NVIDIA driver' "$J/usr/bin/nvidia-smi" || die "could not take the stub nvidia-smi from jail/setup.sh"
chmod 0755 "$J/usr/bin/nvidia-smi"
printf 'WARDEN_JAIL_VERSION=gpu-check\nMADE_BY=hack/gpu-check.sh from the system of %s\n' "$(hostname)" \
    >"$J/etc/warden-jail-release"
install -m 0755 "$PROBE" "$J/usr/local/bin/warden-cuda-probe"
if [ "$NCCL_BUILT" = 1 ]; then
    # as warden/jail-gpu has them: all_reduce_perf in /opt/nccl-tests/bin, NCCL found by the jail's
    # own loader cache (its directory bound read-only and listed in ld.so.conf.d): no LD_LIBRARY_PATH
    install -D -m 0755 "$ALL_REDUCE_PERF" "$J/opt/nccl-tests/bin/all_reduce_perf"
    n=0
    conf="$J/etc/ld.so.conf.d/zz-warden-gpu-check.conf"
    : >"$conf"
    for d in "$NCCL_LIB_DIR" ${CUDA_LIB_DIR:+"$CUDA_LIB_DIR"}; do
        target="/usr/local/lib/warden-gpu-check/$n"
        mkdir -p "$J$target"
        { mount --bind "$d" "$J$target" && mount -o remount,bind,ro "$J$target"; } || die "cannot bind $d into the jail"
        echo "$target" >>"$conf"
        say "bound $d read-only at $target in the jail (in its ld.so.conf.d)"
        n=$((n + 1))
    done
fi
ldconfig -r "$J" -X 2>"$WORK/ldconfig.log" || { show <"$WORK/ldconfig.log"; die "ldconfig -r $J failed"; }
say "the jail's own /etc/ld.so.cache: ldconfig -r (no driver in it)"
# The jail as on its volume, before this node's binds (warden-driver.sh watches its loader cache).
mkdir -p "$VOL" "$WORK/node-tmp"
chmod 1777 "$WORK/node-tmp"
mount --rbind "$J" "$VOL"

# Job steps enter the jail through the plugin's code, with plugstack.conf's arguments: the root and a
# node-local /tmp; the environment is clean (PATH, HOME, NCCL_*, CUDA_VISIBLE_DEVICES).
JAIL_ARGS=("root=$J" "bind=$WORK/node-tmp:/tmp")
say "plugin arguments: ${JAIL_ARGS[*]}"
STEP_ENV=(PATH="$JAIL_PATH" HOME=/root LANG=C.UTF-8)
while read -r v; do STEP_ENV+=("$v=${!v}"); done < <(compgen -e | grep -E '^(NCCL_[A-Z0-9_]+|CUDA_VISIBLE_DEVICES)$' || true)
in_jail() { (cd / && timeout 300 env -i "${STEP_ENV[@]}" "$JAIL_RUN" "${JAIL_ARGS[@]}" -- "$@"); }
# Run "$@" in the jail, print its output indented and its exit status; sets RC and OUTPUT.
RC=0 OUTPUT=""
jail_show() {
    RC=0
    OUTPUT="$(in_jail "$@" 2>&1)" || RC=$?
    printf '%s\n' "$OUTPUT" | show
    say "    [exit $RC]"
}
in_jail /bin/true || die "jail_run could not enter the jail (see above)"

# ---------------------------------------------------------------------------------------------------
step "3. control: in the jail WITHOUT the driver injection"
say "\$ ldconfig -p | grep -E 'libcuda\.so|libnvidia-ml\.so'"
jail_show sh -c "ldconfig -p | grep -E 'libcuda\.so|libnvidia-ml\.so' || echo '(no driver library in the loader cache)'"
grep -q '=>' <<<"$OUTPUT" && fail "the jail's loader cache lists a driver library without the injection"
say "\$ nvidia-smi"
jail_show nvidia-smi
[ "$RC" != 0 ] || fail "nvidia-smi worked in the jail without the injection: a driver leaks into the jail"
say "\$ warden-cuda-probe"
jail_show warden-cuda-probe
if [ "$RC" = 3 ]; then
    fig loader_without_injection "libcuda.so.1 not found"
else
    fail "libcuda.so.1 loaded in the jail without the injection (exit $RC)"
    fig loader_without_injection "$OUTPUT"
fi
if [ "$NCCL_BUILT" = 1 ] && [ "$MODE" = gpu ]; then
    say "\$ all_reduce_perf -b 8 -e 8 -g 1"
    jail_show /opt/nccl-tests/bin/all_reduce_perf -b 8 -e 8 -g 1
    [ "$RC" != 0 ] || fail "all_reduce_perf ran in the jail without the injection"
    why="$(grep -m1 -iE 'error|failure|insufficient|no CUDA' <<<"$OUTPUT" || head -n 1 <<<"$OUTPUT")"
    fig all_reduce_perf_without_injection "exit $RC: $(sed 's/^ *//' <<<"$why" | cut -c1-120)"
fi

# ---------------------------------------------------------------------------------------------------
step "4. the node's driver into the jail (images/worker/warden-driver.sh, warden_driver_setup)"
WARDEN_JAIL="$J"
WARDEN_COMPONENT=gpu-check
# shellcheck source=../images/slurm-base/warden-lib.sh
. "$REPO/images/slurm-base/warden-lib.sh"
WARDEN_DRIVER_STAGE="$STAGE"
# shellcheck source=../images/worker/warden-driver.sh
. "$REPO/images/worker/warden-driver.sh"
WARDEN_JAIL_VOLUME="$VOL" # set by the file to the worker's path; here this run's
say "WARDEN_DRIVER_LIB_DIRS=$WARDEN_DRIVER_LIB_DIRS"
say "WARDEN_DRIVER_BIN_DIRS=$WARDEN_DRIVER_BIN_DIRS"
t="$(now)"
if warden_driver_setup 2>"$WORK/driver.log"; then
    show <"$WORK/driver.log"
    fig driver_injection_s "$(since "$t")"
    say "WARDEN_DRIVER_VERSION=$WARDEN_DRIVER_VERSION (stage $STAGE, $(since "$t") s)"
    say "mounts in the jail made for this node:"
    findmnt -rn -o TARGET,FSTYPE | awk -v j="$J" 'index($1, j "/") == 1 { t = substr($1, length(j) + 1) }
        t ~ /^\/(usr\/lib\/warden|usr\/bin\/nvidia-smi|etc\/ld\.so\.cache)/ { print t " (" $2 ")"; t = "" }' | show
else
    show <"$WORK/driver.log"
    fig driver_version "none: $WARDEN_DRIVER_PROBLEM"
    die "warden_driver_setup: $WARDEN_DRIVER_PROBLEM"
fi
fig driver_version "$WARDEN_DRIVER_VERSION"

# ---------------------------------------------------------------------------------------------------
step "5. in the jail WITH the driver"
say "\$ ldconfig -p | grep -E 'libcuda\.so|libnvidia-ml\.so'"
jail_show sh -c "ldconfig -p | grep -E 'libcuda\.so|libnvidia-ml\.so'"
grep -q "=> $WARDEN_DRIVER_JAIL_DIR/lib/libcuda.so.1" <<<"$OUTPUT" ||
    fail "the jail's loader cache does not list $WARDEN_DRIVER_JAIL_DIR/lib/libcuda.so.1"
say "\$ nvidia-smi"
jail_show nvidia-smi
smi_version="$(grep -oE 'Driver Version: *[0-9][0-9.]*' <<<"$OUTPUT" | head -n 1 | grep -oE '[0-9][0-9.]*$' || true)"
if [ "$RC" != 0 ]; then
    fail "nvidia-smi in the jail exited $RC"
elif [ "$smi_version" != "$WARDEN_DRIVER_VERSION" ]; then
    fail "nvidia-smi in the jail says driver '$smi_version', the node's is $WARDEN_DRIVER_VERSION"
fi
fig driver_version_in_jail "${smi_version:-?} (nvidia-smi in the jail)"
say "\$ nvidia-smi -L"
jail_show nvidia-smi -L
GPUS="$(grep -cE '^GPU [0-9]+:' <<<"$OUTPUT" || true)"
[ "$RC" = 0 ] || fail "nvidia-smi -L in the jail exited $RC"
[ "$GPUS" -gt 0 ] || fail "nvidia-smi -L lists no GPU in the jail"
fig gpus "$GPUS (nvidia-smi -L in the jail)"
say "\$ warden-cuda-probe"
jail_show warden-cuda-probe
if [ "$RC" = 0 ] && grep -q "^libcuda.so.1: $WARDEN_DRIVER_JAIL_DIR/lib/" <<<"$OUTPUT"; then
    fig loader_with_injection "${OUTPUT#libcuda.so.1: }"
else
    fail "libcuda.so.1 in the jail: $OUTPUT (exit $RC)"
    fig loader_with_injection "FAILED: $OUTPUT"
fi

# ---------------------------------------------------------------------------------------------------
step "6. all_reduce_perf in the jail"
NCCL_OUT="$WORK/nccl.out" NCCL_ERR="$WORK/nccl.err" NCCL_RC=0 NCCL_TIMED_OUT=0
NCCL_GPUS="${WARDEN_GPU_CHECK_GPUS:-$GPUS}"
read -ra nccl_args <<<"${WARDEN_GPU_CHECK_NCCL_ARGS:--b 512M -e 8G -f 2}"
NCCL_ARGV=(/opt/nccl-tests/bin/all_reduce_perf "${nccl_args[@]}" -g "$NCCL_GPUS")
if [ "$MODE" = gpu ]; then
    say "\$ ldd /opt/nccl-tests/bin/all_reduce_perf | grep -E 'nccl|cuda'"
    jail_show sh -c "ldd /opt/nccl-tests/bin/all_reduce_perf | grep -E 'nccl|cuda|not found'"
    say "\$ ${NCCL_ARGV[*]}"
    t="$(now)"
    (cd / && timeout "${WARDEN_GPU_CHECK_NCCL_TIMEOUT:-600}" env -i "${STEP_ENV[@]}" \
        "$JAIL_RUN" "${JAIL_ARGS[@]}" -- "${NCCL_ARGV[@]}") >"$NCCL_OUT" 2>"$NCCL_ERR" || NCCL_RC=$?
    [ "$NCCL_RC" = 124 ] && NCCL_TIMED_OUT=1
    cat "$NCCL_OUT" "$NCCL_ERR" | show
    say "    [exit $NCCL_RC, $(since "$t") s]"
    fig all_reduce_perf "exit $NCCL_RC in $(since "$t") s: ${NCCL_ARGV[*]}"
    [ "$NCCL_RC" = 0 ] || fail "all_reduce_perf exited $NCCL_RC in the jail"
    NCCL_INPUT="all_reduce_perf in the jail"
else
    FIXTURE="${WARDEN_GPU_CHECK_NCCL_FIXTURE:-$REPO/tests/unit/fixtures/nccl/h100_8gpu_ok.txt}"
    [ -f "$FIXTURE" ] || die "no fixture $FIXTURE"
    why="the stand-in driver runs no CUDA kernel"
    [ "$NCCL_BUILT" = 1 ] || why+="; nccl-tests not built: $NCCL_SKIP"
    say "all_reduce_perf: not run ($why)"
    cp "$FIXTURE" "$NCCL_OUT"
    : >"$NCCL_ERR"
    NCCL_GPUS="$(grep -cE '^#\s*Rank\s+[0-9]+' "$FIXTURE" || true)"
    [ "$NCCL_GPUS" -gt 0 ] || NCCL_GPUS=1
    NCCL_INPUT="the fixture ${FIXTURE#"$REPO/"} (constructed in nccl-tests' format, not recorded; $NCCL_GPUS GPUs)"
    fig all_reduce_perf "not run: $why"
    say "the parser and classifier read $NCCL_INPUT instead"
fi

# ---------------------------------------------------------------------------------------------------
step "7. the NCCL health check's parser and classifier"
PYTHONPATH="$REPO/operator" "$PY" - "$NCCL_OUT" "$NCCL_ERR" "$NCCL_RC" "$NCCL_TIMED_OUT" "$NCCL_GPUS" \
    "${WARDEN_GPU_CHECK_THRESHOLD_GBPS:-100}" "$WORK/nccl.figures" "${NCCL_ARGV[@]}" <<'PY'
import sys
from pathlib import Path

from warden.health.check import CheckConfig, Outcome, classify, drain_reason
from warden.health.nccl import parse_all_reduce_perf
from warden.slurm.cli import CommandResult, StepResult

out_file, err_file, rc, timed_out, gpus, threshold, figures_file, *argv = sys.argv[1:]
stdout, stderr = Path(out_file).read_text(), Path(err_file).read_text()
cfg = CheckConfig(threshold_gbps=float(threshold))
command = CommandResult(tuple(argv), int(rc), stdout, stderr, timed_out=timed_out == "1")
outcome, detail, busbw = classify(StepResult(command, not_allocated=False, hit_time_limit=False), int(gpus), cfg)
parsed = parse_all_reduce_perf(stdout)
figures: dict[str, str] = {}


def gb(value: float | None) -> str:
    return "-" if value is None else f"{value:g} GB/s"


print(f"parse status: {parsed.status} ({len(parsed.rows)} rows, {len(parsed.devices)} devices, {parsed.wrong} wrong)")
for d in parsed.devices:
    print(f"  rank {d.rank}: {d.host} device {d.device} {d.name}")
for r in parsed.rows:
    o, i = r.out_of_place, r.in_place
    print(
        f"  {r.size_bytes:>12} B  out-of-place algbw {gb(o and o.algbw_gbps)} busbw {gb(o and o.busbw_gbps)}"
        f"  in-place algbw {gb(i and i.algbw_gbps)} busbw {gb(i and i.busbw_gbps)}"
    )
print(f"avg busbw: {gb(parsed.avg_busbw_gbps)}")
if parsed.rows:
    big = max(parsed.rows, key=lambda r: r.size_bytes)
    m = big.out_of_place
    figures["nccl_largest_size"] = (
        f"{big.size_bytes} B: algbw {gb(m and m.algbw_gbps)}, busbw {gb(m and m.busbw_gbps)} (out-of-place)"
    )
figures["nccl_avg_busbw"] = gb(parsed.avg_busbw_gbps)
print(f"classify(gpus={gpus}, threshold {cfg.threshold_gbps:g} GB/s): {outcome}: {detail}")
figures["nccl_outcome"] = f"{outcome}: {detail}"
if outcome in (Outcome.SLOW, Outcome.FAILED, Outcome.TIMED_OUT):
    reason = drain_reason(outcome, detail, busbw, cfg)
    print(f"the NCCL check would drain this node: {reason}")
else:
    reason = f"none ({outcome})"
    print(f"drain reason: {reason}")
figures["nccl_drain_reason"] = reason
figures["outcome"] = str(outcome)
Path(figures_file).write_text("".join(f"{k}\t{v}\n" for k, v in figures.items()))
PY
fig nccl_input "$NCCL_INPUT"
NCCL_OUTCOME=""
while IFS=$'\t' read -r k v; do
    if [ "$k" = outcome ]; then NCCL_OUTCOME="$v"; else fig "$k" "$v"; fi
done <"$WORK/nccl.figures"
[ "$NCCL_OUTCOME" = passed ] || fail "the NCCL check's classifier says ${FIG[nccl_outcome]:-nothing}"

# ---------------------------------------------------------------------------------------------------
step "8. the quick health check (warden.health.quickcheck.find_problems)"
t="$(now)"
qc_rc=0
PYTHONPATH="$REPO/operator" "$PY" - "$GPUS" "$J" "$STAGE" "$WORK/quickcheck.figure" <<'PY' || qc_rc=$?
import socket
import sys
from pathlib import Path

from warden.health.quickcheck import Settings, find_problems, gpu_device_files, reason_for

gpus, jail, driver_dir, figure = int(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4])
settings = Settings(node=socket.gethostname().split(".")[0], expected_gpus=gpus, jail=jail, driver_dir=driver_dir)
print(f"expected GPUs {gpus}; device files {' '.join(gpu_device_files(settings.dev_dir)) or '(none)'}")
print(f"driver dir {driver_dir}; jail {jail}")
problems = find_problems(settings, gpus)
result = "healthy" if not problems else f"unhealthy: {reason_for(problems)}"
print(result)
figure.write_text(result)
sys.exit(1 if problems else 0)
PY
fig quickcheck "$(cat "$WORK/quickcheck.figure" 2>/dev/null || echo "did not run") ($(since "$t") s)"
[ "$qc_rc" = 0 ] || fail "the quick check finds problems"

# ---------------------------------------------------------------------------------------------------
step "9. the cost of entering the jail"
runs=200
cd /
t="$(now)"
for ((i = 0; i < runs; i++)); do /bin/true; done
plain="$(awk -v a="$t" -v b="$EPOCHREALTIME" -v n="$runs" 'BEGIN { printf "%.2f", (b - a) * 1000 / n }')"
t="$(now)"
for ((i = 0; i < runs; i++)); do "$JAIL_RUN" "${JAIL_ARGS[@]}" -- /bin/true; done
jailed="$(awk -v a="$t" -v b="$EPOCHREALTIME" -v n="$runs" 'BEGIN { printf "%.2f", (b - a) * 1000 / n }')"
say "exec /bin/true: $plain ms; jail_run (unshare, $(findmnt -rn -o TARGET | grep -c "^$J/") mounts under the root, pivot_root) + exec /bin/true: $jailed ms (mean of $runs)"
fig jail_entry "$jailed ms per task (plain exec $plain ms)"

# ---------------------------------------------------------------------------------------------------
fig total_s "$(since "$T0")"
step "summary"
for k in mode driver_version driver_version_in_jail gpus host_driver_files_hidden loader_without_injection \
    all_reduce_perf_without_injection loader_with_injection driver_injection_s nccl_tests_build_s all_reduce_perf \
    nccl_input nccl_largest_size nccl_avg_busbw nccl_outcome nccl_drain_reason quickcheck jail_entry total_s; do
    [ -z "${FIG[$k]+x}" ] || printf '%s: %s\n' "$k" "${FIG[$k]}"
done
if [ ${#FAILURES[@]} -gt 0 ]; then
    say "result: FAILED (${#FAILURES[@]})"
    printf '  - %s\n' "${FAILURES[@]}"
    exit 1
fi
say "result: OK"
