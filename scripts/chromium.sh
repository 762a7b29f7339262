#!/usr/bin/env bash
# Ensures Debian's Chromium is installed for the console's browser tests, idempotently.
#
#   scripts/chromium.sh ensure   install chromium with apt if /usr/bin/chromium is missing; prints its version
#
# The browser tests (internal/console/browser) drive it headless through the DevTools protocol
# (chromedp); nothing downloads a browser of its own. CHROMIUM_BIN points the tests at another binary.
set -euo pipefail

log() { echo "chromium: $*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

bin="${CHROMIUM_BIN:-/usr/bin/chromium}"

case "${1:-ensure}" in
  ensure)
    if [ ! -x "$bin" ]; then
      log "installing chromium with apt (about a minute)"
      as_root apt-get update -qq
      as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
    fi
    "$bin" --version >&2
    ;;
  *) echo "usage: $0 ensure" >&2; exit 2 ;;
esac
