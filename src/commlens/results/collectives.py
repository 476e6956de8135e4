"""Collectives as a live job issued them: one record per (rank, group, sequence number), and windows of them.

A :class:`CollectiveRecord` is what :mod:`commlens.monitor` records on each
rank of a training job and what :mod:`commlens.ingest` reads from NCCL
Inspector's output: the op, the process group (name, size, ranks), the
group's sequence number (the same on every rank of the group, which is how
ranks are joined), the message size with nccl-tests' meaning, the dtype, and
the rank's start and end on its own clock.

:func:`aggregate` turns records into :class:`WindowRow` s, one per
(window, group, op, size bucket): count, total time and bytes, and the p50
and p99 of duration and busBW. :func:`run_from_windows` keeps a job's
windows as a :class:`~commlens.results.records.Run` of source ``monitor``,
so compare, detect and the store work on production data.

The wire form (:meth:`CollectiveRecord.as_wire`, :func:`record_from_wire`) is
a flat JSON object, read as hostile input: every field type- and
range-checked, strings bounded.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from commlens.errors import CommlensError
from commlens.ops import OPS, UnknownOpError, get_op
from commlens.results.jsonvalue import JsonObject, JsonValue
from commlens.results.records import DTYPE_SIZES, MAX_RANKS, MAX_SIZE_BYTES, Measurement
from commlens.results.stats import percentile
from commlens.results.units import finite_float, format_size

__all__ = [
    "MAX_GROUP_NAME",
    "TIMINGS",
    "CollectiveRecord",
    "CollectiveRecordError",
    "WindowRow",
    "aggregate",
    "measurements_from_windows",
    "record_from_wire",
    "window_from_wire",
    "size_bucket",
    "size_bucket_label",
]

MAX_GROUP_NAME = 200  # characters: a process group's name as labelled
MAX_GROUP_RANKS = 4096  # ranks listed per group on the wire (larger groups give only their size)

# How a record's start and end were taken.
TIMINGS: dict[str, str] = {
    "cpu": "host clock around the call, the end when its Work completed (gloo, or any backend by wrapping)",
    "cuda": "the process group's completion hook, CUDA events around the kernel (NCCL)",
    "inspector": "NCCL Inspector's execution time (GPU timer or CPU clock, as it reports)",
}


class CollectiveRecordError(CommlensError, ValueError):
    """A collective record that is inconsistent or malformed (the message names the field)."""


@dataclass(frozen=True, slots=True)
class CollectiveRecord:
    """One collective on one rank. Times are seconds on the rank's own clock (epoch based)."""

    rank: int
    group: str
    group_size: int
    seq: int
    op: str
    size_bytes: int
    dtype: str
    start_s: float
    end_s: float
    group_ranks: tuple[int, ...] | None = None  # global ranks of the group, in group order (None: not known)
    host: str | None = None
    step: int | None = None  # the training step it was issued in, when the script marks steps
    timing: str = "cpu"

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise CollectiveRecordError(f"unknown op {self.op!r}")
        if self.dtype not in DTYPE_SIZES and self.dtype != "other":
            raise CollectiveRecordError(f"unknown dtype {self.dtype!r}")
        if not 0 <= self.rank < MAX_RANKS:
            raise CollectiveRecordError(f"rank must be in 0..{MAX_RANKS - 1}, got {self.rank}")
        if not 1 <= self.group_size <= MAX_RANKS:
            raise CollectiveRecordError(f"group_size must be in 1..{MAX_RANKS}, got {self.group_size}")
        if not self.group or len(self.group) > MAX_GROUP_NAME:
            raise CollectiveRecordError(f"group name must be 1..{MAX_GROUP_NAME} characters")
        if not 0 <= self.seq < 2**62:
            raise CollectiveRecordError(f"seq must be >= 0, got {self.seq}")
        if not 0 <= self.size_bytes < MAX_SIZE_BYTES:
            raise CollectiveRecordError(f"size_bytes must be in 0..{MAX_SIZE_BYTES}, got {self.size_bytes}")
        if not (math.isfinite(self.start_s) and math.isfinite(self.end_s)) or self.end_s < self.start_s:
            raise CollectiveRecordError(
                f"start_s and end_s must be finite with end >= start ({self.op} seq {self.seq})"
            )
        if self.timing not in TIMINGS:
            raise CollectiveRecordError(f"timing must be one of {', '.join(TIMINGS)}, got {self.timing!r}")
        if self.group_ranks is not None:
            if len(self.group_ranks) != self.group_size:
                raise CollectiveRecordError(
                    f"group {self.group!r}: {len(self.group_ranks)} ranks listed, size {self.group_size}"
                )
            if self.rank not in self.group_ranks:
                raise CollectiveRecordError(f"rank {self.rank} is not in its group {self.group!r}")
        if self.step is not None and not 0 <= self.step < 2**62:
            raise CollectiveRecordError(f"step must be >= 0, got {self.step}")

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def busbw_bytes_per_s(self) -> float:
        """busBW as nccl-tests defines it for this op and group size (0 for a zero-length collective)."""
        spec = get_op(self.op)
        return spec.algbw(self.size_bytes, self.duration_s) * spec.busbw_factor(self.group_size)

    def as_wire(self) -> JsonObject:
        out: JsonObject = {
            "rank": self.rank,
            "group": self.group,
            "group_size": self.group_size,
            "seq": self.seq,
            "op": self.op,
            "size_bytes": self.size_bytes,
            "dtype": self.dtype,
            "start_s": self.start_s,
            "end_s": self.end_s,
            "timing": self.timing,
        }
        if self.group_ranks is not None and len(self.group_ranks) <= MAX_GROUP_RANKS:
            out["group_ranks"] = list(self.group_ranks)
        if self.host is not None:
            out["host"] = self.host
        if self.step is not None:
            out["step"] = self.step
        return out


