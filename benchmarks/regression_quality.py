#!/usr/bin/env python
"""Issue 3's regression-gate targets: precision, recall, false positives and speed of compare and detect.

Run from the repository root::

    .venv/bin/python benchmarks/regression_quality.py

It writes the section ``## Regression gate quality (issue 3)`` of
``docs/benchmarks.md`` (other sections are left as they are) and prints the
same figures. Everything is synthetic, labelled and seeded (``--seed``), and
judged at the default settings of ``commlens compare`` and ``commlens detect``:

1. **detect**: histories of mean times (one point per run) with a step of
   1-20 % at a random position (at least 20 points from either end), noise CV
   0.5-5 %; flat histories of 100 points with Gaussian noise, single-point
   outliers, bimodal noise and heavy tails; steps under outliers and bimodal
   noise; linear drifts; steps 4-15 points before the end (how late a change is
   seen). A step is found when a change in the right direction is reported
   within +-3 points of it; every other reported change is a false positive.
2. **compare**: A/A pairs and A/B pairs (candidate 5-15 % slower) of runs
   in 5 rounds of 6 iterations, drawn with a per-run offset, a per-round
   offset and per-iteration noise (run-to-run drift as measured on real
   runs), each judged as a one-row compare (``commlens.regress.judge``) with
   and without a noise floor learned from a synthetic A/A history; single-
   round runs; 200-row compares (``compare_runs``), the false-alarm rate of
   a whole gate; pooled tags against one run.
3. **speed**: detect over 1,000 series of 200 points (``detect_history`` on
   store rows: grouping, ordering, detection), and a 200-row compare
   (``compare_runs`` on two runs of 200 measurements x 20 samples).
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parent))
import argparse
import datetime as dt
import math
import platform
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from docsection import write_section  # noqa: E402

from commlens.regress import CompareSettings, DetectSettings, RowSide, compare_runs, detect_history, find_changes, judge
from commlens.results.records import FloorKey, Measurement, MeasurementKey, Run, SystemInfo
from commlens.store.repo import MeasurementRow

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
SECTION = "## Regression gate quality (issue 3)"
DOC_TITLE = "# commlens benchmarks"

CVS = (0.005, 0.01, 0.02, 0.05)
STEPS = (0.01, 0.02, 0.03, 0.05, 0.10, 0.20)
POSITION_TOLERANCE = 3
EDGE = 20  # a step is at least this many points from either end of its history

Noise = Callable[[np.random.Generator, int, float], np.ndarray]


# -- noise models: multiplicative factors around 1 ---------------------------------------------


def gauss(rng: np.random.Generator, n: int, cv: float) -> np.ndarray:
    return 1.0 + rng.normal(0.0, cv, n)


def outliers(rng: np.random.Generator, n: int, cv: float) -> np.ndarray:
    """Gaussian, plus 1-3 single points 20-100 % slow (a preempted iteration, a late rank)."""
    x = gauss(rng, n, cv)
    k = rng.choice(n, size=int(rng.integers(1, 4)), replace=False)
    x[k] *= 1.0 + rng.uniform(0.2, 1.0, k.size)
    return x


def bimodal(rng: np.random.Generator, n: int, cv: float) -> np.ndarray:
    """Two modes 2 CV apart, 30 % of points on the slow one (two ring orders, two NUMA placements)."""
    return 1.0 + rng.normal(0.0, cv / 2.0, n) + np.where(rng.random(n) < 0.3, 2.0 * cv, 0.0)


def heavy(rng: np.random.Generator, n: int, cv: float) -> np.ndarray:
    """Student t with 3 degrees of freedom, scaled by CV: frequent moderate outliers both ways
    (floored at half the level: a run cannot be faster than the hardware allows)."""
    return np.maximum(0.5, 1.0 + cv * rng.standard_t(3, n))


NOISES: dict[str, Noise] = {"gaussian": gauss, "outliers": outliers, "bimodal": bimodal, "heavy tails (t3)": heavy}


# -- detect -----------------------------------------------------------------------------------


@dataclass
class DetectTally:
    series: int = 0
    found: int = 0  # step series where the step was found (right place, right direction)
    false: int = 0  # reported changes that are not the step
    flagged: int = 0  # series with any reported change

    def add(self, changes: list, step_at: int | None, up: bool = True) -> None:
        self.series += 1
        self.flagged += bool(changes)
        hit = None
        if step_at is not None:
            hit = next(
                (c for c in changes if abs(c.index - step_at) <= POSITION_TOLERANCE and c.is_regression == up), None
            )
            self.found += hit is not None
        self.false += sum(1 for c in changes if c is not hit)


def step_series(
    rng: np.random.Generator, n: int, step: float, cv: float, noise: Noise = gauss, at: int | None = None
) -> tuple[np.ndarray, int]:
    at = int(rng.integers(EDGE, n - EDGE + 1)) if at is None else at
    x = 100e-6 * noise(rng, n, cv)
    x[at:] *= 1.0 + step
    return x, at


def run_detect(rng: np.random.Generator, count: int, settings: DetectSettings) -> dict:
    out: dict = {"steps": {}, "flat": {}, "noisy_steps": {}, "drift": {}, "late": {}, "down": {}}
    for n in (100, 200):
        for step in STEPS:
            for cv in CVS:
                t = DetectTally()
                for _ in range(count):
                    x, at = step_series(rng, n, step, cv)
                    t.add(find_changes(x, settings), at)
                out["steps"][(n, step, cv)] = t
    for cv in CVS:
        t = DetectTally()
        for _ in range(count):
            x, at = step_series(rng, 100, -0.05, cv)
            t.add(find_changes(x, settings), at, up=False)
        out["down"][cv] = t
    for name, noise in NOISES.items():
        for cv in CVS:
            t = DetectTally()
            for _ in range(2 * count):
                t.add(find_changes(100e-6 * noise(rng, 100, cv), settings), None)
            out["flat"][(name, cv)] = t
            t = DetectTally()
            for _ in range(count):
                x, at = step_series(rng, 100, 0.05, cv, noise)
                t.add(find_changes(x, settings), at)
            out["noisy_steps"][(name, cv)] = t
    for total in (0.05, 0.10, 0.20):
        t = DetectTally()
        for _ in range(count):
            x = 100e-6 * gauss(rng, 100, 0.02) * np.linspace(1.0, 1.0 + total, 100)
            t.add(find_changes(x, settings), None)
        out["drift"][total] = t
    for after in (4, 5, 6, 8, 10, 15):
        t = DetectTally()
        for _ in range(count):
            x, at = step_series(rng, 100, 0.05, 0.02, at=100 - after)
            t.add(find_changes(x, settings), at)
        out["late"][after] = t
    return out


def _history_rows(rng: np.random.Generator, nseries: int, npoints: int) -> list[MeasurementRow]:
    """Store rows of ``npoints`` runs measuring ``nseries`` keys; every other series has a 5 % step."""
    t0 = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    ops = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"]
    dtypes = ["float32", "float16", "bfloat16", "float64"]
    # 5 ops x 25 sizes x 2 placements x 4 dtypes: up to 1,000 distinct series.
    keys = [
        (ops[s % 5], 1 << (3 + (s // 5) % 25), bool((s // 125) % 2), dtypes[(s // 250) % 4]) for s in range(nseries)
    ]
    levels = np.empty((nseries, npoints))
    for s in range(nseries):
        levels[s] = 100e-6 * gauss(rng, npoints, 0.02)
        if s % 2:
            levels[s, int(rng.integers(EDGE, npoints - EDGE)) :] *= 1.05
    rows = []
    for p in range(npoints):
        when = t0 + dt.timedelta(hours=p)
        for s in range(nseries):
            op, size, in_place, dtype = keys[s]
            redop = "sum" if op in ("all_reduce", "reduce_scatter") else None
            rows.append(
                MeasurementRow(
                    run_id=f"run{p:05d}",
                    started_at=when,
                    revision=f"r{p}",
                    tag="nightly",
                    fingerprint="f" * 16,
                    source="commlens",
                    key=MeasurementKey(op, "builtin", dtype, redop, None, size, in_place),
                    world_size=8,
                    mean_s=float(levels[s, p]),
                    cv=0.02,
                    iterations=20,
                    busbw_bytes_per_s=1e9,
                    samples_s=(),
                )
            )
    return rows


def detect_speed(
    rng: np.random.Generator, settings: DetectSettings, nseries: int = 1000, npoints: int = 200, repeats: int = 3
) -> dict:
    rows = _history_rows(rng, nseries, npoints)
    walls, cpus = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        report = detect_history(rows, settings)
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    assert report.series == nseries, report.series
    return {"nseries": nseries, "npoints": npoints, "walls_s": walls, "cpu_s": cpus, "changes": len(report.changes)}


def engine_speed(rng: np.random.Generator, count: int) -> dict:
    """ruptures' engines on the same 200-point series at the same penalty, before the significance test:
    time per series, share of 5 % steps (2 % CV) with a candidate within +-3 points, candidates per flat series."""
    import math

    import ruptures

    from commlens.regress.stats import robust_noise

    steps = [step_series(rng, 200, 0.05, 0.02) for _ in range(count)]
    flats = [100e-6 * gauss(rng, 200, 0.02) for _ in range(count)]
    engines = {
        'KernelCPD(kernel="linear").predict(pen=...): PELT in C (used)': lambda: ruptures.KernelCPD(
            kernel="linear", min_size=4
        ),
        'Binseg(model="l2")': lambda: ruptures.Binseg(model="l2", min_size=4, jump=1),
        'Pelt(model="l2"): PELT in Python': lambda: ruptures.Pelt(model="l2", min_size=4, jump=1),
    }

    def breaks(make: Callable, x: np.ndarray) -> list[int]:
        y = np.log(x)
        noise = robust_noise(y)
        return [int(b) for b in make().fit(y.reshape(-1, 1)).predict(pen=3.0 * noise * noise * math.log(y.size))][:-1]

    out = {}
    for name, make in engines.items():
        k = count if "Python" not in name else max(2, count // 20)  # the Python PELT is slow
        t = time.perf_counter()
        found = sum(any(abs(b - at) <= POSITION_TOLERANCE for b in breaks(make, x)) for x, at in steps[:k])
        flat_candidates = sum(len(breaks(make, x)) for x in flats[:k])
        out[name] = {
            "series": 2 * k,
            "ms_per_series": (time.perf_counter() - t) / (2 * k) * 1e3,
            "step_found": found / k,
            "flat_candidates": flat_candidates / k,
        }
    return out


# -- compare ----------------------------------------------------------------------------------
#
# A run's rows are drawn as a real machine makes them: a per-run offset (the machine's state for the whole
# run: placement, neighbours, clock), a per-round offset (what changes between rounds of one run), then the
# iterations of each round around that level. Rounds are summarised by their median, as compare does.

ROUNDS = 5
PER_ROUND = 6  # -n 30 split over 5 rounds, the CI command
# (within-round CV, run-to-run sd, round-to-round sd): the cells judged. The measured case on this machine
# (docs/benchmarks.md, real runs) is about 15 % CV within a round, a few % between rounds and runs.
DRIFTS = (
    (0.03, 0.0, 0.01),
    (0.03, 0.02, 0.01),
    (0.03, 0.05, 0.01),
    (0.15, 0.0, 0.03),
    (0.15, 0.03, 0.03),
    (0.15, 0.05, 0.03),
)
CHANGES = (0.05, 0.10, 0.15)


def _rounds(
    rng: np.random.Generator,
    factor: float,
    cv: float,
    run_sd: float,
    round_sd: float,
    rounds: int = ROUNDS,
    per_round: int = PER_ROUND,
) -> tuple[float, ...]:
    """One run's round medians: level x run offset x round offset x iteration noise."""
    level = 100e-6 * factor * math.exp(rng.normal(0.0, run_sd))
    offsets = np.exp(rng.normal(0.0, round_sd, rounds))
    samples = gauss(rng, rounds * per_round, cv).reshape(rounds, per_round)
    return tuple(float(x) for x in level * offsets * np.median(samples, axis=1))


