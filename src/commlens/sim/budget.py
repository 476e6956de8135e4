"""How much memory a simulation will take, told before anything of its size is allocated.

A fabric is a few arrays per directed link and a simulation a few hundred bytes per flow (its route, its rate,
its bundle); an all-to-all has a flow per pair of ranks, so its memory grows with the square of the job.
:func:`check_sim_size` estimates both from the topology and the collectives' shapes alone, and refuses a
simulation whose estimate exceeds the memory the machine has free: ``sim collective -N 1000000000`` is an
error naming what it would need, not 7.5 GB of growth before numpy gives up.

The per-link and per-flow figures are measured (``sim collective -t dgx-h100 --op all_to_all``, 512 to 2,048
GPUs, 2 and 8 channels: 406-457 bytes of peak memory per flow) and rounded up.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from commlens.model import InfeasibleError
from commlens.model.layout import build_layout
from commlens.sim.fabric import SimError, check_nodes
from commlens.topology import Topology

__all__ = ["CollectiveShape", "SimTooLargeError", "check_sim_size", "estimate_sim_bytes", "memory_available_bytes"]

_BASE_BYTES = 96 << 20  # the interpreter, numpy and the model, measured at 55 MB
_BYTES_PER_LINK = 256
_BYTES_PER_FLOW = 512
_BYTES_PER_GROUP_RANK = 64  # the groups table and per-group tasks
_FALLBACK_AVAILABLE_BYTES = 16 << 30  # where /proc/meminfo cannot be read


class SimTooLargeError(SimError):
    """A simulation whose estimated memory exceeds what is available; the message gives both."""


@dataclass(frozen=True)
class CollectiveShape:
    """What a collective's memory depends on: how many groups, of how many ranks, running what."""

    op: str
    size_bytes: float
    groups: int
    ranks: int  # per group
    algo: str = "auto"


def memory_available_bytes() -> int:
    """``MemAvailable`` of ``/proc/meminfo`` (what the kernel can give without swapping), else 16 GiB."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return _FALLBACK_AVAILABLE_BYTES


def _links(topology: Topology, nodes: int) -> int:
    """Directed links of the fabric of ``nodes`` nodes, an upper bound (every tier's cables as the first's)."""
    gpus = nodes * topology.accelerators_per_node
    out = topology.scale_out
    if out is None:
        return 2 * gpus
    tiers = len(out.tiers)
    return 2 * gpus + 2 * tiers * out.planes * nodes * max(out.nics_per_node, topology.accelerators_per_node)


def _flows_per_group(topology: Topology, shape: CollectiveShape) -> int:
    """Flows one group's collective sets up, the largest stage counted for every stage (an upper bound).

    From the cost model's recorded patterns where it can price the group; a pattern the model cannot build (or
    a group it refuses) counts as every rank to every other, the most any pattern has.
    """
    from commlens.sim.traffic import recorded

    p = shape.ranks
    if p <= 1:
        return 0
    worst = p * (p - 1)
    per_node = min(p, topology.accelerators_per_node)
    try:
        layout = build_layout(topology, nodes=math.ceil(p / per_node), ranks_per_host=per_node)
        _, cost = recorded(topology, layout, shape.op, shape.algo, shape.size_bytes)
    except (InfeasibleError, SimError, ValueError):
        return worst
    d = layout.domain_ranks
    total = 0
    for _index, pattern, *_ in cost.patterns or []:
        kind = pattern[0]
        if kind == "direct":
            rounds = pattern[2]
            total += p * sum(b - a + 1 for a, b in rounds[1]) if rounds is not None else worst
        elif kind == "exchange":
            total += p * len(pattern[1])
        elif kind in ("ring", "tree"):
            total += 4 * p * max(d, 1)
        else:  # two_level, switch, pair
            total += 2 * p
    return total


def estimate_sim_bytes(
    topology: Topology, nodes: int, collectives: list[CollectiveShape], *, qps: int = 1, channels: int = 2
) -> int:
    """Peak memory a simulation of ``collectives`` on ``nodes`` nodes of ``topology`` needs, over-estimated."""
    per_group: dict[tuple[str, float, int, str], int] = {}  # a step's collectives share few shapes
    for s in collectives:
        key = (s.op, s.size_bytes, s.ranks, s.algo)
        if key not in per_group:
            per_group[key] = _flows_per_group(topology, s)
    flows = sum(s.groups * per_group[(s.op, s.size_bytes, s.ranks, s.algo)] for s in collectives) * qps * channels
    ranks = sum(s.groups * s.ranks for s in collectives)
    return (
        _BASE_BYTES
        + _links(topology, nodes) * _BYTES_PER_LINK
        + flows * _BYTES_PER_FLOW
        + ranks * _BYTES_PER_GROUP_RANK
    )


def check_sim_size(
    topology: Topology,
    nodes: int,
    collectives: list[CollectiveShape],
    *,
    qps: int = 1,
    channels: int = 2,
    available_bytes: int | None = None,
) -> int:
    """The estimate of :func:`estimate_sim_bytes`; raises :class:`SimTooLargeError` when it exceeds
    ``available_bytes`` (default: :func:`memory_available_bytes`)."""
    check_nodes(topology, nodes)
    need = estimate_sim_bytes(topology, nodes, collectives, qps=qps, channels=channels)
    have = memory_available_bytes() if available_bytes is None else available_bytes
    if need > have:
        gpus = nodes * topology.accelerators_per_node
        raise SimTooLargeError(
            f"simulating {nodes:,} nodes ({gpus:,} GPUs) of {topology.name} needs about {need / 2**30:,.1f} GiB "
            f"of memory (fabric links and flows estimated before allocating); {have / 2**30:,.1f} GiB is "
            f"available: fewer nodes, channels or queue pairs"
        )
    return need
