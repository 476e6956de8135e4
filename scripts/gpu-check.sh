#!/usr/bin/env bash
# One prepared check on a GPU machine (one NVIDIA H200): the facts of the machine, bench over NCCL and over
# gloo on CUDA tensors, the GEMM / HBM calibration of the training projection and its fit, and bench's tests
# on that machine's torch. Run from anywhere; results go to $OUT:
#
#   OUT=/path/to/results bash scripts/gpu-check.sh
#
# Needs python3 with torch (CUDA), numpy, scipy, pyyaml, typer, rich, matplotlib; the rest comes from
# .gpuwheels/ (scripts/gpu-wheels.sh), installed into a throw-away venv that also sees $PY's packages
# (only wheels the machine lacks or has older). commlens runs from src/ (PYTHONPATH), not installed.
# Every step has a timeout and a failure does not stop the others; the whole run stops starting steps
# after GPU_CHECK_BUDGET_S (default 340 s). PYTHON (default python3) and GPU_WHEELS (default .gpuwheels)
# choose the interpreter and the wheels. Files in $OUT (at most 7):
#   gpu-check.log                  every step's command, output, exit status and time; a summary at the end
#   bench-nccl-1gpu.json           (b) commlens run, NCCL, 1 rank
#   bench-gloo-cuda-4ranks.json    (c) commlens run, gloo on CUDA tensors, 4 ranks on the one GPU (torchrun)
#   h200-calibration.json          (d) GEMM and streaming-kernel measurements
#   h200-accelerator.yaml          (d) the fitted accelerators entry (--accelerators)
#   h200-fit.json                  (d) the fit with tile throughputs as well, as JSON
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:?set OUT to the folder for the results}
mkdir -p "$OUT"
LOG=$OUT/gpu-check.log
PY=${PYTHON:-python3}
BUDGET=${GPU_CHECK_BUDGET_S:-340}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
START=$SECONDS
SUMMARY=()
: >"$LOG"

step() {  # step NAME TIMEOUT_S COMMAND|FUNCTION ARGS...: run with a timeout, output to the log, never stop the script
  local name=$1 limit=$2
  shift 2
  local left=$((BUDGET - (SECONDS - START)))
  if ((left < 15)); then
    SUMMARY+=("$(printf '%-12s skipped (run budget of %s s spent)' "$name" "$BUDGET")")
    echo "== $name: skipped, budget spent" | tee -a "$LOG"
    return
  fi
  ((limit > left)) && limit=$left
  echo "== $name (timeout ${limit} s) $(date -u +%FT%TZ): $*" | tee -a "$LOG"
  local t0=$SECONDS
  timeout -k 5 "$limit" bash -c '"$@"' "$name" "$@" >>"$LOG" 2>&1  # timeout signals the whole process group
  local rc=$?
  local note="rc $rc"
  ((rc == 124 || rc == 137)) && note="rc $rc (timed out)"
  echo "== $name: $note, $((SECONDS - t0)) s" | tee -a "$LOG"
  SUMMARY+=("$(printf '%-12s %s, %d s' "$name" "$note" $((SECONDS - t0)))")
}

setup() {  # a venv that sees $PY's packages + the missing wheels + `commlens` next to its python (bench tests)
  local vpy=$WORK/venv/bin/python target=""
  if "$PY" -m venv --without-pip "$WORK/venv"; then
    # $PY's site folders after the venv's own (a .pth "import" line, so their own .pth files count): works
    # whether $PY is the system's python or itself a venv, where --system-site-packages would not see it
    "$PY" -c 'import site; print("import site; " + "; ".join(f"site.addsitedir({p!r})" for p in
               [*site.getsitepackages(), site.getusersitepackages()]))' \
      >"$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz-machine-site.pth" || return 1
  else
    echo "no venv: wheels unpacked into $WORK/site instead (bench tests that run \`commlens\` will fail)"
    vpy=$PY target=$WORK/site
    mkdir -p "$target"
  fi
  "$vpy" - "${GPU_WHEELS:-$ROOT/.gpuwheels}" "$target" <<'PYEOF' || return 1
import importlib.metadata as md, importlib.util, pathlib, re, subprocess, sys, sysconfig, zipfile

def key(v):
    try:
        from packaging.version import Version
        return Version(v)
    except Exception:
        return tuple(int(p) if p.isdigit() else 0 for p in re.split(r"[.+-]", v))

wheels = sorted(pathlib.Path(sys.argv[1]).glob("*.whl"))
if not wheels:
    print(f"no wheels in {sys.argv[1]} (run scripts/gpu-wheels.sh and carry .gpuwheels)")
todo = []
for w in wheels:
    name, version = w.name.split("-")[:2]
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        have = None
    if have is None or key(have) < key(version):
        todo.append(w)
    print(f"{name:<20} machine {have or '-':<12} wheel {version:<12} {'install' if w in todo else 'keep'}")
