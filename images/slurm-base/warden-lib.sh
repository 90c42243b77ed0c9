# shellcheck shell=bash
# Shared by the entrypoints of the Slurm images (sourced, installed at /usr/lib/warden/warden-lib.sh).
# Implements the pod contract of docs/architecture.md: read-only inputs under /etc/warden/...,
# working copies under /etc/slurm with the ownership Slurm requires.

WARDEN_CONFIG_DIR="${WARDEN_CONFIG_DIR:-/etc/warden/slurm}"
WARDEN_AUTH_KEY="${WARDEN_AUTH_KEY:-/etc/warden/auth/slurm.key}"
WARDEN_JWT_KEY="${WARDEN_JWT_KEY:-/etc/warden/jwt/jwt_hs256.key}"
WARDEN_JAIL="${WARDEN_JAIL:-/mnt/jail}"
SLURM_ETC="${SLURM_ETC:-/etc/slurm}"
WARDEN_CLIENT_CONFIG="${WARDEN_CLIENT_CONFIG:-/run/warden/slurm-client}"
# warden.node does the file work (operator/warden/node/files.py), in every Slurm image's /opt/warden
WARDEN_NODE_PY="${WARDEN_NODE_PY:-/opt/warden/bin/python -I}"

warden_log() { printf '[%s] %s\n' "${WARDEN_COMPONENT:-warden}" "$*" >&2; }
warden_die() { warden_log "error: $*"; exit 1; }
# Why a mount fails in a login or worker container, and what fixes it (said by whatever stops on it)
WARDEN_MOUNT_REFUSED="mount needs CAP_SYS_ADMIN in the container and, on a node with AppArmor, a profile that \
allows it: the runtime's default one does not (load Warden's profiles and set spec.security.appArmorProfile: \
Warden, or set it to Unconfined; docs/nodes.md, \"AppArmor\")"

# `warden-node SUBCOMMAND ARGS...` with this file's settings and this entrypoint's component for its log
# lines; an error is said as warden_die says it, and the status is 1.
warden_node() {
    # shellcheck disable=SC2086  # WARDEN_NODE_PY: the interpreter and its options
    WARDEN_COMPONENT="${WARDEN_COMPONENT:-warden}" WARDEN_CONFIG_DIR="$WARDEN_CONFIG_DIR" \
        WARDEN_AUTH_KEY="$WARDEN_AUTH_KEY" WARDEN_JWT_KEY="$WARDEN_JWT_KEY" SLURM_ETC="$SLURM_ETC" \
        WARDEN_CLIENT_CONFIG="$WARDEN_CLIENT_CONFIG" $WARDEN_NODE_PY -m warden.node "$@"
}

# slurm.conf and friends (every regular file of the ConfigMap at $WARDEN_CONFIG_DIR), then the auth/slurm
# key, into $SLURM_ETC, owned by SlurmUser; the key mode 0600 (slurmctld, slurmd, sackd and slurmdbd refuse
# a key others can read). Its options make an entrypoint's first steps one Python start: --jwt-key, then
# auth/jwt's HS256 key for slurmctld when slurm.conf asks for auth/jwt;
# --print-hash=DIR..., print warden_dirs_hash DIR... taken before copying.
#   warden_slurm_config [--jwt-key] [--print-hash=DIR]...
warden_slurm_config() { warden_node config "$@"; }
# the auth/slurm key alone
warden_slurm_key() { warden_node key; }

# The populate Job writes this file last: the jail volume holds a complete jail once it exists.
WARDEN_JAIL_SENTINEL="${WARDEN_JAIL_SENTINEL:-.warden-populated}"
warden_jail_populated() { [ -f "$WARDEN_JAIL/$WARDEN_JAIL_SENTINEL" ]; }

