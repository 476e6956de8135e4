"""``commlens topology list`` and ``commlens topology show``: the shipped presets and any topology file."""

from __future__ import annotations

import json

import typer

from commlens.cli.app import app, fail

topology_app = typer.Typer(
    help="Cluster topologies: presets shipped with commlens, or your own YAML file.",
    no_args_is_help=True,
)
app.add_typer(topology_app, name="topology")


def load_or_fail(name_or_path: str):
    """The topology a preset name or YAML path names, or ``error: ...`` and exit 2."""
    from commlens.topology import TopologyError, load_topology

    try:
        return load_topology(name_or_path)
    except TopologyError as e:
        fail(str(e))


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
    print(
        f"{'name':<13} {'acc/node':>8} {'domain':>6} {'up GB/s':>8} {'NICs':>4} {'NIC GB/s':>8} {'max nodes':>9}"
        "  description"
    )
    for r in rows:
        flag = " (approximate)" if r["approximate"] and "approximate" not in str(r["description"]) else ""
        print(
            f"{r['name']:<13} {r['accelerators_per_node']:>8} {r['scale_up_domain']:>6} {r['scale_up_gbps']:>8.0f} "
            f"{r['nics_per_node']:>4} {r['nic_gbps']:>8.1f} {r['max_nodes']:>9}  {r['description']}{flag}"
        )


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
