"""Statistics shared by compare and detect: Benjamini-Hochberg, Mann-Whitney, robust noise.

Plain functions over numpy arrays; nothing here knows about runs or stores.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from commlens.regress.extension import compiled_function

__all__ = [
    "benjamini_hochberg",
    "mann_whitney_p",
    "robust_noise",
]


def mann_whitney_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Mann-Whitney U p-value (scipy: exact for small tie-free samples, else normal
    approximation with continuity correction); 1.0 when every value on both sides is equal.

    The normal approximation is computed here, step for step as ``scipy.stats.mannwhitneyu`` does it (the
    same float operations, so the same p-value): importing ``scipy.stats`` takes longer than all of a
    ``commlens detect`` over a thousand runs. Small tie-free samples, which take the exact distribution,
    are left to scipy.
    """
    if a.min() == a.max() == b.min() == b.max():
        return 1.0
    n1, n2 = a.size, b.size
    xy = np.concatenate([np.asarray(a, dtype=float), np.asarray(b, dtype=float)])
    order = np.argsort(xy, kind="stable")
    ordered = xy[order]
    first = np.concatenate([[True], ordered[:-1] != ordered[1:]])  # where each run of equal values starts
    counts = np.diff(np.arange(xy.size)[first], append=xy.size)
    if (n1 <= 8 or n2 <= 8) and not bool((counts > 1).any()):
        from scipy.stats import mannwhitneyu

        return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)
    ndtr = compiled_function("scipy", "special._special_ufuncs", "ndtr") or _scipy_ndtr()  # the same ufunc

    average = np.arange(1, xy.size + 1, dtype=float)[first] + (counts.astype(float) - 1) / 2
    ranks = np.empty(xy.size)
    ranks[order] = np.repeat(average, counts)
    u1 = np.sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    u = np.maximum(u1, n1 * n2 - u1)
    n = n1 + n2
    ties = counts.astype(float)
    sd = np.sqrt(n1 * n2 / 12 * ((n + 1) - np.sum(ties**3 - ties) / (n * (n - 1))))
    numerator = u - n1 * n2 / 2
    numerator -= 0.5
    return float(np.clip(ndtr(-(numerator / sd)) * 2, 0.0, 1.0))


def _scipy_ndtr() -> Any:
    from scipy.special import ndtr

    return ndtr


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values: reject where adjusted < alpha to keep the
    false discovery rate (and, when nothing changed, the chance of any false alarm) below alpha."""
    m = p.size
    if m == 0:
        return np.array(p, dtype=float)
    order = np.argsort(p)
    scaled = p[order] * m / np.arange(1, m + 1)
    adjusted = np.minimum(1.0, np.minimum.accumulate(scaled[::-1])[::-1])
    out = np.empty(m)
    out[order] = adjusted
    return out


def robust_noise(y: np.ndarray) -> float:
    """Standard deviation of the noise of ``y``, robust to steps and outliers.

    MAD of the first differences, scaled to a normal stdev (x 1.4826) and by
    1/sqrt(2) (a difference of two noisy points has twice the variance). A step
    or an isolated outlier changes only one or two differences, which the
    median ignores.
    """
    if y.size < 3:
        return 0.0
    d = np.diff(y)
    return 1.4826 * float(np.median(np.abs(d - np.median(d)))) / math.sqrt(2.0)
