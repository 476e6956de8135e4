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

The file's records are pydantic models (:class:`Bucket`, :class:`Entry`,
:class:`TuningTable`); their first validation error is reported as
``FILE: entries[i] (op, N ranks).buckets[j].field: reason``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

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


class _FieldError(ValueError):
    """A check of the tuning file's models that names where it failed.

    ``at``: the path below the field or model being validated (``(1, "min_bytes")`` under ``buckets``);
    ``of_model``: the reason is about the model holding the field, so it is reported at the model.
    """

    def __init__(self, reason: str, at: tuple[str | int, ...] = (), *, of_model: bool = False) -> None:
        super().__init__(reason)
        self.reason, self.at, self.of_model = reason, at, of_model


class _Record(BaseModel):
    # unknown keys are ignored, as before the models: a newer commlens may add a field to the same format
    model_config = ConfigDict(frozen=True, extra="ignore")


class Bucket(_Record):
    """Sizes ``min_bytes <= n < max_bytes`` (None: unbounded) and the algorithm that won at ``size_bytes``."""

    min_bytes: StrictInt = Field(description="the smallest size the bucket holds")
    max_bytes: StrictInt | None = Field(None, description="the first size it no longer holds (None: unbounded)")
    size_bytes: StrictInt = Field(description="the size measured for this bucket")
    algo: StrictStr = Field(description="the algorithm that won at size_bytes")
    chunk_bytes: Annotated[StrictInt, Field(gt=0)] | None = Field(
        None, description="the chunk size it was measured with (None: the algorithm's default)"
    )
    times_s: dict[str, Annotated[StrictFloat, Field(ge=0)]] = Field(
        default_factory=dict, description="candidate -> measured time"
    )

    @model_validator(mode="after")
    def _max_above_min(self) -> Bucket:
        if self.max_bytes is not None and self.max_bytes <= self.min_bytes:
            raise _FieldError(f"expected {_expected_max(self.min_bytes)}, got {self.max_bytes!r}", ("max_bytes",))
        return self

    def holds(self, nbytes: int) -> bool:
        return self.min_bytes <= nbytes and (self.max_bytes is None or nbytes < self.max_bytes)

    def ranked(self) -> list[tuple[str, float]]:
        """Commlens candidates (not the built-in), fastest first."""
        return sorted(((a, t) for a, t in self.times_s.items() if a != BUILTIN), key=lambda at: at[1])


def _expected_max(min_bytes: Any) -> str:
    return f"a whole number above min_bytes {min_bytes} or null"


def _as_text(value: Any) -> str:
    return str(value)


class Entry(_Record):
    """One op at one rank count and layout: its size buckets, and where it was measured."""

    op: StrictStr = Field(description="the op tuned (one of ALGO_OPS)")
    world_size: StrictInt = Field(description="ranks it was measured on")
    ranks_per_host: StrictInt = Field(description="ranks per host it was measured with (absent: world_size)")
    backend: Annotated[str, BeforeValidator(_as_text)] = Field("", description="torch.distributed backend")
    device: Annotated[str, BeforeValidator(_as_text)] = Field("", description="device type (cpu, cuda)")
    context: Mapping[str, object] = Field(
        default_factory=dict, description="fingerprint, hosts, run id, stat, cpu model ... (shown, not relied on)"
    )
    buckets: tuple[Bucket, ...] = Field(min_length=1, description="sorted, contiguous, from 0 to unbounded")

    @model_validator(mode="before")
    @classmethod
    def _one_host_by_default(cls, data: Any) -> Any:
        if isinstance(data, dict) and "ranks_per_host" not in data and "world_size" in data:
            return {**data, "ranks_per_host": data["world_size"]}
        return data

    @field_validator("op")
    @classmethod
    def _implemented(cls, op: str) -> str:
        if op not in ALGO_OPS:
            raise _FieldError(f"commlens implements no algorithms for {op!r}; it does for {', '.join(ALGO_OPS)}")
        return op

    @field_validator("ranks_per_host")
    @classmethod
    def _within_world(cls, ranks_per_host: int, info: ValidationInfo) -> int:
        world = info.data.get("world_size")
        if world is not None and (world < 1 or not 1 <= ranks_per_host <= world):
            raise _FieldError(
                f"world_size {world!r} and ranks_per_host {ranks_per_host!r} must satisfy "
                "1 <= ranks_per_host <= world_size",
                of_model=True,
            )
        return ranks_per_host

    @field_validator("buckets")
    @classmethod
    def _registered_and_contiguous(cls, buckets: tuple[Bucket, ...], info: ValidationInfo) -> tuple[Bucket, ...]:
        op = info.data.get("op")
        if op is not None:
            known = algorithms_for(op)
            everything = algorithms_for(op, schemes=True)
            for i, b in enumerate(buckets):
                if b.algo not in everything:
                    raise _FieldError(
                        f"unknown {op} algorithm {b.algo!r}; known: {', '.join(known) or 'none'}", (i, "algo")
                    )
        if buckets[0].min_bytes != 0:
            raise _FieldError(f"the first bucket must start at 0, not {buckets[0].min_bytes}", (0, "min_bytes"))
        for i, (a, b) in enumerate(zip(buckets, buckets[1:])):
            if a.max_bytes != b.min_bytes:
                raise _FieldError(
                    f"{b.min_bytes} does not continue the previous bucket's max_bytes {a.max_bytes} "
                    "(buckets must be sorted and contiguous)",
                    (i + 1, "min_bytes"),
                )
        if buckets[-1].max_bytes is not None:
            raise _FieldError("the last bucket must be unbounded (null)", (len(buckets) - 1, "max_bytes"))
        return buckets

    @property
    def key(self) -> tuple[str, int, int, str, str]:
        """Entries with the same key describe the same experiment; a newer one replaces an older one."""
        return (self.op, self.world_size, self.ranks_per_host, self.backend, self.device)

    def bucket_for(self, nbytes: int) -> Bucket:
        for b in self.buckets:
            if b.holds(nbytes):
                return b
        raise TuningError(f"{self.op} at {self.world_size} ranks: no bucket holds {nbytes} B")  # validated away


