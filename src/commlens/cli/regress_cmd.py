"""commlens compare and commlens detect: the regression gate.

Exit codes: 1 when a regression is found (so CI can gate on it), 0 otherwise,
2 for bad input (an unknown run, tag or file; a bad option).
"""

from __future__ import annotations

import json
import sys
import warnings
from enum import Enum
from typing import TYPE_CHECKING, Any

import typer

from commlens.cli.app import app, fail, say
from commlens.cli.errors import errors_as_exit

if TYPE_CHECKING:
    from collections.abc import Callable

    from commlens.regress import CompareReport, CompareSettings, ComparisonRow, DetectReport
    from commlens.regress.compare import RowThreshold
    from commlens.results.records import MeasurementKey, Run
    from commlens.store import Store
    from commlens.store.series_meta import Threshold

_REF_HELP = (
    "a run id (or unique prefix), a tag (pools every run with it) or a file (commlens JSON, nccl-tests, PARAM); "
    "write run:, tag: or file: in front to say which"
)


class CompareFormat(str, Enum):
    table = "table"
    json = "json"
    markdown = "markdown"


class DetectOrder(str, Enum):
    time = "time"
    revision = "revision"


def parse_fraction(text: str, option: str) -> float:
    """``"3%"`` or ``"0.03"`` as 0.03."""
    value = text.strip()
    try:
        number = float(value[:-1]) / 100.0 if value.endswith("%") else float(value)
    except ValueError:
        number = -1.0
    if not (0.0 <= number < 1.0):
        fail(f"{option} {text!r}: expected a percentage such as 3% or a fraction such as 0.03")
    return number


class _LazyStore:
    """The store compare and detect read, opened on first use only (comparing two files touches no database),
    through ``commlens.store.refs.StoreOnDemand``; a store that cannot be opened is an ``error: ...`` exit.
    (Composed, not subclassed, so that importing this module does not import SQLAlchemy.)"""

    def __init__(self, db: str | None) -> None:
        from commlens.store.refs import StoreOnDemand

        self.url = db
        self._open = StoreOnDemand(db, create=False)  # compare and detect only read
        self.unreadable = False  # a warning already said that the store could not be read

    @property
    def store(self) -> Store | None:
        return self._open.store

    def __call__(self) -> Store:
        return self._open()

    def get(self) -> Store:
        with errors_as_exit():
            return self._open()

    def close(self) -> None:
        self._open.__exit__()

    def exists(self) -> bool:
        """Whether a store is (or can be) open: False for a SQLite file not created yet."""
        from commlens.store import db_url, default_db_url
        from commlens.store.db import sqlite_file_missing

        if self.store is not None:
            return True
        return not sqlite_file_missing(default_db_url() if self.url is None else db_url(self.url))


def _load_file(path: str, what: str) -> list[Run]:
    from commlens.ingest import IngestWarning, load_runs

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", IngestWarning)
        try:
            with errors_as_exit(f"{what}: "):
                runs = load_runs(path)
        except OSError as e:
            fail(f"{what}: {e}")
        finally:
            for w in caught:
                if issubclass(w.category, IngestWarning):
                    print(f"warning: {w.message}", file=sys.stderr)
    return runs


def resolve_side(ref: str, what: str, store: _LazyStore) -> list[Run]:
    """The runs ``ref`` names (see ``commlens.store.refs``); ``what`` (base, candidate) leads its errors."""
    from commlens.store.refs import RunRefError, resolve_runs

    try:
        return resolve_runs(ref, store.get, lambda path: _load_file(path, what))  # ingest's errors name the file
    except RunRefError as e:
        fail(e.labelled(what))
    raise AssertionError("unreachable")


