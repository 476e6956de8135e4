"""What one projection takes, as one record: :class:`Scenario`, the input of :func:`commlens.project.run`.

A scenario is resolved: a loaded workload and topology and a checked layout, not preset names. The command line
builds it once from presets and overrides (:func:`commlens.project.sweep.point_scenario`), a Python caller from
objects it already has; :func:`commlens.project.run` turns it into a :class:`commlens.project.Projection`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from commlens.project.errors import InfeasibleLayoutError, ProjectionError
from commlens.project.frameworks import Framework, framework
from commlens.project.layout import ParallelLayout
from commlens.topology import Topology
from commlens.workload import Workload

if TYPE_CHECKING:
    from commlens.sim import SimOptions

__all__ = ["Scenario"]


@dataclass(frozen=True)
class Scenario:
    """One training step to project: what runs, where, how it is split, and how the network is modelled.

    Checked when built: :class:`ProjectionError` naming the field for a wrong type, and the GPU count's
    :class:`InfeasibleLayoutError` (``divides``) as the layout's resolution words it. Whether the layout fits the
    workload, the GPU count and the cluster is the projection's answer (:func:`commlens.project.run`)."""

    workload: Workload
    topology: Topology
    layout: ParallelLayout
    gpus: int  # GPUs in the job
    accelerators: tuple[str, ...] | None = None  # accelerators files over the shipped figures (None: $COMMLENS_...)
    sim: SimOptions | None = None  # the network simulated with these options (commlens.sim); None: analytic
    check_memory: bool = True  # refuse a layout over the GPU's memory by more than the memory model's error

    def __post_init__(self) -> None:
        for name, kind in (("workload", Workload), ("topology", Topology), ("layout", ParallelLayout)):
            if not isinstance(getattr(self, name), kind):
                raise ProjectionError(f"{name}: must be a {kind.__name__}, got {type(getattr(self, name)).__name__}")
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int):
            raise ProjectionError(f"gpus: must be a whole number, got {self.gpus!r}")
        if self.gpus < 1:
            raise InfeasibleLayoutError(f"gpus must be >= 1, got {self.gpus}", "divides")
        files = self.accelerators
        if files is not None and (not isinstance(files, tuple) or not all(isinstance(f, str) for f in files)):
            raise ProjectionError(f"accelerators: must be a tuple of file names, got {files!r}")
        if self.sim is not None:
            from commlens.sim import SimOptions

            if not isinstance(self.sim, SimOptions):
                raise ProjectionError(f"sim: must be SimOptions or None, got {type(self.sim).__name__}")
        if not isinstance(self.check_memory, bool):
            raise ProjectionError(f"check_memory: must be true or false, got {self.check_memory!r}")

    @property
    def network(self) -> str:
        """``analytic`` (each collective alone on the fabric, as NCCL runs it: :func:`commlens.model.backends.nccl_predict`) or ``sim`` (every group of a
        dimension at once, :mod:`commlens.sim`)."""
        return "analytic" if self.sim is None else "sim"

    @property
    def framework(self) -> Framework:
        """The training stack's profile the layout names (:mod:`commlens.project.frameworks`)."""
        return framework(self.layout.framework)
