"""Change points in one series of mean times: where the level of a benchmark moved, and by how much.

``find_changes`` works on a plain sequence of times; ``commlens.regress.history``
applies it to every series of a result store.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from commlens.errors import CommlensError
from commlens.regress.extension import compiled_function
from commlens.regress.stats import mann_whitney_p, robust_noise

__all__ = ["DetectSettings", "DetectSettingsError", "SegmentChange", "find_changes"]

# The noise estimate is floored at this relative level (0.01 %), so a series of
# identical values still gets a positive penalty.
_MIN_NOISE = 1e-4
# Outlier clipping: points further than this many noise stdevs from the running median of this many points.
_CLIP_NOISES = 3.0
_CLIP_WINDOW = 5


class DetectSettingsError(CommlensError, ValueError):
    """A detection setting out of its range; the message names the field."""


@dataclass(frozen=True)
class DetectSettings:
    """How sure detect must be before it reports a change."""

    min_change: float = 0.03  # smallest relative change of the mean reported (0.03 = 3 %)
    alpha: float = 3e-4  # a change needs a Mann-Whitney p-value below this, before vs after
    penalty: float = 3.0  # PELT penalty per change, in units of noise variance x ln(n)
    min_segment: int = 4  # points a level must hold on each side of a change
    floor_multiple: float = 1.0  # a change must exceed this many noise floors (the series' run-to-run sd)

    def __post_init__(self) -> None:
        if not (0.0 <= self.min_change < 1.0):
            raise DetectSettingsError(f"min_change must be in [0, 1), got {self.min_change}")
        if not (0.0 < self.alpha < 1.0):
            raise DetectSettingsError(f"alpha must be in (0, 1), got {self.alpha}")
        if not (self.penalty > 0.0):
            raise DetectSettingsError(f"penalty must be > 0, got {self.penalty}")
        if self.min_segment < 2:
            raise DetectSettingsError(f"min_segment must be >= 2, got {self.min_segment}")
        if not (self.floor_multiple >= 0.0):
            raise DetectSettingsError(f"floor_multiple must be >= 0, got {self.floor_multiple}")


@dataclass(frozen=True)
class SegmentChange:
    """A change of level: ``index`` is the first point of the new level."""

    index: int
    mean_before_s: float
    mean_after_s: float
    p_value: float

    @property
    def change(self) -> float:
        """Relative change of the mean time: +0.08 is 8 % slower."""
        return self.mean_after_s / self.mean_before_s - 1.0

    @property
    def is_regression(self) -> bool:
        return self.mean_after_s > self.mean_before_s


def find_changes(
    times_s: Sequence[float], settings: DetectSettings = DetectSettings(), floor: float | None = None
) -> list[SegmentChange]:
    """Changes of level in ``times_s`` (one mean time per run, in history order).

    ``floor`` is the series' noise floor (sd of ln time between runs of the same code, learned by
    ``commlens noise learn``), when known: it is a lower bound of the noise in step 2, and a change
    smaller than ``floor_multiple`` floors is weak in step 5, as one smaller than ``min_change`` is.

    1. Work on ``y = ln(time)``, so noise and steps are relative and a 5 % step
       looks the same at 10 us as at 10 ms.
    2. Estimate the noise stdev ``s`` of ``y`` robustly: the MAD of first
       differences x 1.4826 / sqrt(2) (floored at 0.01 %), which steps and
       single outliers barely move.
    3. Clip isolated outliers: each point is held within ``3 s`` of the
       running median of the 5 points around it. A step moves the running
       median with it, so only points unlike both neighbourhoods are clipped
       (a run on a bad node, a preempted job).
    4. Find candidate change points with ruptures' PELT on the L2 cost
       (``KernelCPD(kernel="linear")``, exact, in C) over the clipped ``y``,
       with penalty ``penalty x s^2 x ln(n)`` per change and at least
       ``min_segment`` points per segment.
    5. Test each candidate on the clipped times: the segment before it (from
       the previous change point) against the segment after it (to the next
       one): the relative change of the segment means, and Mann-Whitney U,
       two-sided. A candidate with ``|change| < min_change`` or
       ``p >= alpha`` is weak.
    6. Drop the weakest candidate (the smallest change under ``min_change``,
       else the largest p), merge its two segments, and retest its
       neighbours; repeat until every remaining change passes. What remains
       is returned, in order; its means are of the clipped times.
    """
    x = np.asarray(times_s, dtype=float)
    n = x.size
    if n < 2 * settings.min_segment:
        return []
    y = np.log(np.maximum(x, np.finfo(float).tiny))
    noise = max(robust_noise(y), _MIN_NOISE, floor or 0.0)
    local = _running_median(y, _CLIP_WINDOW)
    y = local + np.clip(y - local, -_CLIP_NOISES * noise, _CLIP_NOISES * noise)
    clipped = np.exp(y)
    # Every segment's mean lies between the series' smallest and largest point: when those are less than
    # min_change apart, step 5 would find every candidate too small, so the search is skipped.
    if float(clipped.max()) < float(clipped.min()) * (1.0 + settings.min_change):
        return []
    breaks = _pelt_l2(y, settings.penalty * noise * noise * math.log(n), settings.min_segment)[:-1]
    return _prune(clipped, breaks, settings, settings.floor_multiple * (floor or 0.0))


def _pelt_l2(y: np.ndarray, penalty: float, min_size: int) -> list[int]:
    """The ends of the segments ruptures' ``KernelCPD(kernel="linear", min_size).fit(y).predict(pen=penalty)``
    finds (exact PELT on the L2 cost, in C), the last one ``y.size``."""
    signal = np.ascontiguousarray(y.reshape(-1, 1), dtype=np.double)
    pelt = _ruptures_pelt_l2()
    if pelt is None:
        import ruptures

        algo = ruptures.KernelCPD(kernel="linear", min_size=min_size).fit(signal)
        return [int(b) for b in algo.predict(pen=penalty)]
    path = pelt(signal, penalty, min_size)
    ends, end = [], y.size
    while end > 0:  # as KernelCPD.predict walks back the path
        ends.append(end)
        end = int(path[end])
    return ends[::-1]


def _ruptures_pelt_l2() -> Callable[..., Any] | None:
    """ruptures' compiled PELT for the L2 cost (``ekcpd_pelt_L2``, what ``KernelCPD`` calls), loaded from its
    extension module alone; None where that cannot be done (then ``KernelCPD`` itself is used).

    ``import ruptures`` loads every detector and cost it has, scipy's statistics among them: over a second of
    a ``commlens detect`` that needs this one function.
    """
    return compiled_function("ruptures", "detection._detection.ekcpd", "ekcpd_pelt_L2")


def _running_median(y: np.ndarray, window: int) -> np.ndarray:
    """Median of the ``window`` points centred on each point (the ends repeat the first and last point)."""
    half = window // 2
    padded = np.pad(y, half, mode="edge")
    return np.asarray(np.median(np.lib.stride_tricks.sliding_window_view(padded, window), axis=1), dtype=float)


def _prune(
    x: np.ndarray,
    breaks: list[int],
    settings: DetectSettings,
    min_log_change: float = 0.0,
) -> list[SegmentChange]:
    """Steps 5 and 6 of ``find_changes``: keep only candidates that pass the test.

    A candidate smaller than ``min_change`` is weaker than any that is not,
    and is dropped without computing its p-value (the costly part).
    """
    tested: dict[tuple[int, int, int], SegmentChange] = {}
    while breaks:
        bounds = [0, *breaks, x.size]
        changes = []
        for i in range(1, len(bounds) - 1):
            key = (bounds[i - 1], bounds[i], bounds[i + 1])
            if key not in tested:
                before, after = x[key[0] : key[1]], x[key[1] : key[2]]
                mean_before, mean_after = float(before.mean()), float(after.mean())
                big = (
                    abs(mean_after / mean_before - 1.0) >= settings.min_change
                    and abs(math.log(mean_after / mean_before)) >= min_log_change
                )
                tested[key] = SegmentChange(
                    index=key[1],
                    mean_before_s=mean_before,
                    mean_after_s=mean_after,
                    p_value=mann_whitney_p(before, after) if big else math.nan,
                )
            changes.append(tested[key])
        small = [(abs(c.change), j) for j, c in enumerate(changes) if math.isnan(c.p_value)]
        if small:
            del breaks[min(small)[1]]
            continue
        weak = [(c.p_value, -abs(c.change), j) for j, c in enumerate(changes) if c.p_value >= settings.alpha]
        if not weak:
            return changes
        del breaks[max(weak)[2]]
    return []
