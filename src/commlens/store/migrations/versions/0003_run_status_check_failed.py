"""Runs whose results check failed: ``runs.status`` may be ``check_failed``.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01

An nccl-tests log whose footer says ``# Out of bounds values : N FAILED`` (or rows with a
non-zero ``#wrong``) is a run that finished but whose results were wrong; it is stored with
status ``check_failed``, never as ``complete``. The check constraint ``ck_runs_status`` is
replaced to allow it. On SQLite the runs table is copied (batch mode); the caller turns
foreign keys off around it so the copy does not cascade-delete the measurements.
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_constraint("ck_runs_status", type_="check")
        batch.create_check_constraint("ck_runs_status", "status IN ('complete', 'incomplete', 'check_failed')")


def downgrade() -> None:
    raise NotImplementedError("the result store is only migrated forward")
