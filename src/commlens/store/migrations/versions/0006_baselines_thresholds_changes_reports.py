"""Baselines, thresholds, saved change points and reports: what ``commlens serve`` shows and teams set.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

Four new tables, no change to the existing ones:
- ``baselines``: the baseline run or tag of the series of one system (fingerprint) under one tag;
- ``thresholds``: per-series min change and significance levels that compare and detect use;
- ``change_points``: what ``commlens detect --save`` found (Grafana's annotations read them);
- ``reports``: diagnoses and projections kept as their JSON documents.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from commlens.store.migrations.columns import floats, id_column, key_columns

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_GROUP_NAME_CHARS = 200  # commlens.results.records.MAX_GROUP_NAME when this revision was written


def upgrade() -> None:
    op.create_table(
        "baselines",
        id_column(),
        sa.Column("fingerprint", sa.String(32), nullable=False),
        *key_columns("tag"),
        sa.Column("ref_kind", sa.String(8), nullable=False),
        sa.Column("ref", sa.String(), nullable=False),
        sa.Column("note", sa.String(), server_default="", nullable=False),
        sa.Column("set_at", sa.String(), nullable=False),
        sa.UniqueConstraint("fingerprint", "tag", name="uq_baselines_series"),
        sa.CheckConstraint("ref_kind IN ('run', 'tag')", name="ck_baselines_ref_kind"),
    )
    op.create_table(
        "thresholds",
        id_column(),
        sa.Column("fingerprint", sa.String(32), nullable=False),
        *key_columns("tag", "op", "dtype", "size_bytes"),
        sa.Column("group_name", sa.String(_GROUP_NAME_CHARS), nullable=False),
        *floats("min_change", "alpha", "detect_alpha", nullable=True),
        sa.Column("set_at", sa.String(), nullable=False),
        sa.UniqueConstraint(
            "fingerprint", "tag", "op", "dtype", "size_bytes", "group_name", name="uq_thresholds_selector"
        ),
    )
    op.create_table(
        "change_points",
        id_column(),
        sa.Column("fingerprint", sa.String(32), nullable=False),
        *key_columns("tag", "op", "algo", "dtype", "redop", "root", "size_bytes", "in_place"),
        sa.Column("group_name", sa.String(_GROUP_NAME_CHARS), nullable=False),
        sa.Column("run_id", sa.String(), nullable=False),
        sa.Column("started_at_utc", sa.DateTime(), nullable=False),
        sa.Column("revision", sa.String(), nullable=True),
        sa.Column("previous_run_id", sa.String(), nullable=False),
        sa.Column("previous_revision", sa.String(), nullable=True),
        *floats("mean_before_s", "mean_after_s", "change", "p_value"),
        sa.Column("direction", sa.String(16), nullable=False),
        sa.Column("detected_at", sa.String(), nullable=False),
    )
    op.create_index("ix_change_points_started_at_utc", "change_points", ["started_at_utc"])
    op.create_index("ix_change_points_series", "change_points", ["fingerprint", "tag", "op", "dtype", "size_bytes"])
    op.create_table(
        "reports",
        sa.Column("report_id", sa.String(), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("title", sa.String(), nullable=False),
        sa.Column("created_at_utc", sa.DateTime(), nullable=False),
        sa.Column("fingerprint", sa.String(32), nullable=True),
        sa.Column("run_id", sa.String(), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.CheckConstraint("kind IN ('links', 'stragglers', 'hang', 'projection', 'sweep')", name="ck_reports_kind"),
    )
    op.create_index("ix_reports_kind_created_at_utc", "reports", ["kind", "created_at_utc"])


def downgrade() -> None:
    raise NotImplementedError("the result store is only migrated forward")
