"""The schema commlens created before it used Alembic: runs, measurements, samples, schema_version.

Revision ID: 0001
Revises:
Create Date: 2024-05-20

Stores created then have ``schema_version`` = 1 and no ``alembic_version`` table;
``commlens db upgrade`` stamps them 0001 before migrating them further.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from commlens.store.migrations.columns import floats, key_columns

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_STAT_COLUMNS = ("mean_s", "p50_s", "p95_s", "p99_s", "min_s", "max_s", "cv")


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("started_at", sa.String(), nullable=False),
        sa.Column("started_at_utc", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.String(), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("tag", sa.String(), nullable=True),
        sa.Column("revision", sa.String(), nullable=True),
        sa.Column("command_line", sa.String(), nullable=False),
        sa.Column("source", sa.String(), nullable=False),
        sa.Column("world_size", sa.Integer(), nullable=False),
        sa.Column("backend", sa.String(), nullable=False),
        sa.Column("device", sa.String(), nullable=False),
        sa.Column("fingerprint", sa.String(32), nullable=False),
        sa.Column("nhosts", sa.Integer(), nullable=False),
        sa.Column("commlens_version", sa.String(), nullable=False),
        sa.Column("avg_busbw_bytes_per_s", sa.Float(), nullable=False),
        sa.Column("system", sa.JSON(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("notes", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("run_id"),
        sa.CheckConstraint("status IN ('complete', 'incomplete')", name="ck_runs_status"),
    )
    op.create_index("ix_runs_started_at_utc", "runs", ["started_at_utc"])
    op.create_index("ix_runs_tag", "runs", ["tag"])
    op.create_index("ix_runs_fingerprint", "runs", ["fingerprint"])

    op.create_table(
        "schema_version",
        sa.Column("version", sa.Integer(), autoincrement=False, nullable=False),
        sa.PrimaryKeyConstraint("version"),
    )
    op.execute("INSERT INTO schema_version (version) VALUES (1)")

    op.create_table(
        "measurements",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        *key_columns("op", "algo", "dtype", "redop", "root", "size_bytes"),
        sa.Column("count", sa.BigInteger(), nullable=False),
        *key_columns("in_place"),
        sa.Column("world_size", sa.Integer(), nullable=False),
        sa.Column("nwrong", sa.BigInteger(), nullable=True),
        *floats(*_STAT_COLUMNS, "algbw_bytes_per_s", "busbw_bytes_per_s"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("run_id", "position", name="uq_measurements_run_position"),
        sa.ForeignKeyConstraint(["run_id"], ["runs.run_id"], ondelete="CASCADE"),
    )
    op.create_index("ix_measurements_run_id", "measurements", ["run_id"])
    op.create_index("ix_measurements_op_size_bytes", "measurements", ["op", "size_bytes"])

    op.create_table(
        "samples",
        sa.Column("measurement_id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("samples_s", sa.JSON(), nullable=False),
        sa.Column("rank_samples_s", sa.JSON(none_as_null=True), nullable=True),
        sa.PrimaryKeyConstraint("measurement_id"),
        sa.ForeignKeyConstraint(["measurement_id"], ["measurements.id"], ondelete="CASCADE"),
    )


def downgrade() -> None:
    raise NotImplementedError("the result store is only migrated forward")