# Users live in the jail's /etc/passwd, /etc/group, /etc/shadow (see jail/warden-useradd), and in a
# directory when spec.identity.ldap names one (warden_start_sssd, below).
# libnss-extrausers reads /var/lib/extrausers/{passwd,group,shadow} afresh at every lookup: point them
# at the jail's files BY PATH (symbolic links), so sshd, slurmctld, slurmd and slurmdbd see the jail as
# it is at each lookup: users and groups created at any time (useradd replaces those files by rename,
# which a bind mount of the old inode would never see), and a jail populated after this container
# started (until then the links dangle: jail users do not resolve, the image's own users still do).
# No daemon caches users except slurmctld's group lists (GroupUpdateTime in slurm.conf).
warden_jail_users() {
    local f
    install -d -m 0755 /var/lib/extrausers
    for f in passwd group shadow; do
        ln -sfn "$WARDEN_JAIL/etc/$f" "/var/lib/extrausers/$f"
    done
    if warden_jail_populated; then
        warden_log "users: resolving jail users through $WARDEN_JAIL/etc/{passwd,group,shadow}"
    else
        warden_log "users: the jail is not populated yet; its users resolve through $WARDEN_JAIL/etc/{passwd,group,shadow} as soon as the populate Job has filled it (nothing to restart)"
    fi
    warden_start_sssd
}

# Directory users (spec.identity.ldap; nothing to do without it): SSSD runs in this container from the
# rendered sssd.conf ($WARDEN_IDENTITY_DIR, ConfigMap <cluster>-identity) plus the bind DN and password
# of the bind Secret ($WARDEN_IDENTITY_BIND_DIR: keys bindDN, password), which only this function reads.
# NSS (passwd, group: files extrausers sss), slurmctld, slurmd and sshd's AuthorizedKeysCommand ask it
# through its sockets in /var/lib/sss/pipes; warden_jail_binds shows them inside the jail, so job steps
# and SSH sessions resolve the same users. A poll hook (WARDEN_POLL_HOOKS) starts SSSD again when it
# died, and when the settings or credentials changed. WARDEN_SSSD_EXTRA: more lines for its domain.
WARDEN_IDENTITY_DIR="${WARDEN_IDENTITY_DIR:-/etc/warden/identity}"
WARDEN_IDENTITY_BIND_DIR="${WARDEN_IDENTITY_BIND_DIR:-/etc/warden/identity-bind}"
WARDEN_IDENTITY_CA_DIR="${WARDEN_IDENTITY_CA_DIR:-/etc/warden/identity-ca}"
WARDEN_SSS_PIPES=/var/lib/sss/pipes
# the lowest uid and gid SSSD takes from the directory (operator/warden/render/config.py: SSSD_MIN_ID)
WARDEN_SSSD_MIN_ID=1000
warden_directory() { [ -f "$WARDEN_IDENTITY_DIR/sssd.conf" ]; }

warden_sssd_conf() {
    local tmp
    install -d -m 0711 /etc/sssd
    tmp="$(mktemp /etc/sssd/.sssd.conf.XXXXXX)" || return 1
    {
        # the [domain/...] section is the rendered file's last: what follows belongs to it
        cat "$WARDEN_IDENTITY_DIR/sssd.conf"
        if [ -s "$WARDEN_IDENTITY_BIND_DIR/bindDN" ]; then
            printf 'ldap_default_bind_dn = %s\n' "$(head -n 1 "$WARDEN_IDENTITY_BIND_DIR/bindDN")"
        fi
        if [ -s "$WARDEN_IDENTITY_BIND_DIR/password" ]; then
            printf 'ldap_default_authtok_type = password\nldap_default_authtok = %s\n' \
                "$(head -n 1 "$WARDEN_IDENTITY_BIND_DIR/password")"
        fi
        # no directory entry maps onto a system uid (root, the daemons): a rendered file from an operator that
        # did not say so still gets SSSD's floor, and the extra lines never move it
        grep -q '^min_id = ' "$WARDEN_IDENTITY_DIR/sssd.conf" || printf 'min_id = %s\n' "$WARDEN_SSSD_MIN_ID"
        [ -z "${WARDEN_SSSD_EXTRA:-}" ] ||
            printf '%s\n' "$WARDEN_SSSD_EXTRA" | grep -Eiv '^[[:space:]]*(min_id|max_id|ldap_(user|group)_search_base)[[:space:]]*='
    } >"$tmp" || { rm -f "$tmp"; return 1; }
    chmod 0600 "$tmp" && mv -f "$tmp" /etc/sssd/sssd.conf
}

