"""nccl-tests text output into a run: every table of a log (``nccltests_reader``), all at one world size.

Decisions: a table that stops after complete rows, without its footer, is kept and the run
marked ``incomplete``; a failed results check (``# Out of bounds values : N FAILED``, a row's
``#wrong``) marks it ``check_failed``. The op comes from ``Collective test starting``/``concluded``,
else from the last ``*_perf`` binary named before the run (a command line, a
``==== all_gather_perf ====`` banner), else from the caller's ``op``, else from the table's own
evidence (``nccltests_op``); where that fits several ops or none it is an error naming them.
Older conventions (sendrecv's printed reduction, all_gather/reduce_scatter algBW before 2020)
are stored with today's definitions and a note.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field, replace

from commlens.ingest.base import (
    MAX_COUNT,
    MAX_RANKS,
    MAX_SIZE_BYTES,
    GivenFacts,
    IngestError,
    InputFormat,
    ParsedRun,
    PatternSniff,
    Source,
    check_limit,
    quote,
)
from commlens.ingest.nccltests_facts import (
    commlens_dtype,
    filter_env,
    nccl_version_from_code,
    op_from_program,
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
from commlens.ingest.nccltests_reader import (
    BLANK,
    MODERN_LAYOUT,
    PER_ITER_COLUMNS,
    Layout,
    LogReader,
    Segment,
    table_number,
)
from commlens.ingest.table_checks import (
    BusbwCheck,
    check_size,
    consistent_time,
    resolve_op,
    row_measurement,
    zero_time_note,
)
from commlens.ops import OpSpec, UnknownOpError
from commlens.results.jsonvalue import JsonObject
from commlens.results.nccltests_json import from_nccl_tests
from commlens.results.records import DTYPE_SIZES, Measurement, SystemInfo
from commlens.results.stats import TimeStats

__all__ = ["FORMAT", "parse_nccl_tests_text"]

_ENV_ASSIGN_RE = re.compile(r"\b([A-Z][A-Z0-9_]*)=((?:\\.|\S)+)")
_SHELL_ESCAPE_RE = re.compile(r"\\(.)")
# What tells an nccl-tests log: its settings line, rank lines, footer, table header or the word out-of-place.
# Loose (any log quoting nccl-tests matches), so formats with markers of their own are sniffed first.
_SNIFF_RE = re.compile(
    r"#\s*nThread \d|#\s+Rank\s+\d+|#\s*Avg bus bandwidth|^\W*#?\s*size\s+count\s+type\b|out-of-place", re.MULTILINE
)


# -- from segments to records ------------------------------------------------------------------


def _segment_op(source: Source, seg: Segment, default_op: str | None, world: int) -> tuple[OpSpec, str]:
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


def _evidence(source: Source, seg: Segment, world: int) -> TableEvidence:
    """What the segment's rows say about their op (the first half each row prints)."""
    layout = seg.layout or MODERN_LAYOUT
    left = {name: i for i, name in enumerate(layout.left)}
    i_redop, i_root = left.get("redop"), left.get("root")
    base = len(layout.left)
    rows: list[RowEvidence] = []
    for lineno, tokens in seg.iter_rows():
        ours = commlens_dtype(tokens[2])
        if ours is None:
            raise source.error(lineno, unknown_dtype_message(tokens[2]))
        rows.append(
            RowEvidence(
                line=lineno,
                size_bytes=_size(source, lineno, tokens[0]),
                count=_count(source, lineno, tokens[1]),
                elem_size=DTYPE_SIZES[ours],
                redop=("" if tokens[i_redop] == BLANK else tokens[i_redop]) if i_redop is not None else None,
                root=_root(source, lineno, tokens[i_root]) if i_root is not None and tokens[i_root] != BLANK else None,
                algbw_gbps=table_number(source, lineno, "algbw", tokens[base + 1]),
                busbw_gbps=table_number(source, lineno, "busbw", tokens[base + 2]),
            )
        )
    return TableEvidence(
        world_size=world,
        rows=rows,
        pre_2_13=layout.half[3] == "error",
        nccl_colls=dict(seg.nccl_colls),
        columns=layout.left,
    )


