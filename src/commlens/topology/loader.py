"""Load topologies: shipped presets by name, or any YAML file by path; write them back."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from commlens.specdata import DuplicateKeyError, load_yaml
from commlens.topology.spec import Topology, TopologyError, topology_from_dict

__all__ = ["dump_topology", "list_presets", "load_topology", "preset_path", "topology_to_dict"]

_PRESET_PACKAGE = "commlens.topology.presets"
_SUFFIXES = (".yaml", ".yml")


def preset_names(package: str) -> list[str]:
    """Names of the YAML presets shipped in ``package``, sorted (shared with workload presets)."""
    folder = resources.files(package)
    return sorted(p.name.rsplit(".", 1)[0] for p in folder.iterdir() if p.name.endswith(_SUFFIXES))


def preset_file(package: str, name: str) -> Path | None:
    """The YAML file of preset ``name`` in ``package``, or None."""
    folder = resources.files(package)
    for suffix in _SUFFIXES:
        candidate = folder / f"{name}{suffix}"
        if candidate.is_file():
            return Path(str(candidate))
    return None


def known_preset(package: str, name: str, kind: str, error: Callable[[str], Exception]) -> Path:
    """The file of ``kind`` preset ``name`` in ``package``; ``error`` (a message listing the known ones) if none
    (shared with workload presets)."""
    path = preset_file(package, name)
    if path is None:
        known = ", ".join(preset_names(package))
        raise error(f"unknown {kind} preset {name!r}; known: {known} (or a YAML file path)")
    return path


def list_presets() -> list[str]:
    """Names of the shipped topology presets, sorted."""
    return preset_names(_PRESET_PACKAGE)


def preset_path(name: str) -> Path:
    """The file of preset ``name``; :class:`TopologyError` listing the known ones if there is none."""
    return known_preset(_PRESET_PACKAGE, name, "topology", TopologyError)


def load_topology(name_or_path: str | Path) -> Topology:
    """A preset by name (``dgx-h100``) or a YAML file by path; presets are parsed once per process."""
    text = str(name_or_path)
    looks_like_path = isinstance(name_or_path, Path) or text.endswith(_SUFFIXES) or "/" in text
    if looks_like_path:
        path = Path(text)
        if not path.is_file():
            raise TopologyError(f"topology file {text!r} not found")
        return _load_file(path.resolve(), path.stat().st_mtime_ns)
    return _load_file(preset_path(text), 0)


@lru_cache(maxsize=32)
def _load_file(path: Path, _mtime_ns: int) -> Topology:
    import yaml

    try:
        data = load_yaml(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError, DuplicateKeyError) as e:
        raise TopologyError(f"{path.name}: cannot read topology: {e}") from None
    return topology_from_dict(data, source=path.name)


def topology_to_dict(topology: Topology) -> dict[str, Any]:
    """Plain data, in field order, without unset optional fields; loads back to an equal topology."""
    return topology.model_dump(mode="json", exclude_none=True)


def _float_text(value: float) -> str:
    """Floats as people write hardware figures: 4.5e+11, 6.6e-06, 0.824; always loadable as YAML 1.1 floats."""
    if value == 0 or 1e-3 <= abs(value) < 1e6:
        return repr(value)
    mantissa, exponent = f"{value:.6e}".split("e")
    mantissa = mantissa.rstrip("0")
    return f"{mantissa}0e{exponent}" if mantissa.endswith(".") else f"{mantissa}e{exponent}"


def dump_topology(topology: Topology, path: str | Path | None = None) -> str:
    """The topology as YAML (written to ``path`` when given)."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        pass

    _Dumper.add_representer(float, lambda d, v: d.represent_scalar("tag:yaml.org,2002:float", _float_text(v)))
    text = yaml.dump(topology_to_dict(topology), Dumper=_Dumper, sort_keys=False, width=110, allow_unicode=True)
    if path is not None:
        Path(path).write_text(text)
    return text
