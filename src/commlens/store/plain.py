"""Reads of a SQLite store through Python's ``sqlite3`` alone: ``commlens runs`` and ``commlens show`` start
without loading SQLAlchemy (most of their start-up otherwise).

Only the plain case is read here: a SQLite file at the current schema revision, whose rows decode as
commlens writes them. Anything else (PostgreSQL, a URL with options, an old, newer or damaged store, a
value that does not decode, a ref that matches no run or several, filters by date, source, revision or id) raises
:class:`NotPlain`, and the caller reads through :class:`~commlens.store.repo.Store`, which says what is
wrong as it always has. What is read here equals what ``Store`` reads (tests/test_store_plain.py).
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from commlens.results.records import FloorKey, MeasurementKey
from commlens.store.convert import decode_redop_root
from commlens.store.db import SCHEMA_REVISION, StoreError, _on_read_only_mount, db_url, default_db_url
from commlens.store.summaries import SUMMARY_COLUMNS, MeasurementFilter, RunFilter, RunSummary, summary_from_columns

if TYPE_CHECKING:
    from commlens.results.records import Run

__all__ = ["HistoryPoint", "HistoryRun", "NotPlain", "PlainStore", "history_points", "plain_store"]

# SQLAlchemy's DateTime on SQLite: "YYYY-MM-DD HH:MM:SS.ffffff"
_STORED_DATETIME = re.compile(r"(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2}):(\d{2})(?:\.(\d{6}))?")
_MIN_PREFIX_LEN = 4  # repo.MIN_PREFIX_LEN
_FINGERPRINT_CHARS = 16  # repo._FINGERPRINT_CHARS


class NotPlain(StoreError):
    """This read needs ``Store`` (SQLAlchemy): not a plain SQLite store, or not a plain answer."""


@contextmanager
def plain_store(db: str | None) -> Iterator[PlainStore]:
    """The store at ``db`` (or the default) opened read-only through ``sqlite3``; NotPlain when it is not a
    SQLite file at the current schema revision."""
    url = default_db_url() if db is None else db_url(db)
    path = url.removeprefix("sqlite:///")
    if path == url or not path or any(c in path for c in "?%") or path.startswith(("file:", ":memory:")):
        raise NotPlain("not a plain SQLite path")
    database = Path(path).expanduser()
    if not database.is_file() or _on_read_only_mount(database):
        raise NotPlain("no such file, or a read-only mount")
    try:
        conn = sqlite3.connect(f"file:{quote(str(database))}?mode=ro", uri=True, timeout=30.0)
    except sqlite3.Error as e:
        raise NotPlain(str(e)) from None
    try:
        store = PlainStore(conn, url)
        if store.rows("SELECT version_num FROM alembic_version") != [(SCHEMA_REVISION,)]:
            raise NotPlain("not at the current schema revision")
        yield store
    finally:
        conn.close()


class PlainStore:
    """The reads of ``Store`` that ``runs`` and ``show`` make, on a plain SQLite store (see the module)."""

    def __init__(self, conn: sqlite3.Connection, url: str) -> None:
        self._conn = conn
        self.url = url

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        try:
            return self._conn.execute(sql, params).fetchall()
        except (sqlite3.Error, OverflowError) as e:  # OverflowError: a number too large for SQLite
            raise NotPlain(str(e)) from None

    def run_ids_with_tag(self, tag: str) -> list[str]:
        """As ``Store.run_ids_with_tag``."""
        return [
            r[0] for r in self.rows("SELECT run_id FROM runs WHERE tag = ? ORDER BY started_at_utc, run_id", (tag,))
        ]

    def resolve(self, run_ref: str) -> str:
        """As ``Store.resolve`` for a ref that names exactly one run; NotPlain otherwise (``Store`` words why)."""
        if self.rows("SELECT run_id FROM runs WHERE run_id = ?", (run_ref,)):
            return run_ref
        if len(run_ref) < _MIN_PREFIX_LEN:
            raise NotPlain("a short prefix")
        found = self.rows(
            "SELECT run_id FROM runs WHERE run_id LIKE ? || '%' ESCAPE '/' ORDER BY run_id", (_like_escaped(run_ref),)
        )
        matches = [r[0] for r in found if r[0].startswith(run_ref)]  # SQLite's LIKE ignores case
        if len(matches) != 1:
            raise NotPlain("no run or several")
        return str(matches[0])

    def list_runs(self, where: RunFilter = RunFilter(), *, limit: int | None = 50) -> list[RunSummary]:
        """As ``Store.list_runs`` filtered by tag, op and fingerprint (the other filters: ``Store``)."""
        if limit is not None and limit < 1:
            raise NotPlain("a bad limit")
        if replace(where, tag=None, op=None, fingerprint=None) != RunFilter():
            raise NotPlain("a filter by date, source, revision or run id")
        conditions, params = _run_filters(where.tag, where.fingerprint)
        if where.op is not None:
            conditions.append("EXISTS (SELECT 1 FROM measurements m WHERE m.run_id = runs.run_id AND m.op = ?)")
            params.append(where.op)
        sql = (
            f"SELECT {', '.join(SUMMARY_COLUMNS)}, started_at_utc FROM runs"
            + (" WHERE " + " AND ".join(conditions) if conditions else "")
            + " ORDER BY started_at_utc DESC, run_id DESC"
            + (" LIMIT ?" if limit is not None else "")
        )
        found = self.rows(sql, tuple(params) + ((limit,) if limit is not None else ()))
        counts: dict[str, dict[str, int]] = {row[0]: {} for row in found}
        for start in range(0, len(found), 500):
            ids = [row[0] for row in found[start : start + 500]]
            marks = ",".join("?" * len(ids))
            for run_id, op_name, n in self.rows(
                f"SELECT run_id, op, count(*) FROM measurements WHERE run_id IN ({marks}) GROUP BY run_id, op",
                tuple(ids),
            ):
                counts[run_id][op_name] = n
        return [
            summary_from_columns(dict(zip(SUMMARY_COLUMNS, row)), _stored_datetime(row[-1]), counts[row[0]])
            for row in found
        ]

    def get_run(self, run_id: str) -> Run:
        """The run with this exact id, with samples, as ``Store.get_run`` loads it."""
        from commlens.store.convert import run_from_model

        found = self.rows(
            "SELECT run_id, started_at, finished_at, status, tag, revision, command_line, source, config, notes, "
            "system FROM runs WHERE run_id = ?",
            (run_id,),
        )
        if len(found) != 1:
            raise NotPlain("no such run")
        columns = ("run_id", "started_at", "finished_at", "status", "tag", "revision", "command_line", "source")
        run = SimpleNamespace(**dict(zip(columns, found[0][:8])))
        measurements = self.rows(_MEASUREMENTS_SQL, (run_id,))
        try:
            run.config, run.notes, run.system = (json.loads(text) for text in found[0][8:])
            run.measurements = [_measurement(row) for row in measurements]
            return run_from_model(run)  # type: ignore[arg-type]  # the ORM row's attributes, read plainly
        except (ValueError, TypeError, KeyError, AttributeError, StoreError) as e:
            raise NotPlain(f"a value that does not decode: {e}") from None

    def mean_history(
        self, where: MeasurementFilter = MeasurementFilter()
    ) -> tuple[list[HistoryRun], list[HistoryPoint]]:
        """As ``Store.mean_history`` filtered by op, dtype, size, tag and fingerprint (the other filters: ``Store``)."""
        if replace(where, op=None, dtype=None, size_bytes=None, tag=None, fingerprint=None) != MeasurementFilter():
            raise NotPlain("a filter by date or run id")
        run_where, params = _run_filters(where.tag, where.fingerprint, table="r.")
        conditions, point_params = list(run_where), list(params)
        for column, value in (("op", where.op), ("dtype", where.dtype), ("size_bytes", where.size_bytes)):
            if value is not None:
                conditions.append(f"m.{column} = ?")
                point_params.append(value)
        found = self.rows(
            "SELECT m.run_id, m.op, m.algo, m.dtype, m.redop, m.root, m.size_bytes, m.in_place, m.group_name, m.mean_s "
            "FROM measurements m JOIN runs r ON m.run_id = r.run_id"
            + (" WHERE " + " AND ".join(conditions) if conditions else "")
            + " ORDER BY r.started_at_utc, r.run_id, m.position",
            tuple(point_params),
        )
        stored = self.rows(
            "SELECT r.run_id, r.started_at_utc, r.revision, r.tag, r.fingerprint, r.status FROM runs r"
            + (" WHERE " + " AND ".join(run_where) if run_where else ""),
            tuple(params),
        )
        runs = [(run_id, _stored_datetime(utc), *rest) for run_id, utc, *rest in stored]
        try:
            return runs, history_points(found, runs)
        except (ValueError, TypeError, StoreError) as e:
            raise NotPlain(f"a value that does not decode: {e}") from None

    def floors(self, fingerprint: str | None) -> dict[FloorKey, float]:
        """As ``commlens.store.noise.load_floors`` (of one system, or all)."""
        found = self.rows(
            "SELECT fingerprint, op, algo, dtype, redop, root, size_bytes, in_place, group_name, sd_log FROM noise_floors"
            + ("" if fingerprint is None else " WHERE fingerprint = ?"),
            () if fingerprint is None else (fingerprint,),
        )
        floors = {}
        for fp, op, algo, dtype, redop, root, size, in_place, group, sd_log in found:
            if type(in_place) is not int:
                raise NotPlain("a flag that is not one")
            key = MeasurementKey(op, algo, dtype, *decode_redop_root(redop, root), size, bool(in_place), group or None)
            floors[FloorKey(fp, key)] = sd_log
        return floors

    def has_thresholds(self) -> bool:
        """Whether any threshold is stored (``commlens threshold set``)."""
        return bool(self.rows("SELECT 1 FROM thresholds LIMIT 1"))


HistoryRun = tuple[str, datetime, str | None, str | None, str, str]
HistoryPoint = tuple[str, MeasurementKey, float]


def history_points(
    found: list[tuple[str, str, str, str, str, int, int, int, str | None, float]], runs: list[HistoryRun]
) -> list[HistoryPoint]:
    """``Store.mean_history``'s points from its rows (run_id, op, algo, dtype, redop, root, size, in_place,
    group, mean_s): (run_id, measurement key, mean_s), one key object for the rows of one key (redop and root
    decoded once); rows of a run not in ``runs`` (deleted between the two queries) left out."""
    known = {run[0] for run in runs}
    keys: dict[tuple[str, str, str, str, int, int, int, str | None], MeasurementKey] = {}
    points = []
    for run_id, op_name, algo, dtype_name, redop, root, size, in_place, group, mean_s in found:
        if run_id not in known:
            continue
        stored = (op_name, algo, dtype_name, redop, root, size, in_place, group)
        key = keys.get(stored)
        if key is None:
            redop_root = decode_redop_root(redop, root)
            key = keys[stored] = MeasurementKey(op_name, algo, dtype_name, *redop_root, size, bool(in_place), group)
        points.append((run_id, key, float(mean_s)))
    return points


def _run_filters(tag: str | None, fingerprint: str | None, table: str = "") -> tuple[list[str], list[Any]]:
    """SQL conditions and parameters of ``repo._run_filters`` for a tag and a fingerprint (or its prefix)."""
    where, params = [], []
    if tag is not None:
        where.append(f"{table}tag = ?")
        params.append(tag)
    if fingerprint is not None:
        fp = fingerprint.strip().lower()
        if len(fp) == _FINGERPRINT_CHARS:
            where.append(f"{table}fingerprint = ?")
            params.append(fp)
        else:
            where.append(f"{table}fingerprint LIKE ? || '%' ESCAPE '/'")
            params.append(_like_escaped(fp))
    return where, params


# The columns of a run's measurements that get_run reads, named as MeasurementModel's attributes, then
# those of its samples (SampleModel's): the query and the rows run_from_model decodes, from one list.
_MEASUREMENT_COLUMNS = tuple(
    "op algo dtype redop root size_bytes count in_place world_size nwrong reported group_name".split()
)
_SAMPLE_COLUMNS = ("samples_s", "rank_samples_s", "rounds", "measurement_id")
_MEASUREMENTS_SQL = (
    f"SELECT {', '.join([*(f'm.{c}' for c in _MEASUREMENT_COLUMNS), *(f's.{c}' for c in _SAMPLE_COLUMNS)])} "
    "FROM measurements m LEFT JOIN samples s ON s.measurement_id = m.id WHERE m.run_id = ? ORDER BY m.position"
)


def _measurement(row: tuple[Any, ...]) -> SimpleNamespace:
    columns = dict(zip(_MEASUREMENT_COLUMNS, row))
    samples_s, rank_samples_s, rounds, measurement_id = row[len(_MEASUREMENT_COLUMNS) :]
    if measurement_id is None or type(columns["in_place"]) is not int:
        raise ValueError("a measurement without its samples, or a flag that is not one")
    columns["in_place"] = bool(columns["in_place"])
    columns["reported"] = _json_or_none(columns["reported"])
    samples = SimpleNamespace(
        samples_s=json.loads(samples_s), rank_samples_s=_json_or_none(rank_samples_s), rounds=_json_or_none(rounds)
    )
    return SimpleNamespace(**columns, samples=samples)


def _json_or_none(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _stored_datetime(text: Any) -> datetime:
    match = _STORED_DATETIME.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise NotPlain(f"a stored time that is not one: {text!r}")
    year, month, day, hour, minute, second, micro = (int(g or 0) for g in match.groups())
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=timezone.utc)


def _like_escaped(text: str) -> str:
    """``text`` for ``LIKE ... ESCAPE '/'``, as SQLAlchemy's ``startswith(autoescape=True)`` escapes it."""
    return text.replace("/", "//").replace("%", "/%").replace("_", "/_")