def _root(source: Source, line: int, token: str) -> int:
    return source.int_at(line, "root", token, MAX_RANKS, low=-1)


def _size(source: Source, line: int, token: str) -> int:
    return source.int_at(line, "size", token, MAX_SIZE_BYTES)


def _count(source: Source, line: int, token: str) -> int:
    return source.int_at(line, "count", token, MAX_COUNT)


def _resolve(source: Source, line: int, name: str) -> OpSpec:
    try:
        return resolve_op(name)
    except UnknownOpError as e:
        raise source.error(line, str(e)) from None


def _world_size(source: Source, seg: Segment, given: GivenFacts | None = None) -> int:
    if not seg.ranks:
        line = seg.rows[0][0] if seg.rows else seg.first_line
        if given is not None and given.ranks is not None:
            return given.ranks
        raise source.error(
            line,
            "no '#  Rank N ... on HOST device D' lines before this table: the world size "
            "is unknown (ingest the whole log, header included, or give it: commlens ingest --ranks N)",
        )
    world = max(seg.ranks) + 1
    if given is not None and given.ranks is not None and given.ranks != world:
        raise source.error(
            seg.rank_line, f"the log lists {world} ranks, --ranks gives {given.ranks}"
        )  # ranks are < MAX_RANKS (the reader checks), so range(world) is bounded
    if len(seg.ranks) != world:
        missing = sorted(set(range(world)) - set(seg.ranks))
        shown = ", ".join(map(str, missing[:8])) + (f" ... ({len(missing)} in all)" if len(missing) > 8 else "")
        raise source.error(seg.rank_line, f"rank lines do not list ranks [{shown}] of {world}")
    return world


@dataclass
class _Table:
    """A segment's rows as records, with what was normalised on the way (notes, config)."""

    measurements: list[Measurement]
    notes: list[str]
    config: JsonObject
    late_notes: list[str] = field(default_factory=list)  # after the run's notes on the table's completeness

    @property
    def dropped_rows(self) -> bool:
        """Halves printed with time 0 were left out: the run is incomplete."""
        return "zero_time_lines" in self.config


def _measurements(source: Source, seg: Segment, spec: OpSpec, world: int, check: BusbwCheck) -> _Table:
    layout = seg.layout or MODERN_LAYOUT
    left = {name: i for i, name in enumerate(layout.left)}
    factor = spec.busbw_factor(world)
    keep_printed = spec.name in OLD_ALGBW_OPS and world > 1
    # A pre-2.13 all_gather/reduce_scatter table may print algBW as nccl-tests defined it before 2020 (= busBW):
    # its times are not refined against that algBW.
    has_wrong_count = layout.half[3] == "#wrong"
    old_algbw = keep_printed and not has_wrong_count and _prints_old_algbw(source, seg, layout, factor)
    rows = _Rows(
        source,
        spec,
        world,
        check,
        layout,
        iters=int(seg.settings.get("iters", 0)),
        factor=factor,
        keep_printed=keep_printed,
        old_algbw=old_algbw,
        i_redop=left.get("redop"),
        i_root=left.get("root"),
    )
    for lineno, tokens in seg.iter_rows():
        rows.read(lineno, tokens)
    return rows.table(f"{spec.name} (line {seg.rows[0][0]})")


