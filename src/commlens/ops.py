"""The catalog of collective operations: the one place their facts live.

For every op: what its message size means, how many elements each rank sends
and receives, whether it reduces, whether it has a root, and the algBW/busBW
factors, all exactly as nccl-tests defines them (``src/*.cu``,
``<op>GetCollByteCount`` and ``<op>GetBw``; see
``shared/reference/nccl-tests-semantics.md``).

Terms, as in nccl-tests:

- ``count`` (the table's "count" column) is the element count nccl-tests
  passes to the NCCL call: per rank for all_gather, reduce_scatter,
  all_to_all, gather and scatter, the whole buffer for the others.
- ``size_bytes`` (the table's "size" column) is ``max(send, recv)`` bytes on
  one rank: ``count x elem x n`` for the per-rank ops above.
- algBW = size_bytes / time; busBW = algBW x busbw_factor(n).

A requested size that the per-rank split cannot honour exactly is rounded down
as nccl-tests does (``count/nranks`` in integer arithmetic); ``plan_size``
says when it happened.

Two facts here are shared by :mod:`commlens.algos` (which runs the
algorithms) and :mod:`commlens.model` (which prices them), the only module
both may import: :data:`TRANSPORTS`, what each backend's point-to-point
transport does, and :func:`hierarchical_all_reduce_scheme`, which of its
named schemes commlens' ``hierarchical`` all-reduce runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from commlens.errors import CommlensError

__all__ = [
    "HIERARCHICAL_LEADERS_MAX_BYTES",
    "HIERARCHICAL_ONE_WAY_MIN_BYTES",
    "OPS",
    "OP_NAMES",
    "REDOPS",
    "TRANSPORTS",
    "OpSpec",
    "SizePlan",
    "Transport",
    "UnknownOpError",
    "get_op",
    "hierarchical_all_reduce_scheme",
    "parse_ops",
    "transport",
]


class UnknownOpError(CommlensError, ValueError):
    """An op name that is not in the catalog."""


@dataclass(frozen=True)
class SizePlan:
    """How a requested size maps onto one op's buffers at a world size."""

    requested_bytes: int
    size_bytes: int  # the nccl-tests "size" column: max(send, recv) bytes per rank
    count: int  # the nccl-tests "count" column: elements passed to the call
    send_count: int  # elements in one rank's input buffer
    recv_count: int  # elements in one rank's output buffer
    rounded: bool  # size_bytes differs from what was asked


def _ring_factor(n: int) -> float:
    return (n - 1) / n if n > 1 else 0.0


def _allreduce_factor(n: int) -> float:
    return 2 * (n - 1) / n if n > 1 else 0.0


def _unit_factor(n: int) -> float:
    return 1.0


@dataclass(frozen=True)
class OpSpec:
    """Facts about one collective, as nccl-tests states them."""

    name: str
    nccl_tests_name: str  # the binary's stem: all_reduce_perf -> "all_reduce"
    title: str  # nccl-tests' collective name ("AllReduce")
    reduces: bool
    has_root: bool
    per_rank_split: bool  # count is per rank; size = count x elem x n
    in_place_send_offset: bool  # in place, the input is the rank's slice of the output
    size_meaning: str
    _factor: Callable[[int], float]

    def busbw_factor(self, world_size: int) -> float:
        """busBW / algBW for ``world_size`` ranks (nccl-tests ``<op>GetBw``)."""
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        return self._factor(world_size)

    def plan_size(self, size_bytes: int, elem_size: int, world_size: int) -> SizePlan:
        """Element counts for a requested size, rounded as nccl-tests rounds."""
        if size_bytes < 0:
            raise ValueError(f"size must be >= 0 bytes, got {size_bytes}")
        if elem_size < 1 or world_size < 1:
            raise ValueError("elem_size and world_size must be >= 1")
        total = size_bytes // elem_size
        if self.name == "barrier":
            return SizePlan(size_bytes, 0, 0, 0, 0, size_bytes != 0)
        if self.per_rank_split:
            per_rank = total // world_size
            full = per_rank * world_size
            send, recv = {
                "all_gather": (per_rank, full),
                "gather": (per_rank, full),
                "reduce_scatter": (full, per_rank),
                "scatter": (full, per_rank),
                "all_to_all": (full, full),
            }[self.name]
            count = per_rank
        else:
            send = recv = count = total
        size = max(send, recv) * elem_size
        return SizePlan(size_bytes, size, count, send, recv, size != size_bytes)

    def algbw(self, size_bytes: int, time_s: float) -> float:
        """Algorithm bandwidth in bytes/s: size / time."""
        return size_bytes / time_s if time_s > 0 else 0.0

    def busbw(self, size_bytes: int, time_s: float, world_size: int) -> float:
        """Bus bandwidth in bytes/s: algBW x the op's factor."""
        return self.algbw(size_bytes, time_s) * self.busbw_factor(world_size)


