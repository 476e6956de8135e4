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
"$VENV/bin/python" -m pytest -q "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "error: no tests were collected" >&2
  exit 1
fi
exit "$rc"
