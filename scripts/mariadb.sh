#!/usr/bin/env bash
# Ensures a MariaDB server is installed, running and has the project's user, idempotently.
#
#   scripts/mariadb.sh ensure   install if missing, start if stopped, create the user; prints the DSN
#   scripts/mariadb.sh stop     stop the server if this script can find it running
#   scripts/mariadb.sh running  exit 0 if a local server answers
#   scripts/mariadb.sh drop-test-databases
#                               drop the tests' pool of migrated databases (tdb_*) that no test holds,
#                               on both servers
#   scripts/mariadb.sh ensure-test
#                               the tests' own server (below): start it if stopped; prints its DSN
#   scripts/mariadb.sh stop-test
#
# ensure does nothing when DB_DSN points elsewhere than 127.0.0.1:3306: then the database is the user's.
# Environment: DB_USER_LOCAL / DB_PASSWORD_LOCAL (default exactlyonce / exactlyonce).
#
# The tests' server. `make test` runs the tests on a second mariadbd (127.0.0.1:TEST_DB_PORT,
# default 13306) whose data directory is in memory (/dev/shm) when there is room for it: the same
# binary and configuration as the shared server, durable in the same way against a killed process,
# but creating a database's 2,500 partition files and committing cost no disk writes. Measured on
# the 2-core machine: a migration from empty 11 s on disk, 1.6 s in memory. `make run` and
# `make bench` keep the shared server on disk, where their figures are meant to be.
# TEST_DB_DIR overrides where its files go.
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
  # --pidfile: the shared server's own pid file (the Debian configuration's pid-file), so that the
  # tests' mariadbd, the same binary, does not pass for it ("already running") and leave it stopped.
  as_root start-stop-daemon --start --oknodo --background --chuid mysql --pidfile /run/mysqld/mysqld.pid \
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

test_port="${TEST_DB_PORT:-13306}"

# test_dir picks the test server's directory: the one it already has, else memory when /dev/shm has
# room for the tests' databases (about 160 MB each, a few dozen at most), else disk.
test_dir() {
  if [ -n "${TEST_DB_DIR:-}" ]; then echo "$TEST_DB_DIR"; return; fi
  local shm=/dev/shm/exactlyonce-test-db disk=/var/tmp/exactlyonce-test-db avail
  if [ -d "$shm/data/mysql" ]; then echo "$shm"; return; fi
  if [ -d "$disk/data/mysql" ]; then echo "$disk"; return; fi
  avail="$(df -Pk /dev/shm 2>/dev/null | awk 'NR == 2 { print $4 }')"
  if [ "${avail:-0}" -ge $((8 * 1024 * 1024)) ]; then echo "$shm"; else echo "$disk"; fi
}

test_answering() { as_root mariadb --protocol=socket -S "$1/sock" -uroot -e 'select 1' >/dev/null 2>&1; }

# ensure_test starts the test server if it does not answer on its socket (initialising its data
# directory if there is none) and creates the project's user there, with the shared server's rights.
ensure_test() {
  local dir; dir="$(test_dir)"
  if ! test_answering "$dir"; then
    if (exec 3<>"/dev/tcp/127.0.0.1/$test_port") 2>/dev/null; then
      log "port $test_port is taken by another program; set TEST_DB_PORT to a free one"; exit 1
    fi
    as_root mkdir -p "$dir/tmp"
    as_root chown -R mysql:mysql "$dir"
    if [ ! -d "$dir/data/mysql" ]; then
      log "initialising the test server's data directory in $dir"
      local out
      out="$(as_root mariadb-install-db --user=mysql --datadir="$dir/data" --auth-root-authentication-method=normal \
        --skip-test-db 2>&1)" || { echo "$out" >&2; exit 1; }
    fi
    log "starting the test server on 127.0.0.1:$test_port ($dir)"
    # The configuration files are read (utf8mb4, as the shared server); the command line moves the
    # server's files, port and socket. Smaller InnoDB sizes than the shared server's: tests are not
    # benchmarks, and in memory each byte of them is memory.
    as_root setsid /usr/sbin/mariadbd --user=mysql --datadir="$dir/data" --tmpdir="$dir/tmp" \
      --socket="$dir/sock" --pid-file="$dir/pid" --log-error="$dir/error.log" --port="$test_port" \
      --bind-address=127.0.0.1 --max-connections=1000 --innodb-buffer-pool-size=512M \
      --innodb-log-file-size=256M </dev/null >/dev/null 2>&1 &
    local pid=$!
    until test_answering "$dir"; do
      if ! kill -0 "$pid" 2>/dev/null; then
        log "the test server exited at start:"; as_root tail -20 "$dir/error.log" >&2; exit 1
      fi
      sleep 0.2
    done
  fi
  as_root mariadb --protocol=socket -S "$dir/sock" -uroot <<SQL
CREATE USER IF NOT EXISTS '${user}'@'localhost' IDENTIFIED BY '${password}';
CREATE USER IF NOT EXISTS '${user}'@'127.0.0.1' IDENTIFIED BY '${password}';
GRANT ALL PRIVILEGES ON *.* TO '${user}'@'localhost';
GRANT ALL PRIVILEGES ON *.* TO '${user}'@'127.0.0.1';
SQL
  log "test server ready on 127.0.0.1:$test_port ($dir)"
  echo "${user}:${password}@tcp(127.0.0.1:${test_port})/"
}

case "${1:-ensure}" in
  running)
    answering
    ;;
  ensure)
    # Only the server on 127.0.0.1:3306 is this command's: a DB_DSN naming another host or another
    # port (the tests' own server on 13306, say) is left to whoever runs it.
    if [ -n "${DB_DSN:-}" ] && ! echo "$DB_DSN" | grep -Eq '@(tcp\((127\.0\.0\.1|localhost)(:3306)?\))?/'; then
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
    # The pool (internal/testdb/pool.go) keeps its databases between runs, about 160 MB each, on the
    # shared server and on the tests' own; a test holds the named lock exactlyonce.testdb.<database>
    # while it uses one, so those are left alone.
    for sock in "$socket" "$(test_dir)/sock"; do
      [ -S "$sock" ] || continue
      dbs="$(as_root mariadb --protocol=socket -S "$sock" -uroot -N -e \
        "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME LIKE 'tdb\\_%'
           AND IS_USED_LOCK(CONCAT('exactlyonce.testdb.', SCHEMA_NAME)) IS NULL")" || continue
      for db in $dbs; do
        as_root mariadb --protocol=socket -S "$sock" -uroot -e "DROP DATABASE IF EXISTS \`$db\`"
      done
      log "dropped $(echo "$dbs" | grep -c . || true) test databases on the server of $sock"
    done
    ;;
  ensure-test)
    installed || install
    ensure_test
    ;;
  stop-test)
    dir="$(test_dir)"
    if test_answering "$dir"; then
      log "stopping the test server"
      as_root mariadb-admin --protocol=socket -S "$dir/sock" -uroot shutdown
    fi
    ;;
  *) echo "usage: $0 [ensure|stop|running|drop-test-databases|ensure-test|stop-test]" >&2; exit 2 ;;
esac
