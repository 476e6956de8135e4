"""Reports kept in the store for the dashboard: the ``--json`` documents of diagnoses and projections.

A report (table ``reports``) is what ``commlens diagnose links|stragglers|hang --json``, ``commlens project
--json`` or ``commlens project sweep --json`` printed, kept whole as its ``payload`` with a kind, a title and
when it was kept. Every payload is checked before it is stored, whoever sends it (a command's ``--save``, or
``commlens reports import`` of a file someone wrote earlier):

1. it is JSON data (objects with string keys, arrays, strings, finite numbers, booleans, null), at most
   ``MAX_DEPTH`` deep and ``MAX_PAYLOAD_BYTES`` encoded;
2. it has the top-level fields its kind's command writes, of the types the pages read
   (:data:`DOCUMENT_SHAPES`); the error names the field (``rows[3].rank: expected an integer``).

So the pages can read any stored report without checking it again.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeAlias

from sqlalchemy import func, insert, select
from sqlalchemy.exc import SQLAlchemyError

from commlens.results.jsonvalue import JsonObject, JsonValue
from commlens.store.db import StoreError, driver_reason, write_engine
from commlens.store.models import ReportModel
from commlens.store.repo import MIN_PREFIX_LEN, Store

__all__ = [
    "DIAGNOSE_KINDS",
    "MAX_PAYLOAD_BYTES",
    "PROJECTION_KINDS",
    "REPORT_KINDS",
    "Report",
    "ReportError",
    "ReportNotFoundError",
    "ReportSummary",
    "check_document",
    "count_reports",
    "doc_array",
    "doc_int",
    "doc_number",
    "doc_objects",
    "doc_text",
    "default_title",
    "get_report",
    "list_reports",
    "read_document",
    "save_report",
]

REPORT_KINDS = ("links", "stragglers", "hang", "projection", "sweep")
DIAGNOSE_KINDS = ("links", "stragglers", "hang")
PROJECTION_KINDS = ("projection", "sweep")
MAX_PAYLOAD_BYTES = 16 << 20  # a report's document, encoded as JSON
MAX_DEPTH = 64  # nesting of objects and arrays in a document
MAX_FILE_BYTES = 4 * MAX_PAYLOAD_BYTES  # a --json file as written (indented), before it is parsed
MAX_TITLE_CHARS = 200
MAX_LISTED = 500  # reports one listing returns at most
_REPORT_ID = re.compile(r"[0-9a-f]{32}")
_REPORT_PREFIX = re.compile(rf"[0-9a-f]{{{MIN_PREFIX_LEN},32}}")
_MAX_LISTED_MATCHES = 5


class ReportError(StoreError):
    """A report that cannot be kept or read: an unknown kind, a document that is not its kind's, too big."""


class ReportNotFoundError(ReportError):
    """No stored report has this id."""


@dataclass(frozen=True)
class ReportSummary:
    """One stored report without its document: what a listing shows."""

    report_id: str  # 32 hex digits
    kind: str  # one of REPORT_KINDS
    title: str
    created_at_utc: str  # ISO 8601, UTC (``...Z``)
    fingerprint: str | None  # the system it describes, when known
    run_id: str | None  # the stored run it came from, if any

    def as_dict(self) -> JsonObject:
        return asdict(self)


@dataclass(frozen=True)
class Report:
    """One stored report: its summary and the command's ``--json`` document."""

    summary: ReportSummary
    payload: JsonObject

    def as_dict(self) -> JsonObject:
        return {**self.summary.as_dict(), "payload": self.payload}


# -- document shapes ------------------------------------------------------------------------------------
Shape: TypeAlias = str | list["Shape"] | dict[str, "Shape"]
# A shape is a type name ("str", "int", "num", "bool", "list", "dict"; a trailing "?" allows null),
# a one-item list [ITEM] (an array of ITEM), or a dict {field: shape} (an object with at least those fields).

_FAULT: dict[str, Shape] = {
    "kind": "str",
    "hosts": ["int"],
    "measured_bytes_per_s": "num",
    "expected_bytes_per_s": "num",
    "confidence": "num",
    "evidence": "str",
}
_STRAGGLER_ROW: dict[str, Shape] = {
    "op": "str",
    "rank": "int",
    "n": "int",
    "clock_offset_s": "num?",
    "lateness_p50_s": "num?",
    "lateness_p90_s": "num?",
    "last_arrival_fraction": "num?",
    "own_time_p50_s": "num?",
    "verdicts": ["str"],
}
_DIVERGENCE: dict[str, Shape] = {
    "kind": "str",
    "process_group": "str",
    "process_group_desc": "str?",
    "collective_seq_id": "int?",
    "expected": "dict",
    "culprits": [{"rank": "int"}],
}

