"""``commlens diagnose stragglers``: late and slow ranks from profiler traces, NCCL Inspector dumps, monitor
records, nccl-tests per-process rows, Flight Recorder durations, or stored runs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from commlens.cli.app import emit, fail
from commlens.cli.diagnose_cmd import diagnose_app
from commlens.cli.errors import errors_as_exit
from commlens.cli.numbers import checked
from commlens.cli.options import DB
from commlens.cli.run_refs import run_named

if TYPE_CHECKING:
    from commlens.diagnose.late_ranks import LateRankReport
    from commlens.diagnose.stragglers import StragglerReport


@diagnose_app.command("stragglers")
def stragglers(
    traces: list[Path] | None = typer.Argument(
        None,
        help="PyTorch profiler (Kineto) traces, one per rank; or NCCL Inspector dump directories or logs, "
        "monitor-rank<R>.jsonl files, Flight Recorder dump directories, nccl-tests -J -I 1 JSON.",
    ),
    run: str | None = typer.Option(
        None, "--run", help="A run (stored run id or prefix, or a result file): use its per-rank samples."
    ),
    db: str | None = DB,
    late_threshold_us: float = typer.Option(
        1000.0, "--late-threshold-us", help="Median lateness above which a rank is a late arriver (µs)."
    ),
    slow_factor: float = typer.Option(
        1.5,
        "--slow-factor",
        help="A rank is slow within collectives when its median own time exceeds this "
        "factor times the median over ranks.",
    ),
    min_occurrences: int = typer.Option(
        2, "--min-occurrences", min=1, help="Judge a collective only when the ranks share this many of it."
    ),
    max_trace_mib: int = typer.Option(
        2048, "--max-trace-mib", min=1, help="Refuse a trace with more JSON than this once decompressed (MiB)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    save: bool = typer.Option(False, "--save", help="Also keep the report in the store (--db) for `commlens serve`."),
) -> None:
    """Find ranks that arrive late at collectives, or are slow within them.

    Kineto traces are judged by arrival times (clock offsets estimated); the other files by durations: the
    rank that arrives last at a synchronizing collective runs shortest while the others wait for it.
    Exit 1 when a straggler is found, 0 when none, 2 on bad input (an unreadable trace, impossible values).
    """
    from commlens.diagnose.stragglers import StragglerParams, detect_stragglers, load_kineto_traces, table_from_run

    if bool(traces) == bool(run):
        fail("give either trace files or --run RUN_ID", 2)
    checked(late_threshold_us, "--late-threshold-us", above=0)
    checked(slow_factor, "--slow-factor", above=1)
    origin: dict[str, str] = {}
    late: _LateReports | None = None
    with errors_as_exit():
        params = StragglerParams(
            late_threshold_s=late_threshold_us * 1e-6, slow_factor=slow_factor, min_occurrences=min_occurrences
        )
        if traces and not _all_kineto(traces):
            from commlens.diagnose.job import late_ranks_from_paths
            from commlens.diagnose.late_ranks import LateRankParams

            late_params = LateRankParams(late_threshold_s=late_threshold_us * 1e-6, min_occurrences=min_occurrences)
            from commlens.cli.diagnose_job_cmd import reader_warnings

            with reader_warnings():
                late = _LateReports(late_ranks_from_paths(traces, late_params))
        elif traces:
            table = load_kineto_traces(traces, max_bytes=max_trace_mib << 20)
        else:  # --run (given: checked above)
            measured = run_named(run or "", db)
            origin["fingerprint"] = measured.system.fingerprint()
            if not Path(run or "").exists():  # a stored run, not a result file
                origin["run_id"] = measured.run_id
            table = table_from_run(measured)
        if late is None:
            report = detect_stragglers(table, params)
    if late is not None:
        if save:
            fail("--save keeps Kineto and --run reports; a durations report is printed only", 2)
        emit(late, as_json, _print_late_ranks, 1 if any(r.late for r in late.reports) else 0)
    if save:
        from commlens.cli.reports_cmd import save_document

        save_document(db, "stragglers", report.to_json(), **origin)
    emit(report, as_json, _print_stragglers, 1 if report.stragglers else 0)


class _LateReports:
    """The durations reports of ``diagnose stragglers FILES`` (one per source), as one printable report."""

    def __init__(self, reports: list[LateRankReport]) -> None:
        self.reports = reports

    def to_json(self) -> dict[str, object]:
        return {"method": "durations", "reports": [r.to_json() for r in self.reports]}


def _all_kineto(paths: list[Path]) -> bool:
    from commlens.diagnose.job_sources import JobSourceError, detect_kind

    def kind(path: Path) -> str:
        try:
            return detect_kind(path)
        except JobSourceError:  # an unreadable file: the trace reader says what is wrong with it
            return "kineto" if path.is_file() or not path.exists() else "unknown"

    return all(kind(p) == "kineto" for p in paths)


def _print_late_ranks(late: _LateReports) -> None:
    from commlens.cli.tables import new_table, print_table, right
    from commlens.results.units import format_us

    named: list[str] = []
    for report in late.reports:
        groups = ", ".join(f"{g} ({n} ranks)" for g, n in report.groups.items())
        print(f"# {report.source}: {report.judged} collective instances judged by durations over groups {groups}")
        for note in report.notes:
            print(f"#   {note}")
        if not report.late:
            continue
        table = new_table(
            "rank", "host", "group", "onset", "onset time (UTC)", right("late(us)"), right("late/since"), "timestamps"
        )
        for r in report.late:
            table.add_row(
                str(r.rank),
                r.host or "-",
                r.group,
                r.onset_label,
                _utc(r.onset_time_s),
                format_us(r.lateness_s, decimals=1),
                f"{r.late_instances}/{r.judged_instances}",
                r.start_clue,
            )
            name = f"rank {r.rank}{f' ({r.host})' if r.host else ''} [{report.source}]"
            if name not in named:
                named.append(name)
        print_table(table)
    print(f"late ranks: {', '.join(named)}" if named else "no late rank")


def _utc(seconds: float | None) -> str:
    import datetime as dt

    if seconds is None:
        return "-"
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def _us(v: float | None) -> str:
    from commlens.results.units import format_us

    return format_us(v, decimals=1)


def _print_stragglers(report: StragglerReport) -> None:
    from commlens.cli.tables import new_table, print_table, right
    from commlens.diagnose.stragglers import CLOCK_METHODS

    print(
        f"# {report.n_collectives} collectives over {len(report.ranks)} ranks ({report.source}, spans: {report.span})"
    )
    if report.matching is not None:
        print(f"# matched: {report.matching['description']}")
    print(f"# clock: {report.clock_method}: {CLOCK_METHODS[report.clock_method]}")
    print(f"#   {report.clock_note}")
    for line in report.excluded:
        print(f"# left out: {line}")
    table = new_table(
        "collective",
        right("rank"),
        right("n"),
        right("offset(us)"),
        right("late p50(us)"),
        right("late p90(us)"),
        right("last%"),
        right("own p50(us)"),
        "verdict",
    )
    for row in report.ranks_table:
        last = "-" if row["last_arrival_fraction"] is None else f"{row['last_arrival_fraction'] * 100:.0f}"
        table.add_row(
            row["op"],
            str(row["rank"]),
            str(row["n"]),
            _us(row["clock_offset_s"]),
            _us(row["lateness_p50_s"]),
            _us(row["lateness_p90_s"]),
            last,
            _us(row["own_time_p50_s"]),
            ", ".join(row["verdicts"]) or "ok",
        )
    print_table(table)
    if report.stragglers:
        print(
            f"stragglers ({report.clock_method}): "
            f"{', '.join(f'rank {s.rank} ({s.kind}, {s.op})' for s in report.stragglers)}"
        )
    else:
        print(f"no straggler ({report.clock_method})")
