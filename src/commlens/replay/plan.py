"""The replay plan: a job's communication, per rank, in the order each rank issued it.

A plan is a versioned JSON file (``"format": "commlens.replay-plan/1"``) that ``commlens replay plan``
writes and ``commlens replay run`` reads. It is read as untrusted input: the file's size is bounded before
it is parsed, its nesting depth after, and every field is type- and range-checked before use; a bad plan is
a :class:`ReplayPlanError` naming the field (``ranks[2].calls[17].count``).

What a call holds: the op (catalog name), the process group it ran on (a name in the plan's ``groups``,
which lists each group's global ranks), the element count with nccl-tests' meaning (``SizePlan.count``:
per rank for all_gather, reduce_scatter, all_to_all), the dtype, the reduction and root where the op has
them, the peer of a point-to-point call, and what the recording saw: the start on the rank's clock, the
duration, and the gap since the previous call on that rank ended (never negative: calls that overlapped,
as async collectives do, have a gap of 0).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from commlens.errors import CommlensError
from commlens.files import atomic_text
from commlens.ingest.files import loads_strict_json, read_capped
from commlens.ops import OPS
from commlens.results.jsonvalue import JsonObject
from commlens.results.records import DTYPE_SIZES, MAX_GROUP_NAME, MAX_RANKS, MAX_SIZE_BYTES
from commlens.results.units import finite_float

__all__ = [
    "FORMAT",
    "MAX_PLAN_BYTES",
    "P2P_OPS",
    "PlanCall",
    "PlanGroup",
    "RankCalls",
    "ReplayPlan",
    "ReplayPlanError",
    "check_runnable",
    "first_waits",
    "load_plan",
    "parse_plan",
    "write_plan",
]

FORMAT = "commlens.replay-plan/1"
MAX_PLAN_BYTES = 256 << 20  # a 64-rank, 100,000-call plan is 17 MB
MAX_DEPTH = 8  # a plan nests 6 deep (ranks[i].calls[j] within the top object)
MAX_NOTES = 1000
MAX_TEXT = 4000
REDOPS = ("sum", "prod", "max", "min", "avg")
P2P_OPS = ("send", "recv")  # point-to-point calls: one rank, one peer
SOURCES = ("kineto", "monitor", "inspector", "chakra")


class ReplayPlanError(CommlensError, ValueError):
    """A plan that cannot be read or built; ``str()`` names the file and the field."""


@dataclass(frozen=True, slots=True)
class PlanCall:
    """One collective or point-to-point call as one rank issued it."""

    op: str  # catalog name, or "send"/"recv"
    group: str  # the process group's name in ReplayPlan.groups
    count: int  # elements with nccl-tests' meaning (per rank for all_gather, reduce_scatter, all_to_all)
    dtype: str  # a catalog dtype (DTYPE_SIZES)
    start_s: float  # on the rank's clock as recorded
    duration_s: float
    gap_s: float  # since the previous call on this rank ended (0 when they overlapped, or for the first)
    redop: str | None = None  # for ops that reduce
    root: int | None = None  # global rank, for ops with a root
    peer: int | None = None  # global rank, for send/recv
    step: int | None = None
    seq: int | None = None  # the group's sequence number where the source has it

    def as_json(self) -> JsonObject:
        out: JsonObject = {
            "op": self.op,
            "group": self.group,
            "count": self.count,
            "dtype": self.dtype,
            "start_s": self.start_s,
            "duration_s": self.duration_s,
            "gap_s": self.gap_s,
        }
        for key in ("redop", "root", "peer", "step", "seq"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out


@dataclass(frozen=True)
class PlanGroup:
    name: str
    ranks: tuple[int, ...]  # global ranks, in group order


@dataclass(frozen=True)
class RankCalls:
    rank: int
    calls: tuple[PlanCall, ...]
    host: str | None = None


@dataclass(frozen=True)
class ReplayPlan:
    """A job's communication: its groups, and per rank the calls in issue order."""

    source: str  # what it was extracted from (SOURCES)
    world_size: int
    groups: tuple[PlanGroup, ...]
    ranks: tuple[RankCalls, ...]
    backend: str | None = None  # the backend the job ran on, where the source says
    notes: tuple[str, ...] = ()  # what the extraction could not carry over, and what it assumed
    files: tuple[str, ...] = ()
    timing: str = ""  # what start/duration mean in this source

    def __post_init__(self) -> None:
        _check_plan(self)

    def group(self, name: str) -> PlanGroup:
        for g in self.groups:
            if g.name == name:
                return g
        raise ReplayPlanError(f"no process group {name!r} in the plan")

    @property
    def n_calls(self) -> int:
        return sum(len(r.calls) for r in self.ranks)

    def as_json(self) -> JsonObject:
        return {
            "format": FORMAT,
            "source": self.source,
            "backend": self.backend,
            "world_size": self.world_size,
            "timing": self.timing,
            "files": list(self.files),
            "notes": list(self.notes),
            "groups": [{"name": g.name, "ranks": list(g.ranks)} for g in self.groups],
            "ranks": [
                {"rank": r.rank, **({"host": r.host} if r.host else {}), "calls": [c.as_json() for c in r.calls]}
                for r in self.ranks
            ],
        }


