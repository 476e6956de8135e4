"""The ``list`` and ``show`` commands of a kind of shipped preset (``commlens topology``, ``commlens workload``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import typer

__all__ = ["preset_commands"]

R = TypeVar("R")  # one row of the listing


def preset_commands(
    group: typer.Typer,
    noun: str,
    *,
    names: Callable[[], Sequence[str]],
    row: Callable[[str], R],
    columns: Sequence[tuple[str, Callable[[R], str]]],
    show: Callable[[str, bool], None],
) -> None:
    """Adds to ``group`` ``list`` (a table of the ``row`` of each of the presets' ``names``, in ``columns``; the
    first and last are text, the others numbers) and ``show NAME`` (``show(name, as_json)``: one preset or a YAML
    file). Each command's help is the docstring of ``names`` and of ``show``."""

    @group.command("list", help=names.__doc__)
    def list_cmd(as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
        from commlens.cli.tables import print_listing

        rows = [row(name) for name in names()]
        print_listing(rows, columns, as_json, numbers=frozenset(h for h, _ in columns[1:-1]))

    @group.command("show", help=show.__doc__)
    def show_cmd(
        name: str = typer.Argument(..., help=f"a preset name (see `commlens {noun} list`) or a YAML file"),
        as_json: bool = typer.Option(False, "--json", help="print JSON instead of YAML"),
    ) -> None:
        show(name, as_json)