class TuningTable(_Record):
    """Every tuned entry, and when and how the table was made."""

    created_at: Annotated[str, BeforeValidator(_as_text)] = Field("", description="ISO 8601, UTC")
    command_line: Annotated[str, BeforeValidator(_as_text)] = Field("", description="the command that made it")
    entries: tuple[Entry, ...] = Field(description="at most one per key (op, ranks, ranks per host, backend, device)")

    @model_validator(mode="after")
    def _one_entry_per_experiment(self) -> TuningTable:
        seen: set[tuple[str, int, int, str, str]] = set()
        for i, e in enumerate(self.entries):
            if e.key in seen:
                raise _FieldError(
                    f"a second entry for {e.op} at {e.world_size} ranks "
                    f"({e.ranks_per_host} per host, {e.backend}/{e.device})",
                    ("entries", i),
                )
            seen.add(e.key)
        return self

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
        return TuningTable(entries=kept + newer.entries, created_at=newer.created_at, command_line=newer.command_line)


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
    context: Mapping[str, object] | None = None,
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
        buckets.append(
            Bucket(
                min_bytes=low, max_bytes=high, size_bytes=size, algo=best, chunk_bytes=chunk_bytes, times_s=candidates
            )
        )
    return Entry(
        op=op,
        world_size=world_size,
        ranks_per_host=ranks_per_host,
        backend=backend,
        device=device,
        context=dict(context or {}),
        buckets=tuple(buckets),
    )


# ---- the file -------------------------------------------------------------------------------------