@dataclass
class _Rows:
    """One table's rows read into measurements, with what its notes need (the rows left out, refined, ...)."""

    source: Source
    spec: OpSpec
    world: int
    check: BusbwCheck
    layout: Layout
    iters: int
    factor: float
    keep_printed: bool  # keep each half's printed algBW and busBW, for the old algBW check
    old_algbw: bool
    i_redop: int | None
    i_root: int | None
    out: list[Measurement] = field(default_factory=list)
    dtypes: dict[str, tuple[str, int]] = field(default_factory=dict)
    printed_redops: dict[str, int] = field(default_factory=dict)  # a reduction printed for an op that does not reduce
    printed: list[RowEvidence] = field(default_factory=list)
    zero_times: list[tuple[int, bool]] = field(default_factory=list)  # (line, in_place) of each half with time 0
    blank_redop: bool = False  # the table has a redop column its rows leave blank
    refined: list[tuple[int, bool, str, float]] = field(default_factory=list)  # (line, in_place, printed, kept µs)

    def read(self, lineno: int, tokens: list[str]) -> None:
        """One row: its key columns checked, then each half it prints."""
        source, spec = self.source, self.spec
        size = _size(source, lineno, tokens[0])
        count = _count(source, lineno, tokens[1])
        type_name = tokens[2]
        dt = self.dtypes.get(type_name)
        if dt is None:
            ours = commlens_dtype(type_name)
            if ours is None:
                raise source.error(lineno, unknown_dtype_message(type_name))
            dt = self.dtypes[type_name] = (ours, DTYPE_SIZES[ours])
        redop_token = tokens[self.i_redop] if self.i_redop is not None else BLANK
        if redop_token == BLANK:  # no column, or a blank cell: nccl-tests' default for an op that reduces
            self.blank_redop = self.blank_redop or self.i_redop is not None
            redop_token = "sum" if spec.reduces else "none"
        root_token = tokens[self.i_root] if self.i_root is not None else BLANK
        redop, root = from_nccl_tests(redop_token, -1 if root_token == BLANK else _root(source, lineno, root_token))
        if redop is not None and not spec.reduces:
            self.printed_redops.setdefault(redop, lineno)
            redop = None
        problem = check_size(spec, size, count, dt[1], self.world)
        if problem:
            raise source.error(lineno, problem)
        for in_place in self.layout.placements:
            h = self.layout.half_tokens(tokens, in_place)
            self._half(lineno, h, in_place, size, count, dt, redop, root)

    def _half(
        self,
        lineno: int,
        h: list[str],
        in_place: bool,
        size: int,
        count: int,
        dt: tuple[str, int],
        redop: str | None,
        root: int | None,
    ) -> None:
        """One half of a row (out-of-place or in-place) as a measurement, or noted as printed with time 0."""
        source, spec, layout = self.source, self.spec, self.layout
        time_s = table_number(source, lineno, layout.half[0], h[0]) * 1e-6
        if time_s == 0.0:  # no bandwidth can come of it: dropped, warned, noted, the run incomplete
            self.zero_times.append((lineno, in_place))
            return
        busbw = table_number(source, lineno, "busbw", h[2])
        algbw = table_number(source, lineno, "algbw", h[1])
        if not self.old_algbw and spec.name != "barrier":
            refined_us = consistent_time(size, h[0], algbw, busbw, self.factor)
            if refined_us is not None:
                self.refined.append((lineno, in_place, h[0], refined_us))
                time_s = refined_us * 1e-6
        if self.keep_printed:
            self.printed.append(RowEvidence(lineno, size, count, dt[1], None, None, algbw, busbw))
        nwrong = None
        if layout.half[3] == "#wrong" and h[3] != "N/A":
            nwrong = int(table_number(source, lineno, "#wrong", h[3]))
            if nwrong >= MAX_COUNT:
                raise source.error(lineno, check_limit("#wrong", nwrong, MAX_COUNT) or "")
        if layout.per_iter:
            i_min, i_max, i_p99, i_cv = (table_number(source, lineno, n, v) for n, v in zip(PER_ITER_COLUMNS, h[4:8]))
            reported = TimeStats(
                mean_s=time_s,
                p50_s=None,
                p95_s=None,
                p99_s=i_p99 * 1e-6,
                min_s=i_min * 1e-6,
                max_s=i_max * 1e-6,
                stdev_s=None,
                cv=i_cv / 100.0,
                n=self.iters,
            )
        else:
            reported = TimeStats.of_mean(time_s, self.iters)
        if spec.name != "barrier":
            self.check.add(lineno, busbw, size, time_s, self.factor)
        self.out.append(
            row_measurement(
                spec,
                self.world,
                lambda message: source.error(lineno, message),
                dtype=dt[0],
                size=size,
                count=count,
                in_place=in_place,
                redop=redop,
                root=root,
                reported=reported,
                nwrong=nwrong,
            )
        )

    def table(self, where: str) -> _Table:
        """The measurements read, with the notes and config entries on what was normalised; ``where`` names
        the table in them."""
        source, spec, world = self.source, self.spec, self.world
        zero_times, printed_redops, refined, printed = self.zero_times, self.printed_redops, self.refined, self.printed
        late_notes: list[str] = []
        notes: list[str] = []
        config: JsonObject = {}
        if zero_times:
            notes.append(
                zero_time_note(
                    source.warn,
                    zero_times[0][0],
                    where,
                    [f"line {n} {'in' if p else 'out-of'}-place" for n, p in zero_times],
                )
            )
            config["zero_time_lines"] = sorted({line for line, _ in zero_times})[:64]
        if printed_redops:
            shown = ", ".join(f"'{r}'" for r in printed_redops)
            notes.append(
                f"{where}: the table prints redop {shown} (nccl-tests gives {spec.name} its -o reduction, "
                f"sum by default, though it does not reduce): stored as 'none'"
            )
            config["printed_redop"] = list(printed_redops)[:8]
        if spec.reduces and self.i_redop is None:
            notes.append(f"{where}: the table has no redop column: stored as 'sum', nccl-tests' default")
        if refined:
            worst = max(abs(float(p) - t) / float(p) for _, _, p, t in refined)
            late_notes.append(
                f"{where}: {len(refined)} time(s) printed too coarsely to give back the printed algBW and busBW "
                f"(first: line {refined[0][0]} {'in' if refined[0][1] else 'out-of'}-place, {refined[0][2]} us): stored "
                f"as the time within the printed time's rounding that gives the printed bandwidths (up to "
                f"{worst:.2%} from the printed time); the printed times are in the run's config (printed_times_us)"
            )
            config["printed_times_us"] = [
                {"line": n, "in_place": p, "printed": float(tok), "stored": round(t, 6)}
                for n, p, tok, t in refined[:64]
            ]
        if self.blank_redop:
            notes.append(
                f"{where}: the table's redop column is printed blank (alltoall_perf before nccl-tests 2.13): "
                f"stored as {'sum' if spec.reduces else 'none'}"
            )
        if spec.name in OLD_ALGBW_OPS and world > 1:
            if ratio_fits(printed, 1.0) and ratio_fits(printed, self.factor) is False:
                notes.append(
                    f"{where}: the table prints algBW as nccl-tests did before 2020-06-19 (commit ec1b5e2): "
                    f"count x elem x (ranks-1) / time, equal to busBW; stored with today's definition, "
                    f"size / time ({world / (world - 1):.4g} x the printed figure); the printed algBW is kept "
                    f"in the run's config (printed_algbw_gbps)"
                )
                config["printed_algbw_gbps"] = [r.algbw_gbps for r in printed]
                config["printed_algbw_definition"] = "count x elem x (ranks-1) / time (nccl-tests before ec1b5e2, 2020)"
        return _Table(self.out, notes, config, late_notes)


