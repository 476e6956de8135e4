"""The validation of the projection as one report with its verdict: ``validation_report(tables)``.

``commlens project validate`` prints it; a Python caller (the benchmark, a notebook) gets the same figures
and the same verdict. Targets (issue 27): every table's mean absolute error <= 8% (SC'21 <= 3%), every row
within 20%, all rows together <= 6%, none refused; memory: every printed or formula figure within 10%,
every bound met.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

from commlens.project.validate import (
    MEMORY,
    SC21,
    BandCoverage,
    MemoryResult,
    SetResult,
    band_coverage,
    validate_memory,
    validate_tables,
)

__all__ = [
    "MemoryStats",
    "TableStats",
    "ValidationReport",
    "ValidationSummary",
    "memory_stats",
    "table_stats",
    "validation_report",
    "validation_summary",
]

TABLE_TARGET = 0.08  # mean absolute error of one table
SC21_TARGET = 0.03
OVERALL_TARGET = 0.06  # all rows together
ROW_TARGET = 0.20  # every row
MEMORY_TARGET = 0.10  # every printed or formula memory figure


class TableStats(TypedDict):
    """One table's rows (or all of them) against the published figures."""

    rows: int
    refused: int  # rows the model would not project
    mean_abs_error: float | None  # over the projected rows; None when none was
    max_abs_error: float | None


class MemoryStats(TypedDict):
    """The memory figures against the published ones, and the memory verdict."""

    figures: int
    refused: int
    mean_abs_error: float | None  # over the printed and formula figures
    max_abs_error: float | None
    within_10pct: int
    bounds: int  # figures that are bounds (fits or not), not values
    bounds_met: int
    targets_met: bool


class ValidationSummary(TypedDict, total=False):
    """Per table and overall, memory, the band's coverage, and the verdict (``targets_met``, always there)."""

    tables: dict[str, TableStats]
    overall: TableStats  # with rows
    throughput_targets_met: bool  # with rows
    memory: MemoryStats  # with the memory figures
    targets_met: bool
    band_coverage: BandCoverage  # in a report


@dataclass(frozen=True)
class ValidationReport:
    """Every projected row (in or out of its family's band), the memory figures when asked, and the verdict."""

    rows: tuple[SetResult, ...]
    memory: tuple[MemoryResult, ...] | None
    band_coverage: BandCoverage

    @property
    def summary(self) -> ValidationSummary:
        """Per table and overall, memory, the band's coverage, and ``targets_met``."""
        out = validation_summary(self.rows, self.memory)
        out["band_coverage"] = self.band_coverage
        return out

    @property
    def targets_met(self) -> bool:
        return bool(self.summary["targets_met"])

    def as_dict(self) -> dict[str, object]:
        """What ``project validate --json`` prints: the rows, then the summary (memory with its figures)."""
        summary = self.summary
        out: dict[str, object] = {"rows": [r.as_dict() for r in self.rows], **summary}
        if self.memory is not None and "memory" in summary:
            out["memory"] = {**summary["memory"], "figures": [m.as_dict() for m in self.memory]}
        return out


def validation_report(tables: Sequence[str], accelerators: Sequence[str] | None = None) -> ValidationReport:
    """Validate the published ``tables`` (names from ``table_names()``; ``memory`` for the memory figures)."""
    rows, coverage = band_coverage(validate_tables([n for n in tables if n != MEMORY], accelerators=accelerators))
    memory = tuple(validate_memory(accelerators=accelerators)) if MEMORY in tables else None
    return ValidationReport(tuple(rows), memory, coverage)


def table_stats(rows: Sequence[SetResult]) -> TableStats:
    """Mean and max absolute error of the rows the model projected, and how many it refused."""
    errors = [abs(r.error) for r in rows if r.error is not None]
    return {
        "rows": len(rows),
        "refused": sum(r.error is None for r in rows),
        "mean_abs_error": sum(errors) / len(errors) if errors else None,
        "max_abs_error": max(errors) if errors else None,
    }


def validation_summary(rows: Sequence[SetResult], memory: Sequence[MemoryResult] | None = None) -> ValidationSummary:
    """Per table and overall, and the memory figures when given, each against its target; ``targets_met``."""
    tables: dict[str, list[SetResult]] = {}
    for r in rows:
        tables.setdefault(r.table, []).append(r)
    per_table_stats = {name: table_stats(t) for name, t in tables.items()}
    out: ValidationSummary = {"tables": per_table_stats}
    ok = True
    if rows:
        overall = table_stats(rows)
        per_table = all(
            (mean := st["mean_abs_error"]) is not None and mean <= (SC21_TARGET if name == SC21 else TABLE_TARGET)
            for name, st in per_table_stats.items()
        )
        mean_all, max_all = overall["mean_abs_error"], overall["max_abs_error"]
        ok = (
            overall["refused"] == 0
            and mean_all is not None
            and mean_all <= OVERALL_TARGET
            and max_all is not None
            and max_all <= ROW_TARGET
            and per_table
        )
        out["overall"] = overall
        out["throughput_targets_met"] = ok
    if memory is not None:
        mem = out["memory"] = memory_stats(memory)
        ok = ok and mem["targets_met"]
    out["targets_met"] = ok
    return out


def memory_stats(memory: Sequence[MemoryResult]) -> MemoryStats:
    """Mean and max absolute error of the printed/formula figures, bounds met and missed, refusals."""
    errors = [abs(m.error) for m in memory if m.error is not None]
    bounds = [m for m in memory if m.kind == "bound"]
    refused = sum(m.predicted_bytes is None for m in memory)
    within = sum(e <= MEMORY_TARGET for e in errors)
    return {
        "figures": len(memory),
        "refused": refused,
        "mean_abs_error": sum(errors) / len(errors) if errors else None,
        "max_abs_error": max(errors) if errors else None,
        "within_10pct": within,
        "bounds": len(bounds),
        "bounds_met": sum(bool(m.fits) for m in bounds),
        "targets_met": refused == 0 and within == len(errors) and all(m.fits for m in bounds),
    }
