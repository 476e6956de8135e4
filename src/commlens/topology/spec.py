"""The topology spec: levels from accelerator to fabric, as strict pydantic models.

Hardware is data: a topology is a YAML file with exactly these keys (unknown
keys are refused), every quantity named with its unit, every efficiency
carrying where it came from. Ranges are checked when the spec is built; a bad
value raises :class:`TopologyError` naming the field (``scale_up.latency_s``).

Levels, from the accelerator out:

1. ``accelerator``: what one rank computes a reduction with.
2. ``scale_up``: the domain of accelerators joined by a switch (NVLink +
   NVSwitch), possibly spanning several nodes (GB200 NVL72: 18 nodes of 4).
3. ``scale_out``: the NICs of each node and the fabric tiers above them
   (leaf or rail switches, spines, cores), each with its oversubscription.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import ConfigDict, Field, field_validator, model_validator

from commlens.specdata import StrictSpec, model_from_data
from commlens.topology.errors import TopologyError
from commlens.topology.extent import Extent

__all__ = [
    "FORMAT",
    "Accelerator",
    "ScaleOut",
    "ScaleUp",
    "Tier",
    "Topology",
    "TopologyError",
    "topology_from_dict",
]

FORMAT = "commlens.topology/1"


class _Spec(StrictSpec):
    model_config = ConfigDict(validate_default=True)


def _origin(value: str) -> str:
    if not value.strip():
        raise ValueError("must say where the figure comes from (a source, a measurement, a fit)")
    return value


class Accelerator(_Spec):
    """One rank's device: how fast it reduces incoming data."""

    name: str = Field(description="device name, for display (e.g. 'H100 SXM')")
    reduction_bytes_per_s: float = Field(gt=0, description="bytes one rank reduces per second (gamma = 1/this)")
    reduction_origin: str = Field(description="where reduction_bytes_per_s comes from")
    reduction_overlaps_transfer: bool = Field(
        description="reductions run inside the transfer pipeline (NCCL's fused kernels) rather than after it"
    )
    copy_bytes_per_s: float = Field(gt=0, description="bytes one rank copies locally per second (staging copies)")
    copy_origin: str = Field(description="where copy_bytes_per_s comes from")

    @field_validator("reduction_origin", "copy_origin")
    @classmethod
    def _has_origin(cls, v: str) -> str:
        return _origin(v)


class ScaleUp(_Spec):
    """The scale-up domain: accelerators on one switch, e.g. NVLink + NVSwitch."""

    name: str = Field(description="interconnect name, for display (e.g. 'NVLink4 + NVSwitch')")
    domain_size: int = Field(ge=1, description="accelerators in one domain (a multiple of accelerators_per_node)")
    bandwidth_bytes_per_s: float = Field(gt=0, description="line rate per accelerator, per direction")
    efficiency: float = Field(gt=0, le=1, description="achievable fraction of the line rate for bulk transfers")
    efficiency_origin: str = Field(description="where the efficiency comes from")
    latency_s: float = Field(ge=0, description="time of one message between two accelerators of the domain (alpha)")
    latency_origin: str = Field(description="where latency_s comes from")
    full_duplex: bool = Field(
        default=True,
        description="a rank sends and receives at the full rate at once (false: a CPU-driven "
        "transport whose sends and receives share one budget)",
    )
    cache_bytes: int | None = Field(
        default=None,
        ge=1,
        description="CPU-driven transports: buffers up to this size stay in cache and move "
        "at cached_bandwidth_bytes_per_s",
    )
    cached_bandwidth_bytes_per_s: float | None = Field(
        default=None, gt=0, description="rate of cache-resident buffers (needed with cache_bytes)"
    )
    host_cores: int | None = Field(
        default=None, ge=1, description="CPU-driven transports: cores the ranks of one node share for copying"
    )
    in_switch_reduction: bool = Field(description="the switch can reduce and multicast (NVLink SHARP / NVLS)")
    in_switch_efficiency: float | None = Field(
        default=None, gt=0, le=1, description="fraction of the link rate in-switch collectives reach (with NVLS)"
    )
    in_switch_efficiency_origin: str | None = Field(default=None, description="where in_switch_efficiency is from")
    in_switch_latency_s: float | None = Field(
        default=None, ge=0, description="time of one in-switch collective step (with NVLS)"
    )
    in_switch_latency_origin: str | None = Field(default=None, description="where in_switch_latency_s comes from")

    @field_validator("efficiency_origin", "latency_origin")
    @classmethod
    def _has_origin(cls, v: str) -> str:
        return _origin(v)

    @model_validator(mode="after")
    def _options_complete(self) -> ScaleUp:
        if (self.cache_bytes is None) != (self.cached_bandwidth_bytes_per_s is None):
            raise ValueError("cached_bandwidth_bytes_per_s: cache_bytes and cached_bandwidth_bytes_per_s go together")
        if not self.in_switch_reduction:
            return self
        for name in ("in_switch_efficiency", "in_switch_latency_s"):
            origin = name.removesuffix("_s") + "_origin"
            if getattr(self, name) is None or not (getattr(self, origin) or "").strip():
                raise ValueError(f"{name}: needed, with {origin}, when in_switch_reduction is true")
        return self


class Tier(_Spec):
    """One tier of switches above the NICs (leaf/rail, spine, core)."""

    name: str = Field(description="tier name, for display (e.g. 'leaf', 'spine')")
    nodes: int = Field(ge=1, description="nodes in one group under a switch of this tier (traffic within stays below)")
    oversubscription: float = Field(ge=1, description="downlink : uplink bandwidth of its switches (1: non-blocking)")
    hop_latency_s: float = Field(ge=0, description="latency added by one switch hop at this tier")


