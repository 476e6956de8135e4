"""The regression gate: A/B comparison of runs (``compare``) and change points over history (``detect``).

See ``docs/regress.md`` for how each decides.
"""

from typing import TYPE_CHECKING

from commlens.regress.compare import (
    CompareError,
    CompareReport,
    CompareSettings,
    ComparisonRow,
    FloorKey,
    Judgement,
    RowSide,
    Verdict,
    compare_runs,
    judge,
    row_side,
)
from commlens.regress.detect import DetectSettings, SegmentChange, find_changes
from commlens.regress.history import (
    DetectedChange,
    DetectReport,
    SeriesKey,
    detect_history,
    detect_mean_history,
    parse_utc,
)

if TYPE_CHECKING:  # imported on first use, by __getattr__ below
    from commlens.regress.noise import NoiseFloor, learn_floors

__all__ = [
    "CompareError",
    "CompareReport",
    "CompareSettings",
    "ComparisonRow",
    "DetectReport",
    "DetectSettings",
    "DetectedChange",
    "FloorKey",
    "Judgement",
    "NoiseFloor",
    "RowSide",
    "SegmentChange",
    "SeriesKey",
    "Verdict",
    "compare_runs",
    "detect_history",
    "detect_mean_history",
    "find_changes",
    "judge",
    "learn_floors",
    "parse_utc",
    "row_side",
]


def __getattr__(name: str) -> object:
    """``learn_floors`` and ``NoiseFloor`` on first use: they need the store (SQLAlchemy), compare does not."""
    if name in ("learn_floors", "NoiseFloor"):
        from commlens.regress import noise

        return getattr(noise, name)
    raise AttributeError(f"module 'commlens.regress' has no attribute {name!r}")