def _prints_old_algbw(source: Source, seg: Segment, layout: Layout, factor: float) -> bool:
    """Whether the table's printed algBW equals its busBW where today's definition would not."""
    rows = []
    for lineno, tokens in seg.iter_rows():
        h = layout.half_tokens(tokens, layout.placements[0])
        algbw = table_number(source, lineno, "algbw", h[1])
        busbw = table_number(source, lineno, "busbw", h[2])
        rows.append(RowEvidence(lineno, 0, 0, 1, None, None, algbw, busbw))
    return bool(ratio_fits(rows, 1.0)) and ratio_fits(rows, factor) is False


def _segment_config(seg: Segment, spec: OpSpec, how: str) -> JsonObject:
    layout = seg.layout or MODERN_LAYOUT
    cfg: JsonObject = {"op": spec.name, "op_from": how, "line": seg.first_line, **seg.settings}
    cfg.update(per_iter_timing=layout.per_iter, cputime=layout.cputime, rows=len(seg.rows), complete=seg.footer)
    if layout.placements == (True,):
        cfg["in_place_only"] = True  # rccl-tests -O 0
    if seg.tests_version:
        cfg["nccl_tests_version"] = seg.tests_version
    if seg.op_mention is not None:
        cfg["command"] = seg.op_mention[2]
    if seg.oob is not None:
        cfg["out_of_bounds"] = seg.oob
    if seg.avg_busbw is not None:
        cfg["avg_busbw_gbps"] = seg.avg_busbw[0]
    return cfg