warden_sssd_run() {
    warden_sssd_conf || { warden_log "users: error: cannot write /etc/sssd/sssd.conf"; return 1; }
    rm -f /run/sssd.pid /var/run/sssd.pid
    # -i: in the foreground of this subshell, its errors on this container's stderr
    sssd -i --logger=stderr &
    sssd_pid=$!
    sssd_inputs="$(warden_dirs_hash "$WARDEN_IDENTITY_DIR" "$WARDEN_IDENTITY_BIND_DIR" "$WARDEN_IDENTITY_CA_DIR")"
    for _ in $(seq 1 100); do
        [ -S "$WARDEN_SSS_PIPES/nss" ] && return 0
        kill -0 "$sssd_pid" 2>/dev/null || { warden_log "users: error: SSSD exited at start"; return 1; }
        sleep 0.1
    done
    warden_log "users: warning: SSSD has not opened $WARDEN_SSS_PIPES/nss after 10 s"
}

warden_start_sssd() {
    warden_directory || return 0
    command -v sssd >/dev/null || warden_die "spec.identity.ldap is set but this image has no sssd"
    warden_sssd_run || warden_die "SSSD did not start (spec.identity.ldap)"
    warden_log "users: directory users through SSSD ($sssd_pid): $(sed -n 's/^ldap_uri = //p' "$WARDEN_IDENTITY_DIR/sssd.conf")"
    sssd_stamp="$(warden_new_stamp)" || warden_die "cannot make a file in ${TMPDIR:-/tmp}"
    WARDEN_POLL_HOOKS="${WARDEN_POLL_HOOKS:-} warden_sssd_keep"
}

# The poll hook of warden_start_sssd (every WARDEN_CONFIG_POLL seconds in every pod of a directory cluster):
# SSSD started again when it is gone, restarted when the directory settings' hash changed. The hash (a
# Python start) is taken at the first poll, then only after a change (warden_hash_if_changed, sssd_stamp).
warden_sssd_keep() {
    local now
    if ! kill -0 "$sssd_pid" 2>/dev/null; then
        warden_log "users: SSSD ($sssd_pid) is gone; starting it again"
    else
        now="$(warden_hash_if_changed "$sssd_stamp" "$WARDEN_IDENTITY_DIR" "$WARDEN_IDENTITY_BIND_DIR" \
            "$WARDEN_IDENTITY_CA_DIR")" || return 0
        [ "$now" != "$sssd_inputs" ] || return 0
        warden_log "users: the directory settings changed; restarting SSSD"
        kill -TERM "$sssd_pid" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$sssd_pid" 2>/dev/null || break; sleep 0.1; done
    fi
    warden_sssd_run && warden_log "users: SSSD running again ($sssd_pid)"
}

# Users see only their own processes (spec.security.hideOtherUsersProcesses; WARDEN_HIDE_PROCESSES=no
# turns it off): this container's /proc is remounted with hidepid=invisible, an option of the procfs
# instance, so the jail's view of it (the login's bind for SSH sessions, the SPANK plugin's for job steps)
# hides the same. Another user's processes are absent from ps and top, and their /proc/PID (command line,
# environment, open files) does not exist for them; root (sshd, slurmd, slurmstepd, SSSD's monitor) sees
# everything. Needs CAP_SYS_ADMIN in the pod's user namespace (the container stops without it); kernels
# before 5.8 take hidepid=2.
warden_hide_processes() {
    case "${WARDEN_HIDE_PROCESSES:-yes}" in
        no | false | 0)
            warden_log "proc: every user sees every process (spec.security.hideOtherUsersProcesses: false)"
            return 0
            ;;
    esac
    if mount -o remount,hidepid=invisible /proc 2>/dev/null || mount -o remount,hidepid=2 /proc 2>/dev/null; then
        warden_log "proc: users see only their own processes (hidepid=invisible)"
    else
        warden_die "cannot remount /proc with hidepid=invisible ($WARDEN_MOUNT_REFUSED), so users would see each" \
            "other's processes; set spec.security.hideOtherUsersProcesses: false to run without"
    fi
}