def _int(d: JsonObject, key: str, default: int | None = None) -> int:
    value = d.get(key, default)
    if value is None:
        raise CollectiveRecordError(f"field {key!r} is missing")
    if not isinstance(value, int) or isinstance(value, bool):
        raise CollectiveRecordError(f"field {key!r} must be an integer, got {type(value).__name__}")
    return value


def _str(d: JsonObject, key: str, limit: int = MAX_GROUP_NAME) -> str:
    value = d.get(key)
    if not isinstance(value, str) or not value or len(value) > limit:
        raise CollectiveRecordError(f"field {key!r} must be a string of 1..{limit} characters")
    return value


def record_from_wire(d: Any) -> CollectiveRecord:
    """A record from its JSON object; raises :class:`CollectiveRecordError` naming the bad field."""
    if not isinstance(d, dict):
        raise CollectiveRecordError(f"a record must be a JSON object, got {type(d).__name__}")
    times = {}
    for key in ("start_s", "end_s"):
        value = finite_float(d.get(key))
        if value is None:
            raise CollectiveRecordError(f"field {key!r} must be a finite number")
        times[key] = value
    ranks = d.get("group_ranks")
    if ranks is not None:
        if not isinstance(ranks, list) or len(ranks) > MAX_GROUP_RANKS:
            raise CollectiveRecordError(f"field 'group_ranks' must be a list of at most {MAX_GROUP_RANKS} ranks")
        if any(not isinstance(r, int) or isinstance(r, bool) or not 0 <= r < MAX_RANKS for r in ranks):
            raise CollectiveRecordError("field 'group_ranks' must hold ranks (integers >= 0)")
    host = d.get("host")
    if host is not None and (not isinstance(host, str) or len(host) > MAX_GROUP_NAME):
        raise CollectiveRecordError(f"field 'host' must be a string of at most {MAX_GROUP_NAME} characters")
    step = d.get("step")
    if step is not None:
        step = _int(d, "step")
    timing = d.get("timing", "cpu")
    if not isinstance(timing, str):
        raise CollectiveRecordError("field 'timing' must be a string")
    try:
        op = get_op(_str(d, "op", 40)).name
    except UnknownOpError as e:
        raise CollectiveRecordError(str(e)) from None
    return CollectiveRecord(
        rank=_int(d, "rank"),
        group=_str(d, "group"),
        group_size=_int(d, "group_size"),
        seq=_int(d, "seq"),
        op=op,
        size_bytes=_int(d, "size_bytes"),
        dtype=_str(d, "dtype", 20),
        start_s=times["start_s"],
        end_s=times["end_s"],
        group_ranks=tuple(ranks) if ranks is not None else None,
        host=host,
        step=step,
        timing=timing,
    )