def parse_nccl_tests_text(source: Source, *, op: str | None = None, given: GivenFacts | None = None) -> ParsedRun:
    """The runs of an nccl-tests log: every table in it, one run per invocation setting.

    Tables run with the same settings (the command line's environment) and world size make one run;
    where a later table's settings differ, it starts another run (``ParsedRun.split`` holds them all).
    An error in one table of a log with several names that table (its op where the log says it, and
    the line its rows start at). A log with no result rows whose nccl-tests reported a failure is
    refused with that failure's line. ``given`` supplies what a fragment lacks (world size, hosts, GPU).
    """
    reader = LogReader(source)
    try:
        reader.read()
    except IngestError as e:
        raise _in_table(source, reader.segments, e) from None
    segments = [s for s in reader.segments if s.rows]
    if not segments:
        if reader.aborts:
            line, text = reader.aborts[0]
            more = f" ({len(reader.aborts)} failure lines in all)" if len(reader.aborts) > 1 else ""
            raise source.error(
                line, f"the nccl-tests run aborted before printing any result row: {quote(text, 200)}{more}"
            )
        line = next((s.first_line for s in reader.segments), 1)
        raise source.error(line, "no nccl-tests result rows found")
    groups = _runs_of(segments)
    runs = [_run(source, reader, group, op, given, notes_of_empty=(i == 0)) for i, group in enumerate(groups)]
    if len(runs) == 1:
        return runs[0]
    for i, (run, group) in enumerate(zip(runs, groups)):
        differ = _env_differences(groups, i)
        run.notes.insert(
            0,
            f"run {i + 1} of {len(runs)} in this log (tables from line {group[0].first_line}): nccl-tests was run "
            f"again with other settings ({differ}), so each setting is a run of its own",
        )
    source.warn(
        groups[1][0].first_line,
        f"the log holds {len(runs)} nccl-tests runs with different settings: stored as {len(runs)} runs",
    )
    first = runs[0]
    first.split = runs
    return first


def _command_env(seg: Segment) -> dict[str, str] | None:
    """The communication environment the segment's command line sets (shell escapes undone); None: no command."""
    if seg.op_mention is None:
        return None
    return filter_env((k, _unescape(v)) for k, v in _ENV_ASSIGN_RE.findall(seg.op_mention[2]))


def _unescape(value: str) -> str:
    """A shell word as the program sees it: ``mlx5_2\\,mlx5_3`` -> ``mlx5_2,mlx5_3``, quotes removed."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1]
    return _SHELL_ESCAPE_RE.sub(r"\1", value)


def _runs_of(segments: list[Segment]) -> list[list[Segment]]:
    """The segments grouped into runs: a table whose command sets another environment starts a run."""
    groups: list[list[Segment]] = []
    env: dict[str, str] | None = None
    for seg in segments:
        mine = _command_env(seg)
        if groups and (mine is None or env is None or mine == env):
            groups[-1].append(seg)
            env = env if env is not None else mine
            continue
        groups.append([seg])
        env = mine
    return groups


def _env_differences(groups: list[list[Segment]], index: int) -> str:
    """The variables whose value in run ``index`` differs from another run's: ``NCCL_IB_OOO_RQ=1``."""
    envs = [next((e for e in map(_command_env, g) if e is not None), {}) for g in groups]
    mine = envs[index]
    keys = sorted({k for e in envs for k in e if any(o.get(k) != e.get(k) for o in envs)})
    shown = [f"{k}={mine.get(k, '(unset)')}" for k in keys[:8]]
    return ", ".join(shown) + (" ..." if len(keys) > 8 else "") if shown else "its command line"


