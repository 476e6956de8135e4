"""A/B comparison of two sets of runs, judged on the variation between rounds and runs.

``compare_runs`` takes plain lists of runs (one run, a pool of runs with a tag,
the runs of a file); the CLI resolves what the user named into those lists. The
unit of evidence is a round (``bench --rounds``) or a whole run, never the pool
of one run's iterations: iterations of one run share the machine's state and
say nothing about how much the next run will differ. See ``docs/regress.md``.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Literal

import numpy as np

from commlens.errors import CommlensError
from commlens.ops import get_op
from commlens.regress.stats import benjamini_hochberg
from commlens.results.jsonvalue import JsonObject
from commlens.results.records import FloorKey, Measurement, MeasurementKey, Run, omit_no_group

__all__ = [
    "CompareError",
    "CompareReport",
    "CompareRequest",
    "CompareSettings",
    "CompareSettingsError",
    "ComparisonRow",
    "FloorKey",
    "SideSummary",
    "Judgement",
    "RowSide",
    "RowThreshold",
    "Verdict",
    "compare_runs",
    "judge",
    "row_side",
    "run_compare",
]

Verdict = Literal["regression", "improvement", "no change", "unknown"]
# What a side's spread was measured from: runs (two or more a side), the rounds of one run, one round only
# (no spread measured), or a learned noise floor standing in for it.
Unit = Literal["runs", "rounds", "single round"]
Statistic = Literal["median", "mean"]


class CompareError(CommlensError, ValueError):
    """Two sets of runs that cannot be compared (no row in common, an empty side)."""


class CompareSettingsError(CommlensError, ValueError):
    """A comparison setting out of its range; the message names the field."""


@dataclass(frozen=True)
class CompareSettings:
    """Thresholds of the verdict and how the rounds are summarised."""

    min_change: float = 0.03  # smallest relative change of the typical time called a regression (0.03 = 3 %)
    alpha: float = 0.05  # significance level of Welch's t-test on log times, Benjamini-Hochberg over the rows
    min_samples: int = 3  # rounds (or runs) needed on each side to measure its spread
    confidence: float = 0.95  # confidence level of the interval of the ratio
    statistic: Statistic = "median"  # what summarises one round's iterations
    far_floors: float = 5.0  # a single-round side: a change beyond this many noise floors is still judged

    def __post_init__(self) -> None:
        if not (0.0 <= self.min_change < 1.0):
            raise CompareSettingsError(f"min_change must be in [0, 1), got {self.min_change}")
        if not (0.0 < self.alpha < 1.0):
            raise CompareSettingsError(f"alpha must be in (0, 1), got {self.alpha}")
        if self.min_samples < 2:
            raise CompareSettingsError(f"min_samples must be >= 2, got {self.min_samples}")
        if not (0.5 <= self.confidence < 1.0):
            raise CompareSettingsError(f"confidence must be in [0.5, 1), got {self.confidence}")
        if self.statistic not in ("median", "mean"):
            raise CompareSettingsError(f"statistic must be median or mean, got {self.statistic!r}")
        if not (self.far_floors > 0.0):
            raise CompareSettingsError(f"far_floors must be > 0, got {self.far_floors}")


@dataclass(frozen=True)
class RowThreshold:
    """What one row is judged with when it is not the report's settings: a stored threshold's (see
    ``commlens.store.series_meta.resolve_threshold``)."""

    min_change: float
    alpha: float
    source: str  # which stored threshold(s) set them, in words (``op=all_reduce size=1048576``)


@dataclass(frozen=True)
class RowSide:
    """One row on one side: per run, each round's typical time in seconds (``[run][round]``)."""

    rounds_s: tuple[tuple[float, ...], ...]

    @property
    def runs(self) -> int:
        return len(self.rounds_s)

    @property
    def rounds(self) -> int:
        return sum(len(r) for r in self.rounds_s)

    @property
    def unit(self) -> Unit:
        if self.runs >= 2:
            return "runs"
        return "rounds" if self.rounds >= 2 else "single round"

    def observations(self) -> np.ndarray:
        """ln of what the test compares: one value per run (the mean of its rounds' ln) with two or more
        runs, else one per round of the single run."""
        logs = [np.log(np.maximum(np.asarray(r, dtype=float), 1e-300)) for r in self.rounds_s]
        if self.runs >= 2:
            return np.array([float(x.mean()) for x in logs])
        return np.asarray(logs[0], dtype=float)


