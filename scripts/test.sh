#!/usr/bin/env bash
# Run the test suite (all of tests/, or the paths and pytest options given). Exit non-zero when any
# test fails or none ran. It leaves the machine as it found it, whether the tests pass or fail:
#
# - Services run privately and stop at the end: the store's PostgreSQL tests get a server of this run's
#   own (scripts/test-postgres.sh: a fresh data directory under /tmp, a Unix socket in it and no TCP
#   listener, so no port to collide on), stopped and removed on exit (a trap: pass, fail or Ctrl-C).
#   Prometheus and Chromium are started by the tests themselves (tests/prometheus_server.py,
#   tests/browser.py) on free loopback ports with temporary directories, and stopped by them.
# - Temporary files go under a directory of this run's own (TMPDIR for pytest and everything it starts:
#   Chromium's profiles and shared-memory files, torchrun's rendezvous directories, the test servers' logs,
#   pytest's tmp_path), removed on exit: what a tool leaves in its temporary directory does not stay in /tmp.
#   Its name is short (clt.XXXXXX) so that Unix socket paths under it (Ray's) stay within 107 bytes.
# - Missing tools are installed only as root, with apt-get (Debian's postgresql, prometheus, chromium,
#   chromium-driver; the README lists them), and nothing they bring is started or enabled at boot: a
#   policy-rc.d keeps their maintainer scripts from starting services while apt runs, the unit and
#   init-script links the install adds are removed again, and the PostgreSQL cluster the postgresql
#   package creates is dropped.
# - Without root nothing is installed: the tests that need a missing tool (or root itself, the emulated
#   cluster) skip and say why. CI sets COMMLENS_TEST_REQUIRE_{POSTGRES,PROMETHEUS,CHROMIUM}=1
#   (.ci/run), where a missing tool fails those tests instead.
# COMMLENS_TEST_PG_URL set already: that server is used, and none is started.
set -uo pipefail
VENV=${VENV:-.venv}
HERE=$(cd "$(dirname "$0")" && pwd)
PG_DIR=""
OWN_POLICY=""
RUN_TMP=""

cleanup() {
  if [ -n "$PG_DIR" ]; then
    COMMLENS_TEST_PG_DIR=$PG_DIR bash "$HERE/test-postgres.sh" stop || true
    rm -rf "$PG_DIR"
  fi
  if [ -n "$OWN_POLICY" ]; then rm -f "$OWN_POLICY"; fi
  if [ -n "$RUN_TMP" ]; then rm -rf "$RUN_TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Unit and init-script links that start something at boot, one per line.
boot_links() {
  find /etc/systemd/system -path '*.wants/*' 2>/dev/null
  find /etc/rc2.d /etc/rc3.d /etc/rc4.d /etc/rc5.d -name 'S*' 2>/dev/null
}

# apt-get install PACKAGES (root only), starting and enabling nothing; see the header.
install_quietly() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "test: $* not installed and this is not root: the tests that need them skip" >&2
    return 1
  fi
  local links_before clusters_before rc=0 link
  links_before=$(boot_links | sort)
  clusters_before=$(pg_lsclusters -h 2>/dev/null | awk '{print $1"/"$2}' | sort)
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\n# commlens scripts/test.sh: no service starts while it installs packages\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    OWN_POLICY=/usr/sbin/policy-rc.d
  fi
  echo "test: installing $* (apt-get install; no service started or enabled)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2 \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2 || rc=$?
  if [ -n "$OWN_POLICY" ]; then rm -f "$OWN_POLICY"; OWN_POLICY=""; fi
  for link in $(comm -13 <(echo "$links_before") <(boot_links | sort)); do
    echo "test: removing $link (added by the install: nothing of the tests starts at boot)" >&2
    rm -f "$link"
  done
  if command -v pg_lsclusters >/dev/null 2>&1; then
    for cluster in $(comm -13 <(echo "$clusters_before") <(pg_lsclusters -h 2>/dev/null | awk '{print $1"/"$2}' | sort)); do
      echo "test: dropping PostgreSQL cluster $cluster (created by the install; the tests start their own)" >&2
      pg_dropcluster --stop "${cluster%/*}" "${cluster#*/}" >&2 || true
    done
  fi
  return "$rc"
}

