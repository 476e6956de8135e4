"""commlens ingest FILE...: read nccl-tests, PARAM and commlens outputs into the store."""

from __future__ import annotations

from commlens.cli.app import app, fail  # noqa: F401