def _learned_floor(rng: np.random.Generator, cv: float, run_sd: float, round_sd: float, runs: int = 8) -> float:
    """What ``noise learn`` finds from an A/A history of ``runs`` runs of this cell."""
    levels = [float(np.mean(np.log(_rounds(rng, 1.0, cv, run_sd, round_sd)))) for _ in range(runs)]
    return float(np.std(levels, ddof=1))


def _side_pairs(
    rng: np.random.Generator, count: int, cell: tuple[float, float, float], change: float, rounds: int = ROUNDS
) -> list[tuple[RowSide, RowSide]]:
    cv, run_sd, round_sd = cell
    per_round = ROUNDS * PER_ROUND // rounds
    return [
        (
            RowSide((_rounds(rng, 1.0, cv, run_sd, round_sd, rounds, per_round),)),
            RowSide((_rounds(rng, 1.0 + change, cv, run_sd, round_sd, rounds, per_round),)),
        )
        for _ in range(count)
    ]


def _verdicts(pairs: list[tuple[RowSide, RowSide]], settings: CompareSettings, floor: float | None = None) -> Counter:
    """Each pair judged alone, as a one-row compare."""
    return Counter(judge([p], settings, [floor])[0].verdict for p in pairs)


def run_compare(rng: np.random.Generator, count: int, settings: CompareSettings) -> dict:
    out: dict = {"aa": {}, "aa_floor": {}, "ab": {}, "ab_floor": {}, "single": {}, "floors": {}}
    for cell in DRIFTS:
        floor = _learned_floor(rng, *cell)
        out["floors"][cell] = floor
        aa = _side_pairs(rng, 3 * count, cell, 0.0)
        out["aa"][cell], out["aa_floor"][cell] = _verdicts(aa, settings), _verdicts(aa, settings, floor)
        for change in CHANGES:
            ab = _side_pairs(rng, count, cell, change)
            out["ab"][(change, cell)] = _verdicts(ab, settings)
            out["ab_floor"][(change, cell)] = _verdicts(ab, settings, floor)
        # One round a run (bench --rounds 1): no spread measured; judged only far beyond a floor.
        one_aa, one_ab = _side_pairs(rng, count, cell, 0.0, rounds=1), _side_pairs(rng, count, cell, 0.5, rounds=1)
        out["single"][cell] = (
            _verdicts(one_aa, settings),
            _verdicts(one_aa, settings, floor),
            _verdicts(one_ab, settings, floor),
        )
    return out


