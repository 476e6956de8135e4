"""Between result records and table rows, losslessly: a saved run loads back equal to itself."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from dataclasses import asdict, fields, is_dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypedDict

from commlens.results.jsonfmt import FormatError, system_from_dict
from commlens.results.jsonvalue import JsonObject, JsonValue
from commlens.results.nccltests_json import from_nccl_tests, to_nccl_tests
from commlens.results.records import Measurement, MeasurementKey, RecordError, Run, SystemInfo
from commlens.results.runconfig import ConfigFormatError, config_from_wire
from commlens.results.stats import TimeStats
from commlens.store.db import StoreError

if TYPE_CHECKING:  # (annotations only: reading a run without SQLAlchemy uses run_from_model too)
    from commlens.store.models import MeasurementModel, RunModel

__all__ = [
    "KEY_COLUMNS",
    "NO_VALUE",
    "decode_redop_root",
    "encode_redop_root",
    "is_date",
    "key_columns",
    "key_from_columns",
    "measurement_figures",
    "measurement_rows",
    "reported_from_json",
    "run_from_model",
    "run_row",
    "to_utc",
]

_DATE_ONLY = re.compile(r"^\d{4}-\d{2}-\d{2}$")

# The store's ``redop`` and ``root`` columns say "no reduction" and "no root" as nccl-tests prints them, ``none``
# and ``-1``: not NULL, since NULLs are never equal in a UNIQUE constraint and would let a series hold two noise
# floors (and the columns keep what stores before commlens.run/3 hold, with no migration).


def encode_redop_root(redop: str | None, root: int | None) -> tuple[str, int]:
    """A measurement's redop and root as the store's columns hold them."""
    return to_nccl_tests(redop, root)


def decode_redop_root(redop: str, root: int) -> tuple[str | None, int | None]:
    """The store's ``redop`` and ``root`` columns as a measurement holds them (None for none)."""
    return from_nccl_tests(redop, root)


# The tables that key rows by series (noise_floors, change_points) hold a measurement key in these columns:
# redop and root as above, and ``group_name`` (and a series' ``tag``) ``''`` for none, for the same reason.
KEY_COLUMNS = ("op", "algo", "dtype", "redop", "root", "size_bytes", "in_place", "group_name")
NO_VALUE = ""


def key_columns(key: MeasurementKey) -> dict[str, object]:
    """``key`` as the series tables' ``KEY_COLUMNS`` hold it."""
    redop, root = encode_redop_root(key.redop, key.root)
    group = NO_VALUE if key.group is None else key.group
    return dict(zip(KEY_COLUMNS, (key.op, key.algo, key.dtype, redop, root, key.size_bytes, key.in_place, group)))


def key_from_columns(row: Any) -> MeasurementKey:
    """The measurement key of a series table's row (its ``KEY_COLUMNS`` as attributes)."""
    redop, root = decode_redop_root(row.redop, row.root)
    group = None if row.group_name == NO_VALUE else row.group_name
    return MeasurementKey(row.op, row.algo, row.dtype, redop, root, row.size_bytes, row.in_place, group)


def to_utc(value: str | datetime, *, what: str) -> datetime:
    """A naive UTC datetime; naive inputs are taken as UTC, as run timestamps are."""
    if isinstance(value, str):
        text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value  # Python 3.10 lacks "Z"
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            raise StoreError(f"{what} {value!r} is not an ISO 8601 time") from None
    if value.tzinfo is not None:
        value = value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def is_date(value: str | datetime) -> bool:
    """Whether ``value`` is a bare date (``2024-05-01``), which as an upper bound means the whole day."""
    return isinstance(value, str) and bool(_DATE_ONLY.match(value))


_REPORTED_STATS = ("p50_s", "p95_s", "p99_s", "min_s", "max_s", "stdev_s", "cv")


def _number(value: JsonValue) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def reported_from_json(data: Mapping[str, JsonValue] | None) -> TimeStats | None:
    """The statistics a tool reported, from the ``reported`` column (``TimeStats.as_dict()`` plus ``n``)."""
    if data is None:
        return None
    mean_s, n = _number(data.get("mean_s")), data.get("n", 0)
    if mean_s is None or not isinstance(n, int) or isinstance(n, bool):
        raise StoreError(f"reported statistics without a mean or a count: {str(data)[:80]}")
    stats = {name: _number(data.get(name)) for name in _REPORTED_STATS}
    return TimeStats(mean_s=mean_s, n=n, **stats)


class RunRow(TypedDict):
    """One row of the ``runs`` table, as inserted."""

    run_id: str
    started_at: str
    started_at_utc: datetime
    finished_at: str | None
    status: str
    tag: str | None
    revision: str | None
    command_line: str
    source: str
    world_size: int
    backend: str
    device: str
    fingerprint: str
    nhosts: int
    commlens_version: str
    avg_busbw_bytes_per_s: float
    system: JsonObject
    config: JsonObject
    notes: list[str]


class SampleRow(TypedDict):
    """One row of the ``samples`` table, as inserted (its ``measurement_id`` added once the database gave it)."""

    samples_s: list[float]
    rank_samples_s: list[list[float]] | None
    rounds: list[int] | None


