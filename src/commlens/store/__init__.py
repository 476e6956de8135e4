"""The result store: runs, measurements and raw samples in SQLite (default) or PostgreSQL.

The API: :class:`Store` (runs, see ``commlens.store.repo``) and its repositories of the other kinds of stored
object (``store.baselines``, ``.thresholds``, ``.floors``, ``.reports``, ``.change_points``: see
``commlens.store.kinds``); the plain reader (:func:`plain_store`) and the exporter (:func:`export_runs`); the
records and errors below. The modules behind them are the store's internals: a caller outside ``store/``
imports from here (a record type from where it is defined, too). ``docs/store.md`` has the set-up.
"""

from typing import TYPE_CHECKING

from commlens._lazy import lazy_exports
from commlens.store.db import DatabaseFault, NoStoreError, StoreError, db_url, default_db_url, make_engine

if TYPE_CHECKING:  # the rest on first use (__getattr__ below): they load the ORM models and SQLAlchemy's ORM
    from commlens.store.export import ExportFormat, export_runs
    from commlens.store.noise import NoiseFloor
    from commlens.store.plain import NotPlain, plain_store
    from commlens.store.preflight import preflight
    from commlens.store.repo import CorruptRunError, MeasurementRow, RunSummary, Store
    from commlens.store.reports import (
        DIAGNOSE_KINDS,
        PROJECTION_KINDS,
        REPORT_KINDS,
        Report,
        ReportError,
        ReportNotFoundError,
        ReportSummary,
        doc_array,
        doc_int,
        doc_number,
        doc_objects,
        read_document,
        sweep_fields,
    )
    from commlens.store.schema import SchemaStatus, SchemaUpgrade, schema_status, upgrade_schema
    from commlens.store.series_meta import (
        ANY,
        ANY_SIZE,
        Baseline,
        BaselineError,
        ResolvedThreshold,
        Threshold,
        ThresholdError,
        resolve_threshold,
        series_text,
    )
    from commlens.store.summaries import MeasurementFilter, RunFilter

# name -> the module that defines it, imported when the name is first asked for
_LAZY = {
    **dict.fromkeys(("ExportFormat", "export_runs"), "export"),
    **dict.fromkeys(("NoiseFloor",), "noise"),
    **dict.fromkeys(("NotPlain", "plain_store"), "plain"),
    **dict.fromkeys(("preflight",), "preflight"),
    **dict.fromkeys(("CorruptRunError", "MeasurementRow", "RunSummary", "Store"), "repo"),
    **dict.fromkeys(
        (
            *("DIAGNOSE_KINDS", "PROJECTION_KINDS", "REPORT_KINDS", "Report", "ReportError", "ReportNotFoundError"),
            *("ReportSummary", "doc_array", "doc_int", "doc_number", "doc_objects", "read_document", "sweep_fields"),
        ),
        "reports",
    ),
    **dict.fromkeys(("MeasurementFilter", "RunFilter"), "summaries"),
    **dict.fromkeys(("SchemaStatus", "SchemaUpgrade", "schema_status", "upgrade_schema"), "schema"),
    **dict.fromkeys(
        (
            *("ANY", "ANY_SIZE", "Baseline", "BaselineError", "ResolvedThreshold", "Threshold", "ThresholdError"),
            *("resolve_threshold", "series_text"),
        ),
        "series_meta",
    ),
}

__all__ = [
    "ANY",
    "ANY_SIZE",
    "DIAGNOSE_KINDS",
    "PROJECTION_KINDS",
    "REPORT_KINDS",
    "Baseline",
    "BaselineError",
    "CorruptRunError",
    "DatabaseFault",
    "ExportFormat",
    "MeasurementFilter",
    "MeasurementRow",
    "NoStoreError",
    "NoiseFloor",
    "NotPlain",
    "Report",
    "ReportError",
    "ReportNotFoundError",
    "ReportSummary",
    "ResolvedThreshold",
    "RunFilter",
    "RunSummary",
    "SchemaStatus",
    "SchemaUpgrade",
    "Store",
    "StoreError",
    "Threshold",
    "ThresholdError",
    "db_url",
    "default_db_url",
    "doc_array",
    "doc_int",
    "doc_number",
    "doc_objects",
    "export_runs",
    "make_engine",
    "plain_store",
    "preflight",
    "read_document",
    "resolve_threshold",
    "schema_status",
    "series_text",
    "sweep_fields",
    "upgrade_schema",
]

# the store's classes and functions on first use: a command that reads only files never loads the ORM. Each is
# bound here once: importing commlens.store.preflight sets this package's ``preflight`` to the module
__getattr__ = lazy_exports(__name__, _LAZY, globals())
