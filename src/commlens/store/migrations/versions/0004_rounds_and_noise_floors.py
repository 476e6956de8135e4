"""Rounds and noise floors: ``samples.rounds`` and the ``noise_floors`` table.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

A row timed in several independent rounds (``commlens bench --rounds``) keeps how many of its
samples each round holds (``samples.rounds``, JSON, NULL for one round), so compare can judge on
the spread between rounds. ``noise_floors`` holds each series' run-to-run variation learned from
A/A-like history (``commlens noise learn``). Both are additions: existing rows stay as they are
and read as one round each.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from commlens.store.migrations.columns import floats, key_columns

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("samples") as batch:
        batch.add_column(sa.Column("rounds", sa.JSON(none_as_null=True), nullable=True))
    op.create_table(
        "noise_floors",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("fingerprint", sa.String(), nullable=False),
        *key_columns("op", "algo", "dtype", "redop", "root", "size_bytes", "in_place"),
        *floats("sd_log"),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("groups", sa.Integer(), nullable=False),
        sa.Column("learned_at", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("fingerprint", "op", "algo", "dtype", "redop", "root", "size_bytes", "in_place",
                            name="uq_noise_floors_series"),
    )


def downgrade() -> None:
    raise NotImplementedError("the result store is only migrated forward")
