"""Extract a replay plan from what a job left behind: profiler traces, monitor records, Inspector dumps.

Each source goes through commlens' own reader of it, then one conversion into per-rank ordered calls:

- **Kineto** (:func:`commlens.ingest.kineto.read_kineto_trace`): one trace per rank. Op, process group
  (name and ranks), element count and dtype from ``record_param_comms``; the timing of NCCL collectives
  from their GPU kernels, of gloo collectives from the ``gloo:*`` span on the group's worker thread. The
  trace holds no reduction and no root: replayed as ``sum`` and the group's first rank (said in the
  plan's notes). Point-to-point calls are kept only where the trace names the peer.
- **monitor** (``monitor-rank<R>.jsonl`` of :mod:`commlens.monitor`, read with
  :func:`commlens.results.collectives.record_from_wire`): every collective the job issued through
  ``torch.distributed``, with its group's sequence number; size with nccl-tests' meaning; no reduction,
  no root, no point-to-point (the monitor records none).
- **inspector** (:func:`commlens.ingest.nccl_inspector.read_inspector`): NCCL's own per-communicator
  records: op, size, sequence number and execution time, but no process-group name beyond the
  communicator's hash, and no order *across* communicators other than the recorded times.

Every record becomes a :class:`~commlens.replay.plan.PlanCall` on its rank, in start order; the gap is
measured to the latest end of the calls before it on the rank.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import zlib
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

from commlens.errors import CommlensError
from commlens.ingest.files import open_input
from commlens.ingest.kineto import KinetoTrace, read_kineto_trace, traces_by_rank
from commlens.ops import OPS
from commlens.replay.plan import PlanCall, PlanGroup, RankCalls, ReplayPlan, ReplayPlanError, gaps
from commlens.results.collectives import CollectiveRecord, CollectiveRecordError, record_from_wire
from commlens.results.records import DTYPE_SIZES

__all__ = ["KINETO_DTYPES", "extract_plan", "plan_from_kineto", "plan_from_records", "read_monitor_records"]

log = logging.getLogger(__name__)

# The dtype names record_param_comms and Input type print (C++ spellings, lower-cased by the reader).
KINETO_DTYPES: dict[str, str] = {
    "float": "float32",
    "float32": "float32",
    "double": "float64",
    "float64": "float64",
    "c10::half": "float16",
    "half": "float16",
    "float16": "float16",
    "c10::bfloat16": "bfloat16",
    "bfloat16": "bfloat16",
    "int": "int32",
    "int32": "int32",
    "long int": "int64",
    "long": "int64",
    "int64": "int64",
    "signed char": "int8",
    "int8": "int8",
    "unsigned char": "uint8",
    "uint8": "uint8",
    "bool": "uint8",
    "byte": "uint8",
}
DEFAULT_GROUP = "0"  # torch's name for the default process group (Kineto's "Process Group Name")
WORLD_GROUP = "world"  # the default group's name in a plan: the monitor's, so plans of one job from either pair
MAX_LINE_BYTES = 1 << 16  # a monitor record line is a few hundred bytes
MAX_MONITOR_BYTES = 4 << 30


def _per_rank_count(op: str, input_elements: int, group_size: int) -> tuple[int, bool]:
    """nccl-tests' count from a rank's input elements, and whether the input split evenly over the group."""
    spec = OPS[op]
    if op in ("reduce_scatter", "scatter", "all_to_all") and spec.per_rank_split:
        return input_elements // group_size, input_elements % group_size == 0
    return input_elements, True


def _calls(items: list[tuple[float, float, PlanCall]]) -> tuple[PlanCall, ...]:
    """Calls in start order with their gaps filled in (``items``: start, end, call with gap 0)."""
    items.sort(key=lambda t: t[0])
    gap_list = gaps([(s, e) for s, e, _ in items])
    out = []
    for (_, _, c), g in zip(items, gap_list):
        object.__setattr__(c, "gap_s", g)  # a fresh record, not yet shared
        out.append(c)
    return tuple(out)


class _Dropped:
    """What the extraction left out, counted by reason, for the plan's notes."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add(self, reason: str) -> None:
        self.counts[reason] += 1

    def notes(self) -> list[str]:
        return [f"left out {n} call{'s' if n > 1 else ''}: {reason}" for reason, n in sorted(self.counts.items())]


