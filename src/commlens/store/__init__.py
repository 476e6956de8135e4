"""The result store: runs, measurements and raw samples in SQLite (default) or PostgreSQL.

See ``commlens.store.repo`` for the query API and ``docs/store.md`` for the set-up.
"""

from commlens.store.db import DatabaseFault, NoStoreError, StoreError, db_url, default_db_url, make_engine
from commlens.store.preflight import preflight
from commlens.store.repo import CorruptRunError, MeasurementRow, RunSummary, Store
from commlens.store.reports import Report, ReportError, ReportNotFoundError, ReportSummary
from commlens.store.schema import SchemaStatus, SchemaUpgrade, schema_status, upgrade_schema
from commlens.store.series_meta import Baseline, BaselineError, ResolvedThreshold, Threshold, ThresholdError

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
