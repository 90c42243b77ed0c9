# shellcheck shell=bash
# Backup controllers (spec.controller.replicas 2-3, WARDEN_CONTROLLERS in the pod): sourced by the
# controller's entrypoint. Slurm itself chooses which slurmctld is in charge: the first of slurm.conf's
# SlurmctldHost list that runs (pod <cluster>-controller-0, then -1, -2); a backup takes control when the
# one in charge has not answered for SlurmctldTimeout seconds and the heartbeat file it rewrites in the
# shared StateSaveLocation stopped changing. Slurm leaves two gaps that this file closes:
#
#   - a stopped pod waits for that timeout: on SIGTERM (pod deleted, evicted, upgraded) the controller in
#     charge hands over at once with `scontrol takeover` to a backup that answers (ha_hand_over);
#   - a slurmctld that hung (SIGSTOP, a stuck disk, a lost node) while another took control still holds
#     the queue as it was and would write it back over the other's when it resumes: the heartbeat file
#     says who is in charge, and a slurmctld that lost control is killed at once, with SIGKILL so that
#     it writes nothing (ha_fence). Its container then starts again.
#
# A primary (pod -0) that starts while a backup is in charge does not take control back: Slurm's primary
# would (REQUEST_CONTROL), and in Slurm 26.05 the backup answers that only after CONTROL_TIMEOUT (30 s),
# with no controller in charge meanwhile. It waits instead (ha_wait_for_turn), Ready, and starts its
# slurmctld, which then takes control at once, when the backup in charge stops answering: its pod gone
# (the port refuses) or hung (the heartbeat stops).
#
# The probe (warden-slurmctld-health) asks this pod's own slurmctld through a slurm.conf that names only
# it (ha_self_conf): a standby backup answers "in standby mode", which is healthy, as is a primary
# waiting for its turn (WARDEN_CTLD_WAITING names the controller it waits on).

WARDEN_SELF_CONF="${WARDEN_SELF_CONF:-/run/warden/ctld-self/slurm.conf}"
WARDEN_CTLD_WAITING="${WARDEN_CTLD_WAITING:-/run/warden/ctld-self/waiting}"

# This pod's place in SlurmctldHost (the StatefulSet ordinal ending its hostname).
ha_index() {
    local host
    host="$(hostname -s)"
    printf '%s\n' "${host##*-}"
}

