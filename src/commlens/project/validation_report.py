"""The validation of the projection as one report with its verdict: ``validation_report(tables)``.

``commlens project validate`` prints it; a Python caller (the benchmark, a notebook) gets the same figures
and the same verdict. Targets (issue 27): every table's mean absolute error <= 8% (SC'21 <= 3%), every row
within 20%, all rows together <= 6%, none refused; memory: every printed or formula figure within 10%,
every bound met.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from commlens.project.validate import (
    MEGATRON_TABLE1,
    MEMORY,
    SC21,
    BandCoverage,
    MemoryResult,
    SetResult,
    band_coverage,
    load_memory_figures,
    load_set,
    load_user_file,
    shipped_band_coverage,
    table_names,
    validate_memory,
    validate_set,
    validate_tables,
)

__all__ = [
    "MemoryStats",
    "TableStats",
    "ValidationReport",
    "ValidationSummary",
    "describe_table",
    "file_report",
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


@dataclass(frozen=True)
class TableStats:
    """One table's rows (or all of them) against the published figures."""

    rows: int
    refused: int  # rows the model would not project
    mean_abs_error: float | None  # over the projected rows; None when none was
    max_abs_error: float | None

    def as_dict(self) -> dict[str, object]:
        return {
            "rows": self.rows,
            "refused": self.refused,
            "mean_abs_error": self.mean_abs_error,
            "max_abs_error": self.max_abs_error,
        }


@dataclass(frozen=True)
class MemoryStats:
    """The memory figures against the published ones, and the memory verdict."""

    figures: int
    refused: int
    mean_abs_error: float | None  # over the printed and formula figures
    max_abs_error: float | None
    within_10pct: int
    bounds: int  # figures that are bounds (fits or not), not values
    bounds_met: int
    targets_met: bool

    def as_dict(self) -> dict[str, object]:
        return {
            "figures": self.figures,
            "refused": self.refused,
            "mean_abs_error": self.mean_abs_error,
            "max_abs_error": self.max_abs_error,
            "within_10pct": self.within_10pct,
            "bounds": self.bounds,
            "bounds_met": self.bounds_met,
            "targets_met": self.targets_met,
        }


@dataclass(frozen=True)
class ValidationSummary:
    """Per table and overall, memory, the band's coverage, and the verdict: ``targets_met``."""

    tables: Mapping[str, TableStats]
    overall: TableStats | None  # all throughput rows together; None without any
    throughput_targets_met: bool | None  # None without throughput rows
    memory: MemoryStats | None  # None without the memory figures
    targets_met: bool  # the verdict: every target of the throughput rows and memory figures asked for met
    band_coverage: BandCoverage | None = None  # in a report

    def as_dict(self) -> dict[str, object]:
        """The summary as ``project validate --json`` prints it (a part absent when it was not asked for)."""
        out: dict[str, object] = {"tables": {name: st.as_dict() for name, st in self.tables.items()}}
        if self.overall is not None:
            out["overall"] = self.overall.as_dict()
            out["throughput_targets_met"] = self.throughput_targets_met
        if self.memory is not None:
            out["memory"] = self.memory.as_dict()
        out["targets_met"] = self.targets_met
        if self.band_coverage is not None:
            out["band_coverage"] = self.band_coverage
        return out


@dataclass(frozen=True)
class ValidationReport:
    """Every projected row (in or out of its family's band), the memory figures when asked, and the summary with
    the verdict, worked out once when the report is built."""

    rows: tuple[SetResult, ...]
    memory: tuple[MemoryResult, ...] | None
    band_coverage: BandCoverage
    summary: ValidationSummary = field(init=False)

    def __post_init__(self) -> None:
        summary = replace(validation_summary(self.rows, self.memory), band_coverage=self.band_coverage)
        object.__setattr__(self, "summary", summary)

    @property
    def targets_met(self) -> bool:
        """The verdict: ``project validate`` exits 1 when it is false."""
        return self.summary.targets_met

    def as_dict(self) -> dict[str, object]:
        """What ``project validate --json`` prints: the rows, then the summary (memory with its figures)."""
        out: dict[str, object] = {"rows": [r.as_dict() for r in self.rows], **self.summary.as_dict()}
        if self.memory is not None and self.summary.memory is not None:
            figures = {"figures": [m.as_dict() for m in self.memory]}
            out["memory"] = {**self.summary.memory.as_dict(), **figures}  # the list in the count's place
        return out


