"""Reading an nccl-tests (or rccl-tests) log: cutting it into runs and collecting their header and rows.

Read as NVIDIA/nccl-tests prints it (``src/util.cu``, ``src/common.cu``) and ROCm/rccl-tests likewise:

- ``# nccl-tests version V nccl-headers=H nccl-library=L`` (NCCL version codes; rccl-tests:
  ``rccl-tests version``, ``rccl-headers``, ``rccl-library``, or a ``rccl-tests: Version V`` line),
  ``# Collective test starting: all_reduce_perf``, ``# nThread T nGpus G minBytes ...
  iters: N agg iters: A validation: C graph: R``, one ``#  Rank R Group G Pid P on HOST
  device D [BUS] NAME`` line per rank (older: no ``Group``, no ``Pid``, ``[0x..]``);
- the column header (``size count type redop root time algbw busbw #wrong`` twice,
  ``i_min i_max i_p99 i_cv%`` after each half with ``-I``, ``cputime`` with ``-C``, a
  ``timestamp`` column with ``-T``; pre-2.13 logs lack ``root`` or ``redop`` and
  print a max-delta ``error`` column), which fixes the row layout;
- rows ``size count type redop root | time algbw busbw #wrong | ...`` (``#wrong`` is
  ``N/A`` without checking); the footer ``# Out of bounds values : N OK|FAILED`` / ``# Avg bus
  bandwidth``, then ``# Collective test concluded: all_reduce_perf``.

Around it, whatever else a job wrote: NCCL INFO/WARN lines (also glued to a row
that was being printed, as NCCL logs through the same stdout; ``NCCL version`` and
the COLL records that name each call are kept), RCCL's version banner (``RCCL version :``,
``HIP version  :``, ``ROCm version :``, ``Hostname     :``, ``Librccl path :``), MPI and
Slurm output, ``[1,0]<stdout>:``, ``[0]`` and ``0:`` rank prefixes, blank lines.

A row cut short (the file ends, or the next row or the footer comes, before its columns
are complete) is an error at its line.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from commlens.ingest.base import MAX_COUNT, MAX_RANKS, MAX_SIZE_BYTES, Source, quote
from commlens.ingest.nccltests_facts import RankInfo, op_from_program
from commlens.ingest.nccltests_op import NCCL_COLL_OPS
from commlens.ingest.table_checks import is_decimal
from commlens.ops import UnknownOpError, get_op

__all__ = ["BLANK", "Layout", "Segment", "LogReader", "MODERN_LAYOUT", "PER_ITER_COLUMNS", "table_number"]

# Prefixes launchers put before a process's line, nested in any order: Open MPI --tag-output ("[1,0]<stdout>:"),
# Slurm srun --label ("0: "), Ray and SkyPilot ("(head, rank=0, pid=3808) ", "(pid=123, ip=10.0.0.2) "),
# kubectl logs --prefix ("[pod/nccl-0/nccl] "); ANSI colour codes around them; indented as a markdown list indents a
# pasted block.
_LAUNCHER_PREFIX_RE = re.compile(
    r"^[ \t]*(?:\x1b\[[0-9;]*m)*(?:\[\d+,\d+\]<std(?:out|err)>:\s?|\s*\d+: |\([^()]*\bpid=\d+[^()]*\)\s?"
    r"|\[pod/[^\]\s]+\]\s)(?:\x1b\[[0-9;]*m)*"
)
# nccl-tests' own report of what stopped it: "host: Test NCCL failure common.cu:958 'unhandled cuda error / ...'",
# "Test CUDA failure common.cu:732 'CUDA-capable device(s) is/are busy or unavailable'".
_ABORT_RE = re.compile(r"Test (?:NCCL|CUDA|CURAND) failure\b.*|Test failure \S+:\d+")
# A wrapper's own start time: "Started: 2026-04-19T11:14:23+00:00".
_STARTED_RE = re.compile(r"^Started:\s*(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?)\s*$")
# A wrapper that names the op as an option ("run_nccl_tests.sh -t all_gather"): nccl-tests' own -t is a number.
_WRAPPER_OP_RE = re.compile(r"nccl\S*.*?\s(?:-t|--test|--collective|--op)[ =]([a-z][a-z_]*)\b", re.IGNORECASE)
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
_RCCL_BANNER_KEYS = {
    "HIP version": "hip_version",
    "ROCm version": "rocm_version",
    "Hostname": "hostname",
    "Librccl path": "library_path",
}
_RCCL_TESTS_RE = re.compile(r"^rccl-tests: Version (\S+)")
# NCCL's COLL records (NCCL_DEBUG_SUBSYS=COLL): "NCCL INFO AllReduce: opCount 0 sendbuff ...".
_NCCL_COLL_RE = re.compile(r"NCCL INFO (\w+): opCount\b")

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
# What a size or count that went wrong looks like: a sign or a digit first (-8, +8, 0x10, 65_536, 1e3, 8.0).
_ROW_NUMBER_RE = re.compile(r"^[-+]?\.?\d")
_ROW_INTEGERS = {"size": "byte count", "count": "element count"}

_LEFT_COLUMNS = ("size", "count", "type", "redop", "root")
_HALF_BASE = ("algbw", "busbw")
PER_ITER_COLUMNS = ("i_min", "i_max", "i_p99", "i_cv%")


@dataclass(frozen=True)
class Layout:
    """Which columns a row has, read off the column header."""

    left: tuple[str, ...]
    half: tuple[str, ...]  # time, algbw, busbw, #wrong|error [, i_min, i_max, i_p99, i_cv%]
    stamp_tokens: int  # 2 with the -T timestamp column ("YYYY-MM-DD HH:MM:SS")
    cputime: bool = False
    # Where each left column's name ends on the header line (after launcher prefixes), to place a blank cell.
    left_ends: tuple[int, ...] = ()
    # The halves a row prints, as in_place flags: both, or in place only (rccl-tests -O 0).
    placements: tuple[bool, ...] = (False, True)
    ntokens: int = field(init=False)  # tokens in a whole row

    def __post_init__(self) -> None:
        object.__setattr__(self, "ntokens", len(self.left) + len(self.placements) * len(self.half) + self.stamp_tokens)

    def half_tokens(self, tokens: list[str], in_place: bool) -> list[str]:
        """The columns of one placement's half of a row."""
        start = len(self.left) + self.placements.index(in_place) * len(self.half)
        return tokens[start : start + len(self.half)]

    @property
    def per_iter(self) -> bool:
        return len(self.half) == 8


