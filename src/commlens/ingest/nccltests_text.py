"""nccl-tests text output: the ``#`` header, the table, the footer; several runs per log.

Read as NVIDIA/nccl-tests prints it (``src/util.cu``, ``src/common.cu``):

- ``# nccl-tests version V nccl-headers=H nccl-library=L`` (NCCL version codes),
  ``# Collective test starting: all_reduce_perf``, ``# nThread T nGpus G minBytes ...
  iters: N agg iters: A validation: C graph: R``, one ``#  Rank R Group G Pid P on HOST
  device D [BUS] NAME`` line per rank (older: no ``Group``, no ``Pid``, ``[0x..]``);
- the column header (``size count type redop root time algbw busbw #wrong`` twice,
  ``i_min i_max i_p99 i_cv%`` after each half with ``-I``, ``cputime`` with ``-C``, a
  ``timestamp`` column with ``-T``; pre-2.13 logs lack ``root`` or ``redop`` and
  print a max-delta ``error`` column), which fixes the row layout;
- rows ``size count type redop root | time algbw busbw #wrong | ...`` (``#wrong`` is
  ``N/A`` without checking); the footer ``# Out of bounds values`` / ``# Avg bus
  bandwidth``, then ``# Collective test concluded: all_reduce_perf``.

Around it, whatever else a job wrote: NCCL INFO/WARN lines (also glued to a row
that was being printed, as NCCL logs through the same stdout), MPI and Slurm
output, ``[1,0]<stdout>:``, ``[0]`` and ``0:`` rank prefixes, blank lines.

Decisions: a row cut short (the file ends, or the next row or the footer comes,
before its columns are complete) is an error at its line; a table that stops
after complete rows, without its footer, is kept and the run marked
``incomplete``. The op comes from ``Collective test starting``/``concluded``, else
from the last ``*_perf`` binary named before the run (a command line, a
``==== all_gather_perf ====`` banner), else from the caller's ``op``; else it is an error.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from commlens.ingest.base import ParsedRun, Source
from commlens.ingest.nccltests_common import (
    BusbwCheck,
    RankInfo,
    check_size,
    commlens_dtype,
    filter_env,
    nccl_version_from_code,
    op_from_program,
    resolve_op,
    system_from_ranks,
    unknown_dtype_message,
)
from commlens.ops import OpSpec, UnknownOpError
from commlens.results.records import DTYPE_SIZES, Measurement, RecordError
from commlens.results.stats import TimeStats

__all__ = ["parse_nccl_tests_text"]

# Rank prefixes launchers add: Open MPI --tag-output, Slurm srun --label.
_LAUNCHER_PREFIX_RE = re.compile(r"^(?:\[\d+,\d+\]<std(?:out|err)>:\s?|\s*\d+: )")
# MPICH/Intel MPI -prepend-rank marks every write with "[rank]", also in mid-line.
_WRITE_MARK_RE = re.compile(r"\[\d+\]")
# A NCCL log record "host:pid:tid [dev] NCCL INFO ...", alone on its line or glued to a half-printed row.
_NCCL_LOG_RE = re.compile(
    r"(?:^\s*\S+|[A-Za-z][\w.\-]*):\d+:\d+\s+(?:\[\d+\]\s*)?NCCL (?:INFO|WARN|TRACE|ERROR|ABORT|VERSION)\b"
)
_NCCL_VERSION_RE = re.compile(r"\b(NCCL|RCCL) version (\d+\.\d+\.\d+)")
_ENV_ASSIGN_RE = re.compile(r"\b([A-Z][A-Z0-9_]*)=(\S+)")

_VERSION_RE = re.compile(r"nccl-tests version (\S+).*?nccl-headers=(\d+)\s+nccl-library=(\d+)")
_STARTING_RE = re.compile(r"Collective test starting:\s*(\S+)")
_CONCLUDED_RE = re.compile(r"Collective test concluded:\s*(\S+)")
_RANK_RE = re.compile(
    r"#\s+Rank\s+(\d+)(?:\s+Group\s+\d+)?(?:\s+Pid\s+(\d+))?\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*?)\s*$"
)
_SETTINGS_RES = {
    "nthreads": re.compile(r"\bnThread (\d+)"),
    "ngpus": re.compile(r"\bnGpus (\d+)"),
    "min_bytes": re.compile(r"\bminBytes (\d+)"),
    "max_bytes": re.compile(r"\bmaxBytes (\d+)"),
    "warmup_iters": re.compile(r"\bwarmup iters: (\d+)"),
    "iters": re.compile(r"\bwarmup iters: \d+\s+iters: (\d+)"),
    "agg_iters": re.compile(r"\bagg iters: (\d+)"),
    "validation": re.compile(r"\bvalidation: (\d+)"),
    "graph": re.compile(r"\bgraph: (\d+)"),
    "unalign": re.compile(r"\bunalign: (\d+)"),
}
_STEP_RE = re.compile(r"\bstep: (\d+)\((factor|bytes)\)")
_SKIP_RE = re.compile(r"summary skips first (\d+) iterations")
_OOB_RE = re.compile(r"Out of bounds values\s*:\s*(\d+)")
_AVG_RE = re.compile(r"Avg bus bandwidth\s*:\s*(\S+)")
_STAMP_RE = re.compile(r"^(?:\d{4}-\d\d-\d\d|\d\d:\d\d:\d\d)$")

_LEFT_COLUMNS = ("size", "count", "type", "redop", "root")
_HALF_BASE = ("algbw", "busbw")
_PER_ITER = ("i_min", "i_max", "i_p99", "i_cv%")


@dataclass(frozen=True)
class _Layout:
    """Which columns a row has, read off the column header."""

    left: tuple[str, ...]
    half: tuple[str, ...]  # time, algbw, busbw, #wrong|error [, i_min, i_max, i_p99, i_cv%]
    stamp_tokens: int  # 2 with the -T timestamp column ("YYYY-MM-DD HH:MM:SS")
    cputime: bool = False
    ntokens: int = field(init=False)  # tokens in a whole row

    def __post_init__(self) -> None:
        object.__setattr__(self, "ntokens", len(self.left) + 2 * len(self.half) + self.stamp_tokens)

    @property
    def per_iter(self) -> bool:
        return len(self.half) == 8


_MODERN = _Layout(_LEFT_COLUMNS, ("time", "algbw", "busbw", "#wrong"), 0)
_MODERN_PER_ITER = _Layout(_LEFT_COLUMNS, ("time", "algbw", "busbw", "#wrong", *_PER_ITER), 0)


def _layout_from_header(tokens: list[str]) -> _Layout | None:
    """The layout named by a column header's tokens (without the ``#``), or None if it is not one."""
    times = [i for i, t in enumerate(tokens) if t in ("time", "cputime")]
    if len(times) < 2:
        return None
    left = tuple(tokens[: times[0]])
    half = tuple(tokens[times[0]: times[1]])
    rest = tokens[times[1] + len(half):]
    if (left[:3] != ("size", "count", "type") or not set(left) <= set(_LEFT_COLUMNS)
            or half[1:3] != _HALF_BASE or len(half) < 4 or half[3] not in ("#wrong", "error")
            or half[4:] not in ((), _PER_ITER) or tuple(tokens[times[1]: times[1] + len(half)]) != half
            or rest not in ([], ["timestamp"])):
        return None
    return _Layout(left, half, 2 if rest else 0, cputime=half[0] == "cputime")