# Accounting's default account (spec.accounting.defaultAccount): the users named that accounting does not
# know yet get an association in ACCOUNT (made if missing); users an admin put in accounting keep theirs.
# sacctmgr runs as root, which slurmdbd takes as an admin. Fails (to be tried again) when slurmdbd does not
# answer. Used by slurmctld's pod (jail users) and the login nodes' session hook (directory users).
#   warden_associate ACCOUNT USER...
warden_associate() {
    local account="$1" known missing
    shift
    [ "$#" -gt 0 ] || return 0
    known="$(timeout 30 sacctmgr -n -P list users format=user 2>/dev/null | sort -u)" || return 1
    missing="$(comm -23 <(printf '%s\n' "$@" | sort -u) <(printf '%s\n' "$known") | grep -v '^$' | paste -sd, -)" || true
    [ -n "$missing" ] || return 0
    if ! timeout 30 sacctmgr -n -P list accounts format=account 2>/dev/null | grep -qxF "$account"; then
        timeout 30 sacctmgr -i add account "$account" description="jail users" organization=warden \
            >/dev/null 2>&1 || return 1
        warden_log "accounting: made account $account"
    fi
    if ! timeout 30 sacctmgr -i add user name="$missing" account="$account" >/dev/null 2>&1; then
        warden_log "accounting: could not add $missing to account $account; trying again"
        return 1
    fi
    warden_log "accounting: $missing now in account $account"
}

# Make this pod's Slurm client view visible inside the jail, in this container's own mount
# namespace only (needs CAP_SYS_ADMIN; nothing changes on the shared volume):
#   /run/slurm       -> $JAIL/run/slurm        the SACK socket (auth/slurm for users) and configless cache
#   client config    -> $JAIL/etc/slurm        slurm.conf etc. WITHOUT slurm.key
#   /etc/resolv.conf, /etc/hosts, /etc/hostname    this pod's name resolution and identity
#   extra "src:dst" pairs from $1... (e.g. the slurmd spool dir for batch scripts)
# Job steps and chrooted SSH sessions entering the jail inherit these mounts.
# Slurm 24.11 clients (scontrol, srun, sbatch) on a node without slurmd authenticate through a SACK
# socket, never with slurm.key directly: start sackd as SlurmUser in the background and wait for
# /run/slurm/sack.socket. Sets sackd_pid.
warden_start_sackd() {
    install -d -o slurm -g slurm -m 0755 /run/slurm
    # shellcheck disable=SC2086
    setpriv --reuid slurm --regid slurm --init-groups sackd -D ${WARDEN_SACKD_ARGS:-} &
    sackd_pid=$!
    for _ in $(seq 1 50); do
        [ -S /run/slurm/sack.socket ] && return 0
        kill -0 "$sackd_pid" 2>/dev/null || warden_die "sackd exited"
        sleep 0.1
    done
    warden_die "sackd did not create /run/slurm/sack.socket"
}

# The client configuration the jail sees at /etc/slurm: $SLURM_ETC without its secrets (the auth/slurm
# key, the auth/jwt key, slurmdbd.conf), in $WARDEN_CLIENT_CONFIG.
warden_client_config() { warden_node client-config; }

# The "src:dst:mode" pairs warden_jail_binds mounted, for warden_jail_rebind.
WARDEN_JAIL_BOUND=()

warden_jail_binds() {
    local client="$WARDEN_CLIENT_CONFIG" pair failed=
    [ -d "$WARDEN_JAIL" ] || { warden_log "jail: $WARDEN_JAIL missing; no bind mounts"; return 0; }
    warden_jail_populated || warden_log "jail: warning: $WARDEN_JAIL is not populated yet"
    # /run/slurm belongs to whoever serves its SACK socket: sackd (SlurmUser) on login nodes; slurmd
    # (root) on workers, where Slurm 26.05's slurmd stops on a /run/slurm owned by anyone else
    install -d -m 0755 /run/slurm
    chown "${WARDEN_RUN_SLURM_OWNER:-slurm}:${WARDEN_RUN_SLURM_OWNER:-slurm}" /run/slurm
    warden_client_config
    # the pod's name resolution (cluster DNS, search domains, /etc/hosts) applies inside the jail too
    local sss=()
    # directory users: SSSD's sockets (and its read-only memory cache) for the jail's libnss-sss
    warden_directory && sss=("$WARDEN_SSS_PIPES:$WARDEN_SSS_PIPES:rw" "/var/lib/sss/mc:/var/lib/sss/mc:ro")
    for pair in "$client:/etc/slurm:ro" "/run/slurm:/run/slurm:rw" \
        "/etc/resolv.conf:/etc/resolv.conf:ro" "/etc/hosts:/etc/hosts:ro" "/etc/hostname:/etc/hostname:ro" \
        ${sss[@]+"${sss[@]}"} "$@"; do
        if warden_jail_bind "$pair" bound; then WARDEN_JAIL_BOUND+=("$pair"); else failed=1; fi
    done
    return "${failed:-0}"
}

