"""``commlens runs`` (list, show, tag, delete), ``commlens show`` and ``commlens export``: stored runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from commlens.cli.app import app, command_group, fail
from commlens.cli.errors import errors_as_exit, fail_with
from commlens.cli.options import DB
from commlens.cli.text import terminal_safe

if TYPE_CHECKING:
    from commlens.results.records import Measurement, Run
    from commlens.store import CorruptRunError, RunFilter, RunSummary, Store

runs_app = command_group("runs", no_args_is_help=False)

# Options shared by several commands (Typer only reads them, so sharing is safe).
_TAG = typer.Option(None, help="only runs with this tag")
_OP = typer.Option(None, help="only runs measuring this op")
_SINCE = typer.Option(None, help="only runs started at or after this ISO date/time")
_UNTIL = typer.Option(None, help="only runs started at or before this ISO date/time (a date: to the end of that day)")
_FINGERPRINT = typer.Option(None, help="only runs whose system fingerprint starts with this")
_LIMIT = typer.Option(50, help="at most this many runs, newest first")
_JSON = typer.Option(False, "--json", help="print JSON")


def open_store(db: str | None) -> Store:
    """The store at ``db`` (or the default), never created here: these commands read or change stored
    runs. A store that is missing or cannot be opened ends the command (exit 2)."""
    from commlens.store import Store

    with errors_as_exit(escape_all=True):
        return Store.open(db, create=False)


def warn_corrupt(error: CorruptRunError) -> None:
    """A listing goes on past a run that cannot be read back, saying so on stderr."""
    print(
        f"warning: {terminal_safe(str(error))}; skipped (`commlens db status --runs` lists all such)", file=sys.stderr
    )


# -- runs list -----------------------------------------------------------------------------


@runs_app.command("list")
def runs_list(
    ctx: typer.Context,
    tag: str | None = _TAG,
    op: str | None = _OP,
    since: str | None = _SINCE,
    until: str | None = _UNTIL,
    fingerprint: str | None = _FINGERPRINT,
    limit: int = _LIMIT,
    db: str | None = DB,
    as_json: bool = _JSON,
) -> None:
    """List stored runs, newest first."""
    db = _db(ctx, db)
    if ctx.invoked_subcommand is None:  # `runs list`, or `runs` alone (this is also the group's callback)
        from commlens.store import RunFilter

        with errors_as_exit(escape_all=True):
            where = RunFilter(tag=tag, op=_op_name(op), since=since, until=until, fingerprint=fingerprint)
        _list(where, limit=limit, db=db, as_json=as_json)
    else:
        ctx.obj = {"db": db}  # `commlens runs --db X delete ...` works too


runs_app.callback(invoke_without_command=True)(runs_list)


def _op_name(op: str | None) -> str | None:
    """The catalog name of ``--op`` (nccl-tests spellings such as ``allreduce`` accepted)."""
    if op is None:
        return None
    from commlens.ops import get_op

    with errors_as_exit("--op: "):
        return get_op(op).name


def _db(ctx: typer.Context, db: str | None) -> str | None:
    """A subcommand's --db, else the one given to `commlens runs`."""
    parent = ctx.obj or {}
    return db if db is not None else parent.get("db")


def _list(where: RunFilter, *, limit: int, db: str | None, as_json: bool) -> None:
    from commlens.store import RunFilter
    from commlens.store.db import NoStoreError, StoreError, db_url, default_db_url, sqlite_file_missing

    try:
        if sqlite_file_missing(default_db_url() if db is None else db_url(db)):
            raise NoStoreError("no store yet")  # said without loading the ORM (SQLAlchemy) at all
        rows = _plain_list(db, where, limit)
        if rows is None:
            from commlens.store import Store

            store = Store.open(db, create=False)
    except NoStoreError:  # a fresh install: nothing to list, and nothing created by listing
        rows = []
    except StoreError as e:
        fail_with(e, escape_all=True)
    if rows is None:
        with store:
            with errors_as_exit(escape_all=True):
                rows = store.list_runs(where, limit=limit, on_corrupt=warn_corrupt)
    if as_json:
        print(json.dumps([r.as_dict() for r in rows], indent=1))
        return
    if not rows:
        print("no runs match" if where != RunFilter() else "no runs stored yet: `commlens bench` stores one")
        return
    print_run_table(rows)


def _plain_list(db: str | None, where: RunFilter, limit: int) -> list[RunSummary] | None:
    """The listing read without SQLAlchemy (``commlens.store.plain``), or None: ``Store`` reads it."""
    from commlens.store import NotPlain, plain_store

    try:
        with plain_store(db) as plain:
            return plain.list_runs(where, limit=limit)
    except NotPlain:
        return None