@dataclass(frozen=True)
class Judgement:
    """The statistics and verdict of one row."""

    ratio: float  # candidate / base typical time
    ci_low: float | None
    ci_high: float | None
    p_value: float | None  # Welch's t-test on ln time, two-sided
    p_adjusted: float | None  # Benjamini-Hochberg over the rows judged together
    spread: float | None  # relative spread of one unit (run or round), the larger side's; None if not measured
    floor: float | None  # the noise floor used (relative sd of a run), None if none was known
    verdict: Verdict
    reason: str


@dataclass(frozen=True)
class ComparisonRow:
    """One comparable key on both sides; times in seconds, ``ratio`` = candidate / base typical time.

    A side's typical time is the geometric mean, over its runs, of the geometric mean of each run's round
    statistics (medians of the rounds' iterations by default; a reported mean for rows without samples).
    """

    op: str
    algo: str
    dtype: str
    redop: str | None  # None: the op does not reduce
    root: int | None  # None: the op has no root
    size_bytes: int
    in_place: bool
    unit: Unit  # the weaker side's: what its spread was measured from
    base_n: int  # observations (runs, or rounds of the one run) on the base side
    candidate_n: int
    base_runs: int
    candidate_runs: int
    base_rounds: int
    candidate_rounds: int
    base_time_s: float
    candidate_time_s: float
    base_busbw_bytes_per_s: float
    candidate_busbw_bytes_per_s: float
    base_spread: float | None  # relative sd of one observation (run or round); None with one observation
    candidate_spread: float | None
    noise_floor: float | None  # the series' learned run-to-run sd, when one was used
    ratio: float
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    p_adjusted: float | None
    verdict: Verdict
    reason: str
    group: str | None = None  # the process group of rows measured inside a job; None for benchmark rows
    threshold: RowThreshold | None = None  # the settings the row was judged with, when not the report's

    @property
    def change(self) -> float:
        """Relative change of the typical time: +0.10 is 10 % slower."""
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

    def as_dict(self) -> JsonObject:
        """The report as ``commlens compare --format json`` prints it."""

        def side(s: SideSummary) -> JsonObject:
            return {"ref": s.label, "run_ids": list(s.run_ids), "fingerprints": list(s.fingerprints)}

        return {
            "base": side(self.base),
            "candidate": side(self.candidate),
            "settings": asdict(self.settings),
            "summary": {
                "rows": len(self.rows),
                "regressions": self.count("regression"),
                "improvements": self.count("improvement"),
                "no_change": self.count("no change"),
                "unknown": self.count("unknown"),
                "geomean_ratio": self.geomean_ratio,
                "only_in_base": self.only_in_base,
                "only_in_candidate": self.only_in_candidate,
            },
            "warnings": list(self.warnings),
            # group only for a process group's rows, threshold only for a row judged with a stored threshold
            "rows": [_row_dict(r) for r in self.rows],
        }

    def summary_line(self) -> str:
        return (
            f"{len(self.rows)} rows: {self.count('regression')} regressions, {self.count('improvement')} "
            f"improvements, {self.count('no change')} no change, {self.count('unknown')} unknown; "
            f"geometric mean ratio {self.geomean_ratio:.3f}"
        )


def _row_dict(row: ComparisonRow) -> JsonObject:
    d = omit_no_group(asdict(row))
    if d["threshold"] is None:
        del d["threshold"]
    return d


@dataclass(frozen=True)
class _Estimate:
    """ln typical time of one side, the variance of that estimate and its degrees of freedom."""

    mean: float
    var: float | None  # None: not measured and no floor known
    df: float
    spread: float | None  # sd of one observation
    floored: bool = False  # the floor, not the measured spread, set the variance


