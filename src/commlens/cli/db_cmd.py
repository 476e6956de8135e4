"""commlens db upgrade and commlens export: the store's schema and bulk export."""

from __future__ import annotations

from commlens.cli.app import app, fail  # noqa: F401