def table_to_dict(table: TuningTable) -> dict[str, object]:
    """The file's JSON object: the format, then the table's fields in their order (lists, not tuples)."""
    return {
        "format": FORMAT,
        **table.model_dump(exclude={"entries"}),
        "entries": [
            {**e.model_dump(exclude={"buckets"}), "buckets": [b.model_dump() for b in e.buckets]} for e in table.entries
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


def table_from_dict(data: Any, source: str = "tuning table") -> TuningTable:
    """Validate and build a table; :class:`TuningError` names ``source`` and the offending field."""
    if not isinstance(data, dict):
        raise TuningError(f"{source}: not a tuning table (expected a JSON object)")
    fmt = data.get("format")
    if not isinstance(fmt, str) or not fmt.startswith(_FORMAT_PREFIX):
        raise TuningError(f"{source}: not a tuning table (format {fmt!r}, expected {FORMAT!r})")
    if fmt != FORMAT:
        raise TuningError(f"{source}: format {fmt!r} is not one this commlens reads ({FORMAT!r})")
    try:
        return TuningTable.model_validate(data)
    except ValidationError as e:
        raise TuningError(_describe(e.errors()[0], data, source)) from None


# What a field that fails its type or range holds, where "expected <type name>" would say too little.
# Each takes the object holding the field.
_EXPECTED: dict[str, Callable[[Any], str]] = {
    "max_bytes": lambda bucket: _expected_max(bucket.get("min_bytes")),
    "chunk_bytes": lambda _: "a positive whole number or null",
    "times_s": lambda _: "{algorithm: seconds >= 0}",
}
_TYPE_NAMES = {
    "int_type": "int",
    "string_type": "str",
    "float_type": "float",
    "list_type": "list",
    "tuple_type": "list",
    "dict_type": "an object",
    "model_type": "an object",
}


def _describe(err: Any, data: Mapping[str, object], source: str) -> str:
    """The first pydantic error as ``SOURCE: entries[i] (op, N ranks).field: reason``, as the file's readers quote
    it: entries that passed their op and rank count are named by them."""
    loc: tuple[str | int, ...] = tuple(err["loc"])
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, _FieldError):
        at = loc[:-1] if cause.of_model else loc + cause.at
        return f"{_where(at, data, source)}: {cause.reason}"
    if err["type"] == "missing":
        return f"{_where(loc[:-1], data, source, missing=loc[-1])}: missing {loc[-1]!r}"
    if err["type"] == "too_short":
        return f"{_where(loc, data, source)}: empty"
    field = next((i for i, part in enumerate(loc) if part in _EXPECTED), None)
    if field is not None:
        loc = loc[: field + 1]
        value = _at(data, loc)
        expected = _EXPECTED[str(loc[-1])](_at(data, loc[:-1]))
    else:
        value = err.get("input")
        expected = _TYPE_NAMES.get(err["type"], err["msg"])
    return f"{_where(loc, data, source)}: expected {expected}, got {value!r}"


def _at(data: Any, loc: tuple[str | int, ...]) -> Any:
    for part in loc:
        data = data[part]
    return data


def _where(
    loc: tuple[str | int, ...], data: Mapping[str, object], source: str, missing: str | int | None = None
) -> str:
    """``loc`` as the messages name it: ``SOURCE: entries[2] (all_reduce, 4 ranks).buckets[1].algo``
    (``missing``: the key missing under ``loc``)."""
    text, rest = source, loc
    if len(loc) >= 2 and loc[0] == "entries":
        text, rest = f"{source}: entries[{loc[1]}]", loc[2:]
        if (rest[0] if rest else missing) in ("context", "buckets"):  # checked after the op and the rank count
            entry = _at(data, loc[:2])
            text += f" ({entry['op']}, {entry['world_size']} ranks)"
    return text + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in rest)


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
    return TuningTable(entries=tuple(entries), created_at=now, command_line=command_line)


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


def lookup(
    op: str,
    nbytes: int,
    world: int,
    table: TuningTable | None = _UNSET,  # type: ignore[assignment]  # _UNSET: read the default table; None: none
    *,
    ranks_per_host: int | None = None,
) -> Choice:
    """The table's choice for ``op`` at ``nbytes`` on ``world`` ranks, else the built-in rule's.

    ``ranks_per_host`` (None: not known) picks among entries of several layouts and lets the rule see several hosts.
    """
    if table is _UNSET:
        table = loaded_table()
    if ranks_per_host is not None:
        ranks_per_host = min(ranks_per_host, world)
    entry = table.find(op, world, ranks_per_host) if table is not None else None
    if entry is None:
        return Choice(heuristic(op, nbytes, world, ranks_per_host), None, "heuristic")
    bucket = entry.bucket_for(nbytes)
    return Choice(bucket.algo, bucket.chunk_bytes, "table")


def choose(op: str, nbytes: int, world: int, *, ranks_per_host: int | None = None) -> str:
    """The algorithm ``algo="auto"`` runs for ``op`` with ``nbytes`` (nccl-tests size) on ``world`` ranks."""
    return lookup(op, nbytes, world, ranks_per_host=ranks_per_host).algo


def with_entries(table: TuningTable | None, entries: Iterable[Entry], command_line: str = "") -> TuningTable:
    """``table`` (None: empty) with ``entries`` added, replacing those with the same key."""
    fresh = new_table(entries, command_line)
    return fresh if table is None else table.merged(fresh)
