"""The nccl-tests text table, with commlens' p50/p99 columns, from :class:`BenchRow` records.

A :class:`BenchRow` is one line of the table: the benchmark's worker builds it, sends it to the launcher as
JSON (``as_dict``/``from_dict``) and the launcher prints it as it streams in, before a Run exists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from typing_extensions import Self

from commlens.results.jsonfmt import measurement_from_dict, measurement_to_dict
from commlens.results.jsonvalue import JsonObject, JsonValue
from commlens.results.nccltests_json import listed, to_nccl_tests
from commlens.results.records import Measurement, SystemInfo
from commlens.results.units import format_us

__all__ = [
    "BenchRow",
    "SweepHeader",
    "column_header_lines",
    "row_line",
    "footer_lines",
    "op_header_line",
    "run_table_lines",
    "system_header_lines",
]


@dataclass(frozen=True)
class BenchRow:
    """A row of the table: one size of one op, dtype, reduction, root and implementation, every placement.

    ``measurements`` holds one entry per placement run (out of place, then in place); None where torch offers
    no such placement for the op. ``notes`` are the lines printed above the row.
    """

    op: str
    algo: str
    dtype: str
    redop: str | None
    root: int | None
    size_bytes: int
    count: int
    measurements: tuple[Measurement | None, ...]
    notes: tuple[str, ...] = ()

    def as_dict(self) -> JsonObject:
        """The JSON object of the row (the order of its keys is the wire's, see ``commlens.bench.events``)."""
        return {
            "op": self.op,
            "algo": self.algo,
            "dtype": self.dtype,
            "redop": self.redop,
            "root": self.root,
            "size_bytes": self.size_bytes,
            "count": self.count,
            "notes": list(self.notes),
            "measurements": [measurement_to_dict(m) if m else None for m in self.measurements],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Self:
        """The row of ``as_dict``'s object: its keys must be there (KeyError), each measurement is checked."""
        return cls(
            op=d["op"],
            algo=d["algo"],
            dtype=d["dtype"],
            redop=d["redop"],
            root=d["root"],
            size_bytes=d["size_bytes"],
            count=d["count"],
            measurements=tuple(measurement_from_dict(m) if m is not None else None for m in d["measurements"]),
            notes=tuple(d.get("notes", ())),
        )


_LEFT = "{:>12}  {:>12}  {:>8}  {:>6}  {:>6}"
_HALF = "  {:>8}  {:>7}  {:>7}  {:>6}  {:>8}  {:>8}"
_HALF_WIDTH = len(_HALF.format("", "", "", "", "", ""))


def column_header_lines() -> list[str]:
    left_blank = "#" + _LEFT.format("", "", "", "", "")[1:]
    oop = "out-of-place".center(_HALF_WIDTH)
    ip = "in-place".center(_HALF_WIDTH)
    names = _LEFT.format("size", "count", "type", "redop", "root")
    units = _LEFT.format("(B)", "(elements)", "", "", "")
    half_names = _HALF.format("time", "algbw", "busbw", "#wrong", "p50", "p99")
    half_units = _HALF.format("(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)")
    return [
        left_blank + oop + ip,
        "#" + names[1:] + half_names + half_names,
        "#" + units[1:] + half_units + half_units,
    ]


_fmt_time_us = format_us  # nccl-tests' precision steps (fits the column)


def _half(m: Measurement | None) -> str:
    if m is None:
        return _HALF.format("-", "-", "-", "-", "-", "-")
    nwrong = "N/A" if m.nwrong is None else str(m.nwrong)
    stats = m.stats
    return _HALF.format(
        _fmt_time_us(stats.mean_s),
        f"{m.algbw_bytes_per_s / 1e9:.2f}",
        f"{m.busbw_bytes_per_s / 1e9:.2f}",
        nwrong,
        _fmt_time_us(stats.p50_s),
        _fmt_time_us(stats.p99_s),
    )


def op_header_line(op: str, algo: str = "builtin") -> str:
    """Marks where an op's rows begin, as nccl-tests marks each collective test (with the algorithm if not built-in)."""
    return f"# Collective test: {op}" if algo == "builtin" else f"# Collective test: {op}  algo {algo}"


def row_line(row: BenchRow) -> str:
    """One table line from a row: its size, count, dtype, reduction and root, then each placement's figures."""
    by_place = {m.in_place: m for m in row.measurements if m is not None}
    redop, root = to_nccl_tests(row.redop, row.root)
    left = _LEFT.format(row.size_bytes, row.count, row.dtype, redop, root)
    return left + _half(by_place.get(False)) + _half(by_place.get(True))


def footer_lines(total_wrong: int | None, avg_busbw_bytes_per_s: float) -> list[str]:
    oob = "N/A" if total_wrong is None else f"{total_wrong} {'OK' if total_wrong == 0 else 'FAILED'}"
    return [
        f"# Out of bounds values : {oob}",
        f"# Avg bus bandwidth    : {avg_busbw_bytes_per_s / 1e9:.6g}",
    ]


@dataclass(frozen=True)
class SweepHeader:
    """What the table's ``#`` preamble says of a bench sweep's settings (read from ``BenchSettings.values``)."""

    ops: tuple[str, ...]
    dtypes: tuple[str, ...]
    min_bytes: int
    max_bytes: int
    iters: int
    warmup: int
    check_iters: int
    blocking: bool
    algos: tuple[str, ...] = ("builtin",)
    chunk_bytes: int | None = None

    @classmethod
    def of(cls, values: Mapping[str, JsonValue]) -> SweepHeader | None:
        """The header of a bench sweep's settings; None for settings without them (an ingested run's, whose
        ``ops`` may be its own)."""
        ops, dtypes, algos = _texts(values.get("ops")), _texts(values.get("dtypes")), _texts(values.get("algos", []))
        blocking, chunk = values.get("blocking"), values.get("chunk_bytes")
        if ops is None or dtypes is None or algos is None or not isinstance(blocking, int):
            return None
        if chunk is not None and not isinstance(chunk, int):
            return None
        ints: dict[str, int] = {}
        for name in ("min_bytes", "max_bytes", "iters", "warmup", "check_iters"):
            value = values.get(name)
            if not isinstance(value, int):
                return None
            ints[name] = value
        return cls(
            ops=ops,
            dtypes=dtypes,
            min_bytes=ints["min_bytes"],
            max_bytes=ints["max_bytes"],
            iters=ints["iters"],
            warmup=ints["warmup"],
            check_iters=ints["check_iters"],
            blocking=bool(blocking),
            algos=algos or ("builtin",),
            chunk_bytes=chunk,
        )

    def algo_text(self) -> str:
        if self.algos == ("builtin",):
            return ""
        chunk = f"  chunk {self.chunk_bytes} B" if self.chunk_bytes else ""
        return f"  algos {','.join(self.algos)}{chunk}"


def _texts(value: JsonValue) -> tuple[str, ...] | None:
    """A list of names (a tuple where the settings come straight from ``BenchConfig.as_dict()``, not JSON)."""
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(str(v) for v in value)


def system_header_lines(run_id: str, sweep: SweepHeader, system: SystemInfo) -> list[str]:
    """The ``#`` preamble: what ran (run ``run_id``, the bench sweep ``sweep``), where (``system``)."""
    lines = [
        f"# commlens {system.commlens_version} bench  run {run_id[:12]}",
        f"# ops {','.join(sweep.ops)}  dtypes {','.join(sweep.dtypes)}  "
        f"sizes {sweep.min_bytes}..{sweep.max_bytes} B  iters {sweep.iters}  warmup {sweep.warmup}  "
        f"check {sweep.check_iters}  blocking {int(sweep.blocking)}" + sweep.algo_text(),
        f"# backend {system.backend} {system.backend_version}  device {system.device}  "
        f"torch {system.torch_version}  world size {system.world_size}",
    ]
    hosts = listed(system.extra.get("rank_hosts"))
    pids = listed(system.extra.get("rank_pids"))
    names = system.device_names
    for rank, host in enumerate(hosts):
        pid = pids[rank] if rank < len(pids) else ""
        dev = names[rank] if rank < len(names) else ""
        lines.append(f"#  Rank {rank:3d} Pid {pid!s:>7} on {host:>12} device {dev}")
    lines.append("#")
    return lines


def run_table_lines(rows: Iterable[BenchRow], total_wrong: int | None, avg_busbw: float) -> list[str]:
    """The whole table for already finished rows."""
    lines = column_header_lines()
    last = None
    for row in rows:
        if (row.op, row.algo) != last:
            lines.append(op_header_line(row.op, row.algo))
            last = (row.op, row.algo)
        lines.append(row_line(row))
    lines.extend(footer_lines(total_wrong, avg_busbw))
    return lines
