"""A/B comparison of two sets of runs: per row, the ratio of mean times, its CI, a p-value and a verdict.

``compare_runs`` takes plain lists of runs (one run, a pool of runs with a tag,
the runs of a file); the CLI resolves what the user named into those lists.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Literal, Sequence

import numpy as np

from commlens.ops import get_op
from commlens.regress.stats import benjamini_hochberg, bootstrap_ratio_ci_rows, cv, mann_whitney_p_rows
from commlens.results.records import Measurement, Run

__all__ = [
    "CompareError",
    "CompareReport",
    "CompareSettings",
    "ComparisonRow",
    "SideSummary",
    "Judgement",
    "Verdict",
    "compare_runs",
    "judge",
]

Verdict = Literal["regression", "improvement", "no change", "unknown"]
Unit = Literal["samples", "run means"]
RowKey = tuple[str, str, str, str, int, int, bool]

# Above this CV a row that still gets a verdict is flagged "unstable", as pyperf does.
UNSTABLE_CV = 0.10


class CompareError(ValueError):
    """Two sets of runs that cannot be compared (no row in common, an empty side)."""


@dataclass(frozen=True)
class CompareSettings:
    """Thresholds of the verdict and how the confidence interval is computed."""

    min_change: float = 0.03  # smallest relative change of the mean time called a regression (0.03 = 3 %)
    alpha: float = 0.05  # significance level of the Mann-Whitney U test
    min_samples: int = 5  # observations needed on each side for a p-value and a CI
    confidence: float = 0.95  # confidence level of the bootstrap interval of the ratio
    resamples: int = 2000  # bootstrap resamples per row
    seed: int = 0  # seeds the bootstrap resampling

    def __post_init__(self) -> None:
        if not (0.0 <= self.min_change < 1.0):
            raise ValueError(f"min_change must be in [0, 1), got {self.min_change}")
        if not (0.0 < self.alpha < 1.0):
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.min_samples < 2:
            raise ValueError(f"min_samples must be >= 2, got {self.min_samples}")
        if not (0.5 <= self.confidence < 1.0):
            raise ValueError(f"confidence must be in [0.5, 1), got {self.confidence}")
        if self.resamples < 100:
            raise ValueError(f"resamples must be >= 100, got {self.resamples}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")


@dataclass(frozen=True)
class ComparisonRow:
    """One comparable key on both sides; times in seconds, ``ratio`` = candidate / base mean time."""

    op: str
    algo: str
    dtype: str
    redop: str
    root: int
    size_bytes: int
    in_place: bool
    unit: Unit  # what the statistics resample: per-iteration samples, or one mean per run
    base_n: int  # observations (samples or runs) on the base side
    candidate_n: int
    base_runs: int
    candidate_runs: int
    base_mean_s: float
    candidate_mean_s: float
    base_busbw_bytes_per_s: float
    candidate_busbw_bytes_per_s: float
    base_cv: float | None  # of the observations; None when there are fewer than two
    candidate_cv: float | None
    ratio: float
    ci_low: float | None
    ci_high: float | None
    p_value: float | None  # Mann-Whitney U, two-sided
    p_adjusted: float | None  # Benjamini-Hochberg over the rows of this compare
    verdict: Verdict
    reason: str

    @property
    def change(self) -> float:
        """Relative change of the mean time: +0.10 is 10 % slower."""
        return self.ratio - 1.0


@dataclass(frozen=True)
class SideSummary:
    """What one side of a comparison was made of."""

    label: str
    run_ids: tuple[str, ...]
    fingerprints: tuple[str, ...]


@dataclass(frozen=True)
class CompareReport:
    base: SideSummary
    candidate: SideSummary
    settings: CompareSettings
    rows: tuple[ComparisonRow, ...]
    only_in_base: int
    only_in_candidate: int
    warnings: tuple[str, ...] = field(default=())

    def count(self, verdict: Verdict) -> int:
        return sum(1 for r in self.rows if r.verdict == verdict)

    @property
    def geomean_ratio(self) -> float:
        """Geometric mean of the rows' ratios: the typical change, not swayed by one row."""
        return math.exp(sum(math.log(r.ratio) for r in self.rows) / len(self.rows))

    @property
    def has_regression(self) -> bool:
        return any(r.verdict == "regression" for r in self.rows)

    def summary_line(self) -> str:
        return (
            f"{len(self.rows)} rows: {self.count('regression')} regressions, {self.count('improvement')} "
            f"improvements, {self.count('no change')} no change, {self.count('unknown')} unknown; "
            f"geometric mean ratio {self.geomean_ratio:.3f}"
        )


