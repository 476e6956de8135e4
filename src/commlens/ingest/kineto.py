"""Read PyTorch profiler (Kineto) Chrome traces into one record per collective a rank ran.

A trace is ``.json`` or ``.json.gz`` (PyTorch's ``tensorboard_trace_handler``
and HTA write gzip); the content decides, not the name. Both are bounded: the
decompressed size (a gzip bomb is refused) and the JSON nesting depth.

What a collective's execution is depends on the backend:

- **NCCL**: the CPU ``nccl:<op>`` ``user_annotation`` is only the enqueue (it
  ends when the kernel is launched). The execution is the GPU-side span: the
  ``ncclKernel_*`` / ``ncclDevKernel_*`` kernel, joined to its enqueue by its
  ``External id`` (that of ``record_param_comms`` or of the annotation) or by
  its ``correlation`` with the ``cudaLaunchKernel`` the enqueue contains; else
  the ``gpu_user_annotation`` span with the enqueue's ``External id``. Each
  collective is one record, whichever of these spans the trace holds.
- **gloo**: the ``gloo:<op>`` span on the process group's worker thread runs
  the collective, so it is the execution. A span that closes after the
  profiler's own span (``PyTorch Profiler (N)``) ended is cut at that end:
  the worker thread was held off the cores after the collective completed
  (seen on 4 ranks sharing 2 cores: a 310 ms span whose rank had gone on and
  stopped the profiler 296 ms before it closed).

Identity comes from what the trace carries: ``record_param_comms`` arguments
(``Collective name``, ``Process Group Name``/``Ranks``, ``In msg nelems``,
``dtype``, ``Seq`` in newer PyTorch, also copied onto the kernel), else the
annotation's ``Input Dims``/``Input type``; the ``ProfilerStep#N`` span that
contains the enqueue gives the step. Field names and layouts are those of the
real traces in HTA's test data (``shared/realdata/kineto``) and of traces
recorded here with torch 2.13 (``tests/scenarios/straggler_trace.py``).
"""

from __future__ import annotations

import bisect
import json
import math
import re
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from commlens.errors import CommlensError
from commlens.files import read_at_most
from commlens.ingest.files import loads_strict_json, open_input
from commlens.ops import UnknownOpError, get_op
from commlens.results.jsonvalue import JsonObject
from commlens.results.units import finite_float

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_TRACE_BYTES",
    "SYNCHRONIZING_OPS",
    "KinetoTrace",
    "KinetoTraceError",
    "TraceCollective",
    "read_kineto_trace",
    "read_trace_json",
    "traces_by_rank",
]

MAX_TRACE_BYTES = 2 << 30  # decompressed JSON text; real multi-GB traces are rare, a bomb is not
MAX_JSON_DEPTH = 32  # Kineto traces nest 5 deep (traceEvents[i].args["Input Dims"][j][k])

# Ops where every rank waits for every other before it can finish: their ends coincide.
SYNCHRONIZING_OPS = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier"})
# Ops whose per-rank element counts legitimately differ (uneven splits): not part of the identity.
_UNEVEN_OPS = frozenset({"all_to_all"})

_CPU_PREFIXES = ("nccl:", "gloo:")
_KERNEL_PREFIXES = ("ncclKernel_", "ncclDevKernel_")
_PROFILER_SPAN = "PyTorch Profiler ("  # the profiler's own span ("Trace" category): the recorded window
_STEP_RE = re.compile(r"ProfilerStep#(\d{1,18})$")
_RANKS_RE = re.compile(r"^\[\s*(\d+(?:\s*,\s*\d+)*)?\s*\]$")


class KinetoTraceError(CommlensError, ValueError):
    """A trace that cannot be read; ``str()`` names the file (and the event where it goes wrong)."""


