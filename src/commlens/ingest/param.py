"""PARAM comms output (facebookresearch/param, ``train/comms/pt/comms.py``): ``COMMS-RES`` rows.

PARAM prints, on rank 0, ``\\t PARAM COMM environment: {'world_size': 8, 'local_size': 8,
...}`` (``MPI environment`` before 2023), ``\\t backend: nccl nw-stack: ...``, then per
collective a header ``\\tCOMMS-RES  total-size (B)  nElementsPerRank  Time(us):p50  p75
p95  Min  Max  AlgBW(GB/s)  BusBW(GB/s)  TotalTime(us):p50`` (before 2026:
``size (B)`` and ``Latency(us):p50``, no total column) and one row per size,
``\\tCOMMS-RES-<collective>-<dtype>[-<tag>]  <size> <elements> <p50> <p75> <p95> <min>
<max> <algBW> <busBW> [<total>]``.

Its times are each rank's mean latency over the iterations, summarised
*across ranks*: p50/p75/p95/Min/Max are percentiles of the ranks' means, not
of iterations. They map onto the measurement's reported statistics as
``mean_s`` = ``p50_s`` = p50 (PARAM prints no mean; its algBW/busBW come from
p50), ``p95_s`` = p95, ``min_s``/``max_s`` = Min/Max; the run's notes say so.
``size`` is PARAM's total size, nccl-tests' size for the same op; ``count`` is
re-derived from it with commlens' per-op meaning. PARAM always reduces with
sum and, for rooted ops, uses ``--root`` (default 0, not printed).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from commlens.ingest.base import (
    MAX_RANKS,
    MAX_SIZE_BYTES,
    InputFormat,
    ParsedRun,
    PatternSniff,
    Source,
    check_limit,
    quote,
)
from commlens.ingest.table_checks import BusbwCheck, is_decimal, resolve_op, row_measurement, zero_time_note
from commlens.ops import OpSpec, UnknownOpError
from commlens.results.jsonvalue import JsonObject
from commlens.results.records import DTYPE_SIZES, Measurement, SystemInfo
from commlens.results.stats import TimeStats

__all__ = ["FORMAT", "parse_param"]

# PARAM's --data-type names (comms_utils.py dtypeMap) -> commlens dtypes.
PARAM_DTYPES = {
    "float": "float32",
    "float32": "float32",
    "float16": "float16",
    "half": "float16",
    "float64": "float64",
    "double": "float64",
    "bfloat16": "bfloat16",
    "int32": "int32",
    "int": "int32",
    "long": "int64",
    "uint8": "uint8",
    "byte": "uint8",
    "int8": "int8",
    "char": "int8",
}
# PARAM collectives -> catalog ops. all_to_allv is taken as all_to_all: PARAM splits it evenly unless told not to.
PARAM_OPS = {
    "all_reduce": "all_reduce",
    "all_gather": "all_gather",
    "all_gather_base": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatter_base": "reduce_scatter",
    "all_to_all": "all_to_all",
    "all_to_allv": "all_to_all",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "barrier": "barrier",
}
# torch.distributed's all_reduce, broadcast and reduce work in place on one tensor; PARAM's others have an output.
_IN_PLACE = {"all_reduce", "broadcast", "reduce"}

# PARAM prints a handful of keys; a longer "environment" is not PARAM's.
_MAX_ENVIRONMENT_CHARS = 65536
_ENV_RE = re.compile(r"(?:PARAM COMM|MPI) environment:\s*(\{.*?\})")
_BACKEND_RE = re.compile(r"\bbackend:\s*(\S+)\s+nw-stack:\s*(\S+)")
_NCCL_VERSION_RE = re.compile(r"\bNCCL version (\d+\.\d+\.\d+)")
_HEADER_RE = re.compile(r"COMMS-RES(?:-QUANT)?\s")
_ROW_RE = re.compile(r"COMMS-RES-(\S+)")
_SNIFF_RE = re.compile(r"COMMS-RES")

# Header names across PARAM's versions -> what the column holds.
_COLUMNS = {
    "total-size(B)": "size",
    "size(B)": "size",
    "nElementsPerRank": "elements",
    "num-elements": "elements",
    "Time(us):p50": "p50",
    "Latency(us):p50": "p50",
    "p75": "p75",
    "p95": "p95",
    "Min": "min",
    "Max": "max",
    "AlgBW(GB/s)": "algbw",
    "algBW(GB/s)": "algbw",
    "BusBW(GB/s)": "busbw",
    "busBW(GB/s)": "busbw",
    "TotalTime(us):p50": "total_p50",
    "TotalLatency(us):p50": "total_p50",
    "CompLatency(us):p50": "comp_p50",
    "TFlops": "tflops",
}
_CURRENT = ("size", "elements", "p50", "p75", "p95", "min", "max", "algbw", "busbw", "total_p50")


def _header_columns(text: str) -> tuple[str, ...] | None:
    names = re.sub(r"\s+\(B\)", "(B)", text.split("COMMS-RES", 1)[1]).split()
    cols = tuple(_COLUMNS.get(n, "?") for n in names)
    return cols if "size" in cols and "p50" in cols else None


_INTEGER_COLUMNS = {"size": "byte count", "elements": "element count"}


def _number(source: Source, line: int, column: str, token: str) -> float:
    try:
        value = float(token)
    except ValueError:
        raise source.error(line, f"bad {column} value {quote(token, 60)} in a COMMS-RES row") from None
    if not value >= 0.0 or value == float("inf"):
        raise source.error(line, f"bad {column} value {quote(token, 60)} in a COMMS-RES row: not a finite number >= 0")
    return value


def _environment(source: Source, line: int, text: str) -> Any:
    """The Python literal PARAM prints as its environment (a dict); a long or deeply nested one is refused."""
    if len(text) > _MAX_ENVIRONMENT_CHARS:
        raise source.error(line, f"PARAM environment of {len(text)} characters: not one PARAM prints")
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
        raise source.error(line, f"unreadable PARAM environment: {quote(text)}") from None


def _collective_and_dtype(source: Source, line: int, label: str) -> tuple[str, str, str]:
    """``all_reduce-float32-mytag`` -> (collective, dtype, tag): PARAM's names hold no hyphens."""
    parts = label.split("-")
    if parts[0] == "QUANT":
        raise source.error(line, "quantized PARAM results (COMMS-RES-QUANT) are not supported")
    if len(parts) < 2:
        raise source.error(line, f"COMMS-RES row label {quote(label)} is not <collective>-<dtype>")
    return parts[0], parts[1], "-".join(parts[2:])