@dataclass(frozen=True)
class Judgement:
    """The statistics and verdict of one pair of samples."""

    ci_low: float | None
    ci_high: float | None
    p_value: float | None  # Mann-Whitney U, two-sided
    p_adjusted: float | None  # Benjamini-Hochberg over the rows judged together
    verdict: Verdict
    reason: str


def judge(
    pairs: Sequence[tuple[np.ndarray, np.ndarray]], settings: CompareSettings = CompareSettings()
) -> list[Judgement]:
    """Verdicts for (base, candidate) samples of times judged together, as the rows of one compare.

    With ``d = min_change``, ``r`` the ratio of means, ``[lo, hi]`` its
    bootstrap CI (each side resampled on its own) and ``q`` the Mann-Whitney
    p-value adjusted by Benjamini-Hochberg over every pair judged together
    (so a 200-row compare is not 200 chances of a false alarm):

    1. unknown, too few samples: a side has fewer than ``min_samples``;
    2. regression: ``r > 1 + d`` and ``q < alpha`` and ``lo > 1``;
    3. improvement: ``r < 1 / (1 + d)`` and ``q < alpha`` and ``hi < 1``
       (the mirror image: swapping base and candidate swaps the two verdicts);
    4. unknown, too noisy: otherwise, when the CI's half-width exceeds ``d``:
       the data cannot resolve a change as small as the threshold asked for;
    5. no change: otherwise (not significant, or smaller than ``d``).

    The bootstrap draws from ``settings.seed`` and the sample counts only, so
    a pair's interval does not depend on which other pairs are judged with it.
    """
    testable = [i for i, (b, c) in enumerate(pairs) if min(b.size, c.size) >= settings.min_samples]
    p_raw: dict[int, float] = {}
    ci: dict[int, tuple[float, float]] = {}
    by_shape: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i in testable:
        by_shape[(pairs[i][0].size, pairs[i][1].size)].append(i)
    for (n_base, n_cand), idx in by_shape.items():
        base = np.stack([pairs[i][0] for i in idx])
        cand = np.stack([pairs[i][1] for i in idx])
        rng = np.random.default_rng([settings.seed, n_base, n_cand])
        lo, hi = bootstrap_ratio_ci_rows(base, cand, resamples=settings.resamples, confidence=settings.confidence,
                                         rng=rng)
        p_raw.update(zip(idx, mann_whitney_p_rows(base, cand).tolist()))
        ci.update(zip(idx, zip(lo.tolist(), hi.tolist())))
    p_adj = dict(zip(testable, benjamini_hochberg(np.array([p_raw[i] for i in testable])).tolist()))
    out = []
    for i, (b, c) in enumerate(pairs):
        if i not in p_adj:
            out.append(Judgement(None, None, None, None, "unknown", f"too few samples (n={min(b.size, c.size)})"))
            continue
        lo, hi = ci[i]
        verdict, reason = _verdict(float(c.mean() / b.mean()), lo, hi, p_raw[i], p_adj[i], max(cv(b), cv(c)),
                                   settings, len(testable))
        out.append(Judgement(lo, hi, p_raw[i], p_adj[i], verdict, reason))
    return out