_SYSTEM = SystemInfo(world_size=8, backend="nccl", device="cuda", cpu_model="bench", cpu_cores=64)
_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")


def _rows_run(
    run_id: str,
    factors: np.ndarray,
    cvs: np.ndarray,
    rng: np.random.Generator,
    run_sd: float = 0.02,
    round_sd: float = 0.01,
) -> Run:
    """A run of 200 measurements (5 ops x 20 sizes x 2 placements) in ROUNDS rounds; row i's level is times
    ``factors[i]``, the whole run shifted by one offset, each round by its own."""
    ms = []
    i = 0
    run_offset = math.exp(rng.normal(0.0, run_sd))
    round_offsets = np.exp(rng.normal(0.0, round_sd, ROUNDS))
    for op in _OPS:
        for k in range(20):
            for in_place in (False, True):
                size = 1 << (3 + k)
                level = (10e-6 + size / 20e9) * factors[i] * run_offset
                samples = [level * off * gauss(rng, PER_ROUND, float(cvs[i])) for off in round_offsets]
                ms.append(
                    Measurement(
                        op=op,
                        dtype="float32",
                        size_bytes=size,
                        count=size // 4,
                        in_place=in_place,
                        world_size=8,
                        redop="sum" if op in ("all_reduce", "reduce_scatter") else None,
                        samples_s=tuple(float(x) for x in np.concatenate(samples)),
                        rounds=(PER_ROUND,) * ROUNDS,
                    )
                )
                i += 1
    return Run(run_id=run_id, started_at="2025-01-01T00:00:00Z", system=_SYSTEM, measurements=tuple(ms))


