"""Result records: a run, its measurements and the system it ran on.

Records are immutable and check themselves when built: a measurement with no
samples or a negative time cannot exist. Derived figures (statistics, algBW,
busBW) are computed from the raw samples and the op catalog, never stored
independently of them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal, NamedTuple, TypeVar

from commlens.errors import CommlensError
from commlens.ops import OPS, get_op
from commlens.results.jsonvalue import JsonObject
from commlens.results.runconfig import RUN_CONFIGS, BenchSettings, RunConfig
from commlens.results.stats import TimeStats, summarize

__all__ = [
    "ANY",
    "ANY_SIZE",
    "DTYPE_SIZES",
    "FloorKey",
    "KeyOrder",
    "RecordError",
    "Measurement",
    "MeasurementKey",
    "SystemInfo",
    "Run",
    "RunStatus",
    "Series",
    "SeriesPattern",
    "RUN_STATUSES",
    "MAX_GROUP_NAME",
    "MAX_RANKS",
    "MAX_SIZE_BYTES",
    "omit_no_group",
]

_V = TypeVar("_V")

# Sane bounds a record refuses beyond: no job has a million ranks, no message a petabyte (a file claiming
# either is corrupted or hostile, and a rank list that long would not fit in memory).
MAX_RANKS = 2**20
MAX_SIZE_BYTES = 2**50
MAX_GROUP_NAME = 200  # characters of a process group's name (a longer one is not a name a job gave)

DTYPE_SIZES: dict[str, int] = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float64": 8,
    "int32": 4,
    "int64": 8,
    "int8": 1,
    "uint8": 1,
}

# complete: every row measured and checked (or not checked); incomplete: the job or the log stopped
# early; check_failed: the producer's results check failed (nccl-tests "Out of bounds values : N FAILED").
RunStatus = Literal["complete", "incomplete", "check_failed"]
RUN_STATUSES: tuple[str, ...] = ("complete", "incomplete", "check_failed")


class RecordError(CommlensError, ValueError):
    """A result record that would be inconsistent."""


# How MeasurementKey.order sorts: op, algo, dtype, redop, root, in_place, grouped, group, size_bytes.
KeyOrder = tuple[str, str, str, str, int, bool, bool, str, int]


class MeasurementKey(NamedTuple):
    """What makes two rows the same experiment. ``redop`` is None for an op that does not reduce, ``root``
    None for an op without a root, ``group`` None for a row not measured on one process group of a job."""

    op: str
    algo: str
    dtype: str
    redop: str | None
    root: int | None
    size_bytes: int
    in_place: bool
    group: str | None = None

    def order(self) -> KeyOrder:
        """Op, algo, dtype, redop, root, placement, group (none first), then size: a series' neighbours are
        its sizes."""
        root = -1 if self.root is None else self.root  # sorts before every rank
        grouped = self.group is not None
        return (
            self.op,
            self.algo,
            self.dtype,
            self.redop or "",
            root,
            self.in_place,
            grouped,
            self.group or "",
            self.size_bytes,
        )


def omit_no_group(fields: dict[str, _V]) -> dict[str, _V]:
    """``fields`` (a key's or a row's, as JSON output prints them) without ``group`` when it is None: what
    commlens prints of a benchmark row reads as it did before rows had process groups."""
    if fields.get("group", "") is None:
        fields = {k: v for k, v in fields.items() if k != "group"}
    return fields


class FloorKey(NamedTuple):
    """The series a noise floor belongs to: one measurement key on one system (``SystemInfo.fingerprint``)."""

    fingerprint: str
    key: MeasurementKey


SeriesValue = str | int | bool | None  # a field of a series: a key's field, a fingerprint or a tag


@dataclass(frozen=True)
class Series:
    """One series: a measurement key on one system (its fingerprint) under one tag. What detect splits the
    history into, what the store keeps change points, baselines and thresholds of, what the dashboard draws.

    The one record of a series: the API's series objects and the store's series columns are built from it
    (``fields``, ``store.convert.key_columns``), a selector of series is a :class:`SeriesPattern`."""

    key: MeasurementKey
    fingerprint: str
    tag: str | None

    def fields(self) -> dict[str, SeriesValue]:
        """Every field, flat: ``fingerprint``, ``tag``, then the key's (``group`` included), as the JSON API's
        series objects hold them."""
        return {"fingerprint": self.fingerprint, "tag": self.tag, **self.key._asdict()}

    def as_dict(self) -> JsonObject:
        """The key's fields, then ``fingerprint`` and ``tag``, as ``commlens detect --json`` prints a change;
        ``group`` only for a series of a process group, so a benchmark's report reads as it always did."""
        return {**omit_no_group(self.key._asdict()), "fingerprint": self.fingerprint, "tag": self.tag}