def print_run_table(rows: list[RunSummary]) -> None:
    """One line per run, columns aligned (a Rich table: plain text in pipes, never wrapped)."""
    from commlens.cli.tables import new_table, print_table, right
    from commlens.results.units import format_gbps

    table = new_table(
        "run",
        "started (UTC)",
        "status",
        right("ranks"),
        "backend",
        "ops",
        right("rows"),
        right("avg busbw GB/s"),
        "tag",
        "revision",
        "fingerprint",
    )
    for r in rows:
        cells = (
            r.run_id[:12],
            r.started_at_utc.strftime("%Y-%m-%d %H:%M:%S"),
            r.status,
            str(r.world_size),
            r.backend,
            ",".join(r.ops),
            str(r.nmeasurements),
            format_gbps(r.avg_busbw_bytes_per_s, decimals=3),
            r.tag or "-",
            r.revision or "-",
            r.fingerprint[:8],
        )
        table.add_row(*(terminal_safe(cell) for cell in cells))
    print_table(table)


# -- runs show / commlens show ---------------------------------------------------------------


@runs_app.command("show")
def runs_show(
    ctx: typer.Context,
    run: str = typer.Argument(..., help="run id or a unique prefix of at least 4 characters (or tag: with one run)"),
    db: str | None = DB,
    as_json: bool = typer.Option(False, "--json", help="print the run as commlens JSON"),
) -> None:
    """Print a stored run again: the nccl-tests table, or its JSON."""
    _show(run, _db(ctx, db), as_json)


@app.command("show")
def show_cmd(
    run: str = typer.Argument(..., help="run id or a unique prefix of at least 4 characters (or tag: with one run)"),
    db: str | None = DB,
    as_json: bool = typer.Option(False, "--json", help="print the run as commlens JSON"),
) -> None:
    """Print a stored run again: the nccl-tests table, or its JSON (same as `commlens runs show`)."""
    _show(run, db, as_json)


def _show(run: str, db: str | None, as_json: bool) -> None:
    from commlens.results.jsonfmt import run_to_dict
    from commlens.results.table import BenchRow, SweepHeader, run_table_lines, system_header_lines
    from commlens.store.refs import NotOneRunError, resolve_run_ids

    found = _plain_run(run, db)  # the table is built from the Run's records, its JSON from run_to_dict
    if found is None:
        with open_store(db) as store:
            with errors_as_exit(escape_all=True):
                ids = resolve_run_ids(run, store)
                if len(ids) != 1:
                    raise NotOneRunError(run, len(ids))
                found = store.get_run(ids[0])
    if as_json:
        print(json.dumps(run_to_dict(found), indent=1))
        return
    # one row per key and size, its placements in the run's order; a live job's rows (commlens.monitor) are per
    # process group: one table each, never merged
    placements: dict[tuple[str, str, str, str, str | None, int | None, int], list[Measurement]] = {}
    for m in found.measurements:
        key = (m.group or "", m.op, m.algo, m.dtype, m.redop, m.root, m.size_bytes)
        placements.setdefault(key, []).append(m)
    rows = {key: BenchRow(*key[1:], count=ms[0].count, measurements=tuple(ms)) for key, ms in placements.items()}
    checked = [m.nwrong for m in found.measurements if m.nwrong is not None]
    cfg = found.config.as_dict()
    # the bench preamble only for a config that has its fields (an ingested PARAM run has "ops" of its own)
    sweep = SweepHeader.of(cfg)
    lines = system_header_lines(found.run_id, sweep, found.system) if sweep else []
    lines += [f"# {n}" for n in found.notes]
    tables = cfg.get("runs")  # an ingested nccl-tests file's tables
    lines += [
        f"# op {r['op']}: {r['op_from']}"  # how an ingested nccl-tests table's op was decided
        for r in (tables if isinstance(tables, list) else [])
        if isinstance(r, dict) and "op_from" in r
    ]
    groups = sorted({key[0] for key in rows})
    if groups == [""]:
        lines += run_table_lines(rows.values(), sum(checked) if checked else None, found.avg_busbw_bytes_per_s())
    for group in groups if groups != [""] else []:
        mine = [row for key, row in rows.items() if key[0] == group]
        busbw = [m.busbw_bytes_per_s for row in mine for m in row.measurements if m and m.op != "barrier"]
        lines.append(f"# process group {group or '-'}")
        lines += run_table_lines(mine, sum(checked) if checked else None, sum(busbw) / len(busbw) if busbw else 0.0)
    from commlens.cli.expect_cmd import summary_for

    lines += summary_for(found)  # the verdict kept with the run at ingest/bench when current, else judged now
    lines.append(
        f"# status {found.status}  started {found.started_at}  tag {found.tag or '-'}  "
        f"revision {found.revision or '-'}  fingerprint {found.system.fingerprint()}"
    )
    print("\n".join(terminal_safe(line) for line in lines))


def _plain_run(ref: str, db: str | None) -> Run | None:
    """The one run ``ref`` names, read without SQLAlchemy (``commlens.store.plain``), or None: ``Store`` reads it
    (and says what is wrong, when something is)."""
    from commlens.errors import CommlensError
    from commlens.store import plain_store
    from commlens.store.refs import resolve_run_ids

    try:
        with plain_store(db) as plain:
            ids = resolve_run_ids(ref, plain)  # type: ignore[arg-type]  # the reads resolve_run_ids makes
            return plain.get_run(ids[0]) if len(ids) == 1 else None
    except CommlensError:
        return None


