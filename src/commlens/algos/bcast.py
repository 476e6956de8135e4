"""broadcast algorithms over point-to-point: binomial tree, pipelined chain, scatter + all-gather.

Sizes below: p ranks, n the buffer. Ranks are numbered relative to the
root, v = (i - root) mod p, so every algorithm takes any root.
"""

from __future__ import annotations

import torch

from commlens.algos.allgather import ring_all_gather_inplace
from commlens.algos.base import Comm, Options, block_bounds, chunk_bounds, register

__all__ = ["binomial", "chain", "scatter_allgather"]

# The chain's chunk when chunk_bytes is not given: the pipeline_chunk_bytes of the topology presets,
# which the cost model of a pipelined chain assumes (16 MiB goes in 32 chunks, 64 KiB in one).
CHAIN_CHUNK_BYTES = 512 << 10


@register("broadcast", "binomial")
def binomial(comm: Comm, tensor: torch.Tensor, root: int, opts: Options) -> None:
    """Binomial tree: ceil(lg p) steps of the whole n; a rank receives once and then sends to up to lg p ranks.

    Relative rank v receives from v - 2^k, 2^k its lowest set bit, then sends
    to v + 2^(k-1), v + 2^(k-2), ..., 1 (those < p), one step each.
    """
    p, i = comm.size, comm.index
    v = (i - root) % p
    mask = 1
    while mask < p:
        if v & mask:
            comm.exchange(recvs=[((i - mask) % p, tensor)])
            break
        mask <<= 1
    mask >>= 1
    while mask:
        if v + mask < p:
            comm.exchange([((i + mask) % p, tensor)])
        mask >>= 1


def _chain_chunk(tensor: torch.Tensor, opts: Options) -> int:
    chunk = opts.chunk_elems(tensor)
    return chunk if chunk is not None else max(1, CHAIN_CHUNK_BYTES // tensor.element_size())


@register("broadcast", "chain", chunked=True)
def chain(comm: Comm, tensor: torch.Tensor, root: int, opts: Options) -> None:
    """Pipelined chain root -> root+1 -> ...: p-1+k-1 steps of one chunk c for k chunks; each rank moves n.

    Relative rank v forwards chunk c to v+1 in the same exchange that
    receives chunk c+1 from v-1, so after the pipeline fills every link
    carries a chunk each step. Chunks of ``chunk_bytes``, else 512 KiB (the
    cost model's pipeline_chunk_bytes).
    """
    p, i = comm.size, comm.index
    v = (i - root) % p
    prev, succ = (i - 1) % p, (i + 1) % p
    pieces = [tensor[a:z] for a, z in chunk_bounds(tensor.numel(), _chain_chunk(tensor, opts))]
    k = len(pieces)
    for c in range(-1, k):
        sends = [(succ, pieces[c])] if c >= 0 and v < p - 1 else []
        recvs = [(prev, pieces[c + 1])] if c + 1 < k and v > 0 else []
        comm.exchange(sends, recvs)


@register("broadcast", "scatter_allgather", chunked=True)
def scatter_allgather(comm: Comm, tensor: torch.Tensor, root: int, opts: Options) -> None:
    """Scatter + all-gather (van de Geijn): binomial scatter of p blocks, then ring all-gather; about 2 n per rank.

    1. Cut n into p blocks (uneven, empty ones when n < p); block v belongs to
       relative rank v.
    2. Binomial scatter, ceil(lg p) steps: rank v receives the blocks of its
       subtree [v, v + 2^k) from v - 2^k (2^k its lowest set bit) and hands
       [v + 2^j, v + 2^(j+1)) on to v + 2^j for j < k; the root sends (p-1)/p n.
    3. Ring all-gather of the blocks over the relative ranks, p-1 steps,
       (p-1)/p n per rank, in pieces of ``chunk_bytes`` when given.
    """
    p = comm.size
    rel = comm.sub([(root + u) % p for u in range(p)])
    v = rel.index
    bounds = block_bounds(tensor.numel(), p)

    def subtree(lo: int, width: int) -> torch.Tensor:
        return tensor[bounds[lo][0] : bounds[min(lo + width, p) - 1][1]]

    mask = 1
    while mask < p:
        if v & mask:
            rel.exchange(recvs=[(v - mask, subtree(v, mask))])
            break
        mask <<= 1
    mask >>= 1
    while mask:
        if v + mask < p:
            rel.exchange([(v + mask, subtree(v + mask, mask))])
        mask >>= 1
    ring_all_gather_inplace(rel, tensor, bounds, opts)
