#!/bin/bash
# The worker container: mounts, cgroups and devices for slurmd and the jail, then `exec`s the node's
# supervisor (warden.node, Python, PID 1 of the container), which starts slurmd as a dynamic node
# (`slurmd -D -Z --conf "$WARDEN_SLURMD_CONF"`, logs on stderr) and keeps the node's life in Slurm.
# Extra arguments go to slurmd; `-V`/`--help` print and exit without any configuration.
#   WARDEN_SLURMD_CONF   node line (CPUs=.. RealMemory=.. Gres=.. Feature=warden-group-<g>), required
#   WARDEN_NODE_NAME     Slurm node name (default: the pod's hostname)
#   WARDEN_CGROUP_RW     auto (default: when slurm.conf names a cgroup plugin) | yes | no: remount
#                        /sys/fs/cgroup read-write for proctrack/cgroup and task/cgroup (CAP_SYS_ADMIN)
#   WARDEN_SLURMD_ARGS   extra slurmd flags (e.g. -vv)
#   WARDEN_JAIL_SHARED   jail directories also shown at the same path in this container (default
#                        "/home /root": users' and root's homes, where sbatch writes slurm-<id>.out)
#   WARDEN_WORKER_GROUP  worker group: plugstack.<group>.conf (its node-local mounts) becomes plugstack.conf
#   WARDEN_LEAVE_TIMEOUT seconds a terminating pod waits for its jobs after draining (default 40; the
#                        pod's terminationGracePeriodSeconds holds it: tests/unit/test_node_lifecycle.py)
#   WARDEN_CONFIG_POLL   seconds between looks at the mounted config (default 2): when the operator
#                        changed it, the files are copied again and slurmd reloads them (SIGHUP)
#   WARDEN_GPUS          GPUs of this worker group (0: a CPU worker). On a GPU worker, the driver files
#                        the GPU runtime gave this container are shown to every job step (see
#                        warden-driver.sh); without a complete driver the node is drained with the reason.
#   WARDEN_DRIVER_PROBLEM (set here, for the supervisor) why job steps cannot get the driver ("" if they can)
#   /etc/warden/worker-ssh  with spec.workerSsh: sshd on port 22 for users with a job here (warden-worker-ssh.sh)
#
# The supervisor (operator/warden/node/supervisor.py) does the node's life in Slurm:
# - on SIGTERM (pod deleted, WorkerSet scaled in) the node leaves Slurm cleanly: it is drained (no new
#   jobs, reason "warden: pod terminating"), its running jobs get up to WARDEN_LEAVE_TIMEOUT seconds,
#   the dynamic node is deleted from slurmctld (so `sinfo` keeps no DOWN ghost of every removed pod),
#   then slurmd stops;
# - a node registered without its gres (slurmctld lacked the type) is deleted and registers again;
# - a GPU worker without a complete driver is drained ("warden-worker: <problem>") once registered;
# - a changed ConfigMap is installed again (warden.node.files) and slurmd gets SIGHUP.
# Here: the mounts it relies on, and a loop that keeps them (jail binds, the driver's loader cache).
set -euo pipefail
WARDEN_COMPONENT=worker
# shellcheck source=../slurm-base/warden-lib.sh
. /usr/lib/warden/warden-lib.sh
# shellcheck source=warden-driver.sh
. /usr/lib/warden/warden-driver.sh
# shellcheck source=warden-worker-ssh.sh
. /usr/lib/warden/warden-worker-ssh.sh
warden_passthrough slurmd "$@"

