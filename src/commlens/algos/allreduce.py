"""all_reduce algorithms over point-to-point: ring, recursive doubling, Rabenseifner, binomial, direct, two-level.

The two-level schemes (``hierarchical_ring``, ``hierarchical_leaders``,
``hierarchical_one_way``) are algorithms of their own; ``hierarchical`` runs
the one :func:`commlens.ops.hierarchical_all_reduce_scheme` picks.

Sizes below: p ranks, n the buffer, p' = 2^floor(lg p). Each algorithm
does what its cost model in :mod:`commlens.model.algorithms` assumes.

Every rank ends with bitwise the same values: each element is either reduced
on one rank and copied to the others (ring, Rabenseifner, binomial,
hierarchical) or reduced by every rank in one fixed operand order (recursive
doubling, direct). Different algorithms round floating-point sums
differently, as any two all-reduce implementations do: the tests hold float
sum and avg to within p * eps(dtype) * sum_j |x_j| of gloo's built-in
all_reduce, elementwise, and every other case (integers, max, min, prod of
small whole numbers) to exact equality.
"""

from __future__ import annotations

import torch

from commlens.algos.allgather import ring_all_gather_inplace
from commlens.algos.base import AlgoError, Comm, Options, block_bounds, chunk_bounds, combine, get_algorithm, register
from commlens.algos.bcast import binomial as binomial_broadcast
from commlens.algos.reducescatter import (
    FoldedOut,
    fold_to_power_of_two,
    halving_reduce_scatter_inplace,
    ring_reduce_scatter_inplace,
)
from commlens.algos.rootreduce import binomial_reduce
from commlens.ops import hierarchical_all_reduce_scheme

__all__ = [
    "binomial",
    "direct",
    "hierarchical",
    "hierarchical_leaders",
    "hierarchical_one_way",
    "hierarchical_ring",
    "rabenseifner",
    "recursive_doubling",
    "ring",
]


def _ring_all_reduce(comm: Comm, buf: torch.Tensor, redop: str, opts: Options) -> None:
    bounds = block_bounds(buf.numel(), comm.size)
    ring_reduce_scatter_inplace(comm, buf, bounds, redop, opts)
    ring_all_gather_inplace(comm, buf, bounds, opts)


@register("all_reduce", "ring", chunked=True)
def ring(comm: Comm, tensor: torch.Tensor, redop: str, opts: Options) -> None:
    """Ring: reduce-scatter then all-gather around i -> i+1, 2(p-1) steps of n/p; 2(p-1)/p n each way per rank.

    The buffer is cut into p blocks (uneven, empty ones when n < p). The
    reduce-scatter receives through two scratch pieces, posted ahead so the
    next piece arrives while this one is reduced into place; the all-gather
    receives straight into place. With ``chunk_bytes`` each step moves its
    block in pieces of at most that size.
    """
    _ring_all_reduce(comm, tensor, redop, opts)


def _lower_first(buf: torch.Tensor, incoming: torch.Tensor, redop: str, buf_is_lower: bool) -> None:
    """buf <- lower (redop) upper, the operands ordered by rank so both peers compute the same bits."""
    if buf_is_lower:
        combine(buf, incoming, redop)
    else:
        combine(incoming, buf, redop)
        buf.copy_(incoming)


@register("all_reduce", "recursive_doubling")
def recursive_doubling(comm: Comm, tensor: torch.Tensor, redop: str, opts: Options) -> None:
    """Recursive doubling: lg p' steps exchanging the whole n; any p with a fold (one n step before, one after).

    1. If p is not a power of two, ranks 2j and 2j+1 (j < p - p') fold: 2j
       sends its buffer to 2j+1, which reduces it.
    2. lg p' steps among the p' remaining ranks: swap the whole buffer with
       the peer at distance 1, 2, 4 ... and reduce, the lower rank's operand
       first so both peers compute identical bits (max/min of -0.0 and +0.0).
    3. Rank 2j+1 sends the result back to 2j.
    """
    fold = fold_to_power_of_two(comm, tensor, redop)
    if isinstance(fold, FoldedOut):
        comm.exchange(recvs=[(fold.partner, tensor)])
        return
    active, v = fold.active, fold.active.index
    scratch = torch.empty_like(tensor)
    mask = 1
    while mask < active.size:
        peer = v ^ mask
        active.exchange([(peer, tensor)], [(peer, scratch)])
        _lower_first(tensor, scratch, redop, v < peer)
        mask <<= 1
    if fold.partner is not None:
        comm.exchange([(fold.partner, tensor)])


