"""``commlens topology list`` and ``commlens topology show``: the shipped presets and any topology file."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TypedDict

from commlens.cli.app import command_group
from commlens.cli.errors import errors_as_exit
from commlens.cli.presets import preset_commands

topology_app = command_group("topology")


def load_or_fail(name_or_path: str):
    """The topology a preset name or YAML path names, or ``error: ...`` and exit 2."""
    from commlens.topology import load_topology

    with errors_as_exit():
        return load_topology(name_or_path)


class _Preset(TypedDict):
    """One row of ``topology list`` (its --json entries, field for field)."""

    name: str
    accelerators_per_node: int
    scale_up_domain: int
    scale_up_gbps: float
    nics_per_node: int
    nic_gbps: float
    max_nodes: int
    approximate: bool
    description: str


def _row(name: str) -> _Preset:
    from commlens.topology import load_topology

    t = load_topology(name)
    out = t.scale_out
    return {
        "name": name,
        "accelerators_per_node": t.accelerators_per_node,
        "scale_up_domain": t.scale_up.domain_size,
        "scale_up_gbps": t.scale_up.bandwidth_bytes_per_s / 1e9,
        "nics_per_node": out.nics_per_node if out else 0,
        "nic_gbps": out.nic_bandwidth_bytes_per_s / 1e9 if out else 0.0,
        "max_nodes": t.max_nodes,
        "approximate": t.approximate,
        "description": t.description,
    }


def _described(r: _Preset) -> str:
    flag = " (approximate)" if r["approximate"] and "approximate" not in r["description"] else ""
    return f"{r['description']}{flag}"


# (header, the cell of a preset): the columns of ``topology list``
_COLUMNS: tuple[tuple[str, Callable[[_Preset], str]], ...] = (
    ("name", lambda r: r["name"]),
    ("acc/node", lambda r: str(r["accelerators_per_node"])),
    ("domain", lambda r: str(r["scale_up_domain"])),
    ("up GB/s", lambda r: f"{r['scale_up_gbps']:.0f}"),
    ("NICs", lambda r: str(r["nics_per_node"])),
    ("NIC GB/s", lambda r: f"{r['nic_gbps']:.1f}"),
    ("max nodes", lambda r: str(r["max_nodes"])),
    ("description", _described),
)


def _names() -> list[str]:
    """List the shipped presets."""
    from commlens.topology import list_presets

    return list_presets()


def _show(name: str, as_json: bool) -> None:
    """Print one topology: every level, its figures and where they come from."""
    from commlens.topology import dump_topology, topology_to_dict

    topology = load_or_fail(name)
    if as_json:
        print(json.dumps(topology_to_dict(topology), indent=1))
    else:
        print(dump_topology(topology), end="")


preset_commands(topology_app, "topology", names=_names, row=_row, columns=_COLUMNS, show=_show)
