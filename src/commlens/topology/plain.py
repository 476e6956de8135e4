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
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, NoReturn, TypeAlias

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


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


class _Level:
    """One level of a topology's plain data, its fields read one by one and checked for their type; a missing,
    mistyped or unknown field is a :class:`TopologyError` naming it."""

    def __init__(self, data: object, where: str, source: str, cls: type) -> None:
        self.where, self.source = where, source
        if not isinstance(data, Mapping):
            self.fail(where.rstrip("."), "a mapping", data)
        unknown = sorted(str(k) for k in data.keys() - _field_names(cls))
        if unknown:
            raise TopologyError(f"{source}: not the data of a checked topology ({where}{unknown[0]}: unknown field)")
        self.data: Mapping[str, object] = data

    def fail(self, key: str, what: str, value: object) -> NoReturn:
        raise TopologyError(
            f"{self.source}: not the data of a checked topology ({key}: expected {what}, got {value!r})"
        )

    def value(self, key: str, default: object = None) -> object:
        """The field's value; ``default`` where it is absent (or null), and missing is an error without one."""
        value = self.data.get(key)
        if value is None and default is None:
            raise TopologyError(f"{self.source}: not the data of a checked topology ({self.where}{key}: missing)")
        return default if value is None else value

    def given(self, key: str) -> bool:
        return self.data.get(key) is not None

    def text(self, key: str, default: str | None = None) -> str:
        value = self.value(key, default)
        if not isinstance(value, str):
            self.fail(self.where + key, "text", value)
        return value

    def whole(self, key: str, default: int | None = None) -> int:
        value = self.value(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(self.where + key, "a whole number", value)
        return value

    def number(self, key: str) -> float:
        value = self.value(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.fail(self.where + key, "a number", value)
        return value

    def flag(self, key: str, default: bool | None = None) -> bool:
        value = self.value(key, default)
        if not isinstance(value, bool):
            self.fail(self.where + key, "true or false", value)
        return value


def _accelerator(data: object, source: str) -> PlainAccelerator:
    d = _Level(data, "accelerator.", source, PlainAccelerator)
    return PlainAccelerator(
        name=d.text("name"),
        reduction_bytes_per_s=d.number("reduction_bytes_per_s"),
        reduction_origin=d.text("reduction_origin"),
        reduction_overlaps_transfer=d.flag("reduction_overlaps_transfer"),
        copy_bytes_per_s=d.number("copy_bytes_per_s"),
        copy_origin=d.text("copy_origin"),
    )


def _scale_up(data: object, source: str) -> PlainScaleUp:
    d = _Level(data, "scale_up.", source, PlainScaleUp)
    return PlainScaleUp(
        name=d.text("name"),
        domain_size=d.whole("domain_size"),
        bandwidth_bytes_per_s=d.number("bandwidth_bytes_per_s"),
        efficiency=d.number("efficiency"),
        efficiency_origin=d.text("efficiency_origin"),
        latency_s=d.number("latency_s"),
        latency_origin=d.text("latency_origin"),
        in_switch_reduction=d.flag("in_switch_reduction"),
        full_duplex=d.flag("full_duplex", True),
        cache_bytes=d.whole("cache_bytes") if d.given("cache_bytes") else None,
        cached_bandwidth_bytes_per_s=d.number("cached_bandwidth_bytes_per_s")
        if d.given("cached_bandwidth_bytes_per_s")
        else None,
        host_cores=d.whole("host_cores") if d.given("host_cores") else None,
        in_switch_efficiency=d.number("in_switch_efficiency") if d.given("in_switch_efficiency") else None,
        in_switch_efficiency_origin=d.text("in_switch_efficiency_origin")
        if d.given("in_switch_efficiency_origin")
        else None,
        in_switch_latency_s=d.number("in_switch_latency_s") if d.given("in_switch_latency_s") else None,
        in_switch_latency_origin=d.text("in_switch_latency_origin") if d.given("in_switch_latency_origin") else None,
    )


def _tier(data: object, where: str, source: str) -> PlainTier:
    d = _Level(data, where, source, PlainTier)
    return PlainTier(
        name=d.text("name"),
        nodes=d.whole("nodes"),
        oversubscription=d.number("oversubscription"),
        hop_latency_s=d.number("hop_latency_s"),
    )


def _scale_out(data: object, source: str) -> PlainScaleOut:
    d = _Level(data, "scale_out.", source, PlainScaleOut)
    tiers = d.value("tiers")
    if isinstance(tiers, str) or not isinstance(tiers, Sequence):
        d.fail("scale_out.tiers", "a list", tiers)
    return PlainScaleOut(
        name=d.text("name"),
        nics_per_node=d.whole("nics_per_node"),
        nic_bandwidth_bytes_per_s=d.number("nic_bandwidth_bytes_per_s"),
        efficiency=d.number("efficiency"),
        efficiency_origin=d.text("efficiency_origin"),
        latency_s=d.number("latency_s"),
        latency_origin=d.text("latency_origin"),
        rail_optimized=d.flag("rail_optimized"),
        tiers=tuple(_tier(t, f"scale_out.tiers[{i}].", source) for i, t in enumerate(tiers)),
        full_duplex=d.flag("full_duplex", True),
        pair_full_duplex=d.flag("pair_full_duplex", True),
        planes=d.whole("planes", 1),
    )


def plain_topology(data: Mapping[str, object], source: str = "topology") -> PlainTopology:
    """A :class:`PlainTopology` from the plain data of a checked topology (``topology_to_dict`` of a preset), after
    changes to it; :class:`TopologyError` naming the field when the levels no longer fit together."""
    d = _Level(data, "", source, PlainTopology)
    calibration = d.value("calibration") if d.given("calibration") else None
    if calibration is not None and not isinstance(calibration, Mapping):
        d.fail("calibration", "a mapping", calibration)
    out = d.value("scale_out") if d.given("scale_out") else None
    topo = PlainTopology(
        name=d.text("name"),
        accelerators_per_node=d.whole("accelerators_per_node"),
        launch_latency_s=d.number("launch_latency_s"),
        launch_latency_origin=d.text("launch_latency_origin"),
        pipeline_chunk_bytes=d.whole("pipeline_chunk_bytes"),
        pipeline_chunk_origin=d.text("pipeline_chunk_origin"),
        accelerator=_accelerator(d.value("accelerator"), source),
        scale_up=_scale_up(d.value("scale_up"), source),
        scale_out=None if out is None else _scale_out(out, source),
        format=d.text("format", "commlens.topology/1"),
        description=d.text("description", ""),
        approximate=d.flag("approximate", False),
        calibration=calibration,
    )
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