@register("all_reduce", "rabenseifner")
def rabenseifner(comm: Comm, tensor: torch.Tensor, redop: str, opts: Options) -> None:
    """Rabenseifner: recursive-halving reduce-scatter, recursive-doubling all-gather; 2 lg p' steps, 2(p'-1)/p' n.

    1. Fold to p' ranks if needed (2j sends n to 2j+1, reduced).
    2. Reduce-scatter by recursive halving over p' blocks, near peers first
       (distance 1 carries n/2, distance 2 n/4 ...), as MPICH and the cost model.
    3. All-gather by the same steps backwards (distance p'/2 carries n/p' ...
       distance 1 n/2), each received straight into place.
    4. Unfold: 2j+1 sends the result (n) to 2j.
    """
    fold = fold_to_power_of_two(comm, tensor, redop)
    if isinstance(fold, FoldedOut):
        comm.exchange(recvs=[(fold.partner, tensor)])
        return
    active = fold.active
    steps = halving_reduce_scatter_inplace(
        active, tensor, block_bounds(tensor.numel(), active.size), redop, opts, near_first=True
    )
    for step in reversed(steps):
        (a, z), (c, d) = step.keep, step.give
        active.exchange([(step.peer, tensor[a:z])], [(step.peer, tensor[c:d])])
    if fold.partner is not None:
        comm.exchange([(fold.partner, tensor)])


@register("all_reduce", "binomial", chunked=True)
def binomial(comm: Comm, tensor: torch.Tensor, redop: str, opts: Options) -> None:
    """Binomial tree reduce to rank 0, then binomial broadcast: 2 ceil(lg p) steps of n.

    The broadcast is the ``binomial`` broadcast, the reduce tree run the
    other way. With ``chunk_bytes`` both trees run once per chunk,
    so chunks pipeline down the levels of each tree.
    """
    chunk = opts.chunk_elems(tensor)
    scratch = torch.empty_like(tensor[:chunk] if chunk is not None else tensor)
    pieces = chunk_bounds(tensor.numel(), chunk)
    for a, z in pieces:
        binomial_reduce(comm, tensor[a:z], 0, redop, scratch[: z - a])
    for a, z in pieces:
        binomial_broadcast(comm, tensor[a:z], 0, opts)


@register("all_reduce", "direct")
def direct(comm: Comm, tensor: torch.Tensor, redop: str, opts: Options) -> None:
    """One-shot: every rank sends n to every other at once and reduces all p buffers itself; 1 step, (p-1) n.

    Each rank reduces the buffers in rank order 0, 1, ..., p-1, so all ranks
    compute the same bits. Needs (p-1) n of scratch.
    """
    p, i, n = comm.size, comm.index, tensor.numel()
    others = [j for j in range(p) if j != i]
    scratch = tensor.new_empty((p - 1, n))
    rows = dict(zip(others, scratch))
    comm.exchange([(j, tensor) for j in others], [(j, rows[j]) for j in others])
    rows[i] = tensor
    acc = rows[0]
    for j in range(1, p):
        combine(acc, rows[j], redop)
    if i != 0:
        tensor.copy_(acc)


def _hosts(p: int, ranks_per_host: int) -> list[range]:
    return [range(start, min(start + ranks_per_host, p)) for start in range(0, p, ranks_per_host)]


@register("all_reduce", "hierarchical", chunked=True)
def hierarchical(comm: Comm, tensor: torch.Tensor, redop: str, opts: Options) -> None:
    """Two-level, by size and layout: hierarchical_leaders, hierarchical_one_way, rabenseifner or hierarchical_ring.

    Hosts are consecutive blocks of ``opts.ranks_per_host_in(p)`` = L ranks; the
    last may be smaller. :func:`commlens.ops.hierarchical_all_reduce_scheme`,
    the rule the cost model applies too, picks the scheme from the buffer
    size, the layout and the group's transport (:attr:`Comm.transport`):
    ``hierarchical_leaders`` for small buffers on several hosts of several
    ranks, ``hierarchical_one_way`` for two hosts on half-duplex pairs,
    ``rabenseifner`` for full hosts with L and H powers of two, else
    ``hierarchical_ring`` (the thresholds live with the rule). With one host this is the ring; with one rank per
    host, the ring across hosts.
    """
    get_algorithm("all_reduce", _scheme(comm, tensor, opts)).fn(comm, tensor, redop, opts)


def _scheme(comm: Comm, tensor: torch.Tensor, opts: Options) -> str:
    """The scheme :func:`hierarchical` runs for this buffer on this comm."""
    p, n, itemsize = comm.size, tensor.numel(), tensor.element_size()
    ranks_per_host = opts.ranks_per_host_in(p)
    hosts = _hosts(p, ranks_per_host)
    half_shard_bytes = min(z - a for a, z in block_bounds(n, ranks_per_host)) // 2 * itemsize
    full_hosts = len(hosts[-1]) == ranks_per_host
    # the transport is asked only where the one-way route could be taken (it asks the process group)
    half_duplex = len(hosts) == 2 and full_hosts and comm.transport.half_duplex_pairs
    return hierarchical_all_reduce_scheme(
        n * itemsize, half_shard_bytes, len(hosts), ranks_per_host, full_hosts, half_duplex
    )


