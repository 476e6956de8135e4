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

from commlens.cli import coercion

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
    "replay": (
        "replay_cmd",
        "Replay a job's communication as a benchmark: extract a plan, run it on real ranks, compare.",
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
    "workload": (
        "workload_cmd",
        "Training workloads: the presets `commlens project` takes by name, or your own YAML file.",
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
coercion.install()  # plain option values converted without importing pydantic (Typer 0.29 would)


def command_group(name: str, *, no_args_is_help: bool = True, cls: type[TyperGroup] = TyperGroup) -> typer.Typer:
    """The group of sub-commands ``commlens NAME``, registered on ``app``; its help is the one LAZY_COMMANDS
    lists for it, so `commlens --help` and `commlens NAME --help` say the same from one text."""
    group = typer.Typer(help=LAZY_COMMANDS[name][1], no_args_is_help=no_args_is_help, add_completion=False, cls=cls)
    app.add_typer(group, name=name)
    return group


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


def _print_version(asked: bool) -> None:
    if asked:
        from commlens import __version__
        from commlens.results.jsonfmt import FORMAT_WITH_GROUPS

        print(f"commlens {__version__} (run files up to {FORMAT_WITH_GROUPS}; Python {sys.version.split()[0]})")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version, help="print the version and exit"
    ),
) -> None:
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


def main(argv: list[str] | None = None) -> None:
    """The ``commlens`` script: every usage error (an unknown option, a bad value, a missing argument, an unknown
    command) is one ``error: ...`` line on stderr and exit code 2, as the library's errors are; never a box."""
    # Typer bundles its own click (typer 0.29 no longer depends on click): its exception classes are reached
    # through the one it exports, wherever the bundled module lives.
    usage_error = _click_class("UsageError")
    click_exception = _click_class("ClickException")
    try:
        code = app(args=argv, prog_name="commlens", standalone_mode=False)
    except usage_error as e:
        ctx = getattr(e, "ctx", None)
        where = ctx.command_path if ctx is not None else "commlens"
        code = _said(f"{_sentence(e.format_message())} (see '{where} --help')", 2)
    except click_exception as e:  # a file option that cannot be opened, and the like
        code = _said(_sentence(e.format_message()), getattr(e, "exit_code", 1))
    except typer.Abort:  # Ctrl-C at a prompt, end of input
        code = _said("aborted", 1)
    except BrokenPipeError:  # `commlens runs | head`: the reader left; nothing to say
        sys.stderr.close()
        raise SystemExit(1) from None
    raise SystemExit(code if isinstance(code, int) else 0)


def _said(message: str, code: int) -> int:
    say("error", message)
    return code


def _click_class(name: str) -> Any:
    return next(c for c in typer.BadParameter.__mro__ if c.__name__ == name)


# pydantic's wording of a bad number (Typer 0.29 converts values with it), as commlens words it
_PYDANTIC_WORDS = {
    "Input should be a valid integer, unable to parse string as an integer": "expected an integer",
    "Input should be a valid number, unable to parse string as a number": "expected a number",
    "Input should be a valid boolean, unable to interpret input": "expected true or false",
}


def _sentence(message: str) -> str:
    """Click's ``No such option: --x.`` as the rest of commlens writes errors: ``no such option: --x``."""
    text = message.strip().rstrip(".")
    for words, ours in _PYDANTIC_WORDS.items():
        text = text.replace(words, ours)
    return text[:1].lower() + text[1:] if text[:2] != text[:2].upper() else text


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
        replay_cmd,
        reports_cmd,
        runs_cmd,
        serve_cmd,
        sim_cmd,
        topology_cmd,
        tune_cmd,  # noqa: F401
        workload_cmd,
    )