def _estimate(side: RowSide, floor: float | None, min_obs: int) -> _Estimate:
    """Steps 1 and 2 of :func:`judge` for one side."""
    x = side.observations()
    mean = float(x.mean())
    spread = float(x.std(ddof=1)) if x.size >= 2 else None
    var: float | None = None
    df = math.inf
    if spread is not None and x.size >= min_obs:
        var, df = spread * spread / x.size, float(x.size - 1)
    floored = False
    if floor is not None:
        floor_var = floor * floor / side.runs
        if var is None or floor_var > var:
            var, df, floored = floor_var, math.inf, True  # learned from many runs: its own uncertainty is small
    return _Estimate(mean, var, df, spread, floored)


def judge(
    pairs: Sequence[tuple[RowSide, RowSide]],
    settings: CompareSettings = CompareSettings(),
    floors: Sequence[float | None] | None = None,
    row_settings: Sequence[CompareSettings] | None = None,
) -> list[Judgement]:
    """Verdicts for (base, candidate) rows judged together, as the rows of one compare.

    ``row_settings`` gives each row settings of its own (a stored threshold's ``min_change`` and ``alpha``);
    the adjustment over the rows still takes every row's p-value together.

    With ``d = min_change`` and ``f`` the series' noise floor (the relative sd of one whole run's typical
    time between runs of the same code, learned from history; None when unknown):

    1. Each side's observations are ln times: one per run (the mean of its rounds' ln) when the side has
       two or more runs, else one per round of its single run. Their mean ``m`` estimates the side's ln
       typical time, with variance ``s^2 / n`` (``s`` their sd, ``n`` their count; measured only with at
       least ``min_samples`` of them).
    2. A side is never taken as more precise than its history allows: the variance is at least
       ``f^2 / runs``. With no spread measured (one round, or too few) and no floor, it is unknown.
    3. ``D = m_candidate - m_base``, ``ratio = exp(D)``; Welch's t-test gives the p-value (adjusted by
       Benjamini-Hochberg over every row with a test) and the CI ``exp(D -/+ t * se)``.
    4. unknown, run-to-run variation not measured: a side's variance is unknown, or a side has a single
       round and the change is not beyond ``far_floors`` noise floors (``|D| > far_floors * f * sqrt(2)``).
    5. regression: ``ratio > 1 + d``, adjusted ``p < alpha`` and the CI above 1; improvement: the mirror.
    6. unknown, too noisy: otherwise, when the CI's half-width (in ratio) exceeds ``d``: the runs or
       rounds scatter too much to resolve a change as small as asked.
    7. no change: otherwise (not significant, or smaller than ``d``).
    """
    floors = list(floors) if floors is not None else [None] * len(pairs)
    per_row = list(row_settings) if row_settings is not None else [settings] * len(pairs)
    ests = [
        (_estimate(b, f, s.min_samples), _estimate(c, f, s.min_samples)) for (b, c), f, s in zip(pairs, floors, per_row)
    ]
    tested: dict[int, tuple[float, float, float]] = {}  # row -> (D, se, df)
    for i, (eb, ec) in enumerate(ests):
        if eb.var is None or ec.var is None:
            continue
        se2 = eb.var + ec.var
        if se2 <= 0.0:
            se2 = 1e-30
        finite = [(v, df) for v, df in ((eb.var, eb.df), (ec.var, ec.df)) if math.isfinite(df)]
        if len(finite) < 2:  # a floor on either side: its df is large; take the measured side's, if any
            df = min((df for _, df in finite), default=math.inf)
        else:
            denom = sum(v * v / d for v, d in finite)
            # both sides without spread (identical times in every run): Welch's df is 0/0; take the smaller df
            df = se2 * se2 / denom if denom > 0.0 else min(d for _, d in finite)
        tested[i] = (ec.mean - eb.mean, math.sqrt(se2), df)
    order = list(tested)
    if tested:  # scipy.special costs 0.15 s to import: only when a row has a t-test (never for single rounds)
        from scipy.special import stdtr, stdtrit  # Student's t CDF and its inverse: lighter than scipy.stats
    p_raw = {i: float(2.0 * stdtr(tested[i][2], -abs(tested[i][0]) / tested[i][1])) for i in order}
    p_adj = dict(zip(order, benjamini_hochberg(np.array([p_raw[i] for i in order])).tolist()))
    out = []
    for i, ((b, c), (eb, ec)) in enumerate(zip(pairs, ests)):
        f, row = floors[i], per_row[i]
        ratio = math.exp(ec.mean - eb.mean)
        spreads = [x for x in (eb.spread, ec.spread) if x is not None]
        spread = max(spreads) if spreads else None
        if i not in tested:
            out.append(Judgement(ratio, None, None, None, None, spread, f, "unknown", _unmeasured(b, c, row)))
            continue
        d, se, df = tested[i]
        t_crit = float(stdtrit(df, 0.5 + row.confidence / 2.0))
        lo, hi = math.exp(d - t_crit * se), math.exp(d + t_crit * se)
        single = b.unit == "single round" or c.unit == "single round"
        floor_set = f if (eb.floored or ec.floored) else None
        verdict, reason = _verdict(ratio, lo, hi, p_raw[i], p_adj[i], spread, f, floor_set, single, row, len(order))
        out.append(Judgement(ratio, lo, hi, p_raw[i], p_adj[i], spread, f, verdict, reason))
    return out


