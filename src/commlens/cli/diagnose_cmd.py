"""``commlens diagnose``: links, stragglers, hangs. Each family lives in its own module."""

from __future__ import annotations

import typer

from commlens.cli.app import app

diagnose_app = typer.Typer(
    help="Find slow links, slow hosts, stragglers and hung or mismatched collectives.", no_args_is_help=True
)
app.add_typer(diagnose_app, name="diagnose")

from commlens.cli import diagnose_hang_cmd, diagnose_job_cmd, diagnose_links_cmd, diagnose_trace_cmd  # noqa: E402,F401