def plan_from_kineto(traces: Sequence[KinetoTrace]) -> ReplayPlan:
    """A plan from one Kineto trace per rank."""
    by_rank = traces_by_rank(traces, ReplayPlanError)
    world = max([t.world_size or 0 for t in traces] + [max(by_rank) + 1])
    named_ranks: dict[str, tuple[int, ...]] = {}
    seen_in: dict[str, set[int]] = {}
    unnamed = 0
    for t in traces:
        for c in t.collectives:
            name = c.group if c.group is not None else DEFAULT_GROUP
            unnamed += c.group is None
            seen_in.setdefault(name, set()).add(t.rank)
            if c.group_ranks and name not in named_ranks:
                named_ranks[name] = c.group_ranks
    notes: list[str] = []
    groups: dict[str, tuple[int, ...]] = {}
    inferred = []
    for name in sorted(seen_in):
        if name in named_ranks:
            groups[name] = named_ranks[name]
        elif name == DEFAULT_GROUP:
            groups[name] = tuple(range(world))
        else:
            groups[name] = tuple(sorted(seen_in[name]))
            inferred.append(name)
    if groups.get(DEFAULT_GROUP) == tuple(range(world)) and WORLD_GROUP not in groups:
        groups[WORLD_GROUP] = groups.pop(DEFAULT_GROUP)
        notes.append(
            f"torch's default process group ({DEFAULT_GROUP!r}) is named {WORLD_GROUP!r}, as the monitor names it"
        )
    if unnamed:
        notes.append(f"{unnamed} collectives name no process group: replayed on the default group (all {world} ranks)")
    if inferred:
        notes.append(
            f"process groups {', '.join(inferred)}: ranks not in the trace, taken as the ranks whose traces use them"
        )
    dropped = _Dropped()
    assumed_roots = 0
    ranks = []
    for rank in sorted(by_rank):
        t = by_rank[rank]
        items: list[tuple[float, float, PlanCall]] = []
        for c in t.collectives:
            group = c.group if c.group is not None else DEFAULT_GROUP
            group = WORLD_GROUP if group == DEFAULT_GROUP and group not in groups else group
            members = groups[group]
            if c.op not in OPS or c.op == "sendrecv":
                dropped.add(f"op {c.name} (not a collective commlens replays; point-to-point without a peer)")
                continue
            dtype = KINETO_DTYPES.get(c.dtype or "")
            if c.count is None or dtype is None:
                dropped.add("no element count or an unknown dtype in the trace (record_shapes off?)")
                continue
            count, even = _per_rank_count(c.op, c.count, len(members))
            if not even:
                dropped.add(f"{c.op} whose input does not split evenly over its group (uneven splits)")
                continue
            spec = OPS[c.op]
            root = members[0] if spec.has_root else None
            assumed_roots += root is not None
            call = PlanCall(
                op=c.op,
                group=group,
                count=count,
                dtype=dtype,
                start_s=c.start_s,
                duration_s=max(0.0, c.duration_s),
                gap_s=0.0,
                redop="sum" if spec.reduces else None,
                root=root,
                step=c.step,
                seq=c.seq,
            )
            items.append((c.start_s, c.end_s, call))
        ranks.append(RankCalls(rank, _calls(items), t.host))
    spans = Counter(c.span for t in traces for c in t.collectives)
    notes.append("the trace records no reduction: every reducing collective is replayed as sum")
    if assumed_roots:
        notes.append(f"{assumed_roots} rooted calls: the trace records no root, replayed from the group's first rank")
    notes += dropped.notes()
    for t in traces:
        if t.n_cpu_spans_clipped:
            notes.append(
                f"rank {t.rank}: {t.n_cpu_spans_clipped} gloo span(s) closed after the profiler stopped: "
                "ended at its stop"
            )
        if t.n_enqueue_without_gpu_span:
            notes.append(f"rank {t.rank}: {t.n_enqueue_without_gpu_span} NCCL enqueues without a GPU span left out")
    backends = {t.backend for t in traces if t.backend}
    timing = ", ".join(
        {
            "gpu_kernel": "NCCL kernel on the GPU",
            "gpu_user_annotation": "GPU-side annotation span",
            "cpu": "gloo span on the process group's worker thread",
        }.get(k, k)
        + f" ({n})"
        for k, n in sorted(spans.items())
    )
    return ReplayPlan(
        source="kineto",
        backend=backends.pop() if len(backends) == 1 else None,
        world_size=world,
        groups=tuple(PlanGroup(n, r) for n, r in sorted(groups.items())),
        ranks=tuple(ranks),
        notes=tuple(notes),
        files=tuple(t.path for t in traces),
        timing=timing,
    )