@app.command("compare")
def compare_cmd(
    base: str = typer.Argument(
        ..., help="the reference: " + _REF_HELP + "; or baseline: the candidate's series' stored baseline"
    ),
    candidate: str = typer.Argument(..., help="what is judged against it: " + _REF_HELP),
    min_change: str | None = typer.Option(
        None, "--min-change", help="smallest change of the typical time that counts: 3% or 0.03 (default 3%)"
    ),
    alpha: float | None = typer.Option(
        None, help="significance level of Welch's t on ln time, adjusted over the rows (default 0.05)"
    ),
    min_samples: int | None = typer.Option(
        None, help="rounds (or runs) needed on each side to measure its spread (default 3)"
    ),
    statistic: str | None = typer.Option(
        None, help="what summarises one round's iterations: median or mean (default median)"
    ),
    noise_floor: str | None = typer.Option(
        None,
        "--noise-floor",
        help="run-to-run sd of every row, e.g. 5% (instead of the floors `commlens noise learn` stored)",
    ),
    no_floors: bool = typer.Option(False, "--no-noise-floors", help="use no noise floor, stored or given"),
    fmt: CompareFormat = typer.Option(
        CompareFormat.table, "--format", help="table, json, or markdown for a pull-request comment"
    ),
    db: str | None = typer.Option(None, help="result store URL or SQLite path"),
) -> None:
    """A/B comparison judged on the spread between rounds or runs: per row, the ratio of typical times, its 95%
    CI, a p-value and a verdict.

    Each row is judged with the stored threshold that matches it (`commlens threshold set`) unless
    --min-change or --alpha is given. Exit code 1 when any row is a regression, 0 otherwise, 2 for bad input.
    """
    from commlens.regress import CompareSettings, compare_runs
    from commlens.results.records import FloorKey
    from commlens.store.refs import is_baseline_ref  # not series_settings: that loads the store's ORM

    if noise_floor is not None and no_floors:
        fail("--noise-floor and --no-noise-floors contradict each other: give one")
    given: dict[str, Any] = {
        "min_change": None if min_change is None else parse_fraction(min_change, "--min-change"),
        "alpha": alpha,
        "min_samples": min_samples,
        "statistic": statistic,
    }
    with errors_as_exit():
        settings = CompareSettings(**{k: v for k, v in given.items() if v is not None})
    floor = None if noise_floor is None else parse_fraction(noise_floor, "--noise-floor")
    if floor == 0.0:
        fail("--noise-floor 0: a floor must be > 0 (use --no-noise-floors for none)")
    explicit = [name for name in ("min_change", "alpha") if given[name] is not None]
    store = _LazyStore(db)
    try:
        if is_baseline_ref(base):
            cand_runs = resolve_side(candidate, "candidate", store)
            base, base_runs = _baseline_side(store, cand_runs)
        else:
            base_runs = resolve_side(base, "base", store)
            cand_runs = resolve_side(candidate, "candidate", store)
        floors = None if no_floors or floor is not None else _stored_floors(store, [*base_runs, *cand_runs])
        thresholds = None if len(explicit) == 2 else _row_thresholds(store, cand_runs, settings, explicit)
    finally:
        store.close()
    if floor is not None:
        floors = {
            FloorKey(r.system.fingerprint(), m.key): floor for r in (*base_runs, *cand_runs) for m in r.measurements
        }
    with errors_as_exit():
        report = compare_runs(
            base_runs,
            cand_runs,
            settings,
            base_label=base,
            candidate_label=candidate,
            floors=floors,
            thresholds=thresholds,
        )
    if fmt is CompareFormat.json:
        print(json.dumps(compare_to_dict(report), indent=1))
    elif fmt is CompareFormat.markdown:
        print("\n".join(compare_markdown_lines(report)))
    else:
        for w in report.warnings:
            print(f"warning: {w}", file=sys.stderr)
        print("\n".join(compare_table_lines(report)))
    raise typer.Exit(1 if report.has_regression else 0)


def _stored_floors(store: _LazyStore, runs: list[Run]) -> dict | None:
    """The stored noise floors of these runs' systems; none when there is no store yet (two files compared)."""
    fingerprints = {r.system.fingerprint() for r in runs}
    if store.store is None and not store.exists():
        return None
    from commlens.store import NoStoreError, StoreError
    from commlens.store.noise import load_floors  # SQLAlchemy: only once there is a store to read

    try:
        return load_floors(store(), fingerprints)
    except NoStoreError:
        return None
    except StoreError as e:  # the runs came from files: judge them without floors rather than not at all
        say("warning", f"noise floors not read: {e}")
        store.unreadable = True
        return None


