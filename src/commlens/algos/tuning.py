"""The tuning table: which algorithm to run for an op, a rank count and a message size.

``commlens tune`` measures every registered algorithm (and the backend's
built-in collective) over a range of sizes and writes the table;
``algo="auto"`` reads it through :func:`choose`. The file is versioned JSON::

    {"format": "commlens.tuning/1", "created_at": ..., "command_line": ...,
     "entries": [{"op": "all_reduce", "world_size": 4, "ranks_per_host": 4,
                  "backend": "gloo", "device": "cpu", "context": {...},
                  "buckets": [{"min_bytes": 0, "max_bytes": 45, "size_bytes": 32,
                               "algo": "recursive_doubling", "chunk_bytes": null,
                               "times_s": {"ring": ..., "builtin": ...}}, ...]}]}

Sizes mean what nccl-tests means for each op (:mod:`commlens.ops`): the
buffer for all_reduce, broadcast and reduce; the whole gathered or scattered
buffer for all_gather and reduce_scatter; what one rank sends for
all_to_all. A bucket holds the sizes ``min_bytes <= n < max_bytes``
(``max_bytes`` null: no upper bound); its edges lie halfway, on a log scale,
between the sizes measured. ``times_s`` keeps every candidate's measured
time, so the choice can be re-examined.

Where the table lives: ``$COMMLENS_TUNING``, else
``$XDG_CACHE_HOME/commlens/tuning.json`` (``~/.cache/commlens/tuning.json``).
It is read once per process. With no table, or no entry for the op and rank
count, :func:`choose` falls back to :func:`heuristic` and never fails for
want of a table; a table that exists but is malformed raises
:class:`TuningError` naming the file and the field.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from commlens.algos.base import ALGO_OPS, AlgoError, algorithms_for
from commlens.files import atomic_text

__all__ = [
    "BUILTIN",
    "FORMAT",
    "HEURISTIC",
    "Bucket",
    "Choice",
    "Entry",
    "TuningError",
    "TuningTable",
    "bucket_edges",
    "choose",
    "default_path",
    "entry_from_times",
    "heuristic",
    "load_table",
    "loaded_table",
    "lookup",
    "new_table",
    "reset_cache",
    "save_table",
    "table_from_dict",
    "table_path",
    "table_to_dict",
    "with_entries",
]

log = logging.getLogger(__name__)

FORMAT = "commlens.tuning/1"
_FORMAT_PREFIX = "commlens.tuning/"
BUILTIN = "builtin"  # the backend's own collective: measured for reference, never chosen by ``auto``

# Built-in rule when no table says otherwise, per op: (threshold in bytes, below it, at or above it).
# Below the threshold, latency dominates: the algorithms with ceil(lg p) steps (Thakur, Rabenseifner and
# Gropp, IJHPCA 2005; MPICH's defaults); above it, the bandwidth-optimal ones.
HEURISTIC: dict[str, tuple[int, str, str]] = {
    "all_reduce": (64 << 10, "recursive_doubling", "ring"),
    "all_gather": (64 << 10, "bruck", "ring"),
    "reduce_scatter": (64 << 10, "recursive_halving", "ring"),
    "all_to_all": (64 << 10, "bruck", "pairwise"),
    "broadcast": (64 << 10, "binomial", "scatter_allgather"),
    "reduce": (64 << 10, "binomial", "rabenseifner"),
}
# all_reduce across hosts (fewer ranks per host than ranks): the two-level algorithm for large sizes.
MULTI_HOST_LARGE: dict[str, str] = {"all_reduce": "hierarchical"}


class TuningError(AlgoError):
    """A tuning table that cannot be read or used: the message names the file and the field."""


@dataclass(frozen=True)
class Bucket:
    """Sizes ``min_bytes <= n < max_bytes`` (None: unbounded) and the algorithm that won at ``size_bytes``."""

    min_bytes: int
    max_bytes: int | None
    size_bytes: int  # the size measured for this bucket
    algo: str
    chunk_bytes: int | None = None  # the chunk size it was measured with (None: the algorithm's default)
    times_s: Mapping[str, float] = field(default_factory=dict)  # candidate -> measured time

    def holds(self, nbytes: int) -> bool:
        return self.min_bytes <= nbytes and (self.max_bytes is None or nbytes < self.max_bytes)

    def ranked(self) -> list[tuple[str, float]]:
        """Commlens candidates (not the built-in), fastest first."""
        return sorted(((a, t) for a, t in self.times_s.items() if a != BUILTIN), key=lambda at: at[1])


@dataclass(frozen=True)
class Entry:
    """One op at one rank count and layout: its size buckets, and where it was measured."""

    op: str
    world_size: int
    ranks_per_host: int
    backend: str
    device: str
    buckets: tuple[Bucket, ...]
    context: Mapping[str, Any] = field(default_factory=dict)  # fingerprint, hosts, run id, stat, cpu model ...

    @property
    def key(self) -> tuple[str, int, int, str, str]:
        """Entries with the same key describe the same experiment; a newer one replaces an older one."""
        return (self.op, self.world_size, self.ranks_per_host, self.backend, self.device)

    def bucket_for(self, nbytes: int) -> Bucket:
        for b in self.buckets:
            if b.holds(nbytes):
                return b
        raise TuningError(f"{self.op} at {self.world_size} ranks: no bucket holds {nbytes} B")  # validated away


@dataclass(frozen=True)
class TuningTable:
    """Every tuned entry, and when and how the table was made."""

    entries: tuple[Entry, ...]
    created_at: str = ""
    command_line: str = ""

    def find(
        self, op: str, world_size: int, ranks_per_host: int | None = None, backend: str | None = None
    ) -> Entry | None:
        """The entry for ``op`` at ``world_size`` ranks; among several, the one matching the layout and backend."""
        matches = [e for e in self.entries if e.op == op and e.world_size == world_size]
        if not matches:
            return None
        matches.sort(
            key=lambda e: (
                ranks_per_host is not None and e.ranks_per_host == ranks_per_host,
                backend is not None and e.backend == backend,
            )
        )
        return matches[-1]

    def merged(self, newer: TuningTable) -> TuningTable:
        """This table with ``newer``'s entries added, replacing any with the same key."""
        keys = {e.key for e in newer.entries}
        kept = tuple(e for e in self.entries if e.key not in keys)
        return TuningTable(kept + newer.entries, newer.created_at, newer.command_line)


