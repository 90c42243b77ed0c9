#!/bin/bash
# sshd in the foreground (logs on stderr) with sackd beside it; the container stops when either
# stops. `-V`/`--help` print sshd's version/usage and exit.
#   /etc/warden/ssh/sshd_config        optional; default /usr/share/warden/sshd_config
#   /etc/warden/ssh/authorized_keys    optional; root's keys
#   /etc/warden/ssh-host-keys/ssh_host_ed25519_key{,.pub}   host key (generated, with a warning, if absent)
#   WARDEN_SACKD_ARGS                  extra sackd flags
#   WARDEN_CONFIG_POLL                 seconds between looks at the mounted Slurm and SSH config
#                                      (default 2); changes are copied in and sshd is HUPed
#   WARDEN_DEFAULT_ACCOUNT             with accounting on (spec.accounting.defaultAccount) and a directory:
#                                      directory users get an association in it when they log in
#   WARDEN_SESSION_MEMORY, WARDEN_SESSION_CPU, WARDEN_SESSION_PIDS   per-user limits of SSH sessions
#                                      (spec.login.userLimits: bytes, millicores, processes;
#                                      /usr/lib/warden/warden-session-limits)
#   WARDEN_HIDE_PROCESSES              no: users see each other's processes (spec.security.hideOtherUsersProcesses)
#   WARDEN_WORKER_SSH_HOSTS            with spec.workerSsh: the names of the workers (known_hosts patterns),
#                                      whose host key /etc/warden/worker-ssh-known-key/ssh_host_ed25519_key.pub
#                                      the jail's ssh client then knows (/etc/ssh/ssh_known_hosts, this pod only)
set -euo pipefail
WARDEN_COMPONENT=login
# shellcheck source=../slurm-base/warden-lib.sh
. /usr/lib/warden/warden-lib.sh
warden_passthrough /usr/sbin/sshd "$@"

ssh_in="${WARDEN_SSH_DIR:-/etc/warden/ssh}"
hostkeys="${WARDEN_SSH_HOST_KEYS:-/etc/warden/ssh-host-keys}"

# the hash of what it follows taken before the copy (a change meanwhile is not missed), then the files
config_hash="$(warden_slurm_config --print-hash="$WARDEN_CONFIG_DIR" --print-hash="$ssh_in")"
warden_jail_users
# what sshd's PAM session hook (directory users: /usr/lib/warden/warden-session) needs of this environment
install -d -m 0755 /run/warden
printf 'WARDEN_JAIL=%q\nWARDEN_DEFAULT_ACCOUNT=%q\n' "$WARDEN_JAIL" "${WARDEN_DEFAULT_ACCOUNT:-}" >/run/warden/session.env

ssh_files() {
    if [ -f "$ssh_in/sshd_config" ]; then
        install -m 0644 "$ssh_in/sshd_config" /etc/ssh/sshd_config
    else
        install -m 0644 /usr/share/warden/sshd_config /etc/ssh/sshd_config
    fi
    install -d -m 0755 /etc/ssh/warden_authorized_keys
    if [ -f "$ssh_in/authorized_keys" ]; then
        install -m 0644 "$ssh_in/authorized_keys" /etc/ssh/warden_authorized_keys/root
    else
        rm -f /etc/ssh/warden_authorized_keys/root
    fi
}
ssh_files
if [ -f "$hostkeys/ssh_host_ed25519_key" ]; then
    install -m 0600 "$hostkeys/ssh_host_ed25519_key" /etc/ssh/ssh_host_ed25519_key
    [ -f "$hostkeys/ssh_host_ed25519_key.pub" ] && install -m 0644 "$hostkeys/ssh_host_ed25519_key.pub" /etc/ssh/
else
    warden_log "warning: no host key in $hostkeys; generating a throwaway one"
    [ -f /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -q -t ed25519 -N '' -f /etc/ssh/ssh_host_ed25519_key
fi
# ChrootDirectory requires every component to be root-owned and not writable by others
if [ -d "$WARDEN_JAIL" ]; then
    [ "$(stat -c '%u %a' "$WARDEN_JAIL")" = "0 755" ] || warden_log "warning: $WARDEN_JAIL must be root:root 0755 for ChrootDirectory"
else
    warden_log "warning: no jail at $WARDEN_JAIL; logins will fail"
fi
install -d -m 0755 /run/sshd
/usr/sbin/sshd -t
# users' sessions in per-user cgroups with their limits; users see only their own processes
/usr/lib/warden/warden-session-limits setup || warden_die "cannot limit users' sessions" \
    "(spec.login.userLimits; why: the error above); set spec.login.userLimits.enabled: false to run without"
warden_hide_processes

# SSH to the workers (spec.workerSsh): sessions' ssh client knows the workers' host key by their names
known=()
worker_key="${WARDEN_WORKER_SSH_KNOWN_KEY:-/etc/warden/worker-ssh-known-key/ssh_host_ed25519_key.pub}"
if [ -n "${WARDEN_WORKER_SSH_HOSTS:-}" ] && [ -f "$worker_key" ]; then
    install -d -m 0755 /run/warden
    printf '%s %s\n' "$WARDEN_WORKER_SSH_HOSTS" "$(cut -d' ' -f1,2 "$worker_key")" >/run/warden/ssh_known_hosts
    chmod 0644 /run/warden/ssh_known_hosts
    known=("/run/warden/ssh_known_hosts:/etc/ssh/ssh_known_hosts:ro")
fi

# sackd (its 24.11 usage text omits -D) serves /run/slurm/sack.socket; the jail sees it through the bind below
warden_start_sackd
warden_jail_binds ${known[@]+"${known[@]}"} || warden_die "$WARDEN_BIND_DENIED"
# SSH sessions are chrooted, not moved by the SPANK plugin: give them the pod's /proc (ps, top, htop,
# bash's /dev/fd -> /proc/self/fd) and /dev (ptys for interactive sessions) the way the plugin gives
# them to job steps: recursive binds, so the runtime's masked and read-only parts of /proc stay so.
for d in /proc /dev; do
    mountpoint -q "$WARDEN_JAIL$d" && continue
    mount --rbind "$d" "$WARDEN_JAIL$d" && warden_log "jail: bound $d at $WARDEN_JAIL$d (recursive)" ||
        warden_die "cannot bind $d at $WARDEN_JAIL$d: $WARDEN_BIND_DENIED"
done

/usr/sbin/sshd -D -e "$@" &
sshd_pid=$!
warden_log "sshd ($sshd_pid) and sackd ($sackd_pid) running"

# A changed ConfigMap: Slurm clients in the jail read the new files at their next command; sshd reads
# authorized keys at every login and sshd_config when HUPed (open sessions stay).
reload() {
    warden_slurm_config && warden_client_config && ssh_files && /usr/sbin/sshd -t && kill -HUP "$sshd_pid"
}
warden_follow "$config_hash" reload "$WARDEN_CONFIG_DIR" "$ssh_in"
trap 'kill -TERM "$sshd_pid" "$sackd_pid" "$follow_pid" 2>/dev/null' TERM INT
set +e
wait -n "$sshd_pid" "$sackd_pid"
rc=$?
warden_log "a daemon exited (status $rc); stopping"
kill -TERM "$sshd_pid" "$sackd_pid" "$follow_pid" 2>/dev/null
wait
exit "$rc"