@register("all_reduce", "hierarchical_ring", chunked=True, scheme_of="hierarchical")
def hierarchical_ring(comm: Comm, tensor: torch.Tensor, redop: str, opts: Options) -> None:
    """Two-level rings: ring reduce-scatter in each host, ring all-reduce of each shard across hosts, ring all-gather.

    Hosts are consecutive blocks of ``opts.ranks_per_host_in(p)`` = L ranks; the
    last may be smaller. With H hosts, each rank moves 2(L-1)/L n inside its
    host and 2(H-1)/H n/L across hosts.

    1. The buffer is cut into L shards. In a host of L ranks local rank j
       owns shard j; in a smaller last host of L' ranks each local rank owns
       a contiguous run of about L/L' shards.
    2. Ring reduce-scatter inside each host, each rank's owned shards as its
       block.
    3. For each shard, a ring all-reduce across hosts among the ranks owning
       it (one per host). A rank of the smaller host owning several shards
       runs their rings one after another.
    4. Ring all-gather inside each host.

    With one host this is the ring; with one rank per host, the ring across
    hosts. ``chunk_bytes`` pipelines every ring step.
    """
    p, i, n = comm.size, comm.index, tensor.numel()
    ranks_per_host = opts.ranks_per_host_in(p)
    hosts = _hosts(p, ranks_per_host)
    shards = block_bounds(n, ranks_per_host)
    # owned[h][j]: the shards local rank j of host h owns, a contiguous range
    owned = [[range(a, z) for a, z in block_bounds(ranks_per_host, len(host))] for host in hosts]
    h, local_rank = divmod(i, ranks_per_host)
    local = comm.sub(hosts[h])
    mine = owned[h]
    bounds = [(shards[r.start][0], shards[r.stop - 1][1]) for r in mine]
    ring_reduce_scatter_inplace(local, tensor, bounds, redop, opts)
    for k in mine[local_rank]:
        peers = [host[next(j for j, r in enumerate(owned[g]) if k in r)] for g, host in enumerate(hosts)]
        a, z = shards[k]
        _ring_all_reduce(comm.sub(peers), tensor[a:z], redop, opts)
    ring_all_gather_inplace(local, tensor, bounds, opts)


