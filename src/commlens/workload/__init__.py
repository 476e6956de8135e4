"""Training workloads: decoder transformers (dense and MoE), their batch and precision, and presets.

Imports nothing of commlens but itself: :mod:`commlens.project` reads workloads.
"""

from commlens.workload.loader import list_presets, load_workload, override, workload_data
from commlens.workload.spec import FORMAT, Moe, Workload, WorkloadError, workload_from_dict

__all__ = [
    "FORMAT",
    "Moe",
    "Workload",
    "WorkloadError",
    "list_presets",
    "load_workload",
    "override",
    "workload_data",
    "workload_from_dict",
]
