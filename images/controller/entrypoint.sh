#!/bin/bash
# slurmctld in the foreground, logs on stderr. Extra arguments go to slurmctld;
# `-V`/`--help` print and exit without any configuration.
#   WARDEN_CONFIG_POLL   seconds between looks at the mounted config (default 2). When the operator
#                        changed it, the files are copied again and `scontrol reconfigure` makes
#                        slurmctld re-read them in place and tell every slurmd to do the same: the pod
#                        is never replaced for a Slurm config change, the queue and running jobs go on.
#   WARDEN_JWT_KEY       the auth/jwt HS256 key (default /etc/warden/jwt/jwt_hs256.key, Secret
#                        <cluster>-jwt-key), installed as /etc/slurm/jwt_hs256.key (slurm, 0600). Followed
#                        like the config: a rotated key is installed and slurmctld reconfigured (it then
#                        takes tokens signed with the new key only; docs/operations.md)
#   WARDEN_CTLD_GUARD    the library preloaded into slurmctld (default
#                        /usr/lib/warden/libwarden_ctld_guard.so: closes a deadlock any user can
#                        trigger, see docs/security.md). `none` runs Slurm's own code unguarded: the
#                        dataplane tier does, to show the defect is still in the shipped Slurm.
#   WARDEN_DEFAULT_ACCOUNT  with accounting on (spec.accounting.defaultAccount): jail users that slurmdbd
#                        does not know get an association in this account (see associate_users).
#   WARDEN_BRIDGE_ACCOUNTS  with spec.bridge and accounting on: the file (ConfigMap <cluster>-bridge-accounts)
#                        where the bridge lists the namespaces opted in to the cluster, one a line; each
#                        gets its Slurm account k8s-<namespace> under k8s, warden-bridge in it (see
#                        bridge_accounts)
#   WARDEN_CONTROLLERS   with backups (spec.controller.replicas 2-3): this pod hands control over when
#                        it stops, fences a slurmctld that lost control and tells the operator who is in
#                        charge (warden-ctld-ha.sh, operator/warden/ha/ctld.py)
#   WARDEN_IN_CHARGE_PORT  with backups: the port of that answer (GET /in-charge)
set -euo pipefail
WARDEN_COMPONENT=controller
# shellcheck source=../slurm-base/warden-lib.sh
. /usr/lib/warden/warden-lib.sh
warden_passthrough slurmctld "$@"
# shellcheck source=warden-ctld-ha.sh
. /usr/lib/warden/warden-ctld-ha.sh
ha=""
[ "${WARDEN_CONTROLLERS:-1}" -gt 1 ] && ha=1

