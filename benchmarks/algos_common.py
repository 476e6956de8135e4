"""Shared by the algorithm benchmarks (issue 7): running commlens, picking each row's time, formatting."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent / "commlens"
STAT = "p50"  # every figure below uses each row's median iteration time unless it says otherwise


def commlens(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the commlens command; raise with its stderr when it fails."""
    cmd = [str(BIN), *args]
    print("running: commlens " + " ".join(args), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise SystemExit(f"commlens {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def bench(args: list[str], json_path: Path, env: dict[str, str] | None = None) -> Any:
    """``commlens bench ARGS --json PATH`` (not stored), loaded as a Run."""
    from commlens.results import load_run

    commlens("bench", *args, "--json", str(json_path), "--no-store", "-q", env=env)
    return load_run(json_path)


def tune(args: list[str], table: Path, db: Path, replace: bool = False) -> tuple[Any, str]:
    """``commlens tune ARGS -o TABLE --db DB``: the stored sweep run and the command's printed summary."""
    from commlens.store import Store

    proc = commlens("tune", *args, "-o", str(table), "--db", str(db), "-q", *(["--replace"] if replace else []))
    run_id = re.search(r"from run ([0-9a-f]{12})", proc.stdout).group(1)  # type: ignore[union-attr]
    with Store.open(str(db)) as store:
        return store.get_run(run_id), proc.stdout


def merge_runs(runs: list[Any]) -> Any:
    """One run whose every row holds the samples of that row in all ``runs`` (passes of one sweep).

    On a shared machine a burst of other work disturbs a stretch of consecutive rows; the median of the
    pooled samples gives every row several chances at different moments.
    """
    from dataclasses import replace

    samples: dict[tuple, list[float]] = {}
    rounds: dict[tuple, list[int]] = {}  # each pass's rounds, one after another
    for run in runs:
        for m in run.measurements:
            samples.setdefault(m.key, []).extend(m.samples_s)
            rounds.setdefault(m.key, []).extend(m.rounds or (len(m.samples_s),))
    rows = tuple(
        replace(m, samples_s=tuple(samples.pop(m.key)), rounds=tuple(rounds[m.key]), rank_samples_s=None)
        for run in runs
        for m in run.measurements
        if m.key in samples
    )
    return replace(runs[0], run_id="+".join(r.run_id[:12] for r in runs), measurements=rows)


def row_time(m: Any, stat: str = STAT) -> float:
    s = m.stats
    return {"p50": s.p50_s, "mean": s.mean_s, "min": s.min_s}[stat]


def times(run: Any, op: str, stat: str = STAT) -> dict[int, dict[str, Any]]:
    """size -> algo -> measurement, out of place where the op offers it, else in place (as tune picks)."""
    out: dict[int, dict[str, Any]] = {}
    for m in run.measurements:
        if m.op != op or m.size_bytes == 0:
            continue
        slot = out.setdefault(m.size_bytes, {})
        have = slot.get(m.algo)
        if have is None or (have.in_place and not m.in_place):
            slot[m.algo] = m
    return out


def us(seconds: float) -> str:
    v = seconds * 1e6
    return f"{v:.1f}" if v < 1e4 else f"{v:.0f}"


def size_text(n: int) -> str:
    for unit, name in ((1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= unit and n % unit == 0:
            return f"{n // unit} {name}"
    return f"{n} B"


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f} (1 min) / {five:.1f} (5 min)"


def median_ratio_ci(a: Any, b: Any, stat: str = STAT, draws: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """Rows ``a`` over ``b``: the ratio of their times and its 95% bootstrap interval (samples resampled per row).

    Two rows whose interval holds 1.0 cannot be told apart by these samples: neither is the faster one.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    xa, xb = np.asarray(a.samples_s, dtype=float), np.asarray(b.samples_s, dtype=float)
    pick = {"p50": lambda s: np.median(s, axis=1), "mean": lambda s: s.mean(axis=1), "min": lambda s: s.min(axis=1)}
    fa = pick[stat](xa[rng.integers(0, len(xa), (draws, len(xa)))])
    fb = pick[stat](xb[rng.integers(0, len(xb), (draws, len(xb)))])
    lo, hi = np.percentile(fa / fb, [2.5, 97.5])
    return row_time(a, stat) / row_time(b, stat), float(lo), float(hi)