DOCUMENT_SHAPES: dict[str, dict[str, Shape]] = {
    "links": {
        "format": "str",
        "hosts": "int",
        "size_bytes": "int",
        "passes": "int",
        "bandwidth_bytes_per_s": [["num?"]],
        "latency_s": [["num?"]],
        "expected_bytes_per_s": "num",
        "noise_rel": "num",
        "low_ratio": "num",
        "healthy": "bool",
        "faults": [_FAULT],
        "ring": "dict?",
    },
    "stragglers": {
        "source": "str",
        "ranks": ["int"],
        "n_collectives": "int",
        "clock_method": "str",
        "clock_note": "str",
        "span": "str",
        "excluded": ["str"],
        "rows": [_STRAGGLER_ROW],
        "stragglers": [{"rank": "int", "kind": "str", "op": "str", "excess_s": "num?"}],
    },
    "hang": {
        "consistent": "bool",
        "backend": "str?",
        "versions": ["str"],
        "ranks": ["int"],
        "expected_ranks": ["int"],
        "ranks_without_dump": ["int"],
        "last_collective_seq_id": "dict",
        "files": "dict",
        "missing_evidence": "dict",
        "suspect_ranks": ["int"],
        "suspects": [{"rank": "int", "reason": "str", "detail": "str"}],
        "divergences": [_DIVERGENCE],
        "notes": ["str"],
    },
    "projection": {
        "workload": "str",
        "topology": "str",
        "gpus": "int",
        "layout": "dict",
        "step_time_s": "num",
        "tokens_per_s": "num",
        "mfu": "num",
        "model_tflops_per_gpu": "num",
        "memory_bytes_per_gpu": "num",
        "memory_capacity_bytes": "num",
        "breakdown": "dict",
        "memory": "dict",
    },
    "sweep": {
        "rows": ["dict"],
        "best": ["dict"],
        "infeasible": "dict",
    },
}

# what a feasible row of a sweep holds (besides its point's fields); an infeasible one has error and kind
SWEEP_RESULT_FIELDS = ("step_time_s", "tokens_per_s", "mfu", "model_tflops_per_gpu", "memory_gb")
SWEEP_ROW_FIELDS = (*SWEEP_RESULT_FIELDS, "layout", "error", "kind")

_TYPE_NAMES = {
    "str": "a string",
    "int": "an integer",
    "num": "a number",
    "bool": "true or false",
    "list": "an array",
    "dict": "an object",
}


def _is(value: Any, name: str) -> bool:
    if name == "str":
        return isinstance(value, str)
    if name == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "num":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "bool":
        return isinstance(value, bool)
    if name == "list":
        return isinstance(value, list)
    return isinstance(value, dict)


def _check_shape(value: JsonValue, shape: Shape, where: str) -> None:
    if isinstance(shape, str):
        name, nullable = shape.rstrip("?"), shape.endswith("?")
        if value is None and nullable:
            return
        if not _is(value, name):
            got = "null" if value is None else type(value).__name__
            raise ReportError(f"{where}: expected {_TYPE_NAMES[name]}{' or null' if nullable else ''}, got {got}")
    elif isinstance(shape, list):
        if not isinstance(value, list):
            raise ReportError(f"{where}: expected an array, got {type(value).__name__}")
        for i, item in enumerate(value):
            _check_shape(item, shape[0], f"{where}[{i}]")
    else:
        if not isinstance(value, dict):
            raise ReportError(f"{where}: expected an object, got {type(value).__name__}")
        for key, sub in shape.items():
            if key not in value:
                raise ReportError(f"{where}: no field {key!r}")
            _check_shape(value[key], sub, f"{where}.{key}")


def check_document(kind: str, payload: Any) -> None:
    """Raise ReportError, naming the field, unless ``payload`` has the shape of a ``kind`` document."""
    if kind not in REPORT_KINDS:
        raise ReportError(f"report kind {kind!r}: expected one of {', '.join(REPORT_KINDS)}")
    if not isinstance(payload, dict):
        raise ReportError(f"a {kind} document is a JSON object, got {type(payload).__name__}")
    try:
        _check_shape(payload, DOCUMENT_SHAPES[kind], "document")
        if kind == "links":
            _check_links(payload)
        elif kind == "sweep":
            _check_sweep(payload)
    except ReportError as e:
        raise ReportError(f"not a {kind} document ({_COMMANDS[kind]} --json): {e}") from None