def run_row(run: Run) -> RunRow:
    """The ``runs`` row of ``run``; StoreError if its start time is not ISO 8601."""
    system = run.system
    return {
        "run_id": run.run_id,
        "started_at": run.started_at,
        "started_at_utc": to_utc(run.started_at, what=f"run {run.run_id!r}: started_at"),
        "finished_at": run.finished_at,
        "status": run.status,
        "tag": run.tag,
        "revision": run.revision,
        "command_line": run.command_line,
        "source": run.source,
        "world_size": run.world_size,
        "backend": system.backend,
        "device": system.device,
        "fingerprint": system.fingerprint(),
        "nhosts": len(system.hosts),
        "commlens_version": system.commlens_version,
        "avg_busbw_bytes_per_s": run.avg_busbw_bytes_per_s(),
        "system": _system_dict(system),
        "config": run.config.as_dict(),
        "notes": list(run.notes),
    }


def _system_dict(system: SystemInfo) -> JsonObject:
    """``dataclasses.asdict(system)`` (equal to it), without its generic walk: a run's system is mostly
    strings and numbers, and ``commlens ingest`` of many small files converts one per file."""
    return {f.name: _plain(getattr(system, f.name)) for f in fields(system)}


def _plain(value: Any) -> Any:
    """A copy of ``value`` as ``asdict`` makes it: containers copied, dataclasses as dicts."""
    kind = type(value)
    if kind in (str, int, float, bool) or value is None:
        return value
    if kind is dict:
        return {_plain(k): _plain(v) for k, v in value.items()}
    if kind in (list, tuple):
        return kind(_plain(v) for v in value)
    if is_dataclass(value) and not isinstance(value, type):
        return asdict(value)
    return copy.deepcopy(value)


def measurement_rows(run: Run, start: int, stop: int) -> Iterator[tuple[dict[str, object], SampleRow]]:
    """The ``measurements`` row and the ``samples`` row (without its ``measurement_id``, which the
    database assigns) of each of ``run.measurements[start:stop]``, made one at a time: a save of
    a million measurements holds only one batch of rows."""
    for position in range(start, min(stop, len(run.measurements))):
        yield _measurement_rows(run.run_id, position, run.measurements[position])


def _measurement_rows(run_id: str, position: int, m: Measurement) -> tuple[dict[str, object], SampleRow]:
    """The ``measurements`` row and the ``samples`` row (without its id) of one measurement."""
    row: dict[str, object] = {  # the columns of MeasurementModel
        "run_id": run_id,
        "position": position,
        **measurement_figures(m),
        "in_place": m.in_place,
        "world_size": m.world_size,
        "reported": None if m.reported is None else {**m.reported.as_dict(), "n": m.reported.n},
        "group_name": m.group,
    }
    rank = None if m.rank_samples_s is None else [list(r) for r in m.rank_samples_s]
    rounds = None if m.rounds is None else list(m.rounds)
    return row, {"samples_s": list(m.samples_s), "rank_samples_s": rank, "rounds": rounds}


def measurement_figures(m: Measurement) -> dict[str, str | int | float | None]:
    """What a ``measurements`` row and a row of ``commlens export``'s CSV both hold of a measurement, by column:
    its key but placement and group (``redop`` and ``root`` in the store's encoding: ``none``, -1), its count,
    results check, statistics and bandwidths (busBW from algBW, computed once)."""
    stats = m.stats
    algbw = m.algbw_bytes_per_s
    redop, root = encode_redop_root(m.redop, m.root)
    return {
        "op": m.op,
        "algo": m.algo,
        "dtype": m.dtype,
        "redop": redop,
        "root": root,
        "size_bytes": m.size_bytes,
        "count": m.count,
        "nwrong": m.nwrong,
        "mean_s": stats.mean_s,
        "p50_s": stats.p50_s,
        "p95_s": stats.p95_s,
        "p99_s": stats.p99_s,
        "min_s": stats.min_s,
        "max_s": stats.max_s,
        "cv": stats.cv,
        "algbw_bytes_per_s": algbw,
        "busbw_bytes_per_s": algbw * m.busbw_factor,  # Measurement.busbw_bytes_per_s
    }


def run_from_model(row: RunModel) -> Run:
    try:
        return Run(
            run_id=row.run_id,
            started_at=row.started_at,
            finished_at=row.finished_at,
            status=row.status,  # type: ignore[arg-type]  # checked by the table and by Run
            tag=row.tag,
            revision=row.revision,
            command_line=row.command_line,
            source=row.source,
            config=config_from_wire(row.config, row.source),  # a row from before configs had kinds: by source
            notes=tuple(row.notes),
            system=system_from_dict(row.system),
            measurements=tuple(_measurement_from_model(m) for m in row.measurements),
        )
    except (RecordError, ConfigFormatError, FormatError, TypeError) as e:
        raise StoreError(f"run {row.run_id!r} in the store is invalid: {e}") from None


def _measurement_from_model(row: MeasurementModel) -> Measurement:
    rank = row.samples.rank_samples_s
    redop, root = decode_redop_root(row.redop, row.root)
    return Measurement(
        op=row.op,
        algo=row.algo,
        dtype=row.dtype,
        redop=redop,
        root=root,
        size_bytes=row.size_bytes,
        count=row.count,
        in_place=row.in_place,
        world_size=row.world_size,
        nwrong=row.nwrong,
        samples_s=tuple(float(s) for s in row.samples.samples_s),
        rank_samples_s=None if rank is None else tuple(tuple(float(s) for s in r) for r in rank),
        reported=reported_from_json(row.reported),
        rounds=None if row.samples.rounds is None else tuple(int(k) for k in row.samples.rounds),
        group=row.group_name,
    )
