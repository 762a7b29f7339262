#!/usr/bin/env bash
# `make run`: the whole system on this machine, in the foreground. Ctrl-C stops everything it started.
#
# - MariaDB: started (and installed) unless DB_DSN points at another server; stopped again on exit
#   if this script started it (KEEP_DB=1 leaves it running).
# - SQS: a local goaws (bin/sqslocal) on 127.0.0.1:${SQSLOCAL_PORT:-4100}, unless AWS_ENDPOINT_URL_SQS or
#   AWS_ENDPOINT_URL already points somewhere (LocalStack, AWS).
# - bin/local: the API on HTTP_ADDR (default 127.0.0.1:8080), the processor behind a local event source
#   mapping, and the sweeper every SWEEP_INTERVAL.
set -euo pipefail
cd "$(dirname "$0")/.."

pids=()
started_db=""
cleanup() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ -n "$started_db" ] && [ -z "${KEEP_DB:-}" ]; then scripts/mariadb.sh stop || true; fi
  echo "run: stopped" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "${DB_DSN:-}" ] && ! scripts/mariadb.sh running; then started_db=1; fi
scripts/mariadb.sh ensure

export AWS_REGION="${AWS_REGION:-us-east-1}"
if [ -z "${AWS_ENDPOINT_URL_SQS:-}" ] && [ -z "${AWS_ENDPOINT_URL:-}" ]; then
  port="${SQSLOCAL_PORT:-4100}"
  bin/sqslocal -addr "127.0.0.1:${port}" &
  pids+=($!)
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/${port}") 2>/dev/null; then break; fi
    if ! kill -0 "${pids[-1]}" 2>/dev/null; then echo "run: sqslocal did not start (is port ${port} taken? set SQSLOCAL_PORT)" >&2; exit 1; fi
    sleep 0.1
  done
  export AWS_ENDPOINT_URL_SQS="http://127.0.0.1:${port}"
  # goaws does not check signatures, but the SDK wants credentials to sign with.
  export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-local}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
fi

bin/local &
pids+=($!)
wait "${pids[-1]}"
