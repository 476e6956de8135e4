"""Cluster topologies: the spec (levels from accelerator to fabric), presets, loading.

Imports nothing of commlens: the model, the simulator and the projection read
topologies, never the other way round.
"""

from commlens.topology.loader import dump_topology, list_presets, load_topology, preset_path, topology_to_dict
from commlens.topology.spec import (
    FORMAT,
    Accelerator,
    ScaleOut,
    ScaleUp,
    Tier,
    Topology,
    TopologyError,
    topology_from_dict,
)

__all__ = [
    "FORMAT",
    "Accelerator",
    "ScaleOut",
    "ScaleUp",
    "Tier",
    "Topology",
    "TopologyError",
    "dump_topology",
    "list_presets",
    "load_topology",
    "preset_path",
    "topology_from_dict",
    "topology_to_dict",
]