def _in_table(source: Source, segments: list[Segment], error: IngestError) -> IngestError:
    """``error``, naming the table it is in when the log has several tables."""
    tables = [s for s in segments if s.rows or s.layout is not None]
    if len(tables) < 2 or error.line <= 0:
        return error
    seg = next((s for s in reversed(tables) if s.first_line <= error.line), tables[0])
    start = seg.rows[0][0] if seg.rows else seg.first_line
    name = _named_op(seg)
    what = f"the {op_from_program(name[0]) or name[0]} table" if name else "the table (its op not named)"
    return source.error(
        error.line,
        f"{error.message} (in {what} starting at line {start}, table {tables.index(seg) + 1} of {len(tables)} read)",
    )


def _run(
    source: Source,
    reader: LogReader,
    segments: list[Segment],
    op: str | None,
    given: GivenFacts | None,
    *,
    notes_of_empty: bool = True,
) -> ParsedRun:
    notes: list[str] = []
    measurements: list[Measurement] = []
    configs: list[JsonObject] = []
    world: int | None = None
    first_ranks: Segment | None = None
    incomplete = failed = False
    for seg in segments:
        seg_world = _world_size(source, seg, given)
        try:
            spec, how = _segment_op(source, seg, op, seg_world)
        except IngestError as e:  # a table the log names is named in the message already
            raise (e if _named_op(seg) else _in_table(source, segments, e)) from None
        if world is None:
            world, first_ranks = seg_world, seg
        elif seg_world != world:
            raise source.error(
                seg.rank_line,
                (
                    f"this run has {seg_world} ranks, an earlier one in the file {world}: a run has one world size "
                    f"(split the log)"
                ),
            )
        elif first_ranks is not None and [r.host for r in seg.ranks.values()] != [
            r.host for r in first_ranks.ranks.values()
        ]:
            notes.append(
                f"the {spec.name} run at line {seg.first_line} ran on other hosts than the first; "
                f"the run's system lists the first run's"
            )
        table, seg_notes, cfg, failed_check = _segment_run(source, segments, seg, spec, how, seg_world)
        measurements.extend(table.measurements)
        notes.extend(seg_notes)
        incomplete = incomplete or table.dropped_rows or not seg.footer
        failed = failed or failed_check
        configs.append(cfg)
    if notes_of_empty:
        for seg in reader.segments:
            if not seg.rows and (seg.ranks or seg.layout is not None):
                notes.append(f"the nccl-tests run starting at line {seg.first_line} printed no result rows")
    assert world is not None and first_ranks is not None
    if not measurements:
        raise source.error(segments[0].rows[0][0], "every row of the log has time 0: no measurement to store")
    if any(c.get("cputime") for c in configs):
        notes.append("times marked 'cputime' are CPU wall times (nccl-tests -C), not CUDA event times")
    if any(c.get("per_iter_timing") for c in configs):
        notes.append(
            "min/max/p99/cv come from nccl-tests -I (per-iteration CUDA event times, max over processes; "
            "p99 is the sorted sample at index ceil(0.99 n) - 1, cv uses the population stdev)"
        )
    commands = [s.op_mention[2] for s in segments if s.op_mention is not None]
    system = _run_system(source, reader, segments, first_ranks, world, given, notes)
    started = next((s.started for s in segments if s.started is not None), None)
    return ParsedRun(
        source="rccl-tests" if reader.backend == "rccl" else "nccl-tests",
        system=system,
        measurements=measurements,
        config={"format": "nccl-tests", "runs": configs},
        notes=notes,
        command_line=commands[0] if commands else "",
        status="check_failed" if failed else ("incomplete" if incomplete else "complete"),
        started_at=_iso_utc(started[0]) if started else None,
        started_at_note=f"started_at is the wrapper's 'Started:' line (line {started[1]})" if started else None,
    )


