"""Cluster topologies: the spec (levels from accelerator to fabric), presets, loading.

Imports nothing of commlens but its leaves (``commlens._lazy``, ``commlens.errors``,
``commlens.specdata``): the model, the simulator and the projection read topologies,
never the other way round. The names below load their modules on first use: the
pydantic spec costs tens of milliseconds to import, and code that needs only
:mod:`commlens.topology.plain` (``commlens expect`` at ingest) skips it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from commlens._lazy import lazy_exports

if TYPE_CHECKING:
    from commlens.topology.errors import TopologyError
    from commlens.topology.loader import dump_topology, list_presets, load_topology, preset_path, topology_to_dict
    from commlens.topology.spec import FORMAT, Accelerator, ScaleOut, ScaleUp, Tier, Topology, topology_from_dict

_WHERE = {
    "TopologyError": "errors",
    **dict.fromkeys(("dump_topology", "list_presets", "load_topology", "preset_path", "topology_to_dict"), "loader"),
    **dict.fromkeys(("FORMAT", "Accelerator", "ScaleOut", "ScaleUp", "Tier", "Topology", "topology_from_dict"), "spec"),
}

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

__getattr__ = lazy_exports(__name__, _WHERE, globals())
