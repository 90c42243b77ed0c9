# shellcheck shell=bash
# SSH to the workers (spec.workerSsh; docs/operations.md, "SSH to a worker"), sourced by the worker
# entrypoint after the jail's binds. Does nothing unless the operator mounted the worker's sshd_config.
#   /etc/warden/worker-ssh/{sshd_config,authorized_keys,admins}   ConfigMap <cluster>-worker-sshd-config
#   /etc/warden/worker-ssh-host-keys/ssh_host_ed25519_key{,.pub}  Secret <cluster>-worker-ssh-host-keys
#
# Sessions are chrooted into $WARDEN_WORKER_SSH_ROOT: a recursive bind of the jail as this container has it
# (the Slurm client files, /run/slurm, the pod's DNS files, the spool, SSSD's sockets), with this container's
# /proc (hidepid) and /dev bound in. Job steps start from $WARDEN_JAIL, which stays as it was.
# sshd's PAM account stack (/etc/pam.d/sshd, written from /usr/share/warden/pam-sshd-worker with this node's
# name) lets in the admins, then asks pam_slurm_adopt, which refuses a user without a job here and puts the
# session of a user with one into its extern step's cgroup.
# WARDEN_POLL_HOOKS gets warden_worker_ssh_keep: it binds again what a replaced jail file took away from
# the sessions' view, installs a changed config (sshd is HUPed) and starts sshd again should it have ended.

WARDEN_WORKER_SSH_DIR="${WARDEN_WORKER_SSH_DIR:-/etc/warden/worker-ssh}"
WARDEN_WORKER_SSH_HOST_KEYS="${WARDEN_WORKER_SSH_HOST_KEYS:-/etc/warden/worker-ssh-host-keys}"
WARDEN_WORKER_SSH_ROOT="${WARDEN_WORKER_SSH_ROOT:-/run/warden/ssh-root}"
WARDEN_WORKER_SSH_HASH=""
# the time of the last look at WARDEN_WORKER_SSH_DIR (warden_worker_ssh_keep hashes only what is newer)
WARDEN_WORKER_SSH_STAMP=""

warden_worker_ssh_wanted() { [ -f "$WARDEN_WORKER_SSH_DIR/sshd_config" ]; }

# sshd_config, root's keys, the admins' list and the PAM stack naming this node; HASH: the directory's hash
# taken before (warden_hash_if_changed).
#   warden_worker_ssh_files HASH
warden_worker_ssh_files() {
    local node="${WARDEN_NODE_NAME:-$(hostname -s)}"
    WARDEN_WORKER_SSH_HASH="$1"
    install -m 0644 "$WARDEN_WORKER_SSH_DIR/sshd_config" /etc/ssh/sshd_config || return 1
    install -d -m 0755 /etc/ssh/warden_authorized_keys || return 1
    if [ -s "$WARDEN_WORKER_SSH_DIR/authorized_keys" ]; then
        install -m 0644 "$WARDEN_WORKER_SSH_DIR/authorized_keys" /etc/ssh/warden_authorized_keys/root || return 1
    else
        rm -f /etc/ssh/warden_authorized_keys/root
    fi
    if [ -f "$WARDEN_WORKER_SSH_DIR/admins" ]; then
        install -m 0644 "$WARDEN_WORKER_SSH_DIR/admins" /etc/ssh/warden_admins || return 1
    else
        install -m 0644 /dev/null /etc/ssh/warden_admins || return 1
    fi
    case "$node" in *[!A-Za-z0-9._-]* | '') warden_log "ssh: bad node name '$node'"; return 1 ;; esac
    sed "s/@NODE@/$node/" /usr/share/warden/pam-sshd-worker >/etc/pam.d/sshd.new &&
        chmod 0644 /etc/pam.d/sshd.new && mv -f /etc/pam.d/sshd.new /etc/pam.d/sshd
}

