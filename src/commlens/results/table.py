"""The nccl-tests text table, with commlens' p50/p99 columns, from measurement dicts.

Works on the dict form of measurements (``jsonfmt.measurement_to_dict``) so the
launcher can print rows as they stream in, before a Run exists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from commlens.results.nccltests_json import to_nccl_tests
from commlens.results.units import format_us

__all__ = [
    "column_header_lines",
    "row_line",
    "footer_lines",
    "op_header_line",
    "run_table_lines",
    "system_header_lines",
]

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


def _half(m: Mapping[str, Any] | None) -> str:
    if m is None:
        return _HALF.format("-", "-", "-", "-", "-", "-")
    nwrong = "N/A" if m.get("nwrong") is None else str(m["nwrong"])
    return _HALF.format(
        _fmt_time_us(m["mean_s"]),
        f"{m['algbw_bytes_per_s'] / 1e9:.2f}",
        f"{m['busbw_bytes_per_s'] / 1e9:.2f}",
        nwrong,
        _fmt_time_us(m["p50_s"]),
        _fmt_time_us(m["p99_s"]),
    )


def op_header_line(op: str, algo: str = "builtin") -> str:
    """Marks where an op's rows begin, as nccl-tests marks each collective test (with the algorithm if not built-in)."""
    return f"# Collective test: {op}" if algo == "builtin" else f"# Collective test: {op}  algo {algo}"


def row_line(row: Mapping[str, Any]) -> str:
    """One table line from a row: op/dtype/size keys and a list of placement measurements."""
    by_place = {m["in_place"]: m for m in row["measurements"] if m is not None}
    redop, root = to_nccl_tests(row["redop"], row["root"])
    left = _LEFT.format(row["size_bytes"], row["count"], row["dtype"], redop, root)
    return left + _half(by_place.get(False)) + _half(by_place.get(True))


def footer_lines(total_wrong: int | None, avg_busbw_bytes_per_s: float) -> list[str]:
    oob = "N/A" if total_wrong is None else f"{total_wrong} {'OK' if total_wrong == 0 else 'FAILED'}"
    return [
        f"# Out of bounds values : {oob}",
        f"# Avg bus bandwidth    : {avg_busbw_bytes_per_s / 1e9:.6g}",
    ]


def _algo_text(cfg: Mapping[str, Any]) -> str:
    algos = cfg.get("algos") or ["builtin"]
    if list(algos) == ["builtin"]:
        return ""
    chunk = f"  chunk {cfg['chunk_bytes']} B" if cfg.get("chunk_bytes") else ""
    return f"  algos {','.join(algos)}{chunk}"


def system_header_lines(start: Mapping[str, Any]) -> list[str]:
    """The ``#`` preamble: what ran, where, with which options."""
    cfg = start["config"]
    system = start["system"]
    lines = [
        f"# commlens {system.get('commlens_version', '')} bench  run {start['run_id'][:12]}",
        f"# ops {','.join(cfg['ops'])}  dtypes {','.join(cfg['dtypes'])}  "
        f"sizes {cfg['min_bytes']}..{cfg['max_bytes']} B  iters {cfg['iters']}  warmup {cfg['warmup']}  "
        f"check {cfg['check_iters']}  blocking {int(cfg['blocking'])}" + _algo_text(cfg),
        f"# backend {system['backend']} {system.get('backend_version', '')}  device {system['device']}  "
        f"torch {system.get('torch_version', '')}  world size {system['world_size']}",
    ]
    hosts = system.get("extra", {}).get("rank_hosts") or []
    pids = system.get("extra", {}).get("rank_pids") or []
    names = system.get("device_names") or []
    for rank, host in enumerate(hosts):
        pid = pids[rank] if rank < len(pids) else ""
        dev = names[rank] if rank < len(names) else ""
        lines.append(f"#  Rank {rank:3d} Pid {pid!s:>7} on {host:>12} device {dev}")
    lines.append("#")
    return lines


def run_table_lines(rows: Iterable[Mapping[str, Any]], total_wrong: int | None, avg_busbw: float) -> list[str]:
    """The whole table for already finished rows."""
    lines = column_header_lines()
    last = None
    for row in rows:
        first: Mapping[str, Any] = next((m for m in row["measurements"] if m), {})
        op = str(row.get("op") or first.get("op"))
        algo = str(row.get("algo") or first.get("algo") or "builtin")
        if (op, algo) != last:
            lines.append(op_header_line(op, algo))
            last = (op, algo)
        lines.append(row_line(row))
    lines.extend(footer_lines(total_wrong, avg_busbw))
    return lines
