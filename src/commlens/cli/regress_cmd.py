"""commlens compare and commlens detect: the regression gate."""

from __future__ import annotations

from commlens.cli.app import app, fail  # noqa: F401