missing=()
ls -d /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || missing+=(postgresql)
{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || missing+=(prometheus)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
if [ "${#missing[@]}" -gt 0 ]; then
  install_quietly "${missing[@]}" || echo "test: could not install ${missing[*]}: the tests that need them skip (fail in CI)" >&2
fi

if [ -z "${COMMLENS_TEST_PG_URL:-}" ]; then
  PG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/commlens-test-pg.XXXXXX")
  if pg_env=$(COMMLENS_TEST_PG_DIR=$PG_DIR bash "$HERE/test-postgres.sh"); then
    eval "$pg_env"
    export COMMLENS_TEST_PG_URL
  else
    echo "test: PostgreSQL could not be started: the store's PostgreSQL tests skip (fail in CI)" >&2
  fi
fi

RUN_TMP=$(mktemp -d "${TMPDIR:-/tmp}/clt.XXXXXX")
chmod 711 "$RUN_TMP" # the PostgreSQL a nested run starts (tests/test_test_command.py) runs as postgres: it must reach its directory
export TMPDIR=$RUN_TMP
# One serial pytest run of "$@" (pytest's own arguments); no test collected is a failure.
run_serial() {
  "$VENV/bin/python" -m pytest -q --durations=30 "$@"
  local rc=$?
  if [ "$rc" -eq 5 ]; then
    echo "error: no tests were collected" >&2
    return 1
  fi
  return "$rc"
}

if [ "$#" -gt 0 ]; then
  run_serial "$@"
  exit $?
fi

# The whole suite, in two parts: every test but those marked `alone` on WORKERS pytest-xdist workers (each test
# file kept on one worker), then the `alone` ones one after another with nothing beside them: they judge speeds,
# rates and deadlines that a test running beside them would move (tests/conftest.py lists them and says why).
# WORKERS: COMMLENS_TEST_WORKERS, else the CPUs up to 4 (each test may start several ranks of its own); 1 runs
# the whole suite in one serial part.
WORKERS=${COMMLENS_TEST_WORKERS:-$(nproc)}
if ! [[ "$WORKERS" =~ ^[0-9]+$ ]] || [ "$WORKERS" -lt 1 ]; then
  echo "error: COMMLENS_TEST_WORKERS must be a whole number of at least 1, not '$WORKERS'" >&2
  exit 2
fi
if [ -z "${COMMLENS_TEST_WORKERS:-}" ] && [ "$WORKERS" -gt 4 ]; then WORKERS=4; fi
if [ "$WORKERS" -eq 1 ]; then
  run_serial
  exit $?
fi
echo "test: part 1 of 2, on $WORKERS workers: every test not marked alone" >&2
"$VENV/bin/python" -m pytest -q --durations=20 -n "$WORKERS" --dist loadfile -m "not alone"
rc1=$?
echo "test: part 2 of 2, one at a time: the tests marked alone (they judge speed)" >&2
"$VENV/bin/python" -m pytest -q --durations=10 -m alone
rc2=$?
if [ "$rc1" -eq 5 ] && [ "$rc2" -eq 5 ]; then
  echo "error: no tests were collected" >&2
  exit 1
fi
if [ "$rc1" -ne 0 ] && [ "$rc1" -ne 5 ]; then
  echo "error: part 1 of the tests failed (pytest exit $rc1)" >&2
  exit "$rc1"
fi
if [ "$rc2" -ne 0 ] && [ "$rc2" -ne 5 ]; then
  echo "error: part 2 of the tests failed (pytest exit $rc2)" >&2
  exit "$rc2"
fi
exit 0