# what this pod follows: the config files and the JWT key
followed=("$WARDEN_CONFIG_DIR" "$(dirname "$WARDEN_JWT_KEY")")
# the hash of what it follows taken before the copy (a change meanwhile is not missed), the files, the JWT key
config_hash="$(warden_slurm_config --jwt-key "${followed[@]/#/--print-hash=}")"
[ -z "$ha" ] || ha_self_conf || exit 1
warden_jail_users
state="${WARDEN_STATE_DIR:-/var/spool/slurmctld}"
install -d -o slurm -g slurm -m 0755 "$state"
# a PVC arrives root-owned; slurmctld runs as SlurmUser and must own its state
chown slurm:slurm "$state"
# with backups: who is in charge (the heartbeat's verdict), served to the operator from the start, a primary
# standing by included (GET /in-charge on WARDEN_IN_CHARGE_PORT)
serve_pid=""
if [ -n "$ha" ]; then
    ha_serve "$state" &
    serve_pid=$!
fi
guard="${WARDEN_CTLD_GUARD:-/usr/lib/warden/libwarden_ctld_guard.so}"
if [ "$guard" = none ]; then
    guard=""
    warden_log "warning: slurmctld runs without its guard: any user can deadlock it (docs/security.md)"
elif [ ! -r "$guard" ]; then
    # the dynamic loader would only warn and run slurmctld unguarded
    warden_log "error: the slurmctld guard $guard is missing"
    exit 1
fi
if [ -n "$ha" ]; then
    ha_wait_for_turn "$state"
    # the files may have changed while it stood by
    config_hash="$(warden_slurm_config --jwt-key "${followed[@]/#/--print-hash=}")"
    ha_self_conf || exit 1
fi
# With AccountingStorageEnforce (spec.accounting.enforce), a slurmctld that has no association state of its
# own yet (its first start) stops at once unless slurmdbd answers ("fatal: slurmdbd and/or database must be
# up at slurmctld start time"): on a new cluster slurmdbd waits for its database. Wait until slurmdbd
# listens (it does once its database answers) rather than be restarted. (No Slurm client can ask it yet:
# they authenticate through slurmctld's socket.)
if grep -q '^AccountingStorageEnforce=' "$SLURM_ETC/slurm.conf" && [ ! -e "$state/assoc_mgr_state" ]; then
    dbd_host="$(sed -n 's/^AccountingStorageHost=//p' "$SLURM_ETC/slurm.conf" | tail -n 1)"
    dbd_port="$(sed -n 's/^AccountingStoragePort=//p' "$SLURM_ETC/slurm.conf" | tail -n 1)"
    waited=0
    until timeout 3 bash -c ': <"/dev/tcp/$1/$2"' _ "$dbd_host" "${dbd_port:-6819}" 2>/dev/null; do
        [ $((waited % 30)) -eq 0 ] && warden_log "accounting is enforced: waiting for slurmdbd before slurmctld's first start"
        sleep 2
        waited=$((waited + 2))
    done
fi
warden_log "starting slurmctld $(slurmctld -V | awk '{print $2}')${guard:+ (preloaded: $guard)}${ha:+ (controller $(ha_index) of $WARDEN_CONTROLLERS)}"
# shellcheck disable=SC2086
LD_PRELOAD="$guard" slurmctld -D ${WARDEN_SLURMCTLD_ARGS:-} "$@" &
ctld_pid=$!
fence_pid=""
if [ -n "$ha" ]; then
    ha_fence "$ctld_pid" "$state" &
    fence_pid=$!
fi

# Jail users (uid 1000-59999) that accounting does not know yet get an association in
# $WARDEN_DEFAULT_ACCOUNT (warden_associate), so that `sacct` shows them their jobs: with private jobs a user
# sees only the jobs they submitted with an association. Looked at when the jail's passwd changed, and
# again each round until every such user has one. Directory users get theirs at each login (the login
# node's session hook), as the directory cannot be listed without SSSD enumerating it.
associate_users() {
    local passwd="$WARDEN_JAIL/etc/passwd" done_sum="" sum
    trap - TERM INT
    set +e # a failed look is tried again next round, never the end of the loop
    while sleep "${WARDEN_ACCOUNTS_POLL:-3}"; do
        sum="$(cksum <"$passwd" 2>/dev/null)" || continue
        [ "$sum" = "$done_sum" ] && continue
        # shellcheck disable=SC2046 # one word per user name
        warden_associate "$WARDEN_DEFAULT_ACCOUNT" $(awk -F: '$3 >= 1000 && $3 <= 59999 { print $1 }' "$passwd") &&
            done_sum="$sum"
    done
}
if [ -n "${WARDEN_DEFAULT_ACCOUNT:-}" ]; then
    associate_users &
    accounts_pid=$!
fi

# The bridge's tenants: each namespace opted in to the cluster's bridge (the bridge lists them in
# $WARDEN_BRIDGE_ACCOUNTS) is a Slurm account k8s-<namespace> under the account k8s, with warden-bridge in it,
# so that its pods' placeholders are charged to it (`sacct -A k8s-<namespace>`) and an admin's limits, QoS and
# fair share for the namespace (or for k8s, which its accounts inherit) apply. Accounts of namespaces no
# longer opted in stay, with their usage. Looked at when the list changed, and again each round until done.
bridge_accounts() {
    local file="$WARDEN_BRIDGE_ACCOUNTS" done_sum="" sum
    trap - TERM INT
    set +e
    while sleep "${WARDEN_ACCOUNTS_POLL:-3}"; do
        sum="$(cksum <"$file" 2>/dev/null)" || continue
        [ "$sum" = "$done_sum" ] && continue
        # shellcheck disable=SC2046 # one word per namespace name
        bridge_associate $(grep -E '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$' "$file") && done_sum="$sum"
    done
}
# bridge_associate NAMESPACE...: the accounts and warden-bridge's associations that are missing, made.
bridge_associate() {
    local accounts have missing="" new="" ns
    [ "$#" -gt 0 ] || return 0
    accounts="$(timeout 30 sacctmgr -n -P list accounts format=account)" || return 1
    have="$(timeout 30 sacctmgr -n -P list associations user=warden-bridge format=account)" || return 1
    if ! grep -qxF k8s <<<"$accounts"; then
        timeout 30 sacctmgr -i add account k8s description="Kubernetes namespaces (the bridge)" organization=warden \
            >/dev/null || return 1
        warden_log "accounting: made account k8s (the bridge's namespaces)"
    fi
    for ns in "$@"; do
        grep -qxF "k8s-$ns" <<<"$accounts" || new="${new:+$new,}k8s-$ns"
        grep -qxF "k8s-$ns" <<<"$have" || missing="${missing:+$missing,}k8s-$ns"
    done
    if [ -n "$new" ]; then
        timeout 30 sacctmgr -i add account "$new" parent=k8s description="Kubernetes namespace" organization=warden \
            >/dev/null || return 1
        warden_log "accounting: made account(s) $new for the bridge's namespaces"
    fi
    if [ -n "$missing" ]; then
        timeout 30 sacctmgr -i add user warden-bridge account="$missing" >/dev/null || return 1
        warden_log "accounting: warden-bridge now in account(s) $missing"
    fi
}
if [ -n "${WARDEN_BRIDGE_ACCOUNTS:-}" ]; then
    bridge_accounts &
    bridge_accounts_pid=$!
fi

# With accounting, slurmctld refuses to start (fatal "No Assoc usage file") from a state directory that
# has its other files but no assoc_usage, which it writes only at a clean stop or its periodic checkpoint
# (minutes): a slurmctld killed before that (OOM, a fenced hang, a backup taking over) could not start
# again. Once this slurmctld is in charge and answers, one `scontrol reconfigure` (a clean restart in
# place, state saved in full) writes it.
save_state_once() {
    local _
    trap - TERM INT
    set +e
    grep -q '^AccountingStorageType=accounting_storage/slurmdbd' "$SLURM_ETC/slurm.conf" || return 0
    for _ in $(seq 150); do
        [ -e "$state/assoc_usage" ] && return 0
        if { [ -z "$ha" ] || [ "$(ha_in_charge "$state")" = "$(ha_index)" ]; } &&
            /usr/lib/warden/warden-slurmctld-health 8 >/dev/null 2>&1; then
            scontrol reconfigure && warden_log "state: saved in full once (assoc_usage), so that a restart or a takeover finds it"
            return 0
        fi
        sleep 2
    done
}
save_state_once &
save_pid=$!

reload() {
    warden_slurm_config --jwt-key || return 1
    if [ -n "$ha" ]; then
        ha_self_conf || return 1
        if [ "$(ha_in_charge "$state")" != "$(ha_index)" ]; then
            # a standby backup re-reads its files on SIGHUP; `scontrol reconfigure` would reach the one in
            # charge, whose own pod tells it
            kill -HUP "$ctld_pid" && warden_log "config: standby slurmctld re-read its configuration"
            return
        fi
    fi
    # A reconfigure can fail anyway: slurmctld executes itself anew with the new files, and when the new
    # image does not come up the old one runs on. Its "Configuration data as of" moves only when it read them.
    local before after stamp _
    before="$(loaded_at)"
    stamp="$(sed -n '1s/^# warden-config-hash: //p' "$SLURM_ETC/slurm.conf")"
    if ! scontrol reconfigure; then
        warden_log "config: scontrol reconfigure failed"
        return 1
    fi
    for _ in $(seq 30); do
        after="$(loaded_at)"
        [ -n "$after" ] && [ "$after" != "$before" ] && break
        sleep 1
    done
    if [ -z "$after" ] || [ "$after" = "$before" ]; then
        warden_log "config: slurmctld still runs the configuration it read at ${before:-?}, not ${stamp:-the new files}: the reconfigure failed anyway"
        return 1
    fi
    warden_log "config: slurmctld reconfigured (hash $(warden_dirs_hash "${followed[@]}" | cut -c1-12)), runs ${stamp:-the new files} since $after"
}

# When slurmctld last read its configuration ("Configuration data as of"); empty when it does not answer.
loaded_at() {
    scontrol show config 2>/dev/null | sed -n 's/^Configuration data as of //p'
}
warden_follow "$config_hash" reload "${followed[@]}"
# CONT: a slurmctld stopped in its tracks takes the TERM too (the kubelet's SIGKILL follows the grace period)
stop() {
    kill -TERM "$follow_pid" "$save_pid" ${accounts_pid:+"$accounts_pid"} ${bridge_accounts_pid:+"$bridge_accounts_pid"} 2>/dev/null
    if [ -n "$ha" ]; then
        if [ "$(ha_in_charge "$state")" = "$(ha_index)" ]; then
            # it saves its state and exits by itself; this pod stops once the heartbeat names the
            # new one, so that the pod made again finds it in charge and stands by
            ha_hand_over && ha_handed_over "$state" && return
        else
            # a standby holds nothing to save; one that lost control holds a stale queue: never let it
            # resume (SIGKILL, not TERM and CONT)
            kill -KILL "$ctld_pid" 2>/dev/null
            return
        fi
    fi
    kill -TERM "$ctld_pid" 2>/dev/null
    kill -CONT "$ctld_pid" 2>/dev/null
}
trap stop TERM INT
set +e
wait "$ctld_pid"
rc=$?
# a signal interrupted the wait: slurmctld is stopping; wait for it
while kill -0 "$ctld_pid" 2>/dev/null; do wait "$ctld_pid"; rc=$?; done
kill -TERM "$follow_pid" "$save_pid" ${accounts_pid:+"$accounts_pid"} ${bridge_accounts_pid:+"$bridge_accounts_pid"} \
    ${fence_pid:+"$fence_pid"} ${serve_pid:+"$serve_pid"} 2>/dev/null
[ -z "$ha" ] || ha_stopped "$state"
warden_log "slurmctld exited (status $rc)"
exit "$rc"
