"""Commands that read only files load no store and no heavy statistics (issue 34's start-up).

Each command runs in a fresh interpreter, as a user starts it; the test reads which modules it loaded.
Timing is measured in ``benchmarks/harness_overhead.py --startup``, not here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data" / "regress"
HEAVY = ("sqlalchemy", "scipy", "ruptures", "torch")

PROBE = """
import json, runpy, sys
out, sys.argv = sys.argv[1], ["commlens", *sys.argv[2:]]
try:
    runpy.run_module("commlens", run_name="__main__")
except SystemExit as e:
    code = e.code
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(%r))
open(out, "w").write(json.dumps({"code": code, "heavy": heavy}))
""" % (HEAVY,)


def _loaded(tmp_path: Path, *argv: str) -> dict:
    out = tmp_path / "loaded.json"
    env = {**os.environ, "COMMLENS_DB": str(tmp_path / "no-store-yet" / "results.db")}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(out), *argv], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.exists(), proc.stderr[-2000:]
    return json.loads(out.read_text())


def test_compare_of_two_files_loads_neither_the_store_nor_scipy(tmp_path: Path) -> None:
    base, cand = DATA / "base-all_reduce.log", DATA / "candidate-all_reduce-10pct-slower.log"
    result = _loaded(tmp_path, "compare", f"file:{base}", f"file:{cand}")
    assert result == {"code": 0, "heavy": []}
    assert not (tmp_path / "no-store-yet").exists()  # and creates no store


def test_listing_runs_before_any_store_exists_loads_no_sqlalchemy(tmp_path: Path) -> None:
    assert _loaded(tmp_path, "runs") == {"code": 0, "heavy": []}