@dataclass
class _Segment:
    """One nccl-tests invocation inside the log."""

    first_line: int
    seen: set[str] = field(default_factory=set)
    op_started: tuple[str, int] | None = None
    op_concluded: tuple[str, int] | None = None
    op_mention: tuple[str, int, str] | None = None  # op stem, line, the line's text
    tests_version: str | None = None
    headers_code: int | None = None
    library_code: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    ranks: dict[int, RankInfo] = field(default_factory=dict)
    rank_line: int = 0
    layout: _Layout | None = None
    rows: list[tuple] = field(default_factory=list)  # (line, tokens)
    footer: bool = False
    oob: int | None = None
    avg_busbw: tuple[float, int] | None = None  # GB/s, line
    errors: list[str] = field(default_factory=list)


def _number(source: Source, line: int, column: str, token: str) -> float:
    try:
        value = float(token)
    except ValueError:
        raise source.error(line, f"bad {column} value {token!r} in a table row") from None
    if not (value >= 0.0) or math.isinf(value):
        raise source.error(line, f"bad {column} value {token!r} in a table row: not a finite number >= 0")
    return value


def _is_row_fragment(tokens: list[str]) -> bool:
    """Tokens that can continue a row cut by a NCCL log record: numbers, N/A, a timestamp."""
    for t in tokens:
        if t == "N/A" or _STAMP_RE.match(t):
            continue
        try:
            float(t)
        except ValueError:
            return False
    return True


