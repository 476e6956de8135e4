"""Training-step projection: step time, throughput, FLOP/s, MFU and memory of a workload on a cluster.

- :func:`project`: one workload x topology x :class:`ParallelLayout` x GPUs -> :class:`Projection`.
- :func:`commlens.project.sweep.run_sweep`: what-if grids (imported on use).
- :func:`commlens.project.validate.validate_megatron`: error against published runs.
Infeasible layouts raise :class:`InfeasibleLayoutError` carrying the reason.
"""

from commlens.project.errors import InfeasibleLayoutError, ProjectionError
from commlens.project.hardware import Device, device_for
from commlens.project.layout import ParallelLayout, resolve
from commlens.project.step import Projection, model_flops_per_step, project

__all__ = [
    "Device",
    "InfeasibleLayoutError",
    "ParallelLayout",
    "Projection",
    "ProjectionError",
    "device_for",
    "model_flops_per_step",
    "project",
    "resolve",
]
