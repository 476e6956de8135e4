"""Statistics shared by compare and detect: Benjamini-Hochberg, Mann-Whitney, robust noise.

Plain functions over numpy arrays; nothing here knows about runs or stores.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "benjamini_hochberg",
    "mann_whitney_p",
    "robust_noise",
]


def mann_whitney_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Mann-Whitney U p-value (scipy: exact for small tie-free samples, else normal
    approximation with continuity correction); 1.0 when every value on both sides is equal."""
    from scipy.stats import mannwhitneyu

    if a.min() == a.max() == b.min() == b.max():
        return 1.0
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


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
