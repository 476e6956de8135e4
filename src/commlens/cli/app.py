"""Typer application: subcommands parse arguments, call the library, print.

Library errors become ``error: ...`` on stderr with exit code 2 (bad usage or
input) or 1 (a failed check); nothing else in commlens prints to the user.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import typer

app = typer.Typer(
    name="commlens",
    help="The performance lab for collective communication: benchmark, store, compare, model.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def say(kind: str, message: str) -> None:
    """Print ``kind: message`` on stderr (``error``, ``warning``, or a plain note for ``kind=""``), with any
    terminal control characters a file name, tag or file's content brought in escaped."""
    from commlens.cli.text import terminal_safe

    text = terminal_safe(message, keep="\n\t")
    print(f"{kind}: {text}" if kind else text, file=sys.stderr)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print ``error: message`` on stderr (see :func:`say`) and exit with ``code``."""
    say("error", message)
    raise typer.Exit(code)


def emit(report: Any, as_json: bool, print_text: Callable[[Any], None], code: int) -> NoReturn:
    """Print a report (``report.to_json()`` with ``--json``, else ``print_text(report)``), then exit ``code``."""
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print_text(report)
    raise typer.Exit(code)


@app.callback()
def _root() -> None:
    """commlens: measure collectives with nccl-tests semantics, keep every result."""


@app.command(
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []},
    add_help_option=False,
)
def bench(ctx: typer.Context) -> None:
    """Run collectives across local ranks (nccl-tests options; see `commlens bench --help`)."""
    argv = list(ctx.args)
    if "-h" in argv or "--help" in argv:
        from commlens.bench.config import build_parser

        build_parser().print_help()
        raise typer.Exit(0)
    from commlens.cli.bench_cmd import launch
    from commlens.cli.errors import errors_as_exit

    try:
        with errors_as_exit():  # bad settings (exit 2), a failed run (its code)
            code = launch(argv)
    except SystemExit as e:  # argparse usage errors
        raise typer.Exit(e.code if isinstance(e.code, int) else 2) from None
    raise typer.Exit(code)


def main() -> None:
    _register()
    app()


def _register() -> None:
    """Import the modules that add their commands to ``app`` (one module per command family)."""
    from commlens.cli import (  # noqa: F401  # noqa: F401  # noqa: F401
        baseline_cmd,
        cluster_cmd,
        db_cmd,
        diagnose_cmd,
        expect_cmd,
        ingest_cmd,
        model_cmd,
        monitor_cmd,
        noise_cmd,  # noqa: F401
        project_cmd,  # noqa: F401
        regress_cmd,
        replay_cmd,
        reports_cmd,
        runs_cmd,
        serve_cmd,
        sim_cmd,
        topology_cmd,
        tune_cmd,  # noqa: F401
    )