target = sys.argv[2]
if todo and importlib.util.find_spec("pip"):
    sys.exit(subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet",
                             "--disable-pip-version-check", *(["--target", target] if target else []),
                             *map(str, todo)]).returncode)
if todo:  # no pip on this python: a wheel is a zip of the installed tree
    site = target or sysconfig.get_paths()["purelib"]
    for w in todo:
        zipfile.ZipFile(w).extractall(site)
    print(f"no pip: unpacked {len(todo)} wheels into {site}")
PYEOF
  if [ -z "$target" ]; then
    printf '#!/bin/sh\nexec "%s" -m commlens "$@"\n' "$vpy" >"$WORK/venv/bin/commlens"
    chmod +x "$WORK/venv/bin/commlens"
  fi
  PYTHONPATH=$PYTHONPATH${target:+:$target} "$vpy" -c \
    "import pydantic, sqlalchemy, alembic, ruptures, typer, rich, yaml, scipy, torch, commlens.cli; print('imports ok')"
}

facts() {
  command -v nvidia-smi >/dev/null && nvidia-smi
  command -v nvidia-smi >/dev/null && nvidia-smi topo -m
  "$VPY" - <<'PYEOF'
import platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "CUDA", torch.version.cuda,
      "cuda available", torch.cuda.is_available(), "devices", torch.cuda.device_count())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print("device", torch.cuda.get_device_name(0), "SMs", p.multi_processor_count, "memory", p.total_memory,
          "capability", f"{p.major}.{p.minor}")
    print("nccl", torch.cuda.nccl.version(), "gloo", torch.distributed.is_gloo_available())
PYEOF
  nproc
  free -g
}

OPS=all_reduce,all_gather,reduce_scatter,all_to_all,broadcast
calibrate() {  # measure, then fit gemm_efficiency + k_overhead into the accelerators file
  "$VPY" -m commlens project calibrate --out "$OUT/h200-calibration.json" --budget-s 100 \
    -o "$OUT/h200-accelerator.yaml"
}
fit_tiles() {  # the same measurements, tile throughputs fitted too: printed, and as JSON
  "$VPY" -m commlens project calibrate --from "$OUT/h200-calibration.json" --fit gemm_efficiency,k_overhead,tiles &&
    "$VPY" -m commlens project calibrate --from "$OUT/h200-calibration.json" --fit gemm_efficiency,k_overhead,tiles \
      --json >"$OUT/h200-fit.json"
}
bench_nccl() {
  "$VPY" -m commlens bench --backend nccl --device cuda --nproc 1 --op "$OPS" -b 8 -e 1G -f 4 -c 1 \
    --json "$OUT/bench-nccl-1gpu.json"
}
gloo_launch() {  # expected to be refused: the launcher allows no more ranks than GPUs
  "$VPY" -m commlens bench --backend gloo --device cuda --nproc 4 --op "$OPS" -b 8 -e 64M -f 4 -c 1 -q --no-store
}
bench_gloo() {  # torchrun runs the same worker: 4 ranks sharing GPU 0
  "$VPY" -m torch.distributed.run --standalone --nproc-per-node 4 -m commlens.bench --backend gloo --device cuda \
    --op "$OPS" -b 8 -e 64M -f 4 -c 1 --json "$OUT/bench-gloo-cuda-4ranks.json"
}
bench_tests() {  # no -x: every bench test runs (those expecting a machine without CUDA fail here by design)
  cd "$ROOT" && "$VPY" -m pytest tests -v --tb=short -k bench -p no:cacheprovider -o timeout=60
}

export ROOT OUT PY WORK OPS
export -f setup facts calibrate fit_tiles bench_nccl gloo_launch bench_gloo bench_tests
export COMMLENS_DB=$WORK/results.db  # bench stores its runs here; the JSON files carry them out
export PYTHONPATH=$ROOT/src
cd "$WORK" || exit 1

step setup 90 setup
VPY=$WORK/venv/bin/python
if [ ! -x "$VPY" ]; then
  VPY=$PY
  PYTHONPATH=$PYTHONPATH:$WORK/site
fi
export VPY PATH=$WORK/venv/bin:$PATH
step facts 30 facts
step calibrate 160 calibrate
step fit-tiles 45 fit_tiles
step bench-nccl 75 bench_nccl
step gloo-launch 30 gloo_launch
step bench-gloo 60 bench_gloo
step bench-tests 90 bench_tests

{
  echo
  echo "== summary ($((SECONDS - START)) s in all; rc 124/137: timed out)"
  printf '%s\n' "${SUMMARY[@]}"
  ls -l "$OUT"
} | tee -a "$LOG"
