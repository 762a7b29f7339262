#!/usr/bin/env bash
# `make run`: the whole system on this machine, in the foreground. Ctrl-C stops everything it started.
#
# - MariaDB: started (and installed) unless DB_DSN points at another server; stopped again on exit
#   if this script started it (KEEP_DB=true leaves it running).
# - SQS: a local goaws (bin/sqslocal) on 127.0.0.1:${SQSLOCAL_PORT:-4100}, unless AWS_ENDPOINT_URL_SQS or
#   AWS_ENDPOINT_URL already points somewhere (LocalStack, AWS). If that port is taken (another
#   `make run`), it refuses to start: two runners on one queue would take each other's messages.
# - S3: a local gofakes3 (bin/s3local) on 127.0.0.1:${S3LOCAL_PORT:-4200}, keeping its objects in
#   ${S3LOCAL_DIR:-build/s3local} (the archived history must outlive a restart: the database no longer
#   holds it), with the bucket HISTORY_BUCKET (default "history"), unless AWS_ENDPOINT_URL_S3 or
#   AWS_ENDPOINT_URL already points somewhere. HISTORY_BUCKET= (empty) runs with no archive.
# - bin/local: the API on HTTP_ADDR (default 127.0.0.1:8080), the processor behind a local event source
#   mapping, and the sweeper as an agent (README, "Agents"; `make agent` adds standalone ones).
#
# A second `make run` beside the first needs its own ports:
# HTTP_ADDR=127.0.0.1:8082 METRICS_ADDR=127.0.0.1:9465 SQSLOCAL_PORT=4101 S3LOCAL_PORT=4201
# S3LOCAL_DIR=build/s3local-2 (and DB_NAME=<name> for a database of its own).
# Ctrl-C exits 0 once everything stopped cleanly.
# LOCAL_BIN, SQSLOCAL_BIN and S3LOCAL_BIN name other builds of bin/local, bin/sqslocal and
# bin/s3local (the tests' own).
set -euo pipefail
cd "$(dirname "$0")/.."

# KEEP_DB is a true/false as every other (docs/configuration.md): unset, false or 0 stop the MariaDB
# this script started; true or 1 leave it running (the spellings Go's strconv.ParseBool reads, as
# the Go settings do); anything else, empty included, stops the run
# before it starts anything (KEEP_DB=0 used to keep it: set was enough).
keep_db=""
if [ -n "${KEEP_DB+set}" ]; then
  case "$KEEP_DB" in
    1|t|T|true|TRUE|True) keep_db=1 ;;
    0|f|F|false|FALSE|False) ;;
    *) echo "run: KEEP_DB must be true or false (or 1 or 0), got \"$KEEP_DB\"" >&2; exit 2 ;;
  esac
fi

pids=()          # every process this script started, stopped on exit
local_pid=""     # bin/local's
started_db=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ -n "$started_db" ] && [ -z "$keep_db" ]; then scripts/mariadb.sh stop || true; fi
  echo "run: stopped" >&2
  exit "$rc"
}
# Ctrl-C: the terminal sends SIGINT to make, to this script and to everything it started. Once the
# runner has stopped, a clean stop is a success (exit 0, so make does not report "Error 130"); a
# signal before the runner started, or a runner that fails to stop, is not.
on_signal() {
  trap - INT TERM
  local rc=130
  if [ -n "$local_pid" ]; then
    kill -TERM "$local_pid" 2>/dev/null || true # already signalled by a Ctrl-C, not by a plain kill
    rc=0
    wait "$local_pid" || rc=$?
  fi
  exit "$rc"
}
trap cleanup EXIT
trap on_signal INT TERM

if [ -z "${DB_DSN:-}" ] && ! scripts/mariadb.sh running; then started_db=1; fi
scripts/mariadb.sh ensure