# What a pod says when the jail's binds fail, and stops on (it never goes Ready without them: sessions and
# steps would see no Slurm config, no DNS, no /proc).
# shellcheck disable=SC2034  # used by the entrypoints that source this file
WARDEN_BIND_DENIED="the jail's bind mounts were refused: $WARDEN_MOUNT_REFUSED"

# One "src:dst:mode" bind of this pod's file or directory src at $WARDEN_JAIL/dst (this container's
# mount namespace only); nothing to do when dst is a mount point already. $2: the verb for the log.
warden_jail_bind() {
    local src dst mode
    IFS=: read -r src dst mode <<<"$1"
    if [ -f "$src" ]; then
        [ -e "$WARDEN_JAIL$dst" ] || touch "$WARDEN_JAIL$dst" 2>/dev/null || true
    elif [ -e "$src" ]; then
        mkdir -p "$WARDEN_JAIL$dst" 2>/dev/null || true
    else
        mkdir -p "$src" "$WARDEN_JAIL$dst" 2>/dev/null || true
    fi
    mountpoint -q "$WARDEN_JAIL$dst" && return 0
    if mount --bind "$src" "$WARDEN_JAIL$dst"; then
        [ "${mode:-rw}" = ro ] && mount -o remount,bind,ro "$WARDEN_JAIL$dst" || true
        warden_log "jail: $2 $src at $WARDEN_JAIL$dst (${mode:-rw})"
    else
        warden_log "jail: warning: cannot bind $src at $WARDEN_JAIL$dst (needs CAP_SYS_ADMIN); Slurm commands inside the jail will not work"
        return 1
    fi
}