@dataclass(frozen=True)
class TraceCollective:
    """One collective as one rank ran it, on that rank's clock."""

    op: str  # catalog name ("all_reduce") where known, else the span's name without its prefix
    name: str  # the CPU span as printed: "nccl:all_reduce", "gloo:broadcast"
    span: str  # what start/end are: "gpu_kernel", "gpu_user_annotation" or "cpu"
    start_s: float  # seconds on the rank's clock (epoch-based clocks: 0.25 µs resolution, as the file)
    end_s: float
    event_index: int  # index in traceEvents of the span giving start/end
    group: str | None = None  # process group name ("0")
    group_ranks: tuple[int, ...] | None = None
    count: int | None = None  # elements in this rank's input
    dtype: str | None = None  # lower case as printed ("float", "unsigned char")
    seq: int | None = None  # the process group's sequence number, where PyTorch records it
    step: int | None = None  # N of the ProfilerStep#N that contains the enqueue

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def identity(self) -> tuple[str, str, int | None, str | None]:
        """What must agree across ranks: (group, op, count, dtype); count left out for uneven ops."""
        count = None if self.op in _UNEVEN_OPS else self.count
        return (self.group or "", self.op, count, self.dtype)


@dataclass(frozen=True)
class KinetoTrace:
    """One rank's trace: its collectives in start order, and what the reader could not join."""

    path: str
    rank: int
    world_size: int | None
    backend: str | None
    host: str | None  # ``host_name`` where the trace has it (older traces do not)
    collectives: tuple[TraceCollective, ...]
    n_enqueue_without_gpu_span: int = 0  # nccl:* enqueues whose kernel is not in the trace
    n_unjoined_kernels: int = 0  # NCCL kernels joined to no enqueue (launched before the window)
    n_cpu_spans_clipped: int = 0  # gloo spans that closed after the profiler stopped: ended at its stop


def _check_depth(root: Any, path: Path) -> None:
    """Walk the parsed JSON a level at a time (json.loads makes plain dicts and lists): a third of the time of
    a walk item by item, which mattered for a job's worth of traces (benchmarks/replay_validation.py)."""
    level = [root] if type(root) is dict or type(root) is list else []
    depth = 1
    while level:
        if depth > MAX_JSON_DEPTH:
            raise KinetoTraceError(f"{path}: JSON nested deeper than {MAX_JSON_DEPTH} levels: not a Kineto trace")
        level = [c for x in level for c in (x.values() if type(x) is dict else x) if type(c) is dict or type(c) is list]
        depth += 1


def read_trace_json(path: str | Path, max_bytes: int = MAX_TRACE_BYTES) -> JsonObject:
    """The trace's top-level JSON object, from ``.json`` or gzip, within ``max_bytes`` decompressed."""
    return _read_trace(path, max_bytes)[0]


def _read_trace(path: str | Path, max_bytes: int) -> tuple[JsonObject, list[Any]]:
    """The trace's top-level object and its ``traceEvents`` list (:func:`read_trace_json`)."""
    path = Path(path)
    try:
        with open_input(path) as (f, gzipped):
            if not gzipped and path.suffix == ".gz":
                raise KinetoTraceError(f"{path}: not gzip data (no gzip magic bytes) despite the .gz name")
            data = read_at_most(f, max_bytes + 1)
    except (OSError, EOFError, zlib.error) as e:
        raise KinetoTraceError(f"{path}: cannot read ({type(e).__name__}: {e})") from None
    if len(data) > max_bytes:
        raise KinetoTraceError(
            f"{path}: more than {max_bytes} bytes of JSON once decompressed: refused "
            f"(a gzip bomb, or a trace too large to analyse)"
        )
    try:
        top = loads_strict_json(data)
    except RecursionError:
        raise KinetoTraceError(f"{path}: JSON nested deeper than {MAX_JSON_DEPTH} levels: not a Kineto trace") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise KinetoTraceError(f"{path}: not a readable Chrome trace ({type(e).__name__}: {e})") from None
    _check_depth(top, path)
    events = top.get("traceEvents") if isinstance(top, dict) else None
    if not isinstance(events, list):
        raise KinetoTraceError(f"{path}: not a Chrome trace (no traceEvents list)")
    return top, events


def _op_name(span_name: str) -> str:
    """``nccl:_all_gather_base`` -> ``all_gather``; names outside the catalog keep their own spelling."""
    base = span_name.split(":", 1)[1].strip("_").lower()
    for suffix in ("_coalesced", "_base", "_into_tensor", "_tensor"):
        base = base.removesuffix(suffix)
    try:
        return get_op(base).name
    except UnknownOpError:
        return base


def _number(e: Mapping[str, object], key: str, path: Path, i: int) -> float:
    v = e.get(key)
    number = finite_float(v)
    if number is None:
        raise KinetoTraceError(f"{path}: traceEvents[{i}] ({e.get('name')!r}): {key} is not a number: {v!r:.80}")
    return number


