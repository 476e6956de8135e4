"""Match the same collective across ranks' Kineto traces.

A collective is matched by identity where the traces carry it, else by order:

1. Where every record has the process group's sequence number (``Seq`` on
   ``record_param_comms``, newer PyTorch), the collective of group ``g`` with
   sequence number ``n`` is the same on every rank; the ranks must then agree
   on its op, element count (except uneven all_to_all) and dtype.
2. Otherwise the records are split into streams by identity: (process group,
   op, element count, dtype), the count left out for all_to_all, whose splits
   differ per rank. Where every record sits in a ``ProfilerStep#N`` span, the
   step is part of the stream, and only steps every trace covers are used:
   profiler schedules sample a few steps, not always the same ones on every
   rank, and this aligns the traces on the steps they share.
3. Within a stream, the k-th record on each rank is the same collective when
   every rank has the same number of them; a stream missing on some rank, or
   with unequal counts (which k-th is which is then unknown), is left
   unmatched and counted.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from commlens.errors import CommlensError
from commlens.ingest.kineto import KinetoTrace, TraceCollective, traces_by_rank
from commlens.results.jsonvalue import JsonObject

__all__ = ["MatchError", "MatchedCollective", "Matching", "match_collectives"]


class MatchError(CommlensError, ValueError):
    """Traces whose collectives cannot be matched (a rank twice, one rank, disagreeing identities)."""


@dataclass(frozen=True)
class MatchedCollective:
    label: str  # the span name, with the process group where the traces hold several
    op: str
    records: tuple[TraceCollective, ...]  # one per rank, in the order of ``Matching.ranks``


@dataclass(frozen=True)
class Matching:
    ranks: tuple[int, ...]
    collectives: tuple[MatchedCollective, ...]
    method: str  # "sequence number" or "order within (group, op, count, dtype) streams"
    steps: tuple[int, ...] | None  # the ProfilerStep numbers every trace covers, where used
    recorded: dict[int, int] = field(default_factory=dict)  # collectives read, per rank
    unmatched: dict[int, int] = field(default_factory=dict)  # of those, not matched, per rank
    ambiguous_streams: int = 0  # streams whose ranks recorded different numbers of collectives

    def describe(self) -> str:
        text = f"{len(self.collectives)} collectives matched on all {len(self.ranks)} ranks by {self.method}"
        if self.steps is not None:
            text += f", on the profiler steps every trace covers ({_ranges(self.steps)})"
        if any(self.unmatched.values()):
            text += "; unmatched: " + ", ".join(
                f"rank {r} {n} of {self.recorded[r]}" for r, n in self.unmatched.items() if n
            )
        if self.ambiguous_streams:
            text += f"; {self.ambiguous_streams} streams with different counts on different ranks left out"
        return text

    def to_json(self) -> JsonObject:
        return {
            "matched": len(self.collectives),
            "method": self.method,
            "steps": list(self.steps) if self.steps is not None else None,
            "recorded": {str(r): n for r, n in self.recorded.items()},
            "unmatched": {str(r): n for r, n in self.unmatched.items()},
            "ambiguous_streams": self.ambiguous_streams,
            "description": self.describe(),
        }


def _ranges(values: tuple[int, ...]) -> str:
    """``(3, 4, 5, 9)`` -> ``"3-5, 9"``."""
    if not values:
        return "none"
    runs: list[list[int]] = [[values[0], values[0]]]
    for v in values[1:]:
        if v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)


def _labeler(traces: list[KinetoTrace]) -> Callable[[TraceCollective], str]:
    groups = {c.group for t in traces for c in t.collectives}
    if len(groups) <= 1:
        return lambda c: c.name
    return lambda c: f"{c.name} [pg {c.group}]" if c.group is not None else c.name


def match_collectives(traces: list[KinetoTrace]) -> Matching:
    """Pair each rank's records of the same collective (see the module docstring for the method)."""
    by_rank = traces_by_rank(traces, MatchError)
    if len(by_rank) < 2:
        raise MatchError("need traces of at least 2 ranks")
    ranks = tuple(sorted(by_rank))
    label = _labeler(traces)
    recorded = {r: len(by_rank[r].collectives) for r in ranks}
    matched: list[tuple[TraceCollective, ...]] = []
    steps: tuple[int, ...] | None = None
    ambiguous = 0
    if all(c.seq is not None for t in traces for c in t.collectives):
        method = "sequence number"
        keyed = [{(c.group, c.seq): c for c in by_rank[r].collectives} for r in ranks]
        for key in sorted(set.intersection(*(set(k) for k in keyed)), key=lambda k: (str(k[0]), k[1])):
            recs = tuple(k[key] for k in keyed)
            if len({c.identity for c in recs}) != 1:
                shown = "; ".join(f"rank {r}: {c.name} count {c.count} {c.dtype}" for r, c in zip(ranks, recs))
                raise MatchError(
                    f"process group {key[0]} sequence number {key[1]}: ranks ran different "
                    f"collectives ({shown}): a mismatch, see `commlens diagnose hang`"
                )
            matched.append(recs)
    else:
        method = "order within (group, op, count, dtype) streams"
        use_steps = all(c.step is not None for t in traces for c in t.collectives)
        if use_steps:
            rank_steps = ({c.step for c in by_rank[r].collectives if c.step is not None} for r in ranks)
            steps = tuple(sorted(set.intersection(*rank_steps)))
        streams: list[dict[tuple[object, ...], list[TraceCollective]]] = []
        for r in ranks:
            s: dict[tuple[object, ...], list[TraceCollective]] = {}
            for c in by_rank[r].collectives:
                if steps is None or c.step in steps:
                    s.setdefault((c.step if use_steps else None, *c.identity), []).append(c)
            streams.append(s)
        for stream_key in set.intersection(*(set(s) for s in streams)):
            lists = [s[stream_key] for s in streams]
            if len({len(x) for x in lists}) != 1:
                ambiguous += 1
                continue
            matched.extend(zip(*lists))
    matched.sort(key=lambda recs: recs[0].start_s)
    used = {id(c) for recs in matched for c in recs}
    unmatched = {r: sum(1 for c in by_rank[r].collectives if id(c) not in used) for r in ranks}
    return Matching(
        ranks=ranks,
        method=method,
        steps=steps,
        recorded=recorded,
        unmatched=unmatched,
        ambiguous_streams=ambiguous,
        collectives=tuple(MatchedCollective(label(recs[0]), recs[0].op, recs) for recs in matched),
    )
