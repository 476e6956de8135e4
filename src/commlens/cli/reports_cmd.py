"""``commlens reports``: the diagnoses and projections kept in the store for the dashboard (``commlens serve``).

A command's ``--save`` keeps its ``--json`` document as a report (:func:`save_document`); ``reports import``
keeps one written to a file earlier; ``reports list`` and ``reports show`` read them back.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path

import typer

from commlens.cli.app import command_group, say
from commlens.cli.errors import errors_as_exit
from commlens.cli.options import DB

reports_app = command_group("reports")

_KINDS = "links, stragglers, hang, projection or sweep"


def save_document(
    db: str | None,
    kind: str,
    document: Mapping[str, object],
    *,
    title: str | None = None,
    fingerprint: str | None = None,
    run_id: str | None = None,
) -> str:
    """Keep ``document`` (exactly what ``--json`` prints) in the store as a ``kind`` report; says its id on stderr.

    The document goes through JSON first, so the report holds what the command prints (tuples as arrays).
    A store that cannot take it ends the command (exit 2).
    """
    from commlens.store import Store

    printed = json.loads(json.dumps(document, default=str))
    with errors_as_exit(escape_all=True), Store.open(db) as store:
        report_id = store.reports.save(kind, title or None, printed, fingerprint=fingerprint, run_id=run_id)
        say("", f"saved {kind} report {report_id} in {store.url}")
    return report_id


@reports_app.command("import")
def import_report(
    kind: str = typer.Argument(..., help=f"the document's kind: {_KINDS}"),
    file: Path = typer.Argument(..., help="a --json document its command wrote earlier"),
    title: str | None = typer.Option(None, "--title", help="the report's title (default: what it found)"),
    db: str | None = DB,
) -> None:
    """Keep a diagnosis or projection written with --json earlier as a report; its id on stderr."""
    from commlens.store import read_document

    with errors_as_exit(escape_all=True):
        document = read_document(file, kind)
    save_document(db, kind, document, title=title)


@reports_app.command("list")
def list_cmd(
    kind: str | None = typer.Option(None, "--kind", help=f"only reports of this kind: {_KINDS}"),
    limit: int = typer.Option(50, "--limit", min=1, max=500, help="at most this many, newest first"),
    db: str | None = DB,
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
) -> None:
    """The stored reports, newest first."""
    from commlens.cli.runs_cmd import open_store

    with open_store(db) as store, errors_as_exit(escape_all=True):
        reports = store.reports.list(kind, limit=limit)
        total = store.reports.count(kind)
    if as_json:
        print(json.dumps({"total": total, "reports": [r.as_dict() for r in reports]}, indent=2))
        return
    from commlens.cli.tables import new_table, print_table
    from commlens.cli.text import terminal_safe

    table = new_table("report", "kind", "created (UTC)", "title")
    for r in reports:
        table.add_row(r.report_id, r.kind, r.created_at_utc[:19], terminal_safe(r.title))
    print_table(table)
    if total > len(reports):
        print(f"# {len(reports)} of {total} shown (--limit)", file=sys.stderr)


@reports_app.command("show")
def show(
    report_id: str = typer.Argument(
        ..., help="a report id or a unique prefix of at least 4 characters (from `commlens reports list`)"
    ),
    db: str | None = DB,
) -> None:
    """Print a stored report's document, as its command's --json printed it."""
    from commlens.cli.runs_cmd import open_store

    with open_store(db) as store, errors_as_exit(escape_all=True):
        report = store.reports.get(report_id.strip().lower())
    print(json.dumps(report.payload, indent=2))