_COMMANDS = {
    "links": "commlens diagnose links",
    "stragglers": "commlens diagnose stragglers",
    "hang": "commlens diagnose hang",
    "projection": "commlens project",
    "sweep": "commlens project sweep",
}


# Readers of a document's fields once its shape is checked (a field of another type is a ReportError, not a crash)


def doc_int(doc: Mapping[str, JsonValue], key: str) -> int:
    value = doc.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ReportError(f"document.{key}: expected an integer")
    return value


def doc_text(doc: Mapping[str, JsonValue], key: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str):
        raise ReportError(f"document.{key}: expected a string")
    return value


def doc_number(doc: Mapping[str, JsonValue], key: str) -> float:
    value = doc.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ReportError(f"document.{key}: expected a number")
    return value


def doc_array(doc: Mapping[str, JsonValue], key: str) -> Sequence[JsonValue]:
    value = doc.get(key)
    if not isinstance(value, list):
        raise ReportError(f"document.{key}: expected an array")
    return value


def doc_objects(doc: Mapping[str, JsonValue], key: str) -> list[Mapping[str, JsonValue]]:
    """The objects of the array ``key``."""
    items = doc_array(doc, key)
    if not all(isinstance(item, dict) for item in items):
        raise ReportError(f"document.{key}: expected an array of objects")
    return [item for item in items if isinstance(item, dict)]


def _check_links(doc: JsonObject) -> None:
    hosts = doc_int(doc, "hosts")
    if not 1 <= hosts <= 4096:
        raise ReportError(f"document.hosts: expected 1 to 4096, got {hosts}")
    for name in ("bandwidth_bytes_per_s", "latency_s"):
        matrix = doc_array(doc, name)
        if len(matrix) != hosts or any(not isinstance(row, list) or len(row) != hosts for row in matrix):
            raise ReportError(f"document.{name}: expected {hosts} rows of {hosts} values (one per host)")
    for i, fault in enumerate(doc_objects(doc, "faults")):
        if any(not isinstance(h, int) or not 0 <= h < hosts for h in doc_array(fault, "hosts")):
            raise ReportError(f"document.faults[{i}].hosts: a host outside 0..{hosts - 1}")


def _check_sweep(doc: JsonObject) -> None:
    for name in ("rows", "best"):
        for i, row in enumerate(doc_objects(doc, name)):
            where = f"document.{name}[{i}]"
            if "error" in row:
                _check_shape(row, {"error": "str", "kind": "str"}, where)
            else:
                _check_shape(row, {**dict.fromkeys(SWEEP_RESULT_FIELDS, "num"), "layout": "dict"}, where)
            for key, value in row.items():
                if key not in SWEEP_ROW_FIELDS and not isinstance(value, (str, int, float, bool)):
                    raise ReportError(f"{where}.{key}: a varied field's value must be a string, number or boolean")
    infeasible = doc.get("infeasible")
    for reason, n in infeasible.items() if isinstance(infeasible, dict) else ():
        if not _is(n, "int"):
            raise ReportError(f"document.infeasible[{reason!r}]: expected an integer count")


def read_document(path: str | Path, kind: str) -> JsonObject:
    """The ``kind`` document in the ``--json`` file ``path`` (written by its command earlier), checked.

    The file is untrusted: at most ``MAX_FILE_BYTES`` are read, it must be UTF-8 JSON without NaN or
    Infinity, and of its kind's shape (:func:`check_document`). Raises ReportError naming the file.
    """
    path = Path(path)
    try:
        with path.open("rb") as fp:
            data = fp.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ReportError(f"{path}: cannot read: {e.strerror or e}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ReportError(f"{path}: larger than {MAX_FILE_BYTES >> 20} MiB: not a report's --json document")

    def no_constant(name: str) -> Any:
        raise ValueError(f"{name} is not a JSON number")

    try:
        payload = json.loads(data.decode("utf-8"), parse_constant=no_constant)
    except UnicodeDecodeError as e:
        raise ReportError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}:{e.lineno}: not JSON: {e.msg}") from None
    except ValueError as e:
        raise ReportError(f"{path}: not JSON: {e}") from None
    except RecursionError:
        raise ReportError(f"{path}: nested too deep to be a report") from None
    try:
        if isinstance(payload, dict):
            _encode_payload(payload)
        check_document(kind, payload)
    except ReportError as e:
        raise ReportError(f"{path}: {e}") from None
    if not isinstance(payload, dict):  # (check_document refuses anything else; this says so to the type checker)
        raise ReportError(f"{path}: not a JSON object")
    return payload