def _spec(source: Source, line: int, collective: str) -> OpSpec:
    if collective == "pt2pt":
        raise source.error(line, "PARAM pt2pt results (ping/ping-pong latency) are not supported")
    name = PARAM_OPS.get(collective)
    if name is None:
        raise source.error(
            line,
            (f"PARAM collective {quote(collective, 60)} has no commlens op (known: {', '.join(sorted(PARAM_OPS))})"),
        )
    try:
        return resolve_op(name)
    except UnknownOpError as e:
        raise source.error(line, str(e)) from None


_Row = tuple[int, str, str, str, dict[str, float]]  # line, collective, PARAM dtype, tag, values by column


@dataclass
class _Log:
    """What a PARAM log says, read in one pass: its result rows and the facts around them."""

    world: int | None = None
    env_info: JsonObject = field(default_factory=dict)
    backend: str = ""
    nw_stack: str = ""
    nccl_version: str = ""
    rows: list[_Row] = field(default_factory=list)


def parse_param(source: Source, *, op: str | None = None) -> ParsedRun:
    """One run from a PARAM comms log; ``op`` is not needed (every row names its collective)."""
    log = _read_log(source)
    if not log.rows:
        raise source.error(1, "no PARAM COMMS-RES result rows found")
    world = log.world
    if world is None:
        raise source.error(
            log.rows[0][0],
            (
                "no 'PARAM COMM environment: {'world_size': N, ...}' line before the "
                "results: the world size is unknown (ingest the whole log)"
            ),
        )
    measurements: list[Measurement] = []
    checks: dict[str, BusbwCheck] = {}
    tags: set[str] = set()
    notes = [
        "PARAM times are per-rank mean latencies summarised across ranks: reported p50/p95/min/max are "
        "percentiles across ranks, not iterations; mean_s holds PARAM's p50 (it prints no mean; its algBW "
        "and busBW come from p50)",
    ]
    remapped: set[str] = set()
    zero_times: list[int] = []  # the line of each row printed with p50 time 0
    for row in log.rows:
        lineno, collective, _, tag, _ = row
        spec = _spec(source, lineno, collective)
        if collective != spec.name:
            remapped.add(f"{collective} -> {spec.name}")
        if tag:
            tags.add(tag)
        m = _measurement(source, row, spec, world, checks)
        if m is None:  # no bandwidth can come of time 0: left out, warned, noted, the run incomplete
            zero_times.append(lineno)
        else:
            measurements.append(m)
    if zero_times:
        if not measurements:
            raise source.error(zero_times[0], "every COMMS-RES row has time 0: no measurement to store")
        notes.append(zero_time_note(source.warn, zero_times[0], "COMMS-RES rows", [f"line {n}" for n in zero_times]))
    for name, check in checks.items():
        note = check.report(name, source.warn)
        if note:
            notes.append(note)
    if remapped:
        notes.append("PARAM collectives read as catalog ops: " + ", ".join(sorted(remapped)))
    if any(m.op in ("reduce", "broadcast", "gather", "scatter") for m in measurements):
        notes.append("root taken as 0 (PARAM's --root default; PARAM does not print it)")
    system = SystemInfo(
        world_size=world,
        backend=log.backend,
        backend_version=log.nccl_version,
        device="cuda" if log.backend == "nccl" else "unknown",
        extra={
            k: v
            for k, v in {"local_size": log.env_info.get("local_size"), "nw_stack": log.nw_stack or None}.items()
            if v is not None
        },
    )
    ops = list(dict.fromkeys(m.op for m in measurements))
    return ParsedRun(
        source="param",
        system=system,
        measurements=measurements,
        config={"format": "param", "ops": ops, "param_tags": sorted(tags)},
        notes=notes,
        status="incomplete" if zero_times else "complete",
    )