# The heartbeat file as two numbers, the time of the beat and its writer's index; nothing when there is
# no such file (yet).
ha_beat() {
    local words
    words="$(od -An -v -tu8 --endian=big -N16 "$1/heartbeat" 2>/dev/null)" || return 0
    # shellcheck disable=SC2086 # two numbers
    set -- $words
    [ $# -eq 2 ] && printf '%s %s\n' "$1" "$2"
    return 0
}

# The index of the slurmctld writing the heartbeat file, when it wrote it within SlurmctldTimeout; nothing
# when there is no such file or it is older (nobody in charge, or the one in charge hangs).
ha_in_charge() {
    local timeout beat
    timeout="$(sed -n 's/^SlurmctldTimeout=\([0-9]*\).*/\1/p' "$SLURM_ETC/slurm.conf")"
    beat="$(ha_beat "$1")"
    [ -n "$beat" ] || return 0
    [ $(($(date +%s) - ${beat% *})) -le "${timeout:-120}" ] && printf '%s\n' "${beat#* }"
    return 0
}

# The index of the heartbeat's writer, however old the beat.
ha_writer() {
    local beat
    beat="$(ha_beat "$1")"
    [ -n "$beat" ] && printf '%s\n' "${beat#* }"
    return 0
}

# slurm.conf with this pod's SlurmctldHost only, for the probe: it asks this slurmctld, not whichever
# answers first.
ha_self_conf() {
    local me line
    me="$(hostname -s)"
    grep -qE "^SlurmctldHost=$me(\(|\$)" "$SLURM_ETC/slurm.conf" ||
        { warden_log "error: $me is not in slurm.conf's SlurmctldHost list"; return 1; }
    install -d -m 0755 "$(dirname "$WARDEN_SELF_CONF")"
    # by loopback: its Service's address would need the pod to reach itself through the Service
    line="SlurmctldHost=$me(localhost)"
    { grep -v '^SlurmctldHost=' "$SLURM_ETC/slurm.conf"; printf '%s\n' "$line"; } >"$WARDEN_SELF_CONF.new"
    chmod 0644 "$WARDEN_SELF_CONF.new"
    mv -f "$WARDEN_SELF_CONF.new" "$WARDEN_SELF_CONF"
}

# Before the primary's slurmctld starts: while another controller is in charge, wait (see above).
# Returns once none is (a fresh cluster; the heartbeat stale: the one in charge hangs or died; or gone:
# the one in charge stopped, see ha_stopped).
ha_wait_for_turn() {
    local state="$1" me cur told=""
    me="$(ha_index)"
    if [ "$me" != 0 ]; then
        # A backup starts in standby whoever is in charge, once a heartbeat file exists: before that its
        # slurmctld would not answer, and a primary starting then would wait CONTROL_TIMEOUT for it.
        while [ ! -e "$state/heartbeat" ]; do
            [ -n "$told" ] || warden_log "waiting for a controller in charge (no heartbeat file yet)"
            told=1
            echo "-" >"$WARDEN_CTLD_WAITING"
            sleep 1
        done
        rm -f "$WARDEN_CTLD_WAITING"
        return 0
    fi
    while cur="$(ha_in_charge "$state")" && [ -n "$cur" ] && [ "$cur" != "$me" ]; do
        if [ -z "$told" ]; then
            warden_log "controller $cur is in charge: standing by until it stops (no take-back, see warden-ctld-ha.sh)"
            told=1
        fi
        printf '%s\n' "$cur" >"$WARDEN_CTLD_WAITING"
        sleep 1
    done
    rm -f "$WARDEN_CTLD_WAITING"
    [ -z "$told" ] || warden_log "no controller is in charge any more: taking control"
}

# After a handover: wait (up to 20 s) until the heartbeat names another controller.
ha_handed_over() {
    local state="$1" me _
    me="$(ha_index)"
    for _ in $(seq 40); do
        [ "$(ha_writer "$state")" != "$me" ] && return 0
        sleep 0.5
    done
    warden_log "stopping: the new controller in charge did not beat within 20 s"
    return 0
}

# After this slurmctld exited: a backup that was in charge (and saved its state on the way out) dates its
# last heartbeat back to 1970, so that a primary standing by takes control at once rather than after
# SlurmctldTimeout. (The file stays: a standby starts answering only once it exists.)
ha_stopped() {
    local state="$1" me
    me="$(ha_index)"
    if [ "$me" != 0 ] && [ "$(ha_writer "$state")" = "$me" ]; then
        # two big-endian 64-bit words, as Slurm writes them: the time of the beat (1), the writer's index
        printf '\0\0\0\0\0\0\0\001\0\0\0\0\0\0\0\'"$(printf '%03o' "$me")" >"$state/heartbeat.new" &&
            mv -f "$state/heartbeat.new" "$state/heartbeat" &&
            warden_log "stopped in charge: heartbeat dated back for the primary standing by"
    fi
}

# In the background while slurmctld PID runs: once the heartbeat moves from this controller to another
# while PID still lives, kill it (see above). When the move is a handover this slurmctld made (it saved
# its state first), the kill finds it stopping or gone.
ha_fence() {
    local pid="$1" state="$2" me started mine=""
    me="$(ha_index)"
    started="$(date +%s)"
    trap - TERM INT
    set +e
    while kill -0 "$pid" 2>/dev/null; do
        # shellcheck disable=SC2046 # the time of the beat, the writer's index
        set -- $(ha_beat "$state")
        if [ $# -eq 2 ]; then
            # a beat of this slurmctld (not one an earlier run of this pod left): it is in charge
            if [ "$2" = "$me" ] && [ "$1" -ge "$started" ]; then
                mine=1
            elif [ -n "$mine" ] && [ "$2" != "$me" ] && kill -0 "$pid" 2>/dev/null; then
                warden_log "fence: slurmctld $2 took control from this one; killing it (pid $pid) before it writes the state it holds"
                kill -KILL "$pid"
            fi
        fi
        sleep 1
    done
}

# On SIGTERM, when this slurmctld is in charge: hand control to the first backup after it that answers a
# ping (`scontrol takeover N`: the backup asks this one to save its state and step down, then takes
# over). Returns 1 when none could take it (this slurmctld then stops as with one controller).
ha_hand_over() {
    local me line host idx target=""
    me="$(ha_index)"
    while read -r line; do
        case "$line" in *" is UP") ;; *) continue ;; esac
        host="${line#* at }"
        host="${host% is UP}"
        idx="${host##*-}"
        case "$idx" in '' | *[!0-9]*) continue ;; esac
        if [ "$idx" -gt "$me" ]; then target="$idx"; break; fi
    done < <(timeout 10 scontrol ping 2>/dev/null)
    if [ -z "$target" ]; then
        warden_log "stopping: no backup controller answers; slurmctld stops without handing over"
        return 1
    fi
    warden_log "stopping: handing control to backup controller $target (scontrol takeover $target)"
    if timeout 30 scontrol takeover "$target"; then
        warden_log "stopping: controller $target took control"
        return 0
    fi
    warden_log "stopping: scontrol takeover $target failed; slurmctld stops without handing over"
    return 1
}