OPS: dict[str, OpSpec] = {
    spec.name: spec
    for spec in (
        OpSpec(
            "all_reduce",
            "all_reduce",
            "AllReduce",
            True,
            False,
            False,
            False,
            "bytes each rank contributes and receives (count x elem)",
            _allreduce_factor,
        ),
        OpSpec(
            "all_gather",
            "all_gather",
            "AllGather",
            False,
            False,
            True,
            True,
            "bytes each rank receives: the gathered whole (count x elem x ranks)",
            _ring_factor,
        ),
        OpSpec(
            "reduce_scatter",
            "reduce_scatter",
            "ReduceScatter",
            True,
            False,
            True,
            False,
            "bytes each rank contributes: the full input (count x elem x ranks)",
            _ring_factor,
        ),
        OpSpec(
            "all_to_all",
            "alltoall",
            "AlltoAll",
            False,
            False,
            True,
            False,
            "bytes each rank sends, all peers together (count x elem x ranks)",
            _ring_factor,
        ),
        OpSpec(
            "broadcast",
            "broadcast",
            "Broadcast",
            False,
            True,
            False,
            False,
            "bytes the root sends and every rank receives (count x elem)",
            _unit_factor,
        ),
        OpSpec(
            "reduce",
            "reduce",
            "Reduce",
            True,
            True,
            False,
            False,
            "bytes each rank contributes to the root (count x elem)",
            _unit_factor,
        ),
        OpSpec(
            "gather",
            "gather",
            "Gather",
            False,
            True,
            True,
            True,
            "bytes the root receives, all ranks together (count x elem x ranks)",
            _ring_factor,
        ),
        OpSpec(
            "scatter",
            "scatter",
            "Scatter",
            False,
            True,
            True,
            False,
            "bytes the root sends, all ranks together (count x elem x ranks)",
            _ring_factor,
        ),
        OpSpec(
            "sendrecv",
            "sendrecv",
            "SendRecv",
            False,
            False,
            False,
            False,
            "bytes each rank sends to the next rank and receives from the previous",
            _unit_factor,
        ),
        OpSpec(
            "barrier",
            "barrier",
            "Barrier",
            False,
            False,
            False,
            False,
            "no payload: latency of a barrier; size is always 0",
            lambda n: 0.0,
        ),
    )
}

OP_NAMES: tuple[str, ...] = tuple(OPS)

# Reductions in the order nccl-tests lists them (-o).
REDOPS: tuple[str, ...] = ("sum", "prod", "max", "min", "avg")


# Spellings without separators: "allreduce", "all-reduce", "alltoall" -> catalog name.
_ALIASES: dict[str, str] = {
    **{spec.nccl_tests_name.replace("_", ""): spec.name for spec in OPS.values()},
    **{name.replace("_", ""): name for name in OPS},
}


def get_op(name: str) -> OpSpec:
    """The spec of ``name``; accepts nccl-tests spellings (``allreduce``, ``alltoall``)."""
    spec = OPS.get(name)
    if spec is not None:
        return spec
    key = name.strip().lower().replace("-", "").replace("_", "")
    try:
        return OPS[_ALIASES[key]]
    except KeyError:
        raise UnknownOpError(f"unknown op {name!r}; known: {', '.join(OP_NAMES)} or 'all'") from None


