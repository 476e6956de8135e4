"""How a plan is replayed: one small settings record, checked when built, handed to every rank as JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import TypeVar

from commlens.errors import CommlensError
from commlens.results.jsonvalue import JsonObject

__all__ = ["GAP_STAND_IN", "GAP_STAND_INS", "ReplaySettings", "ReplaySettingsError"]

# What stands in for the compute between two calls when gaps are replayed (--compute).
GAP_STAND_INS: dict[str, str] = {
    "spin": "compute on the rank's main thread for the recorded gap (32x32 matrix products, back to back): it "
    "holds a core as the job's compute did (on CPU ranks, gloo's threads compete for cores with it as with real "
    "compute) but moves little memory",
    "sleep": "an idle wait of the recorded gap (time.sleep to within 2 ms, then a spin): the rank holds no core, "
    "so the backend's threads run uncontended",
}
GAP_STAND_IN = GAP_STAND_INS["spin"]


class ReplaySettingsError(CommlensError, ValueError):
    """Replay settings that cannot run (the message names the option)."""


@dataclass(frozen=True)
class ReplaySettings:
    """Options of ``commlens replay run``, each checked at construction."""

    backend: str = "gloo"  # the backend the replay runs on (change one thing: --backend)
    device: str = "cpu"  # cpu for gloo, cuda for nccl
    algo: str = "builtin"  # a commlens algorithm instead of the backend's collectives (--algo)
    gaps: bool = True  # wait the recorded gap before each call (False: --no-gaps, back to back)
    compute: str = "spin"  # the gap's stand-in (GAP_STAND_INS)
    timeline: bool = False  # issue each call at its recorded offset, asynchronously (--timeline), as the job did
    size_scale: float = 1.0  # every message's element count times this (--scale-sizes)
    warmup_passes: int = 1  # passes over the plan before the measured ones
    passes: int = 1  # measured passes over the plan
    timeout_s: float = 300.0  # a collective or the start-up waiting longer fails the replay

    def __post_init__(self) -> None:
        if self.device not in ("cpu", "cuda"):
            raise ReplaySettingsError(f"device must be cpu or cuda, got {self.device!r}")
        if self.timeline and not self.gaps:
            raise ReplaySettingsError("--timeline replays the recorded issue times: it cannot go with --no-gaps")
        if self.compute not in GAP_STAND_INS:
            raise ReplaySettingsError(f"--compute must be one of {', '.join(GAP_STAND_INS)}, got {self.compute!r}")
        if not 0 < self.size_scale <= 1024:
            raise ReplaySettingsError(f"--scale-sizes must be in (0, 1024], got {self.size_scale}")
        if not 0 <= self.warmup_passes <= 100:
            raise ReplaySettingsError(f"--warmup-passes must be in 0..100, got {self.warmup_passes}")
        if not 1 <= self.passes <= 1000:
            raise ReplaySettingsError(f"--passes must be in 1..1000, got {self.passes}")
        if not 0 < self.timeout_s <= 86400:
            raise ReplaySettingsError(f"--timeout must be in (0, 86400] seconds, got {self.timeout_s}")

    def as_dict(self) -> JsonObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> ReplaySettings:
        """Settings as ``as_dict`` wrote them (a file the ranks read), each field's type checked; a field left out
        takes its default."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ReplaySettingsError(f"unknown replay settings: {', '.join(unknown)}")
        base = cls()
        return cls(
            backend=_typed(d, "backend", base.backend),
            device=_typed(d, "device", base.device),
            algo=_typed(d, "algo", base.algo),
            gaps=_typed(d, "gaps", base.gaps),
            compute=_typed(d, "compute", base.compute),
            timeline=_typed(d, "timeline", base.timeline),
            size_scale=_typed(d, "size_scale", base.size_scale),
            warmup_passes=_typed(d, "warmup_passes", base.warmup_passes),
            passes=_typed(d, "passes", base.passes),
            timeout_s=_typed(d, "timeout_s", base.timeout_s),
        )


_T = TypeVar("_T", str, bool, int, float)


def _typed(d: Mapping[str, object], name: str, default: _T) -> _T:
    """``d[name]`` if it has the default's type (an integer for a float; a bool is no number), else an error."""
    if name not in d:
        return default
    v = d[name]
    kind = type(default)
    if isinstance(v, bool) and kind is not bool:
        raise ReplaySettingsError(f"replay setting {name}: expected {kind.__name__}, got {v!r}")
    if kind is float and isinstance(v, int):
        return kind(v)
    if not isinstance(v, kind):
        raise ReplaySettingsError(f"replay setting {name}: expected {kind.__name__}, got {v!r}")
    return v
