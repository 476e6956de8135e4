"""``commlens workload list`` and ``commlens workload show``: the workload presets ``project`` takes by name."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TypedDict

from commlens.cli.app import command_group
from commlens.cli.errors import errors_as_exit
from commlens.cli.presets import preset_commands

workload_app = command_group("workload")


class _Preset(TypedDict):
    """One row of ``workload list`` (its --json entries, field for field)."""

    name: str
    parameters: int
    active_parameters: int
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    seq_len: int
    global_batch: int
    experts: int
    precision: str
    description: str


def _row(name: str) -> _Preset:
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


# (header, the cell of a preset): the columns of ``workload list``
_COLUMNS: tuple[tuple[str, Callable[[_Preset], str]], ...] = (
    ("name", lambda r: r["name"]),
    ("params (B)", lambda r: f"{r['parameters'] / 1e9:.1f}"),
    ("active (B)", lambda r: f"{r['active_parameters'] / 1e9:.1f}"),
    ("layers", lambda r: str(r["layers"])),
    ("hidden", lambda r: str(r["hidden"])),
    ("heads/kv", lambda r: f"{r['heads']}/{r['kv_heads']}"),
    ("seq", lambda r: str(r["seq_len"])),
    ("batch", lambda r: str(r["global_batch"])),
    ("experts", lambda r: str(r["experts"] or "-")),
    ("precision", lambda r: r["precision"]),
)


def _names() -> list[str]:
    """List the shipped workload presets: size, shape, sequence and batch."""
    from commlens.workload import list_presets

    return list_presets()


def _show(name: str, as_json: bool) -> None:
    """Print one workload, every field as `project` reads it (defaults filled in)."""
    import yaml

    from commlens.workload import load_workload

    with errors_as_exit():
        data = load_workload(name).model_dump(mode="json", exclude_none=True)
    if as_json:
        print(json.dumps(data, indent=1))
    else:
        print(yaml.safe_dump(data, sort_keys=False), end="")


preset_commands(workload_app, "workload", names=_names, row=_row, columns=_COLUMNS, show=_show)
