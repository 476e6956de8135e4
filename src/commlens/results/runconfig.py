"""What a run was set up with, by kind: ``Run.config`` as a typed union, not a free-form object.

- :class:`BenchSettings`: a ``commlens bench`` sweep (``BenchConfig.as_dict()`` and how rows were timed);
- :class:`IngestedSettings`: what another tool's output said of its run (per format: nccl-tests' runs, PARAM's
  ops, NCCL Inspector's communicators), and the file it came from;
- :class:`MonitorJob`: a training job's monitor on one rank, with its windows (typed :class:`WindowRow` s);
- :class:`ReplayRun`: a replayed job, its plan and the comparison with the recorded job.

On disk (``commlens.run/5`` and the store's ``config`` column) a config is the object it always was with its
``"kind"`` first. Older files and store rows carry no kind: :func:`config_from_wire` takes it from the run's
``source``, as every writer set it (the upgrader). Adding a kind is one class here and one line in ``_KINDS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Literal

from typing_extensions import Self

from commlens.errors import CommlensError
from commlens.results.jsonvalue import JsonObject, JsonValue
from commlens.results.units import finite_float

if TYPE_CHECKING:
    from commlens.results.collectives import WindowRow

__all__ = [
    "RUN_CONFIGS",
    "RUN_KINDS",
    "BenchSettings",
    "ConfigFormatError",
    "IngestedSettings",
    "MonitorJob",
    "ReplayRun",
    "RunConfig",
    "RunKind",
    "config_from_wire",
    "kind_of_source",
]

RunKind = Literal["bench", "ingested", "monitor", "replay"]
MAX_TEXT = 2000  # characters of a text field of a config (a job id, a model's description)


class ConfigFormatError(CommlensError, ValueError):
    """A run's config that is not one of the kinds (the message names the field)."""


def _text(d: Mapping[str, JsonValue], key: str, default: str | None = None) -> str:
    value = d.get(key, default)
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise ConfigFormatError(f"config.{key}: expected a string of at most {MAX_TEXT} characters")
    return value


def _count(d: Mapping[str, JsonValue], key: str) -> int:
    value = d.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ConfigFormatError(f"config.{key}: expected an integer >= 0")
    return value


def _object(d: Mapping[str, JsonValue], key: str) -> JsonObject:
    value = d.get(key, {})
    if not isinstance(value, dict):
        raise ConfigFormatError(f"config.{key}: expected an object")
    return dict(value)


def _texts(d: Mapping[str, JsonValue], key: str) -> tuple[str, ...]:
    value = d.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigFormatError(f"config.{key}: expected a list of strings")
    return tuple(str(v) for v in value)


def _without_kind(values: Mapping[str, JsonValue]) -> JsonObject:
    return {k: v for k, v in values.items() if k != "kind"}


@dataclass(frozen=True)
class _Settings:
    """Settings another stage or tool owns the fields of, kept as the JSON object it wrote (``kind`` aside)."""

    KIND: ClassVar[RunKind]
    values: JsonObject = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", _without_kind(self.values))

    def as_dict(self) -> JsonObject:
        return {"kind": self.KIND, **self.values}

    @classmethod
    def from_dict(cls, d: JsonObject) -> Self:
        return cls(d)


@dataclass(frozen=True)
class BenchSettings(_Settings):
    """A ``commlens bench`` sweep's settings as bench wrote them (its ``BenchConfig.as_dict()`` and ``timing``):
    bench owns their fields, this stage reads the few it needs through the typed getters below."""

    KIND: ClassVar[RunKind] = "bench"

    def number(self, name: str) -> float | None:
        """A numeric setting (an int stays an int); None when absent or not a number."""
        value = self.values.get(name)
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    def integer(self, name: str) -> int | None:
        value = self.values.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def names(self, name: str) -> tuple[str, ...]:
        """A list-of-names setting (``dtypes``, ``ops``); empty when absent."""
        value = self.values.get(name)
        return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()

    def extra_text(self, name: str) -> str | None:
        """A string of the sweep's ``extra`` settings (``tag``, ``revision``)."""
        extra = self.values.get("extra")
        value = extra.get(name) if isinstance(extra, dict) else None
        return value if isinstance(value, str) else None


@dataclass(frozen=True)
class IngestedSettings(_Settings):
    """What another tool's output said of its run, as its reader kept it (per format; JSON from outside)."""

    KIND: ClassVar[RunKind] = "ingested"

    def with_file(self, name: str) -> IngestedSettings:
        """These settings with ``ingested_from``: the file they were read from (kept if already set)."""
        return self if "ingested_from" in self.values else IngestedSettings({**self.values, "ingested_from": name})