export AWS_REGION="${AWS_REGION:-us-east-1}"
if [ -z "${AWS_ENDPOINT_URL_SQS:-}" ] && [ -z "${AWS_ENDPOINT_URL:-}" ]; then
  port="${SQSLOCAL_PORT:-4100}"
  # The endpoint this run uses must be the one it started. If the port is taken, by the sqslocal of
  # another `make run` say, a check that something answers on it would pass, and the two runners
  # would share one queue. sqslocal prints its first line once it holds the port, and exits if it
  # cannot bind: so this reads that line from the process it started, rather than probing the port
  # (internal/localsqs waits for the same line).
  # Ctrl-C sends SIGINT to every process of the group, sqslocal too: it ignores it (-ignore-interrupt)
  # and is stopped by cleanup, after bin/local has deleted the messages of its last batches.
  exec {sqslocal_out}< <(exec "${SQSLOCAL_BIN:-bin/sqslocal}" -addr "127.0.0.1:${port}" -ignore-interrupt)
  pids+=($!)
  line=""
  read -r -t 30 -u "$sqslocal_out" line || true
  if [ "$line" != "sqslocal listening on http://127.0.0.1:${port}" ]; then
    echo "run: the local SQS endpoint (bin/sqslocal) did not start on 127.0.0.1:${port} (SQSLOCAL_PORT; its" \
      "error is above). If the port is taken, by another \`make run\` perhaps, this run must not share its" \
      "queue: stop that one, or give this run its own ports:" \
      "HTTP_ADDR=127.0.0.1:8082 METRICS_ADDR=127.0.0.1:9465 SQSLOCAL_PORT=$((port + 1))" \
      "S3LOCAL_PORT=$((${S3LOCAL_PORT:-4200} + 1)) S3LOCAL_DIR=build/s3local-2 make run" \
      "(and DB_NAME=<name> for a database of its own; docs/configuration.md, \"Only for make run\")" >&2
    exit 1
  fi
  echo "$line"
  export AWS_ENDPOINT_URL_SQS="http://127.0.0.1:${port}"
  # goaws does not check signatures, but the SDK wants credentials to sign with.
  export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-local}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
fi

# The archive of the packed history (docs/design.md, "The archive"): a local S3 endpoint and its bucket,
# read and written through the AWS SDK's S3 client as in AWS. Started like the local SQS above, for
# the same reasons; its objects are kept in files, so that the archived history survives a restart.
if [ -z "${AWS_ENDPOINT_URL_S3:-}" ] && [ -z "${AWS_ENDPOINT_URL:-}" ] && [ -n "${HISTORY_BUCKET-history}" ]; then
  export HISTORY_BUCKET="${HISTORY_BUCKET-history}"
  s3port="${S3LOCAL_PORT:-4200}"
  s3dir="${S3LOCAL_DIR:-build/s3local}"
  mkdir -p "$s3dir"
  exec {s3local_out}< <(exec "${S3LOCAL_BIN:-bin/s3local}" -addr "127.0.0.1:${s3port}" -dir "$s3dir" \
    -bucket "$HISTORY_BUCKET" -ignore-interrupt)
  pids+=($!)
  line=""
  read -r -t 30 -u "$s3local_out" line || true
  if [ "$line" != "s3local listening on http://127.0.0.1:${s3port}" ]; then
    echo "run: the local S3 endpoint (bin/s3local) did not start on 127.0.0.1:${s3port} (S3LOCAL_PORT; its" \
      "error is above). If another \`make run\` holds the port, give this run its own:" \
      "S3LOCAL_PORT=$((s3port + 1)) S3LOCAL_DIR=build/s3local-2" >&2
    exit 1
  fi
  echo "$line (bucket ${HISTORY_BUCKET}, files in ${s3dir})"
  export AWS_ENDPOINT_URL_S3="http://127.0.0.1:${s3port}"
  export AWS_ACCESS_KEY_ID="${AWS_ACCESS_KEY_ID:-local}" AWS_SECRET_ACCESS_KEY="${AWS_SECRET_ACCESS_KEY:-local}"
fi

# Tasks (README, "Tasks and webhooks"): local receivers listen on loopback, which deliveries refuse by
# default (no server-side request forgery); a local run allows it, and signs with a fixed development
# secret unless WEBHOOK_SECRET is set. Neither belongs in a deployment.
if [ -z "${WEBHOOK_SECRET:-}" ] && [ -z "${WEBHOOK_SECRET_ARN:-}" ]; then
  export WEBHOOK_SECRET="whsec_ZXhhY3RseW9uY2UtbG9jYWwtZGV2ZWxvcG1lbnQtc2VjcmV0"
  echo "run: tasks are signed with the development secret WEBHOOK_SECRET=${WEBHOOK_SECRET}"
fi
# Only when unset: set to nothing, it is left for the runner to refuse at start, as every true/false
# set to nothing is (docs/configuration.md), where ":-" read it as unset and made it true.
if [ -z "${WEBHOOK_ALLOW_LOOPBACK+set}" ]; then
  export WEBHOOK_ALLOW_LOOPBACK=true
  echo "run: WEBHOOK_ALLOW_LOOPBACK=true: tasks may be delivered to receivers on 127.0.0.0/8 and ::1"
fi

"${LOCAL_BIN:-bin/local}" &
local_pid=$!
pids+=("$local_pid")
wait "$local_pid"