def plan_from_records(
    records: Iterable[CollectiveRecord], source: str, files: Sequence[str] = (), backend: str | None = None
) -> ReplayPlan:
    """A plan from collective records (the monitor's, or NCCL Inspector's), each rank's in start order."""
    by_rank: dict[int, list[CollectiveRecord]] = {}
    group_ranks: dict[str, tuple[int, ...]] = {}
    group_sizes: dict[str, int] = {}
    members: dict[str, set[int]] = {}
    hosts: dict[int, str] = {}
    for r in records:
        by_rank.setdefault(r.rank, []).append(r)
        members.setdefault(r.group, set()).add(r.rank)
        group_sizes.setdefault(r.group, r.group_size)
        if r.group_ranks is not None:
            group_ranks.setdefault(r.group, r.group_ranks)
        if r.host:
            hosts.setdefault(r.rank, r.host)
    if not by_rank:
        raise ReplayPlanError("no collective records to build a plan from")
    world = max(max(by_rank) + 1, max(group_sizes.values()))
    notes: list[str] = []
    groups: dict[str, tuple[int, ...]] = {}
    for name in sorted(members):
        if name in group_ranks:
            groups[name] = group_ranks[name]
            continue
        seen = tuple(sorted(members[name]))
        if len(seen) != group_sizes[name]:
            if group_sizes[name] == world:
                seen = tuple(range(world))
            else:
                notes.append(
                    f"process group {name}: {group_sizes[name]} ranks, records of {len(seen)} of them; "
                    f"its missing members are unknown and its calls left out"
                )
                continue
        groups[name] = seen
    dropped = _Dropped()
    ranks = []
    for rank in sorted(by_rank):
        items: list[tuple[float, float, PlanCall]] = []
        for r in by_rank[rank]:
            if r.group not in groups:
                dropped.add(f"on process group {r.group}, whose ranks are not known")
                continue
            if r.dtype not in DTYPE_SIZES:
                dropped.add(f"dtype {r.dtype} (no catalog dtype of that size)")
                continue
            spec = OPS[r.op]
            n = len(groups[r.group])
            elem = DTYPE_SIZES[r.dtype]
            count = r.size_bytes // elem // (n if spec.per_rank_split else 1)
            call = PlanCall(
                op=r.op,
                group=r.group,
                count=count,
                dtype=r.dtype,
                start_s=r.start_s,
                duration_s=r.duration_s,
                gap_s=0.0,
                redop="sum" if spec.reduces else None,
                root=groups[r.group][0] if spec.has_root else None,
                step=r.step,
                seq=r.seq,
            )
            items.append((r.start_s, r.end_s, call))
        ranks.append(RankCalls(rank, _calls(items), hosts.get(rank)))
    notes.append("the records hold no reduction and no root: replayed as sum, from the group's first rank")
    if source == "inspector":
        notes.append(
            "NCCL Inspector records each communicator apart: the order across communicators is taken from the "
            "recorded start times (sequence numbers order calls within a communicator only); group names are "
            "communicator hashes"
        )
    else:
        notes.append("the monitor records no point-to-point calls and no functional (DTensor) collectives")
    notes += dropped.notes()
    timings = sorted({r.timing for rs in by_rank.values() for r in rs})
    return ReplayPlan(
        source=source,
        backend=backend,
        world_size=world,
        groups=tuple(PlanGroup(n, r) for n, r in sorted(groups.items())),
        ranks=tuple(ranks),
        notes=tuple(notes),
        files=tuple(files),
        timing=", ".join(timings),
    )


