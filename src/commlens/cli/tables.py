"""The CLI's tables: built with :mod:`commlens.results.text_tables` (Rich, borderless), printed on stdout.

On a terminal they fit its width and the header is bold; in a pipe or a file (and in tests) they are plain
text, never wrapped or coloured, each line without trailing spaces.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from commlens.results.text_tables import left, new_table, render_table, right

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["left", "new_table", "print_listing", "print_table", "right"]

R = TypeVar("R")


def print_table(table: Table, *, indent: int = 0) -> None:
    """Print the table on stdout: fitted and styled on a terminal, plain text anywhere else."""
    out = sys.stdout
    out.write(render_table(table, indent=indent, terminal=out.isatty()))


def print_listing(
    rows: Sequence[R], columns: Sequence[tuple[str, Callable[[R], str]]], as_json: bool, *, numbers: frozenset[str]
) -> None:
    """A ``list`` command's output: the rows as one JSON array with --json, else a table of ``columns``
    (header, the cell text of a row), the headers in ``numbers`` right-aligned."""
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    table = new_table(*(right(h) if h in numbers else h for h, _ in columns))
    for row in rows:
        table.add_row(*(cell(row) for _, cell in columns))
    print_table(table)
