"""``commlens diagnose hang``: the ranks a hung job waits on, from Flight Recorder dumps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from commlens.cli.app import emit
from commlens.cli.diagnose_cmd import diagnose_app
from commlens.cli.errors import errors_as_exit
from commlens.cli.options import DB

if TYPE_CHECKING:
    from commlens.diagnose.hang import HangReport


@diagnose_app.command("hang")
def hang(
    dump_dir: Path = typer.Argument(..., help="Directory of Flight Recorder dumps, one file per rank."),
    prefix: str | None = typer.Option(
        None,
        "--prefix",
        help="File name before the rank (e.g. nccl_trace_rank_); found from the names when they share one.",
    ),
    max_dump_mib: int = typer.Option(256, "--max-dump-mib", min=1, help="Refuse a dump larger than this (MiB)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    save: bool = typer.Option(False, "--save", help="Also keep the report in the store (--db) for `commlens serve`."),
    db: str | None = DB,
) -> None:
    """Name the suspects: ranks without a dump, then the first collective where ranks diverge.

    Exit 1 when there is a suspect (a missing dump included), 0 when every rank dumped and all agree, 2 on bad input.

    Dumps are untrusted data: pickles are read as plain data only, never as code.
    """
    from commlens.diagnose.hang import HangConfig, run

    with errors_as_exit():
        report = run(HangConfig(dump_dir, prefix, max_dump_mib * 1024 * 1024))
    if save:
        from commlens.cli.reports_cmd import save_document

        save_document(db, "hang", report.to_json())
    emit(report, as_json, _print_hang, 0 if report.consistent else 1)


_MAX_SHOWN = 3


def _span(ranks: tuple[int, ...]) -> str:
    return (
        f"{ranks[0]}-{ranks[-1]}"
        if ranks and list(ranks) == list(range(ranks[0], ranks[-1] + 1))
        else ",".join(map(str, ranks))
    )


def _print_hang(report: HangReport) -> None:
    from commlens.cli.tables import new_table, print_table, right
    from commlens.diagnose.hang import culprit_issued

    dumps = f"{len(report.ranks)} dump{'' if len(report.ranks) == 1 else 's'}"
    print(
        f"# {dumps} ({report.backend or 'unknown backend'}, version "
        f"{','.join(report.versions)}), ranks {','.join(map(str, report.ranks))} of {_span(report.expected_ranks)}"
    )
    for note in report.notes:
        print(f"# {note}")
    for s in report.suspects:
        if s.reason == "no_dump":
            print(f"suspect: rank {s.rank}, {s.detail}")
    if not report.divergences:
        if report.consistent:
            print("consistent: every rank dumped and issued the same collectives")
        else:
            print("the ranks that dumped issued the same collectives")
    shown = report.divergences[:_MAX_SHOWN]
    if len(report.divergences) > len(shown):
        print(f"# {len(report.divergences)} groups diverge; the {len(shown)} earliest are shown (all in --json)")
    for d in shown:
        print(
            f"divergence: {d.kind} in process group {d.process_group} ({d.process_group_desc or '-'}) "
            f"at collective {d.collective_seq_id}"
        )
        e = d.expected
        print(
            f"expected: {e['op']} sizes={e['input_sizes']} dtypes={e['input_dtypes']} "
            f"on ranks {','.join(map(str, e['ranks']))}"
        )
        table = new_table(right("rank"), "issued", "sizes", "dtypes", "where (innermost first)")
        for c in d.culprits:
            issued = culprit_issued(c)
            sizes = json.dumps(c["input_sizes"]) if c["input_sizes"] is not None else "-"
            dtypes = json.dumps(c["input_dtypes"]) if c["input_dtypes"] is not None else "-"
            table.add_row(str(c["rank"]), issued, sizes, dtypes, "\n".join(c["frames"] or ["-"]))
        print_table(table)
        print(f"culprit rank(s): {','.join(str(c['rank']) for c in d.culprits)}")
    if report.suspects:
        print(f"suspects (first is likeliest): {','.join(str(s.rank) for s in report.suspects)}")
