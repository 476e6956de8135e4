"""The result store: runs, measurements and raw samples in SQLite (default) or PostgreSQL."""

from commlens.store.db import StoreError, db_url, default_db_url, make_engine
from commlens.store.repo import RunSummary, Store

__all__ = ["RunSummary", "Store", "StoreError", "db_url", "default_db_url", "make_engine"]
