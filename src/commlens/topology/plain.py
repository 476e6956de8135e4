"""A topology as plain frozen dataclasses, for code that derives topologies per run (``commlens expect``).

The pydantic spec (:mod:`commlens.topology.spec`) checks a topology written by hand; importing it and building
one costs tens of milliseconds a process. A topology derived from a checked preset needs only the cross-level
rules the derivation can break (a domain a multiple of the node, NICs that divide it, tiers that hold whole
domains), which :func:`plain_topology` checks. Fields, names and properties are those of the spec, so the model
reads either (:data:`AnyTopology`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, Field, dataclass, fields, is_dataclass
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    NoReturn,
    Protocol,
    TypeAlias,
    TypeVar,
    get_args,
    get_origin,
    get_type_hints,
)

from commlens.topology.errors import TopologyError
from commlens.topology.extent import Extent

if TYPE_CHECKING:
    from commlens.topology.spec import Topology

__all__ = [
    "AnyTopology",
    "PlainAccelerator",
    "PlainScaleOut",
    "PlainScaleUp",
    "PlainTier",
    "PlainTopology",
    "plain_topology",
]


@dataclass(frozen=True)
class PlainAccelerator:
    name: str
    reduction_bytes_per_s: float
    reduction_origin: str
    reduction_overlaps_transfer: bool
    copy_bytes_per_s: float
    copy_origin: str


@dataclass(frozen=True)
class PlainScaleUp:
    name: str
    domain_size: int
    bandwidth_bytes_per_s: float
    efficiency: float
    efficiency_origin: str
    latency_s: float
    latency_origin: str
    in_switch_reduction: bool
    full_duplex: bool = True
    cache_bytes: int | None = None
    cached_bandwidth_bytes_per_s: float | None = None
    host_cores: int | None = None
    in_switch_efficiency: float | None = None
    in_switch_efficiency_origin: str | None = None
    in_switch_latency_s: float | None = None
    in_switch_latency_origin: str | None = None


@dataclass(frozen=True)
class PlainTier:
    name: str
    nodes: int
    oversubscription: float
    hop_latency_s: float


@dataclass(frozen=True)
class PlainScaleOut:
    name: str
    nics_per_node: int
    nic_bandwidth_bytes_per_s: float
    efficiency: float
    efficiency_origin: str
    latency_s: float
    latency_origin: str
    rail_optimized: bool
    tiers: tuple[PlainTier, ...]
    full_duplex: bool = True
    pair_full_duplex: bool = True
    planes: int = 1


@dataclass(frozen=True)
class PlainTopology(Extent):
    name: str
    accelerators_per_node: int
    launch_latency_s: float
    launch_latency_origin: str
    pipeline_chunk_bytes: int
    pipeline_chunk_origin: str
    accelerator: PlainAccelerator
    scale_up: PlainScaleUp
    scale_out: PlainScaleOut | None = None
    format: str = "commlens.topology/1"
    description: str = ""
    approximate: bool = False
    calibration: Mapping[str, object] | None = None


AnyTopology: TypeAlias = "Topology | PlainTopology"


class _Dataclass(Protocol):
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]


_D = TypeVar("_D", bound=_Dataclass)
_REQUIRED = object()
_CHECKS: dict[object, tuple[tuple[type, ...], str]] = {  # a field's type: the types it takes, as a message says it
    str: ((str,), "text"),
    int: ((int,), "a whole number"),
    float: ((int, float), "a number"),
    bool: ((bool,), "true or false"),
}


@functools.cache
def _fields(cls: type[_Dataclass]) -> tuple[tuple[str, object, object], ...]:
    """Each field's name, type (``X | None`` as ``X``) and default (``_REQUIRED`` where it has none)."""
    hints = get_type_hints(cls)
    out = []
    for f in fields(cls):
        kind = hints[f.name]
        args = get_args(kind)
        if type(None) in args:
            kind = next(a for a in args if a is not type(None))
        out.append((f.name, kind, _REQUIRED if f.default is MISSING else f.default))
    return tuple(out)


def _read(cls: type[_D], data: object, where: str, source: str) -> _D:
    """One level of a topology's plain data as ``cls``, each field read and checked for its type; a missing,
    mistyped or unknown field is a :class:`TopologyError` naming it. Null is absent: the field's default."""
    names = _fields(cls)
    if not isinstance(data, Mapping):
        _fail(source, where.rstrip("."), "a mapping", data)
    unknown = sorted(str(k) for k in data.keys() - {name for name, _, _ in names})
    if unknown:
        raise TopologyError(f"{source}: not the data of a checked topology ({where}{unknown[0]}: unknown field)")
    values: dict[str, object] = {}
    for name, kind, default in names:
        value = data.get(name)
        if value is None and default is _REQUIRED:
            raise TopologyError(f"{source}: not the data of a checked topology ({where}{name}: missing)")
        values[name] = default if value is None else _value(kind, value, where + name, source)
    return cls(**values)


def _value(kind: object, value: object, key: str, source: str) -> object:
    """``value`` when it is of type ``kind`` (a level: read as its class); else a :class:`TopologyError`."""
    if isinstance(kind, type) and is_dataclass(kind):
        return _read(kind, value, key + ".", source)
    if get_origin(kind) is tuple:
        if isinstance(value, str) or not isinstance(value, Sequence):
            _fail(source, key, "a list", value)
        level = get_args(kind)[0]
        return tuple(_read(level, v, f"{key}[{i}].", source) for i, v in enumerate(value))
    if get_origin(kind) is Mapping:
        if not isinstance(value, Mapping):
            _fail(source, key, "a mapping", value)
        return value
    wanted, what = _CHECKS[kind]
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, wanted):
        _fail(source, key, what, value)
    return value


def _fail(source: str, key: str, what: str, value: object) -> NoReturn:
    raise TopologyError(f"{source}: not the data of a checked topology ({key}: expected {what}, got {value!r})")


def plain_topology(data: Mapping[str, object], source: str = "topology") -> PlainTopology:
    """A :class:`PlainTopology` from the plain data of a checked topology (``topology_to_dict`` of a preset), after
    changes to it; :class:`TopologyError` naming the field when the levels no longer fit together."""
    topo = _read(PlainTopology, data, "", source)
    per_node = topo.accelerators_per_node
    if per_node < 1 or topo.scale_up.domain_size % per_node:
        raise TopologyError(
            f"{source}: scale_up.domain_size: {topo.scale_up.domain_size} is not a multiple of "
            f"accelerators_per_node ({per_node})"
        )
    if topo.scale_out is not None:
        so = topo.scale_out
        if so.nics_per_node < 1 or per_node % so.nics_per_node:
            raise TopologyError(
                f"{source}: scale_out.nics_per_node: {so.nics_per_node} NICs do not divide the {per_node} "
                "accelerators per node"
            )
        if not so.nic_bandwidth_bytes_per_s > 0:
            raise TopologyError(f"{source}: scale_out.nic_bandwidth_bytes_per_s: must be > 0")
        for i, tier in enumerate(so.tiers):
            if tier.nodes % topo.domain_nodes:
                raise TopologyError(
                    f"{source}: scale_out.tiers[{i}].nodes: {tier.nodes} is not a multiple of the "
                    f"{topo.domain_nodes} nodes of one scale-up domain"
                )
    return topo
