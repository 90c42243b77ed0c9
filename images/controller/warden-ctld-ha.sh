# shellcheck shell=bash
# Backup controllers (spec.controller.replicas 2-3, WARDEN_CONTROLLERS in the pod): sourced by the
# controller's entrypoint. Each function runs `python -m warden.ha.ctld` (operator/warden/ha/ctld.py, which
# says why each step exists), whose every decision is warden.ha.beat's: who is in charge is the writer of
# the heartbeat Slurm rewrites in the shared StateSaveLocation, while that beat is fresher than
# SlurmctldTimeout. The operator reads that verdict from the pods (ha_serve) and decides nothing itself.

WARDEN_SELF_CONF="${WARDEN_SELF_CONF:-/run/warden/ctld-self/slurm.conf}"
WARDEN_CTLD_WAITING="${WARDEN_CTLD_WAITING:-/run/warden/ctld-self/waiting}"
WARDEN_HA_PY="${WARDEN_HA_PY:-/opt/warden/bin/python -I}"

# `python -m warden.ha.ctld ARGS...` with this pod's settings (in a subshell: ha_exec replaces its shell)
ha_ctld() { (ha_exec "$@"); }

# This pod's place in SlurmctldHost (the StatefulSet ordinal ending its hostname).
ha_index() { ha_ctld index; }
# The index of the controller in charge; nothing when none is (no beat, or a stale one).
ha_in_charge() { ha_ctld in-charge "$1"; }
# slurm.conf naming only this pod's slurmctld, for the probe: a standby answers "in standby mode".
ha_self_conf() { ha_ctld self-conf; }
# Before the primary's slurmctld starts: wait while another controller is in charge.
ha_wait_for_turn() { ha_ctld wait-for-turn "$1"; }
# After a handover: wait (up to 20 s) until the heartbeat names another controller.
ha_handed_over() { ha_ctld handed-over "$1"; }
# After this slurmctld exited: a backup that was in charge dates its beat back for the primary.
ha_stopped() { ha_ctld stopped "$1"; }
# On SIGTERM, when in charge: control to the first backup after this one that answers (1: none could).
ha_hand_over() { ha_ctld hand-over; }
# Run in the background (&), each replacing its subshell: the fence of slurmctld PID (killed once another
# controller took control from it), and the verdict served to the operator (GET /in-charge).
ha_fence() { ha_exec fence "$1" "$2"; }
ha_serve() { ha_exec serve "$1"; }
ha_exec() {
    # shellcheck disable=SC2086  # WARDEN_HA_PY: the interpreter and its options
    WARDEN_COMPONENT="${WARDEN_COMPONENT:-controller}" WARDEN_CTLD_HOST="$(hostname -s)" SLURM_ETC="$SLURM_ETC" \
        WARDEN_SELF_CONF="$WARDEN_SELF_CONF" WARDEN_CTLD_WAITING="$WARDEN_CTLD_WAITING" \
        exec $WARDEN_HA_PY -m warden.ha.ctld "$@"
}
