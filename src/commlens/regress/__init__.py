"""The regression gate: A/B comparison of runs (``compare``) and change points over history (``detect``).

See ``docs/regress.md`` for how each decides.
"""

from commlens.regress.compare import (
    CompareError,
    CompareReport,
    CompareSettings,
    ComparisonRow,
    Judgement,
    Verdict,
    compare_runs,
    judge,
)
from commlens.regress.detect import DetectSettings, SegmentChange, find_changes
from commlens.regress.history import DetectedChange, DetectReport, SeriesKey, detect_history, parse_utc

__all__ = [
    "CompareError",
    "CompareReport",
    "CompareSettings",
    "ComparisonRow",
    "DetectReport",
    "DetectSettings",
    "DetectedChange",
    "Judgement",
    "SegmentChange",
    "SeriesKey",
    "Verdict",
    "compare_runs",
    "detect_history",
    "find_changes",
    "judge",
    "parse_utc",
]