# -- runs tag / delete ---------------------------------------------------------------------------


@runs_app.command("tag")
def runs_tag(
    ctx: typer.Context,
    run: str = typer.Argument(..., help="run id or a unique prefix of at least 4 characters (or tag: with one run)"),
    tag: str | None = typer.Argument(None, help="the new tag (replaces the run's tag)"),
    remove: bool = typer.Option(False, "--remove", help="remove the run's tag instead"),
    db: str | None = DB,
) -> None:
    """Set or replace a run's tag, or remove it with --remove."""

    if remove == (tag is not None):
        fail("give either a TAG or --remove", 2)
    with open_store(_db(ctx, db)) as store:
        with errors_as_exit(escape_all=True):
            run_id, previous = store.set_tag(run, None if remove else tag)
    was = f" (was {previous})" if previous is not None else ""
    done = f"run {run_id}: tag removed{was}" if remove else f"run {run_id}: tag {tag}{was}"
    print(terminal_safe(done))


@runs_app.command("delete")
def runs_delete(
    ctx: typer.Context,
    runs: list[str] = typer.Argument(..., help="run ids or unique prefixes of at least 4 characters"),
    yes: bool = typer.Option(False, "--yes", "-y", help="delete without asking"),
    db: str | None = DB,
) -> None:
    """Delete runs with their measurements and samples (asks first unless --yes)."""

    with open_store(_db(ctx, db)) as store:
        with errors_as_exit(escape_all=True):
            run_ids = list(dict.fromkeys(store.resolve(ref) for ref in runs))
        what = _plural(len(run_ids), "run")
        if not yes:
            if not sys.stdin.isatty():
                fail(f"refusing to delete {what} without --yes (no terminal to confirm on)", 2)
            if not typer.confirm(terminal_safe(f"delete {what} ({', '.join(run_ids)})?"), default=False):
                print("nothing deleted")
                return
        with errors_as_exit(escape_all=True):
            deleted = store.delete_runs(run_ids)
    print(terminal_safe(f"deleted {what}: {', '.join(deleted)}"))


# -- export ----------------------------------------------------------------------------------


@app.command("export")
def export_cmd(
    runs: list[str] | None = typer.Argument(
        None, help="runs to export (ids, prefixes or tags; run: or tag: in front says which); default: all that match"
    ),
    tag: str | None = _TAG,
    op: str | None = _OP,
    since: str | None = _SINCE,
    until: str | None = _UNTIL,
    fingerprint: str | None = _FINGERPRINT,
    fmt: str | None = typer.Option(
        None,
        "--format",
        help="csv (one row per measurement) or json (a list of commlens runs); "
        "default: from the output's suffix, else csv",
    ),
    output: str = typer.Option("-", "--output", "-o", help="file to write (atomically); - for stdout"),
    as_json: bool = typer.Option(False, "--json", help="the same as --format json"),
    db: str | None = DB,
) -> None:
    """Export stored runs, oldest first, to CSV or JSON."""
    from commlens.errors import CommlensError
    from commlens.store import ExportFormat, RunFilter, export_runs
    from commlens.store.refs import resolve_run_ids

    op = _op_name(op)
    if as_json and fmt not in (None, "json"):
        fail(f"--json and --format {fmt} contradict each other: give one", 2)
    if as_json:
        fmt = "json"
    if fmt is None:
        fmt = "json" if output.lower().endswith(".json") else "csv"
    if fmt not in ("csv", "json"):
        fail(f"--format must be csv or json, got {fmt!r}", 2)
    export_format: ExportFormat = "json" if fmt == "json" else "csv"
    if output != "-" and Path(output).is_dir():
        fail(f"--output {output} is a directory", 2)
    with open_store(db) as store:
        try:
            run_ids = [i for ref in runs for i in resolve_run_ids(ref, store)] if runs else None
            where = RunFilter(tag=tag, op=op, since=since, until=until, fingerprint=fingerprint, run_ids=run_ids)
            summaries = store.list_runs(where, limit=None, on_corrupt=warn_corrupt)
            oldest_first = [s.run_id for s in reversed(summaries)]
            loaded = store.iter_runs(oldest_first, on_corrupt=warn_corrupt)
            counts = export_runs(loaded, output, export_format)
        except CommlensError as e:
            fail_with(e, escape_all=True)
        except BrokenPipeError:  # `commlens export | head`: the reader has all it wanted
            import os

            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(0) from None
        except OSError as e:
            fail(f"cannot write {output}: {e.strerror or e}", 2)
    if output != "-":
        print(
            f"exported {_plural(counts.measurements, 'measurement')} of {_plural(counts.runs, 'run')} "
            f"to {output} ({fmt})",
            file=sys.stderr,
        )


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"