def size_bytes(call: PlanCall, group_size: int) -> int:
    """The call's size with nccl-tests' meaning (``OpSpec.size_meaning``); a p2p call: the bytes it moves."""
    elem = DTYPE_SIZES[call.dtype]
    if call.op in P2P_OPS:
        return call.count * elem
    spec = OPS[call.op]
    return call.count * elem * (group_size if spec.per_rank_split else 1)


def _check_plan(plan: ReplayPlan) -> None:
    """The cross-field checks: every call's group exists and holds the rank, roots and peers are ranks of it."""
    if plan.source not in SOURCES:
        raise ReplayPlanError(f"source must be one of {', '.join(SOURCES)}, got {plan.source!r}")
    if not 1 <= plan.world_size <= MAX_RANKS:
        raise ReplayPlanError(f"world_size must be in 1..{MAX_RANKS}, got {plan.world_size}")
    members: dict[str, frozenset[int]] = {}
    for g in plan.groups:
        if g.name in members:
            raise ReplayPlanError(f"process group {g.name!r} listed twice")
        if not g.ranks or len(set(g.ranks)) != len(g.ranks):
            raise ReplayPlanError(f"process group {g.name!r}: its ranks must be distinct and at least one")
        if any(not 0 <= r < plan.world_size for r in g.ranks):
            raise ReplayPlanError(f"process group {g.name!r}: a rank outside 0..{plan.world_size - 1}")
        members[g.name] = frozenset(g.ranks)
    seen: set[int] = set()
    for r in plan.ranks:
        if not 0 <= r.rank < plan.world_size:
            raise ReplayPlanError(f"rank {r.rank} outside 0..{plan.world_size - 1}")
        if r.rank in seen:
            raise ReplayPlanError(f"rank {r.rank} listed twice")
        seen.add(r.rank)
        for j, c in enumerate(r.calls):
            where = f"rank {r.rank} call {j} ({c.op})"
            ranks = members.get(c.group)
            if ranks is None:
                raise ReplayPlanError(f"{where}: process group {c.group!r} is not in the plan's groups")
            if r.rank not in ranks:
                raise ReplayPlanError(f"{where}: rank {r.rank} is not a member of process group {c.group!r}")
            for what, other in (("root", c.root), ("peer", c.peer)):
                if other is not None and other not in ranks:
                    raise ReplayPlanError(f"{where}: {what} {other} is not a member of process group {c.group!r}")
            if c.op in P2P_OPS and (c.peer is None or c.peer == r.rank):
                raise ReplayPlanError(f"{where}: a {c.op} needs a peer other than the rank itself")


def write_plan(plan: ReplayPlan, path: str | Path) -> None:
    """Write the plan whole or not at all (``-``: stdout)."""
    with atomic_text(path) as fp:
        json.dump(plan.as_json(), fp, separators=(",", ":"))
        fp.write("\n")


def _depth_ok(root: Any) -> bool:
    stack: list[tuple[Any, int]] = [(root, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values() if isinstance(v, (dict, list)))
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value if isinstance(v, (dict, list)))
    return True


def load_plan(path: str | Path, max_bytes: int = MAX_PLAN_BYTES) -> ReplayPlan:
    """Read a plan file (at most ``max_bytes``), checking every field."""
    path = Path(path)
    try:
        data = read_capped(path, max_bytes)
    except OSError as e:
        raise ReplayPlanError(f"{path}: cannot read ({e.strerror or e})") from None
    if data is None:
        raise ReplayPlanError(f"{path}: larger than {max_bytes} bytes: refused")
    try:
        top = loads_strict_json(data)
    except RecursionError:
        raise ReplayPlanError(f"{path}: JSON nested deeper than {MAX_DEPTH} levels: not a replay plan") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ReplayPlanError(f"{path}: not JSON ({type(e).__name__}: {str(e)[:200]})") from None
    try:
        return parse_plan(top)
    except ReplayPlanError as e:
        raise ReplayPlanError(f"{path}: {e}") from None