node_py=(/opt/warden/bin/python -I -m warden.node)
# slurm.conf and friends, the key, the group's plugstack.conf, this node's gres.conf line; prints the
# hash of the mounted config taken before copying it (a change meanwhile is reloaded at once)
config_hash="$("${node_py[@]}" files)"
# Node-local directories (the group's localMounts: emptyDir volumes, which the kubelet makes 0777) are
# shared by every user's job steps: make them sticky, as /tmp always is, so nobody can remove or
# replace another user's files. The container store (spec.containers) is the exception: root's, 0755,
# so that only pyxis (as root) makes a user's directory in it.
CONTAINER_STORE=/var/lib/warden/containers
local_mount_modes() {
    local p
    for p in $(grep -o 'bind=[^ ]*' "$SLURM_ETC/plugstack.conf" 2>/dev/null | cut -d= -f2); do
        p="${p%%:*}"
        if [ "$p" = "$CONTAINER_STORE" ]; then
            chown root:root "$p" && chmod 0755 "$p" || return 1
        elif [ -d "$p" ]; then
            chmod 1777 "$p" || return 1
        fi
    done
}
local_mount_modes || warden_log "local mounts: could not set their modes"
# This container's own /tmp, and its own copy of each per-job mount (jobtmpfs=: /tmp, /dev/shm), are seen by
# no job step (the jail shows the job's tmpfs, or the jail's /tmp, there). What slurmd opens as a user here,
# sbcast's files, would land in them, outside the job, for good: root's, 0755, so that these fail
# (Permission denied) instead. (An MPI step's per-task files under them land in the job's tmpfs: the plugin
# binds it over these paths for slurmstepd while it opens them; spank/README.md.) A node-local mount shared by the
# jobs (bind=) is left as it is: the jail shows it at the same path.
container_only_dirs() {
    local p shared
    shared=" $(grep -o 'bind=[^ ]*' "$SLURM_ETC/plugstack.conf" 2>/dev/null | cut -d= -f2 | cut -d: -f1 | tr '\n' ' ') "
    for p in /tmp $(grep -o 'jobtmpfs=[^ ]*' "$SLURM_ETC/plugstack.conf" 2>/dev/null | cut -d= -f2 | cut -d: -f1); do
        case "$shared" in *" $p "*) continue ;; esac
        if [ -d "$p" ] && [ ! -L "$p" ]; then chown root:root "$p" && chmod 0755 "$p" || return 1; fi
    done
}
container_only_dirs || warden_log "warning: could not make this container's own /tmp and per-job mount points root's"
# pyxis (loaded also where a group has containers off, to refuse them) makes each user's directory here
install -d -o root -g root -m 0755 "$CONTAINER_STORE"
warden_jail_users
# users' job steps see only their own processes (spec.security.hideOtherUsersProcesses)
warden_hide_processes
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
    local root=/sys/fs/cgroup pid c off="" try
    [ "$(stat -fc %T "$root")" = cgroup2fs ] || return 0
    mkdir -p "$root/warden-entrypoint"
    # A cgroup with controllers on for its children may hold no process itself, and processes keep
    # arriving in the container's own cgroup while this runs (the kubelet's exec probes): move them all
    # to the leaf, turn the controllers on, and again until every one is on.
    for try in $(seq 1 100); do
        while read -r pid; do
            echo "$pid" >"$root/warden-entrypoint/cgroup.procs" 2>/dev/null || true
        done <"$root/cgroup.procs"
        off=""
        for c in $(<"$root/cgroup.controllers"); do
            [[ " $(<"$root/cgroup.subtree_control") " == *" $c "* ]] && continue
            echo "+$c" >"$root/cgroup.subtree_control" 2>/dev/null || off="$off $c"
        done
        [ -z "$off" ] && break
        sleep 0.1
    done
    [ -z "$off" ] || warden_die "cgroup v2: cannot turn on$off for slurmd's cgroup plugin after $try tries" \
        "(a process stays in the container's own cgroup: $(tr '\n' ' ' <"$root/cgroup.procs"))"
    warden_log "cgroup: v2, controllers $(<"$root/cgroup.subtree_control")"
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
        "(ProctrackType/TaskPlugin) need: $WARDEN_MOUNT_REFUSED"
    cgroup_v2_delegate
    cgroup_v1_gpu_mknod
    warden_log "cgroup: /sys/fs/cgroup is read-write for slurmd's cgroup plugins"
fi

# batch scripts (spool dir) and the SACK socket must be reachable from inside the jail
WARDEN_RUN_SLURM_OWNER=root warden_jail_binds "$spool:$spool:rw" || warden_die "$WARDEN_BIND_DENIED"

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

# SSH from the login nodes (spec.workerSsh): sshd, its sessions chrooted into a view of the jail made
# now, with the binds above (the GPU driver's too), and let in by pam_slurm_adopt (warden-worker-ssh.sh).
warden_worker_ssh_setup

# What each user's directory of the container store takes (du, as root: the directories are their users'
# alone), every WARDEN_STORE_POLL (10) seconds into $CONTAINER_STORE/.usage, root's, which
# /usr/lib/warden/warden-store-room reads before enroot writes there (spec.containers.store).
store_measured=0
warden_store_usage() {
    [ $((SECONDS - store_measured)) -ge "${WARDEN_STORE_POLL:-10}" ] || return 0
    store_measured=$SECONDS
    (cd "$CONTAINER_STORE" && shopt -s nullglob && du -skx -- [0-9]*) >"$CONTAINER_STORE/.usage.new" 2>/dev/null
    chmod 0644 "$CONTAINER_STORE/.usage.new" && mv -f "$CONTAINER_STORE/.usage.new" "$CONTAINER_STORE/.usage"
}
if grep -q "bind=$CONTAINER_STORE" "$SLURM_ETC/plugstack.conf" 2>/dev/null; then
    WARDEN_POLL_HOOKS="${WARDEN_POLL_HOOKS:-} warden_store_usage"
fi

# The jail binds a replaced jail file took away, and the driver's loader cache when the jail's own
# changed (warden-driver.sh), every WARDEN_CONFIG_POLL seconds; the supervisor stops this when leaving.
(
    trap - TERM INT
    set +e
    while sleep "${WARDEN_CONFIG_POLL:-2}"; do
        warden_jail_rebind
        for h in ${WARDEN_POLL_HOOKS:-}; do "$h"; done
    done
) &
keeper_pid=$!

export WARDEN_DRIVER_PROBLEM
exec "${node_py[@]}" run --config-hash "$config_hash" --also-stop "$keeper_pid" -- "$@"
