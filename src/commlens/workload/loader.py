"""Load workloads: shipped presets by name or any YAML file by path, with dotted-field overrides."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from commlens.specdata import DuplicateKeyError, load_yaml
from commlens.topology.loader import known_preset, preset_names
from commlens.workload.spec import Workload, WorkloadError, workload_from_dict

__all__ = ["list_presets", "load_workload", "override", "workload_data"]

_PRESET_PACKAGE = "commlens.workload.presets"
_SUFFIXES = (".yaml", ".yml")


def list_presets() -> list[str]:
    """Names of the shipped workload presets, sorted."""
    return preset_names(_PRESET_PACKAGE)


def _preset_file(name: str) -> Path:
    return known_preset(_PRESET_PACKAGE, name, "workload", WorkloadError)


@lru_cache(maxsize=64)
def _read(path: Path, _mtime_ns: int) -> dict[str, object]:
    import yaml

    try:
        data = load_yaml(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError, DuplicateKeyError) as e:
        raise WorkloadError(f"{path.name}: cannot read workload: {e}") from None
    if not isinstance(data, dict):
        raise WorkloadError(f"{path.name}: expected a mapping of workload fields")
    return data


def workload_data(name_or_path: str | Path) -> dict[str, object]:
    """The plain data of a preset or YAML file (a fresh copy: safe to modify)."""
    import copy

    text = str(name_or_path)
    if isinstance(name_or_path, Path) or text.endswith(_SUFFIXES) or "/" in text:
        path = Path(text)
        if not path.is_file():
            raise WorkloadError(f"workload file {text!r} not found")
        return copy.deepcopy(_read(path.resolve(), path.stat().st_mtime_ns))
    return copy.deepcopy(_read(_preset_file(text), 0))


def override(data: dict[str, object], path: str, value: object) -> dict[str, object]:
    """Set dotted field ``path`` (``moe.top_k``) in ``data`` in place; returns ``data``."""
    keys = path.split(".")
    node = data
    for key in keys[:-1]:
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        elif not isinstance(child, dict):
            raise WorkloadError(f"{path}: {key} is not a group of fields")
        node = child
    node[keys[-1]] = value
    return data


def load_workload(name_or_path: str | Path, overrides: Mapping[str, object] | None = None) -> Workload:
    """A preset by name (``llama3-70b``) or YAML file, with ``overrides`` (dotted field -> value) applied."""
    data = workload_data(name_or_path)
    for key, value in (overrides or {}).items():
        override(data, key, value)
    return workload_from_dict(data, source=str(name_or_path))
