"""all_gather algorithms over point-to-point: ring, recursive doubling, Bruck.

Sizes below: p ranks, S the gathered output, s = S/p one rank's block. The
two in-place phases, :func:`ring_all_gather_inplace` and
:func:`doubling_all_gather_inplace`, take per-rank block bounds (uneven and
empty blocks allowed) so that all_reduce and broadcast can reuse them as
their gather phase.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from commlens.algos.base import Comm, Options, chunk_bounds, register

__all__ = ["bruck", "doubling_all_gather_inplace", "recursive_doubling", "ring", "ring_all_gather_inplace"]

Bounds = Sequence[tuple[int, int]]


def ring_all_gather_inplace(comm: Comm, buf: torch.Tensor, bounds: Bounds, opts: Options) -> None:
    """Ring all-gather of the blocks ``buf[bounds[i]]``, this rank's block filled on entry, all on return.

    p-1 steps: at step t rank i sends block i-t to rank i+1 and receives block
    i-t-1 from rank i-1, straight into its place in ``buf``. All receives are
    posted at the start (each has its own place), and a block moves on to
    rank i+1 as soon as it has arrived. With ``opts.chunk_bytes`` blocks move
    in pieces of at most that size, each piece forwarded on arrival.
    """
    p, i = comm.size, comm.index
    if p == 1:
        return
    right, left = (i + 1) % p, (i - 1) % p
    chunk = opts.chunk_elems(buf)

    def pieces(block: int) -> list[torch.Tensor]:
        start, stop = bounds[block % p]
        return [buf[start + a : start + z] for a, z in chunk_bounds(stop - start, chunk) if z > a]

    arrivals = [(t, piece) for t in range(p - 1) for piece in pieces(i - t - 1)]
    received = [comm.start(recvs=[(left, piece)]) for _, piece in arrivals]
    sends = comm.start([(right, piece) for piece in pieces(i)])
    for (t, piece), requests in zip(arrivals, received):
        for request in requests:
            request.wait()
        if t < p - 2:
            sends += comm.start([(right, piece)])
    for request in sends:
        request.wait()


def _spans(buf: torch.Tensor, bounds: Bounds, blocks: range) -> list[torch.Tensor]:
    """The slices of ``buf`` holding ``blocks``, neighbouring blocks merged into one slice."""
    spans: list[list[int]] = []
    for b in blocks:
        start, stop = bounds[b]
        if spans and spans[-1][1] == start:
            spans[-1][1] = stop
        else:
            spans.append([start, stop])
    return [buf[a:z] for a, z in spans]


def doubling_all_gather_inplace(comm: Comm, buf: torch.Tensor, bounds: Bounds, opts: Options) -> None:
    """Recursive-doubling all-gather of the blocks ``buf[bounds[i]]``, for any number of ranks.

    With p' the largest power of two <= p and r = p - p' (the fold of
    Thakur, Rabenseifner and Gropp, as the cost model assumes):

    1. if r > 0, rank p'+j sends its block to rank j (j < r);
    2. lg p' steps among ranks 0..p'-1: at step k rank v swaps with v xor 2^k
       everything it holds, the blocks of ranks v' with v' // 2^k == v // 2^k
       and of their folded partners p'+v' (distance doubling, 2^k s then
       2^(k+1) s ...);
    3. if r > 0, rank j sends everything but rank p'+j's block back to it.

    Each rank moves (p'-1)/p' S in step 2; the fold costs one s and one S
    message more. Neighbouring blocks travel as one message.
    """
    p, i = comm.size, comm.index
    pp = 1 << (p.bit_length() - 1)
    r = p - pp
    if i >= pp:
        partner = i - pp
        comm.exchange([(partner, buf[bounds[i][0] : bounds[i][1]])])
        comm.exchange(
            recvs=[(partner, t) for t in _spans(buf, bounds, range(i))]
            + [(partner, t) for t in _spans(buf, bounds, range(i + 1, p))]
        )
        return
    if i < r:
        comm.exchange(recvs=[(i + pp, buf[bounds[i + pp][0] : bounds[i + pp][1]])])

    def held(v: int, width: int) -> list[torch.Tensor]:
        # the blocks of virtual ranks [base, base + width) and their folded partners
        base = v - v % width
        spans = _spans(buf, bounds, range(base, base + width))
        if base < r:
            spans += _spans(buf, bounds, range(pp + base, pp + min(base + width, r)))
        return spans

    width = 1
    while width < pp:
        peer = i ^ width
        comm.exchange([(peer, t) for t in held(i, width)], [(peer, t) for t in held(peer, width)])
        width <<= 1
    if i < r:
        extra = i + pp
        comm.exchange(
            [(extra, t) for t in _spans(buf, bounds, range(extra))]
            + [(extra, t) for t in _spans(buf, bounds, range(extra + 1, p))]
        )


def _equal_bounds(block: int, parts: int) -> list[tuple[int, int]]:
    return [(k * block, (k + 1) * block) for k in range(parts)]


def _own_block_placed(comm: Comm, output: torch.Tensor, input: torch.Tensor) -> list[tuple[int, int]]:
    """Copy this rank's ``input`` to its block of ``output``; every rank's block bounds (equal blocks)."""
    s = input.numel()
    output[comm.index * s : (comm.index + 1) * s].copy_(input)
    return _equal_bounds(s, comm.size)


@register("all_gather", "ring", chunked=True)
def ring(comm: Comm, output: torch.Tensor, input: torch.Tensor, opts: Options) -> None:
    """Ring: p-1 steps, each rank sends and receives one block s a step, (p-1)/p S in all.

    Rank i puts its input at block i of the output and passes blocks around
    the ring i -> i+1, receiving each straight into its place. With
    ``chunk_bytes`` each step's block moves in pieces of at most that size.
    """
    ring_all_gather_inplace(comm, output, _own_block_placed(comm, output, input), opts)


@register("all_gather", "recursive_doubling")
def recursive_doubling(comm: Comm, output: torch.Tensor, input: torch.Tensor, opts: Options) -> None:
    """Recursive doubling: lg p' steps of s, 2s, 4s ... ((p'-1)/p' S); any p by folding p-p' ranks in.

    p' is the largest power of two <= p. When p is not a power of two, each of
    the p-p' extra ranks first hands its block to a partner among the first
    p' ranks and gets the whole output back at the end: one s and one S
    message more (see :func:`doubling_all_gather_inplace`).
    """
    doubling_all_gather_inplace(comm, output, _own_block_placed(comm, output, input), opts)


@register("all_gather", "bruck")
def bruck(comm: Comm, output: torch.Tensor, input: torch.Tensor, opts: Options) -> None:
    """Bruck: ceil(lg p) steps for any p, step k sends min(2^k, p-2^k) blocks to rank i-2^k; (p-1)/p S in all.

    Rank i works in a scratch buffer whose position j holds block (i+j) mod
    p: it starts with its own block at position 0; at step k it sends
    positions [0, n) to rank i-2^k and receives positions [2^k, 2^k+n) from
    rank i+2^k, n = min(2^k, p-2^k). A final local rotation by i blocks puts
    the blocks in rank order (one copy of S; rank 0 needs none and works in
    the output directly).
    """
    p, i, s = comm.size, comm.index, input.numel()
    work = output if i == 0 else torch.empty_like(output)
    work[:s].copy_(input)
    have = 1
    while have < p:
        n = min(have, p - have)
        comm.exchange([((i - have) % p, work[: n * s])], [((i + have) % p, work[have * s : (have + n) * s])])
        have += n
    if i:
        output[i * s :].copy_(work[: (p - i) * s])
        output[: i * s].copy_(work[(p - i) * s :])