@register("all_reduce", "hierarchical_leaders", scheme_of="hierarchical")
def hierarchical_leaders(comm: Comm, tensor: torch.Tensor, redop: str, opts: Options) -> None:
    """One leader per host: binomial reduce in the host, recursive doubling among leaders, binomial broadcast.

    MPICH's SMP-aware all-reduce, for latency-bound sizes: ceil(lg L) + lg H
    (+2 with a fold) + ceil(lg L) steps of the whole n, where the two-level
    rings take 2(L-1) + 2(H-1). Hosts as in :func:`hierarchical_ring`; each
    host's first rank leads.
    """
    ranks_per_host = opts.ranks_per_host_in(comm.size)
    hosts = _hosts(comm.size, ranks_per_host)
    local = comm.sub(hosts[comm.index // ranks_per_host])
    binomial_reduce(local, tensor, 0, redop, torch.empty_like(tensor))
    if local.index == 0:
        recursive_doubling(comm.sub([h.start for h in hosts]), tensor, redop, opts)
    binomial_broadcast(local, tensor, 0, opts)


# Pieces of the routed exchange when no chunk size is given: the cross-host transfer of one piece overlaps the
# local forward of the previous one.
ONE_WAY_PIECE_BYTES = 1 << 20


@register("all_reduce", "hierarchical_one_way", chunked=True, scheme_of="hierarchical")
def hierarchical_one_way(comm: Comm, tensor: torch.Tensor, redop: str, opts: Options) -> None:
    """Two hosts: rings in each, every shard across the hosts one way per connection (for half-duplex pairs).

    For transports whose connections carry one direction at a time (half-duplex
    pairs, :data:`commlens.ops.TRANSPORTS`), where two ranks swapping halves
    would get half the rate each way. Needs two hosts of the same L >= 2
    ranks. Ring reduce-scatter in each host (local rank j keeps shard j),
    the routed exchange of each shard across the hosts
    (:func:`_two_hosts_one_way`), ring all-gather back.
    """
    p, n = comm.size, tensor.numel()
    ranks_per_host = opts.ranks_per_host_in(p)
    if ranks_per_host < 2 or p != 2 * ranks_per_host:
        raise AlgoError(
            f"hierarchical_one_way needs two hosts of the same size, at least 2 ranks each; got {p} "
            f"ranks at {ranks_per_host} per host"
        )
    h, local_rank = divmod(comm.index, ranks_per_host)
    local = comm.sub(_hosts(p, ranks_per_host)[h])
    shards = block_bounds(n, ranks_per_host)
    ring_reduce_scatter_inplace(local, tensor, shards, redop, opts)
    _two_hosts_one_way(comm, tensor, shards, h, local_rank, redop, opts)
    ring_all_gather_inplace(local, tensor, shards, opts)


def _two_hosts_one_way(
    comm: Comm, tensor: torch.Tensor, shards: list[tuple[int, int]], host: int, j: int, redop: str, opts: Options
) -> None:
    """The cross-host all-reduce of two hosts with every connection carrying one direction only.

    Local rank j of each host owns shard j. Host 0 ends up reducing the first half of the shard and host 1
    the second. Host 0 -> host 1 goes straight (0.j -> 1.j); host 1 -> host 0 goes to the next rank,
    1.j -> 0.(j+1), which forwards it to 0.j over the local path, piece by piece so that the cross-host
    transfer of a piece overlaps the forward of the one before. Each direction of the link carries the
    shard once (half reduce-scatter, half all-gather), as a two-rank exchange would, but no pair of ranks
    sends both ways at once. Host 1 ranks only cross; host 0 ranks also forward for their left neighbour.
    """
    ranks_per_host = len(shards)
    piece = opts.chunk_elems(tensor) or max(1, ONE_WAY_PIECE_BYTES // tensor.element_size())
    halves = [(a, a + (z - a) // 2, z) for a, z in shards]  # (start, middle, stop) of every shard

    def pieces(span: tuple[int, int]) -> list[tuple[int, int]]:
        a, z = span
        return [(a + s, a + e) for s, e in chunk_bounds(z - a, piece)]

    def rank_of(h: int, local: int) -> int:
        return h * ranks_per_host + local % ranks_per_host

    steps = max(max(len(pieces((a, m))), len(pieces((m, z)))) for a, m, z in halves) + 1
    left, right = (j - 1) % ranks_per_host, (j + 1) % ranks_per_host
    a, m, z = halves[j]
    la, lm, lz = halves[left]
    for stage in ("reduce_scatter", "all_gather"):
        if host == 0:
            # straight out: my second half (reduce-scatter) or my reduced first half (all-gather), to 1.j
            out = pieces((m, z) if stage == "reduce_scatter" else (a, m))
            # in for my left neighbour: its shard's first half (its raw data) or reduced second half, from 1.left
            fwd_span = (la, lm) if stage == "reduce_scatter" else (lm, lz)
            fwd_buf = tensor.new_empty(fwd_span[1] - fwd_span[0])
            fwd = [(s - fwd_span[0], e - fwd_span[0]) for s, e in pieces(fwd_span)]
            # in from my right neighbour: my first half (to reduce) or my second half (reduced), routed
            mine = pieces((a, m) if stage == "reduce_scatter" else (m, z))
            scratch = tensor.new_empty(m - a) if stage == "reduce_scatter" else None
            for t in range(steps):
                sends, recvs = [], []
                if t < len(out):
                    s, e = out[t]
                    sends.append((rank_of(1, j), tensor[s:e]))
                if t < len(fwd):
                    s, e = fwd[t]
                    recvs.append((rank_of(1, left), fwd_buf[s:e]))
                if 0 < t <= len(fwd):
                    s, e = fwd[t - 1]
                    sends.append((rank_of(0, left), fwd_buf[s:e]))
                if 0 < t <= len(mine):
                    s, e = mine[t - 1]
                    recvs.append((rank_of(0, right), scratch[s - a : e - a] if scratch is not None else tensor[s:e]))
                comm.exchange(sends, recvs)
            if scratch is not None:
                combine(tensor[a:m], scratch, redop)
        else:
            # straight in from 0.j; routed out through 0.right
            out = pieces((a, m) if stage == "reduce_scatter" else (m, z))
            inc = pieces((m, z) if stage == "reduce_scatter" else (a, m))
            scratch = tensor.new_empty(z - m) if stage == "reduce_scatter" else None
            base = m if stage == "reduce_scatter" else 0
            for t in range(steps):
                sends = [(rank_of(0, right), tensor[out[t][0] : out[t][1]])] if t < len(out) else []
                recvs = []
                if t < len(inc):
                    s, e = inc[t]
                    recvs.append((rank_of(0, j), scratch[s - base : e - base] if scratch is not None else tensor[s:e]))
                comm.exchange(sends, recvs)
            if scratch is not None:
                combine(tensor[m:z], scratch, redop)