ANY = "*"  # a selector field that matches every value
ANY_SIZE = -1  # a selector's size_bytes that matches every size


@dataclass(frozen=True)
class SeriesPattern:
    """Series (and their rows) picked by a selector: each field a value or ``ANY``; ``size_bytes`` ``ANY_SIZE``
    for any size; ``tag`` and ``group`` None pick runs without a tag and rows without a process group. What a
    stored threshold applies to (``store.Threshold`` is a pattern with its settings)."""

    fingerprint: str = ANY
    tag: str | None = ANY
    op: str = ANY
    dtype: str = ANY
    size_bytes: int = ANY_SIZE
    group: str | None = ANY

    def pattern(self) -> SeriesPattern:
        """The selector alone (a subclass's other fields left out)."""
        return SeriesPattern(self.fingerprint, self.tag, self.op, self.dtype, self.size_bytes, self.group)

    def _given(self) -> list[tuple[str, SeriesValue]]:
        """The fields that name a value (not ANY), by name, in order: ``size`` for ``size_bytes``."""
        fields = (
            ("fingerprint", self.fingerprint),
            ("tag", self.tag),
            ("op", self.op),
            ("dtype", self.dtype),
            ("size", ANY if self.size_bytes == ANY_SIZE else self.size_bytes),
            ("group", self.group),
        )
        return [(name, value) for name, value in fields if value != ANY]

    @property
    def specificity(self) -> int:
        """How many fields name a value (not ANY): the more, the more specific."""
        return len(self._given())

    def matches(self, series: Series) -> bool:
        """Whether ``series`` (its rows of key ``series.key``) is one this pattern picks."""
        key = series.key
        return (
            self.fingerprint in (ANY, series.fingerprint)
            and (self.tag == ANY or self.tag == series.tag)
            and self.op in (ANY, key.op)
            and self.dtype in (ANY, key.dtype)
            and self.size_bytes in (ANY_SIZE, key.size_bytes)
            and (self.group == ANY or self.group == key.group)
        )

    def text(self) -> str:
        """``fingerprint=... op=all_reduce size=1048576`` (the fields given), or ``everything``."""
        given = [f"{name}={'(none)' if value is None else value}" for name, value in self._given()]
        return " ".join(given) or "everything"


