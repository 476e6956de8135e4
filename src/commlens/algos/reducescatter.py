"""reduce_scatter algorithms over point-to-point: ring, recursive halving, pairwise.

Sizes below: p ranks, S the whole input, s = S/p one rank's block. Every
element of the result is reduced on exactly one rank, in an order that rank
alone decides, so no two ranks can disagree about it.

The phases all_reduce and reduce reuse work in place on per-rank block
bounds (uneven and empty blocks allowed):

- :func:`ring_reduce_scatter_inplace`: ring, rank i ends with block i;
- :func:`fold_to_power_of_two`: the pre-step that folds p - p' ranks into
  their neighbours so that p' (a power of two) ranks remain;
- :func:`halving_reduce_scatter_inplace`: recursive halving over p' ranks,
  returning its steps so a caller can replay them backwards as an all-gather
  or a gather.

The ring posts its receives ahead with non-blocking batches (``_start``,
:meth:`Comm.exchange` without the wait); the other phases use exchange.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from commlens.algos.base import Comm, Options, chunk_bounds, combine, register

__all__ = [
    "Fold",
    "FoldedOut",
    "Halving",
    "fold_to_power_of_two",
    "halving_reduce_scatter_inplace",
    "pairwise",
    "recursive_halving",
    "ring",
    "ring_reduce_scatter_inplace",
]

Bounds = Sequence[tuple[int, int]]


# Receive buffers in flight in the ring: the next piece lands while this one is reduced.
RING_SLOTS = 2
# The ring's largest piece without chunk_bytes: keeps its scratch (RING_SLOTS pieces) at 16 MiB, small
# enough for the allocator to reuse; larger scratch is mapped afresh, and page-faulted, on every call.
RING_PIECE_BYTES = 8 << 20


def _wait(requests: list[Any]) -> None:
    for request in requests:
        request.wait()


def ring_reduce_scatter_inplace(comm: Comm, buf: torch.Tensor, bounds: Bounds, redop: str, opts: Options) -> None:
    """Ring reduce-scatter of the blocks ``buf[bounds[i]]`` in place; on return block ``comm.index`` is reduced.

    p-1 steps, (p-1)/p S each way per rank: rank i sends its own block i-1
    to rank i+1, then at step t receives rank i-1's partial of block i-t-2,
    reduces it into its place in ``buf`` and passes the sum on as its step
    t+1. Receives are posted two pieces ahead (two scratch pieces), so data
    arrives while this rank reduces. Pieces are ``opts.chunk_bytes`` long,
    else at most :data:`RING_PIECE_BYTES`; each moves on as soon as it is
    reduced, so the steps pipeline. Blocks other than this rank's hold
    partial results afterwards.
    """
    p, i = comm.size, comm.index
    if p == 1:
        return
    right, left = (i + 1) % p, (i - 1) % p
    chunk = opts.chunk_elems(buf) or max(1, RING_PIECE_BYTES // buf.element_size())

    def pieces(block: int) -> list[tuple[int, int]]:
        start, stop = bounds[block % p]
        return [(start + a, start + z) for a, z in chunk_bounds(stop - start, chunk) if z > a]

    arrivals = [(t, a, z) for t in range(p - 1) for a, z in pieces(i - t - 2)]
    slots = buf.new_empty((RING_SLOTS, max((z - a for _, a, z in arrivals), default=0)))

    def receive(k: int) -> tuple[torch.Tensor, list[Any]]:
        _, a, z = arrivals[k]
        slot = slots[k % RING_SLOTS, : z - a]
        return slot, comm.start(recvs=[(left, slot)])

    sends = comm.start([(right, buf[a:z]) for a, z in pieces(i - 1)])
    inflight = deque(receive(k) for k in range(min(RING_SLOTS, len(arrivals))))
    for k, (t, a, z) in enumerate(arrivals):
        slot, requests = inflight.popleft()
        _wait(requests)
        combine(buf[a:z], slot, redop)
        if k + RING_SLOTS < len(arrivals):
            inflight.append(receive(k + RING_SLOTS))
        if t < p - 2:
            sends += comm.start([(right, buf[a:z])])
    _wait(sends)


@dataclass(frozen=True)
class Fold:
    """Where a rank that stays stands after :func:`fold_to_power_of_two`."""

    active: Comm  # the p' remaining ranks, in virtual-rank order
    partner: int | None  # the index this rank is paired with (None: unpaired)
    members: tuple[tuple[int, ...], ...]  # per virtual rank, the indexes it stands for, in index order


@dataclass(frozen=True)
class FoldedOut:
    """A rank that :func:`fold_to_power_of_two` folded out: its buffer went to ``partner``, which unfolds to it."""

    partner: int  # the index this rank is paired with


def fold_to_power_of_two(comm: Comm, buf: torch.Tensor, redop: str, keep: int | None = None) -> Fold | FoldedOut:
    """Fold p - p' ranks into their neighbours so p' = 2^floor(lg p) remain (the pre-step of MPICH).

    With r = p - p', ranks 2j and 2j+1 (j < r) pair up: one sends its whole
    ``buf`` to the other, which reduces it into its own, one step of n at
    distance 1. The odd one stays, or ``keep`` when it is in the pair (a
    reduce's root). The remaining ranks, in order, form the ``active`` comm
    of size p'; the caller undoes the fold as its result needs.
    """
    p, i = comm.size, comm.index
    pp = 1 << (p.bit_length() - 1)
    r = p - pp
    members = tuple((2 * j, 2 * j + 1) for j in range(r)) + tuple((k,) for k in range(2 * r, p))
    stays = [keep if keep is not None and keep in pair else pair[-1] for pair in members]
    if i >= 2 * r:
        return Fold(comm.sub(stays), None, members)
    partner = i ^ 1
    if i != stays[i // 2]:
        comm.exchange([(partner, buf)])
        return FoldedOut(partner)
    incoming = torch.empty_like(buf)
    comm.exchange(recvs=[(partner, incoming)])
    combine(buf, incoming, redop)
    return Fold(comm.sub(stays), partner, members)


@dataclass(frozen=True)
class Halving:
    """One step of recursive halving: the peer, the bit of the virtual rank it differs in, the halves."""

    peer: int
    mask: int
    keep: tuple[int, int]  # elements this rank reduces and keeps
    give: tuple[int, int]  # elements it hands to the peer


def halving_reduce_scatter_inplace(
    comm: Comm, buf: torch.Tensor, bounds: Bounds, redop: str, opts: Options, *, near_first: bool = False
) -> list[Halving]:
    """Recursive halving over a power-of-two comm; return the steps (the last one's ``keep`` is this rank's share).

    lg p steps. Each rank starts with the blocks ``bounds[0..p)`` as its
    window; at each step it splits the window in half, sends one half to its
    peer, receives the peer's partial of the other half into one scratch
    buffer and reduces it: S/2, S/4, ... each way, (p-1)/p S in all.

    Far first (``near_first=False``, MPICH's reduce_scatter): peers at
    distance p/2, p/4, ... 1, and rank i ends with block i. Near first (MPICH's
    all_reduce, the cost model's order): distance 1, 2, ... p/2 so the
    largest halves stay closest, and rank i ends with block bitreverse(i).
    """
    p, v = comm.size, comm.index
    masks = [1 << k for k in range(p.bit_length() - 1)]
    if not near_first:
        masks.reverse()
    steps, lo, hi = [], 0, p
    for mask in masks:
        mid = (lo + hi) // 2
        (klo, khi), (glo, ghi) = ((mid, hi), (lo, mid)) if v & mask else ((lo, mid), (mid, hi))
        steps.append(
            Halving(v ^ mask, mask, (bounds[klo][0], bounds[khi - 1][1]), (bounds[glo][0], bounds[ghi - 1][1]))
        )
        lo, hi = klo, khi
    if not steps:
        return steps
    scratch = buf.new_empty(max(z - a for a, z in (s.keep for s in steps)))
    for step in steps:
        (a, z), (c, d) = step.keep, step.give
        incoming = scratch[: z - a]
        comm.exchange([(step.peer, buf[c:d])], [(step.peer, incoming)])
        combine(buf[a:z], incoming, redop)
    return steps


def _equal_bounds(block: int, parts: int) -> list[tuple[int, int]]:
    return [(k * block, (k + 1) * block) for k in range(parts)]


@register("reduce_scatter", "ring", chunked=True)
def ring(comm: Comm, output: torch.Tensor, input: torch.Tensor, redop: str, opts: Options) -> None:
    """Ring: p-1 steps of one block s, (p-1)/p S sent and reduced per rank.

    Works on a copy of the input (the input is left as it was): see
    :func:`ring_reduce_scatter_inplace`. With ``chunk_bytes`` each step moves
    its block in pieces of at most that size.
    """
    s, i = output.numel(), comm.index
    work = input.clone()
    ring_reduce_scatter_inplace(comm, work, _equal_bounds(s, comm.size), redop, opts)
    output.copy_(work[i * s : (i + 1) * s])


@register("reduce_scatter", "recursive_halving")
def recursive_halving(comm: Comm, output: torch.Tensor, input: torch.Tensor, redop: str, opts: Options) -> None:
    """Recursive halving: lg p' steps of S/2, S/4 ... s; any p by folding p-p' ranks in first.

    1. If p is not a power of two, the r = p - p' pairs (2j, 2j+1) fold: 2j
       sends its whole input to 2j+1 (one step of S, reduced).
    2. Recursive halving among the p' remaining ranks (far peers first, as
       MPICH's reduce_scatter, so rank i ends with its own block), where a
       folded pair's two blocks count as one: (p'-1)/p' S each way.
    3. Rank 2j+1 sends rank 2j its block (one step of s).

    Unlike the cost model's distance order (near peers first), the far-first
    order is what leaves each rank its own block without a final shuffle.
    Works on a copy of the input.
    """
    s, i = output.numel(), comm.index
    bounds = _equal_bounds(s, comm.size)
    work = input.clone()
    fold = fold_to_power_of_two(comm, work, redop)
    if isinstance(fold, FoldedOut):
        comm.exchange(recvs=[(fold.partner, output)])
        return
    spans = [(bounds[m[0]][0], bounds[m[-1]][1]) for m in fold.members]
    halving_reduce_scatter_inplace(fold.active, work, spans, redop, opts)
    if fold.partner is not None:
        a, z = bounds[fold.partner]
        comm.exchange([(fold.partner, work[a:z])])
    output.copy_(work[i * s : (i + 1) * s])


@register("reduce_scatter", "pairwise")
def pairwise(comm: Comm, output: torch.Tensor, input: torch.Tensor, redop: str, opts: Options) -> None:
    """Pairwise exchange: p-1 steps; at step k rank i sends block i+k to rank i+k and reduces block i from i-k.

    (p-1)/p S each way per rank, one peer at a time; rank i reduces its block
    in the order i, i-1, i-2, ... into the output, through one scratch block.
    """
    p, i, s = comm.size, comm.index, output.numel()
    output.copy_(input[i * s : (i + 1) * s])
    scratch = torch.empty_like(output)
    for k in range(1, p):
        to, frm = (i + k) % p, (i - k) % p
        comm.exchange([(to, input[to * s : (to + 1) * s])], [(frm, scratch)])
        combine(output, scratch, redop)