def _span(e: Mapping[str, object], path: Path, i: int) -> tuple[float, float]:
    """(start, end) in µs; a negative duration is a reading error, refused."""
    ts, dur = _number(e, "ts", path, i), _number(e, "dur", path, i)
    if dur < 0:
        raise KinetoTraceError(
            f"{path}: traceEvents[{i}] ({e.get('name')!r}): negative duration {dur} µs: "
            f"an impossible value, no verdict can be built on it"
        )
    return ts, ts + dur


def _int_arg(args: Mapping[str, object], key: str) -> int | None:
    v = args.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _id(v: Any) -> int | str | None:
    """An id as a trace writes one (``External id``, ``correlation``, ``pid``, ``tid``): an int or a string;
    anything else (a list, a dict, a float, a bool) joins nothing, as if absent."""
    return v if isinstance(v, (int, str)) and not isinstance(v, bool) else None


def _thread(e: Mapping[str, object]) -> tuple[int | str | None, int | str | None]:
    return _id(e.get("pid")), _id(e.get("tid"))


def _ranks_arg(v: Any) -> tuple[int, ...] | None:
    if isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return tuple(v)
    if isinstance(v, str) and len(v) < 100_000:
        m = _RANKS_RE.match(v.strip())
        if m:
            return tuple(int(x) for x in m.group(1).split(",")) if m.group(1) else ()
    return None


def _dims_count(args: Mapping[str, object]) -> tuple[int | None, str | None]:
    """Elements and dtype of the first input from ``Input Dims``/``Input type`` (record_shapes=True)."""
    dims, types = args.get("Input Dims"), args.get("Input type")
    count = None
    if (
        isinstance(dims, list)
        and dims
        and isinstance(dims[0], list)
        and dims[0]
        and all(isinstance(d, int) and not isinstance(d, bool) for d in dims[0])
    ):
        count = math.prod(dims[0])
    dtype = types[0].lower() if isinstance(types, list) and types and isinstance(types[0], str) and types[0] else None
    return count, dtype


class _Enclosing:
    """Spans on one (pid, tid) sorted by start: the innermost one containing an instant."""

    def __init__(self) -> None:
        self._by_thread: dict[tuple[int | str | None, int | str | None], list[tuple[float, float, int]]] = {}

    def add(self, key: tuple[int | str | None, int | str | None], start: float, end: float, item: int) -> None:
        self._by_thread.setdefault(key, []).append((start, end, item))

    def freeze(self) -> None:
        for spans in self._by_thread.values():
            spans.sort()

    def find(self, key: tuple[int | str | None, int | str | None], t: float, end: float | None = None) -> int | None:
        spans = self._by_thread.get(key, [])
        j = bisect.bisect_right(spans, (t, math.inf, math.inf)) - 1
        while j >= 0:
            start, stop, item = spans[j]
            if start <= t and (end if end is not None else t) <= stop:
                return item
            j -= 1
            if t - start > 60e6:  # spans longer than a minute do not enclose a collective's launch
                break
        return None


@dataclass
class _Scan:
    """What one pass over ``traceEvents`` finds, by event index."""

    cpu: list[int] = field(default_factory=list)  # nccl:*/gloo:* CPU spans
    kernels: list[int] = field(default_factory=list)
    gpu_ann: dict[int | str, list[int]] = field(default_factory=dict)  # External id -> gpu_user_annotation events
    spans: dict[int, tuple[float, float]] = field(default_factory=dict)
    rpc: _Enclosing = field(default_factory=_Enclosing)  # record_param_comms spans
    steps: dict[int | str | None, list[tuple[float, float, int]]] = field(default_factory=dict)  # pid -> steps
    launches: dict[int | str, int] = field(default_factory=dict)  # correlation -> cuda/hip runtime event
    window_end: float | None = None  # end of the profiler's own span (µs): nothing it recorded ends later


