"""The simulator's options as one record, checked in one place (``commlens sim``, ``project --network sim``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from commlens.sim.fabric import Fault, SimError, parse_fault
from commlens.sim.routing import ROUTINGS

__all__ = ["SEED_MAX", "SimOptions"]

SEED_MAX = 2**32 - 1


@dataclass(frozen=True)
class SimOptions:
    """How a simulation runs; :class:`SimError` naming the field when one is out of range. Plain data (a sweep
    ships it to its workers) and hashable (the projection caches simulated terms by it)."""

    routing: str = "ecmp"  # ecmp (seeded per-flow hash) or spray (ideal spreading over every path)
    seed: int = 0  # ECMP's hash seed, 0 to SEED_MAX
    qps: int = 1  # queue pairs each connection is split over (NCCL_IB_QPS_PER_CONNECTION), 1 to 64
    channels: int = 2  # NCCL channels between each pair of ranks, each its own connection, 1 to 32
    faults: tuple[Fault, ...] = ()  # failed or degraded switches, NICs and cables

    def __post_init__(self) -> None:
        if self.routing not in ROUTINGS:
            raise SimError(f"routing: {self.routing!r}; known: {', '.join(ROUTINGS)}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed <= SEED_MAX:
            raise SimError(f"seed: must be between 0 and {SEED_MAX}, got {self.seed}")
        if isinstance(self.qps, bool) or not isinstance(self.qps, int) or not 1 <= self.qps <= 64:
            raise SimError(f"qps: must be between 1 and 64, got {self.qps}")
        if isinstance(self.channels, bool) or not isinstance(self.channels, int) or not 1 <= self.channels <= 32:
            raise SimError(f"channels: must be between 1 and 32, got {self.channels}")
        if not all(isinstance(f, Fault) for f in self.faults):
            raise SimError("faults: each must be a Fault (see parse_fault)")

    @classmethod
    def parse(
        cls,
        *,
        routing: str = "ecmp",
        seed: int = 0,
        qps: int = 1,
        channels: int = 2,
        fail: Iterable[str] = (),
        degrade: Iterable[str] = (),
    ) -> SimOptions:
        """The options from what a user types: fault names to fail, ``NAME:FACTOR`` to degrade."""
        faults = tuple(parse_fault(f, False) for f in fail) + tuple(parse_fault(d, True) for d in degrade)
        return cls(routing, seed, qps, channels, faults)

    def as_dict(self) -> dict[str, str | int]:
        """The scalar options as a run document records them (faults are described with the fabric)."""
        return {"routing": self.routing, "seed": self.seed, "qps": self.qps, "channels": self.channels}
