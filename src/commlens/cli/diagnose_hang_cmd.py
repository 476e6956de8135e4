"""``commlens diagnose hang``: the first collective where ranks diverge, from Flight Recorder dumps."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from commlens.cli.app import fail
from commlens.cli.diagnose_cmd import diagnose_app


@diagnose_app.command("hang")
def hang(
    dump_dir: Path = typer.Argument(..., help="Directory of Flight Recorder dumps, one file per rank."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Find the first collective where ranks diverge (missing ranks, op, size or dtype mismatch).

    Exit 1 when a divergence is found, 0 when the ranks agree, 2 on bad input.
    """
    from commlens.diagnose.hang import DumpError, diagnose_hang

    try:
        report = diagnose_hang(dump_dir)
    except DumpError as e:
        fail(str(e), 2)
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        _print_hang(report)
    raise typer.Exit(0 if report.divergence is None else 1)


def _print_hang(report) -> None:  # type: ignore[no-untyped-def]
    print(f"# {len(report.ranks)} dumps ({report.backend or 'unknown backend'}), ranks "
          f"{','.join(map(str, report.ranks))}")
    if report.ranks_without_dump:
        print(f"# no dump from rank(s) {','.join(map(str, report.ranks_without_dump))}: not judged")
    for note in report.notes:
        print(f"# {note}")
    d = report.divergence
    if d is None:
        print("consistent: every rank issued the same collectives")
        return
    print(f"divergence: {d.kind} in process group {d.process_group} ({d.process_group_desc or '-'}) "
          f"at collective {d.collective_seq_id}")
    e = d.expected
    print(f"expected: {e['op']} sizes={e['input_sizes']} dtypes={e['input_dtypes']} "
          f"on ranks {','.join(map(str, e['ranks']))}")
    print(f"{'rank':>5}  {'issued':<30} {'sizes':<14} {'dtypes':<12} where (innermost first)")
    for c in d.culprits:
        issued = c["op"] if c["op"] else f"nothing (last: #{c['last_collective_seq_id']} {c['last_op']})"
        sizes = json.dumps(c["input_sizes"]) if c["input_sizes"] is not None else "-"
        dtypes = json.dumps(c["input_dtypes"]) if c["input_dtypes"] is not None else "-"
        head = f"{c['rank']:>5}  {issued:<30} {sizes:<14} {dtypes:<12} "
        frames = c["frames"] or ["-"]
        print(head + frames[0])
        for frame in frames[1:]:
            print(" " * len(head) + frame)
    print(f"culprit rank(s): {','.join(str(c['rank']) for c in d.culprits)}")