MODERN_LAYOUT = Layout(_LEFT_COLUMNS, ("time", "algbw", "busbw", "#wrong"), 0)
MODERN_PER_ITER_LAYOUT = Layout(_LEFT_COLUMNS, ("time", "algbw", "busbw", "#wrong", *PER_ITER_COLUMNS), 0)


def _layout_from_header(tokens: list[str], ends: tuple[int, ...] = ()) -> Layout | None:
    """The layout named by a column header's tokens (without the ``#``), or None if it is not one;
    ``ends``: where the left columns' names end on the line."""
    times = [i for i, t in enumerate(tokens) if t in ("time", "cputime")]
    if not times or len(times) > 2:
        return None
    left = tuple(tokens[: times[0]])
    if len(times) == 2:
        half = tuple(tokens[times[0] : times[1]])
        placements: tuple[bool, ...] = (False, True)
        if tuple(tokens[times[1] : times[1] + len(half)]) != half:
            return None
    else:  # rccl-tests -O 0: the in-place half only
        half = tuple(t for t in tokens[times[0] :] if t != "timestamp")
        placements = (True,)
    rest = tokens[times[-1] + len(half) :]
    if (
        left[:3] != ("size", "count", "type")
        or not set(left) <= set(_LEFT_COLUMNS)
        or half[1:3] != _HALF_BASE
        or len(half) < 4
        or half[3] not in ("#wrong", "error")
        or half[4:] not in ((), PER_ITER_COLUMNS)
        or rest not in ([], ["timestamp"])
    ):
        return None
    return Layout(left, half, 2 if rest else 0, cputime=half[0] == "cputime", placements=placements, left_ends=ends)


