#!/usr/bin/env bash
# Run the test suite (all of tests/, or the paths and pytest options given). Exit non-zero when any
# test fails or none ran.
# The store's tests also run against a real PostgreSQL server: unless COMMLENS_TEST_PG_URL is set
# already, scripts/test-postgres.sh installs PostgreSQL if missing, starts a private server (or
# reuses the one it started before) and gives its URL. If that fails, the PostgreSQL tests fail.
set -uo pipefail
VENV=${VENV:-.venv}
if [ -z "${COMMLENS_TEST_PG_URL:-}" ]; then
  if pg_env=$(bash "$(dirname "$0")/test-postgres.sh"); then
    eval "$pg_env"
    export COMMLENS_TEST_PG_URL
  else
    echo "error: PostgreSQL could not be started: the store's PostgreSQL tests will fail" >&2
  fi
fi
# The monitor's tests start Debian's prometheus server and run its promtool (tests/prometheus_server.py);
# install the package when either is missing (as root), and make a missing one fail those tests, not skip them.
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "test: installing Debian's prometheus (apt-get install prometheus)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >&2 \
      || echo "error: prometheus could not be installed: the monitor's Prometheus tests will fail" >&2
  else
    echo "error: prometheus is not installed and this is not root: the monitor's Prometheus tests will fail" >&2
  fi
fi
# The dashboard's browser tests (tests/browser.py) drive Debian's chromium through its chromedriver; install
# them when missing (as root), and make a missing one fail those tests, not skip them.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "test: installing Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >&2 \
      || echo "error: chromium could not be installed: the dashboard's browser tests will fail" >&2
  else
    echo "error: chromium or chromedriver is not installed and this is not root: the dashboard's browser tests will fail" >&2
  fi
fi
"$VENV/bin/python" -m pytest -q --durations=30 "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "error: no tests were collected" >&2
  exit 1
fi
exit "$rc"