def _verdict(
    ratio: float, lo: float, hi: float, p: float, q: float, noise: float, settings: CompareSettings, rows: int
) -> tuple[Verdict, str]:
    """Steps 2 to 5 of :func:`judge`, with the reason a reader is shown."""
    change = f"{ratio - 1.0:+.1%}"
    unstable = f"; unstable (CV {noise:.0%})" if noise > UNSTABLE_CV else ""
    if ratio > 1.0 + settings.min_change and q < settings.alpha and lo > 1.0:
        return "regression", f"slower {change}{unstable}"
    if ratio < 1.0 / (1.0 + settings.min_change) and q < settings.alpha and hi < 1.0:
        return "improvement", f"faster {change}{unstable}"
    if (hi - lo) / 2.0 > settings.min_change:
        return "unknown", f"too noisy (CV {noise:.0%})"
    if q >= settings.alpha:
        if p < settings.alpha:
            return "no change", f"not significant after adjusting for {rows} rows (adjusted p {q:.2g}){unstable}"
        return "no change", f"not significant{unstable}"
    if lo <= 1.0 <= hi:
        return "no change", f"not significant: the CI includes 1{unstable}"
    return "no change", f"{change}, below the {settings.min_change:.0%} threshold{unstable}"


@dataclass(frozen=True)
class _Side:
    """One key on one side: the measurements of each run that has it."""

    per_run: tuple[tuple[Measurement, ...], ...]
    failed_check: bool = False  # a run's results check failed on this row (see ``_check_failed``)

    @property
    def has_samples(self) -> bool:
        return all(m.has_samples for ms in self.per_run for m in ms)

    def observations(self, unit: Unit) -> np.ndarray:
        if unit == "samples":
            return np.array([s for ms in self.per_run for m in ms for s in m.samples_s])
        return np.array([float(np.mean([m.stats.mean_s for m in ms])) for ms in self.per_run])

    def busbw(self, mean_s: float) -> float:
        m = self.per_run[0][0]
        return get_op(m.op).busbw(m.size_bytes, mean_s, m.world_size)


def compare_runs(
    base: Sequence[Run],
    candidate: Sequence[Run],
    settings: CompareSettings = CompareSettings(),
    *,
    base_label: str = "base",
    candidate_label: str = "candidate",
) -> CompareReport:
    """Compare every row present on both sides; rows of several runs on a side are pooled.

    1. Group each side's measurements by key (op, algo, dtype, redop, root,
       size, in_place); a side with several runs pools them.
    2. Per key, the observations are the per-iteration samples of every run
       (pooled), or, when any run on either side has only reported statistics,
       one mean per run on both sides (fewer than ``min_samples`` runs: unknown).
    3. The ratio is mean(candidate) / mean(base) of those observations; the
       CI, the p-value and the verdict come from :func:`judge`, all rows together.
    """
    if not base or not candidate:
        raise CompareError(f"{base_label if not base else candidate_label}: no runs to compare")
    base_sides, cand_sides = _group(base), _group(candidate)
    keys = sorted(base_sides.keys() & cand_sides.keys(), key=_sort_key)
    if not keys:
        raise CompareError(
            f"{base_label} and {candidate_label} have no row in common "
            "(same op, algo, dtype, redop, root, size and placement)"
        )
    units: list[Unit] = []
    pairs: list[tuple[np.ndarray, np.ndarray]] = []
    blocked: dict[int, str] = {}
    for i, key in enumerate(keys):
        b_side, c_side = base_sides[key], cand_sides[key]
        unit: Unit = "samples" if b_side.has_samples and c_side.has_samples else "run means"
        units.append(unit)
        pairs.append((b_side.observations(unit), c_side.observations(unit)))
        runs = min(len(b_side.per_run), len(c_side.per_run))
        if b_side.failed_check or c_side.failed_check:
            side = "both sides" if b_side.failed_check and c_side.failed_check else (
                base_label if b_side.failed_check else candidate_label)
            blocked[i] = f"results check failed ({side}): wrong results are not timed results"
        elif unit == "run means" and runs < settings.min_samples:
            reason = "no samples: reported statistics only" if runs == 1 else f"too few runs (n={runs})"
            if b_side.has_samples != c_side.has_samples:
                reason += " (candidate)" if b_side.has_samples else " (base)"
            blocked[i] = reason
    testable = [i for i in range(len(keys)) if i not in blocked]
    judged = dict(zip(testable, judge([pairs[i] for i in testable], settings)))
    rows = []
    for i, key in enumerate(keys):
        j = judged.get(i) or Judgement(None, None, None, None, "unknown", blocked[i])
        b, c = pairs[i]
        op, algo, dtype, redop, root, size_bytes, in_place = key
        rows.append(ComparisonRow(
            op=op, algo=algo, dtype=dtype, redop=redop, root=root, size_bytes=size_bytes, in_place=in_place,
            unit=units[i],
            base_n=int(b.size), candidate_n=int(c.size),
            base_runs=len(base_sides[key].per_run), candidate_runs=len(cand_sides[key].per_run),
            base_mean_s=float(b.mean()), candidate_mean_s=float(c.mean()),
            base_busbw_bytes_per_s=base_sides[key].busbw(float(b.mean())),
            candidate_busbw_bytes_per_s=cand_sides[key].busbw(float(c.mean())),
            base_cv=cv(b) if b.size > 1 else None, candidate_cv=cv(c) if c.size > 1 else None,
            ratio=float(c.mean() / b.mean()), ci_low=j.ci_low, ci_high=j.ci_high,
            p_value=j.p_value, p_adjusted=j.p_adjusted, verdict=j.verdict, reason=j.reason,
        ))
    base_summary = _summary(base_label, base)
    cand_summary = _summary(candidate_label, candidate)
    only_base = len(base_sides.keys() - cand_sides.keys())
    only_cand = len(cand_sides.keys() - base_sides.keys())
    return CompareReport(
        base=base_summary,
        candidate=cand_summary,
        settings=settings,
        rows=tuple(rows),
        only_in_base=only_base,
        only_in_candidate=only_cand,
        warnings=tuple(_warnings(base_summary, cand_summary, only_base, only_cand)
                       + _failed_warnings(base_label, base) + _failed_warnings(candidate_label, candidate)),
    )


