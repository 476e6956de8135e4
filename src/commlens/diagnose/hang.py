"""Name the ranks a hung or mismatched job waits on, from PyTorch Flight Recorder dumps.

The dumps are read by :mod:`commlens.ingest.flightrec` (pickle or JSON, every
layout from PyTorch 2.2 on, NCCL and gloo); this module works on the records
it returns. Two kinds of suspect, in this order:

1. A rank that should have written a dump and did not (its group's
   ``pg_config`` lists it, or the file names skip it). Like PyTorch's own
   analyzer (``torchfrtrace`` refuses such a set: "Missing dump files from
   ranks ...") this is the first suspect: a rank that died, was killed, or
   hung too hard to dump is the usual reason its peers wait.
2. Among the dumps there are, the first collective where ranks diverge
   (:func:`find_divergence`).

gloo dumps differ from NCCL ones (torch 2.13, measured): every entry's state
stays ``scheduled`` and ``pg_config`` is keyed by ``''``. So the analysis
relies only on what both backends record faithfully: which collectives each
rank issued, in order, with their op, sizes and dtypes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, cast

from commlens.ingest.flightrec import DEFAULT_MAX_DUMP_BYTES, DumpError, DumpSet, Entry, RankDump, read_dump_dir
from commlens.results.jsonvalue import JsonObject

__all__ = [
    "Culprit",
    "Divergence",
    "DumpError",
    "HangConfig",
    "HangReport",
    "Expected",
    "Suspect",
    "culprit_issued",
    "describe_missing",
    "diagnose_hang",
    "find_divergence",
    "find_divergences",
    "run",
]

# Ops whose inputs may legitimately differ in size across ranks (uneven splits, root-only buffers).
_SIZES_MAY_DIFFER = frozenset(
    {
        "all_to_all",
        "alltoall",
        "alltoall_base",
        "all_to_all_single",
        "scatter",
        "gather",
        "send",
        "recv",
        "_reduce_scatter_base",
        "reduce_scatter",
        "all_gather_v",
        "reduce_scatter_v",
    }
)

_Signature = tuple[str, str, str]


class Expected(TypedDict):
    """What the agreeing ranks issued at a divergence."""

    op: str
    input_sizes: list[list[int]]
    input_dtypes: list[str] | None  # None where the dumps record no dtypes
    ranks: list[int]  # the ranks that agree
    frames: list[str]  # the first of them's Python frames, innermost first


class _Issued(TypedDict):
    rank: int
    op: str | None  # None: a missing rank
    input_sizes: list[list[int]] | None
    input_dtypes: list[str] | None
    frames: list[str]  # where it was, innermost first


class Culprit(_Issued, total=False):
    """A rank named at a divergence: what it issued, or (``op`` None) that it never issued the collective."""

    last_collective_seq_id: int | None  # missing ranks only: their last collective of the group, if any
    last_op: str | None
    dump_reason: str


@dataclass(frozen=True)
class Divergence:
    """The first collective (per process group, by sequence number) the ranks disagree on."""

    kind: str  # "missing_ranks", "extra_collective", "op_mismatch", "size_mismatch", "dtype_mismatch"
    process_group: str
    process_group_desc: str
    collective_seq_id: int
    expected: Expected
    culprits: tuple[Culprit, ...]
    tied: bool = False  # as many ranks on each side: the culprits are a judgement, see the notes


@dataclass(frozen=True)
class Suspect:
    """A rank the others may be waiting on, and why."""

    rank: int
    reason: str  # "no_dump", or the divergence's kind
    detail: str


@dataclass(frozen=True)
class HangReport:
    ranks: tuple[int, ...]  # ranks with a dump
    expected_ranks: tuple[int, ...]
    backend: str
    versions: tuple[str, ...]
    files: dict[int, str]
    ranks_without_dump: tuple[int, ...]
    missing_evidence: dict[int, tuple[str, ...]]
    last_seq_by_rank: dict[int, int]
    divergence: Divergence | None = None  # the earliest of divergences
    divergences: tuple[Divergence, ...] = ()  # at most one per process group, earliest first
    suspects: tuple[Suspect, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def consistent(self) -> bool:
        return not self.suspects

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "consistent": self.consistent,
            "backend": self.backend,
            "versions": list(self.versions),
            "ranks": list(self.ranks),
            "expected_ranks": list(self.expected_ranks),
            "files": {str(r): f for r, f in self.files.items()},
            "ranks_without_dump": list(self.ranks_without_dump),
            "missing_evidence": {str(r): list(w) for r, w in self.missing_evidence.items()},
            "last_collective_seq_id": {str(r): s for r, s in self.last_seq_by_rank.items()},
            "suspects": [{"rank": s.rank, "reason": s.reason, "detail": s.detail} for s in self.suspects],
            "suspect_ranks": [s.rank for s in self.suspects],
            "divergence": _divergence_json(self.divergence) if self.divergence is not None else None,
            "divergences": [_divergence_json(d) for d in self.divergences],
            "notes": list(self.notes),
        }
        return out


def _divergence_json(d: Divergence) -> JsonObject:
    return {
        "kind": d.kind,
        "process_group": d.process_group,
        "process_group_desc": d.process_group_desc,
        "collective_seq_id": d.collective_seq_id,
        "expected": cast(JsonObject, d.expected),
        "tied": d.tied,
        "culprit_ranks": [c["rank"] for c in d.culprits],
        "culprits": [cast(JsonObject, c) for c in d.culprits],  # a TypedDict of JSON values (mypy cannot tell)
    }


def _signature(entry: Entry, with_dtypes: bool) -> _Signature:
    dtypes = json.dumps(list(entry.input_dtypes)) if with_dtypes and entry.input_dtypes is not None else ""
    return (entry.op, json.dumps([list(s) for s in entry.input_sizes]), dtypes)


def _shifted(extra: dict[int, _Signature], other: dict[int, _Signature], seq: int) -> bool:
    """True when ``extra``'s collectives from ``seq + 1`` on are ``other``'s from ``seq`` on (one inserted at seq)."""
    pairs = [(extra[k + 1], other[k]) for k in sorted(other) if k >= seq and k + 1 in extra]
    return bool(pairs) and all(a == b for a, b in pairs)


def find_divergence(dumps: tuple[RankDump, ...] | list[RankDump]) -> tuple[Divergence | None, tuple[str, ...]]:
    """The earliest of :func:`find_divergences`, or None, and the notes."""
    divergences, notes = find_divergences(dumps)
    return (divergences[0] if divergences else None), notes


def find_divergences(dumps: tuple[RankDump, ...] | list[RankDump]) -> tuple[tuple[Divergence, ...], tuple[str, ...]]:
    """Find the first collective, per process group, where the ranks with a dump diverge.

    1. Per rank, index its collectives (point-to-point entries left out) by
       process group and ``collective_seq_id`` (``seq_id`` in layouts before
       2.3); the recorder numbers each group's collectives 1, 2, ... in the
       order that rank issued them.
    2. Per group, its ranks are those ``pg_config`` lists (gloo's ``''`` key
       mapped back to group ``0``), else the ranks whose dumps hold entries
       of that group; ranks without a dump are left out here (they are
       suspects on their own, see :func:`diagnose_hang`).
    3. The recorder is a ring buffer (and a dump may hold only the active
       collectives): compare sequence numbers from the highest first number
       any rank still holds, up to the highest any rank issued.
    4. At each sequence number, in order, a rank that never issued it is
       *missing*; the others are grouped by (op, input sizes, input dtypes;
       dtypes only where every dump records them). The first number where
       ranks are missing, or where they issued more than one signature, is
       the divergence.
    5. Culprits: the missing ranks if any (they never reached the collective
       their peers wait in); otherwise the ranks outside the largest group
       of agreeing ranks. When the largest group is not unique (two ranks,
       one each side), a rank whose later collectives are the others'
       shifted by one issued an *extra* collective and is the culprit
       (``extra_collective``; with two ranks this reads the same as the other
       rank skipping one, which the notes say); failing that, every rank of
       the tied groups is named and ``tied`` is set. The kind is otherwise
       ``op_mismatch`` when ops differ, else ``size_mismatch`` (sizes differ,
       for ops whose inputs must match), else ``dtype_mismatch``.
    6. Each culprit is reported with the entry it issued (op, sizes, dtypes,
       the Python frames the recorder captured) or, when missing, its last
       collective in the group and the Python stack where its main thread
       was at dump time.
    7. Each group gives at most one divergence (its first); they are
       returned ordered by the creation time of their first disagreeing
       entry (times from different hosts compared as they are), so the
       earliest comes first. Several groups diverge when several ranks fail
       at once (two faulty ranks in different expert-parallel groups).
    """
    notes: list[str] = []
    with_dtypes = all(e.input_dtypes is not None for d in dumps for e in d.collectives)
    if not with_dtypes:
        notes.append("dtypes not compared: some dumps do not record them (layouts before 2.3)")
    by_rank, groups, descs = _index(dumps)
    found: list[tuple[int, Divergence, list[str]]] = []
    later_start: list[str] = []
    for name in sorted(groups):
        members = sorted(groups[name])
        sigs = {r: {s: _signature(e, with_dtypes) for (g, s), e in by_rank[r].items() if g == name} for r in members}
        firsts = [min(s) for s in sigs.values() if s]
        start = max(firsts, default=1)
        if start > 1:
            later_start.append(f"{name} from {start}")
        first = _first_divergence(name, descs.get(name, ""), start, sigs, by_rank, dumps)
        if first is not None:
            found.append(first)
    if later_start:
        shown = ", ".join(later_start[:6]) + (f" and {len(later_start) - 6} more" if len(later_start) > 6 else "")
        notes.append(
            f"{len(later_start)} group(s) compared from a later collective than 1, the highest first one "
            f"every rank still holds (ring buffer wrapped, or only active collectives dumped): {shown}"
        )
    found.sort(key=lambda f: (f[0], f[1].process_group))
    return tuple(d for _, d, _ in found), tuple(notes + [n for _, _, ns in found for n in ns])


_ByRank = dict[int, dict[tuple[str, int], Entry]]


def _index(dumps: tuple[RankDump, ...] | list[RankDump]) -> tuple[_ByRank, dict[str, set[int]], dict[str, str]]:
    """Steps 1 and 2: each rank's collectives by (group, sequence number); each group's ranks and description."""
    by_rank: _ByRank = {}
    groups: dict[str, set[int]] = {}
    descs: dict[str, str] = {}
    for d in dumps:
        table = by_rank.setdefault(d.rank, {})
        for e in d.collectives:
            table[(e.process_group, e.collective_seq_id)] = e
            groups.setdefault(e.process_group, set()).add(d.rank)
            descs[e.process_group] = e.process_group_desc or descs.get(e.process_group, "")
    present = {d.rank for d in dumps}
    for d in dumps:
        for name, cfg in d.groups.items():
            if name in groups:
                groups[name] |= set(cfg.ranks) & present
                descs[name] = descs[name] or cfg.desc
    return by_rank, groups, descs


def _first_divergence(
    name: str,
    desc: str,
    start: int,
    sigs: dict[int, dict[int, _Signature]],
    by_rank: _ByRank,
    dumps: tuple[RankDump, ...] | list[RankDump],
) -> tuple[int, Divergence, list[str]] | None:
    """Steps 4 to 6 for one group: its first divergence (with its first entry's creation time and notes), or None."""
    members = list(sigs)
    # The numbers some rank issued, not range(start, end): a number no rank holds (entries lost from the
    # middle of every buffer) has nothing to compare, and a dump's ids may be as large as a file says.
    for seq in sorted({s for rank_sigs in sigs.values() for s in rank_sigs if s >= start}):
        issued = {r: by_rank[r][(name, seq)] for r in members if (name, seq) in by_rank[r]}
        missing = [r for r in members if r not in issued]
        buckets: dict[_Signature, list[int]] = {}
        for r in issued:
            buckets.setdefault(sigs[r][seq], []).append(r)
        if not missing and len(buckets) == 1:
            continue
        top = max(len(v) for v in buckets.values())
        leaders = sorted((sig for sig, rs in buckets.items() if len(rs) == top), key=lambda sig: min(buckets[sig]))
        group_notes: list[str] = []
        tied = False
        if missing:
            kind, majority = "missing_ranks", leaders[0]
            culprits = [_missing(r, name, seq, by_rank[r], dumps) for r in missing]
        else:
            judged = _mismatch(name, seq, buckets, leaders, sigs, issued)
            if judged is None:
                continue
            kind, majority, culprit_ranks, tied, group_notes = judged
            culprits = sorted((_issued(r, issued[r], dumps) for r in culprit_ranks), key=lambda c: c["rank"])
        expected_rank = min(buckets[majority])
        expected_entry = issued[expected_rank]
        first_ns = min(e.time_created_ns or 0 for e in issued.values())
        divergence = Divergence(
            kind=kind,
            process_group=name,
            process_group_desc=desc,
            collective_seq_id=seq,
            expected={
                "op": expected_entry.op,
                "input_sizes": [list(s) for s in expected_entry.input_sizes],
                "input_dtypes": _dtypes(expected_entry),
                "ranks": sorted(buckets[majority]),
                "frames": _issued(expected_rank, expected_entry, dumps)["frames"],
            },
            culprits=tuple(culprits),
            tied=tied,
        )
        return first_ns, divergence, group_notes
    return None


def _mismatch(
    name: str,
    seq: int,
    buckets: dict[_Signature, list[int]],
    leaders: list[_Signature],
    sigs: dict[int, dict[int, _Signature]],
    issued: dict[int, Entry],
) -> tuple[str, _Signature, list[int], bool, list[str]] | None:
    """Step 5 where every rank issued ``seq``: (kind, the majority's signature, culprit ranks, tied, notes), or
    None when the signatures differ only in sizes an op may differ in."""
    ops = {sig[0] for sig in buckets}
    first_op = next(iter(ops))
    if len(ops) > 1:
        kind = "op_mismatch"
    elif len({sig[1] for sig in buckets}) > 1 and first_op not in _SIZES_MAY_DIFFER:
        kind = "size_mismatch"
    elif len({sig[2] for sig in buckets}) > 1:
        kind = "dtype_mismatch"
    else:
        return None
    majority = leaders[0]
    culprit_ranks = [r for sig, rs in buckets.items() if sig != majority for r in rs]
    if len(leaders) == 1:
        return kind, majority, culprit_ranks, False, []
    extra = [
        sig
        for sig in leaders
        if all(_shifted(sigs[r], sigs[o], seq) for r in buckets[sig] for o in issued if o not in buckets[sig])
    ]
    if len(extra) != 1:
        tied_ranks = sorted(r for sig in leaders for r in buckets[sig])
        note = f"group {name}: collective {seq} splits the ranks into equal groups; every rank of them is named"
        return kind, majority, tied_ranks, True, [note]
    culprit_ranks = sorted(buckets[extra[0]])
    other = sorted(set(issued) - set(culprit_ranks))
    note = (
        f"group {name}: rank(s) {_list(culprit_ranks)} issued collective {seq} "
        f"({extra[0][0]} {extra[0][1]}) and then the same collectives as rank(s) {_list(other)}, "
        f"one number later: an extra collective on {_list(culprit_ranks)} (or, with as many "
        f"ranks on each side, one skipped on {_list(other)})"
    )
    return "extra_collective", next(s for s in leaders if s != extra[0]), culprit_ranks, False, [note]


def _list(ranks: list[int]) -> str:
    return ",".join(map(str, ranks))


def _dtypes(entry: Entry) -> list[str] | None:
    return list(entry.input_dtypes) if entry.input_dtypes is not None else None


def _dump_of(rank: int, dumps: tuple[RankDump, ...] | list[RankDump]) -> RankDump:
    return next(d for d in dumps if d.rank == rank)


def _issued(rank: int, entry: Entry, dumps: tuple[RankDump, ...] | list[RankDump]) -> Culprit:
    """What a culprit issued; its frames from the entry, else (the entry being its last) from ``python_stack``."""
    dump = _dump_of(rank, dumps)
    frames = list(entry.frames)
    if not frames and dump.collectives and entry is dump.collectives[-1]:
        frames = list(dump.python_stack)
    return {
        "rank": rank,
        "op": entry.op,
        "input_sizes": [list(s) for s in entry.input_sizes],
        "input_dtypes": _dtypes(entry),
        "frames": frames,
    }


def _missing(
    rank: int, group: str, seq: int, table: dict[tuple[str, int], Entry], dumps: tuple[RankDump, ...] | list[RankDump]
) -> Culprit:
    dump = _dump_of(rank, dumps)
    earlier = [s for (g, s) in table if g == group and s < seq]
    last = table[(group, max(earlier))] if earlier else None
    return {
        "rank": rank,
        "op": None,
        "input_sizes": None,
        "input_dtypes": None,
        "last_collective_seq_id": max(earlier) if earlier else None,  # None: no earlier one in its dump
        "last_op": last.op if last else None,
        "frames": list(dump.python_stack) or list(last.frames if last else ()),
        "dump_reason": dump.dump_reason,
    }


def describe_missing(culprit: Culprit) -> str:
    """What a missing rank issued instead: nothing, after its last collective of the group if its dump has one."""
    if culprit.get("last_collective_seq_id") is None:
        return "nothing (no earlier one in its dump)"
    return f"nothing (last: #{culprit['last_collective_seq_id']} {culprit.get('last_op') or '-'})"


def culprit_issued(culprit: Culprit) -> str:
    """What a culprit issued, as printed: its op, or for a missing rank :func:`describe_missing`.

    Told apart by the ``op`` key being None (a missing rank), not by its truth: a dump may name an entry
    ``nccl:`` with an empty op, which is what that rank issued, not a missing rank.
    """
    return describe_missing(culprit) if culprit.get("op") is None else (culprit["op"] or "''")


def _where_peers_wait(rank: int, dump_set: DumpSet) -> str:
    """The last collective the dumped members of the missing rank's groups issued: what they wait in."""
    parts = []
    names = sorted({n for d in dump_set.dumps for n, g in d.groups.items() if rank in g.ranks})
    for name in names:
        last = [
            (e.collective_seq_id, d.rank, e) for d in dump_set.dumps for e in d.collectives if e.process_group == name
        ]
        if last:
            seq, holder, e = max(last, key=lambda t: (t[0], -t[1]))
            state = f", {e.state} on rank {holder}" if e.state else ""
            parts.append(f"its peers in group {name} reached collective {seq} ({e.op}{state})")
    return "; ".join(parts)


@dataclass(frozen=True)
class HangConfig:
    """What a hang diagnosis reads: the Flight Recorder dumps in ``dump_dir``, one file per rank. Checked when
    built (:class:`DumpError` naming the field)."""

    dump_dir: Path
    prefix: str | None = None  # the file name before the rank; None: found from the names when they share one
    max_bytes: int = DEFAULT_MAX_DUMP_BYTES  # a dump larger than this is refused, read no further

    def __post_init__(self) -> None:
        if not isinstance(self.dump_dir, Path):
            raise DumpError(f"dump_dir: must be a Path, got {type(self.dump_dir).__name__}")
        if self.prefix is not None and not isinstance(self.prefix, str):
            raise DumpError(f"prefix: must be text or None, got {type(self.prefix).__name__}")
        if isinstance(self.max_bytes, bool) or not isinstance(self.max_bytes, int) or self.max_bytes < 1:
            raise DumpError(f"max_bytes: must be a whole number >= 1, got {self.max_bytes!r}")


def diagnose_hang(
    dump_dir: str | Path, prefix: str | None = None, max_bytes: int = DEFAULT_MAX_DUMP_BYTES
) -> HangReport:
    """Shorthand for :func:`run` of the :class:`HangConfig` these arguments make."""
    return run(HangConfig(Path(dump_dir), prefix, max_bytes))


def run(config: HangConfig) -> HangReport:
    """The hang stage: read the dumps ``config`` names; suspects are the ranks without a dump, then the first
    divergence's culprits."""
    dump_set = read_dump_dir(config.dump_dir, prefix=config.prefix, max_bytes=config.max_bytes)
    dumps = dump_set.dumps
    divergences, notes = find_divergences(dumps)
    suspects = []
    for rank, why in dump_set.missing.items():
        wait = _where_peers_wait(rank, dump_set)
        suspects.append(
            Suspect(rank=rank, reason="no_dump", detail="no dump: " + "; ".join(why) + (f"; {wait}" if wait else ""))
        )
    named: dict[int, list[str]] = {}  # rank -> the divergences naming it, earliest first
    for divergence in divergences:
        for c in divergence.culprits:
            issued = culprit_issued(c)
            named.setdefault(c["rank"], []).append(
                f"{divergence.kind} at collective {divergence.collective_seq_id} of group "
                f"{divergence.process_group}: issued {issued}"
            )
    first_kind = {c["rank"]: d.kind for d in reversed(divergences) for c in d.culprits}
    for rank, what in named.items():
        more = f" (and in {len(what) - 1} more group(s))" if len(what) > 1 else ""
        suspects.append(Suspect(rank=rank, reason=first_kind[rank], detail=what[0] + more))
    last_seq = {d.rank: max((e.collective_seq_id for e in d.collectives), default=0) for d in dumps}
    return HangReport(
        ranks=tuple(d.rank for d in dumps),
        expected_ranks=dump_set.expected_ranks,
        backend=",".join(sorted({d.backend for d in dumps} - {""})),
        versions=tuple(sorted({d.version for d in dumps})),
        files={d.rank: d.path.name for d in dumps},
        ranks_without_dump=tuple(dump_set.missing),
        missing_evidence=dict(dump_set.missing),
        last_seq_by_rank=last_seq,
        divergence=divergences[0] if divergences else None,
        divergences=divergences,
        suspects=tuple(suspects),
        notes=dump_set.notes + notes,
    )
