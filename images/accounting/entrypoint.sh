#!/bin/bash
# slurmdbd in the foreground, logs on stderr. `-V`/`--help` print and exit.
#   /etc/warden/slurmdbd/slurmdbd.conf   without StoragePass (WARDEN_SLURMDBD_CONF to override)
#   /etc/warden/db/password              appended as StoragePass (WARDEN_DB_PASSWORD_FILE)
#   /etc/warden/auth/slurm.key           auth/slurm key
#   /mnt/jail (read-only)                the jail: users resolve through its /etc/passwd, /etc/group
#   WARDEN_SLURMDBD_ARGS                 extra slurmdbd flags
set -euo pipefail
WARDEN_COMPONENT=accounting
# shellcheck source=../slurm-base/warden-lib.sh
. /usr/lib/warden/warden-lib.sh
case "${1:-}" in
    -V | -h | --help)
        # slurmdbd reads its configuration before its options: give it a throwaway one
        t="$(mktemp -d)"
        printf 'StorageType=accounting_storage/mysql\nDbdHost=localhost\n' >"$t/slurmdbd.conf"
        chown slurm:slurm "$t/slurmdbd.conf"
        chmod 0600 "$t/slurmdbd.conf"
        SLURM_CONF="$t/slurm.conf" slurmdbd "$@"
        rc=$?
        rm -rf "$t"
        exit "$rc"
        ;;
esac
warden_passthrough slurmdbd "$@"

conf_in="${WARDEN_SLURMDBD_CONF:-/etc/warden/slurmdbd/slurmdbd.conf}"
pw_file="${WARDEN_DB_PASSWORD_FILE:-/etc/warden/db/password}"
[ -f "$conf_in" ] || warden_die "no $conf_in (ConfigMap <cluster>-slurmdbd-config)"
install -d -m 0755 "$SLURM_ETC"
warden_slurm_key
# accounting users are jail users: slurmdbd maps their names to uids (admin levels, coordinators)
warden_jail_users
# slurmdbd refuses a slurmdbd.conf that others can read: it holds the password
umask 077
{
    grep -v -i '^[[:space:]]*StoragePass[[:space:]]*=' "$conf_in"
    if [ -f "$pw_file" ]; then
        printf 'StoragePass=%s\n' "$(head -n 1 "$pw_file" | tr -d '\r\n')"
    else
        warden_log "warning: no password file at $pw_file"
    fi
} >"$SLURM_ETC/slurmdbd.conf"
chown slurm:slurm "$SLURM_ETC/slurmdbd.conf"
chmod 0600 "$SLURM_ETC/slurmdbd.conf"
umask 022
# slurmdbd runs as SlurmUser and serves auth/slurm (SACK) on /run/slurmdbd/sack.socket
install -d -o slurm -g slurm -m 0755 /run/slurmdbd
warden_log "starting slurmdbd $(slurmdbd -V | awk '{print $2}')"
# shellcheck disable=SC2086
exec slurmdbd -D ${WARDEN_SLURMDBD_ARGS:-} "$@"