def parse_ops(text: str | list[str]) -> list[OpSpec]:
    """Ops from a comma list or list of names; ``all`` adds every payload op (barrier only by name)."""
    names = text.split(",") if isinstance(text, str) else [p for t in text for p in t.split(",")]
    names = [n.strip() for n in names if n.strip()]
    if not names:
        raise UnknownOpError("no op given")
    seen: dict[str, OpSpec] = {}
    for n in names:
        if n.lower() == "all":
            for spec in OPS.values():
                if spec.name != "barrier":
                    seen.setdefault(spec.name, spec)
        else:
            spec = get_op(n)
            seen.setdefault(spec.name, spec)
    return list(seen.values())


# ---- transports and the choices that depend on them ---------------------------------------------


@dataclass(frozen=True)
class Transport:
    """What an algorithm (to choose its route) and a cost model (to price it) know of a backend's transport."""

    half_duplex_pairs: bool  # a connection carries one direction at a time: two ranks swapping share it
    origin: str  # where the fact comes from


# One entry per torch.distributed backend, by its lower-case name; a backend not listed is full duplex.
TRANSPORTS: dict[str, Transport] = {
    "gloo": Transport(
        True,
        "gloo's TCP pair moves one direction at a time: on a shaped link two ranks swapping "
        "get 14.8 MB/s each way against 29.2 one way (benchmarks/algos_cluster.py, "
        "docs/algos.md)",
    ),
    "nccl": Transport(False, "NCCL opens a send and a receive connection per peer, each direction at full rate"),
    "mpi": Transport(False, "not measured by commlens; taken as full duplex, as an unlisted backend"),
}
_FULL_DUPLEX = Transport(False, "not listed in commlens.ops.TRANSPORTS: taken as full duplex")


def transport(backend: str) -> Transport:
    """The transport facts of ``backend`` (a torch.distributed backend name, any case)."""
    return TRANSPORTS.get(backend.lower(), _FULL_DUPLEX)


# Below this buffer size the hierarchical all-reduce goes through one leader per host (fewest messages).
HIERARCHICAL_LEADERS_MAX_BYTES = 32 << 10
# From this many bytes per half shard, two hosts on half-duplex pairs take the one-way route; below, its extra
# local hop costs more than it saves.
HIERARCHICAL_ONE_WAY_MIN_BYTES = 32 << 10


def hierarchical_all_reduce_scheme(
    size_bytes: float,
    half_shard_bytes: float,
    hosts: int,
    ranks_per_host: int,
    full_hosts: bool,
    half_duplex_pairs: bool,
) -> str:
    """The all_reduce algorithm ``hierarchical`` runs: the one rule the library and the cost model share.

    ``half_shard_bytes`` is half of the smallest of the ranks_per_host shards; ``full_hosts``: the last
    host has ranks_per_host ranks too. The first that applies:

    1. several hosts of several ranks, below :data:`HIERARCHICAL_LEADERS_MAX_BYTES`:
       ``hierarchical_leaders`` (the steps cost more than the bytes);
    2. two full hosts of >= 2 ranks on half-duplex pairs, half shards of at least
       :data:`HIERARCHICAL_ONE_WAY_MIN_BYTES`: ``hierarchical_one_way``;
    3. several full hosts of several ranks, host size and host count powers of two: ``rabenseifner``
       (nearest peers first: the rings' bytes per level in fewer steps);
    4. else ``hierarchical_ring``.
    """

    def pow2(k: int) -> bool:
        return k & (k - 1) == 0

    two_level = hosts > 1 and ranks_per_host > 1
    if two_level and size_bytes < HIERARCHICAL_LEADERS_MAX_BYTES:
        return "hierarchical_leaders"
    if (
        hosts == 2
        and ranks_per_host >= 2
        and full_hosts
        and half_duplex_pairs
        and half_shard_bytes >= HIERARCHICAL_ONE_WAY_MIN_BYTES
    ):
        return "hierarchical_one_way"
    if two_level and full_hosts and pow2(ranks_per_host) and pow2(hosts):
        return "rabenseifner"
    return "hierarchical_ring"
