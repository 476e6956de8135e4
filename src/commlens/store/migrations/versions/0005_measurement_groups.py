"""Process groups: ``measurements.group_name`` and the series identity that includes it.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

A row measured inside a training job (``commlens.monitor``) belongs to one process group
of the job: ``measurements.group_name`` (NULL for a benchmark row, which every stored row
is). The group is part of a series: ``ix_measurements_series`` gains the column, and so
does the unique key of ``noise_floors``, where ``group_name`` is ``''`` for no group (NULLs
are never equal in a UNIQUE constraint). Existing rows keep their values and have no group.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_GROUP_NAME_CHARS = 200  # commlens.results.records.MAX_GROUP_NAME when this revision was written
_FLOOR_SERIES = ("fingerprint", "op", "algo", "dtype", "redop", "root", "size_bytes", "in_place")


def upgrade() -> None:
    with op.batch_alter_table("measurements") as batch:
        batch.add_column(sa.Column("group_name", sa.String(_GROUP_NAME_CHARS), nullable=True))
        batch.drop_index("ix_measurements_series")
        batch.create_index("ix_measurements_series", ["op", "dtype", "size_bytes", "in_place", "group_name"])
    with op.batch_alter_table("noise_floors") as batch:
        batch.add_column(sa.Column("group_name", sa.String(_GROUP_NAME_CHARS), server_default="", nullable=False))
        batch.drop_constraint("uq_noise_floors_series", type_="unique")
        batch.create_unique_constraint("uq_noise_floors_series", [*_FLOOR_SERIES, "group_name"])


def downgrade() -> None:
    raise NotImplementedError("the result store is only migrated forward")