def run_gate(rng: np.random.Generator, compares: int, settings: CompareSettings) -> dict:
    """Whole 200-row compares: false alarms with nothing changed; recall of 10 rows slowed by 10 %."""
    out = {"compares": compares, "alarm": 0, "alarm_floor": 0, "false_rows": 0, "found": 0, "planted": 0, "extra": 0}
    floors = {}
    for _ in range(compares):
        cvs = rng.uniform(0.005, 0.05, 200)
        ones = np.ones(200)
        base, cand = _rows_run("a", ones, cvs, rng), _rows_run("b", ones, cvs, rng)
        if not floors:  # the run-level sd of this generator, as a learned floor would say (2 % run, 1 % round)
            floors = {
                FloorKey(_SYSTEM.fingerprint(), m.key): math.sqrt(0.02**2 + 0.01**2 / ROUNDS) for m in base.measurements
            }
        report = compare_runs([base], [cand], settings)
        regressions = report.count("regression")
        out["alarm"] += regressions > 0
        out["false_rows"] += regressions
        out["alarm_floor"] += compare_runs([base], [cand], settings, floors=floors).has_regression
        slow = ones.copy()
        planted = rng.choice(200, size=10, replace=False)
        slow[planted] = 1.10
        cvs = np.full(200, 0.03)
        report = compare_runs(
            [_rows_run("a", ones, cvs, rng)], [_rows_run("b", slow, cvs, rng)], settings, floors=floors
        )
        keys = _row_keys()
        planted_keys = {keys[j] for j in planted}
        hit = {(r.op, r.size_bytes, r.in_place) for r in report.rows if r.verdict == "regression"}
        out["found"] += len(hit & planted_keys)
        out["extra"] += len(hit - planted_keys)
        out["planted"] += len(planted_keys)
    return out


