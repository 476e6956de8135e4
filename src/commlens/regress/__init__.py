"""The regression gate: A/B comparison of runs (``compare``) and change points over history (``detect``).

See ``docs/regress.md`` for how each decides.
"""

from typing import TYPE_CHECKING

from commlens._lazy import lazy_exports

if TYPE_CHECKING:  # imported on first use, by __getattr__ below
    from commlens.regress.compare import (
        CompareError,
        CompareReport,
        CompareRequest,
        CompareSettings,
        ComparisonRow,
        FloorKey,
        Judgement,
        RowSide,
        Verdict,
        compare_runs,
        judge,
        row_side,
        run_compare,
    )
    from commlens.regress.detect import DetectSettings, SegmentChange, find_changes
    from commlens.regress.history import (
        DetectedChange,
        DetectReport,
        DetectRequest,
        DetectRequestError,
        HistoryPoint,
        HistoryRun,
        MeanHistory,
        Series,
        detect_history,
        parse_utc,
        run_detect,
    )
    from commlens.regress.noise import NoiseFloor, learn_floors

# name -> the module that defines it: a command loads only what it uses (compare never loads detect's search,
# and neither loads the store, which learn_floors needs)
_LAZY = {
    **dict.fromkeys(
        (
            "CompareError",
            "CompareReport",
            "CompareRequest",
            "CompareSettings",
            "ComparisonRow",
            "FloorKey",
            "Judgement",
            "RowSide",
            "Verdict",
            "compare_runs",
            "judge",
            "row_side",
            "run_compare",
        ),
        "compare",
    ),
    **dict.fromkeys(("DetectSettings", "SegmentChange", "find_changes"), "detect"),
    **dict.fromkeys(
        (
            "DetectedChange",
            "DetectReport",
            "DetectRequest",
            "DetectRequestError",
            "HistoryPoint",
            "HistoryRun",
            "MeanHistory",
            "Series",
            "detect_history",
            "parse_utc",
            "run_detect",
        ),
        "history",
    ),
    **dict.fromkeys(("NoiseFloor", "learn_floors"), "noise"),
}

__all__ = [
    "CompareError",
    "CompareReport",
    "CompareRequest",
    "CompareSettings",
    "ComparisonRow",
    "DetectReport",
    "DetectRequest",
    "DetectRequestError",
    "DetectSettings",
    "DetectedChange",
    "FloorKey",
    "HistoryPoint",
    "HistoryRun",
    "Judgement",
    "MeanHistory",
    "NoiseFloor",
    "RowSide",
    "SegmentChange",
    "Series",
    "Verdict",
    "compare_runs",
    "detect_history",
    "find_changes",
    "judge",
    "learn_floors",
    "parse_utc",
    "row_side",
    "run_compare",
    "run_detect",
]

__getattr__ = lazy_exports(__name__, _LAZY, globals())  # the gate's classes and functions on first use
