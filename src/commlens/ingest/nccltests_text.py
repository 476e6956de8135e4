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

from commlens.ingest.base import IngestError, ParsedRun, Source
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
from commlens.ingest.nccltests_op import (
    OLD_ALGBW_OPS,
    OpInferenceError,
    RowEvidence,
    TableEvidence,
    infer_op,
    ratio_fits,
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
# "NCCL version 2.21.5+cuda12.4" (NCCL's INFO/VERSION record), "RCCL version : 2.22.3-HEAD:ab12cd3" (RCCL's
# NCCL_DEBUG=VERSION banner, also "RCCL version 2.18.3+hip6.0" in older RCCL).
_NCCL_VERSION_RE = re.compile(r"\b(NCCL|RCCL) version\s*:?\s*(\d+\.\d+\.\d+)(\S*)")
# RCCL's banner lines after "RCCL version :" (no '#'): "HIP version  : 7.12...", "Hostname     : host".
_RCCL_BANNER_RE = re.compile(r"^(HIP version|ROCm version|Hostname|Librccl path)\s*:\s*(\S.*?)\s*$")
_RCCL_BANNER_KEYS = {"HIP version": "hip_version", "ROCm version": "rocm_version", "Hostname": "hostname",
                     "Librccl path": "library_path"}
_RCCL_TESTS_RE = re.compile(r"^rccl-tests: Version (\S+)")
# NCCL's COLL records (NCCL_DEBUG_SUBSYS=COLL): "NCCL INFO AllReduce: opCount 0 sendbuff ...".
_NCCL_COLL_RE = re.compile(r"NCCL INFO (\w+): opCount\b")
_ENV_ASSIGN_RE = re.compile(r"\b([A-Z][A-Z0-9_]*)=(\S+)")

_VERSION_RE = re.compile(r"([nr]ccl)-tests version (\S+).*?[nr]ccl-headers=(\d+)\s+[nr]ccl-library=(\d+)")
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
    oob_failed: bool = False  # the footer says FAILED
    nccl_colls: dict[str, int] = field(default_factory=dict)  # NCCL COLL record op name -> first line


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
        self.library_version: str | None = None  # as printed: "2.12.7+cuda11.4", "2.22.3-HEAD:ab12cd3"
        self.backend = "nccl"
        self.write_marks = False
        self.banner: dict[str, str] = {}  # RCCL's version banner, rccl-tests' own version
        self.colls: dict[str, int] = {}  # COLL records before the segment they belong to

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
            if self.colls:
                seg.nccl_colls, self.colls = self.colls, {}
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
                self.library_version = self.library_version or version.group(2) + version.group(3)
            record = _NCCL_LOG_RE.search(line)
            if record:
                coll = _NCCL_COLL_RE.search(line, record.start())
                if coll:
                    seg = self.seg
                    colls = seg.nccl_colls if seg is not None and not seg.footer else self.colls
                    colls.setdefault(coll.group(1), lineno)
                line = line[: record.start()]
            elif version and line.lstrip().startswith("RCCL version"):
                return
        text = line.strip()
        if not text:
            return
        if text[0] == "#":
            if self.pending is not None:
                self._cut_short(f"line {lineno} ({text[:40]!r}) comes")
            self._header(lineno, text)
            return
        if text[0] in "HRL" or text.startswith("rccl-tests"):
            banner = _RCCL_BANNER_RE.match(text)
            if banner:
                self.banner.setdefault(_RCCL_BANNER_KEYS[banner.group(1)], banner.group(2))
                return
            banner = _RCCL_TESTS_RE.match(text)
            if banner:
                self.backend = "rccl"
                self.banner.setdefault("rccl_tests_version", banner.group(1))
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
        if body.startswith(("nccl-tests version", "rccl-tests version")):
            m = _VERSION_RE.search(body)
            seg = self._segment("version", lineno)
            if m:
                if m.group(1) == "rccl":
                    self.backend = "rccl"
                seg.tests_version = m.group(2)
                seg.headers_code, seg.library_code = int(m.group(3)), int(m.group(4))
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
                seg.oob_failed = seg.oob > 0 or "FAILED" in body
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


def _segment_op(source: Source, seg: _Segment, default_op: str | None, world: int) -> tuple[OpSpec, str]:
    """The segment's op, and where it came from (``op_from``): named by the log, given, or inferred."""
    named = _named_op(seg)
    if named is None:
        if default_op is not None:
            return _resolve(source, seg.first_line, default_op), "given by the caller"
        try:
            inferred = infer_op(_evidence(source, seg, world))
        except OpInferenceError as e:
            raise source.error(e.line, e.message) from None
        return inferred.op, inferred.how
    name, line, how = named
    stem = op_from_program(name) or name
    spec = _resolve(source, line, stem)
    if default_op is not None and _resolve(source, line, default_op).name != spec.name:
        raise source.error(line, f"the log names {name} ({how}) but the op given is {default_op!r}")
    return spec, f"{how} at line {line}"


def _evidence(source: Source, seg: _Segment, world: int) -> TableEvidence:
    """What the segment's rows say about their op (the first half each row prints)."""
    layout = seg.layout or _MODERN
    left = {name: i for i, name in enumerate(layout.left)}
    i_redop, i_root = left.get("redop"), left.get("root")
    base = len(layout.left)
    rows: list[RowEvidence] = []
    for lineno, tokens in seg.rows:
        ours = commlens_dtype(tokens[2])
        if ours is None:
            raise source.error(lineno, unknown_dtype_message(tokens[2]))
        rows.append(RowEvidence(
            line=lineno, size_bytes=int(tokens[0]), count=int(tokens[1]), elem_size=DTYPE_SIZES[ours],
            redop=tokens[i_redop] if i_redop is not None else None,
            root=_root(source, lineno, tokens[i_root]) if i_root is not None else None,
            algbw_gbps=_number(source, lineno, "algbw", tokens[base + 1]),
            busbw_gbps=_number(source, lineno, "busbw", tokens[base + 2])))
    return TableEvidence(world_size=world, rows=rows, pre_2_13=layout.half[3] == "error",
                         nccl_colls=dict(seg.nccl_colls))


def _root(source: Source, line: int, token: str) -> int:
    try:
        return int(token)
    except ValueError:
        raise source.error(line, f"bad root value {token!r} in a table row") from None


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


@dataclass
class _Table:
    """A segment's rows as records, with what was normalised on the way (notes, config)."""

    measurements: list[Measurement]
    notes: list[str]
    config: dict[str, Any]


def _measurements(source: Source, seg: _Segment, spec: OpSpec, world: int, check: BusbwCheck) -> _Table:
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
    printed_redops: dict[str, int] = {}  # a reduction name printed for an op that does not reduce
    printed: list[RowEvidence] = []  # each half's printed algBW and busBW
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
        redop = tokens[i_redop] if i_redop is not None else ("sum" if spec.reduces else "none")
        if redop != "none" and not spec.reduces:
            printed_redops.setdefault(redop, lineno)
            redop = "none"
        root = _root(source, lineno, tokens[i_root]) if i_root is not None else -1
        problem = check_size(spec, size, count, dt[1], world)
        if problem:
            raise source.error(lineno, problem)
        base = len(layout.left)
        for in_place in (False, True):
            h = tokens[base + (half_width if in_place else 0): base + (2 * half_width if in_place else half_width)]
            time_s = _number(source, lineno, layout.half[0], h[0]) * 1e-6
            busbw = _number(source, lineno, "busbw", h[2])
            printed.append(RowEvidence(lineno, size, count, dt[1], None, None,
                                       _number(source, lineno, "algbw", h[1]), busbw))
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
    notes: list[str] = []
    config: dict[str, Any] = {}
    where = f"{spec.name} (line {seg.rows[0][0]})"
    if printed_redops:
        shown = ", ".join(f"'{r}'" for r in printed_redops)
        notes.append(f"{where}: the table prints redop {shown} (nccl-tests gives {spec.name} its -o reduction, "
                     f"sum by default, though it does not reduce): stored as 'none'")
        config["printed_redop"] = list(printed_redops)
    if spec.reduces and i_redop is None:
        notes.append(f"{where}: the table has no redop column: stored as 'sum', nccl-tests' default")
    if spec.name in OLD_ALGBW_OPS and world > 1:
        if ratio_fits(printed, 1.0) and ratio_fits(printed, factor) is False:
            notes.append(f"{where}: the table prints algBW as nccl-tests did before 2020-06-19 (commit ec1b5e2): "
                         f"count x elem x (ranks-1) / time, equal to busBW; stored with today's definition, "
                         f"size / time ({world / (world - 1):.4g} x the printed figure); the printed algBW is kept "
                         f"in the run's config (printed_algbw_gbps)")
            config["printed_algbw_gbps"] = [r.algbw_gbps for r in printed]
            config["printed_algbw_definition"] = "count x elem x (ranks-1) / time (nccl-tests before ec1b5e2, 2020)"
    return _Table(out, notes, config)


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
    """One run from an nccl-tests log: every table in it, all at one world size.

    An error in one table of a log with several names that table (its op where the log says it,
    and the line its rows start at).
    """
    reader = _Reader(source)
    try:
        reader.read()
    except IngestError as e:
        raise _in_table(source, reader.segments, e) from None
    segments = [s for s in reader.segments if s.rows]
    if not segments:
        line = next((s.first_line for s in reader.segments), 1)
        raise source.error(line, "no nccl-tests result rows found")
    return _run(source, reader, segments, op)


def _in_table(source: Source, segments: list[_Segment], error: IngestError) -> IngestError:
    """``error``, naming the table it is in when the log has several tables."""
    tables = [s for s in segments if s.rows or s.layout is not None]
    if len(tables) < 2 or error.line <= 0:
        return error
    seg = next((s for s in reversed(tables) if s.first_line <= error.line), tables[0])
    start = seg.rows[0][0] if seg.rows else seg.first_line
    name = _named_op(seg)
    what = f"the {op_from_program(name[0]) or name[0]} table" if name else "the table (its op not named)"
    return source.error(error.line, f"{error.message} (in {what} starting at line {start}, "
                                    f"table {tables.index(seg) + 1} of {len(tables)} read)")


def _run(source: Source, reader: _Reader, segments: list[_Segment], op: str | None) -> ParsedRun:
    notes: list[str] = []
    measurements: list[Measurement] = []
    configs: list[dict[str, Any]] = []
    world: int | None = None
    first_ranks: _Segment | None = None
    incomplete = failed = False
    for seg in segments:
        seg_world = _world_size(source, seg)
        try:
            spec, how = _segment_op(source, seg, op, seg_world)
        except IngestError as e:  # a table the log names is named in the message already
            raise (e if _named_op(seg) else _in_table(source, segments, e)) from None
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
        try:
            table = _measurements(source, seg, spec, seg_world, check)
        except IngestError as e:
            raise _in_table(source, segments, e) from None
        measurements.extend(table.measurements)
        notes.extend(table.notes)
        note = check.report(f"{spec.name} (line {seg.first_line})", source.warn)
        if note:
            notes.append(note)
        _check_footer(source, seg, spec, notes)
        if not seg.footer:
            incomplete = True
            notes.append(f"the {spec.name} table (line {seg.rows[0][0]}) stops after {len(seg.rows)} rows without "
                         f"its footer: the job ended early or the log was cut")
        check_note = _failed_check(seg, spec, table.measurements)
        if check_note:
            failed = True
            notes.append(check_note)
        if (seg.layout or _MODERN).half[3] == "error":
            notes.append(f"the {spec.name} table's 'error' column (nccl-tests before 2.13) is a max delta, "
                         f"not a count of wrong elements: not kept")
        notes.extend(f"{spec.name}: nccl-tests printed '{e}'" for e in seg.errors)
        configs.append({**_segment_config(seg, spec, how), **table.config,
                        "check": "failed" if check_note else _check_state(seg)})
    for seg in reader.segments:
        if not seg.rows and (seg.ranks or seg.layout is not None):
            notes.append(f"the nccl-tests run starting at line {seg.first_line} printed no result rows")
    assert world is not None and first_ranks is not None
    if any(c.get("cputime") for c in configs):
        notes.append("times marked 'cputime' are CPU wall times (nccl-tests -C), not CUDA event times")
    if any(c.get("per_iter_timing") for c in configs):
        notes.append("min/max/p99/cv come from nccl-tests -I (per-iteration CUDA event times, max over processes; "
                     "p99 is the sorted sample at index ceil(0.99 n) - 1, cv uses the population stdev)")
    commands = [s.op_mention[2] for s in segments if s.op_mention is not None]
    env = filter_env(_ENV_ASSIGN_RE.findall(commands[0])) if commands else {}
    system = system_from_ranks(list(first_ranks.ranks.values()), world_size=world, backend=reader.backend,
                               backend_version=_backend_version(reader, first_ranks),
                               extra=_system_extra(reader, first_ranks), env=env)
    return ParsedRun(
        source="rccl-tests" if reader.backend == "rccl" else "nccl-tests",
        system=system,
        measurements=measurements,
        config={"format": "nccl-tests", "runs": configs},
        notes=notes,
        command_line=commands[0] if commands else "",
        status="check_failed" if failed else ("incomplete" if incomplete else "complete"),
    )


def _named_op(seg: _Segment) -> tuple[str, int, str] | None:
    if seg.op_started is not None:
        return (seg.op_started[0], seg.op_started[1], "'Collective test starting' line")
    if seg.op_concluded is not None:
        return (seg.op_concluded[0], seg.op_concluded[1], "'Collective test concluded' line")
    if seg.op_mention is not None:
        return (seg.op_mention[0], seg.op_mention[1], "binary named")
    return None


def _check_state(seg: _Segment) -> str:
    """``passed``, or ``unchecked`` when nccl-tests did not check (``-c 0``: #wrong N/A, no footer count)."""
    if seg.oob is None:
        return "unchecked"
    return "passed" if seg.settings.get("validation", 1) else "unchecked"


def _failed_check(seg: _Segment, spec: OpSpec, rows: list[Measurement]) -> str | None:
    """The note of a table whose results check failed (its footer, or a row's #wrong), else None."""
    wrong = [m for m in rows if m.nwrong]
    if not seg.oob_failed and not wrong:
        return None
    what = f"'Out of bounds values : {seg.oob} FAILED'" if seg.oob_failed else "no footer count"
    where = ""
    if wrong:
        shown = ", ".join(f"{m.size_bytes} B {'in' if m.in_place else 'out-of'}-place ({m.nwrong} wrong)"
                          for m in wrong[:4])
        where = f"; rows with wrong results: {shown}{' ...' if len(wrong) > 4 else ''}"
    elif (seg.layout or _MODERN).half[3] == "error":
        where = "; the pre-2.13 'error' column does not say which rows"
    return (f"results check failed: the {spec.name} table (line {seg.rows[0][0]}) reports {what}{where}; "
            f"the run is stored with status check_failed")


def _backend_version(reader: _Reader, seg: _Segment) -> str:
    if seg.library_code:
        return nccl_version_from_code(seg.library_code)
    return reader.nccl_version or ""


def _system_extra(reader: _Reader, seg: _Segment) -> dict[str, Any]:
    """Versions the log prints: nccl-tests/rccl-tests, headers, the library as printed, RCCL's banner."""
    library = "rccl" if reader.backend == "rccl" else "nccl"
    extra: dict[str, Any] = {"library": library.upper(), **reader.banner}  # the version header wins
    if seg.tests_version:
        extra[f"{library}_tests_version"] = seg.tests_version
    if seg.headers_code:
        extra[f"{library}_headers_version"] = nccl_version_from_code(seg.headers_code)
    if reader.library_version:
        extra["library_version"] = reader.library_version
    return extra


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