def _segment_run(
    source: Source, segments: list[Segment], seg: Segment, spec: OpSpec, how: str, world: int
) -> tuple[_Table, list[str], JsonObject, bool]:
    """One table of a run: its rows, its notes in order, its config, and whether its results check failed."""
    notes: list[str] = []
    check = BusbwCheck()
    try:
        table = _measurements(source, seg, spec, world, check)
    except IngestError as e:
        raise _in_table(source, segments, e) from None
    notes.extend(table.notes)
    note = check.report(f"{spec.name} (line {seg.first_line})", source.warn)
    if note:
        notes.append(note)
    _check_footer(source, seg, spec, notes)
    if not seg.footer:
        why = (
            f"nccl-tests reported {quote(seg.aborts[0][1], 200)} (line {seg.aborts[0][0]})"
            if seg.aborts
            else "the job ended early or the log was cut"
        )
        notes.append(
            f"the {spec.name} table (line {seg.rows[0][0]}) stops after {len(seg.rows)} rows without its footer: {why}"
        )
    check_note = _failed_check(seg, spec, table.measurements)
    if check_note:
        notes.append(check_note)
    if (seg.layout or MODERN_LAYOUT).half[3] == "error":
        notes.append(
            f"the {spec.name} table's 'error' column (nccl-tests before 2.13) is a max delta, "
            f"not a count of wrong elements: not kept"
        )
    notes.extend(f"{spec.name}: nccl-tests printed '{e}'" for e in seg.errors)
    notes.extend(table.late_notes)
    cfg = {
        **_segment_config(seg, spec, how),
        **table.config,
        "check": "failed" if check_note else _check_state(seg),
    }
    if seg.started is not None:
        cfg["started_at_printed"] = seg.started[0]
    return table, notes, cfg, bool(check_note)


def _run_system(
    source: Source,
    reader: LogReader,
    segments: list[Segment],
    first_ranks: Segment,
    world: int,
    given: GivenFacts | None,
    notes: list[str],
) -> SystemInfo:
    """The run's system from its first table's rank lines (what the user gave filling in; noted in ``notes``)."""
    env = next((e for e in map(_command_env, segments) if e is not None), {})
    extra = _system_extra(reader, first_ranks)
    if given:
        extra["given_by_user"] = given.as_dict()
        notes.append(
            "given by the user, not read from the log: "
            + "; ".join(
                f"{k} {', '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in given.as_dict().items()
            )
            + (" (the log has no rank lines)" if not first_ranks.ranks else "")
        )
    system = system_from_ranks(
        list(first_ranks.ranks.values()),
        world_size=world,
        backend=reader.backend,
        backend_version=_backend_version(reader, first_ranks),
        extra=extra,
        env=env,
    )
    if given and not first_ranks.ranks:
        system = _given_system(source, first_ranks, system, given)
    return system


