#!/usr/bin/env bash
# A private PostgreSQL server for the store's tests:
#     eval "$(bash scripts/test-postgres.sh)"     # start (or reuse) it; sets COMMLENS_TEST_PG_URL
#     bash scripts/test-postgres.sh stop          # stop it (its directory is left for the caller to remove)
# The server lives in $COMMLENS_TEST_PG_DIR (default /tmp/commlens-test-pg-$UID): initdb + pg_ctl there, as
# the postgres user when run as root (initdb refuses root). It listens on a Unix socket in that directory
# only (no TCP port to collide with), runs without fsync or autovacuum (test data only). scripts/test.sh
# gives each run a fresh directory and stops the server when the run ends; started by hand, it runs until
# `stop`. It installs nothing: scripts/test.sh installs Debian's postgresql (as root) where it is missing.
# A role and database commlens_test are created; the tests create a fresh database per test through that
# role. Messages go to stderr.
set -euo pipefail

DIR=${COMMLENS_TEST_PG_DIR:-/tmp/commlens-test-pg-$(id -u)}
DATA=$DIR/data
PORT=5432  # names the socket file only: there is no TCP listener
ROLE=commlens_test

log() { echo "test-postgres: $*" >&2; }

find_bindir() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$d" ] && [ -x "$d/initdb" ]; then echo "$d"; return; fi
  if command -v initdb >/dev/null 2>&1; then dirname "$(command -v initdb)"; fi
}

BIN=$(find_bindir)
if [ -z "$BIN" ]; then
  log "PostgreSQL is not installed (no initdb): install Debian's postgresql package (scripts/test.sh does, as root)"
  exit 1
fi

# Run a server command as the server's owner: postgres when we are root, else ourselves.
if [ "$(id -u)" -eq 0 ]; then
  id postgres >/dev/null 2>&1 || { log "no postgres user to run the server as (Debian's postgresql package creates it)"; exit 1; }
  as_owner() { runuser -u postgres -- "$@"; }
else
  as_owner() { "$@"; }
fi

if [ "${1:-}" = stop ]; then
  if [ -s "$DATA/PG_VERSION" ]; then
    as_owner "$BIN/pg_ctl" -D "$DATA" -m fast -w -t 30 stop >/dev/null 2>&1 \
      || as_owner "$BIN/pg_ctl" -D "$DATA" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  exit 0
fi

mkdir -p "$DIR"
if [ "$(id -u)" -eq 0 ]; then chown postgres: "$DIR"; fi
chmod 700 "$DIR"

start() {
  if [ ! -s "$DATA/PG_VERSION" ]; then
    rm -rf "$DATA"
    as_owner "$BIN/initdb" -D "$DATA" -U postgres --auth=trust --no-sync --encoding=UTF8 --locale=C.UTF-8 >"$DIR/initdb.log" 2>&1 \
      || as_owner "$BIN/initdb" -D "$DATA" -U postgres --auth=trust --no-sync --encoding=UTF8 --locale=C >"$DIR/initdb.log" 2>&1 \
      || { log "initdb failed:"; cat "$DIR/initdb.log" >&2; return 1; }
  fi
  # 9>&-: the server must not inherit the lock below, or it would hold it for its lifetime.
  as_owner "$BIN/pg_ctl" -D "$DATA" -l "$DIR/server.log" -w -t 60 start \
    -o "-c listen_addresses='' -c unix_socket_directories='$DIR' -p $PORT -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c autovacuum=off -c max_connections=200" \
    >/dev/null 9>&-
}

(
  # One starter at a time: several test runs may begin together.
  flock 9
  if as_owner "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
    exit 0
  fi
  log "starting PostgreSQL ($("$BIN/postgres" --version)) in $DATA"
  if ! start; then
    # A data directory left by a crashed or foreign server: test data only, so start afresh.
    log "start failed (see $DIR/server.log); re-creating $DATA"
    as_owner "$BIN/pg_ctl" -D "$DATA" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$DATA"
    start || { log "PostgreSQL did not start:"; tail -n 20 "$DIR/server.log" >&2; exit 1; }
  fi
) 9>"$DIR/.lock"

psql_admin() { "$BIN/psql" -X -q -v ON_ERROR_STOP=1 -h "$DIR" -p "$PORT" -U postgres -d postgres "$@"; }
if [ "$(psql_admin -tA -c "SELECT 1 FROM pg_roles WHERE rolname = '$ROLE'")" != 1 ]; then
  psql_admin -c "CREATE ROLE $ROLE LOGIN CREATEDB" 2>/dev/null || true  # a concurrent run may win the race
fi
# DROP DATABASE ... WITH (FORCE) ends other sessions on a test database, which needs this.
psql_admin -c "GRANT pg_signal_backend TO $ROLE" 2>/dev/null
if [ "$(psql_admin -tA -c "SELECT 1 FROM pg_database WHERE datname = '$ROLE'")" != 1 ]; then
  psql_admin -c "CREATE DATABASE $ROLE OWNER $ROLE" 2>/dev/null || true
fi

echo "export COMMLENS_TEST_PG_URL='postgresql+psycopg://$ROLE@/$ROLE?host=$DIR&port=$PORT'"
