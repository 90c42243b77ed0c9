#!/bin/bash
# mariadbd in the foreground, logs on stderr. Creates the data directory on first start; on every
# start makes sure the database and its user exist with the current password (idempotent SQL via
# --init-file, so a rotated Secret takes effect on restart). `--version`/`--help` print and exit.
#   WARDEN_DB_NAME            database (default slurm_acct_db)
#   WARDEN_DB_USER            user (default slurm)
#   WARDEN_DB_PASSWORD_FILE   default /etc/warden/db/password (required)
set -euo pipefail
log() { printf '[mariadb] %s\n' "$*" >&2; }
case "${1:-}" in
    -V | --version | --help) exec mariadbd "$@" ;;
    '' | -*) ;;
    *) exec "$@" ;;
esac

db="${WARDEN_DB_NAME:-slurm_acct_db}"
user="${WARDEN_DB_USER:-slurm}"
pw_file="${WARDEN_DB_PASSWORD_FILE:-/etc/warden/db/password}"
data=/var/lib/mysql
[ -f "$pw_file" ] || { log "error: no password file at $pw_file"; exit 1; }
case "$db$user" in *[!A-Za-z0-9_]*) log "error: database and user names must be [A-Za-z0-9_]"; exit 1 ;; esac
pw="$(head -n 1 "$pw_file" | tr -d '\r\n')"
sql_quote() { printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e "s/'/\\\\'/g"; }

install -d -o mysql -g mysql -m 0755 /run/mysqld
chown mysql:mysql "$data"
if [ ! -d "$data/mysql" ]; then
    log "initialising $data"
    mariadb-install-db --user=mysql --datadir="$data" --skip-test-db --auth-root-authentication-method=socket >/dev/null
fi
init=/run/mysqld/warden-init.sql
umask 077
cat >"$init" <<SQL
CREATE DATABASE IF NOT EXISTS \`$db\`;
CREATE USER IF NOT EXISTS '$user'@'%' IDENTIFIED BY '$(sql_quote "$pw")';
ALTER USER '$user'@'%' IDENTIFIED BY '$(sql_quote "$pw")';
GRANT ALL PRIVILEGES ON \`$db\`.* TO '$user'@'%';
SQL
chown mysql:mysql "$init"
log "starting mariadbd (database $db, user $user)"
exec mariadbd --user=mysql --datadir="$data" --init-file="$init" "$@"
