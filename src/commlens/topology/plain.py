"""A topology as plain frozen dataclasses, for code that derives topologies per run (``commlens expect``).

The pydantic spec (:mod:`commlens.topology.spec`) checks a topology written by hand; importing it and building
one costs tens of milliseconds a process. A topology derived from a checked preset needs only the cross-level
rules the derivation can break (a domain a multiple of the node, NICs that divide it, tiers that hold whole
domains), which :func:`plain_topology` checks. Fields, names and properties are those of the spec, so the model
reads either (:data:`AnyTopology`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

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


def plain_topology(data: dict[str, Any], source: str = "topology") -> PlainTopology:
    """A :class:`PlainTopology` from the plain data of a checked topology (``topology_to_dict`` of a preset), after
    changes to it; :class:`TopologyError` naming the field when the levels no longer fit together."""
    out = data.get("scale_out")
    try:
        topo = PlainTopology(
            **{k: v for k, v in data.items() if k not in ("accelerator", "scale_up", "scale_out")},
            accelerator=PlainAccelerator(**data["accelerator"]),
            scale_up=PlainScaleUp(**data["scale_up"]),
            scale_out=None
            if out is None
            else PlainScaleOut(
                **{k: v for k, v in out.items() if k != "tiers"}, tiers=tuple(PlainTier(**t) for t in out["tiers"])
            ),
        )
    except (TypeError, KeyError) as e:
        raise TopologyError(f"{source}: not the data of a checked topology ({e})") from None
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
