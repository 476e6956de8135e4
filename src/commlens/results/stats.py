"""Summary statistics of time samples (seconds)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["TimeStats", "summarize", "percentile"]


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default) of already sorted values."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac


@dataclass(frozen=True)
class TimeStats:
    """Statistics of one row's per-iteration times, all in seconds (cv is a fraction).

    Built from samples, every field is set. Reported by a tool that kept no
    samples (nccl-tests without ``-I``, say), only what it printed is set and
    the rest is None; ``n`` is then the iteration count it reported, or 0.
    """

    mean_s: float
    p50_s: float | None
    p95_s: float | None
    p99_s: float | None
    min_s: float | None
    max_s: float | None
    stdev_s: float | None
    cv: float | None
    n: int

    @classmethod
    def of_mean(cls, mean_s: float, n: int) -> TimeStats:
        """What a tool reported that printed only the mean time of ``n`` iterations (0: count unknown)."""
        return cls(
            mean_s=mean_s, p50_s=None, p95_s=None, p99_s=None, min_s=None, max_s=None, stdev_s=None, cv=None, n=n
        )

    def as_dict(self) -> dict[str, float | None]:
        return {
            "mean_s": self.mean_s,
            "p50_s": self.p50_s,
            "p95_s": self.p95_s,
            "p99_s": self.p99_s,
            "min_s": self.min_s,
            "max_s": self.max_s,
            "stdev_s": self.stdev_s,
            "cv": self.cv,
        }


def summarize(samples_s: Sequence[float]) -> TimeStats:
    """Mean, percentiles, extremes and coefficient of variation (sample stdev / mean)."""
    if not samples_s:
        raise ValueError("cannot summarize an empty sample list")
    values = sorted(samples_s)
    n = len(values)
    mean = math.fsum(values) / n
    # Deviations scaled by the largest magnitude so squaring cannot overflow.
    scale = max(abs(values[0]), abs(values[-1])) or 1.0
    var = math.fsum(((v - mean) / scale) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    stdev = math.sqrt(var) * scale
    return TimeStats(
        mean_s=mean,
        p50_s=percentile(values, 50),
        p95_s=percentile(values, 95),
        p99_s=percentile(values, 99),
        min_s=values[0],
        max_s=values[-1],
        stdev_s=stdev,
        cv=stdev / mean if mean > 0 else 0.0,
        n=n,
    )