def _group(runs: Sequence[Run]) -> dict[RowKey, _Side]:
    per_key: dict[RowKey, list[tuple[Measurement, ...]]] = defaultdict(list)
    failed: set[RowKey] = set()
    for run in runs:
        in_run: dict[RowKey, list[Measurement]] = defaultdict(list)
        for m in run.measurements:
            if m.op != "barrier":
                in_run[m.key].append(m)
                if _check_failed(run, m):
                    failed.add(m.key)
        for key, ms in in_run.items():
            per_key[key].append(tuple(ms))
    return {key: _Side(tuple(v), key in failed) for key, v in per_key.items()}


def _failed_warnings(label: str, runs: Sequence[Run]) -> list[str]:
    failed = [r.run_id[:12] for r in runs if r.status == "check_failed"]
    if not failed:
        return []
    return [f"{label}: results check failed in run{'s' if len(failed) > 1 else ''} {', '.join(failed)}: its rows with "
            f"wrong results are not judged (verdict unknown); its other rows are"]


def _check_failed(run: Run, m: Measurement) -> bool:
    """The row's results were wrong: its own #wrong, or a failed run whose check does not say which rows."""
    if m.nwrong:
        return True
    return run.status == "check_failed" and m.nwrong is None


def _sort_key(key: RowKey) -> tuple:
    op, algo, dtype, redop, root, size_bytes, in_place = key
    return (op, algo, dtype, redop, root, in_place, size_bytes)


def _summary(label: str, runs: Sequence[Run]) -> SideSummary:
    return SideSummary(
        label=label,
        run_ids=tuple(r.run_id for r in runs),
        fingerprints=tuple(dict.fromkeys(r.system.fingerprint() for r in runs)),
    )


def _warnings(base: SideSummary, cand: SideSummary, only_base: int, only_cand: int) -> list[str]:
    out = []
    for side in (base, cand):
        if len(side.fingerprints) > 1:
            out.append(f"{side.label} pools runs from {len(side.fingerprints)} different systems "
                       f"(fingerprints {', '.join(side.fingerprints)})")
    if set(base.fingerprints) != set(cand.fingerprints):
        out.append(
            f"base and candidate ran on different systems (fingerprint {', '.join(base.fingerprints)} vs "
            f"{', '.join(cand.fingerprints)}): a difference may come from the system, not the change"
        )
    if only_base or only_cand:
        out.append(f"not compared: {only_base} rows only in base, {only_cand} only in candidate")
    return out
