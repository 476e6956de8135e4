"""Rows without samples: nullable statistics and the reported TimeStats; indexes for series and history.

Revision ID: 0002
Revises: 0001
Create Date: 2024-05-20

- ``measurements.p50_s .. cv`` become nullable and ``measurements.reported`` (JSON) is
  added, for rows ingested from tools that printed statistics but no samples.
- ``ix_measurements_series (op, dtype, size_bytes, in_place)`` replaces
  ``ix_measurements_op_size_bytes``; ``ix_runs_fingerprint_tag_started_at_utc``
  replaces ``ix_runs_fingerprint``.
- ``schema_version`` becomes 2, so commlens from before Alembic refuses the store.

On SQLite the measurements table is copied (batch mode); the caller turns foreign
keys off around it so the copy does not cascade-delete the samples.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_NOW_NULLABLE = ("p50_s", "p95_s", "p99_s", "min_s", "max_s", "cv")


def upgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        for name in _NOW_NULLABLE:
            batch.alter_column(name, existing_type=sa.Float(), nullable=True)
        batch.add_column(sa.Column("reported", sa.JSON(none_as_null=True), nullable=True))
        batch.drop_index("ix_measurements_op_size_bytes")
        batch.create_index("ix_measurements_series", ["op", "dtype", "size_bytes", "in_place"])

    op.drop_index("ix_runs_fingerprint", table_name="runs")
    op.create_index("ix_runs_fingerprint_tag_started_at_utc", "runs", ["fingerprint", "tag", "started_at_utc"])

    op.execute("UPDATE schema_version SET version = 2")


def downgrade() -> None:
    raise NotImplementedError("the result store is only migrated forward")
