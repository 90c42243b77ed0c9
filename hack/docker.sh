#!/usr/bin/env bash
# Docker Engine for local builds and the dataplane tests.
#
#   hack/docker.sh ensure   install Debian's docker.io when no engine exists, start dockerd in the
#                           background when it is not answering, wait until `docker info` works
#   hack/docker.sh status   exit 0 when the daemon answers
#   hack/docker.sh stop     stop a dockerd this script started (pid file)
#
# Idempotent and safe to run concurrently (flock). Works without systemd and on cgroup v1 hosts.
# Environment: WARDEN_DOCKER_LOG (default ~/.cache/warden/dockerd.log),
#              WARDEN_DOCKERD_ARGS (extra dockerd flags), WARDEN_DOCKER_WAIT (seconds, default 60).
set -euo pipefail

CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/warden"
LOG="${WARDEN_DOCKER_LOG:-$CACHE/dockerd.log}"
PIDFILE="$CACHE/dockerd.pid"
WAIT="${WARDEN_DOCKER_WAIT:-60}"

log() { printf '[docker.sh] %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

answers() { docker info >/dev/null 2>&1; }

install_engine() {
    command -v dockerd >/dev/null 2>&1 && return 0
    log "no dockerd found: installing Debian's docker.io"
    as_root apt-get update -qq
    # the Debian package starts nothing by itself without systemd; we start dockerd below
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        docker.io iptables ca-certificates >/dev/null
}

# Pick a storage driver: overlay2 when the kernel can mount overlayfs on /var/lib/docker, vfs otherwise.
storage_driver() {
    local probe
    probe="$(mktemp -d)"
    mkdir -p "$probe"/{l,u,w,m}
    if as_root mount -t overlay overlay -o "lowerdir=$probe/l,upperdir=$probe/u,workdir=$probe/w" "$probe/m" 2>/dev/null; then
        as_root umount "$probe/m"
        echo overlay2
    else
        echo vfs
    fi
    rm -rf "$probe"
}

# iptables: keep Docker's networking when the kernel's netfilter works, otherwise run without it
# (containers then still talk to each other on user-defined bridges only through --network host).
iptables_flag() {
    if as_root iptables -w -t nat -L -n >/dev/null 2>&1; then
        echo "--iptables=true"
    elif command -v iptables-legacy >/dev/null 2>&1 && as_root iptables-legacy -w -t nat -L -n >/dev/null 2>&1; then
        as_root update-alternatives --set iptables /usr/sbin/iptables-legacy >/dev/null 2>&1 || true
        echo "--iptables=true"
    else
        echo "--iptables=false"
    fi
}

# The FORWARD policy stays ACCEPT for the dockerd this script starts. Docker sets it to DROP when it turns
# on IP forwarding itself, and then lets a network's containers talk only through that network's rules in
# the filter table; kube-router's firewall (the local cluster's, beside the dataplane tier) saves the whole
# filter table and restores it (iptables-restore without --noflush), so a network Docker made between the
# two lost its rules, and its containers could not reach each other for as long as they lived (seen in a
# run: every slurmd of a dataplane cluster "Unable to contact slurm controller" for nine minutes).
# The policy is in every copy of the table: a restore cannot drop it. Only test networks exist here.
forward_policy() {
    if as_root iptables -w -S FORWARD 2>/dev/null | grep -qx -- '-P FORWARD DROP'; then
        as_root iptables -w -P FORWARD ACCEPT
        log "FORWARD policy set to ACCEPT (a filter-table restore by another program cannot cut a network off)"
    fi
}

start_daemon() {
    local driver="" ipt=""
    answers && return 0
    if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
        log "dockerd (pid $(cat "$PIDFILE")) is starting; waiting"
    else
        driver="$(storage_driver)"
        ipt="$(iptables_flag)"
        mkdir -p "$(dirname "$LOG")"
        log "starting dockerd (storage-driver=$driver $ipt), log: $LOG"
        # forwarding on before dockerd starts: Docker then leaves the FORWARD policy as it is
        [ "$ipt" != "--iptables=true" ] || as_root sysctl -qw net.ipv4.ip_forward=1
        # containerd comes with docker.io; dockerd starts its own when none runs.
        # cgroupfs: there is no systemd to delegate cgroups to (cgroup v1 hybrid hosts included).
        # shellcheck disable=SC2086
        as_root setsid nohup dockerd \
            --storage-driver="$driver" \
            --exec-opt native.cgroupdriver=cgroupfs \
            "$ipt" \
            ${WARDEN_DOCKERD_ARGS:-} \
            >>"$LOG" 2>&1 </dev/null &
        echo $! >"$PIDFILE"
    fi
    local i
    for ((i = 0; i < WAIT * 2; i++)); do
        if answers; then
            log "docker answers ($(docker version -f '{{.Server.Version}}' 2>/dev/null))"
            [ "$ipt" != "--iptables=true" ] || forward_policy
            return 0
        fi
        if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
            log "dockerd exited; last lines of $LOG:"
            tail -n 20 "$LOG" >&2
            return 1
        fi
        sleep 0.5
    done
    log "dockerd did not answer within ${WAIT}s; last lines of $LOG:"
    tail -n 20 "$LOG" >&2
    return 1
}

# a dockerd this script started (its pid file), with Docker's iptables rules: its FORWARD policy as above
# (also for an engine started before this script set it)
ours_forward_policy() {
    [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null || return 0
    as_root iptables -w -S FORWARD 2>/dev/null | grep -q -- '-j DOCKER' || return 0
    forward_policy || log "could not set the FORWARD policy to ACCEPT"
}

ensure() {
    if answers; then
        ours_forward_policy
        return 0
    fi
    mkdir -p "$CACHE"
    exec 9>"$CACHE/docker.lock"
    flock 9
    answers && return 0
    install_engine
    start_daemon
}

case "${1:-ensure}" in
    ensure) ensure ;;
    status) answers ;;
    stop)
        if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
            as_root kill "$(cat "$PIDFILE")"
            rm -f "$PIDFILE"
        fi
        ;;
    *) echo "usage: $0 {ensure|status|stop}" >&2; exit 2 ;;
esac
