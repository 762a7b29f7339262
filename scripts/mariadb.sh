#!/usr/bin/env bash
# Ensures a MariaDB server is installed, running and has the project's user, idempotently.
#
#   scripts/mariadb.sh ensure   install if missing, start if stopped, create the user; prints the DSN
#   scripts/mariadb.sh stop     stop the server if this script can find it running
#   scripts/mariadb.sh running  exit 0 if a local server answers
#   scripts/mariadb.sh drop-test-databases
#                               drop the tests' pool of migrated databases (tdb_*) that no test holds
#
# It does nothing when DB_DSN points elsewhere than 127.0.0.1/localhost: then the database is the user's.
# Environment: DB_USER_LOCAL / DB_PASSWORD_LOCAL (default exactlyonce / exactlyonce).
set -euo pipefail

user="${DB_USER_LOCAL:-exactlyonce}"
password="${DB_PASSWORD_LOCAL:-exactlyonce}"
socket=/run/mysqld/mysqld.sock

log() { echo "mariadb: $*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# InnoDB sizes. The Debian package's defaults (a 128 MiB buffer pool, a 96 MiB redo log) are sized
# for a small shared host: under the write rates the tests and `make bench` reach, the redo log
# fills and InnoDB spends the run flushing pages to make room (measured: the checkpoint age pinned at
# about 68 MiB of 96 MiB for the whole async benchmark, with writers throttled behind it). Aurora
# has no such local redo log and gives its buffer pool about three quarters of the instance's
# memory, so these sizes make the local server a closer stand-in. Override with MARIADB_BUFFER_POOL
# and MARIADB_REDO_LOG (bytes; suffixes such as 512M are accepted on start only).
buffer_pool="${MARIADB_BUFFER_POOL:-1073741824}"
redo_log="${MARIADB_REDO_LOG:-1073741824}"

installed() { command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; }

answering() { as_root mariadb --protocol=socket -S "$socket" -uroot -e 'select 1' >/dev/null 2>&1; }

install() {
  log "installing mariadb-server with apt (about 20 s)"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server mariadb-client >/dev/null
}

start() {
  log "starting mariadbd"
  as_root mkdir -p /run/mysqld
  as_root chown mysql:mysql /run/mysqld
  # Its own temporary directory: internal temporary tables (information_schema queries) live there,
  # and nothing else on the machine should be able to delete them from under the server.
  as_root mkdir -p /var/tmp/mariadb
  as_root chown mysql:mysql /var/tmp/mariadb
  # No systemd here: start the daemon directly. max_connections is raised because tests race
  # many clients; the isolation level is deliberately left at the server default (REPEATABLE READ):
  # the code sets READ COMMITTED per transaction and the tests prove it does not depend on the default.
  as_root start-stop-daemon --start --oknodo --background --chuid mysql \
    --exec /usr/sbin/mariadbd -- --max-connections=1000 --bind-address=127.0.0.1 --tmpdir=/var/tmp/mariadb \
    --innodb-buffer-pool-size="$buffer_pool" --innodb-log-file-size="$redo_log"
  for _ in $(seq 1 120); do
    if answering; then return 0; fi
    sleep 0.25
  done
  log "mariadbd did not answer within 30 s"; exit 1
}

# size_innodb grows a server that was already running (started before this script set the sizes,
# or by someone else) to the sizes above; both settings are dynamic on MariaDB 10.11. It never
# shrinks them. Where a setting is not dynamic (older servers), it says so and goes on: the tests
# pass either way, only the benchmark figures differ.
size_innodb() {
  local var want have
  for var in innodb_buffer_pool_size:"$buffer_pool" innodb_log_file_size:"$redo_log"; do
    want="${var#*:}"; var="${var%%:*}"
    have="$(as_root mariadb --protocol=socket -S "$socket" -uroot -N -e "SELECT @@GLOBAL.$var")"
    if [ "$have" -lt "$want" ] 2>/dev/null; then
      log "raising $var from $have to $want bytes"
      as_root mariadb --protocol=socket -S "$socket" -uroot -e "SET GLOBAL $var = $want" ||
        log "could not change $var on this server; benchmark figures may be lower"
    fi
  done
}

ensure_user() {
  as_root mariadb --protocol=socket -S "$socket" -uroot <<SQL
CREATE USER IF NOT EXISTS '${user}'@'localhost' IDENTIFIED BY '${password}';
CREATE USER IF NOT EXISTS '${user}'@'127.0.0.1' IDENTIFIED BY '${password}';
GRANT ALL PRIVILEGES ON *.* TO '${user}'@'localhost';
GRANT ALL PRIVILEGES ON *.* TO '${user}'@'127.0.0.1';
CREATE DATABASE IF NOT EXISTS exactlyonce;
SQL
}

case "${1:-ensure}" in
  running)
    answering
    ;;
  ensure)
    if [ -n "${DB_DSN:-}" ] && ! echo "$DB_DSN" | grep -Eq '@(tcp\()?(127\.0\.0\.1|localhost)'; then
      log "DB_DSN points at another server; not managing a local one"; exit 0
    fi
    installed || install
    # A server this script starts gets the sizes on its command line; only one already running
    # may need growing.
    if answering; then size_innodb; else start; fi
    ensure_user
    log "ready on 127.0.0.1:3306 (user ${user})"
    ;;
  stop)
    if answering; then
      log "stopping mariadbd"
      as_root mariadb-admin --protocol=socket -S "$socket" -uroot shutdown
    fi
    ;;
  drop-test-databases)
    # The pool (internal/testdb/pool.go) keeps its databases between runs, about 160 MB each; a test
    # holds the named lock exactlyonce.testdb.<database> while it uses one, so those are left alone.
    dbs="$(as_root mariadb --protocol=socket -S "$socket" -uroot -N -e \
      "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE 'tdb\\_%'
         AND IS_USED_LOCK(CONCAT('exactlyonce.testdb.', SCHEMA_NAME)) IS NULL")"
    for db in $dbs; do
      as_root mariadb --protocol=socket -S "$socket" -uroot -e "DROP DATABASE IF EXISTS \`$db\`"
    done
    log "dropped $(echo "$dbs" | grep -c . || true) test databases"
    ;;
  *) echo "usage: $0 [ensure|stop|running|drop-test-databases]" >&2; exit 2 ;;
esac