def size_bucket(size_bytes: int) -> int:
    """The power of two at or below ``size_bytes`` (0 for 0): records of one bucket are one row of a window."""
    return 0 if size_bytes <= 0 else 1 << (size_bytes.bit_length() - 1)


def size_bucket_label(bucket: int) -> str:
    """``67108864`` -> ``"64M"``: the bucket's lower bound, as a Prometheus label and in tables."""
    return format_size(bucket)


@dataclass(frozen=True)
class WindowRow:
    """One (window, group, op, size bucket) of one rank's collectives: counts and distributions."""

    window: int
    start_s: float  # the window's bounds on the rank's clock
    end_s: float
    rank: int
    group: str
    group_size: int
    op: str
    dtype: str
    size_bucket: int
    count: int
    time_s: float  # total time in these collectives
    bytes: int  # total bytes (size_bytes summed)
    size_bytes: int  # the median size of the records (what the expectation is computed for)
    duration_p50_s: float
    duration_p99_s: float
    busbw_p50_bytes_per_s: float
    busbw_p99_bytes_per_s: float  # the 99th percentile of busBW: the fast end (the slow end is duration p99)
    # At most ``keep`` durations, for the run's measurements, and the group's ranks: not in the wire form, so not
    # compared (a window read back from a stored run equals the one written)
    durations_s: tuple[float, ...] = field(default=(), repr=False, compare=False)
    group_ranks: tuple[int, ...] | None = field(default=None, compare=False)
    first_step: int | None = None
    last_step: int | None = None

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.group, self.op, self.size_bucket)

    def as_wire(self) -> JsonObject:
        """Its fields in order, less the durations and group ranks; the steps where known."""
        out: JsonObject = {name: getattr(self, name) for name in _WINDOW_WIRE}
        if self.first_step is not None:
            out["first_step"] = self.first_step
            out["last_step"] = self.last_step
        return out


_WINDOW_TEXTS = ("group", "op", "dtype")
_WINDOW_INTS = ("window", "count", "size_bucket", "rank", "group_size", "bytes", "size_bytes")
_WINDOW_FINITE = ("start_s", "end_s", "time_s", "busbw_p50_bytes_per_s", "duration_p50_s")
_WINDOW_NUMBERS = ("duration_p99_s", "busbw_p99_bytes_per_s")  # the tails may be infinite (a zero-time call)
# what the wire form holds of a window's fields (the steps aside), in the fields' order
_WINDOW_WIRE = tuple(
    f.name for f in fields(WindowRow) if f.name in _WINDOW_TEXTS + _WINDOW_INTS + _WINDOW_FINITE + _WINDOW_NUMBERS
)


def window_from_wire(d: JsonValue) -> WindowRow:
    """A window row from its ``as_wire`` object, as a stored monitor run holds it; raises
    :class:`CollectiveRecordError` naming the first bad field (a stored run may hold anything)."""
    if not isinstance(d, dict):
        raise CollectiveRecordError(f"a window must be a JSON object, got {type(d).__name__}")
    for name in _WINDOW_TEXTS:
        if not isinstance(d.get(name), str) or len(str(d[name])) > MAX_GROUP_NAME:
            raise CollectiveRecordError(f"field {name!r} must be a string of at most {MAX_GROUP_NAME} characters")
    ints = {name: _int(d, name) for name in _WINDOW_INTS}
    numbers: dict[str, float] = {}
    for name in _WINDOW_FINITE + _WINDOW_NUMBERS:
        value = d.get(name)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise CollectiveRecordError(f"field {name!r} must be a number")
        if name in _WINDOW_FINITE and not math.isfinite(value):
            raise CollectiveRecordError(f"field {name!r} must be a finite number")
        numbers[name] = value
    steps = [None if d.get(name) is None else _int(d, name) for name in ("first_step", "last_step")]
    return WindowRow(
        window=ints["window"],
        start_s=numbers["start_s"],
        end_s=numbers["end_s"],
        rank=ints["rank"],
        group=str(d["group"]),
        group_size=ints["group_size"],
        op=str(d["op"]),
        dtype=str(d["dtype"]),
        size_bucket=ints["size_bucket"],
        count=ints["count"],
        time_s=numbers["time_s"],
        bytes=ints["bytes"],
        size_bytes=ints["size_bytes"],
        duration_p50_s=numbers["duration_p50_s"],
        duration_p99_s=numbers["duration_p99_s"],
        busbw_p50_bytes_per_s=numbers["busbw_p50_bytes_per_s"],
        busbw_p99_bytes_per_s=numbers["busbw_p99_bytes_per_s"],
        first_step=steps[0],
        last_step=steps[1],
    )