def validation_report(tables: Sequence[str], accelerators: Sequence[str] | None = None) -> ValidationReport:
    """Validate the published ``tables`` (names from ``table_names()``; ``memory`` for the memory figures)."""
    rows, coverage = band_coverage(validate_tables([n for n in tables if n != MEMORY], accelerators=accelerators))
    memory = tuple(validate_memory(accelerators=accelerators)) if MEMORY in tables else None
    return ValidationReport(tuple(rows), memory, coverage)


def file_report(path: str | Path, accelerators: Sequence[str] | None = None) -> ValidationReport:
    """Validate a table of one's own runs (``path``, in the published tables' format): each row projected and held
    against the band its projection prints (:func:`shipped_band_coverage`); or, a file in the published memory
    figures' format, each figure against the memory model's."""
    from commlens.errors import CommlensError

    table = load_user_file(path)
    if isinstance(table, list):  # memory figures of one's own runs
        memory = tuple(validate_memory(accelerators, figures=table, where=str(path)))
        return ValidationReport((), memory, {"rows": 0, "covered": 0, "coverage": None, "fit": "shipped"})
    if table.name in table_names() or table.name == MEMORY:
        # the report judges a table by its name (SC'21's 3% target): one's own runs keep a name of their own
        raise CommlensError(f"{path}: name {table.name!r} is a published table's; give the table another name")
    rows, coverage = shipped_band_coverage(validate_set(table, accelerators))
    return ValidationReport(tuple(rows), None, coverage)


def describe_table(name: str) -> str:
    """One line on the published table ``name``: what it is, its size and its source (``validate --list``)."""
    if name == SC21:
        return f"Megatron-LM SC'21 Table 1 (Narayanan et al., arXiv 2104.04473), {len(MEGATRON_TABLE1)} rows"
    if name == MEMORY:
        n = len(load_memory_figures())
        return f"published GPU-memory figures per GPU ({n} figures; docs/reference/memory.md)"
    t = load_set(name)
    return f"{t.title} ({len(t.rows)} rows; {t.source})"


def table_stats(rows: Sequence[SetResult]) -> TableStats:
    """Mean and max absolute error of the rows the model projected, and how many it refused."""
    errors = [abs(r.error) for r in rows if r.error is not None]
    return TableStats(
        rows=len(rows),
        refused=sum(r.error is None for r in rows),
        mean_abs_error=sum(errors) / len(errors) if errors else None,
        max_abs_error=max(errors) if errors else None,
    )


def validation_summary(rows: Sequence[SetResult], memory: Sequence[MemoryResult] | None = None) -> ValidationSummary:
    """Per table and overall, and the memory figures when given, each against its target; ``targets_met``."""
    tables: dict[str, list[SetResult]] = {}
    for r in rows:
        tables.setdefault(r.table, []).append(r)
    per_table_stats = {name: table_stats(t) for name, t in tables.items()}
    overall = table_stats(rows) if rows else None
    throughput_ok = None if overall is None else _throughput_met(overall, per_table_stats)
    mem = None if memory is None else memory_stats(memory)
    ok = throughput_ok is not False and (mem is None or mem.targets_met)
    return ValidationSummary(per_table_stats, overall, throughput_ok, mem, ok)


def _throughput_met(overall: TableStats, per_table: Mapping[str, TableStats]) -> bool:
    """None refused, all rows together within :data:`OVERALL_TARGET`, every row within :data:`ROW_TARGET`, and
    each table's mean within its own target."""
    tables_ok = all(
        (mean := st.mean_abs_error) is not None and mean <= (SC21_TARGET if name == SC21 else TABLE_TARGET)
        for name, st in per_table.items()
    )
    mean_all, max_all = overall.mean_abs_error, overall.max_abs_error
    return (
        overall.refused == 0
        and mean_all is not None
        and mean_all <= OVERALL_TARGET
        and max_all is not None
        and max_all <= ROW_TARGET
        and tables_ok
    )


def memory_stats(memory: Sequence[MemoryResult]) -> MemoryStats:
    """Mean and max absolute error of the printed/formula figures, bounds met and missed, refusals."""
    errors = [abs(m.error) for m in memory if m.error is not None]
    bounds = [m for m in memory if m.kind == "bound"]
    refused = sum(m.predicted_bytes is None for m in memory)
    within = sum(e <= MEMORY_TARGET for e in errors)
    return MemoryStats(
        figures=len(memory),
        refused=refused,
        mean_abs_error=sum(errors) / len(errors) if errors else None,
        max_abs_error=max(errors) if errors else None,
        within_10pct=within,
        bounds=len(bounds),
        bounds_met=sum(bool(m.fits) for m in bounds),
        targets_met=refused == 0 and within == len(errors) and all(m.fits for m in bounds),
    )
