"""Fabric graphs: a topology spec as switches and directed links, routes over them, faults.

The graph a topology describes, for a job of ``nodes`` nodes:

- each scale-up domain has one switch node (``nvs<d>``: NVSwitch, or a rack's NVLink switches together), each
  GPU one link up to it and one down, at the scale-up rate (line rate x efficiency);
- each node's NICs (``node<n>.nic<j>``) have one cable per plane to a tier-0 switch, at the NIC's effective rate
  split over the planes. GPU ``l`` of a node uses NIC ``l // (gpus / nics)``; PCIe inside the node is not a link;
- tier ``t`` has one switch per group of ``tiers[t].nodes`` nodes (rail-optimized: one per rail, rail ``j``
  holding NIC ``j`` of every node of the group), with ``downlinks / oversubscription`` uplinks. A tier-``t+1``
  switch is reached by uplink ``i`` of a tier-``t`` switch; its own uplinks lead on. As in a folded Clos, the
  switch at tier ``t`` is named by its group, its rail and the uplinks taken to reach it
  (``i_0 .. i_{t-1}``), so routing down retraces the same indices on the destination's side. On rail-optimized
  fabrics every tier is split by rail (rail planes): traffic between rails crosses scale-up first (PXN).
- the tiers are repeated per plane (``scale_out.planes``).

Links are numbered in blocks (NVLink up, NVLink down, NIC up, NIC down, each tier's up and down cables), so a
route is computed with integer arithmetic over arrays of flows, not by graph search. A cable's two directions
fail and degrade together. Switch and cable names follow the tiers' names in the spec (``leaf3``,
``spine0``, ``leaf3-spine0``, ``node7.nic2-leaf1``), and faults are given by name or shell-style pattern.
"""

from __future__ import annotations

import fnmatch
import itertools
import re
from dataclasses import dataclass, field
from typing import TypedDict

import numpy as np

from commlens.errors import CommlensError
from commlens.topology import Topology

__all__ = ["Fabric", "FabricDoc", "FabricTier", "Fault", "SimError", "build_fabric", "check_nodes", "parse_fault"]

_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)
_SERIALS = itertools.count()


class SimError(CommlensError, ValueError):
    """A simulation that cannot be built: a fabric too small, an unknown fault name, a flow with no path."""


@dataclass(frozen=True, slots=True)
class Fault:
    """A failed (``factor`` 0) or degraded cable, NIC or switch, by name or shell pattern."""

    pattern: str
    factor: float  # capacity kept: 0 fails it

    def describe(self) -> str:
        return f"fail {self.pattern}" if self.factor == 0 else f"degrade {self.pattern} to {self.factor:g}"


_NAME = re.compile(r"^[A-Za-z0-9_.\-*?\[\]]{1,200}$")


def parse_fault(text: str, degrade: bool) -> Fault:
    """``spine3`` (fail) or ``leaf2-spine0:0.5`` (degrade to half); :class:`SimError` when malformed."""
    text = text.strip()
    factor = 0.0
    if degrade:
        name, sep, value = text.rpartition(":")
        if not sep:
            raise SimError(f"--degrade {text!r}: expected NAME:FACTOR, e.g. leaf2-spine0:0.5")
        try:
            factor = float(value)
        except ValueError:
            raise SimError(f"--degrade {text!r}: factor {value!r} is not a number") from None
        if not 0.0 <= factor < 1.0 or factor != factor:
            raise SimError(f"--degrade {text!r}: factor must be at least 0 and below 1 (the capacity kept)")
        text = name
    if not _NAME.match(text):
        raise SimError(f"fault {text!r}: not a switch, NIC or link name (letters, digits, . - _ and * ? [ ])")
    return Fault(text, factor)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """A 64-bit mixing hash (SplitMix64's finaliser) of each element: the switches' ECMP hash stand-in."""
    with np.errstate(over="ignore"):
        z = (x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)) & _MASK64
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK64
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK64
        return z ^ (z >> np.uint64(31))


