"""Training-step projection: step time, throughput, FLOP/s, MFU and memory of a workload on a cluster.

- :func:`run`: one :class:`Scenario` (workload x topology x :class:`ParallelLayout` x GPUs, the network model)
  -> :class:`Projection`; :func:`project` builds the scenario from those arguments and runs it.
- :func:`commlens.project.sweep.run_sweep`: what-if grids (imported on use).
- :func:`commlens.project.validation_report.validation_report`: error against published runs, with its verdict.
Infeasible layouts raise :class:`InfeasibleLayoutError` carrying the reason.
"""

from commlens.project.errors import InfeasibleLayoutError, ProjectionError
from commlens.project.hardware import Device, device_for
from commlens.project.layout import ParallelLayout, resolve
from commlens.project.scenario import Scenario
from commlens.project.step import Projection, model_flops_per_step, project, run

__all__ = [
    "Device",
    "InfeasibleLayoutError",
    "ParallelLayout",
    "Projection",
    "ProjectionError",
    "Scenario",
    "device_for",
    "model_flops_per_step",
    "project",
    "resolve",
    "run",
]