def _unmeasured(b: RowSide, c: RowSide, settings: CompareSettings) -> str:
    sides = [
        name
        for name, s in (("base", b), ("candidate", c))
        if s.unit == "single round"
        or (s.unit == "rounds" and s.rounds < settings.min_samples)
        or (s.unit == "runs" and s.runs < settings.min_samples)
    ]
    where = " and ".join(sides) or "a side"
    return (
        f"run-to-run variation not measured ({where}: fewer than {settings.min_samples} rounds or runs, "
        f"no noise floor known)"
    )


def _verdict(
    ratio: float,
    lo: float,
    hi: float,
    p: float,
    q: float,
    spread: float | None,
    floor: float | None,
    floor_set: float | None,
    single: bool,
    settings: CompareSettings,
    rows: int,
) -> tuple[Verdict, str]:
    """Steps 4 to 7 of :func:`judge`, with the reason a reader is shown."""
    change = f"{ratio - 1.0:+.1%}"
    d = settings.min_change
    if single:
        assert floor is not None  # a single-round side is only tested through a floor
        far = abs(math.log(ratio)) > settings.far_floors * floor * math.sqrt(2.0)
        if not far or abs(ratio - 1.0) <= d or q >= settings.alpha:
            return "unknown", (
                f"run-to-run variation not measured (a side has one round); {change} is within "
                f"{settings.far_floors:g} noise floors ({floor:.1%} a run)"
            )
        kind: Verdict = "regression" if ratio > 1.0 else "improvement"
        return kind, (
            f"{'slower' if ratio > 1.0 else 'faster'} {change}: one round a side, but beyond "
            f"{settings.far_floors:g} noise floors ({floor:.1%} a run)"
        )
    if ratio > 1.0 + d and q < settings.alpha and lo > 1.0:
        return "regression", f"slower {change}"
    if ratio < 1.0 / (1.0 + d) and q < settings.alpha and hi < 1.0:
        return "improvement", f"faster {change}"
    if (hi - lo) / 2.0 > d:
        what = f"runs or rounds scatter by {spread:.1%}" if spread is not None else "spread unknown"
        if floor_set is not None:
            what = f"runs of this series scatter by {floor_set:.1%}, its noise floor"
        return "unknown", f"unstable: too noisy to resolve {d:.0%} ({what}; {change})"
    if q >= settings.alpha:
        if p < settings.alpha:
            return "no change", f"not significant after adjusting for {rows} rows (adjusted p {q:.2g})"
        return "no change", "not significant"
    if lo <= 1.0 <= hi:
        return "no change", "not significant: the CI includes 1"
    return "no change", f"{change}, below the {d:.0%} threshold"


