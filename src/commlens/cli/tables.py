"""The CLI's tables: built with :mod:`commlens.results.text_tables` (Rich, borderless), printed on stdout.

On a terminal they fit its width and the header is bold; in a pipe or a file (and in tests) they are plain
text, never wrapped or coloured, each line without trailing spaces.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from commlens.results.text_tables import left, new_table, render_table, right

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["left", "new_table", "print_table", "right"]


def print_table(table: Table, *, indent: int = 0) -> None:
    """Print the table on stdout: fitted and styled on a terminal, plain text anywhere else."""
    out = sys.stdout
    out.write(render_table(table, indent=indent, terminal=out.isatty()))
