"""Where a job's ranks sit on a topology, and what each level offers them.

A :class:`Layout` is the topology reduced to the numbers the cost formulas
read, for one job shape (nodes x ranks per node). Ranks are numbered
node-major, as launchers place them: rank r lives on node r // ranks_per_host,
and consecutive nodes fill a scale-up domain before the next one starts.

Rates are effective (line rate x efficiency), in bytes per second per
direction; latencies are seconds per message.

Ranks per host is ``ranks_per_host`` in all of commlens' code (a node of a
topology is a host). Names kept where users already depend on them: the
options ``--ranks-per-node`` (``model``) and ``--ranks-per-host`` (``bench``,
``tune``, ``cluster``); the key ``ranks_per_node`` of ``model predict --json``;
``ranks_per_host`` in tuning tables, cluster state and a run's ``system``
(there a map host -> ranks); PARAM's own ``local_size``, kept as
``system.extra.local_size``. ``domain_ranks`` is another quantity: the ranks
of one scale-up domain, which may span several hosts.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import lru_cache
from operator import attrgetter
from typing import TYPE_CHECKING, Any

from commlens.errors import CommlensError

if TYPE_CHECKING:
    from commlens.topology.plain import AnyTopology  # the pydantic spec or its plain form: the model reads either

__all__ = ["InfeasibleError", "Layout", "build_layout"]


class InfeasibleError(CommlensError, ValueError):
    """A job or algorithm the topology cannot run; the message says why (sweeps count these)."""


@dataclass(slots=True)  # not frozen: a frozen __init__ of 30 fields costs ~5x, and a projection builds ~10
class Layout:
    """The numbers the cost formulas read for one job shape on one topology. Treated as a value: code builds a new
    one (:meth:`evolve`) and never assigns to a field; caches key it by ``id`` (it is not hashable)."""

    topology: str  # the topology's name, for messages
    ranks: int  # p
    nodes: int
    ranks_per_host: int  # R: ranks on each node (host)
    domain_ranks: int  # D: ranks in one scale-up domain of this job (R x its nodes: not ranks per host)
    domains: int  # M: scale-up domains the job spans
    domain_nodes: int  # nodes in one domain of this job
    launch_s: float  # fixed cost of one call
    chunk_bytes: float  # pipelining chunk
    up_latency_s: float
    up_rate: float  # scale-up bytes/s per rank per direction (beyond the cache, if the level has one)
    up_both: float  # 1 on full-duplex links; 2 when a rank's sends and receives share one budget
    up_cache_bytes: int  # 0: no cache effect
    up_cached_rate: float  # rate of cache-resident buffers
    host_cores: int  # cores the ranks of a node share for copying (CPU-driven transports); 0: not shared
    switch_rate: float  # in-switch (NVLS) bytes/s per rank per direction; 0 without in-switch reduction
    switch_latency_s: float
    reduce_rate: float  # bytes reduced per second by one rank
    reduce_overlaps: bool  # reductions hide under transfers (fused kernels)
    copy_rate: float  # local copies, bytes/s
    nic_rate: float  # one NIC, effective
    nics_per_node: int
    out_both: float  # as up_both, for the NICs
    out_pair_both: float  # 2 when two ranks exchanging across the fabric share one connection's one direction
    rail_optimized: bool
    out_latency_s: tuple[float, ...]  # message latency when the lowest common tier is k
    out_taper: tuple[float, ...]  # bandwidth divisor when the lowest common tier is k
    tier_nodes: tuple[int, ...]  # nodes in one group of tier k
    job_tier: int  # the tier spanning the whole job (-1: single domain)

    def evolve(self, **changes: Any) -> Layout:
        """This layout with ``changes``: ``dataclasses.replace``, at a third of its cost (the collectives' cost model
        derives a handful of these for every job shape it prices)."""
        new = Layout(*_FIELD_VALUES(self))
        for name, value in changes.items():
            setattr(new, name, value)
        return new

    @property
    def multi_domain(self) -> bool:
        return self.domains > 1

    @property
    def host_rate(self) -> float:
        """What all ranks of a node copy per second together: each core at one rank's rate (0: no such limit)."""
        return self.host_cores * self.up_rate

    def for_size(self, working_set_bytes: float) -> Layout:
        """This layout for one buffer size: on a level with a cache, the cache-resident share moves faster.

        The first ``cache_bytes`` of the working set move at the cached rate,
        the rest at the memory-bound rate: 1/rate = f/cached + (1-f)/rate,
        f = min(1, cache_bytes / working set).
        """
        if not self.up_cache_bytes:
            return self
        f = min(1.0, self.up_cache_bytes / max(working_set_bytes, 1.0))
        return self.evolve(up_rate=1.0 / (f / self.up_cached_rate + (1.0 - f) / self.up_rate))

    def node_nic_rate(self) -> float:
        """What one node's ranks can push into the fabric together: each rank drives at most its own NIC."""
        return self.nic_rate * min(self.nics_per_node, self.ranks_per_host)

    def nic_share(self, senders_per_node: int) -> float:
        """Per-rank fabric rate when ``senders_per_node`` ranks of every node send at once (the NIC bottleneck)."""
        return self.node_nic_rate() / max(senders_per_node, 1) if senders_per_node > 1 else self.nic_rate

    def domain_nic_rate(self) -> float:
        """All NICs of one domain together: what ring channels spread over every rail reach."""
        return self.node_nic_rate() * self.domain_nodes

    def tier_for_span(self, span_nodes: float) -> int:
        """The lowest tier whose group holds ``span_nodes`` consecutive nodes."""
        return _tier_for_span(self.tier_nodes, span_nodes)

    def ring_taper(self) -> float:
        """Bandwidth divisor for a ring's domain crossings, from the tiers' oversubscription [27 s13 oversub].

        NCCL joins the nodes of a ring channel in node order, one edge from each node's last rank to the next
        node's first (NVIDIA/nccl src/graph/connect.cc ``connectRings``), so a tier-(k-1) group of G nodes sends
        one edge per channel out over its uplinks, not one per node. Those crossings carry what one domain's NICs
        carry (the ring's rate), against the group's uplinks: G nodes' NICs / ``out_taper[k]``. A group smaller
        than a domain has every channel's edge leave it (G taken as the domain). 1 when the uplinks keep up.
        """
        if not self.multi_domain:
            return 1.0
        return _ring_taper(self.out_taper, self.tier_nodes, self.nodes, self.domain_nodes, self.job_tier)

    def a2a_taper(self) -> float:
        """Bandwidth divisor for uniform traffic to every other domain, from the tiers' oversubscription.

        A node sends the fraction (1 - G_j / N) of its cross-domain bytes above
        tier j (G_j: nodes in its tier-j group, N: nodes of the job); those
        bytes share the node's uplink share, tapered by the tiers below.
        """
        if not self.multi_domain:
            return 1.0
        cross = 1.0 - self.domain_nodes / self.nodes
        worst = 1.0
        for k in range(1, self.job_tier + 1):
            above = 1.0 - min(self.tier_nodes[k - 1], self.nodes) / self.nodes
            worst = max(worst, self.out_taper[k] * above / cross)
        return worst


