"""Column sets the migrations repeat, as functions giving new ``Column`` objects (a Column belongs to one table).

Once a migration uses a function here, what it gives must never change (that migration would then build
another schema): a column set that differs is a new function.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa


def _key_type(name: str) -> sa.types.TypeEngine[Any]:
    """The type of one column of a series' key, as every table of series stores it (redop ``'none'`` and root
    -1 for none, so a UNIQUE key holds)."""
    if name == "root":
        return sa.Integer()
    if name == "size_bytes":
        return sa.BigInteger()
    if name == "in_place":
        return sa.Boolean()
    return sa.String()  # op, algo, dtype, redop, tag


def key_columns(*names: str) -> list[sa.Column[Any]]:
    """The named columns of a series' key (``op``, ``algo``, ``dtype``, ``redop``, ``root``, ``size_bytes``,
    ``in_place``, ``tag``), in the order named, none nullable."""
    return [sa.Column(name, _key_type(name), nullable=False) for name in names]


def id_column() -> sa.Column[Any]:
    """An autoincremented integer primary key."""
    return sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True)


def floats(*names: str, nullable: bool = False) -> list[sa.Column[Any]]:
    return [sa.Column(name, sa.Float(), nullable=nullable) for name in names]