class ScaleOut(_Spec):
    """The NICs of each node and the fabric tiers above them."""

    name: str = Field(description="fabric name, for display (e.g. 'NDR InfiniBand')")
    nics_per_node: int = Field(ge=1, description="NICs per node for collectives (must divide accelerators_per_node)")
    nic_bandwidth_bytes_per_s: float = Field(gt=0, description="line rate of one NIC, per direction")
    efficiency: float = Field(gt=0, le=1, description="achievable fraction of the NIC line rate for bulk transfers")
    efficiency_origin: str = Field(description="where the efficiency comes from")
    latency_s: float = Field(ge=0, description="time of one message NIC to NIC through one tier-0 switch (alpha)")
    latency_origin: str = Field(description="where latency_s comes from")
    full_duplex: bool = Field(default=True, description="a rank sends and receives at the full rate at once")
    pair_full_duplex: bool = Field(
        default=True,
        description="two ranks sending to each other over one connection both get the full rate "
        "(false: the transport moves one direction of a connection at a time, as "
        "gloo's TCP pairs do; flows in one direction per connection are not slowed)",
    )
    rail_optimized: bool = Field(description="NIC i of each node on rail switch i; other rails reached via PXN")
    planes: int = Field(
        default=1,
        ge=1,
        le=16,
        description="parallel fabric planes: each NIC's line rate split over this many independent copies of the "
        "tiers (multi-plane fabrics, e.g. one 800 Gb/s NIC as 2 x 400 Gb/s planes); the simulator hashes or sprays "
        "flows over them",
    )
    tiers: tuple[Tier, ...] = Field(min_length=1, description="switch tiers from the NICs up, groups nesting upward")

    @field_validator("efficiency_origin", "latency_origin")
    @classmethod
    def _has_origin(cls, v: str) -> str:
        return _origin(v)

    @model_validator(mode="after")
    def _tiers_nest(self) -> ScaleOut:
        for i in range(1, len(self.tiers)):
            below, above = self.tiers[i - 1].nodes, self.tiers[i].nodes
            if above < below or above % below:
                raise ValueError(f"tiers[{i}].nodes: {above} must be a multiple of tiers[{i - 1}].nodes ({below})")
        return self


class Topology(_Spec, Extent):
    """A cluster: accelerators, their scale-up domain, NICs and fabric."""

    format: str = Field(default=FORMAT, description="file format version, 'commlens.topology/1'")
    name: str = Field(min_length=1, description="preset or file name")
    description: str = Field(default="", description="one line on what this describes")
    approximate: bool = Field(default=False, description="some figures are estimates, not published values")
    accelerators_per_node: int = Field(ge=1, description="accelerators (ranks) per node")
    launch_latency_s: float = Field(ge=0, description="fixed software cost of one call (kernel launch, bookkeeping)")
    launch_latency_origin: str = Field(description="where launch_latency_s comes from")
    pipeline_chunk_bytes: int = Field(ge=1, description="bytes pipelined algorithms (chains, trees) forward at a time")
    pipeline_chunk_origin: str = Field(description="where pipeline_chunk_bytes comes from")
    accelerator: Accelerator = Field(description="what one rank reduces with")
    scale_up: ScaleUp = Field(description="the scale-up domain")
    scale_out: ScaleOut | None = Field(default=None, description="NICs and fabric; absent for one domain")
    calibration: Mapping[str, object] | None = Field(
        default=None, description="written by `commlens model fit`: runs, fitted values, uncertainties, errors"
    )

    @field_validator("launch_latency_origin", "pipeline_chunk_origin")
    @classmethod
    def _has_origin(cls, v: str) -> str:
        return _origin(v)

    @field_validator("format")
    @classmethod
    def _known_format(cls, v: str) -> str:
        if v != FORMAT:
            raise ValueError(f"unsupported topology format {v!r}; this commlens reads {FORMAT!r}")
        return v

    @model_validator(mode="after")
    def _levels_fit_together(self) -> Topology:
        per_node = self.accelerators_per_node
        if self.scale_up.domain_size % per_node:
            raise ValueError(
                f"scale_up.domain_size: {self.scale_up.domain_size} is not a multiple of "
                f"accelerators_per_node ({per_node})"
            )
        if self.scale_out is not None:
            nics = self.scale_out.nics_per_node
            if per_node % nics:
                raise ValueError(
                    f"scale_out.nics_per_node: {nics} NICs do not divide the {per_node} accelerators per node"
                )
            domain_nodes = self.domain_nodes
            for i, tier in enumerate(self.scale_out.tiers):
                if tier.nodes % domain_nodes:
                    raise ValueError(
                        f"scale_out.tiers[{i}].nodes: {tier.nodes} is not a multiple of the "
                        f"{domain_nodes} nodes of one scale-up domain"
                    )
        return self


def topology_from_dict(data: Any, source: str = "topology") -> Topology:
    """Build a :class:`Topology` from parsed YAML/JSON; errors name the field and say why."""
    return model_from_data(Topology, data, source, TopologyError, _describe)


_NAMED = re.compile(r"^[a-z_][a-z0-9_.\[\]]*: ")


def _describe(err: Mapping[str, Any]) -> str:
    """One pydantic error as ``field.path: reason (got value)``."""
    loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]).lstrip(".")
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        return f"{loc}: unknown field"
    if err["type"] == "missing":
        return f"{loc}: missing"
    if _NAMED.match(msg):  # a cross-field check that names its field relative to its model
        return f"{loc}.{msg}" if loc else msg
    got = err.get("input")
    shown = "" if got is None or isinstance(got, (dict, list, tuple)) or repr(got) in msg else f" (got {got!r})"
    return f"{loc}: {msg}{shown}" if loc else f"{msg}{shown}"
