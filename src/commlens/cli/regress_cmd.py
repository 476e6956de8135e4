"""commlens compare and commlens detect: the regression gate.

Exit codes: 1 when a regression is found (so CI can gate on it), 0 otherwise,
2 for bad input (an unknown run, tag or file; a bad option).
"""

from __future__ import annotations

import json
import sys
import warnings
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from commlens.cli.app import app, fail, say
from commlens.cli.errors import errors_as_exit
from commlens.cli.options import DB

if TYPE_CHECKING:
    from collections.abc import Callable

    from commlens.regress import CompareSettings, DetectSettings
    from commlens.regress.compare import RowThreshold, Statistic
    from commlens.results.records import MeasurementKey, Run
    from commlens.store import MeasurementFilter, Store
    from commlens.store.series_meta import Threshold

_Settings = TypeVar("_Settings", "CompareSettings", "DetectSettings")
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
    from commlens import ingest
    from commlens.ingest import IngestWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", IngestWarning)
        try:
            with errors_as_exit(f"{what}: "):
                runs = list(ingest.run(ingest.IngestRequest(path)))
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


def _given(defaults: _Settings, **options: Any) -> _Settings:
    """The settings ``defaults``, with each option given on the command line (not None) in its place."""
    import dataclasses

    return dataclasses.replace(defaults, **{name: value for name, value in options.items() if value is not None})


def _statistic(text: str) -> Statistic:
    """``--statistic`` as the settings' literal; the settings' own error for anything else."""
    from commlens.regress.compare import CompareSettingsError

    if text == "median":
        return "median"
    if text == "mean":
        return "mean"
    raise CompareSettingsError(f"statistic must be median or mean, got {text!r}")


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
    as_json: bool = typer.Option(False, "--json", help="print JSON (the same as --format json)"),
    db: str | None = DB,
) -> None:
    """A/B comparison judged on the spread between rounds or runs: per row, the ratio of typical times, its 95%
    CI, a p-value and a verdict.

    Each row is judged with the stored threshold that matches it (`commlens threshold set`) unless
    --min-change or --alpha is given. Exit code 1 when any row is a regression, 0 otherwise, 2 for bad input.
    """
    from commlens.regress import CompareRequest, CompareSettings, run_compare
    from commlens.results.records import FloorKey
    from commlens.store.refs import is_baseline_ref  # not series_settings: that loads the store's ORM

    if noise_floor is not None and no_floors:
        fail("--noise-floor and --no-noise-floors contradict each other: give one")
    if as_json and fmt is CompareFormat.markdown:
        fail("--json and --format markdown contradict each other: give one")
    fmt = CompareFormat.json if as_json else fmt
    change = None if min_change is None else parse_fraction(min_change, "--min-change")
    with errors_as_exit():
        settings = _given(
            CompareSettings(),
            min_change=change,
            alpha=alpha,
            min_samples=min_samples,
            statistic=None if statistic is None else _statistic(statistic),
        )
    floor = None if noise_floor is None else parse_fraction(noise_floor, "--noise-floor")
    if floor == 0.0:
        fail("--noise-floor 0: a floor must be > 0 (use --no-noise-floors for none)")
    explicit = [name for name, value in (("min_change", change), ("alpha", alpha)) if value is not None]
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
        request = CompareRequest(tuple(base_runs), tuple(cand_runs), settings, base, candidate, floors, thresholds)
        report = run_compare(request)
    if fmt is CompareFormat.json:
        print(json.dumps(report.as_dict(), indent=1))
    elif fmt is CompareFormat.markdown:
        from commlens.regress.render import compare_markdown

        print(compare_markdown(report))
    else:
        for w in report.warnings:
            print(f"warning: {w}", file=sys.stderr)
        from commlens.regress.render import compare_table_lines

        print("\n".join(compare_table_lines(report)))
    raise typer.Exit(1 if report.has_regression else 0)


def _stored_floors(store: _LazyStore, runs: list[Run]) -> dict | None:
    """The stored noise floors of these runs' systems; none when there is no store yet (two files compared)."""
    fingerprints = {r.system.fingerprint() for r in runs}
    if store.store is None and not store.exists():
        return None
    from commlens.store import NoStoreError, StoreError

    try:  # SQLAlchemy: only once there is a store to read
        return store().floors.load(fingerprints)
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

    try:  # SQLAlchemy: only once there is a store to read
        return store().thresholds.list()
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
    from commlens.store import BaselineError

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
    db: str | None = DB,
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """Change points in the history of every stored series (op, size, dtype, placement, system, tag).

    Each series is judged with the stored threshold that matches it (`commlens threshold set`: min change,
    detect alpha) unless --min-change or --alpha is given. Exit code 1 when a change towards slower is found in the window (--since), 0 otherwise.
    """
    from commlens.ops import get_op
    from commlens.regress import DetectRequest, DetectSettings, MeanHistory, parse_utc, run_detect
    from commlens.results.records import DTYPE_SIZES
    from commlens.results.units import parse_size
    from commlens.store import MeasurementFilter

    change = None if min_change is None else parse_fraction(min_change, "--min-change")
    with errors_as_exit():
        settings = _given(DetectSettings(), min_change=change, alpha=alpha)
        since_utc = None if since is None else parse_utc(since)
        size_bytes = None if size is None else parse_size(size)
    if op is not None:
        with errors_as_exit("--op: "):
            op = get_op(op).name  # nccl-tests spellings too: allreduce
    if dtype is not None and dtype not in DTYPE_SIZES:
        fail(f"--dtype {dtype!r}: expected one of {', '.join(DTYPE_SIZES)}")
    explicit = [name for name, value in (("min_change", change), ("alpha", alpha)) if value is not None]
    where = MeasurementFilter(op=op, dtype=dtype, size_bytes=size_bytes, tag=tag, fingerprint=fingerprint)
    store = _LazyStore(db)
    try:
        read = None if save else _plain_history(db, where, thresholds_apply=len(explicit) < 2)
        settings_for = None
        if read is not None:
            runs, points, floors = read
        else:
            from commlens.regress.series_settings import detect_thresholds

            with errors_as_exit():
                runs, points = store.get().mean_history(where)
                floors = store.get().floors.load(None if fingerprint is None else [fingerprint])
                stored = [] if len(explicit) == 2 else store.get().thresholds.list()
            settings_for = detect_thresholds(stored, settings, explicit=explicit) if stored else None
        report = run_detect(
            DetectRequest(MeanHistory(runs, points), settings, by.value, since_utc, floors, settings_for)
        )
        if save:
            with errors_as_exit():
                saved = store.get().change_points.save(report.changes, report.examined)
            say("", f"saved {saved} change point{'s' if saved != 1 else ''} of {len(report.examined)} series")
    finally:
        store.close()
    if as_json:
        print(json.dumps(report.as_dict(), indent=1))
    else:
        from commlens.regress.render import detect_table_lines

        print("\n".join(detect_table_lines(report)))
    raise typer.Exit(1 if report.regressions else 0)


def _plain_history(db: str | None, where: MeasurementFilter, *, thresholds_apply: bool) -> tuple[Any, ...] | None:
    """detect's reads (history, noise floors) of a SQLite store without SQLAlchemy (``commlens.store.plain``), or
    None: ``Store`` reads them (and says what is wrong, when something is). Stored thresholds, where they apply,
    are left to ``Store`` too."""
    from commlens.store import NotPlain, plain_store

    try:
        with plain_store(db) as plain:
            if thresholds_apply and plain.has_thresholds():
                return None
            return (*plain.mean_history(where), plain.floors(where.fingerprint))
    except NotPlain:
        return None
