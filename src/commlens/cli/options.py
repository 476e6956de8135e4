"""Options every command that touches the store spells the same way (docs/cli.md)."""

from __future__ import annotations

import typer

__all__ = ["DB"]

DB = typer.Option(
    None,
    "--db",
    help="the result store: a SQLite path or a URL (default: $COMMLENS_DB, else the user data dir)",
)