# ---- building entries from measurements ------------------------------------------------------------


def bucket_edges(sizes: Iterable[int]) -> list[tuple[int, int | None]]:
    """[min, max) per size (sorted, distinct, > 0): edges at the geometric mean of neighbours."""
    ordered = sorted(set(sizes))
    edges: list[tuple[int, int | None]] = []
    low = 0
    for i, s in enumerate(ordered):
        if i + 1 == len(ordered):
            edges.append((low, None))
            break
        nxt = ordered[i + 1]
        high = min(max(math.isqrt(s * nxt), s + 1), nxt)
        edges.append((low, high))
        low = high
    return edges


def entry_from_times(
    op: str,
    world_size: int,
    times_s: Mapping[int, Mapping[str, float]],
    *,
    ranks_per_host: int,
    backend: str,
    device: str,
    chunk_bytes: int | None = None,
    context: Mapping[str, Any] | None = None,
) -> Entry:
    """An entry from measured times ``{size_bytes: {candidate: time_s}}``: the fastest commlens algorithm per size.

    Candidates named :data:`BUILTIN` are kept for reference but never chosen;
    sizes of 0 bytes (nothing to tune) are dropped.
    """
    sizes = [s for s in times_s if s > 0]
    if not sizes:
        raise TuningError(f"{op} at {world_size} ranks: no measured size above 0 bytes to tune")
    buckets = []
    for (low, high), size in zip(bucket_edges(sizes), sorted(sizes)):
        candidates = {a: float(t) for a, t in times_s[size].items()}
        ours = {a: t for a, t in candidates.items() if a != BUILTIN}
        if not ours:
            raise TuningError(f"{op} at {world_size} ranks, {size} B: no commlens algorithm was measured")
        best = min(ours, key=ours.__getitem__)
        buckets.append(Bucket(low, high, size, best, chunk_bytes, candidates))
    return Entry(op, world_size, ranks_per_host, backend, device, tuple(buckets), dict(context or {}))


# ---- the file -------------------------------------------------------------------------------------


def table_to_dict(table: TuningTable) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "created_at": table.created_at,
        "command_line": table.command_line,
        "entries": [
            {
                "op": e.op,
                "world_size": e.world_size,
                "ranks_per_host": e.ranks_per_host,
                "backend": e.backend,
                "device": e.device,
                "context": dict(e.context),
                "buckets": [
                    {
                        "min_bytes": b.min_bytes,
                        "max_bytes": b.max_bytes,
                        "size_bytes": b.size_bytes,
                        "algo": b.algo,
                        "chunk_bytes": b.chunk_bytes,
                        "times_s": dict(b.times_s),
                    }
                    for b in e.buckets
                ],
            }
            for e in table.entries
        ],
    }


def save_table(table: TuningTable, path: str | Path) -> Path:
    """Write ``table`` to ``path`` atomically (a temporary file renamed over it); returns the path."""
    path = Path(path).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(table_to_dict(table), indent=1) + "\n"
    with atomic_text(path, fsync=True) as fp:
        fp.write(text)
    return path


