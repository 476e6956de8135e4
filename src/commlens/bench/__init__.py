"""Measurement: the benchmark as a library, its launcher, the per-rank worker, timing and validation.

``run(config, placement=..., on_event=...)`` runs a sweep and returns the :class:`Run`. Heavy modules (torch)
load only when a run starts (``worker``, ``collectives``, ``launcher``); importing this package stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from commlens.bench.config import BenchConfig, ConfigError
from commlens.bench.events import Event, Finished, Note, Progress, RowDone, Started

if TYPE_CHECKING:
    from commlens.bench.launcher import Placement
    from commlens.results.records import Run

__all__ = [
    "BenchConfig",
    "BenchFailure",
    "ConfigError",
    "Event",
    "Finished",
    "Local",
    "Note",
    "OnCluster",
    "Progress",
    "RowDone",
    "Started",
    "run",
]


def run(
    config: BenchConfig, *, placement: Placement | None = None, on_event: Callable[[Event], None] | None = None
) -> Run:
    """Run the sweep ``config`` on ``placement`` (default: 4 local ranks); see :func:`commlens.bench.launcher.run`."""
    from commlens.bench import launcher

    return launcher.run(config, placement=placement, on_event=on_event)


def __getattr__(name: str) -> object:
    if name in ("BenchFailure", "Local", "OnCluster"):
        from commlens.bench import launcher

        return getattr(launcher, name)
    raise AttributeError(f"module 'commlens.bench' has no attribute {name!r}")