def build_layout(topology: AnyTopology, nodes: int = 1, ranks_per_host: int | None = None) -> Layout:
    """The layout of ``nodes`` x ``ranks_per_host`` ranks; :class:`InfeasibleError` when it cannot exist."""
    per_node = topology.accelerators_per_node
    ranks_per_host = per_node if ranks_per_host is None else ranks_per_host
    if nodes < 1:
        raise InfeasibleError(f"nodes must be >= 1, got {nodes}")
    if not 1 <= ranks_per_host <= per_node:
        raise InfeasibleError(
            f"ranks per node must be between 1 and {topology.name}'s {per_node} accelerators per node, got {ranks_per_host}"
        )
    domain_nodes_full = topology.domain_nodes
    if nodes <= domain_nodes_full:
        domain_nodes, domains = nodes, 1
    else:
        # Spread evenly over the fewest domains that hold it: a 64-tray job on NVL72 racks of 18 trays runs as 4
        # racks of 16, as schedulers place it; a count that splits only into domains under half full is refused.
        domains = -(-nodes // domain_nodes_full)
        while nodes % domains:
            domains += 1
        domain_nodes = nodes // domains
        if 2 * domain_nodes < domain_nodes_full:
            raise InfeasibleError(
                f"{nodes} nodes do not fill whole scale-up domains of {domain_nodes_full} nodes on {topology.name} "
                "(nor split evenly into domains at least half full)"
            )
    up, out = topology.scale_up, topology.scale_out
    if domains > 1 and out is None:
        raise InfeasibleError(
            f"{topology.name} has no scale_out level: it cannot connect {nodes} nodes "
            f"(one scale-up domain holds {domain_nodes_full})"
        )
    if out is not None and nodes > out.tiers[-1].nodes:
        raise InfeasibleError(
            f"{nodes} nodes exceed {topology.name}'s fabric: its top tier ({out.tiers[-1].name}) "
            f"connects {out.tiers[-1].nodes}"
        )
    up_rate = up.bandwidth_bytes_per_s * up.efficiency
    switch_rate = up_rate * up.in_switch_efficiency if up.in_switch_reduction and up.in_switch_efficiency else 0.0
    lat: tuple[float, ...]
    taper: tuple[float, ...]
    groups: tuple[int, ...]
    if out is None:
        nic_rate, nics, rail, lat, taper, groups = 0.0, 1, False, (0.0,), (1.0,), (domain_nodes,)
    else:
        nic_rate, nics, rail = out.nic_bandwidth_bytes_per_s * out.efficiency, out.nics_per_node, out.rail_optimized
        lat_list, taper_list, t_lat, t_taper = [], [], out.latency_s, 1.0
        for k in range(len(out.tiers)):  # (indexed: the tiers of either topology form type-check alike)
            tier = out.tiers[k]
            if k > 0:
                t_lat += 2.0 * tier.hop_latency_s
                t_taper *= out.tiers[k - 1].oversubscription
            lat_list.append(t_lat)
            taper_list.append(t_taper)
        lat, taper, groups = tuple(lat_list), tuple(taper_list), tuple(t.nodes for t in out.tiers)
    return Layout(
        topology=topology.name,
        ranks=nodes * ranks_per_host,
        nodes=nodes,
        ranks_per_host=ranks_per_host,
        domain_ranks=domain_nodes * ranks_per_host,
        domains=domains,
        domain_nodes=domain_nodes,
        launch_s=topology.launch_latency_s,
        chunk_bytes=float(topology.pipeline_chunk_bytes),
        up_latency_s=up.latency_s,
        up_rate=up_rate,
        up_both=1.0 if up.full_duplex else 2.0,
        up_cache_bytes=up.cache_bytes or 0,
        up_cached_rate=up.cached_bandwidth_bytes_per_s or up_rate,
        host_cores=up.host_cores or 0,
        switch_rate=switch_rate,
        switch_latency_s=up.in_switch_latency_s or 0.0,
        reduce_rate=topology.accelerator.reduction_bytes_per_s,
        reduce_overlaps=topology.accelerator.reduction_overlaps_transfer,
        copy_rate=topology.accelerator.copy_bytes_per_s,
        nic_rate=nic_rate,
        nics_per_node=nics,
        out_both=1.0 if out is None or out.full_duplex else 2.0,
        out_pair_both=1.0 if out is None or out.pair_full_duplex else 2.0,
        rail_optimized=rail,
        out_latency_s=lat,
        out_taper=taper,
        tier_nodes=groups,
        job_tier=-1 if domains == 1 else _tier_for_span(groups, nodes),
    )


_FIELD_VALUES = attrgetter(*(f.name for f in fields(Layout)))  # every field, in order: Layout(*_FIELD_VALUES(x))


def _tier_for_span(tier_nodes: tuple[int, ...], span_nodes: float) -> int:
    """The lowest tier whose group holds ``span_nodes`` consecutive nodes (see :meth:`Layout.tier_for_span`)."""
    for k, group in enumerate(tier_nodes):
        if group >= span_nodes:
            return k
    return len(tier_nodes) - 1


@lru_cache(maxsize=1024)  # one value per fabric and job shape; every ring crossing domains asks for it
def _ring_taper(
    out_taper: tuple[float, ...], tier_nodes: tuple[int, ...], nodes: int, domain_nodes: int, job_tier: int
) -> float:
    """:meth:`Layout.ring_taper` of a layout spanning domains, from the fields it reads."""
    if max(out_taper[: job_tier + 1]) <= 1.0:
        return 1.0  # no tier below the job's is oversubscribed (most fabrics)
    worst = 1.0
    for k in range(1, job_tier + 1):
        group = max(min(tier_nodes[k - 1], nodes), domain_nodes)
        worst = max(worst, out_taper[k] * domain_nodes / group)
    return worst