def _encode_payload(payload: JsonObject) -> int:
    """Check that ``payload`` is plain JSON data within the bounds; returns its encoded size in bytes."""
    stack: list[tuple[Any, str, int]] = [(payload, "document", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ReportError(f"{where}: nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ReportError(f"{where}: a key that is not a string ({key!r})")
                stack.append((item, f"{where}.{key}", depth + 1))
        elif isinstance(value, (list, tuple)):
            stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise ReportError(f"{where}: {value} is not a finite number (JSON has none)")
        elif value is not None and not isinstance(value, (str, int, bool)):
            raise ReportError(f"{where}: {type(value).__name__} is not JSON data")
    size = len(json.dumps(payload, separators=(",", ":"), allow_nan=False).encode())
    if size > MAX_PAYLOAD_BYTES:
        raise ReportError(
            f"the document is {size} bytes as JSON, over the {MAX_PAYLOAD_BYTES >> 20} MiB a report keeps"
        )
    return size


def default_title(kind: str, payload: JsonObject) -> str:
    """A one-line title for a checked ``kind`` document: what it found, in a few words (at most
    ``MAX_TITLE_CHARS``, printable: an imported document's strings are anyone's)."""
    text = _describe(kind, payload)
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= MAX_TITLE_CHARS else text[: MAX_TITLE_CHARS - 3] + "..."


def _describe(kind: str, payload: JsonObject) -> str:

    def plural(n: int, word: str) -> str:
        return f"{n} {word}{'' if n == 1 else 's'}"

    if kind == "links":
        faults = doc_objects(payload, "faults")[:3]
        found = ", ".join(
            f"{doc_text(f, 'kind').replace('_', ' ')} {'-'.join(map(str, doc_array(f, 'hosts')))}" for f in faults
        )
        return f"links over {plural(doc_int(payload, 'hosts'), 'host')}: " + (found or "healthy")
    ranks = len(doc_array(payload, "ranks")) if kind in ("stragglers", "hang") else 0
    if kind == "stragglers":
        stragglers = doc_objects(payload, "stragglers")[:3]
        found = ", ".join(f"rank {s['rank']} ({doc_text(s, 'kind').replace('_', ' ')})" for s in stragglers)
        return (
            f"stragglers over {plural(ranks, 'rank')}, {plural(doc_int(payload, 'n_collectives'), 'collective')}: "
            + (found or "none")
        )
    if kind == "hang":
        if payload["consistent"]:
            return f"hang check of {plural(ranks, 'rank')}: consistent"
        suspects = ",".join(str(s["rank"]) for s in doc_objects(payload, "suspects")[:8])
        return f"hang check of {plural(ranks, 'rank')}: suspects {suspects or '-'}"
    if kind == "projection":
        return f"{payload['workload']} on {payload['gpus']} x {payload['topology']}"
    rows = doc_objects(payload, "rows")
    varied = sweep_fields(rows)
    feasible = sum("error" not in r for r in rows)
    return f"sweep of {plural(len(rows), 'point')} over {', '.join(varied) or 'one point'}: {feasible} feasible"


def sweep_fields(rows: Sequence[Mapping[str, JsonValue]]) -> list[str]:
    """The varied fields of a sweep's rows (``layout.tp``, ``gpus``...), in the order the rows name them."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            if key not in SWEEP_ROW_FIELDS:
                seen.setdefault(key, None)
    return list(seen)


# -- the table ------------------------------------------------------------------------------------------


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _iso(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def save_report(
    store: Store,
    kind: str,
    title: str,
    payload: JsonObject,
    *,
    fingerprint: str | None = None,
    run_id: str | None = None,
) -> str:
    """Keep ``payload`` (a ``kind`` command's ``--json`` document) as a new report; returns its id.

    Raises ReportError naming what is wrong: an unknown kind, a title empty or over ``MAX_TITLE_CHARS``, a
    document not of its kind's shape, not plain JSON data, or over ``MAX_PAYLOAD_BYTES``.
    """
    _encode_payload(payload)
    check_document(kind, payload)
    title = title.strip()
    if not title or len(title) > MAX_TITLE_CHARS or not title.isprintable():
        raise ReportError(f"a report's title is 1 to {MAX_TITLE_CHARS} printable characters, got {title[:40]!r}")
    if fingerprint is not None and not (0 < len(fingerprint) <= 32):
        raise ReportError(f"fingerprint {fingerprint[:40]!r}: expected 1 to 32 characters")
    report_id = uuid.uuid4().hex
    row = {
        "report_id": report_id,
        "kind": kind,
        "title": title,
        "created_at_utc": _now(),
        "fingerprint": fingerprint,
        "run_id": run_id,
        "payload": payload,
    }
    try:
        with write_engine(store.engine).begin() as conn:
            conn.execute(insert(ReportModel), [row])
    except SQLAlchemyError as e:
        raise StoreError(f"cannot save the report in {store.url}: {driver_reason(e)}") from None
    return report_id


def _kinds(kind: str | Sequence[str] | None) -> list[str] | None:
    if kind is None:
        return None
    kinds = [kind] if isinstance(kind, str) else list(kind)
    for k in kinds:
        if k not in REPORT_KINDS:
            raise ReportError(f"report kind {k!r}: expected one of {', '.join(REPORT_KINDS)}")
    return kinds


def _summary(m: Any) -> ReportSummary:
    return ReportSummary(m.report_id, m.kind, m.title, _iso(m.created_at_utc), m.fingerprint, m.run_id)


_SUMMARY_COLUMNS = (
    ReportModel.report_id,
    ReportModel.kind,
    ReportModel.title,
    ReportModel.created_at_utc,
    ReportModel.fingerprint,
    ReportModel.run_id,
)


def list_reports(
    store: Store, kind: str | Sequence[str] | None = None, limit: int = 50, offset: int = 0
) -> list[ReportSummary]:
    """Stored reports of ``kind`` (one kind, several, or None: every kind), newest first, paged."""
    if not 1 <= limit <= MAX_LISTED or offset < 0:
        raise ReportError(f"a listing takes 1 to {MAX_LISTED} reports from an offset >= 0")
    m = ReportModel
    query = select(*_SUMMARY_COLUMNS).order_by(m.created_at_utc.desc(), m.report_id.desc()).limit(limit).offset(offset)
    kinds = _kinds(kind)
    if kinds is not None:
        query = query.where(m.kind.in_(kinds))
    try:
        with store.engine.connect() as conn:
            return [_summary(r) for r in conn.execute(query)]
    except SQLAlchemyError as e:
        raise StoreError(f"cannot read reports from {store.url}: {driver_reason(e)}") from None


def count_reports(store: Store, kind: str | Sequence[str] | None = None) -> int:
    """How many reports of ``kind`` (as :func:`list_reports`) are stored."""
    query = select(func.count()).select_from(ReportModel)
    kinds = _kinds(kind)
    if kinds is not None:
        query = query.where(ReportModel.kind.in_(kinds))
    try:
        with store.engine.connect() as conn:
            return int(conn.scalar(query) or 0)
    except SQLAlchemyError as e:
        raise StoreError(f"cannot read reports from {store.url}: {driver_reason(e)}") from None


def get_report(store: Store, report_id: str) -> Report:
    """The stored report ``report_id`` names: its 32 hex digits, or a unique prefix of at least 4 (as runs
    take); ReportNotFoundError when none or several match."""
    if not _REPORT_PREFIX.fullmatch(report_id):
        raise ReportNotFoundError(
            f"{report_id[:40]!r} is not a report id (32 hex digits, or a prefix of at least {MIN_PREFIX_LEN})"
        )
    matching = ReportModel.report_id == report_id
    if len(report_id) < 32:
        matching = ReportModel.report_id.startswith(report_id, autoescape=True)
    query = (
        select(*_SUMMARY_COLUMNS, ReportModel.payload)
        .where(matching)
        .order_by(ReportModel.report_id)
        .limit(_MAX_LISTED_MATCHES + 1)
    )
    try:
        with store.engine.connect() as conn:
            rows = conn.execute(query).all()
    except SQLAlchemyError as e:
        raise StoreError(f"cannot read reports from {store.url}: {driver_reason(e)}") from None
    if not rows:
        raise ReportNotFoundError(f"no report {report_id} in {store.url}")
    if len(rows) > 1:
        shown = ", ".join(r.report_id for r in rows[:_MAX_LISTED_MATCHES])
        more = ", ..." if len(rows) > _MAX_LISTED_MATCHES else ""
        raise ReportNotFoundError(f"{report_id!r} matches several reports: {shown}{more}; give more digits")
    return Report(_summary(rows[0]), rows[0].payload)