@dataclass(frozen=True)
class Measurement:
    """One row of a sweep: one op, dtype, reduction, root, size and placement.

    ``samples_s`` holds one time per measured iteration: the max across ranks
    of that iteration's time. ``nwrong`` is None when results were not checked.
    ``redop`` is None for an op that does not reduce, ``root`` None for an op without a root.
    ``group`` names the process group a row measured inside a job ran on (None for a benchmark row);
    ``world_size`` is then that group's size, which may be less than the job's.
    """

    op: str
    dtype: str
    size_bytes: int
    count: int
    in_place: bool
    world_size: int
    samples_s: tuple[float, ...]
    redop: str | None = None
    root: int | None = None
    algo: str = "builtin"
    nwrong: int | None = None
    # Optional per-rank samples [rank][iteration], kept when the producer has them.
    rank_samples_s: tuple[tuple[float, ...], ...] | None = None
    # Statistics as another tool reported them, for rows ingested without samples.
    reported: TimeStats | None = None
    # Samples per round when the row was timed in several independent rounds (``bench --rounds``):
    # ``samples_s`` is their concatenation, round after round. None: one round (or not known).
    rounds: tuple[int, ...] | None = None
    # The process group's name when the row was measured inside a training job (``commlens.monitor``).
    group: str | None = None

    def __post_init__(self) -> None:
        spec = OPS.get(self.op)
        if spec is None:
            raise RecordError(f"unknown op {self.op!r}")
        if self.dtype not in DTYPE_SIZES:
            raise RecordError(f"unknown dtype {self.dtype!r}")
        if not 1 <= self.world_size <= MAX_RANKS:
            raise RecordError(f"world_size must be in 1..{MAX_RANKS}, got {self.world_size}")
        if not (0 <= self.size_bytes < MAX_SIZE_BYTES and 0 <= self.count < MAX_SIZE_BYTES):
            raise RecordError(f"size_bytes and count must be >= 0 and < {MAX_SIZE_BYTES}")
        if self.root is not None and not 0 <= self.root < MAX_RANKS:
            raise RecordError(f"root must be None (no root) or a rank < {MAX_RANKS}, got {self.root}")
        if not self.samples_s and self.reported is None:
            raise RecordError(f"{self.op} {self.size_bytes} B: no samples and no reported statistics")
        if self.reported is not None and not (self.reported.mean_s >= 0.0):
            raise RecordError(f"{self.op} {self.size_bytes} B: negative or NaN reported mean")
        if any(not (s >= 0.0) for s in self.samples_s):  # also rejects NaN
            raise RecordError(f"{self.op} {self.size_bytes} B: negative or NaN sample")
        if spec.reduces and self.redop is None:
            raise RecordError(f"{self.op} reduces: redop must be given")
        if not spec.reduces and self.redop is not None:
            raise RecordError(f"{self.op} does not reduce: redop must be None")
        if self.redop == "none":
            raise RecordError(f"{self.op}: redop 'none' is no reduction (None means none)")
        if self.group is not None and not (isinstance(self.group, str) and 1 <= len(self.group) <= MAX_GROUP_NAME):
            shown = f"{len(self.group)} characters" if isinstance(self.group, str) else type(self.group).__name__
            raise RecordError(f"group must be None (no group) or a name of 1..{MAX_GROUP_NAME} characters, got {shown}")
        if self.nwrong is not None and not 0 <= self.nwrong < MAX_SIZE_BYTES:
            raise RecordError(f"nwrong must be >= 0 and < {MAX_SIZE_BYTES}")
        if self.rounds is not None:
            object.__setattr__(self, "rounds", tuple(self.rounds))
            if not self.rounds or any(not isinstance(k, int) or isinstance(k, bool) or k < 1 for k in self.rounds):
                raise RecordError(f"{self.op} {self.size_bytes} B: rounds must be sample counts >= 1")
            if sum(self.rounds) != len(self.samples_s):
                raise RecordError(
                    f"{self.op} {self.size_bytes} B: rounds hold {sum(self.rounds)} samples, "
                    f"the row has {len(self.samples_s)}"
                )
        object.__setattr__(self, "samples_s", tuple(float(s) for s in self.samples_s))

    @property
    def round_count(self) -> int:
        """Independent rounds the samples came from (1 when the row was timed in one go)."""
        return len(self.rounds) if self.rounds is not None else 1

    def round_samples(self) -> list[tuple[float, ...]]:
        """The samples of each round, in the order the rounds ran (one tuple when there was one round)."""
        if self.rounds is None:
            return [self.samples_s]
        out, start = [], 0
        for k in self.rounds:
            out.append(self.samples_s[start : start + k])
            start += k
        return out

    @cached_property
    def stats(self) -> TimeStats:
        """From the samples when there are any, else as the producing tool reported them."""
        if self.samples_s:
            return summarize(self.samples_s)
        assert self.reported is not None  # __post_init__ refuses a measurement with neither
        return self.reported

    @property
    def has_samples(self) -> bool:
        return bool(self.samples_s)

    @property
    def busbw_factor(self) -> float:
        return get_op(self.op).busbw_factor(self.world_size)

    @property
    def algbw_bytes_per_s(self) -> float:
        """algBW from the mean time, as nccl-tests reports it."""
        return get_op(self.op).algbw(self.size_bytes, self.stats.mean_s)

    @property
    def busbw_bytes_per_s(self) -> float:
        return self.algbw_bytes_per_s * self.busbw_factor

    @property
    def algbw_p50_bytes_per_s(self) -> float | None:
        p50 = self.stats.p50_s
        return None if p50 is None else get_op(self.op).algbw(self.size_bytes, p50)

    @property
    def busbw_p50_bytes_per_s(self) -> float | None:
        algbw = self.algbw_p50_bytes_per_s
        return None if algbw is None else algbw * self.busbw_factor

    @property
    def key(self) -> MeasurementKey:
        """What makes two rows the same experiment."""
        return MeasurementKey(
            self.op, self.algo, self.dtype, self.redop, self.root, self.size_bytes, self.in_place, self.group
        )


