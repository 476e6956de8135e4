"""``commlens db status`` and ``commlens db upgrade``: the result store's schema."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING

import typer

from commlens.cli.app import command_group, fail
from commlens.cli.errors import errors_as_exit
from commlens.cli.options import DB
from commlens.cli.text import terminal_safe

if TYPE_CHECKING:
    from commlens.store import CorruptRunError

db_app = command_group("db")


_STATE_TEXT = {
    "empty": "empty: the schema is created on first use (or by `commlens db upgrade`)",
    "current": "up to date",
    "old": "older than this commlens: run `commlens db upgrade`",
    "newer": "newer than this commlens: upgrade commlens",
}


@db_app.command("status")
def db_status(
    db: str | None = DB,
    as_json: bool = typer.Option(False, "--json", help="print JSON"),
    runs: bool = typer.Option(False, "--runs", help="also read every stored run back (slower: loads all samples)"),
) -> None:
    """Show the store's location, its schema revision and this commlens', and check its integrity
    (SQLite: quick_check; --runs: every run read back; exit 2 when a check fails). Changes nothing."""
    from commlens.store import schema_status

    with errors_as_exit(escape_all=True):
        status = schema_status(db)
    unreadable = _unreadable_runs(db) if runs and status.state == "current" else None
    if as_json:
        doc = asdict(status)
        if unreadable is not None:
            doc["unreadable_runs"] = [e.run_id for e in unreadable]
        print(json.dumps(doc, indent=1))
    else:
        revision = status.revision or "-"
        if status.revision is not None and not status.stamped:
            revision += " (from before Alembic)"
        lines = [
            f"store     {status.url}",
            f"schema    {revision}",
            f"commlens  {status.head}",
            f"state     {_STATE_TEXT[status.state]}",
        ]
        if status.nruns is not None:
            lines.append(f"runs      {status.nruns}")
        if status.integrity is not None:
            lines.append(f"integrity {status.integrity}")
        if unreadable is not None:
            lines.append(f"unreadable runs {len(unreadable)}")
            lines += [f"  {e}" for e in unreadable]
        print("\n".join(terminal_safe(line) for line in lines))
    if status.integrity_ok is False:
        fail(terminal_safe(f"result store {status.url} fails its integrity check: {status.integrity}"), 2)
    if unreadable:
        fail(f"{len(unreadable)} stored run{'s' if len(unreadable) > 1 else ''} cannot be read back", 2)


def _unreadable_runs(db: str | None) -> list[CorruptRunError]:
    from commlens.store import Store

    with errors_as_exit(escape_all=True):
        with Store.open(db, create=False) as store:
            return store.unreadable_runs()


@db_app.command("upgrade")
def db_upgrade(db: str | None = DB) -> None:
    """Upgrade the store's schema in place to this commlens' revision (one transaction)."""
    from commlens.store import upgrade_schema

    with errors_as_exit(escape_all=True):
        done = upgrade_schema(db)
    if done.before is None:
        print(f"{done.url}: created schema {done.after}")
    elif done.before == done.after:
        print(f"{done.url}: already at schema {done.after}, nothing to do")
    else:
        print(f"{done.url}: upgraded schema from {done.before} to {done.after}")