def _need(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in obj:
        raise TuningError(f"{where}: missing {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise TuningError(f"{where}.{key}: expected {names}, got {value!r}")
    return value


def _bucket_from_dict(d: Any, op: str, where: str) -> Bucket:
    if not isinstance(d, dict):
        raise TuningError(f"{where}: expected an object, got {d!r}")
    low = _need(d, "min_bytes", int, where)
    high = d.get("max_bytes")
    if high is not None and (not isinstance(high, int) or isinstance(high, bool) or high <= low):
        raise TuningError(f"{where}.max_bytes: expected a whole number above min_bytes {low} or null, got {high!r}")
    size = _need(d, "size_bytes", int, where)
    algo = _need(d, "algo", str, where)
    known = algorithms_for(op)
    if algo not in algorithms_for(op, schemes=True):
        raise TuningError(f"{where}.algo: unknown {op} algorithm {algo!r}; known: {', '.join(known) or 'none'}")
    chunk = d.get("chunk_bytes")
    if chunk is not None and (not isinstance(chunk, int) or isinstance(chunk, bool) or chunk <= 0):
        raise TuningError(f"{where}.chunk_bytes: expected a positive whole number or null, got {chunk!r}")
    times = d.get("times_s", {})
    if not isinstance(times, dict) or any(
        not isinstance(t, (int, float)) or isinstance(t, bool) or not t >= 0 for t in times.values()
    ):
        raise TuningError(f"{where}.times_s: expected {{algorithm: seconds >= 0}}, got {times!r}")
    return Bucket(low, high, size, algo, chunk, {str(a): float(t) for a, t in times.items()})


def _entry_from_dict(d: Any, where: str) -> Entry:
    if not isinstance(d, dict):
        raise TuningError(f"{where}: expected an object, got {d!r}")
    op = _need(d, "op", str, where)
    if op not in ALGO_OPS:
        raise TuningError(
            f"{where}.op: commlens implements no algorithms for {op!r}; it does for {', '.join(ALGO_OPS)}"
        )
    world = _need(d, "world_size", int, where)
    per_host = d.get("ranks_per_host", world)
    if world < 1 or not isinstance(per_host, int) or isinstance(per_host, bool) or not 1 <= per_host <= world:
        raise TuningError(
            f"{where}: world_size {world!r} and ranks_per_host {per_host!r} must satisfy "
            "1 <= ranks_per_host <= world_size"
        )
    where = f"{where} ({op}, {world} ranks)"
    raw = _need(d, "buckets", list, where)
    if not raw:
        raise TuningError(f"{where}.buckets: empty")
    buckets = tuple(_bucket_from_dict(b, op, f"{where}.buckets[{i}]") for i, b in enumerate(raw))
    if buckets[0].min_bytes != 0:
        raise TuningError(f"{where}.buckets[0].min_bytes: the first bucket must start at 0, not {buckets[0].min_bytes}")
    for i, (a, b) in enumerate(zip(buckets, buckets[1:])):
        if a.max_bytes != b.min_bytes:
            raise TuningError(
                f"{where}.buckets[{i + 1}].min_bytes: {b.min_bytes} does not continue the previous "
                f"bucket's max_bytes {a.max_bytes} (buckets must be sorted and contiguous)"
            )
    if buckets[-1].max_bytes is not None:
        raise TuningError(f"{where}.buckets[{len(buckets) - 1}].max_bytes: the last bucket must be unbounded (null)")
    context = d.get("context", {})
    if not isinstance(context, dict):
        raise TuningError(f"{where}.context: expected an object, got {context!r}")
    return Entry(op, world, per_host, str(d.get("backend", "")), str(d.get("device", "")), buckets, context)


def table_from_dict(data: Any, source: str = "tuning table") -> TuningTable:
    """Validate and build a table; :class:`TuningError` names ``source`` and the offending field."""
    if not isinstance(data, dict):
        raise TuningError(f"{source}: not a tuning table (expected a JSON object)")
    fmt = data.get("format")
    if not isinstance(fmt, str) or not fmt.startswith(_FORMAT_PREFIX):
        raise TuningError(f"{source}: not a tuning table (format {fmt!r}, expected {FORMAT!r})")
    if fmt != FORMAT:
        raise TuningError(f"{source}: format {fmt!r} is not one this commlens reads ({FORMAT!r})")
    entries = _need(data, "entries", list, source)
    table = TuningTable(
        tuple(_entry_from_dict(e, f"{source}: entries[{i}]") for i, e in enumerate(entries)),
        str(data.get("created_at", "")),
        str(data.get("command_line", "")),
    )
    seen: set[tuple[str, int, int, str, str]] = set()
    for i, e in enumerate(table.entries):
        if e.key in seen:
            raise TuningError(
                f"{source}: entries[{i}]: a second entry for {e.op} at {e.world_size} ranks "
                f"({e.ranks_per_host} per host, {e.backend}/{e.device})"
            )
        seen.add(e.key)
    return table


def load_table(path: str | Path) -> TuningTable:
    """Read and validate the table at ``path``; :class:`TuningError` if it is missing or malformed."""
    path = Path(path).expanduser()
    try:
        text = path.read_text()
    except OSError as e:
        raise TuningError(f"{path}: cannot read the tuning table: {e.strerror or e}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise TuningError(f"{path}: not JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    return table_from_dict(data, str(path))


def new_table(entries: Iterable[Entry], command_line: str = "") -> TuningTable:
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    return TuningTable(tuple(entries), now, command_line)


# ---- choosing -------------------------------------------------------------------------------------


def default_path() -> Path:
    """``$XDG_CACHE_HOME/commlens/tuning.json``, else ``~/.cache/commlens/tuning.json``."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "commlens" / "tuning.json"


def table_path() -> Path:
    """Where ``auto`` reads the table: ``$COMMLENS_TUNING``, else :func:`default_path`."""
    env = os.environ.get("COMMLENS_TUNING")
    return Path(env).expanduser() if env else default_path()


_UNSET = object()
_cached: Any = _UNSET


def loaded_table() -> TuningTable | None:
    """The table at :func:`table_path`, read once per process; None when there is no file there."""
    global _cached
    if _cached is _UNSET:
        path = table_path()
        if path.is_file():
            _cached = load_table(path)
        else:
            if os.environ.get("COMMLENS_TUNING"):
                log.warning("COMMLENS_TUNING=%s: no such file; algo='auto' uses the built-in rule", path)
            _cached = None
    return _cached


def reset_cache() -> None:
    """Forget the table read so far (the next :func:`choose` reads it again)."""
    global _cached
    _cached = _UNSET


def _hint_ranks_per_host(world: int) -> int | None:
    for var in ("COMMLENS_LOCAL_SIZE", "LOCAL_WORLD_SIZE"):
        text = os.environ.get(var, "")
        if text.isdigit() and int(text) > 0:
            return min(int(text), world)
    return None


def heuristic(op: str, nbytes: int, world: int, ranks_per_host: int | None = None) -> str:
    """The built-in rule, used without a table entry.

    1. Below 64 KiB (nccl-tests size), latency dominates: the algorithm with
       ceil(lg p) steps (all_reduce ``recursive_doubling``, all_gather and
       all_to_all ``bruck``, reduce_scatter ``recursive_halving``, broadcast
       and reduce ``binomial``).
    2. From 64 KiB, the bandwidth-optimal one (``ring`` for all_reduce,
       all_gather and reduce_scatter, ``pairwise`` all_to_all,
       ``scatter_allgather`` broadcast, ``rabenseifner`` reduce); all_reduce
       across hosts (``ranks_per_host`` below ``world``, dividing it) takes
       ``hierarchical``.
    3. A name not registered falls back to the op's first registered algorithm.
    """
    known = algorithms_for(op)
    if not known:
        raise AlgoError(f"commlens implements no algorithms for {op!r}; it does for {', '.join(ALGO_OPS)}")
    threshold, small, large = HEURISTIC[op]
    name = small if nbytes < threshold else large
    if (
        nbytes >= threshold
        and op in MULTI_HOST_LARGE
        and ranks_per_host is not None
        and 1 < ranks_per_host < world
        and world % ranks_per_host == 0
    ):
        name = MULTI_HOST_LARGE[op]
    return name if name in known else known[0]


@dataclass(frozen=True)
class Choice:
    """What ``auto`` runs: the algorithm, the chunk size it was tuned with, and where the choice came from."""

    algo: str
    chunk_bytes: int | None
    source: str  # "table" or "heuristic"


def lookup(op: str, nbytes: int, world: int, table: TuningTable | None = _UNSET) -> Choice:  # type: ignore[assignment]
    """The table's choice for ``op`` at ``nbytes`` on ``world`` ranks, else the built-in rule's."""
    if table is _UNSET:
        table = loaded_table()
    per_host = _hint_ranks_per_host(world)
    entry = table.find(op, world, per_host) if table is not None else None
    if entry is None:
        return Choice(heuristic(op, nbytes, world, per_host), None, "heuristic")
    bucket = entry.bucket_for(nbytes)
    return Choice(bucket.algo, bucket.chunk_bytes, "table")


def choose(op: str, nbytes: int, world: int) -> str:
    """The algorithm ``algo="auto"`` runs for ``op`` with ``nbytes`` (nccl-tests size) on ``world`` ranks."""
    return lookup(op, nbytes, world).algo


def with_entries(table: TuningTable | None, entries: Iterable[Entry], command_line: str = "") -> TuningTable:
    """``table`` (None: empty) with ``entries`` added, replacing those with the same key."""
    fresh = new_table(entries, command_line)
    return fresh if table is None else table.merged(fresh)