# The sessions' view of the jail, once: the jail with every bind this container made in it, then /proc
# and /dev, recursively (the runtime's masked and read-only parts of /proc stay so).
warden_worker_ssh_root() {
    local d
    install -d -m 0755 "$WARDEN_WORKER_SSH_ROOT" || return 1
    if ! mountpoint -q "$WARDEN_WORKER_SSH_ROOT"; then
        mount --rbind "$WARDEN_JAIL" "$WARDEN_WORKER_SSH_ROOT" || return 1
    fi
    for d in /proc /dev; do
        mountpoint -q "$WARDEN_WORKER_SSH_ROOT$d" || mount --rbind "$d" "$WARDEN_WORKER_SSH_ROOT$d" || return 1
    done
    # ChrootDirectory wants every component root's and writable by nobody else
    [ "$(stat -c '%u %a' "$WARDEN_WORKER_SSH_ROOT")" = "0 755" ] ||
        warden_log "ssh: warning: the jail's root must be root:root 0755 for sshd's ChrootDirectory"
}

warden_worker_ssh_start() {
    install -d -m 0755 /run/sshd
    # in the background, logging to the container's stderr (a daemonized sshd's logs would go nowhere: no
    # syslog here); the next poll starts it again should it end
    /usr/sbin/sshd -D -e -f /etc/ssh/sshd_config &
    warden_log "ssh: sshd ($!) started (spec.workerSsh)"
}

warden_worker_ssh_running() {
    local pid
    pid="$(cat /run/sshd.pid 2>/dev/null)" || return 1
    [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = sshd ]
}

# At the container's start. A worker whose sshd cannot start stops, saying why (the spec asked for it).
warden_worker_ssh_setup() {
    warden_worker_ssh_wanted || return 0
    [ -f "$WARDEN_WORKER_SSH_HOST_KEYS/ssh_host_ed25519_key" ] ||
        warden_die "ssh: no host key in $WARDEN_WORKER_SSH_HOST_KEYS (Secret <cluster>-worker-ssh-host-keys)"
    install -m 0600 "$WARDEN_WORKER_SSH_HOST_KEYS/ssh_host_ed25519_key" /etc/ssh/ssh_host_ed25519_key
    install -m 0644 "$WARDEN_WORKER_SSH_HOST_KEYS/ssh_host_ed25519_key.pub" /etc/ssh/ssh_host_ed25519_key.pub
    WARDEN_WORKER_SSH_STAMP="$(warden_new_stamp)" || warden_die "ssh: cannot make a file in ${TMPDIR:-/tmp}"
    warden_worker_ssh_files "$(warden_hash_if_changed "$WARDEN_WORKER_SSH_STAMP" "$WARDEN_WORKER_SSH_DIR")" ||
        warden_die "ssh: cannot install the worker's sshd files"
    warden_worker_ssh_root || warden_die "ssh: cannot make the sessions' view of the jail at" \
        "$WARDEN_WORKER_SSH_ROOT: $WARDEN_MOUNT_REFUSED"
    /usr/sbin/sshd -t -f /etc/ssh/sshd_config || warden_die "ssh: sshd refuses its configuration (above)"
    warden_worker_ssh_start || warden_die "ssh: sshd did not start"
    WARDEN_POLL_HOOKS="${WARDEN_POLL_HOOKS:-} warden_worker_ssh_keep"
}

warden_worker_ssh_keep() {
    local now
    WARDEN_JAIL="$WARDEN_WORKER_SSH_ROOT" warden_jail_rebind
    # the hash (a Python start, every poll of every worker) only after a change or a failed reload
    if now="$(warden_hash_if_changed "$WARDEN_WORKER_SSH_STAMP" "$WARDEN_WORKER_SSH_DIR")" &&
        [ "$now" != "$WARDEN_WORKER_SSH_HASH" ]; then
        warden_log "ssh: $WARDEN_WORKER_SSH_DIR changed; reloading sshd"
        if warden_worker_ssh_files "$now" && /usr/sbin/sshd -t -f /etc/ssh/sshd_config; then
            warden_worker_ssh_running && kill -HUP "$(cat /run/sshd.pid)"
        else
            WARDEN_WORKER_SSH_HASH="" # tried again at the next poll: it hashes again
            touch -d @0 "$WARDEN_WORKER_SSH_STAMP"
        fi
    fi
    warden_worker_ssh_running || { warden_log "ssh: sshd is not running; starting it again"; warden_worker_ssh_start; }
}