class _Fields:
    """Typed reads of one JSON object, each failure naming the field's path."""

    def __init__(self, obj: Any, where: str):
        if not isinstance(obj, dict):
            raise ReplayPlanError(f"{where or 'the plan'} must be a JSON object, got {type(obj).__name__}")
        self.obj, self.where = obj, where

    def _name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def integer(self, key: str, low: int, high: int, *, optional: bool = False) -> Any:
        v = self.obj.get(key)
        if v is None and optional:
            return None
        if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
            raise ReplayPlanError(f"{self._name(key)} must be an integer in {low}..{high}, got {_shown(v)}")
        return v

    def number(self, key: str, low: float, high: float) -> float:
        v = finite_float(self.obj.get(key))
        if v is None or not low <= v <= high:
            raise ReplayPlanError(
                f"{self._name(key)} must be a number in {low:g}..{high:g}, got {_shown(self.obj.get(key))}"
            )
        return v

    def text(self, key: str, limit: int, *, optional: bool = False, choices: tuple[str, ...] | None = None) -> Any:
        v = self.obj.get(key)
        if v is None and optional:
            return None
        if not isinstance(v, str) or not 1 <= len(v) <= limit:
            raise ReplayPlanError(f"{self._name(key)} must be a string of 1..{limit} characters, got {_shown(v)}")
        if choices is not None and v not in choices:
            raise ReplayPlanError(f"{self._name(key)} must be one of {', '.join(choices)}, got {_shown(v)}")
        return v

    def items(self, key: str, limit: int) -> list[Any]:
        v = self.obj.get(key)
        if not isinstance(v, list) or len(v) > limit:
            raise ReplayPlanError(f"{self._name(key)} must be a list of at most {limit} items, got {_shown(v)}")
        return v


def _shown(v: Any) -> str:
    if isinstance(v, (dict, list)):
        return f"a {type(v).__name__}"
    return repr(v)[:60]


_MAX_TIME_S = 1e11  # an epoch-based clock reads about 1.8e9 s; durations are far less


def _call(obj: Any, where: str) -> PlanCall:
    f = _Fields(obj, where)
    op = f.text("op", 40, choices=(*OPS, *P2P_OPS))
    reduces = op in OPS and OPS[op].reduces
    has_root = op in OPS and OPS[op].has_root
    redop = f.text("redop", 10, optional=not reduces, choices=REDOPS)
    if not reduces and redop is not None:
        raise ReplayPlanError(f"{where}.redop: {op} does not reduce")
    root = f.integer("root", 0, MAX_RANKS - 1, optional=not has_root)
    if not has_root and root is not None:
        raise ReplayPlanError(f"{where}.root: {op} has no root")
    peer = f.integer("peer", 0, MAX_RANKS - 1, optional=op not in P2P_OPS)
    if op not in P2P_OPS and peer is not None:
        raise ReplayPlanError(f"{where}.peer: only send and recv have a peer")
    return PlanCall(
        op=op,
        group=f.text("group", MAX_GROUP_NAME),
        count=f.integer("count", 0, MAX_SIZE_BYTES - 1),
        dtype=f.text("dtype", 20, choices=tuple(DTYPE_SIZES)),
        start_s=f.number("start_s", -_MAX_TIME_S, _MAX_TIME_S),
        duration_s=f.number("duration_s", 0.0, 1e6),
        gap_s=f.number("gap_s", 0.0, 1e6),
        redop=redop,
        root=root,
        peer=peer,
        step=f.integer("step", 0, 2**62, optional=True),
        seq=f.integer("seq", 0, 2**62, optional=True),
    )


