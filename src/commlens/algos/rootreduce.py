"""reduce algorithms over point-to-point: binomial tree, Rabenseifner (reduce-scatter then gather).

Sizes below: p ranks, n the buffer, p' = 2^floor(lg p). Non-root buffers are
scratch afterwards, as the public :func:`commlens.algos.reduce` documents.
"""

from __future__ import annotations

import torch

from commlens.algos.base import Comm, Options, block_bounds, chunk_bounds, combine, register
from commlens.algos.reducescatter import FoldedOut, fold_to_power_of_two, halving_reduce_scatter_inplace

__all__ = ["binomial", "binomial_reduce", "rabenseifner"]


def binomial_reduce(comm: Comm, tensor: torch.Tensor, root: int, redop: str, scratch: torch.Tensor) -> None:
    """One binomial-tree reduce of ``tensor`` onto ``root``, receiving through ``scratch`` (as long as ``tensor``).

    Relative rank v = (i - root) mod p receives from v + 1, v + 2, v + 4 ...
    (those < p) while those bits of v are clear, then sends its partial to
    v - 2^k, 2^k its lowest set bit: the broadcast tree of the ``binomial``
    broadcast, run backwards.
    """
    p, i = comm.size, comm.index
    v = (i - root) % p
    mask = 1
    while mask < p:
        if v & mask:
            comm.exchange([((i - mask) % p, tensor)])
            return
        if v + mask < p:
            comm.exchange(recvs=[((i + mask) % p, scratch)])
            combine(tensor, scratch, redop)
        mask <<= 1


@register("reduce", "binomial", chunked=True)
def binomial(comm: Comm, tensor: torch.Tensor, root: int, redop: str, opts: Options) -> None:
    """Binomial tree: ceil(lg p) steps of n, each reduced; the root receives up to ceil(lg p) times.

    With ``chunk_bytes`` the tree runs once per chunk, so chunks pipeline up
    its levels (see :func:`binomial_reduce`).
    """
    chunk = opts.chunk_elems(tensor)
    scratch = torch.empty_like(tensor[:chunk] if chunk is not None else tensor)
    for a, z in chunk_bounds(tensor.numel(), chunk):
        binomial_reduce(comm, tensor[a:z], root, redop, scratch[: z - a])


@register("reduce", "rabenseifner")
def rabenseifner(comm: Comm, tensor: torch.Tensor, root: int, redop: str, opts: Options) -> None:
    """Rabenseifner: recursive-halving reduce-scatter, then binomial gather to the root; about 2 (p'-1)/p' n.

    1. If p is not a power of two, ranks 2j and 2j+1 (j < p - p') fold into
       one (one step of n, reduced), the root always staying.
    2. Recursive halving over p' blocks, near peers first: lg p' steps of
       n/2, n/4 ... n/p'.
    3. The same steps backwards as a gather: at each step the rank whose
       virtual rank differs from the root's in that step's bit sends all it
       holds (n/p', 2n/p' ... n/2) and is done; the root ends with all of n.
    """
    fold = fold_to_power_of_two(comm, tensor, redop, keep=root)
    if isinstance(fold, FoldedOut):
        return
    active, v = fold.active, fold.active.index
    vroot = next(k for k, m in enumerate(fold.members) if root in m)
    steps = halving_reduce_scatter_inplace(
        active, tensor, block_bounds(tensor.numel(), active.size), redop, opts, near_first=True
    )
    for step in reversed(steps):
        (a, z), (c, d) = step.keep, step.give
        if (v ^ vroot) & step.mask:
            active.exchange([(step.peer, tensor[a:z])])
            return
        active.exchange(recvs=[(step.peer, tensor[c:d])])