def _scan(events: list[Any], path: Path) -> _Scan:
    found = _Scan()
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            raise KinetoTraceError(f"{path}: traceEvents[{i}] is not an object")
        if e.get("ph") != "X":
            continue
        name, cat = e.get("name"), e.get("cat")
        if not isinstance(name, str):
            continue
        raw_args = e.get("args")
        args = raw_args if isinstance(raw_args, dict) else {}
        if cat in ("user_annotation", "cpu_op") and name.startswith(_CPU_PREFIXES):
            found.spans[i] = _span(e, path, i)
            found.cpu.append(i)
        elif cat == "kernel" and name.startswith(_KERNEL_PREFIXES):
            found.spans[i] = _span(e, path, i)
            found.kernels.append(i)
        elif cat == "gpu_user_annotation" and name.startswith("nccl:"):
            found.spans[i] = _span(e, path, i)
            if (ext := _id(args.get("External id"))) is not None:
                found.gpu_ann.setdefault(ext, []).append(i)
        elif name == "record_param_comms":
            start, end = _span(e, path, i)
            found.rpc.add(_thread(e), start, end, i)
        elif cat in ("cuda_runtime", "cuda_driver", "hip_runtime") and _id(args.get("correlation")) is not None:
            found.launches[args["correlation"]] = i
        elif cat == "user_annotation" and (step_match := _STEP_RE.match(name)):
            start, end = _span(e, path, i)
            found.steps.setdefault(_id(e.get("pid")), []).append((start, end, int(step_match.group(1))))
        elif cat == "Trace" and name.startswith(_PROFILER_SPAN):
            ts, dur = finite_float(e.get("ts")), finite_float(e.get("dur"))
            if ts is not None and dur is not None and dur >= 0:  # else no window: nothing is clipped
                end = ts + dur
                found.window_end = end if found.window_end is None else max(found.window_end, end)
    found.rpc.freeze()
    return found


_NO_ARGS: Mapping[str, object] = MappingProxyType({})


def _args(e: Mapping[str, object]) -> Mapping[str, object]:
    args = e.get("args")
    return args if isinstance(args, dict) else _NO_ARGS


def _join_cpu(
    events: list[Any], found: _Scan
) -> tuple[dict[int | str, int], dict[int, Mapping[str, object]], _Enclosing]:
    """Each CPU span's record_param_comms arguments, and the CPU spans by External id and by thread."""
    enclosing_cpu = _Enclosing()
    by_ext: dict[int | str, int] = {}
    meta: dict[int, Mapping[str, object]] = {}
    for i in found.cpu:
        e = events[i]
        key = _thread(e)
        enclosing_cpu.add(key, *found.spans[i], i)
        if (ext := _id(_args(e).get("External id"))) is not None:
            by_ext[ext] = i
        j = found.rpc.find(key, found.spans[i][0], found.spans[i][1])
        meta[i] = events[j]["args"] if j is not None and isinstance(events[j].get("args"), dict) else {}
        if j is not None and (ext := _id(meta[i].get("External id"))) is not None:
            by_ext.setdefault(ext, i)
    enclosing_cpu.freeze()
    return by_ext, meta, enclosing_cpu


def _join_kernels(
    events: list[Any], found: _Scan, by_ext: dict[int | str, int], enclosing_cpu: _Enclosing
) -> tuple[dict[int, list[int]], int]:
    """Each NCCL kernel joined to its CPU enqueue (by External id, else by its launch's correlation)."""
    gpu_of: dict[int, list[int]] = {}
    unjoined = 0
    for k in found.kernels:
        args = _args(events[k])
        ext, correlation = _id(args.get("External id")), _id(args.get("correlation"))
        owner = by_ext.get(ext) if ext is not None else None
        if owner is None and correlation is not None and correlation in found.launches:
            launch = events[found.launches[correlation]]
            if (launch_ts := finite_float(launch.get("ts"))) is not None:
                owner = enclosing_cpu.find(_thread(launch), launch_ts)
        if owner is None:
            unjoined += 1
        else:
            gpu_of.setdefault(owner, []).append(k)
    return gpu_of, unjoined