def row_side(per_run: Sequence[Sequence[Measurement]], statistic: Statistic = "median") -> RowSide:
    """A row's side from its measurements, per run: each round's typical time (its measurements of the key
    in one run are taken round by round together); a row without samples counts its reported figure as
    one round."""
    out = []
    for ms in per_run:
        rounds: list[float] = []
        for m in ms:
            if not m.has_samples:
                rep = m.stats
                rounds.append(rep.p50_s if statistic == "median" and rep.p50_s is not None else rep.mean_s)
                continue
            for samples in m.round_samples():
                a = np.asarray(samples, dtype=float)
                rounds.append(float(np.median(a) if statistic == "median" else a.mean()))
        out.append(tuple(rounds))
    return RowSide(tuple(out))


@dataclass(frozen=True)
class _Side:
    """One key on one side: the measurements of each run that has it."""

    per_run: tuple[tuple[Measurement, ...], ...]
    failed_check: bool = False  # a run's results check failed on this row (see ``_check_failed``)

    def busbw(self, time_s: float) -> float:
        m = self.per_run[0][0]
        return get_op(m.op).busbw(m.size_bytes, time_s, m.world_size)


@dataclass(frozen=True)
class CompareRequest:
    """One A/B comparison: the runs of each side, the settings, the sides' names in the report and its messages,
    the noise floors (keyed by fingerprint and row) and each row's own threshold (a stored one's; None: ``settings``).
    Checked when built (:class:`CompareSettingsError` naming the field)."""

    base: tuple[Run, ...]
    candidate: tuple[Run, ...]
    settings: CompareSettings = CompareSettings()
    base_label: str = "base"
    candidate_label: str = "candidate"
    floors: Mapping[FloorKey, float] | None = None
    thresholds: Callable[[MeasurementKey], RowThreshold | None] | None = None

    def __post_init__(self) -> None:
        for name in ("base", "candidate"):
            if not isinstance(getattr(self, name), tuple):
                raise CompareSettingsError(f"{name} must be a tuple of runs, got {type(getattr(self, name)).__name__}")
        if not isinstance(self.settings, CompareSettings):
            raise CompareSettingsError(f"settings must be CompareSettings, got {type(self.settings).__name__}")


def compare_runs(
    base: Sequence[Run],
    candidate: Sequence[Run],
    settings: CompareSettings = CompareSettings(),
    *,
    base_label: str = "base",
    candidate_label: str = "candidate",
    floors: Mapping[FloorKey, float] | None = None,
    thresholds: Callable[[MeasurementKey], RowThreshold | None] | None = None,
) -> CompareReport:
    """Shorthand for :func:`run_compare` of the :class:`CompareRequest` these arguments make (its fields)."""
    return run_compare(
        CompareRequest(tuple(base), tuple(candidate), settings, base_label, candidate_label, floors, thresholds)
    )


