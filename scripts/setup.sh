#!/usr/bin/env bash
# Create the virtual environment and install commlens with its test tools.
# On a machine without an NVIDIA GPU, torch's CPU build (2.13.0) goes in first,
# so the package's torch range is already met and no multi-GB CUDA build is fetched.
set -euo pipefail
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "$VENV/bin/pip" install --quiet "torch>=2.2,<3"
  else
    "$VENV/bin/pip" install --quiet "torch==2.13.0"
  fi
fi
"$VENV/bin/pip" install --quiet -e ".[test]"
"$VENV/bin/commlens" --help >/dev/null
echo "commlens set up in $VENV ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