def _records(
    events: list[Any], found: _Scan, meta: dict[int, Mapping[str, object]], gpu_of: dict[int, list[int]]
) -> tuple[list[TraceCollective], int, int]:
    """One record per CPU span with an execution span; (records, enqueues without one, gloo spans clipped)."""
    records: list[TraceCollective] = []
    without_gpu = clipped = 0
    for i in found.cpu:
        e = events[i]
        name = e["name"]
        args = _args(e)
        if name.startswith("gloo:"):
            span_kind, idx = "cpu", [i]
        elif i in gpu_of:
            span_kind, idx = "gpu_kernel", gpu_of[i]
        elif (ext := _id(args.get("External id"))) is not None and ext in found.gpu_ann:
            span_kind, idx = "gpu_user_annotation", found.gpu_ann[ext]
        else:
            without_gpu += 1  # the enqueue alone says nothing of when the collective ran
            continue
        start_us = min(found.spans[j][0] for j in idx)
        end_us = max(found.spans[j][1] for j in idx)
        if span_kind == "cpu" and found.window_end is not None and end_us > found.window_end:
            # closed after the profiler stopped (the worker thread held off the cores): the collective had
            # completed by then, the rank's main thread having gone on and stopped the profiler
            end_us = max(start_us, found.window_end)
            clipped += 1
        info_args = meta[i] or (events[idx[0]].get("args") if span_kind == "gpu_kernel" else {}) or {}
        count = _int_arg(info_args, "In msg nelems")
        raw_dtype = info_args.get("dtype")
        dtype = raw_dtype.lower() if isinstance(raw_dtype, str) else None
        if count is None or dtype is None:
            dims_count, dims_dtype = _dims_count(args)
            count = dims_count if count is None else count
            dtype = dims_dtype if dtype is None else dtype
        group = info_args.get("Process Group Name")
        step = None
        for s_start, s_end, n in found.steps.get(_id(e.get("pid")), ()):
            if s_start <= found.spans[i][0] < s_end:
                step = n
                break
        records.append(
            TraceCollective(
                op=_op_name(name),
                name=name,
                span=span_kind,
                start_s=start_us * 1e-6,
                end_s=end_us * 1e-6,
                event_index=min(idx, key=lambda j: found.spans[j][0]),
                group=str(group) if isinstance(group, (str, int)) and not isinstance(group, bool) else None,
                group_ranks=_ranks_arg(info_args.get("Process Group Ranks")),
                count=count,
                dtype=dtype,
                seq=_int_arg(info_args, "Seq"),
                step=step,
            )
        )
    return records, without_gpu, clipped


def read_kineto_trace(path: str | Path, max_bytes: int = MAX_TRACE_BYTES) -> KinetoTrace:
    """One rank's collectives from its Kineto trace (``.json`` or ``.json.gz``)."""
    path = Path(path)
    top, events = _read_trace(path, max_bytes)
    info = top.get("distributedInfo")
    if not isinstance(info, dict):
        raise KinetoTraceError(f"{path}: no distributedInfo: was the trace recorded under torch.distributed?")
    rank = _int_arg(info, "rank")
    if rank is None or rank < 0:
        raise KinetoTraceError(f"{path}: distributedInfo has no rank ({json.dumps(info)[:200]})")
    host = top.get("host_name")
    found = _scan(events, path)
    by_ext, meta, enclosing_cpu = _join_cpu(events, found)
    gpu_of, unjoined = _join_kernels(events, found, by_ext, enclosing_cpu)
    records, without_gpu, clipped = _records(events, found, meta, gpu_of)
    if not records:
        if without_gpu:
            raise KinetoTraceError(
                f"{path}: {without_gpu} nccl:* enqueue spans but no GPU-side span (ncclKernel_*, "
                f"gpu_user_annotation) joined to any: record CUDA activity too; the CPU span is only the enqueue"
            )
        raise KinetoTraceError(f"{path}: no collective spans (nccl:*, gloo:*, ncclKernel_*)")
    records.sort(key=lambda r: (r.start_s, r.event_index))
    world = _int_arg(info, "world_size")
    backend = info.get("backend") if isinstance(info.get("backend"), str) else None
    return KinetoTrace(
        path=str(path),
        rank=rank,
        world_size=world,
        backend=backend,
        host=host if isinstance(host, str) and host else None,
        collectives=tuple(records),
        n_enqueue_without_gpu_span=without_gpu,
        n_unjoined_kernels=unjoined,
        n_cpu_spans_clipped=clipped,
    )


def traces_by_rank(traces: Iterable[KinetoTrace], error: Callable[[str], Exception]) -> dict[int, KinetoTrace]:
    """Each trace under its rank; ``error`` (the caller's error type) for a second trace of a rank."""
    by_rank: dict[int, KinetoTrace] = {}
    for t in traces:
        if t.rank in by_rank:
            raise error(f"{t.path}: a second trace of rank {t.rank} (the first is {by_rank[t.rank].path})")
        by_rank[t.rank] = t
    return by_rank
