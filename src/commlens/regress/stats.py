"""Statistics shared by compare and detect: bootstrap CI of a ratio of means, Mann-Whitney, noise.

Plain functions over numpy arrays; nothing here knows about runs or stores.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "benjamini_hochberg",
    "bootstrap_ratio_ci_rows",
    "cv",
    "mann_whitney_p",
    "mann_whitney_p_rows",
    "robust_noise",
]

# Resampled values are gathered in blocks of at most this many, to bound memory.
_BLOCK_VALUES = 4_000_000


def cv(values: np.ndarray) -> float:
    """Coefficient of variation (sample stdev / mean); 0 for fewer than two values."""
    if values.size < 2:
        return 0.0
    mean = float(values.mean())
    return float(values.std(ddof=1)) / mean if mean > 0 else 0.0


def bootstrap_ratio_ci_rows(
    base: np.ndarray, candidate: np.ndarray, *, resamples: int, confidence: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap CIs of mean(candidate) / mean(base), one per row of the 2-D inputs.

    Each side is resampled on its own (the sides are independent samples);
    every row uses the same resampling indices, drawn once from ``rng``, so a
    row's interval depends on its values, the shapes and the seed only, not on
    the other rows. The interval is the central ``confidence`` mass of the
    resampled ratios.
    """
    idx_base = rng.integers(0, base.shape[1], size=(resamples, base.shape[1]))
    idx_cand = rng.integers(0, candidate.shape[1], size=(resamples, candidate.shape[1]))
    tail = (1.0 - confidence) / 2.0 * 100.0
    rows = base.shape[0]
    lo, hi = np.empty(rows), np.empty(rows)
    per_block = max(1, _BLOCK_VALUES // (resamples * max(base.shape[1], candidate.shape[1])))
    for start in range(0, rows, per_block):
        block = slice(start, min(rows, start + per_block))
        ratios = candidate[block][:, idx_cand].mean(axis=2) / base[block][:, idx_base].mean(axis=2)
        lo[block], hi[block] = np.percentile(ratios, [tail, 100.0 - tail], axis=1)
    return lo, hi


def mann_whitney_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided Mann-Whitney U p-value (scipy: exact for small tie-free samples, else normal
    approximation with continuity correction); 1.0 when every value on both sides is equal."""
    from scipy.stats import mannwhitneyu

    if a.min() == a.max() == b.min() == b.max():
        return 1.0
    return float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def mann_whitney_p_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Two-sided Mann-Whitney U p-values of each row of ``a`` against the same row of ``b``.

    One vectorized scipy call for many comparisons of the same shape; a row
    whose values are all equal gets 1.0.
    """
    from scipy.stats import mannwhitneyu

    p = np.asarray(mannwhitneyu(a, b, alternative="two-sided", axis=1).pvalue, dtype=float)
    return np.where(np.isnan(p), 1.0, p)


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values: reject where adjusted < alpha to keep the
    false discovery rate (and, when nothing changed, the chance of any false alarm) below alpha."""
    m = p.size
    if m == 0:
        return p.copy()
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
