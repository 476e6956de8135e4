"""Text tables (every one but nccl-tests' own layout, which ``commlens.results.table`` keeps): Rich tables
with a header row and aligned columns two spaces apart, no borders, rendered to text.

Off a terminal (a pipe, a file, a test) the text is plain: never wrapped or coloured, each line without trailing
spaces, so ``grep`` and ``cut`` see whole rows. Cells are printed as given (no Rich markup is read from them):
escape stored text first (``commlens.cli.text.terminal_safe``). The CLI prints them with
``commlens.cli.tables.print_table``; a report that is text (``diagnose.links_report``) renders them here.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.table import Column, Table

__all__ = ["commented_table_lines", "left", "new_table", "render_table", "right"]

# Wide enough that a table in a pipe is never folded to fit (Rich would otherwise assume 80 columns).
_UNBOUNDED_WIDTH = 1 << 16


def right(header: str) -> Column:
    """A column of numbers: right-aligned under its header."""
    from rich.table import Column

    return Column(header, justify="right")


def left(header: str) -> Column:
    """A column of text: left-aligned, as a plain header string is."""
    from rich.table import Column

    return Column(header, justify="left")


def new_table(*columns: str | Column, rows: Iterable[Sequence[str]] = (), show_header: bool = True) -> Table:
    """A borderless table whose columns are two spaces apart; ``rows`` are added (each a cell per column)."""
    from rich.table import Table

    table = Table(*columns, box=None, pad_edge=False, show_edge=False, show_header=show_header, header_style="bold")
    for row in rows:
        table.add_row(*row)
    return table


def render_table(table: Table, *, indent: int = 0, terminal: bool = False) -> str:
    """The table as text, each line ending in a newline; fitted to the terminal's width and styled only with
    ``terminal``, else unbounded and plain. ``indent`` spaces start each line."""
    from rich.console import Console

    buffer = io.StringIO()
    if terminal:
        console = Console(file=buffer, force_terminal=True, markup=False, highlight=False, emoji=False)
        console.width = max(console.width - indent, 20)
    else:
        console = Console(
            file=buffer,
            width=_UNBOUNDED_WIDTH,
            color_system=None,
            force_terminal=False,
            markup=False,
            highlight=False,
            emoji=False,
        )
    console.print(table)
    pad = " " * indent
    return "".join(f"{pad}{line}".rstrip() + "\n" for line in buffer.getvalue().splitlines())


def commented_table_lines(names: Sequence[str], cells: Iterable[Sequence[str]], numbers: frozenset[str]) -> list[str]:
    """A table (``numbers`` right-aligned) as lines: the header behind ``# `` (a comment to a reader of the
    text), the rows indented two spaces beneath it."""
    table = new_table(*(right(n) if n in numbers else n for n in names), rows=cells)
    lines = render_table(table, indent=2).splitlines()
    return ["# " + lines[0][2:], *lines[1:]]