# A bind onto a jail file lives on that file's inode: when anyone replaces the file by rename on the
# shared volume (a populate overwrite, an admin's editor, another node), the kernel drops the mount and
# jobs would see the jail's own /etc/hosts or lose /etc/slurm. Put back whatever went missing.
warden_jail_rebind() {
    [ ${#WARDEN_JAIL_BOUND[@]} -gt 0 ] || return 0
    # the follow loops call this every few seconds: the mount table read once by bash itself, no process
    # started unless a bind went missing (mountinfo's 5th field; a path with a space falls through to
    # warden_jail_bind's own check)
    local pair dst mounted=" " fields
    while read -r -a fields; do mounted+="${fields[4]} "; done </proc/self/mountinfo
    for pair in "${WARDEN_JAIL_BOUND[@]}"; do
        IFS=: read -r _ dst _ <<<"$pair"
        [[ "$mounted" == *" $WARDEN_JAIL$dst "* ]] && continue
        warden_jail_bind "$pair" "bound again (the jail's file was replaced)" || true
    done
}

# A hash of the regular files in the given directories (ConfigMap and Secret volumes: the kubelet swaps
# their ..data link atomically, so one read sees one version).
# shellcheck disable=SC2086  # WARDEN_NODE_PY: the interpreter and its options
warden_dirs_hash() { $WARDEN_NODE_PY -m warden.node.dirhash "$@"; }

# Whether anything in the directories DIR... is newer than the file STAMP or as new: a directory's own
# time (a file added, removed or renamed in; the kubelet's swap of a volume's ..data link), ..data's
# target and each file's. Bash's own tests only, no process started: the follow loops ask every few
# seconds, and only a yes costs the hash.
#   warden_changed_since STAMP DIR...
warden_changed_since() {
    local stamp="$1" d f
    shift
    for d in "$@"; do
        for f in "$d" "$d/..data" "$d"/*; do
            # -ot: also true when f does not exist (an empty directory's unexpanded glob)
            [ "$f" -ot "$stamp" ] || return 0
        done
    done
    return 1
}

# A stamp for warden_hash_if_changed, dated 1970 so that the first look hashes; its path.
warden_new_stamp() {
    local stamp
    stamp="$(mktemp "${TMPDIR:-/tmp}/warden-stamp.XXXXXX")" && touch -d @0 "$stamp" && echo "$stamp"
}

# Print warden_dirs_hash DIR... when anything in DIR... is newer than STAMP (warden_changed_since), touching
# STAMP first (a change while the hash is taken is newer than it); else print nothing and return 1. The
# follow loop and the poll hooks look every few seconds: only a change costs the hash's Python start. Date
# STAMP back (touch -d @0) to have the next look hash again (a reload that failed).
#   warden_hash_if_changed STAMP DIR...
warden_hash_if_changed() {
    local stamp="$1"
    shift
    warden_changed_since "$stamp" "$@" || return 1
    touch "$stamp" && warden_dirs_hash "$@"
}

# Follow edits of mounted ConfigMaps/Secrets without restarting the pod. The operator rewrites them on
# spec changes (a new partition or worker group, extraLines, login keys) and the kubelet updates such
# volumes in place within about a minute. In the background, every WARDEN_CONFIG_POLL seconds
# (default 2), when anything in DIR... is newer than the last look (warden_changed_since), hash DIR...;
# when the hash differs from HASH (taken before the files were first copied), run HOOK; a failing HOOK
# is retried at the next change. Each poll also puts back the jail binds a replaced file took away
# (warden_jail_rebind), then runs the functions named in WARDEN_POLL_HOOKS (space-separated). Sets
# follow_pid.
#   warden_follow HASH HOOK DIR...
warden_follow() {
    local last="$1" hook="$2" stamp
    shift 2
    # the first poll always hashes (a change between HASH and now is not missed)
    stamp="$(warden_new_stamp)" || return 1
    (
        trap - TERM INT
        set +e
        while sleep "${WARDEN_CONFIG_POLL:-2}"; do
            warden_jail_rebind
            for h in ${WARDEN_POLL_HOOKS:-}; do "$h"; done
            now="$(warden_hash_if_changed "$stamp" "$@")" || continue
            [ "$now" = "$last" ] && continue
            warden_log "config: $* changed; reloading"
            if "$hook"; then last="$now"; else touch -d @0 "$stamp"; warden_log "config: reload failed; retrying"; fi
        done
    ) &
    # shellcheck disable=SC2034 # for the entrypoint that sourced this file
    follow_pid=$!
}

# Print the daemon's version/help and exit when the container is run with such an argument, so
# `docker run IMAGE -V` works without any configuration.
warden_passthrough() {
    local daemon="$1"
    shift
    case "${1:-}" in
        -V | --version | -h | --help | --usage) exec "$daemon" "$@" ;;
        '') return 0 ;;
        -*) return 0 ;; # daemon flags: appended by the caller
        *) exec "$@" ;; # any other command (debugging: bash, sh -c ...)
    esac
}

# The Slurm series this pod must run (env WARDEN_SLURM_SERIES, set by the operator from
# spec.slurmVersion and the upgrade's step) against the one the image carries (its slurm-client
# package): a pod never runs a Slurm other than the one the operator counts it as running, so a
# Ready pod's series is its daemon's. Checked whenever an entrypoint sources this file.
warden_slurm_version() { { dpkg-query -W -f '${Version}' slurm-client 2>/dev/null || true; } | sed 's/-[^-]*$//'; }
warden_slurm_series_check() {
    local have want="${WARDEN_SLURM_SERIES:-}"
    have="$(warden_slurm_version)"
    [ -n "$want" ] || return 0
    case "$have" in
        "$want".*) return 0 ;;
    esac
    warden_die "this image carries Slurm ${have:-(none)}, but the cluster runs Slurm $want (WARDEN_SLURM_SERIES):" \
        "give spec.images the $want images (warden/<name>:<version> is 26.05, <version>-slurm24.11 is 24.11)," \
        "or set spec.slurmVersion to the series of these images"
}
warden_slurm_series_check
