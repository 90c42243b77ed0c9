#!/usr/bin/env bash
# Every Slurm pod's follow loop (images/slurm-base/warden-lib.sh: warden_follow) looks every 2 s. What one
# look costs when nothing changed (warden_changed_since and warden_jail_rebind: bash's own tests, the mount
# table read by bash) against one that hashes (what every look cost before: the Python hash, a `mountpoint`
# per jail bind), in turns, on a kubelet-style ConfigMap directory. Printed, never asserted.
set -euo pipefail
cd "$(dirname "$0")/.."
# the images run /opt/warden/bin/python -I; here the project's virtual environment, as isolated
PY="${PY:-$PWD/.venv/bin/python}"
ROUNDS="${WARDEN_BENCH_FOLLOW_ROUNDS:-3}"
LOOKS=100
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/cm/..2026_01_01"
echo "ClusterName=bench" >"$work/cm/..2026_01_01/slurm.conf"
ln -s ..2026_01_01 "$work/cm/..data"
ln -s ..data/slurm.conf "$work/cm/slurm.conf"
touch "$work/stamp"
# the binds' targets: mount points that exist everywhere (none is bound again: the bench mounts nothing)
bound='"/:/:ro" "/proc:/proc:rw" "/dev:/dev:rw" "/sys:/sys:ro"'
lib="$PWD/images/slurm-base/warden-lib.sh"

idle() {
    bash -c ". '$lib'; WARDEN_JAIL=''; WARDEN_JAIL_BOUND=($bound)
        for _ in \$(seq $LOOKS); do ! warden_changed_since '$work/stamp' '$work/cm' && warden_jail_rebind; done"
}
hashing() {
    bash -c "for _ in \$(seq $LOOKS); do '$PY' -I -m warden.node.dirhash '$work/cm' >/dev/null
        for m in / /proc /dev /sys; do mountpoint -q \$m; done; done"
}
cpu_of() { # seconds of CPU the command and its children took
    local me="$BASHPID" t0 t1
    t0="$(awk '{print $14+$15+$16+$17}' "/proc/$me/stat")"
    "$@"
    t1="$(awk '{print $14+$15+$16+$17}' "/proc/$me/stat")"
    echo $((t1 - t0))
}
tick="$(getconf CLK_TCK)"
idle_total=0 hash_total=0
for r in $(seq "$ROUNDS"); do
    i="$(cpu_of idle)"
    h="$(cpu_of hashing)"
    idle_total=$((idle_total + i)) hash_total=$((hash_total + h))
    echo "round $r: $LOOKS idle looks $i ticks of CPU, $LOOKS hashing looks $h ticks (CLK_TCK $tick)"
done
looks=$((ROUNDS * LOOKS))
awk -v i="$idle_total" -v h="$hash_total" -v n="$looks" -v t="$tick" 'BEGIN {
    printf "follow loop, one look: idle %.2f ms of CPU, hashing %.2f ms; hashing/idle %.0fx (%d looks each)\n",
        1000 * i / t / n, 1000 * h / t / n, (i > 0 ? h / i : 0), n }'
