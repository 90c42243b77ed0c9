#!/bin/bash
# slurmd as a dynamic node: `slurmd -D -Z --conf "$WARDEN_SLURMD_CONF"`, logs on stderr.
# Extra arguments go to slurmd; `-V`/`--help` print and exit without any configuration.
#   WARDEN_SLURMD_CONF   node line (CPUs=.. RealMemory=.. Gres=.. Feature=warden-group-<g>), required
#   WARDEN_NODE_NAME     Slurm node name (default: the pod's hostname)
#   WARDEN_CGROUP_RW     auto (default: when slurm.conf names a cgroup plugin) | yes | no: remount
#                        /sys/fs/cgroup read-write for proctrack/cgroup and task/cgroup (CAP_SYS_ADMIN)
#   WARDEN_SLURMD_ARGS   extra slurmd flags (e.g. -vv)
#   WARDEN_JAIL_SHARED   jail directories also shown at the same path in this container (default
#                        "/home /root": users' and root's homes, where sbatch writes slurm-<id>.out)
#   WARDEN_WORKER_GROUP  worker group: plugstack.<group>.conf (its node-local mounts) becomes plugstack.conf
#   WARDEN_LEAVE_TIMEOUT seconds a terminating pod waits for its jobs after draining (default 40; keep it
#                        under the pod's terminationGracePeriodSeconds)
#   WARDEN_CONFIG_POLL   seconds between looks at the mounted config (default 2): when the operator
#                        changed it, the files are copied again and slurmd reloads them (SIGHUP)
#   WARDEN_GPUS          GPUs of this worker group (0: a CPU worker). On a GPU worker, the driver files
#                        the GPU runtime gave this container are shown to every job step (see
#                        warden-driver.sh); without a complete driver the node is drained with the reason.
#
# On SIGTERM (pod deleted, StatefulSet scaled in) the node leaves Slurm cleanly: it is drained (no new
# jobs), its running jobs get up to WARDEN_LEAVE_TIMEOUT seconds, the dynamic node is deleted from
# slurmctld (so `sinfo` keeps no DOWN ghost of every removed pod), then slurmd stops.
set -euo pipefail
WARDEN_COMPONENT=worker
. /usr/lib/warden/warden-lib.sh
. /usr/lib/warden/warden-driver.sh
warden_passthrough slurmd "$@"

[ -n "${WARDEN_SLURMD_CONF:-}" ] || warden_die "WARDEN_SLURMD_CONF is empty (the node line for slurmd -Z --conf)"
config_hash="$(warden_dirs_hash "$WARDEN_CONFIG_DIR")"
group_plugstack() {
    if [ -n "${WARDEN_WORKER_GROUP:-}" ] && [ -f "$SLURM_ETC/plugstack.$WARDEN_WORKER_GROUP.conf" ]; then
        install -m 0644 "$SLURM_ETC/plugstack.$WARDEN_WORKER_GROUP.conf" "$SLURM_ETC/plugstack.conf"
        warden_log "plugstack: worker group $WARDEN_WORKER_GROUP"
    fi
}
node="${WARDEN_NODE_NAME:-$(hostname -s)}"
gres_spec="$(sed -n 's/.*Gres=\([^ ]*\).*/\1/p' <<<"$WARDEN_SLURMD_CONF")" # gpu:h100:8, or empty
# slurmctld knows this node: a dynamic node exists there only once slurmd has registered it
registered() {
    local out
    out="$(scontrol show node -o "$node" 2>/dev/null)" && [ -n "$out" ]
}
# This node's line of gres.conf (the ConfigMap's has none): the GPU device files its pod was given.
# Device plugins keep the host's numbers, so a 4-GPU pod may hold /dev/nvidia4-7.
node_gres() {
    local gres="$gres_spec" files fields
    [ -n "$gres" ] && [ "$gres" != "(null)" ] || return 0
    files="$(find /dev -maxdepth 1 -regex '/dev/nvidia[0-9]+' -printf '%f\n' | sort -V | sed 's|^|/dev/|' | paste -sd,)"
    if [ -z "$files" ]; then
        warden_log "gres: warning: no /dev/nvidia<N> device files for $gres (no GPU given to this pod?)"
        return 0
    fi
    IFS=: read -ra fields <<<"${gres%%,*}" # gpu:h100:8 or gpu:8
    printf 'NodeName=%s Name=%s%s File=%s\n' "$node" "${fields[0]}" \
        "$([ ${#fields[@]} -gt 2 ] && printf ' Type=%s' "${fields[1]}")" "$files" >>"$SLURM_ETC/gres.conf"
    warden_log "gres: $node has ${fields[0]} $files"
}
# Node-local directories (the group's localMounts: emptyDir volumes, which the kubelet makes 0777) are
# shared by every user's job steps: make them sticky, as /tmp always is, so nobody can remove or
# replace another user's files.
local_mount_modes() {
    local p
    for p in $(grep -o 'bind=[^ ]*' "$SLURM_ETC/plugstack.conf" 2>/dev/null | cut -d= -f2); do
        p="${p%%:*}"
        if [ -d "$p" ]; then
            chmod 1777 "$p" || return 1
        fi
    done
}
warden_slurm_config
group_plugstack
local_mount_modes || warden_log "local mounts: could not make them 1777"
node_gres
warden_jail_users
spool="${WARDEN_SPOOL_DIR:-/var/spool/slurmd}"
install -d -o root -g root -m 0755 "$spool"