def _baseline_side(store: _LazyStore, cand_runs: list[Run]) -> tuple[str, list[Run]]:
    """The label and runs of the stored baseline of the candidate's series (base ``baseline``)."""
    from commlens.regress.series_settings import baseline_runs

    with errors_as_exit("base 'baseline': ", escape_all=True):
        baseline, runs = baseline_runs(store(), cand_runs)
    return f"baseline {baseline.ref_text}", runs


def _stored_thresholds(store: _LazyStore) -> list[Threshold]:
    """The stored thresholds; none when there is no store yet (two files compared)."""
    if store.store is None and not store.exists():
        return []
    from commlens.store import NoStoreError, StoreError
    from commlens.store.series_meta import list_thresholds  # SQLAlchemy: only once there is a store to read

    try:
        return list_thresholds(store())
    except NoStoreError:
        return []
    except StoreError as e:  # as for the floors: judge with the command's settings rather than not at all
        if not store.unreadable:
            say("warning", f"stored thresholds not read: {e}")
        return []


def _row_thresholds(
    store: _LazyStore, cand_runs: list[Run], settings: CompareSettings, explicit: list[str]
) -> Callable[[MeasurementKey], RowThreshold | None] | None:
    """Each row's stored threshold, for the candidate's series (its one fingerprint and tag); a warning and
    none when the candidate pools several series and thresholds are stored."""
    stored = _stored_thresholds(store)
    if not stored:
        return None
    from commlens.regress.series_settings import candidate_series, compare_thresholds
    from commlens.store.series_meta import BaselineError

    try:
        fingerprint, tag = candidate_series(cand_runs)
    except BaselineError as e:
        say("warning", f"stored thresholds not used: {e}: a threshold applies to one series")
        return None
    return compare_thresholds(stored, fingerprint, tag, settings, explicit=explicit)


