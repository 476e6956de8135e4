"""``commlens diagnose job``: a job's files of every source joined per collective instance."""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from commlens.cli.app import emit
from commlens.cli.diagnose_cmd import diagnose_app
from commlens.cli.errors import errors_as_exit
from commlens.cli.numbers import checked

if TYPE_CHECKING:
    from commlens.diagnose.job import JobReport


@diagnose_app.command("job")
def job(
    paths: list[Path] = typer.Argument(
        ...,
        help="Any mix of one job's files: NCCL Inspector dump directories or logs, Flight Recorder dump "
        "directories, Kineto traces, monitor-rank<R>.jsonl files or their directory.",
    ),
    late_threshold_us: float = typer.Option(
        1000.0, "--late-threshold-us", help="How much longer the waiting ranks run than a late rank, at least (µs)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Join one collective instance across every source; name the late rank and since when, the first
    collective where ranks diverge, and for a hang each rank's last completed collective.

    Exit 1 when a late rank, a divergence or a hang is found, 0 when none, 2 on bad input.
    """
    from commlens.diagnose.job import diagnose_job
    from commlens.diagnose.late_ranks import LateRankParams

    checked(late_threshold_us, "--late-threshold-us", above=0)
    with reader_warnings(), errors_as_exit():
        report = diagnose_job(paths, LateRankParams(late_threshold_s=late_threshold_us * 1e-6))
    found = report.hang or report.divergence is not None or any(r["late_ranks"] for r in report.late)
    emit(report, as_json, _print_job, 1 if found else 0)


_SHOWN_WARNINGS = 20


@contextlib.contextmanager
def reader_warnings() -> Iterator[None]:
    """The readers' warnings (a damaged line left out, dropped records) as ``warning: ...`` lines on stderr."""
    from commlens.ingest import IngestWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", IngestWarning)
        try:
            yield
        finally:
            shown = [w for w in caught if issubclass(w.category, IngestWarning)]
            for w in shown[:_SHOWN_WARNINGS]:
                print(f"warning: {w.message}", file=sys.stderr)
            if len(shown) > _SHOWN_WARNINGS:
                print(f"warning: {len(shown) - _SHOWN_WARNINGS} more warnings not shown", file=sys.stderr)


def _print_job(report: JobReport) -> None:
    from commlens.cli.tables import new_table, print_table, right
    from commlens.results.units import format_us

    print("# sources")
    for s in report.sources:
        groups = ", ".join(f"{g} ({n} ranks)" for g, n in s["groups"].items())
        print(f"#   {s['kind']}: {s['observations']} records, groups {groups}")
        print(f"#     counts by {s['counter']}")
        for note in s["notes"]:
            print(f"#     {note}")
    print(f"# matched on the {report.reference} keys (job, group, op, seq):")
    for a in report.alignments:
        print(f"#   {a.describe()}")
    shared = ", ".join(f"{n} in {k}" for k, n in sorted(report.instances_with_sources.items(), key=lambda kv: -kv[1]))
    print(f"# {report.joined_instances} collective instances: {shared}")
    for note in report.notes:
        print(f"# {note}")
    print(f"late rank: {report.verdict}")
    d = report.divergence
    if d is None:
        print("divergence: none (every rank ran the same op and size at every joined sequence number)")
    else:
        print(
            f"divergence: {d['source']} group {d['group']} seq {d['seq']}: {d['kind']}, ranks "
            f"{', '.join(map(str, d['culprit_ranks']))} differ from {d['expected']}"
        )
    if not report.hang:
        print("hang: none (every rank completed up to the same collective)")
        return
    print("hang: ranks stopped at different collectives; each rank's last completed and first unfinished one:")
    table = new_table(
        right("rank"), "host", "last completed (job key)", "source", right("duration(us)"), "in flight", "behind"
    )
    for p in report.progress:
        last = p.last_completed
        key = last["job_key"] or last["source_key"] if last else None
        flight = p.in_flight
        fkey = (flight["job_key"] or flight["source_key"]) if flight else None
        table.add_row(
            str(p.rank),
            p.host or "-",
            f"{key['group']} {key['op']} seq {key['seq']}" if key else "-",
            last["source"] if last else "-",
            format_us(last["duration_s"], decimals=1) if last else "-",
            f"{fkey['op']} seq {fkey['seq']} ({flight['state']})" if fkey and flight else "-",
            "yes" if p.behind else "",
        )
    print_table(table)
    idle = [p.rank for p in report.progress if p.in_flight is None]
    waiting = [p.rank for p in report.progress if p.in_flight is not None]
    if idle and waiting:
        print(
            f"waiting on: rank {', '.join(map(str, idle))}: nothing in flight after its last completed collective, "
            f"while {len(waiting)} ranks have started the next one"
        )