def _read_log(source: Source) -> _Log:
    """The COMMS-RES rows (each checked against its header) and the environment, backend and NCCL version lines."""
    log = _Log()
    columns: tuple[str, ...] | None = None
    for lineno, line in enumerate(source.iter_lines(), 1):
        if "COMMS-RES" in line:
            if _HEADER_RE.search(line):
                if "COMMS-RES-QUANT" in line:
                    raise source.error(lineno, "quantized PARAM results (COMMS-RES-QUANT) are not supported")
                columns = _header_columns(line)
                if columns is None:
                    raise source.error(lineno, f"unrecognised COMMS-RES header: {quote(line.strip())}")
                continue
            m = _ROW_RE.search(line)
            if m is not None:
                log.rows.append(_result_row(source, lineno, line, m, columns))
        elif "environment:" in line:
            m = _ENV_RE.search(line)
            if m:
                parsed = _environment(source, lineno, m.group(1))
                if isinstance(parsed, dict):
                    log.env_info = parsed
                    if isinstance(parsed.get("world_size"), int) and parsed["world_size"] > 0:
                        log.world = source.int_at(lineno, "world_size", parsed["world_size"], MAX_RANKS + 1)
        elif "nw-stack:" in line:
            m = _BACKEND_RE.search(line)
            if m:
                log.backend, log.nw_stack = m.group(1), m.group(2)
        elif "NCCL version" in line and not log.nccl_version:
            m = _NCCL_VERSION_RE.search(line)
            if m:
                log.nccl_version = m.group(1)
    return log


def _result_row(source: Source, lineno: int, line: str, m: re.Match[str], columns: tuple[str, ...] | None) -> _Row:
    """One COMMS-RES row, its values named by the header's columns (today's columns where no header came first)."""
    tokens = line[m.end() :].split()
    collective, dtype_name, tag = _collective_and_dtype(source, lineno, m.group(1))
    cols = columns or (_CURRENT if len(tokens) == len(_CURRENT) else _CURRENT[:-1])
    if len(tokens) != len(cols):
        raise source.error(
            lineno,
            (f"COMMS-RES row has {len(tokens)} values, the header names {len(cols)} (a truncated line?)"),
        )
    for c, t in zip(cols, tokens):
        if c in _INTEGER_COLUMNS and not is_decimal(t):
            raise source.error(
                lineno,
                (
                    f"{c} {quote(t, 40)} is not a decimal {_INTEGER_COLUMNS[c]} "
                    f"(PARAM prints plain digits) in a COMMS-RES row"
                ),
            )
    values = {c: _number(source, lineno, c, t) for c, t in zip(cols, tokens) if c != "?"}
    return (lineno, collective, dtype_name, tag, values)


def _measurement(
    source: Source, row: _Row, spec: OpSpec, world: int, checks: dict[str, BusbwCheck]
) -> Measurement | None:
    """One row as a measurement (its busBW added to its op's check), or None where it printed time 0."""
    lineno, _, dtype_name, _, v = row
    dtype = PARAM_DTYPES.get(dtype_name)
    if dtype is None:
        raise source.error(
            lineno,
            (
                f"PARAM data type {quote(dtype_name, 60)} has no commlens dtype "
                f"(known: {', '.join(sorted(PARAM_DTYPES))})"
            ),
        )
    if v["size"] >= MAX_SIZE_BYTES:
        raise source.error(lineno, check_limit("size", int(v["size"]), MAX_SIZE_BYTES) or "")
    size = int(v["size"])
    elem = DTYPE_SIZES[dtype]
    count = size // elem // (world if spec.per_rank_split else 1)
    p50_s = v["p50"] * 1e-6
    if p50_s == 0.0:
        return None
    reported = TimeStats(
        mean_s=p50_s,
        p50_s=p50_s,
        p95_s=v["p95"] * 1e-6 if "p95" in v else None,
        p99_s=None,
        min_s=v["min"] * 1e-6 if "min" in v else None,
        max_s=v["max"] * 1e-6 if "max" in v else None,
        stdev_s=None,
        cv=None,
        n=0,
    )
    if "busbw" in v and spec.name != "barrier":
        checks.setdefault(spec.name, BusbwCheck()).add(lineno, v["busbw"], size, p50_s, spec.busbw_factor(world))
    return row_measurement(
        spec,
        world,
        lambda message: source.error(lineno, message),
        dtype=dtype,
        size=size,
        count=count,
        in_place=spec.name in _IN_PLACE,
        redop="sum" if spec.reduces else None,
        root=0 if spec.has_root else None,
        reported=reported,
    )


FORMAT = InputFormat(
    name="param",
    description="PARAM output",
    document="text",
    sniff=PatternSniff(_SNIFF_RE),
    marker="PARAM COMMS-RES rows",
    parse=parse_param,
    sniff_first=True,
)