def flow_hash(src: np.ndarray, dst: np.ndarray, key: np.ndarray, seed: int, salt: int) -> np.ndarray:
    """The hash of each flow's identity (endpoints, flow key, seed), one independent value per ``salt``."""
    with np.errstate(over="ignore"):
        x = splitmix64(src.astype(np.uint64) * np.uint64(1_000_003) + np.uint64(seed * 7919 + salt))
        x = splitmix64(x ^ (dst.astype(np.uint64) * np.uint64(0x9E3779B1)))
        return splitmix64(x ^ (key.astype(np.uint64) * np.uint64(0x85EBCA77)))


class FabricTier(TypedDict):
    """One tier of :meth:`Fabric.describe`."""

    name: str
    group_nodes: int
    switches: int
    uplinks_per_switch: int


class FabricDoc(TypedDict):
    """What :meth:`Fabric.describe` says was built (the ``fabric`` of ``commlens.sim/1`` JSON)."""

    topology: str
    nodes: int
    gpus: int
    planes: int
    rail_optimized: bool
    tiers: list[FabricTier]
    links: int
    faults: list[str]
    fault_cables: dict[str, int]


@dataclass
class Fabric:
    """The directed links of one job's fabric (capacities in bytes/s, latencies in s) and how they are numbered."""

    topology: Topology
    nodes: int
    gpus_per_node: int
    nics_per_node: int
    planes: int
    rail: bool
    domain_nodes: int
    tier_names: tuple[str, ...]  # the tiers built (those the job spans)
    group_nodes: tuple[int, ...]  # nodes under one switch group of each tier built
    uplinks: tuple[int, ...]  # uplinks of each switch of every tier but the top
    switches: tuple[int, ...]  # switches of each tier, all planes
    capacity: np.ndarray
    latency_s: np.ndarray
    link_class: np.ndarray  # index into class_names
    class_names: tuple[str, ...]
    faults: tuple[Fault, ...] = ()
    fault_cables: dict[str, int] = field(default_factory=dict)  # each fault: how many cables it hit
    _tier_off: tuple[int, ...] = ()
    _tier_cables: tuple[int, ...] = ()
    serial: int = field(default_factory=lambda: next(_SERIALS))  # unique per fabric built (keys route caches)

    # ---- numbering --------------------------------------------------------------------------------
    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def links(self) -> int:
        return int(self.capacity.shape[0])

    @property
    def nic_off(self) -> int:
        return 2 * self.gpus

    @property
    def nic_cables(self) -> int:
        return self.planes * self.nodes * self.nics_per_node

    @property
    def rails(self) -> int:
        return self.nics_per_node if self.rail else 1

    def nvlink_up(self, gpu: np.ndarray) -> np.ndarray:
        return gpu

    def nvlink_down(self, gpu: np.ndarray) -> np.ndarray:
        return self.gpus + gpu

    def nic_cable(self, plane: np.ndarray, node: np.ndarray, nic: np.ndarray) -> np.ndarray:
        return (plane * self.nodes + node) * self.nics_per_node + nic

    def leaf_of(self, plane: np.ndarray, node: np.ndarray, nic: np.ndarray) -> np.ndarray:
        """The tier-0 switch (global over planes) a node's NIC is cabled to."""
        per_plane = self.switches[0] // self.planes
        grp = node // self.group_nodes[0]
        rail = nic if self.rail else np.zeros_like(nic)
        return plane * per_plane + grp * self.rails + rail

    def tier_cable(self, tier: int, switch: np.ndarray, uplink: np.ndarray) -> np.ndarray:
        """Cable ``uplink`` of ``switch`` at ``tier`` (its id within the tier's cables)."""
        return switch * self.uplinks[tier] + uplink

    def up_link(self, tier: int, cable: np.ndarray) -> np.ndarray:
        return self._tier_off[tier] + cable

    def down_link(self, tier: int, cable: np.ndarray) -> np.ndarray:
        return self._tier_off[tier] + self._tier_cables[tier] + cable

    def parent(self, tier: int, switch: np.ndarray, uplink: np.ndarray) -> np.ndarray:
        """The tier ``tier + 1`` switch that uplink ``uplink`` of a tier ``tier`` switch leads to."""
        per_plane_t = self.switches[tier] // self.planes
        per_plane_up = self.switches[tier + 1] // self.planes
        plane, local = np.divmod(switch, per_plane_t)
        below = int(np.prod(self.uplinks[:tier], dtype=np.int64)) if tier else 1
        head, m = np.divmod(local, below)  # head = group * rails + rail
        grp, rail = np.divmod(head, self.rails)
        ratio = self.group_nodes[tier + 1] // self.group_nodes[tier]
        up_local = ((grp // ratio) * self.rails + rail) * (below * self.uplinks[tier]) + m * self.uplinks[tier] + uplink
        return plane * per_plane_up + up_local

    # ---- names ----------------------------------------------------------------------------------
    def switch_names(self, tier: int) -> list[str]:
        return [f"{self.tier_names[tier]}{i}" for i in range(self.switches[tier])]

    def cable_names(self) -> tuple[list[str], np.ndarray]:
        """Every cable's name and the id of its up link (down link: see :meth:`cable_links`)."""
        names: list[str] = []
        ups: list[np.ndarray] = []
        A, nics, dn = self.gpus_per_node, self.nics_per_node, self.domain_nodes
        names += [f"node{g // A}.gpu{g % A}-nvs{g // A // dn}" for g in range(self.gpus)]
        ups.append(np.arange(self.gpus))
        planes = np.arange(self.planes)
        q, n, j = (a.ravel() for a in np.meshgrid(planes, np.arange(self.nodes), np.arange(nics), indexing="ij"))
        leaf = self.leaf_of(q, n, j)
        tag = [f".p{x}" for x in q] if self.planes > 1 else [""] * len(q)
        names += [f"node{a}.nic{b}{t}-{self.tier_names[0]}{c}" for a, b, t, c in zip(n, j, tag, leaf)]
        ups.append(self.nic_off + self.nic_cable(q, n, j))
        for t in range(len(self.uplinks)):
            sw = np.repeat(np.arange(self.switches[t]), self.uplinks[t])
            up = np.tile(np.arange(self.uplinks[t]), self.switches[t])
            par = self.parent(t, sw, up)
            lo, hi = self.tier_names[t], self.tier_names[t + 1]
            names += [f"{lo}{a}-{hi}{b}" for a, b in zip(sw, par)]
            ups.append(self.up_link(t, self.tier_cable(t, sw, up)))
        return names, np.concatenate(ups)

    def down_of(self, up: np.ndarray) -> np.ndarray:
        """The down link of the cable whose up link is ``up``."""
        down = up.copy()
        nv = up < self.gpus
        down[nv] = up[nv] + self.gpus
        nic = (up >= self.nic_off) & (up < self.nic_off + self.nic_cables)
        down[nic] = up[nic] + self.nic_cables
        for t in range(len(self.uplinks)):
            sel = (up >= self._tier_off[t]) & (up < self._tier_off[t] + self._tier_cables[t])
            down[sel] = up[sel] + self._tier_cables[t]
        return down

    def link_name(self, link: int) -> str:
        """A directed link's name: the cable's, with ``(up)`` or ``(down)``."""
        names, ups = self._names()
        if link < self.gpus:
            return names[link] + " (up)"
        if link < 2 * self.gpus:
            return names[link - self.gpus] + " (down)"
        base = self.gpus
        off = self.nic_off
        count = self.nic_cables
        for t in range(-1, len(self.uplinks)):
            if t >= 0:
                base += count
                off, count = self._tier_off[t], self._tier_cables[t]
            if off <= link < off + 2 * count:
                k = link - off
                return names[base + k % count] + (" (up)" if k < count else " (down)")
        raise IndexError(link)

    def _names(self) -> tuple[list[str], np.ndarray]:
        cached = getattr(self, "_name_cache", None)
        if cached is None:
            cached = self.cable_names()
            object.__setattr__(self, "_name_cache", cached)
        return cached

    # ---- faults ---------------------------------------------------------------------------------
    def with_faults(self, faults: tuple[Fault, ...]) -> Fabric:
        """A copy with each fault's cables failed or degraded; :class:`SimError` names a fault matching nothing."""
        if not faults:
            return self
        names, ups = self._names()
        cap = self.capacity.copy()
        hits: dict[str, int] = {}
        switch_names = {t: self.switch_names(t) for t in range(len(self.tier_names))}
        for fault in faults:
            cables = self._match(fault.pattern, names, ups, switch_names)
            if cables.size == 0:
                raise SimError(
                    f"fault {fault.pattern!r} matches no switch, NIC or link of this fabric "
                    f"(names look like {', '.join(dict.fromkeys(f'{t}0' for t in self.tier_names))}, nvs0, node0.nic0, "
                    f"{names[self.gpus] if len(names) > self.gpus else names[0]})"
                )
            for link in (cables, self.down_of(cables)):
                cap[link] *= fault.factor
            hits[fault.pattern] = int(cables.size)
        kept = {f: getattr(self, f) for f in self.__dataclass_fields__ if f not in ("capacity", "serial")}
        out = Fabric(**kept, capacity=cap)
        out.faults = self.faults + tuple(faults)
        out.fault_cables = {**self.fault_cables, **hits}
        object.__setattr__(out, "_name_cache", (names, ups))
        return out

    def _match(self, pattern: str, names: list[str], ups: np.ndarray, switch_names: dict[int, list[str]]) -> np.ndarray:
        """Up links of the cables ``pattern`` names: cables by name, or every cable of a matching switch or NIC."""
        rx = re.compile(fnmatch.translate(pattern))
        picked = [ups[i] for i, n in enumerate(names) if rx.match(n)]
        for t, sw_names in switch_names.items():
            hit = np.array([i for i, n in enumerate(sw_names) if rx.match(n)], dtype=np.int64)
            if hit.size:
                picked.extend(self._switch_cables(t, hit))
        A, dn = self.gpus_per_node, self.domain_nodes
        domains = -(-self.nodes // dn)
        nvs = [d for d in range(domains) if rx.match(f"nvs{d}")]
        for d in nvs:
            picked.extend(range(d * dn * A, min((d + 1) * dn * A, self.gpus)))
        for n in range(self.nodes):
            for j in range(self.nics_per_node):
                if rx.match(f"node{n}.nic{j}"):
                    picked.extend(
                        self.nic_off
                        + self.nic_cable(np.arange(self.planes), np.full(self.planes, n), np.full(self.planes, j))
                    )
        return np.unique(np.asarray(picked, dtype=np.int64))

    def _switch_cables(self, tier: int, switch: np.ndarray) -> list[int]:
        out: list[int] = []
        if tier < len(self.uplinks):
            u = self.uplinks[tier]
            out.extend((self.up_link(tier, (switch[:, None] * u + np.arange(u)[None, :]).ravel())).tolist())
        if tier == 0:
            q, n, j = (
                a.ravel()
                for a in np.meshgrid(
                    np.arange(self.planes), np.arange(self.nodes), np.arange(self.nics_per_node), indexing="ij"
                )
            )
            leaf = self.leaf_of(q, n, j)
            sel = np.isin(leaf, switch)
            out.extend((self.nic_off + self.nic_cable(q[sel], n[sel], j[sel])).tolist())
        else:
            below = tier - 1
            sw = np.repeat(np.arange(self.switches[below]), self.uplinks[below])
            up = np.tile(np.arange(self.uplinks[below]), self.switches[below])
            sel = np.isin(self.parent(below, sw, up), switch)
            out.extend(self.up_link(below, self.tier_cable(below, sw[sel], up[sel])).tolist())
        return out

    def describe(self) -> FabricDoc:
        """What was built: tiers, switch and link counts, the faults applied."""
        return {
            "topology": self.topology.name,
            "nodes": self.nodes,
            "gpus": self.gpus,
            "planes": self.planes,
            "rail_optimized": self.rail,
            "tiers": [
                {
                    "name": name,
                    "group_nodes": g,
                    "switches": s,
                    "uplinks_per_switch": self.uplinks[t] if t < len(self.uplinks) else 0,
                }
                for t, (name, g, s) in enumerate(zip(self.tier_names, self.group_nodes, self.switches))
            ],
            "links": self.links,
            "faults": [f.describe() for f in self.faults],
            "fault_cables": dict(self.fault_cables),
        }


def check_nodes(topology: Topology, nodes: int) -> None:
    """Raise SimError unless ``topology``'s fabric holds ``nodes`` nodes."""
    out = topology.scale_out
    if nodes < 1:
        raise SimError(f"nodes must be at least 1, got {nodes}")
    if out is None and nodes > topology.domain_nodes:
        raise SimError(f"{topology.name} has no scale_out level: it holds {topology.domain_nodes} node(s), not {nodes}")
    if out is not None and nodes > out.tiers[-1].nodes:
        raise SimError(
            f"{nodes} nodes exceed {topology.name}'s fabric: its top tier ({out.tiers[-1].name}) connects "
            f"{out.tiers[-1].nodes}"
        )


def build_fabric(topology: Topology, nodes: int) -> Fabric:
    """The fabric of ``nodes`` nodes of ``topology``: every tier up to the one that spans them."""
    out = topology.scale_out
    A = topology.accelerators_per_node
    check_nodes(topology, nodes)
    if out is None:
        tiers: list[tuple[str, int, float, float]] = [("leaf", max(nodes, 1), 1.0, 0.0)]
        nics, planes, rail, nic_rate, nic_lat = 1, 1, False, 0.0, 0.0
    else:
        tiers = [(t.name, t.nodes, t.oversubscription, t.hop_latency_s) for t in out.tiers]
        nics, planes, rail = out.nics_per_node, out.planes, out.rail_optimized
        nic_rate, nic_lat = out.nic_bandwidth_bytes_per_s * out.efficiency, out.latency_s
    used = next(k for k, t in enumerate(tiers) if t[1] >= nodes or k == len(tiers) - 1) + 1
    tiers = tiers[:used]
    rails = nics if rail else 1
    uplinks: list[int] = []
    for t in range(used - 1):
        down = (tiers[0][1] if rail else tiers[0][1] * nics) if t == 0 else tiers[t][1] // tiers[t - 1][1]
        uplinks.append(max(1, round(down / tiers[t][2])))
    switches: list[int] = []
    for t in range(used):
        groups = -(-nodes // tiers[t][1])
        below = int(np.prod(uplinks[:t], dtype=np.int64)) if t else 1
        switches.append(planes * groups * rails * below)
    G = nodes * A
    cables = [planes * nodes * nics] + [switches[t] * uplinks[t] for t in range(used - 1)]
    total = 2 * G + 2 * sum(cables)
    cap = np.empty(total)
    lat = np.empty(total)
    cls = np.empty(total, dtype=np.int16)
    up_rate = topology.scale_up.bandwidth_bytes_per_s * topology.scale_up.efficiency
    cap[: 2 * G] = up_rate
    lat[: 2 * G] = topology.scale_up.latency_s
    cls[:G], cls[G : 2 * G] = 0, 1
    class_names = ["nvlink up", "nvlink down", "nic up", "nic down"]
    off = 2 * G
    cap[off : off + 2 * cables[0]] = nic_rate / planes
    lat[off : off + 2 * cables[0]] = nic_lat
    cls[off : off + cables[0]], cls[off + cables[0] : off + 2 * cables[0]] = 2, 3
    off += 2 * cables[0]
    tier_off, tier_cables = [], []
    for t in range(used - 1):
        c = cables[t + 1]
        tier_off.append(off)
        tier_cables.append(c)
        cap[off : off + 2 * c] = nic_rate / planes
        lat[off : off + 2 * c] = tiers[t + 1][3]
        k = len(class_names)
        class_names += [f"{tiers[t][0]}-{tiers[t + 1][0]} up", f"{tiers[t][0]}-{tiers[t + 1][0]} down"]
        cls[off : off + c], cls[off + c : off + 2 * c] = k, k + 1
        off += 2 * c
    return Fabric(
        topology=topology,
        nodes=nodes,
        gpus_per_node=A,
        nics_per_node=nics,
        planes=planes,
        rail=rail,
        domain_nodes=topology.domain_nodes,
        tier_names=tuple(t[0] for t in tiers),
        group_nodes=tuple(t[1] for t in tiers),
        uplinks=tuple(uplinks),
        switches=tuple(switches),
        capacity=cap,
        latency_s=lat,
        link_class=cls,
        class_names=tuple(class_names),
        _tier_off=tuple(tier_off),
        _tier_cables=tuple(tier_cables),
    )