@dataclass(frozen=True)
class MonitorJob:
    """The monitor of one rank of a training job: its windows (at most the newest 2,000), checked when read.
    ``dropped_windows`` counts the windows a stored run held that were not well-formed (not written back)."""

    KIND: ClassVar[RunKind] = "monitor"
    job_id: str
    rank: int
    window_s: float
    window_steps: int | None
    model: str
    windows: tuple[WindowRow, ...]
    size_buckets: tuple[str, ...]
    dropped_windows: int = 0

    def as_dict(self) -> JsonObject:
        return {
            "kind": self.KIND,
            "job_id": self.job_id,
            "rank": self.rank,
            "window_s": self.window_s,
            "window_steps": self.window_steps,
            "model": self.model,
            "windows": [w.as_wire() for w in self.windows],
            "size_buckets": list(self.size_buckets),
        }

    @classmethod
    def from_dict(cls, d: JsonObject) -> MonitorJob:
        # collectives builds measurements (records), and records holds a RunConfig: imported when first read
        from commlens.results.collectives import CollectiveRecordError, window_from_wire

        windows = d.get("windows", [])
        if not isinstance(windows, list):
            raise ConfigFormatError("config.windows: expected a list of window objects")
        kept = []
        for w in windows:
            try:
                kept.append(window_from_wire(w))
            except CollectiveRecordError:
                continue  # counted in dropped_windows: one bad window does not lose the job
        width = finite_float(d.get("window_s"))
        steps = d.get("window_steps")
        if width is None:
            raise ConfigFormatError("config.window_s: expected a finite number")
        if steps is not None and (not isinstance(steps, int) or isinstance(steps, bool)):
            raise ConfigFormatError("config.window_steps: expected an integer or null")
        return cls(
            job_id=_text(d, "job_id"),
            rank=_count(d, "rank"),
            window_s=width,
            window_steps=steps,
            model=_text(d, "model", ""),
            windows=tuple(kept),
            size_buckets=_texts(d, "size_buckets"),
            dropped_windows=len(windows) - len(kept),
        )


@dataclass(frozen=True)
class ReplayRun:
    """A replayed job: where its plan came from, the replay's settings and the comparison with the recorded
    job (replay's own records as JSON: ``ReplaySettings.as_dict()``, ``ReplayComparison.as_dict()``)."""

    KIND: ClassVar[RunKind] = "replay"
    plan_source: str
    plan_backend: str | None  # where the source says
    plan_world_size: int
    plan_calls: int
    plan_files: tuple[str, ...]
    settings: JsonObject
    comparison: JsonObject

    def as_dict(self) -> JsonObject:
        replay: JsonObject = {
            "plan_source": self.plan_source,
            "plan_backend": self.plan_backend,
            "plan_world_size": self.plan_world_size,
            "plan_calls": self.plan_calls,
            "plan_files": list(self.plan_files),
            "settings": self.settings,
            "comparison": self.comparison,
        }
        return {"kind": self.KIND, "replay": replay}

    @classmethod
    def from_dict(cls, d: JsonObject) -> ReplayRun:
        replay = _object(d, "replay")
        return cls(
            plan_source=_text(replay, "plan_source"),
            plan_backend=None if replay.get("plan_backend") is None else _text(replay, "plan_backend"),
            plan_world_size=_count(replay, "plan_world_size"),
            plan_calls=_count(replay, "plan_calls"),
            plan_files=_texts(replay, "plan_files"),
            settings=_object(replay, "settings"),
            comparison=_object(replay, "comparison"),
        )


RunConfig = BenchSettings | IngestedSettings | MonitorJob | ReplayRun
RUN_CONFIGS = (BenchSettings, IngestedSettings, MonitorJob, ReplayRun)  # for isinstance

_KINDS: dict[str, type[RunConfig]] = {kind.KIND: kind for kind in RUN_CONFIGS}
RUN_KINDS: tuple[str, ...] = tuple(_KINDS)

# The kind of a config with none (commlens.run/1-4, store rows before it), by the run's source as every writer
# set it; any other source is a tool whose output was ingested.
_KIND_OF_SOURCE: dict[str, RunKind] = {"commlens": "bench", "monitor": "monitor", "replay": "replay"}


def kind_of_source(source: str) -> RunKind:
    """The kind of config a run of ``source`` carried before configs named their kind."""
    return _KIND_OF_SOURCE.get(source, "ingested")


def config_from_wire(d: JsonValue, source: str) -> RunConfig:
    """A run's config from its JSON object (a file's ``config``, a store row's column): by its ``kind``, else
    (an older file or row) by the run's ``source``. :class:`ConfigFormatError` names what is wrong."""
    if not isinstance(d, dict):
        raise ConfigFormatError(f"config: expected an object, got {type(d).__name__}")
    kind = d.get("kind", kind_of_source(source))
    if not isinstance(kind, str) or kind not in _KINDS:
        raise ConfigFormatError(f"config.kind: expected one of {', '.join(RUN_KINDS)}, got {str(kind)[:40]!r}")
    return _KINDS[kind].from_dict(d)