def parse_plan(top: Any) -> ReplayPlan:
    """A plan from its parsed JSON; every field checked (:class:`ReplayPlanError` names the first bad one)."""
    if not _depth_ok(top):
        raise ReplayPlanError(f"JSON nested deeper than {MAX_DEPTH} levels: not a replay plan")
    f = _Fields(top, "")
    fmt = top.get("format")
    if fmt != FORMAT:
        if isinstance(fmt, str) and fmt.startswith("commlens.replay-plan/"):
            raise ReplayPlanError(f"plan format {fmt[:60]!r} is newer than this commlens reads ({FORMAT})")
        raise ReplayPlanError(f"not a replay plan (format must be {FORMAT!r}, got {_shown(fmt)})")
    world = f.integer("world_size", 1, MAX_RANKS)
    groups = []
    for i, g in enumerate(f.items("groups", 1 << 16)):
        gf = _Fields(g, f"groups[{i}]")
        ranks = gf.items("ranks", world)
        if any(not isinstance(r, int) or isinstance(r, bool) for r in ranks):
            raise ReplayPlanError(f"groups[{i}].ranks must hold integers")
        groups.append(PlanGroup(gf.text("name", MAX_GROUP_NAME), tuple(ranks)))
    ranks_out = []
    for i, r in enumerate(f.items("ranks", world)):
        rf = _Fields(r, f"ranks[{i}]")
        calls = tuple(_call(c, f"ranks[{i}].calls[{j}]") for j, c in enumerate(rf.items("calls", 1 << 26)))
        ranks_out.append(RankCalls(rf.integer("rank", 0, world - 1), calls, rf.text("host", MAX_TEXT, optional=True)))
    notes = f.items("notes", MAX_NOTES)
    files = f.items("files", 1 << 20)
    for what, items in (("notes", notes), ("files", files)):
        if any(not isinstance(n, str) or len(n) > MAX_TEXT for n in items):
            raise ReplayPlanError(f"{what} must hold strings of at most {MAX_TEXT} characters")
    timing = top.get("timing", "")
    if not isinstance(timing, str) or len(timing) > MAX_TEXT:
        raise ReplayPlanError(f"timing must be a string of at most {MAX_TEXT} characters")
    return ReplayPlan(
        source=f.text("source", 20, choices=SOURCES),
        backend=f.text("backend", 40, optional=True),
        world_size=world,
        groups=tuple(groups),
        ranks=tuple(ranks_out),
        notes=tuple(notes),
        files=tuple(files),
        timing=timing,
    )


def iter_calls(plan: ReplayPlan) -> Iterator[tuple[int, int, PlanCall]]:
    """(rank, index on that rank, call) for every call of the plan."""
    for r in plan.ranks:
        for j, c in enumerate(r.calls):
            yield r.rank, j, c


def gaps(starts_ends: list[tuple[float, float]]) -> list[float]:
    """The gap before each call: its start minus the latest end of the calls before it (0 when they overlap)."""
    out, last_end = [], -math.inf
    for start, end in starts_ends:
        out.append(0.0 if last_end == -math.inf else max(0.0, start - last_end))
        last_end = max(last_end, end)
    return out


def first_waits(plan: ReplayPlan) -> dict[int, float]:
    """Per rank whose first call is a collective: how long it waited in it for late peers, as recorded (its
    duration less the shortest member's duration of the group's first collective, the last to arrive). The
    ranks of a job reach their first recorded collective apart (start-up, the profiler starting), which is
    no step time; a replay starts from a barrier."""
    first_on: dict[str, dict[int, float]] = {}
    for r in plan.ranks:
        for c in r.calls:
            if c.op not in P2P_OPS:
                first_on.setdefault(c.group, {}).setdefault(r.rank, c.duration_s)
    out: dict[int, float] = {}
    for r in plan.ranks:
        if r.calls and r.calls[0].op not in P2P_OPS:
            durations = first_on[r.calls[0].group]
            out[r.rank] = max(0.0, durations[r.rank] - min(durations.values()))
    return out


def overlapping_calls(plan: ReplayPlan) -> int:
    """Calls recorded as issued before an earlier call on their rank had ended (an async job: FSDP's prefetch,
    DDP's buckets in flight together); 0 for a plan without timing."""
    n = 0
    for r in plan.ranks:
        last_end = -math.inf
        for c in r.calls:
            if c.start_s < last_end:
                n += 1
            last_end = max(last_end, c.start_s + c.duration_s)
    return n


def check_runnable(plan: ReplayPlan) -> None:
    """Refuse a plan whose replay would hang: every member of a group must issue as many collectives on it.

    (A rank whose trace is missing, or a trace cut short, leaves the group's other ranks waiting.)
    """
    counts: dict[str, dict[int, int]] = {g.name: dict.fromkeys(g.ranks, 0) for g in plan.groups}
    for r in plan.ranks:
        for c in r.calls:
            if c.op not in P2P_OPS:
                counts[c.group][r.rank] += 1
    for name, per_rank in counts.items():
        if len(set(per_rank.values())) > 1:
            shown = ", ".join(f"rank {r}: {n}" for r, n in list(per_rank.items())[:8])
            raise ReplayPlanError(
                f"process group {name!r}: its ranks issue different numbers of collectives ({shown}"
                f"{', ...' if len(per_rank) > 8 else ''}); a replay would hang: is a rank's trace missing or cut "
                f"short? (--group NAME replays a group whose ranks are all there)"
            )
    sends = Counter((r.rank, c.peer, c.group) for r in plan.ranks for c in r.calls if c.op == "send")
    recvs = Counter((c.peer, r.rank, c.group) for r in plan.ranks for c in r.calls if c.op == "recv")
    if sends != recvs:
        raise ReplayPlanError("the plan's sends and receives do not pair up: a replay would hang")