class _Reader:
    """Walks the lines once, cutting the log into segments and collecting their rows."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.segments: list[_Segment] = []
        self.seg: _Segment | None = None
        self.mention: tuple[str, int, str] | None = None
        self.pending: tuple[int, list[str]] | None = None  # a row waiting for the rest of its columns
        self.nccl_version: str | None = None
        self.backend = "nccl"
        self.write_marks = False

    # -- segments --------------------------------------------------------------------------

    def _segment(self, kind: str, line: int) -> _Segment:
        """The segment a header line of ``kind`` belongs to: the current one, or a new run."""
        seg = self.seg
        repeats = kind == "rank" and seg is not None and seg.layout is None
        if seg is None or seg.rows or seg.footer or (kind in seg.seen and not repeats) or (
                kind == "rank" and seg.layout is not None):
            seg = _Segment(first_line=line)
            if self.mention is not None:
                seg.op_mention, self.mention = self.mention, None
            self.segments.append(seg)
            self.seg = seg
        seg.seen.add(kind)
        return seg

    # -- lines -----------------------------------------------------------------------------

    def read(self) -> None:
        for lineno, raw in enumerate(self.source.lines, 1):
            self._line(lineno, raw)
        if self.pending is not None:
            self._cut_short("the file ends")

    def _line(self, lineno: int, line: str) -> None:
        if line[:1] in ("[", " ") or line[:1].isdigit():
            line = _LAUNCHER_PREFIX_RE.sub("", line, count=1)
            if line.startswith("[") and _WRITE_MARK_RE.match(line):
                self.write_marks = True
            if self.write_marks:
                line = _WRITE_MARK_RE.sub(" ", line)
        if "CCL" in line:
            version = _NCCL_VERSION_RE.search(line)
            if version:
                self.backend = "rccl" if version.group(1) == "RCCL" else "nccl"
                self.nccl_version = self.nccl_version or version.group(2)
            record = _NCCL_LOG_RE.search(line)
            if record:
                line = line[: record.start()]
        text = line.strip()
        if not text:
            return
        if text[0] == "#":
            if self.pending is not None:
                self._cut_short(f"line {lineno} ({text[:40]!r}) comes")
            self._header(lineno, text)
            return
        tokens = text.split()
        if len(tokens) >= 3 and tokens[0].isdigit() and tokens[1].isdigit() and tokens[2][0].isalpha():
            if self.pending is not None:
                self._cut_short(f"the next row (line {lineno}) starts")
            self._row(lineno, tokens)
        elif self.pending is not None and _is_row_fragment(tokens):
            start, have = self.pending
            have = have + tokens
            self.pending = None
            self._row(start, have)
        elif "_perf" in text:
            stem = op_from_program(text)
            if stem is not None:
                mention = (stem, lineno, text)
                seg = self.seg
                if seg is not None and not seg.rows and not seg.footer and seg.layout is None \
                        and seg.op_mention is None:
                    seg.op_mention = mention
                else:
                    self.mention = mention

    def _cut_short(self, why: str) -> None:
        assert self.pending is not None
        start, have = self.pending
        layout = self.seg.layout if self.seg and self.seg.layout else _MODERN
        raise self.source.error(start, (
            f"table row cut short: {len(have)} of {layout.ntokens} columns before {why} "
            f"(a truncated log?): {' '.join(have)!r}"))

    def _row(self, lineno: int, tokens: list[str]) -> None:
        seg = self.seg
        if seg is None or seg.footer:
            seg = self._segment("row", lineno)
        layout = seg.layout
        if layout is None:
            layout = _MODERN_PER_ITER if len(tokens) >= _MODERN_PER_ITER.ntokens else _MODERN
            seg.layout = layout
        if len(tokens) < layout.ntokens:
            self.pending = (lineno, tokens)
            return
        if len(tokens) > layout.ntokens:
            raise self.source.error(lineno, (
                f"table row has {len(tokens)} columns, the table header names {layout.ntokens}: "
                f"{' '.join(tokens)!r}"))
        seg.rows.append((lineno, tokens))

    def _header(self, lineno: int, text: str) -> None:
        body = text[1:].strip()
        if not body:
            return
        if body.startswith("nccl-tests version"):
            m = _VERSION_RE.search(body)
            seg = self._segment("version", lineno)
            if m:
                seg.tests_version = m.group(1)
                seg.headers_code, seg.library_code = int(m.group(2)), int(m.group(3))
        elif body.startswith("Collective test starting"):
            m = _STARTING_RE.search(body)
            seg = self._segment("starting", lineno)
            if m:
                seg.op_started = (m.group(1), lineno)
        elif body.startswith("nThread"):
            seg = self._segment("nthread", lineno)
            for key, rx in _SETTINGS_RES.items():
                m = rx.search(body)
                if m:
                    seg.settings[key] = int(m.group(1))
            m = _STEP_RE.search(body)
            if m:
                seg.settings["step_factor" if m.group(2) == "factor" else "step_bytes"] = int(m.group(1))
        elif body.startswith("Rank"):
            m = _RANK_RE.match(text)
            if not m:
                raise self.source.error(lineno, f"unreadable rank line: {text!r}")
            seg = self._segment("rank", lineno)
            rank = int(m.group(1))
            if rank in seg.ranks:
                raise self.source.error(lineno, (
                    f"rank {rank} is listed twice: several independent nccl-tests processes wrote to this log "
                    f"(an MPI launch of binaries built without MPI=1?)"))
            seg.rank_line = seg.rank_line or lineno
            seg.ranks[rank] = RankInfo(rank=rank, host=m.group(3), pid=int(m.group(2)) if m.group(2) else None,
                                       device=int(m.group(4)), bus_id=m.group(5), device_name=m.group(6))
        elif body.startswith("Blocking Enabled"):
            self._segment("blocking", lineno).settings["blocking"] = True
        elif body.startswith("Per-Iteration Report"):
            seg = self._segment("per_iter", lineno)
            m = _SKIP_RE.search(body)
            seg.settings["per_iter_skip"] = int(m.group(1)) if m else 0
        elif body.startswith("Out of bounds values") or body.startswith("Avg bus bandwidth"):
            seg = self.seg
            if seg is None:
                return
            seg.footer = True
            m = _OOB_RE.search(body)
            if m:
                seg.oob = int(m.group(1))
            m = _AVG_RE.search(body)
            if m:
                try:
                    seg.avg_busbw = (float(m.group(1)), lineno)
                except ValueError:
                    pass
        elif body.startswith("Collective test concluded"):
            m = _CONCLUDED_RE.search(body)
            if m and self.seg is not None:
                self.seg.op_concluded = (m.group(1), lineno)
        elif body.startswith("error:"):
            if self.seg is not None:
                self.seg.errors.append(body)
        elif "size" in body and "count" in body:
            layout = _layout_from_header(body.split())
            if layout is not None:
                self._segment("table", lineno).layout = layout


# -- from segments to records ------------------------------------------------------------------


def _segment_op(source: Source, seg: _Segment, default_op: str | None) -> tuple[OpSpec, str]:
    """The segment's op, and where it came from (for the run's notes)."""
    named: tuple[str, int, str] | None = None
    if seg.op_started is not None:
        named = (seg.op_started[0], seg.op_started[1], "'Collective test starting' line")
    elif seg.op_concluded is not None:
        named = (seg.op_concluded[0], seg.op_concluded[1], "'Collective test concluded' line")
    elif seg.op_mention is not None:
        named = (seg.op_mention[0], seg.op_mention[1], "binary named")
    if named is None:
        if default_op is None:
            line = seg.rows[0][0] if seg.rows else seg.first_line
            raise source.error(line, (
                "the log does not say which collective this table measured (no 'Collective test starting' line "
                "and no *_perf binary named before it); pass the op (commlens ingest --op all_reduce)"))
        return _resolve(source, seg.first_line, default_op), "given by the caller"
    name, line, how = named
    stem = op_from_program(name) or name
    spec = _resolve(source, line, stem)
    if default_op is not None and _resolve(source, line, default_op).name != spec.name:
        raise source.error(line, f"the log names {name} ({how}) but the op given is {default_op!r}")
    return spec, f"{how} at line {line}"


def _resolve(source: Source, line: int, name: str) -> OpSpec:
    try:
        return resolve_op(name)
    except UnknownOpError as e:
        raise source.error(line, str(e)) from None


def _world_size(source: Source, seg: _Segment) -> int:
    if not seg.ranks:
        line = seg.rows[0][0] if seg.rows else seg.first_line
        raise source.error(line, "no '#  Rank N ... on HOST device D' lines before this table: the world size "
                                 "is unknown (ingest the whole log, header included)")
    world = max(seg.ranks) + 1
    missing = sorted(set(range(world)) - set(seg.ranks))
    if missing:
        raise source.error(seg.rank_line, f"rank lines do not list ranks {missing} of {world}")
    return world


def _measurements(source: Source, seg: _Segment, spec: OpSpec, world: int, check: BusbwCheck) -> list[Measurement]:
    layout = seg.layout or _MODERN
    left = {name: i for i, name in enumerate(layout.left)}
    half_width = len(layout.half)
    iters = int(seg.settings.get("iters", 0))
    factor = spec.busbw_factor(world)
    has_wrong_count = layout.half[3] == "#wrong"
    per_iter = layout.per_iter
    out: list[Measurement] = []
    dtypes: dict[str, tuple[str, int]] = {}
    i_redop, i_root = left.get("redop"), left.get("root")
    for lineno, tokens in seg.rows:
        size = int(tokens[0])
        count = int(tokens[1])
        type_name = tokens[2]
        dt = dtypes.get(type_name)
        if dt is None:
            ours = commlens_dtype(type_name)
            if ours is None:
                raise source.error(lineno, unknown_dtype_message(type_name))
            dt = dtypes[type_name] = (ours, DTYPE_SIZES[ours])
        redop = tokens[i_redop] if i_redop is not None else "none"
        root = -1
        if i_root is not None:
            try:
                root = int(tokens[i_root])
            except ValueError:
                raise source.error(lineno, f"bad root value {tokens[i_root]!r} in a table row") from None
        problem = check_size(spec, size, count, dt[1], world)
        if problem:
            raise source.error(lineno, problem)
        base = len(layout.left)
        for in_place in (False, True):
            h = tokens[base + (half_width if in_place else 0): base + (2 * half_width if in_place else half_width)]
            time_s = _number(source, lineno, layout.half[0], h[0]) * 1e-6
            busbw = _number(source, lineno, "busbw", h[2])
            nwrong = None
            if has_wrong_count and h[3] != "N/A":
                nwrong = int(_number(source, lineno, "#wrong", h[3]))
            if per_iter:
                i_min, i_max, i_p99, i_cv = (_number(source, lineno, n, v) for n, v in zip(_PER_ITER, h[4:8]))
                reported = TimeStats(mean_s=time_s, p50_s=None, p95_s=None, p99_s=i_p99 * 1e-6, min_s=i_min * 1e-6,
                                     max_s=i_max * 1e-6, stdev_s=None, cv=i_cv / 100.0, n=iters)
            else:
                reported = TimeStats(mean_s=time_s, p50_s=None, p95_s=None, p99_s=None, min_s=None, max_s=None,
                                     stdev_s=None, cv=None, n=iters)
            if spec.name != "barrier":
                check.add(lineno, busbw, size, time_s, factor)
            try:
                out.append(Measurement(op=spec.name, dtype=dt[0], size_bytes=size, count=count, in_place=in_place,
                                       world_size=world, samples_s=(), redop=redop, root=root, nwrong=nwrong,
                                       reported=reported))
            except RecordError as e:
                raise source.error(lineno, str(e)) from None
    return out


def _segment_config(seg: _Segment, spec: OpSpec, how: str) -> dict[str, Any]:
    layout = seg.layout or _MODERN
    cfg: dict[str, Any] = {"op": spec.name, "op_from": how, "line": seg.first_line, **seg.settings}
    cfg.update(per_iter_timing=layout.per_iter, cputime=layout.cputime, rows=len(seg.rows), complete=seg.footer)
    if seg.tests_version:
        cfg["nccl_tests_version"] = seg.tests_version
    if seg.op_mention is not None:
        cfg["command"] = seg.op_mention[2]
    if seg.oob is not None:
        cfg["out_of_bounds"] = seg.oob
    if seg.avg_busbw is not None:
        cfg["avg_busbw_gbps"] = seg.avg_busbw[0]
    return cfg


def parse_nccl_tests_text(source: Source, *, op: str | None = None) -> ParsedRun:
    """One run from an nccl-tests log: every table in it, all at one world size."""
    reader = _Reader(source)
    reader.read()
    segments = [s for s in reader.segments if s.rows]
    if not segments:
        line = next((s.first_line for s in reader.segments), 1)
        raise source.error(line, "no nccl-tests result rows found")
    notes: list[str] = []
    measurements: list[Measurement] = []
    configs: list[dict[str, Any]] = []
    world: int | None = None
    first_ranks: _Segment | None = None
    status = "complete"
    for seg in segments:
        spec, how = _segment_op(source, seg, op)
        seg_world = _world_size(source, seg)
        if world is None:
            world, first_ranks = seg_world, seg
        elif seg_world != world:
            raise source.error(seg.rank_line, (
                f"this run has {seg_world} ranks, an earlier one in the file {world}: a run has one world size "
                f"(split the log)"))
        elif first_ranks is not None and [r.host for r in seg.ranks.values()] != \
                [r.host for r in first_ranks.ranks.values()]:
            notes.append(f"the {spec.name} run at line {seg.first_line} ran on other hosts than the first; "
                         f"the run's system lists the first run's")
        check = BusbwCheck()
        measurements.extend(_measurements(source, seg, spec, seg_world, check))
        note = check.report(f"{spec.name} (line {seg.first_line})", source.warn)
        if note:
            notes.append(note)
        _check_footer(source, seg, spec, notes)
        if not seg.footer:
            status = "incomplete"
            notes.append(f"the {spec.name} table (line {seg.rows[0][0]}) stops after {len(seg.rows)} rows without "
                         f"its footer: the job ended early or the log was cut")
        if (seg.layout or _MODERN).half[3] == "error":
            notes.append(f"the {spec.name} table's 'error' column (nccl-tests before 2.13) is a max delta, "
                         f"not a count of wrong elements: not kept")
        notes.extend(f"{spec.name}: nccl-tests printed '{e}'" for e in seg.errors)
        configs.append(_segment_config(seg, spec, how))
    for seg in reader.segments:
        if not seg.rows and (seg.ranks or seg.layout is not None):
            notes.append(f"the nccl-tests run starting at line {seg.first_line} printed no result rows")
    assert world is not None and first_ranks is not None
    if any(c.get("cputime") for c in configs):
        notes.append("times marked 'cputime' are CPU wall times (nccl-tests -C), not CUDA event times")
    if any(c.get("per_iter_timing") for c in configs):
        notes.append("min/max/p99/cv come from nccl-tests -I (per-iteration CUDA event times, max over processes; "
                     "p99 is the sorted sample at index ceil(0.99 n) - 1, cv uses the population stdev)")
    backend_version = ""
    if first_ranks.library_code:
        backend_version = nccl_version_from_code(first_ranks.library_code)
    elif reader.nccl_version:
        backend_version = reader.nccl_version
    extra: dict[str, Any] = {}
    if first_ranks.tests_version:
        extra["nccl_tests_version"] = first_ranks.tests_version
    if first_ranks.headers_code:
        extra["nccl_headers_version"] = nccl_version_from_code(first_ranks.headers_code)
    commands = [s.op_mention[2] for s in segments if s.op_mention is not None]
    env = filter_env(_ENV_ASSIGN_RE.findall(commands[0])) if commands else {}
    system = system_from_ranks(list(first_ranks.ranks.values()), world_size=world, backend=reader.backend,
                               backend_version=backend_version, extra=extra, env=env)
    return ParsedRun(
        source="nccl-tests",
        system=system,
        measurements=measurements,
        config={"format": "nccl-tests", "runs": configs},
        notes=notes,
        command_line=commands[0] if commands else "",
        status=status,  # type: ignore[arg-type]
    )


def _check_footer(source: Source, seg: _Segment, spec: OpSpec, notes: list[str]) -> None:
    """The footer's average busBW is the mean of every printed busBW: a row lost on the way shows there."""
    if seg.avg_busbw is None:
        return
    layout = seg.layout or _MODERN
    base, width = len(layout.left), len(layout.half)
    printed = [float(tokens[base + off + 2]) for _, tokens in seg.rows for off in (0, width)]
    mean = sum(printed) / len(printed)
    footer, line = seg.avg_busbw
    if abs(mean - footer) > 0.01 + 1e-3 * abs(footer):
        notes.append(source.warn(line, (
            f"{spec.name}: the footer's average busBW {footer:g} GB/s is not the mean of the {len(seg.rows)} rows "
            f"read ({mean:.6g} GB/s): rows may be missing or garbled")))
