"""The regression gate's reports as text: compare's table and pull-request comment, detect's table.

One renderer for every face: ``commlens compare`` / ``detect`` print these, and the dashboard's compare page
offers the same markdown comment.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from commlens.results.text_tables import commented_table_lines

if TYPE_CHECKING:
    from commlens.regress.compare import CompareReport, ComparisonRow, RowThreshold
    from commlens.regress.history import DetectReport

__all__ = ["commented_table_lines", "compare_markdown", "compare_table_lines", "detect_table_lines"]


def _placement(in_place: bool) -> str:
    return "in" if in_place else "out"


def _us(seconds: float) -> str:
    from commlens.results.units import format_us

    return format_us(seconds)


def _gbps(bytes_per_s: float) -> str:
    from commlens.results.units import format_gbps

    return format_gbps(bytes_per_s)


def _ci(row: ComparisonRow) -> str:
    return "-" if row.ci_low is None else f"{row.ci_low:.3f}-{row.ci_high:.3f}"


def _p(p: float | None) -> str:
    return "-" if p is None else f"{p:.2g}"


def _side_text(label: str, runs: int) -> str:
    return f"{label} ({runs} run{'s' if runs != 1 else ''})"


def _settings_text(report: CompareReport) -> str:
    s = report.settings
    return (
        f"min change {s.min_change:.0%}, alpha {s.alpha:g} (Welch t on ln time, Benjamini-Hochberg over rows), "
        f"{s.confidence:.0%} CI; unit: rounds or runs, each summarised by its {s.statistic}"
    )


def _n_text(r: ComparisonRow) -> str:
    """Observations a side: runs (``3r``) or rounds of one run (``5x``)."""

    def one(runs: int, rounds: int) -> str:
        return f"{runs}r" if runs >= 2 else f"{rounds}x"

    return f"{one(r.base_runs, r.base_rounds)}/{one(r.candidate_runs, r.candidate_rounds)}"


def _spread_text(r: ComparisonRow) -> str:
    spreads = [x for x in (r.base_spread, r.candidate_spread) if x is not None]
    from commlens.results.units import format_percent

    text = format_percent(max(spreads)) if spreads else "-"
    return text + (f" (floor {format_percent(r.noise_floor)})" if r.noise_floor is not None else "")


def _threshold_text(t: RowThreshold | None) -> str:
    """``stored: min 5%, alpha 0.05`` for a row judged with a stored threshold, ``-`` otherwise."""
    from commlens.results.units import format_percent

    return "-" if t is None else f"stored: min {format_percent(t.min_change)}, alpha {t.alpha:g}"


def _compare_cells(report: CompareReport) -> tuple[list[str], list[list[str]]]:
    """Column names and cells shared by the table and the markdown outputs."""
    from commlens.results.units import format_size

    show_algo = any(r.algo != "builtin" for r in report.rows)
    show_root = any(r.root is not None for r in report.rows)
    show_group = any(r.group is not None for r in report.rows)  # a live job's rows (commlens.monitor)
    show_threshold = any(r.threshold is not None for r in report.rows)  # rows judged with a stored threshold
    names = ["op"] + (["algo"] if show_algo else []) + ["size", "dtype", "redop"] + (["root"] if show_root else [])
    names = (["group"] if show_group else []) + names
    names += [
        "place",
        "n",
        "base us",
        "cand us",
        "base GB/s",
        "cand GB/s",
        "spread",
        "ratio",
        "95% CI",
        "p adj",
        "verdict",
        "reason",
    ] + (["threshold"] if show_threshold else [])
    cells = []
    for r in report.rows:
        row = (
            [r.op]
            + ([r.algo] if show_algo else [])
            + [format_size(r.size_bytes), r.dtype, "-" if r.redop is None else r.redop]
        )
        row += [str(-1 if r.root is None else r.root)] if show_root else []  # -1 beside rooted ops, as before
        row = ([r.group or "-"] if show_group else []) + row
        row += [
            _placement(r.in_place),
            _n_text(r),
            _us(r.base_time_s),
            _us(r.candidate_time_s),
            _gbps(r.base_busbw_bytes_per_s),
            _gbps(r.candidate_busbw_bytes_per_s),
            _spread_text(r),
            f"{r.ratio:.3f}",
            _ci(r),
            _p(r.p_adjusted),
            r.verdict,
            r.reason,
        ]
        row += [_threshold_text(r.threshold)] if show_threshold else []
        cells.append(row)
    return names, cells


_COMPARE_NUMBERS = frozenset(
    {"size", "n", "base us", "cand us", "base GB/s", "cand GB/s", "spread", "ratio", "p adj", "root"}
)


def compare_table_lines(report: CompareReport) -> list[str]:
    names, cells = _compare_cells(report)
    head = [
        f"# base: {_side_text(report.base.label, len(report.base.run_ids))}   "
        f"candidate: {_side_text(report.candidate.label, len(report.candidate.run_ids))}",
        f"# {_settings_text(report)}",
    ]
    return head + commented_table_lines(names, cells, _COMPARE_NUMBERS) + [f"# {report.summary_line()}"]


def compare_markdown(report: CompareReport, *, url: str | None = None, max_rows: int | None = None) -> str:
    """The comparison as a pull-request comment (``compare --format markdown`` and the dashboard's compare page
    alike): the summary first, then the rows, regressions at the top, improvements, unknown, no change; at
    most ``max_rows`` of them (the rest counted), a link back to ``url`` when given. No emoji; stored text
    cannot break out of its code span or table cell."""
    names, cells = _compare_cells(report)
    priority = {"regression": 0, "improvement": 1, "unknown": 2, "no change": 3}
    verdict_col = names.index("verdict")
    cells = sorted(cells, key=lambda c: priority[c[verdict_col]])
    for c in cells:
        if c[verdict_col] == "regression":
            c[verdict_col] = "**regression**"
    shown = cells if max_rows is None else cells[:max_rows]
    lines = [
        "### commlens compare",
        "",
        f"Base {_code(report.base.label)} ({_runs(len(report.base.run_ids))}) vs candidate "
        f"{_code(report.candidate.label)} ({_runs(len(report.candidate.run_ids))})",
        "",
        f"**{report.summary_line()}**",
        "",
        "| " + " | ".join(names) + " |",
        "|" + "|".join("---:" if n in _COMPARE_NUMBERS else "---" for n in names) + "|",
    ]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in shown]
    if len(shown) < len(cells):
        more = f"{len(cells) - len(shown)} more rows" + (" on the page" if url else " (--json has them all)")
        lines.append("| " + " | ".join([more] + [""] * (len(names) - 1)) + " |")
    if report.warnings:
        lines += [""] + [f"> warning: {_cell(w)}" for w in report.warnings]
    lines += [
        "",
        f"<sub>{_settings_text(report)}; ratio = candidate / base typical time; n = runs (r) or rounds "
        f"of one run (x) a side</sub>",
    ]
    if url:
        lines += ["", f"[Open the comparison in commlens]({url})"]
    return "\n".join(lines)


def _runs(n: int) -> str:
    return f"{n} run{'s' if n != 1 else ''}"


def _code(text: str) -> str:
    """Stored text (a tag, a file name) as a markdown code span it cannot leave."""
    return "`" + text.replace("`", "'").replace("\n", " ") + "`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# -- detect output ----------------------------------------------------------------------------


def _detect_cells(report: DetectReport) -> tuple[list[str], list[list[str]]]:
    from commlens.results.units import format_percent, format_size

    names = [
        "op",
        "size",
        "dtype",
        "place",
        "tag",
        "system",
        "at (UTC)",
        "run",
        "revision",
        "points",
        "before us",
        "after us",
        "change",
        "p",
        "direction",
    ]
    show_threshold = any(c.settings is not None for c in report.changes)
    names += ["threshold"] if show_threshold else []
    cells = []
    for c in report.changes:
        k = c.series.key
        op = k.op if k.algo == "builtin" else f"{k.op}/{k.algo}"
        op = op if k.group is None else f"{op} on {k.group}"  # a live job's series is per process group
        cells.append(
            [
                op,
                format_size(k.size_bytes),
                k.dtype,
                _placement(k.in_place),
                c.series.tag or "-",
                c.series.fingerprint[:8],
                c.started_at.strftime("%Y-%m-%d %H:%M"),
                c.run_id[:12],
                c.revision or "-",
                f"{c.index}/{c.points}",
                _us(c.mean_before_s),
                _us(c.mean_after_s),
                format_percent(c.change, sign=True),
                f"{c.p_value:.2g}",
                c.direction,
            ]
            + (
                [
                    "-"
                    if c.settings is None
                    else f"stored: min {format_percent(c.settings.min_change)}, alpha {c.settings.alpha:g}"
                ]
                if show_threshold
                else []
            )
        )
    return names, cells


def detect_table_lines(report: DetectReport) -> list[str]:
    s = report.settings
    floored = (
        f"; changes beyond {s.floor_multiple:g} noise floor{'s' if s.floor_multiple != 1 else ''} in "
        f"{report.floored} series"
        if report.floored
        else ""
    )
    stored = (
        f"; stored thresholds in {report.thresholded} series (`commlens threshold list`)" if report.thresholded else ""
    )
    lines = [
        f"# ordered by {report.order}; min change {s.min_change:.0%}, alpha {s.alpha:g}, "
        f"at least {s.min_segment} points a level{floored}{stored}"
    ]
    names, cells = _detect_cells(report)
    if cells:
        lines += commented_table_lines(
            names, cells, frozenset({"size", "points", "before us", "after us", "change", "p"})
        )
    if report.too_short:
        lines.append(f"# {report.too_short} series too short to hold a change (fewer than {2 * s.min_segment} points)")
    lines.append(f"# {report.summary_line()}")
    return lines