@app.command("detect")
def detect_cmd(
    since: str | None = typer.Option(None, help="report changes from this ISO date/time on (UTC if no zone)"),
    op: str | None = typer.Option(None, help="only this op"),
    size: str | None = typer.Option(None, help="only this message size (K/M/G suffixes)"),
    dtype: str | None = typer.Option(None, help="only this dtype"),
    tag: str | None = typer.Option(None, help="only runs with this tag"),
    fingerprint: str | None = typer.Option(None, help="only runs of this system fingerprint"),
    by: DetectOrder = typer.Option(DetectOrder.time, "--by", help="order history by run time or by revision"),
    min_change: str | None = typer.Option(
        None, "--min-change", help="smallest change of mean time reported: 3% or 0.03 (default 3%)"
    ),
    alpha: float | None = typer.Option(
        None, help="significance level of each change, Mann-Whitney U before vs after (default 0.0003)"
    ),
    save: bool = typer.Option(
        False, "--save", help="store the change points found, replacing those stored of every series examined"
    ),
    db: str | None = typer.Option(None, help="result store URL or SQLite path"),
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Change points in the history of every stored series (op, size, dtype, placement, system, tag).

    Each series is judged with the stored threshold that matches it (`commlens threshold set`: min change,
    detect alpha) unless --min-change or --alpha is given. Exit code 1 when a change towards slower is found in the window (--since), 0 otherwise.
    """
    from commlens.ops import get_op
    from commlens.regress import DetectSettings, detect_mean_history, parse_utc
    from commlens.results.records import DTYPE_SIZES
    from commlens.results.units import parse_size

    given: dict[str, Any] = {
        "min_change": None if min_change is None else parse_fraction(min_change, "--min-change"),
        "alpha": alpha,
    }
    with errors_as_exit():
        settings = DetectSettings(**{k: v for k, v in given.items() if v is not None})
        since_utc = None if since is None else parse_utc(since)
        size_bytes = None if size is None else parse_size(size)
    if op is not None:
        with errors_as_exit("--op: "):
            op = get_op(op).name  # nccl-tests spellings too: allreduce
    if dtype is not None and dtype not in DTYPE_SIZES:
        fail(f"--dtype {dtype!r}: expected one of {', '.join(DTYPE_SIZES)}")
    explicit = [name for name, value in given.items() if value is not None]
    store = _LazyStore(db)
    try:
        from commlens.regress.saved import save_change_points
        from commlens.regress.series_settings import detect_thresholds
        from commlens.store.noise import load_floors
        from commlens.store.series_meta import list_thresholds

        with errors_as_exit():
            runs, points = store.get().mean_history(
                op=op, dtype=dtype, size_bytes=size_bytes, tag=tag, fingerprint=fingerprint
            )
            floors = load_floors(store.get(), None if fingerprint is None else [fingerprint])
            stored = [] if len(explicit) == 2 else list_thresholds(store.get())
        settings_for = detect_thresholds(stored, settings, explicit=explicit) if stored else None
        report = detect_mean_history(
            runs, points, settings, order=by.value, since=since_utc, floors=floors, settings_for=settings_for
        )
        if save:
            with errors_as_exit():
                saved = save_change_points(store.get(), report)
            say("", f"saved {saved} change point{'s' if saved != 1 else ''} of {len(report.examined)} series")
    finally:
        store.close()
    if as_json:
        print(json.dumps(detect_to_dict(report), indent=1))
    else:
        print("\n".join(detect_table_lines(report)))
    raise typer.Exit(1 if report.regressions else 0)


# -- compare output ---------------------------------------------------------------------------


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
        "p",
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
            _p(r.p_value),
            r.verdict,
            r.reason,
        ]
        row += [_threshold_text(r.threshold)] if show_threshold else []
        cells.append(row)
    return names, cells


_COMPARE_NUMBERS = frozenset(
    {"size", "n", "base us", "cand us", "base GB/s", "cand GB/s", "spread", "ratio", "p", "root"}
)


def commented_table_lines(names: list[str], cells: list[list[str]], numbers: frozenset[str]) -> list[str]:
    """A Rich table (``numbers`` right-aligned) as lines: the header behind ``# `` (a comment to a reader of
    the text), the rows indented two spaces beneath it."""
    from commlens.results.text_tables import new_table, render_table, right

    table = new_table(*(right(n) if n in numbers else n for n in names), rows=cells)
    lines = render_table(table, indent=2).splitlines()
    return ["# " + lines[0][2:], *lines[1:]]


def compare_table_lines(report: CompareReport) -> list[str]:
    names, cells = _compare_cells(report)
    head = [
        f"# base: {_side_text(report.base.label, len(report.base.run_ids))}   "
        f"candidate: {_side_text(report.candidate.label, len(report.candidate.run_ids))}",
        f"# {_settings_text(report)}",
    ]
    return head + commented_table_lines(names, cells, _COMPARE_NUMBERS) + [f"# {report.summary_line()}"]


def compare_markdown_lines(report: CompareReport) -> list[str]:
    """A pull-request comment: summary first, regressions at the top of the table, no emoji."""
    names, cells = _compare_cells(report)
    priority = {"regression": 0, "improvement": 1, "unknown": 2, "no change": 3}
    verdict_col = names.index("verdict")
    cells = sorted(cells, key=lambda c: priority[c[verdict_col]])
    for c in cells:
        if c[verdict_col] == "regression":
            c[verdict_col] = "**regression**"
    lines = [
        "### commlens compare",
        "",
        f"Base `{report.base.label}` ({len(report.base.run_ids)} run{'s' if len(report.base.run_ids) != 1 else ''})"
        f" vs candidate `{report.candidate.label}` ({len(report.candidate.run_ids)} "
        f"run{'s' if len(report.candidate.run_ids) != 1 else ''})",
        "",
        f"**{report.summary_line()}**",
        "",
        "| " + " | ".join(names) + " |",
        "|" + "|".join("---:" if n in _COMPARE_NUMBERS else "---" for n in names) + "|",
    ]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in cells]
    if report.warnings:
        lines += [""] + [f"> warning: {w}" for w in report.warnings]
    lines += [
        "",
        f"<sub>{_settings_text(report)}; ratio = candidate / base typical time; n = runs (r) or rounds "
        f"of one run (x) a side</sub>",
    ]
    return lines


def compare_to_dict(report: CompareReport) -> dict[str, Any]:
    return report.as_dict()


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


def detect_to_dict(report: DetectReport) -> dict[str, Any]:
    return report.as_dict()
