"""An index from a run to its measurements of one key: what a series' history reads.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

``ix_measurements_run_key`` (run_id, op, dtype, size_bytes, in_place) replaces
``ix_measurements_run_id`` (run_id), which it covers as its prefix. With it, the history of
one series (a system, a tag, a key) starts from that series' runs
(``ix_runs_fingerprint_tag_started_at_utc``) and reads one measurement of each, instead of
every run's measurement of the key across all systems and tags.
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_measurements_run_key", "measurements", ["run_id", "op", "dtype", "size_bytes", "in_place"])
    op.drop_index("ix_measurements_run_id", table_name="measurements")


def downgrade() -> None:
    raise NotImplementedError("the result store is only migrated forward")