# Container runtimes mount the cgroup tree read-only; slurmd's cgroup plugins need to write it.
cgroup_rw() {
    local m
    while read -r _ m _ _; do
        case "$m" in /sys/fs/cgroup | /sys/fs/cgroup/*) mount -o remount,bind,rw "$m" 2>/dev/null || return 1 ;; esac
    done < <(grep -E ' /sys/fs/cgroup(/| )' /proc/mounts)
}
# cgroup v2 (one tree, the container's own cgroup namespace): a cgroup that holds processes cannot hand
# controllers to its children, so this container's processes move to a leaf first; then slurmd's
# cgroup/v2 plugin can enable cpuset, memory and the rest for the job cgroups it makes.
cgroup_v2_delegate() {
    local root=/sys/fs/cgroup pid c
    [ "$(stat -fc %T "$root")" = cgroup2fs ] || return 0
    mkdir -p "$root/warden-entrypoint"
    while read -r pid; do
        echo "$pid" >"$root/warden-entrypoint/cgroup.procs" 2>/dev/null || true
    done <"$root/cgroup.procs"
    for c in $(cat "$root/cgroup.controllers"); do
        echo "+$c" >"$root/cgroup.subtree_control" 2>/dev/null || warden_log "cgroup: warning: cannot delegate $c"
    done
    warden_log "cgroup: v2, controllers $(cat "$root/cgroup.subtree_control")"
}
# cgroup v1: ConstrainDevices allows a job's GPUs in its own cgroup as `c MAJ:MIN rwm`, and a child
# may not allow more than its parent. Device plugins give the container its GPUs `rw` (NVIDIA's
# does), so every job on the node would fail to start; add `m` for those devices, and only those.
cgroup_v1_gpu_mknod() {
    local list=/sys/fs/cgroup/devices/devices.allow f mm
    [ -w "$list" ] || return 0
    for f in /dev/nvidia[0-9]*; do
        [ -c "$f" ] || continue
        mm="$(stat -c '%t %T' "$f")"
        mm="$(printf '%d:%d' "0x${mm% *}" "0x${mm#* }")"
        echo "c $mm rwm" >"$list" || warden_die "cannot allow $f ($mm) in this container's devices cgroup"
    done
}
uses_cgroups() { grep -Eiq '^[[:space:]]*(ProctrackType|TaskPlugin)[[:space:]]*=.*cgroup' "$SLURM_ETC/slurm.conf"; }
cgroup_mode="${WARDEN_CGROUP_RW:-auto}"
[ "$cgroup_mode" = auto ] && { uses_cgroups && cgroup_mode=yes || cgroup_mode=no; }
if [ "$cgroup_mode" = yes ]; then
    cgroup_rw || warden_die "cannot remount /sys/fs/cgroup read-write, which slurm.conf's cgroup plugins" \
        "(ProctrackType/TaskPlugin) need: the worker container needs CAP_SYS_ADMIN"
    cgroup_v2_delegate
    cgroup_v1_gpu_mknod
    warden_log "cgroup: /sys/fs/cgroup is read-write for slurmd's cgroup plugins"
fi

# batch scripts (spool dir) and the SACK socket must be reachable from inside the jail
WARDEN_RUN_SLURM_OWNER=root warden_jail_binds "$spool:$spool:rw"

# slurmstepd opens a step's files in the jail (the SPANK plugin moves its main thread there for it),
# except for srun steps with an MPI plugin, which it opens in this container: show the jail's shared
# directories at the same paths here, so /home/alice/out-0.txt is the jail's file for those too.
for p in ${WARDEN_JAIL_SHARED:-/home /root}; do
    [ -d "$WARDEN_JAIL$p" ] || continue
    mkdir -p "$p"
    mountpoint -q "$p" || mount --bind "$WARDEN_JAIL$p" "$p" ||
        warden_log "warning: cannot bind $WARDEN_JAIL$p at $p; jobs cannot use paths under $p"
done

# dcgm-exporter's job mapping (spec.metrics.dcgmJobMapping; nothing to do without its directory): jobs
# a previous pod ran on this pod's GPUs ended with it, and no epilog took them out of the files.
if [ "${WARDEN_GPUS:-0}" -gt 0 ]; then
    /usr/lib/warden/warden-job-mapping reset ||
        warden_log "dcgm job mapping: warning: could not clear the files of this pod's GPUs"
fi

# The node's own NVIDIA driver in every job step (GPU workers only; nothing on the shared volume).
if [ "${WARDEN_GPUS:-0}" -gt 0 ]; then
    if warden_driver_setup; then
        WARDEN_POLL_HOOKS="${WARDEN_POLL_HOOKS:-} warden_driver_refresh"
    else
        warden_log "driver: error: $WARDEN_DRIVER_PROBLEM in this container; this node takes no jobs"
    fi
fi

node_args=()
[ -n "${WARDEN_NODE_NAME:-}" ] && node_args=(-N "$WARDEN_NODE_NAME")
warden_log "starting slurmd $(slurmd -V | awk '{print $2}') as dynamic node $node: $WARDEN_SLURMD_CONF"
# shellcheck disable=SC2086
slurmd -D -Z "${node_args[@]}" --conf "$WARDEN_SLURMD_CONF" ${WARDEN_SLURMD_ARGS:-} "$@" &
slurmd_pid=$!

# A changed ConfigMap (new partition, gres, extraLines): new files here and in the jail, then SIGHUP,
# on which slurmd re-reads them in place (as `scontrol reconfigure` makes it); running jobs go on.
reload() {
    warden_slurm_config && group_plugstack && node_gres && warden_client_config && kill -HUP "$slurmd_pid"
}
warden_follow "$config_hash" reload "$WARDEN_CONFIG_DIR"

# A GPU worker whose job steps cannot get the driver takes no jobs: drained, with the reason, as soon as
# it has registered (a dynamic node exists in slurmctld only from then on).
if [ -n "$WARDEN_DRIVER_PROBLEM" ]; then
    (
        trap - TERM INT
        set +e
        until registered; do sleep 1; done
        scontrol update nodename="$node" state=drain reason="warden-worker: $WARDEN_DRIVER_PROBLEM" &&
            warden_log "driver: drained $node: $WARDEN_DRIVER_PROBLEM"
    ) &
fi

# A dynamic node's gres are fixed when it first registers, and a slurmctld whose slurm.conf lacks the
# gres type drops them: the node would stay Gres=(null) for good. That happens when a GPU group is
# added to a running cluster: its pods start while slurmctld still restarts with the new GresTypes.
# So, until the registered node carries every gres type of its node line, and once slurmctld knows
# those types: delete the node, then SIGHUP slurmd, which registers it afresh. Sets gres_pid.
gres_names() { tr ',' '\n' | cut -d: -f1 | { grep -v -e '^$' -e '^(null)$' || true; } | sort -u; }
want_gres="$(gres_names <<<"$gres_spec")"
gres_pid=""
if [ -n "$want_gres" ]; then
    (
        trap - TERM INT
        set +e
        while sleep 5; do
            registered || continue
            have="$(scontrol show node -o "$node" 2>/dev/null | grep -o 'Gres=[^ ]*' | cut -d= -f2 | gres_names)"
            [ -z "$(comm -23 <(echo "$want_gres") <(echo "$have"))" ] && exit 0
            types="$(scontrol show config 2>/dev/null | sed -n 's/^GresTypes *= *//p' | gres_names)"
            [ -z "$(comm -23 <(echo "$want_gres") <(echo "$types"))" ] || continue  # slurmctld not there yet
            warden_log "registered without its gres ($(echo "$want_gres" | paste -sd,)): registering again"
            scontrol delete nodename="$node" && kill -HUP "$slurmd_pid"
        done
    ) &
    gres_pid=$!
fi

leave() {
    local deadline
    warden_log "leaving: draining $node"
    scontrol update nodename="$node" state=drain reason="warden: pod terminating" ||
        warden_log "leaving: drain of $node failed"
    deadline=$(( $(date +%s) + ${WARDEN_LEAVE_TIMEOUT:-40} ))
    while [ -n "$(squeue -h -w "$node" -t running,completing -o %i 2>/dev/null)" ] && [ "$(date +%s)" -lt "$deadline" ]; do
        sleep 1
    done
    # Delete while slurmd still runs: user-side Slurm commands authenticate through its socket.
    if scontrol delete nodename="$node"; then
        warden_log "leaving: $node deleted from Slurm"
    else
        warden_log "leaving: could not delete $node from Slurm; it stays listed as DOWN"
    fi
    kill -TERM "$slurmd_pid" "$follow_pid" $gres_pid 2>/dev/null
    wait "$slurmd_pid"
    exit 0
}
trap leave TERM INT
set +e
wait "$slurmd_pid"
rc=$?
warden_log "slurmd exited (status $rc)"
exit "$rc"