def read_monitor_records(path: Path, max_bytes: int = MAX_MONITOR_BYTES) -> tuple[list[CollectiveRecord], str | None]:
    """The records of one ``monitor-rank<R>.jsonl`` file, a line at a time (windows and notes skipped), and the
    backend its ``job`` line names."""
    out: list[CollectiveRecord] = []
    backend = None
    read = 0
    try:
        with path.open("rb") as fp:
            for lineno, line in enumerate(iter(lambda: fp.readline(MAX_LINE_BYTES + 1), b""), 1):
                read += len(line)
                if read > max_bytes:
                    raise ReplayPlanError(f"{path}: larger than {max_bytes} bytes: refused")
                if len(line) > MAX_LINE_BYTES:
                    raise ReplayPlanError(
                        f"{path}:{lineno}: a line longer than {MAX_LINE_BYTES} bytes: not monitor output"
                    )
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except (ValueError, RecursionError, UnicodeDecodeError):
                    raise ReplayPlanError(f"{path}:{lineno}: not a JSON line") from None
                if not isinstance(obj, dict):
                    raise ReplayPlanError(f"{path}:{lineno}: not a JSON object")
                if obj.get("type") == "job" and isinstance(obj.get("backend"), str) and len(obj["backend"]) <= 40:
                    backend = obj["backend"]
                if obj.get("type") != "record":
                    continue
                try:
                    out.append(record_from_wire(obj))
                except CollectiveRecordError as e:
                    raise ReplayPlanError(f"{path}:{lineno}: {e}") from None
    except OSError as e:
        raise ReplayPlanError(f"{path}: cannot read ({e.strerror or e})") from None
    return out, backend


def _sniff(path: Path) -> str:
    """The source a file holds, from its first bytes: kineto, monitor, inspector or chakra."""
    try:
        with open_input(path) as (fp, _):
            head = fp.read(1 << 16)
    except (OSError, EOFError, zlib.error) as e:
        raise ReplayPlanError(f"{path}: cannot read ({e})") from None
    text = head.decode("utf-8", "replace")
    if '"traceEvents"' in text or '"distributedInfo"' in text:
        return "kineto"
    if '"type":"record"' in text.replace(" ", "") or '"type":"window"' in text.replace(" ", ""):
        return "monitor"
    if "coll_perf" in text:
        return "inspector"
    if '"nodes"' in text and '"schema"' in text:
        return "chakra"
    raise ReplayPlanError(
        f"{path}: not a source replay reads (a Kineto trace, monitor-rank<R>.jsonl, NCCL Inspector output "
        f"or a Chakra host trace)"
    )


def _expand(paths: Sequence[str | Path]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(
                q for q in p.iterdir() if q.is_file() and (q.name.endswith((".json", ".json.gz", ".jsonl", ".log")))
            )
            if not found:
                raise ReplayPlanError(f"{p}: a directory without .json, .json.gz, .jsonl or .log files")
            out += found
        elif not p.exists():
            raise ReplayPlanError(f"{p}: no such file")
        else:
            out.append(p)
    return out


def _read_traces(files: list[Path], jobs: int | None) -> list[KinetoTrace]:
    """Each rank's trace read, by ``jobs`` processes at once (default: one per core, at most 8)."""
    jobs = jobs if jobs is not None else min(8, os.cpu_count() or 1, len(files))
    if jobs <= 1 or len(files) < 4:
        return [read_kineto_trace(f) for f in files]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(read_kineto_trace, files))


def extract_plan(paths: Sequence[str | Path], source: str | None = None, jobs: int | None = None) -> ReplayPlan:
    """A plan from files (or directories of them) of one source, which is sniffed unless given; Kineto traces
    are read by ``jobs`` processes at once (default: one per core, at most 8)."""
    files = _expand(paths)
    kinds = {f: source or _sniff(f) for f in files}
    found = set(kinds.values())
    if len(found) > 1:
        shown = ", ".join(f"{k}: {f}" for f, k in list(kinds.items())[:4])
        raise ReplayPlanError(f"files of different sources ({shown}): extract one job's files of one source")
    kind = found.pop()
    names = [str(f) for f in files]
    try:
        if kind == "kineto":
            return plan_from_kineto(_read_traces(files, jobs))
        if kind == "monitor":
            read = [read_monitor_records(f) for f in files]
            backends = {b for _, b in read if b}
            records = [r for rs, _ in read for r in rs]
            return plan_from_records(records, "monitor", names, backends.pop() if len(backends) == 1 else None)
        if kind == "inspector":
            from commlens.ingest.nccl_inspector import read_inspector

            return plan_from_records([r for f in files for r in read_inspector(f).records], "inspector", names)
        if kind == "chakra":
            from commlens.replay.chakra import plan_from_chakra

            return plan_from_chakra(files)
    except ReplayPlanError:
        raise
    except CommlensError as e:
        raise ReplayPlanError(str(e)) from None
    raise ReplayPlanError(f"unknown source {kind!r}")