@dataclass
class Segment:
    """One nccl-tests invocation inside the log."""

    first_line: int
    seen: set[str] = field(default_factory=set)
    op_started: tuple[str, int] | None = None
    op_concluded: tuple[str, int] | None = None
    op_mention: tuple[str, int, str] | None = None  # op stem, line, the line's text
    tests_version: str | None = None
    headers_code: int | None = None
    library_code: int | None = None
    settings: dict[str, int] = field(default_factory=dict)  # nThread line's figures; blocking and per_iter_skip
    ranks: dict[int, RankInfo] = field(default_factory=dict)
    rank_line: int = 0
    layout: Layout | None = None
    rows: list[tuple[int, str]] = field(default_factory=list)  # (line, the row's tokens joined by spaces)
    footer: bool = False
    oob: int | None = None
    avg_busbw: tuple[float, int] | None = None  # GB/s, line
    errors: list[str] = field(default_factory=list)
    oob_failed: bool = False  # the footer says FAILED
    nccl_colls: dict[str, int] = field(default_factory=dict)  # NCCL COLL record op name -> first line
    started: tuple[str, int] | None = None  # a wrapper's "Started:" time before the run, and its line
    aborts: list[tuple[int, str]] = field(default_factory=list)  # nccl-tests' failure lines (line, text)

    def iter_rows(self) -> Iterator[tuple[int, list[str]]]:
        """Each row's line and tokens; a row is kept as one string (a tenth of its tokens' memory)."""
        for line, text in self.rows:
            yield line, text.split()


def table_number(source: Source, line: int, column: str, token: str) -> float:
    try:
        value = float(token)
    except ValueError:
        raise source.error(line, f"bad {column} value {quote(token, 60)} in a table row") from None
    if not (value >= 0.0) or math.isinf(value):
        raise source.error(line, f"bad {column} value {quote(token, 60)} in a table row: not a finite number >= 0")
    return value


BLANK = "~"  # a cell the row prints blank (pre-2.13 alltoall's redop), kept in place of its token


def _fill_blank_cells(layout: Layout, tokens: list[str], line: str) -> list[str]:
    """``tokens`` with :data:`BLANK` where the row leaves a redop or root cell empty; unchanged if it is not so.

    nccl-tests right-aligns every cell under its header name. A row short of the header's columns by
    as many cells as its redop and root can be blank, whose tokens after the type all read as
    numbers (the halves complete), is such a row: the cells placed by where their text ends, against
    where the header's names end (by kind when the header's positions are unknown: a name is a redop,
    a number a root).
    """
    optional = [i for i, name in enumerate(layout.left) if name in ("redop", "root")]
    missing = layout.ntokens - len(tokens)
    if not 0 < missing <= len(optional) or len(tokens) < 3:
        return tokens
    given = len(layout.left) - missing  # left cells printed
    if not all(_is_row_fragment([t]) for t in tokens[given:]):
        return tokens
    printed = tokens[3:given]  # the optional cells that are there
    if len(layout.left_ends) == len(layout.left) and line:
        ends = [m.end() for m in re.finditer(r"\S+", line)][3:given]
        left_ends = layout.left_ends
        placed = [min(optional, key=lambda i: abs(left_ends[i] - end)) for end in ends]  # noqa: B023
    else:
        placed = [i for t in printed for i in optional if (layout.left[i] == "redop") == t[:1].isalpha()]
    if len(set(placed)) != len(placed) or any(
        (layout.left[i] == "redop") != t[:1].isalpha() for i, t in zip(placed, printed)
    ):
        return tokens
    cells = {i: t for i, t in zip(placed, printed)}
    left = tokens[:3] + [cells.get(i, BLANK) for i in range(3, len(layout.left))]
    return left + tokens[given:]


def _is_op_name(name: str) -> bool:
    try:
        get_op(name)
    except UnknownOpError:
        return False
    return True


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