def run_compare(request: CompareRequest) -> CompareReport:
    """Compare every row present on both sides.

    1. Group each side's measurements by key (op, algo, dtype, redop, root, size, in_place, group), per run.
    2. Summarise each run's rows round by round (:func:`row_side`): the median of each round's iterations
       (``settings.statistic``), or the reported figure of a row without samples.
    3. Judge every row together (:func:`judge`), with the series' noise floor from ``floors`` (keyed by
       fingerprint and row; the larger of the two sides' systems when they differ) where one is known.
    """
    base, candidate, settings = request.base, request.candidate, request.settings
    base_label, candidate_label = request.base_label, request.candidate_label
    floors, thresholds = request.floors, request.thresholds
    if not base or not candidate:
        raise CompareError(f"{base_label if not base else candidate_label}: no runs to compare")
    base_sides, cand_sides = _group(base), _group(candidate)
    keys = sorted(base_sides.keys() & cand_sides.keys(), key=MeasurementKey.order)
    if not keys:
        raise CompareError(
            f"{base_label} and {candidate_label} have no row in common "
            "(same op, algo, dtype, redop, root, size and placement)"
        )
    fingerprints = sorted({r.system.fingerprint() for r in (*base, *candidate)})
    pairs: list[tuple[RowSide, RowSide]] = []
    row_floors: list[float | None] = []
    blocked: dict[int, str] = {}
    for i, key in enumerate(keys):
        b_side, c_side = base_sides[key], cand_sides[key]
        pairs.append((row_side(b_side.per_run, settings.statistic), row_side(c_side.per_run, settings.statistic)))
        known = [floors[FloorKey(fp, key)] for fp in fingerprints if floors and FloorKey(fp, key) in floors]
        row_floors.append(max(known) if known else None)
        if b_side.failed_check or c_side.failed_check:
            side = (
                "both sides"
                if b_side.failed_check and c_side.failed_check
                else (base_label if b_side.failed_check else candidate_label)
            )
            blocked[i] = f"results check failed ({side}): wrong results are not timed results"
    row_thresholds = [thresholds(key) if thresholds is not None else None for key in keys]
    row_settings = [
        settings if t is None else dataclasses.replace(settings, min_change=t.min_change, alpha=t.alpha)
        for t in row_thresholds
    ]
    testable = [i for i in range(len(keys)) if i not in blocked]
    judged = dict(
        zip(
            testable,
            judge(
                [pairs[i] for i in testable],
                settings,
                [row_floors[i] for i in testable],
                [row_settings[i] for i in testable],
            ),
        )
    )
    rows = []
    for i, key in enumerate(keys):
        b, c = pairs[i]
        eb, ec = _estimate(b, None, 2), _estimate(c, None, 2)
        j = judged.get(i) or Judgement(
            math.exp(ec.mean - eb.mean), None, None, None, None, None, row_floors[i], "unknown", blocked[i]
        )
        units = (b.unit, c.unit)
        rows.append(
            ComparisonRow(
                **key._asdict(),
                unit="single round" if "single round" in units else ("rounds" if "rounds" in units else "runs"),
                base_n=int(b.observations().size),
                candidate_n=int(c.observations().size),
                base_runs=b.runs,
                candidate_runs=c.runs,
                base_rounds=b.rounds,
                candidate_rounds=c.rounds,
                base_time_s=math.exp(eb.mean),
                candidate_time_s=math.exp(ec.mean),
                base_busbw_bytes_per_s=base_sides[key].busbw(math.exp(eb.mean)),
                candidate_busbw_bytes_per_s=cand_sides[key].busbw(math.exp(ec.mean)),
                base_spread=eb.spread,
                candidate_spread=ec.spread,
                noise_floor=j.floor,
                ratio=j.ratio,
                ci_low=j.ci_low,
                ci_high=j.ci_high,
                p_value=j.p_value,
                p_adjusted=j.p_adjusted,
                verdict=j.verdict,
                reason=j.reason,
                threshold=row_thresholds[i],
            )
        )
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
        warnings=tuple(
            _warnings(base_summary, cand_summary, only_base, only_cand)
            + _failed_warnings(base_label, base)
            + _failed_warnings(candidate_label, candidate)
        ),
    )


def _group(runs: Sequence[Run]) -> dict[MeasurementKey, _Side]:
    per_key: dict[MeasurementKey, list[tuple[Measurement, ...]]] = defaultdict(list)
    failed: set[MeasurementKey] = set()
    for run in runs:
        in_run: dict[MeasurementKey, list[Measurement]] = defaultdict(list)
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
    return [
        f"{label}: results check failed in run{'s' if len(failed) > 1 else ''} {', '.join(failed)}: its rows with "
        f"wrong results are not judged (verdict unknown); its other rows are"
    ]


def _check_failed(run: Run, m: Measurement) -> bool:
    """The row's results were wrong: its own #wrong, or a failed run whose check does not say which rows."""
    if m.nwrong:
        return True
    return run.status == "check_failed" and m.nwrong is None


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
            out.append(
                f"{side.label} pools runs from {len(side.fingerprints)} different systems "
                f"(fingerprints {', '.join(side.fingerprints)})"
            )
    if set(base.fingerprints) != set(cand.fingerprints):
        out.append(
            f"base and candidate ran on different systems (fingerprint {', '.join(base.fingerprints)} vs "
            f"{', '.join(cand.fingerprints)}): a difference may come from the system, not the change"
        )
    if only_base or only_cand:
        out.append(f"not compared: {only_base} rows only in base, {only_cand} only in candidate")
    return out