def _iso_utc(text: str) -> str:
    when = dt.datetime.fromisoformat(text.replace(" ", "T").replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.astimezone(dt.timezone.utc).isoformat(timespec="seconds")


def _given_system(source: Source, seg: Segment, system: SystemInfo, given: GivenFacts) -> SystemInfo:
    """The system of a fragment without rank lines, from what the user gave: hosts, ranks on each, GPU."""
    world = system.world_size
    nhosts = len(given.hosts) if given.hosts else given.nhosts
    hosts: tuple[str, ...] = given.hosts
    per_host: dict[str, int] = {}
    if nhosts is not None:
        if nhosts < 1 or world % nhosts:
            raise source.error(
                seg.rows[0][0] if seg.rows else seg.first_line,
                f"{world} ranks do not split evenly over {nhosts} hosts (--ranks, --hosts)",
            )
        if not hosts:  # a count only: the hosts are known by number, as given
            hosts = tuple(f"host{i}" for i in range(nhosts))
        per_host = {h: world // nhosts for h in hosts}
    return replace(
        system,
        hosts=hosts,
        ranks_per_host=per_host,
        device_names=(given.gpu,) * world if given.gpu else (),
    )


def _named_op(seg: Segment) -> tuple[str, int, str] | None:
    if seg.op_started is not None:
        return (seg.op_started[0], seg.op_started[1], "'Collective test starting' line")
    if seg.op_concluded is not None:
        return (seg.op_concluded[0], seg.op_concluded[1], "'Collective test concluded' line")
    if seg.op_mention is not None:
        return (seg.op_mention[0], seg.op_mention[1], "binary named")
    return None


def _check_state(seg: Segment) -> str:
    """``passed``, or ``unchecked`` when nccl-tests did not check (``-c 0``: #wrong N/A, no footer count)."""
    if seg.oob is None:
        return "unchecked"
    return "passed" if seg.settings.get("validation", 1) else "unchecked"


def _failed_check(seg: Segment, spec: OpSpec, rows: list[Measurement]) -> str | None:
    """The note of a table whose results check failed (its footer, or a row's #wrong), else None."""
    wrong = [m for m in rows if m.nwrong]
    if not seg.oob_failed and not wrong:
        return None
    parts = [f"reports 'Out of bounds values : {seg.oob} FAILED'"] if seg.oob_failed else []
    if wrong:
        shown = ", ".join(
            f"{m.size_bytes} B {'in' if m.in_place else 'out-of'}-place ({m.nwrong} wrong)" for m in wrong[:4]
        )
        parts.append(f"{'' if parts else 'has '}rows with wrong results: {shown}{' ...' if len(wrong) > 4 else ''}")
    elif (seg.layout or MODERN_LAYOUT).half[3] == "error":
        parts.append("the pre-2.13 'error' column does not say which rows")
    return (
        f"results check failed: the {spec.name} table (line {seg.rows[0][0]}) {'; '.join(parts)}; "
        f"the run is stored with status check_failed"
    )


def _backend_version(reader: LogReader, seg: Segment) -> str:
    if seg.library_code:
        return nccl_version_from_code(seg.library_code)
    return reader.nccl_version or ""


def _system_extra(reader: LogReader, seg: Segment) -> JsonObject:
    """Versions the log prints: nccl-tests/rccl-tests, headers, the library as printed, RCCL's banner."""
    library = "rccl" if reader.backend == "rccl" else "nccl"
    extra: JsonObject = {"library": library.upper(), **reader.banner}  # the version header wins
    if seg.tests_version:
        extra[f"{library}_tests_version"] = seg.tests_version
    if seg.headers_code:
        extra[f"{library}_headers_version"] = nccl_version_from_code(seg.headers_code)
    if reader.library_version:
        extra["library_version"] = reader.library_version
    return extra


def _check_footer(source: Source, seg: Segment, spec: OpSpec, notes: list[str]) -> None:
    """The footer's average busBW is the mean of every printed busBW: a row lost on the way shows there."""
    if seg.avg_busbw is None:
        return
    layout = seg.layout or MODERN_LAYOUT
    printed = [float(layout.half_tokens(tokens, p)[2]) for _, tokens in seg.iter_rows() for p in layout.placements]
    mean = sum(printed) / len(printed)
    footer, line = seg.avg_busbw
    if abs(mean - footer) > 0.01 + 1e-3 * abs(footer):
        notes.append(
            source.warn(
                line,
                (
                    f"{spec.name}: the footer's average busBW {footer:g} GB/s is not the mean of the {len(seg.rows)} rows "
                    f"read ({mean:.6g} GB/s): rows may be missing or garbled"
                ),
            )
        )


FORMAT = InputFormat(
    name="nccl-tests",
    description="nccl-tests logs",
    document="text",
    sniff=PatternSniff(_SNIFF_RE),
    marker="nccl-tests table",
    parse=parse_nccl_tests_text,
    takes_given=True,
)
