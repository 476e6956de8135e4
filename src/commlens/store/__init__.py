"""The result store: runs, measurements and raw samples in SQLite (default) or PostgreSQL.

See ``commlens.store.repo`` for the query API and ``docs/store.md`` for the set-up.
"""

from importlib import import_module
from typing import TYPE_CHECKING

from commlens.store.db import DatabaseFault, NoStoreError, StoreError, db_url, default_db_url, make_engine

if TYPE_CHECKING:  # the rest on first use (__getattr__ below): they load the ORM models and SQLAlchemy's ORM
    from commlens.store.preflight import preflight
    from commlens.store.repo import CorruptRunError, MeasurementRow, RunSummary, Store
    from commlens.store.reports import Report, ReportError, ReportNotFoundError, ReportSummary
    from commlens.store.schema import SchemaStatus, SchemaUpgrade, schema_status, upgrade_schema
    from commlens.store.series_meta import Baseline, BaselineError, ResolvedThreshold, Threshold, ThresholdError

# name -> the module that defines it, imported when the name is first asked for
_LAZY = {
    **dict.fromkeys(("preflight",), "preflight"),
    **dict.fromkeys(("CorruptRunError", "MeasurementRow", "RunSummary", "Store"), "repo"),
    **dict.fromkeys(("Report", "ReportError", "ReportNotFoundError", "ReportSummary"), "reports"),
    **dict.fromkeys(("SchemaStatus", "SchemaUpgrade", "schema_status", "upgrade_schema"), "schema"),
    **dict.fromkeys(("Baseline", "BaselineError", "ResolvedThreshold", "Threshold", "ThresholdError"), "series_meta"),
}

__all__ = [
    "Baseline",
    "BaselineError",
    "CorruptRunError",
    "DatabaseFault",
    "MeasurementRow",
    "NoStoreError",
    "Report",
    "ReportError",
    "ReportNotFoundError",
    "ReportSummary",
    "ResolvedThreshold",
    "RunSummary",
    "SchemaStatus",
    "SchemaUpgrade",
    "Store",
    "StoreError",
    "Threshold",
    "ThresholdError",
    "db_url",
    "default_db_url",
    "make_engine",
    "preflight",
    "schema_status",
    "upgrade_schema",
]


def __getattr__(name: str) -> object:
    """The store's classes and functions on first use: a command that reads only files never loads the ORM."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'commlens.store' has no attribute {name!r}")
    value = getattr(import_module(f"commlens.store.{module}"), name)
    # bound here once: importing commlens.store.preflight sets this package's ``preflight`` to the module
    globals()[name] = value
    return value
