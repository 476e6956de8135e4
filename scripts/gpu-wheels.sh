#!/usr/bin/env bash
# Download into .gpuwheels/ the wheels scripts/gpu-check.sh installs on the GPU machine (CPython 3.12,
# manylinux x86_64, no network there): what commlens imports for bench, project and their tests beyond
# what that machine's python has (torch, numpy, scipy, pyyaml, typer, rich, matplotlib).
#   pydantic stack: specs (topology, workload, project); sqlalchemy + alembic (+ mako): the result store
#   bench writes to; ruptures: regress; psycopg: the PostgreSQL store; pytest stack: the bench tests.
# Versions are this checkout's venv's (the ones tested here); a package it lacks comes at its newest.
# gpu-check.sh installs a wheel only where the machine lacks the package or has an older one.
# Usage: bash scripts/gpu-wheels.sh   (then carry .gpuwheels to the GPU machine)
#   GPU_WHEELS=DIR and GPU_PYTHON_VERSION=3.11 fetch another set (to try gpu-check.sh on this machine).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEST=${GPU_WHEELS:-$ROOT/.gpuwheels}
PYVER=${GPU_PYTHON_VERSION:-3.12}
PY=${PYTHON:-$ROOT/.venv/bin/python}
PACKAGES=(
  pydantic pydantic-core annotated-types typing-inspection typing-extensions
  sqlalchemy greenlet alembic mako markupsafe
  ruptures psycopg psycopg-binary
  pytest pluggy iniconfig packaging pygments pytest-timeout hypothesis sortedcontainers
)
specs=()
for package in "${PACKAGES[@]}"; do
  version=$("$PY" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$package" 2>/dev/null || true)
  specs+=("$package${version:+==$version}")
done
mkdir -p "$DEST"
"$PY" -m pip download --quiet --only-binary=:all: --no-deps --python-version "$PYVER" --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d "$DEST" "${specs[@]}"
mkdir -p "$ROOT/.git/info"
grep -qxF '.gpuwheels/' "$ROOT/.git/info/exclude" 2>/dev/null || echo '.gpuwheels/' >>"$ROOT/.git/info/exclude"
echo "$(ls "$DEST" | wc -l) wheels, $(du -sh "$DEST" | cut -f1) in $DEST:"
ls "$DEST"
