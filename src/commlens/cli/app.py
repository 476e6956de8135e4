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
from typer.core import TyperGroup

# Every command but bench, in the order `commlens --help` lists them: (module of commlens.cli that registers it,
# the first paragraph of its help as that module writes it). A command's module is imported only when the
# command runs, its help is shown or completed; `commlens --help` lists these texts without importing any.
# tests/test_cli_lazy.py checks each text against its command's own help.
LAZY_COMMANDS: dict[str, tuple[str, str]] = {
    "compare": (
        "regress_cmd",
        "A/B comparison judged on the spread between rounds or runs: per row, the ratio of typical times, "
        "its 95%\nCI, a p-value and a verdict.",
    ),
    "detect": (
        "regress_cmd",
        "Change points in the history of every stored series (op, size, dtype, placement, system, tag).",
    ),
    "expect": (
        "expect_cmd",
        "Is this bandwidth normal? The run's expected busBW band, its verdict per size range, likely causes.",
    ),
    "ingest": (
        "ingest_cmd",
        "Store other tools' results: each file read completely, then its runs stored in one transaction.",
    ),
    "show": (
        "runs_cmd",
        "Print a stored run again: the nccl-tests table, or its JSON (same as `commlens runs show`).",
    ),
    "export": ("runs_cmd", "Export stored runs, oldest first, to CSV or JSON."),
    "serve": (
        "serve_cmd",
        "Serve the dashboard: runs, run, compare, history, regressions, diagnoses, projections, live jobs.",
    ),
    "tune": (
        "tune_cmd",
        'Time every algorithm and the built-in per size; write the table `algo="auto"` uses (see docs/algos.md).',
    ),
    "baseline": (
        "baseline_cmd",
        "Baselines: the run or tag a series (system and tag) is compared against (`compare baseline RUN`).",
    ),
    "threshold": (
        "baseline_cmd",
        "Thresholds: the min change and alpha compare and detect use for the series and rows they match.",
    ),
    "cluster": (
        "cluster_cmd",
        "An emulated multi-host cluster: hosts as network namespaces, links shaped with tc.",
    ),
    "db": ("db_cmd", "The result store's schema: status, upgrade in place."),
    "diagnose": ("diagnose_cmd", "Find slow links, slow hosts, stragglers and hung or mismatched collectives."),
    "topology": ("topology_cmd", "Cluster topologies: presets shipped with commlens, or your own YAML file."),
    "model": (
        "model_cmd",
        "Cost models of collectives on a topology: predict, fit to stored runs, check against them.",
    ),
    "monitor": (
        "monitor_cmd",
        "Watch live training jobs: the in-job monitor's collector (the job side is commlens.monitor).",
    ),
    "noise": (
        "noise_cmd",
        "Noise floors: how much whole runs of the same code differ, per series, learned from stored history.",
    ),
    "project": (
        "project_cmd",
        "Project step time, MFU and memory of a training workload (`project --help`; also `sweep`, `validate`, "
        "`calibrate`).",
    ),
    "reports": (
        "reports_cmd",
        "Diagnoses and projections kept in the store (the dashboard's diagnose and projection pages).",
    ),
    "runs": ("runs_cmd", "Stored runs: list (the default), show, tag, delete."),
    "sim": (
        "sim_cmd",
        "Simulate collectives on a fabric: contention, ECMP collisions, oversubscription, failed links, several "
        "jobs, whole training steps.",
    ),
}


class _LazyGroup(TyperGroup):
    """The root group: commands of LAZY_COMMANDS built from their module on first use."""

    _listing = False  # True while the root help is formatted: list the commands from LAZY_COMMANDS

    def list_commands(self, ctx: Any) -> list[str]:
        names = ["bench", *LAZY_COMMANDS]
        return names + [n for n in self.commands if n not in names]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in self.commands or cmd_name not in LAZY_COMMANDS:
            return self.commands.get(cmd_name)
        module, help_text = LAZY_COMMANDS[cmd_name]
        if self._listing:
            return typer.core.TyperCommand(cmd_name, help=help_text)
        import importlib

        from typer.main import get_command_from_info, get_group_from_info

        importlib.import_module(f"commlens.cli.{module}")
        info: Any
        for info in app.registered_commands:
            if info.name == cmd_name:
                self.commands[cmd_name] = get_command_from_info(
                    info, pretty_exceptions_short=app.pretty_exceptions_short, rich_markup_mode=self.rich_markup_mode
                )
        for info in app.registered_groups:
            if info.name == cmd_name:
                self.commands[cmd_name] = get_group_from_info(
                    info,
                    pretty_exceptions_short=app.pretty_exceptions_short,
                    rich_markup_mode=self.rich_markup_mode,
                    suggest_commands=self.suggest_commands,
                )
        return self.commands.get(cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        try:
            return self._click_resolve_command(ctx, args)
        except typer.core._click.exceptions.UsageError as e:  # as TyperGroup's, over every command's name
            from difflib import get_close_matches

            matches = get_close_matches(args[0], self.list_commands(ctx)) if self.suggest_commands and args else []
            if matches:
                e.message = f"{e.message.rstrip('.')}. Did you mean {', '.join(repr(m) for m in matches)}?"
            raise


app = typer.Typer(
    name="commlens",
    help="The performance lab for collective communication: benchmark, store, compare, model.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=_LazyGroup,
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
    app()


def _register() -> None:
    """Import every module that adds commands to ``app`` (``main`` imports each only when it is used)."""
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
        reports_cmd,
        runs_cmd,
        serve_cmd,
        sim_cmd,
        topology_cmd,
        tune_cmd,  # noqa: F401
    )