def _row_keys() -> list[tuple[str, int, bool]]:
    """(op, size, in_place) of each measurement of ``_rows_run``, in its order."""
    return [(op, 1 << (3 + k), in_place) for op in _OPS for k in range(20) for in_place in (False, True)]


def run_pooled(rng: np.random.Generator, count: int, settings: CompareSettings) -> dict:
    """A tag of 7 runs against one run of 5 rounds, nothing changed, run-to-run sd 0-5 %, rounds 1 %."""
    out = {}
    for run_sd in (0.0, 0.02, 0.05):
        plain: Counter = Counter()
        floored: Counter = Counter()
        floor = math.sqrt(run_sd**2 + 0.01**2 / ROUNDS)
        for _ in range(count):
            base = RowSide(tuple(_rounds(rng, 1.0, 0.03, run_sd, 0.01) for _ in range(7)))
            cand = RowSide((_rounds(rng, 1.0, 0.03, run_sd, 0.01),))
            plain[judge([(base, cand)], settings)[0].verdict] += 1
            floored[judge([(base, cand)], settings, [floor])[0].verdict] += 1
        out[run_sd] = (plain, floored)
    return out


def compare_speed(rng: np.random.Generator, settings: CompareSettings, repeats: int = 5) -> dict:
    cvs = rng.uniform(0.005, 0.05, 200)
    base = _rows_run("a", np.ones(200), cvs, rng)
    cand = _rows_run("b", np.ones(200), cvs, rng)
    compare_runs([base], [cand], settings)  # imports, warm caches
    walls, cpus = [], []
    for _ in range(repeats):
        t, c = time.perf_counter(), time.process_time()
        compare_runs([base], [cand], settings)
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return {"rows": 200, "samples": ROUNDS * PER_ROUND, "walls_s": walls, "cpu_s": cpus}


# -- report -----------------------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _cv(cv: float) -> str:
    return f"{100 * cv:g}%"


def _rate(c: Counter, verdict: str) -> float:
    return c[verdict] / max(1, sum(c.values()))


def _median(xs: list[float]) -> float:
    return float(np.median(xs))