@dataclass(frozen=True)
class SystemInfo:
    """Where a run ran. ``extra`` carries whatever else the producer knew."""

    world_size: int
    hosts: tuple[str, ...] = ()
    ranks_per_host: dict[str, int] = field(default_factory=dict)
    backend: str = ""
    backend_version: str = ""
    device: str = "cpu"
    device_names: tuple[str, ...] = ()
    torch_version: str = ""
    python_version: str = ""
    cpu_model: str = ""
    cpu_cores: int = 0
    os: str = ""
    commlens_version: str = ""
    env: dict[str, str] = field(default_factory=dict)
    extra: JsonObject = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 1 <= self.world_size <= MAX_RANKS:
            raise RecordError(f"world_size must be in 1..{MAX_RANKS}, got {self.world_size}")
        object.__setattr__(self, "hosts", tuple(self.hosts))
        object.__setattr__(self, "device_names", tuple(self.device_names))

    def fingerprint(self) -> str:
        """A short hash of what makes two runs comparable: same hardware, software, layout."""
        key = {
            "world_size": self.world_size,
            "nhosts": len(self.hosts),
            "ranks_per_host": sorted(self.ranks_per_host.values()),
            "backend": self.backend,
            "backend_version": self.backend_version,
            "device": self.device,
            "device_names": sorted(set(self.device_names)),
            "torch_version": self.torch_version,
            "cpu_model": self.cpu_model,
            "cpu_cores": self.cpu_cores,
        }
        blob = json.dumps(key, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


@dataclass(frozen=True)
class Run:
    """A benchmark run: its settings, its system, and every measured row."""

    run_id: str
    started_at: str  # ISO 8601, UTC
    system: SystemInfo
    measurements: tuple[Measurement, ...]
    status: RunStatus = "complete"
    finished_at: str | None = None
    tag: str | None = None
    revision: str | None = None
    command_line: str = ""
    source: str = "commlens"  # or the tool whose output was ingested
    config: RunConfig = field(default_factory=BenchSettings)  # what it was set up with, by kind
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.run_id:
            raise RecordError("run_id must not be empty")
        if self.status not in RUN_STATUSES:
            raise RecordError(f"status must be one of {', '.join(RUN_STATUSES)}, got {self.status!r}")
        if not isinstance(self.config, RUN_CONFIGS):
            raise RecordError(
                f"config must be a run config (commlens.results.runconfig), got {type(self.config).__name__}"
            )
        object.__setattr__(self, "measurements", tuple(self.measurements))
        object.__setattr__(self, "notes", tuple(self.notes))
        for m in self.measurements:
            # A row of one process group spans that group, which may be smaller than the job.
            if m.group is None and m.world_size != self.system.world_size:
                raise RecordError(f"measurement world_size {m.world_size} != run world_size {self.system.world_size}")
            if m.group is not None and m.world_size > self.system.world_size:
                raise RecordError(
                    f"group {m.group!r}: world_size {m.world_size} is larger than the run's {self.system.world_size}"
                )

    @property
    def world_size(self) -> int:
        return self.system.world_size

    def avg_busbw_bytes_per_s(self) -> float:
        """The nccl-tests footer: mean busBW over every row and placement."""
        rows = [m.busbw_bytes_per_s for m in self.measurements if m.op != "barrier"]
        return sum(rows) / len(rows) if rows else 0.0
