"""``commlens topology list`` and ``commlens topology show``: the shipped presets and any topology file."""

from __future__ import annotations

import json

import typer

from commlens.cli.app import command_group
from commlens.cli.errors import errors_as_exit

topology_app = command_group("topology")


def load_or_fail(name_or_path: str):
    """The topology a preset name or YAML path names, or ``error: ...`` and exit 2."""
    from commlens.topology import load_topology

    with errors_as_exit():
        return load_topology(name_or_path)


@topology_app.command("list")
def list_cmd(as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """List the shipped presets."""
    from commlens.topology import list_presets, load_topology

    rows = []
    for name in list_presets():
        t = load_topology(name)
        out = t.scale_out
        rows.append(
            {
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
        )
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    from commlens.cli.tables import new_table, print_table, right

    table = new_table(
        "name",
        right("acc/node"),
        right("domain"),
        right("up GB/s"),
        right("NICs"),
        right("NIC GB/s"),
        right("max nodes"),
        "description",
    )
    for r in rows:
        flag = " (approximate)" if r["approximate"] and "approximate" not in str(r["description"]) else ""
        table.add_row(
            str(r["name"]),
            str(r["accelerators_per_node"]),
            str(r["scale_up_domain"]),
            f"{r['scale_up_gbps']:.0f}",
            str(r["nics_per_node"]),
            f"{r['nic_gbps']:.1f}",
            str(r["max_nodes"]),
            f"{r['description']}{flag}",
        )
    print_table(table)


@topology_app.command("show")
def show_cmd(
    name: str = typer.Argument(..., help="a preset name (see `commlens topology list`) or a YAML file"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of YAML"),
) -> None:
    """Print one topology: every level, its figures and where they come from."""
    from commlens.topology import dump_topology, topology_to_dict

    topology = load_or_fail(name)
    if as_json:
        print(json.dumps(topology_to_dict(topology), indent=1))
    else:
        print(dump_topology(topology), end="")
