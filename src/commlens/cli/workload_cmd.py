"""``commlens workload list`` and ``commlens workload show``: the workload presets ``project`` takes by name."""

from __future__ import annotations

import json
from typing import Any

import typer

from commlens.cli.app import command_group
from commlens.cli.errors import errors_as_exit

workload_app = command_group("workload")


def _row(name: str) -> dict[str, Any]:
    from commlens.workload import load_workload

    with errors_as_exit():
        w = load_workload(name)
    return {
        "name": name,
        "parameters": w.parameters,
        "active_parameters": w.active_parameters,
        "layers": w.layers,
        "hidden": w.hidden,
        "heads": w.heads,
        "kv_heads": w.kv_heads_n,
        "seq_len": w.seq_len,
        "global_batch": w.global_batch,
        "experts": w.moe.experts if w.moe is not None else 0,
        "precision": w.precision,
        "description": w.description,
    }


@workload_app.command("list")
def list_cmd(as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """List the shipped workload presets: size, shape, sequence and batch."""
    from commlens.workload import list_presets

    rows = [_row(name) for name in list_presets()]
    if as_json:
        print(json.dumps(rows, indent=1))
        return
    from commlens.cli.tables import new_table, print_table, right

    table = new_table(
        "name",
        right("params (B)"),
        right("active (B)"),
        right("layers"),
        right("hidden"),
        right("heads/kv"),
        right("seq"),
        right("batch"),
        right("experts"),
        "precision",
    )
    for r in rows:
        table.add_row(
            r["name"],
            f"{r['parameters'] / 1e9:.1f}",
            f"{r['active_parameters'] / 1e9:.1f}",
            str(r["layers"]),
            str(r["hidden"]),
            f"{r['heads']}/{r['kv_heads']}",
            str(r["seq_len"]),
            str(r["global_batch"]),
            str(r["experts"] or "-"),
            r["precision"],
        )
    print_table(table)


@workload_app.command("show")
def show_cmd(
    name: str = typer.Argument(..., help="a preset name (see `commlens workload list`) or a YAML file"),
    as_json: bool = typer.Option(False, "--json", help="print JSON instead of YAML"),
) -> None:
    """Print one workload, every field as `project` reads it (defaults filled in)."""
    import yaml

    from commlens.workload import load_workload

    with errors_as_exit():
        data = load_workload(name).model_dump(mode="json", exclude_none=True)
    if as_json:
        print(json.dumps(data, indent=1))
    else:
        print(yaml.safe_dump(data, sort_keys=False), end="")