def report_lines(
    det: dict,
    cmp: dict,
    gate: dict,
    pooled: dict,
    dspeed: dict,
    cspeed: dict,
    *,
    ns: argparse.Namespace,
    dset: DetectSettings,
    cset: CompareSettings,
    wall_s: float,
) -> list[str]:
    steps, flat = det["steps"], det["flat"]
    # Headline figures.
    target = [steps[(n, 0.05, 0.02)] for n in (100, 200)]
    flat_all = sum(t.flagged for t in flat.values()) / sum(t.series for t in flat.values())
    flat_gauss2 = flat[("gaussian", 0.02)]
    big = [t for (n, step, cv), t in steps.items() if step >= 0.05]
    det_recall = sum(t.found for t in big) / sum(t.series for t in big)
    tp = sum(t.found for t in steps.values()) + sum(t.found for t in det["noisy_steps"].values())
    fp = (
        sum(t.false for t in steps.values())
        + sum(t.false for t in flat.values())
        + sum(t.false for t in det["noisy_steps"].values())
    )
    det_precision = tp / max(1, tp + fp)
    quiet = DRIFTS[0]  # 3 % CV, no run-to-run offset: the old targets' conditions, in rounds
    aa3 = cmp["aa"][quiet]
    ab3 = cmp["ab"][(0.05, quiet)]
    aa_all = sum(cmp["aa_floor"].values(), Counter())
    big_ab = list(cmp["ab_floor"].values())
    cmp_recall = sum(c["regression"] for c in big_ab) / sum(sum(c.values()) for c in big_ab)
    c_tp = sum(c["regression"] for c in big_ab)
    c_fp = sum(c["regression"] for c in cmp["aa_floor"].values())
    cmp_precision = c_tp / max(1, c_tp + c_fp)
    d_wall = _median(dspeed["walls_s"])
    c_wall = _median(cspeed["walls_s"])

    def met(ok: bool) -> str:
        return "yes" if ok else "**no**"

    lines = [
        f"Produced by `.venv/bin/python benchmarks/regression_quality.py{' ' + ' '.join(ns.argv) if ns.argv else ''}` "
        f"(from the repository root), {dt.datetime.now(dt.timezone.utc).isoformat(timespec='seconds')}; "
        f"seed {ns.seed}, {ns.count} series or pairs per cell, total {wall_s:.0f} s.",
        "",
        f"Machine: {ns.cores} cores, {platform.machine()}, Python {platform.python_version()}, numpy "
        f"{np.__version__}; shared and noisy, so speed figures are upper bounds.",
        "",
        f"Defaults judged: detect `min_change={dset.min_change}`, `alpha={dset.alpha}`, `penalty={dset.penalty}`, "
        f"`min_segment={dset.min_segment}`; compare `min_change={cset.min_change}`, `alpha={cset.alpha}`, "
        f"`min_samples={cset.min_samples}`, `statistic={cset.statistic}`, `far_floors={cset.far_floors:g}`. How "
        "they decide: `docs/regress.md`.",
        "",
        "### Targets",
        "",
        "| target | measured | met |",
        "|---|---|---|",
        f"| detect: recall >= 95% for 5% steps at 2% CV, within +-{POSITION_TOLERANCE} points | "
        f"{_pct(target[0].found / target[0].series)} (100 points), {_pct(target[1].found / target[1].series)} "
        f"(200 points) | {met(min(t.found / t.series for t in target) >= 0.95)} |",
        f"| detect: false positives <= 2% of flat series of 100 points | "
        f"{_pct(flat_gauss2.flagged / flat_gauss2.series)} (Gaussian, 2% CV); {_pct(flat_all)} over every flat "
        "kind and CV below | "
        f"{met(flat_all <= 0.02 and flat_gauss2.flagged / flat_gauss2.series <= 0.02)} |",
        f"| compare: >= 99% of A/A ({ROUNDS} rounds of {PER_ROUND}, CV 3%, no run offset) give no regression | "
        f"{_pct(1 - _rate(aa3, 'regression'))} ({aa3['regression']} of {sum(aa3.values())} said regression) | "
        f"{met(1 - _rate(aa3, 'regression') >= 0.99)} |",
        f"| compare: >= 95% of 5% regressions (same noise) caught | {_pct(_rate(ab3, 'regression'))} | "
        f"{met(_rate(ab3, 'regression') >= 0.95)} |",
        f"| detect: 1,000 series of 200 points in < 10 s | {d_wall:.2f} s (median of {len(dspeed['walls_s'])}) | "
        f"{met(d_wall < 10)} |",
        f"| compare: 200 rows well under 1 s | {c_wall * 1e3:.0f} ms (median of {len(cspeed['walls_s'])}) | "
        f"{met(c_wall < 0.5)} |",
        "",
        "### Summary",
        "",
        f"- **detect**: precision {_pct(det_precision)} over every reported change (step, flat and noisy-step "
        f"series); recall {_pct(det_recall)} over steps >= 5% (every CV, 100 and 200 points); false-positive rate "
        f"{_pct(flat_all)} of flat series (every noise kind and CV).",
        f"- **compare** (one-row compares, learned floors, every drift cell): precision {_pct(cmp_precision)}; "
        f"recall {_pct(cmp_recall)} over slowdowns of 5-15%; false-positive rate "
        f"{_pct(_rate(aa_all, 'regression'))} of A/A pairs.",
        f"- **200-row gate** (run-to-run sd 2%, rounds 1%): {gate['alarm']} of {gate['compares']} A/A compares "
        f"(row CVs 0.5-5%) raised any regression on rounds alone ({gate['false_rows']} rows in all), "
        f"{gate['alarm_floor']} with the floor. With 10 of 200 rows slowed 10% (CV 3%, floor): {gate['found']} of "
        f"{gate['planted']} found, {gate['extra']} other rows called regressions.",
        "",
        "### detect: steps (recall within +-3 points; extra = other changes reported)",
        "",
        "| points | step | " + " | ".join(f"CV {_cv(cv)}" for cv in CVS) + " |",
        "|---:|---:|" + "---:|" * len(CVS),
    ]
    for n in (100, 200):
        for step in STEPS:
            cells = [
                f"{_pct(steps[(n, step, cv)].found / steps[(n, step, cv)].series)} (+{steps[(n, step, cv)].false})"
                for cv in CVS
            ]
            lines.append(f"| {n} | {step:.0%} | " + " | ".join(cells) + " |")
    lines.append(
        "| 100 | -5% (faster) | "
        + " | ".join(f"{_pct(det['down'][cv].found / det['down'][cv].series)} (+{det['down'][cv].false})" for cv in CVS)
        + " |"
    )
    lines += [
        "",
        f"Steps of 1-2% are below the {dset.min_change:.0%} minimum change and are not reported by design "
        "(`--min-change 1%` to see them); 3% steps sit on the threshold.",
        "",
        "### detect: flat series of 100 points (share with any change reported) and 5% steps under the same noise",
        "",
        "| noise | "
        + " | ".join(f"flat, CV {_cv(cv)}" for cv in CVS)
        + " | "
        + " | ".join(f"5% step, CV {_cv(cv)}" for cv in CVS)
        + " |",
        "|---|" + "---:|" * (2 * len(CVS)),
    ]
    for name in NOISES:
        cells = [_pct(flat[(name, cv)].flagged / flat[(name, cv)].series) for cv in CVS]
        cells += [
            f"{_pct(det['noisy_steps'][(name, cv)].found / det['noisy_steps'][(name, cv)].series)} "
            f"(+{det['noisy_steps'][(name, cv)].false})"
            for cv in CVS
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Outliers: 1-3 single points 20-100% slow. Bimodal: 30% of points on a second mode 2 CV slower. "
        "Heavy tails: Student t (3 degrees of freedom) scaled by the CV, so its stdev is 1.7 x the CV.",
        "",
        "### detect: drifts and late steps",
        "",
        "| history | share with a change reported |",
        "|---|---:|",
    ]
    for total, t in det["drift"].items():
        lines.append(f"| linear drift of {total:.0%} over 100 points, CV 2% | {_pct(t.flagged / t.series)} |")
    for after, t in det["late"].items():
        lines.append(
            f"| 5% step {after} points before the end of 100, CV 2% (found within +-3) | {_pct(t.found / t.series)} |"
        )
    lines += [
        "",
        "A drift has no single right answer; detect reports it as one or more steps once the level has moved "
        f"by more than {dset.min_change:.0%} between segments. A change needs {dset.min_segment} points at the new "
        "level before it can be reported at all, and is reliably seen about 6 points in.",
        "",
        f"### compare: one-row compares, {ROUNDS} rounds of {PER_ROUND} iterations a side, with run-to-run drift",
        "",
        "Each run drawn as a machine makes it: a per-run offset (sd below), a per-round offset, iterations "
        "around it (within-round CV). `floor`: the noise floor learned from 8 A/A runs of the same cell, as "
        "`commlens noise learn` would. The last cell is close to this machine's real runs (see the real-runs "
        "section).",
        "",
        "| CV, run sd, round sd | learned floor | A/A | A/A, floor | 5% slower, floor | 10% slower | 10%, floor "
        "| 15% slower, floor |",
        "|---|---:|---|---|---|---|---|---|",
    ]

    def verdict_cell(c: Counter) -> str:
        total = sum(c.values())
        parts = [
            f"{v[0].upper()} {100 * c[v] / total:.1f}"
            for v in ("regression", "improvement", "no change", "unknown")
            if c[v]
        ]
        return ", ".join(parts)

    for cell in DRIFTS:
        cv, run_sd, round_sd = cell
        lines.append(
            f"| {_cv(cv)}, {_cv(run_sd)}, {_cv(round_sd)} | {_pct(cmp['floors'][cell])} | "
            f"{verdict_cell(cmp['aa'][cell])} | {verdict_cell(cmp['aa_floor'][cell])} | "
            f"{verdict_cell(cmp['ab_floor'][(0.05, cell)])} | {verdict_cell(cmp['ab'][(0.10, cell)])} | "
            f"{verdict_cell(cmp['ab_floor'][(0.10, cell)])} | {verdict_cell(cmp['ab_floor'][(0.15, cell)])} |"
        )
    lines += [
        "",
        "Cells: % of pairs judged R(egression), I(mprovement), N(o change), U(nknown). Without a floor, a "
        "run-to-run offset the rounds of one run cannot see turns into false regressions; the floor stops "
        'them, at the price of calling small changes on noisy series unknown ("unstable: too noisy"), '
        "never regressions.",
        "",
        f"One round a run (`bench --rounds 1`, {ROUNDS * PER_ROUND} iterations in one loop): A/A without a floor, "
        "A/A with the floor, and a 50% slowdown with the floor:",
        "",
        "| CV, run sd, round sd | A/A | A/A, floor | 50% slower, floor |",
        "|---|---|---|---|",
    ]
    for cell in DRIFTS:
        plain, floored, big = cmp["single"][cell]
        lines.append(
            f"| {_cv(cell[0])}, {_cv(cell[1])}, {_cv(cell[2])} | {verdict_cell(plain)} | "
            f"{verdict_cell(floored)} | {verdict_cell(big)} |"
        )
    lines += [
        "",
        f'A single round is unknown ("run-to-run variation not measured") unless the change is beyond '
        f"{cset.far_floors:g} noise floors.",
        "",
        "### compare: a tag of 7 runs against one run of 5 rounds, nothing changed (CV 3%, rounds 1%)",
        "",
        "| run-to-run sd | verdicts | with the floor |",
        "|---:|---|---|",
    ]
    for sd, (plain, floored) in pooled.items():
        lines.append(f"| {sd:.0%} | {verdict_cell(plain)} | {verdict_cell(floored)} |")
    lines += [
        "",
        "The tag's side is judged on its 7 runs, the single run on its rounds; a run offset the rounds cannot "
        "see is what the floor adds back.",
        "",
        "### Speed",
        "",
        f"- detect: {dspeed['nseries']} series x {dspeed['npoints']} points ({dspeed['nseries'] * dspeed['npoints']:,} "
        f"store rows in memory): wall {', '.join(f'{w:.2f}' for w in dspeed['walls_s'])} s, CPU "
        f"{', '.join(f'{w:.2f}' for w in dspeed['cpu_s'])} s ({d_wall / dspeed['nseries'] * 1e3:.2f} ms a series; "
        f"{dspeed['changes']} changes found, "
        f"{dspeed['nseries'] // 2} planted). Reading the rows from a store is not included.",
        f"- compare: {cspeed['rows']} rows x {cspeed['samples']} samples a side ({ROUNDS} rounds): "
        f"wall {', '.join(f'{w * 1e3:.0f}' for w in cspeed['walls_s'])} ms, CPU "
        f"{', '.join(f'{w * 1e3:.0f}' for w in cspeed['cpu_s'])} ms.",
        "",
        "ruptures' engines on the same series and penalty, candidates before the significance test "
        "(why detect uses `KernelCPD`; see `docs/regress.md`):",
        "",
        "| engine | series | ms a series | 5% steps (2% CV) with a candidate within +-3 | candidates per flat series |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, e in dspeed["engines"].items():
        lines.append(
            f"| `{name}` | {e['series']} | {e['ms_per_series']:.2f} | {_pct(e['step_found'])} | "
            f"{e['flat_candidates']:.2f} |"
        )
    return lines


def _write_section(body: list[str]) -> None:
    write_section(SECTION, body)


def main() -> None:
    import os
    import sys

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=20250501, help="seed of every generated history and pair")
    p.add_argument("--count", type=int, default=200, help="series or pairs per cell")
    p.add_argument("--gate-compares", type=int, default=50, help="200-row compares for the gate figures")
    p.add_argument("--no-write", action="store_true", help="print only; leave docs/benchmarks.md alone")
    ns = p.parse_args()
    ns.argv = sys.argv[1:]
    ns.cores = os.cpu_count()
    dset, cset = DetectSettings(), CompareSettings()
    t0 = time.perf_counter()
    rng = np.random.default_rng(ns.seed)
    print("detect quality ...", flush=True)
    det = run_detect(rng, ns.count, dset)
    print("compare quality ...", flush=True)
    cmp = run_compare(rng, ns.count, cset)
    gate = run_gate(rng, ns.gate_compares, cset)
    pooled = run_pooled(rng, ns.count, cset)
    print("speed ...", flush=True)
    dspeed = detect_speed(rng, dset)
    dspeed["engines"] = engine_speed(rng, 100)
    cspeed = compare_speed(rng, cset)
    body = report_lines(
        det, cmp, gate, pooled, dspeed, cspeed, ns=ns, dset=dset, cset=cset, wall_s=time.perf_counter() - t0
    )
    print()
    print("\n".join(body))
    if not ns.no_write:
        _write_section(body)
        print(f"\nwrote {DOC.relative_to(ROOT)} ({SECTION})")


if __name__ == "__main__":
    main()