class LogReader:
    """Walks the lines once, cutting the log into segments and collecting their rows."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.segments: list[Segment] = []
        self.seg: Segment | None = None
        self.mention: tuple[str, int, str] | None = None
        self.pending: tuple[int, list[str]] | None = None  # a row waiting for the rest of its columns
        self.nccl_version: str | None = None
        self.library_version: str | None = None  # as printed: "2.12.7+cuda11.4", "2.22.3-HEAD:ab12cd3"
        self.backend = "nccl"
        self.write_marks = False
        self.banner: dict[str, str] = {}  # RCCL's version banner, rccl-tests' own version
        self.colls: dict[str, int] = {}  # COLL records before the segment they belong to
        self.started: tuple[str, int] | None = None  # a "Started:" line before the segment it belongs to
        self.aborts: list[tuple[int, str]] = []  # failure lines wherever they are (a run may have no segment)

    # -- segments --------------------------------------------------------------------------

    def _segment(self, kind: str, line: int) -> Segment:
        """The segment a header line of ``kind`` belongs to: the current one, or a new run."""
        seg = self.seg
        repeats = kind == "rank" and seg is not None and seg.layout is None
        if (
            seg is None
            or seg.rows
            or seg.footer
            or (kind in seg.seen and not repeats)
            or (kind == "rank" and seg.layout is not None)
        ):
            seg = Segment(first_line=line)
            if self.mention is not None:
                seg.op_mention, self.mention = self.mention, None
            if self.colls:
                seg.nccl_colls, self.colls = self.colls, {}
            if self.started is not None:
                seg.started, self.started = self.started, None
            self.segments.append(seg)
            self.seg = seg
        seg.seen.add(kind)
        return seg

    # -- lines -----------------------------------------------------------------------------

    def read(self) -> None:
        for lineno, raw in enumerate(self.source.iter_lines(), 1):
            self._line(lineno, raw)
        if self.pending is not None:
            self._cut_short("the file ends")

    def _line(self, lineno: int, line: str) -> None:
        if line[:1] in ("[", " ", "(", "\x1b") or line[:1].isdigit():
            while True:  # a launcher's prefix before another's: "(head, rank=0, pid=1) [1,0]<stdout>:"
                stripped = _LAUNCHER_PREFIX_RE.sub("", line, count=1)
                if stripped == line:
                    break
                line = stripped
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
                if coll and coll.group(1) in NCCL_COLL_OPS:  # only names that say something about the op
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
            self._header(lineno, text, line.rstrip())
            return
        if "failure" in text:
            abort = _ABORT_RE.search(text)
            if abort:
                self.aborts.append((lineno, text[:300]))
                if self.seg is not None and not self.seg.footer:
                    self.seg.aborts.append((lineno, text[:300]))
                return
        if text[0] == "S":
            started = _STARTED_RE.match(text)
            if started:
                self.started = (started.group(1), lineno)
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
        if len(tokens) >= 3 and is_decimal(tokens[0]) and is_decimal(tokens[1]) and tokens[2][0].isalpha():
            if self.pending is not None:
                self._cut_short(f"the next row (line {lineno}) starts")
            self._row(lineno, tokens, line)
        elif self.pending is not None and _is_row_fragment(tokens):
            start, have = self.pending
            have = have + tokens
            self.pending = None
            self._row(start, have)
        elif (
            self._in_table()
            and len(tokens) >= 3
            and tokens[2][0].isalpha()
            and _ROW_NUMBER_RE.match(tokens[0])
            and _ROW_NUMBER_RE.match(tokens[1])
        ):
            self._malformed_row(lineno, tokens)
        elif "_perf" in text or "-t " in text or "--" in text:
            stem = op_from_program(text) if "_perf" in text else None
            if stem is None:
                wrapper = _WRAPPER_OP_RE.search(text)
                stem = wrapper.group(1) if wrapper and _is_op_name(wrapper.group(1)) else None
            if stem is not None:
                mention = (stem, lineno, text)
                seg = self.seg
                if (
                    seg is not None
                    and not seg.rows
                    and not seg.footer
                    and seg.layout is None
                    and seg.op_mention is None
                ):
                    seg.op_mention = mention
                else:
                    self.mention = mention

    def _in_table(self) -> bool:
        """Between a table's column header (or first row) and its footer."""
        seg = self.seg
        return seg is not None and not seg.footer and (seg.layout is not None or bool(seg.rows))

    def _malformed_row(self, lineno: int, tokens: list[str]) -> None:
        """A line inside a table that starts like a row but whose size or count is no decimal integer."""
        for token, what in ((tokens[0], "size"), (tokens[1], "count")):
            if not is_decimal(token):
                raise self.source.error(
                    lineno,
                    (
                        f"{what} {quote(token, 40)} is not a decimal {_ROW_INTEGERS[what]} (nccl-tests prints plain "
                        f"digits) in a table row: {quote(' '.join(tokens))}"
                    ),
                )

    def _cut_short(self, why: str) -> None:
        assert self.pending is not None
        start, have = self.pending
        layout = self.seg.layout if self.seg and self.seg.layout else MODERN_LAYOUT
        raise self.source.error(
            start,
            (
                f"table row cut short: {len(have)} of {layout.ntokens} columns before {why} "
                f"(a truncated log?): {quote(' '.join(have))}"
            ),
        )

    def _row(self, lineno: int, tokens: list[str], line: str = "") -> None:
        seg = self.seg
        if seg is None or seg.footer:
            seg = self._segment("row", lineno)
        layout = seg.layout
        if layout is None:
            layout = MODERN_PER_ITER_LAYOUT if len(tokens) >= MODERN_PER_ITER_LAYOUT.ntokens else MODERN_LAYOUT
            seg.layout = layout
        if len(tokens) < layout.ntokens and line:
            tokens = _fill_blank_cells(layout, tokens, line)
        if len(tokens) < layout.ntokens:
            self.pending = (lineno, tokens)
            return
        if len(tokens) > layout.ntokens:
            raise self.source.error(
                lineno,
                (
                    f"table row has {len(tokens)} columns, the table header names {layout.ntokens}: "
                    f"{quote(' '.join(tokens))}"
                ),
            )
        seg.rows.append((lineno, " ".join(tokens)))

    def _header(self, lineno: int, text: str, raw: str = "") -> None:
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
                seg.headers_code = self.source.int_at(lineno, "nccl-headers code", m.group(3), MAX_COUNT)
                seg.library_code = self.source.int_at(lineno, "nccl-library code", m.group(4), MAX_COUNT)
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
                    seg.settings[key] = self.source.int_at(lineno, key, m.group(1), MAX_COUNT)
            m = _STEP_RE.search(body)
            if m:
                seg.settings["step_factor" if m.group(2) == "factor" else "step_bytes"] = self.source.int_at(
                    lineno, "step", m.group(1), MAX_SIZE_BYTES
                )
        elif body.startswith("Rank"):
            m = _RANK_RE.match(text)
            if not m:
                raise self.source.error(lineno, f"unreadable rank line: {quote(text)}")
            seg = self._segment("rank", lineno)
            rank = self.source.int_at(lineno, "rank", m.group(1), MAX_RANKS)
            if rank in seg.ranks:
                raise self.source.error(
                    lineno,
                    (
                        f"rank {rank} is listed twice: several independent nccl-tests processes wrote to this log "
                        f"(an MPI launch of binaries built without MPI=1?)"
                    ),
                )
            seg.rank_line = seg.rank_line or lineno
            pid = self.source.int_at(lineno, "pid", m.group(2), 2**63) if m.group(2) else None
            seg.ranks[rank] = RankInfo(
                rank=rank,
                host=m.group(3),
                pid=pid,
                device=self.source.int_at(lineno, "device", m.group(4), MAX_RANKS),
                bus_id=m.group(5),
                device_name=m.group(6),
            )
        elif body.startswith("Blocking Enabled"):
            self._segment("blocking", lineno).settings["blocking"] = True
        elif body.startswith("Per-Iteration Report"):
            seg = self._segment("per_iter", lineno)
            m = _SKIP_RE.search(body)
            seg.settings["per_iter_skip"] = (
                self.source.int_at(lineno, "skipped iterations", m.group(1), MAX_COUNT) if m else 0
            )
        elif body.startswith("Out of bounds values") or body.startswith("Avg bus bandwidth"):
            if self.seg is None:
                return
            seg = self.seg
            seg.footer = True
            m = _OOB_RE.search(body)
            if m:
                seg.oob = self.source.int_at(lineno, "out of bounds values", m.group(1), MAX_COUNT)
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
            tokens = body.split()
            marks = [m for m in re.finditer(r"\S+", raw)]
            ends = tuple(m.end() for m in marks[1 : 1 + len(tokens)]) if marks and marks[0].group() == "#" else ()
            layout = _layout_from_header(tokens, ends)
            if layout is not None:
                self._segment("table", lineno).layout = layout
