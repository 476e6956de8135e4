#!/usr/bin/env bash
# Run the whole test suite. Exit non-zero when any test fails or none ran.
set -uo pipefail
VENV=${VENV:-.venv}
"$VENV/bin/python" -m pytest tests -q "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "error: no tests were collected" >&2
  exit 1
fi
exit "$rc"