def aggregate(
    records: Iterable[CollectiveRecord],
    *,
    window: int,
    start_s: float,
    end_s: float,
    keep: int = 0,
) -> list[WindowRow]:
    """One window's rows, one per (group, op, dtype, size bucket) and rank, in a stable order.

    ``keep``: durations kept per row (evenly thinned to at most this many), for the store's samples.
    """
    groups: dict[tuple[int, str, str, str, int], list[CollectiveRecord]] = {}
    for r in records:
        groups.setdefault((r.rank, r.group, r.op, r.dtype, size_bucket(r.size_bytes)), []).append(r)
    rows = []
    for (rank, group, op, dtype, bucket), rs in sorted(groups.items()):
        durations = sorted(r.duration_s for r in rs)
        bws = sorted(r.busbw_bytes_per_s for r in rs)
        sizes = sorted(r.size_bytes for r in rs)
        steps = [r.step for r in rs if r.step is not None]
        kept: Sequence[float] = ()
        if keep > 0:
            ordered = [r.duration_s for r in rs]
            stride = max(1, math.ceil(len(ordered) / keep))
            kept = tuple(ordered[::stride][:keep])
        rows.append(
            WindowRow(
                window=window,
                start_s=start_s,
                end_s=end_s,
                rank=rank,
                group=group,
                group_size=rs[0].group_size,
                op=op,
                dtype=dtype,
                size_bucket=bucket,
                count=len(rs),
                time_s=math.fsum(durations),
                bytes=sum(sizes),
                size_bytes=sizes[len(sizes) // 2],
                duration_p50_s=percentile(durations, 50),
                duration_p99_s=percentile(durations, 99),
                busbw_p50_bytes_per_s=percentile(bws, 50),
                busbw_p99_bytes_per_s=percentile(bws, 99),
                durations_s=tuple(kept),
                group_ranks=rs[0].group_ranks,
                first_step=min(steps) if steps else None,
                last_step=max(steps) if steps else None,
            )
        )
    return rows


def measurements_from_windows(rows: Iterable[WindowRow], keep: int = 2048) -> list[Measurement]:
    """One measurement per (group, op, dtype, size bucket) over every window: its kept durations as samples.

    The measurement's size is the bucket's median record size; ``group`` names the process group, so the
    DP all-reduce and the TP all-reduce of one size are different series. Rows of several ranks (the
    collector's view) give one measurement per (group, op, bucket): the max over ranks of each window's
    p50 is not what a benchmark's sample is, so samples are taken from the lowest rank's durations, as
    rank 0's are in a benchmark.
    """
    by_key: dict[tuple[str, str, str, int], list[WindowRow]] = {}
    for row in rows:
        by_key.setdefault((row.group, row.op, row.dtype, row.size_bucket), []).append(row)
    out = []
    for (group, op, dtype, _bucket), rs in sorted(by_key.items()):
        rank = min(r.rank for r in rs)
        own = [r for r in rs if r.rank == rank]
        samples = [d for r in own for d in r.durations_s] or [r.duration_p50_s for r in own]
        if len(samples) > keep:
            stride = math.ceil(len(samples) / keep)
            samples = samples[::stride][:keep]
        sizes = sorted(r.size_bytes for r in own)
        spec = get_op(op)
        elem = DTYPE_SIZES.get(dtype, 1)
        out.append(
            Measurement(
                op=op,
                dtype=dtype if dtype in DTYPE_SIZES else "uint8",
                size_bytes=sizes[len(sizes) // 2],
                count=sizes[len(sizes) // 2] // elem,
                in_place=True,
                world_size=own[0].group_size,
                samples_s=tuple(samples),
                redop="sum" if spec.reduces else None,
                root=0 if spec.has_root else None,
                group=group,
            )
        )
    return out
