"""all_to_all algorithms over point-to-point: pairwise, Bruck, direct.

Sizes below: p ranks, S what one rank sends in total, s = S/p per peer.
Block j of a rank's input goes to rank j; block i of its output comes from
rank i. Every algorithm copies the rank's own block locally.
"""

from __future__ import annotations

import torch

from commlens.algos.base import Comm, Options, register

__all__ = ["bruck", "direct", "pairwise"]


@register("all_to_all", "pairwise")
def pairwise(comm: Comm, output: torch.Tensor, input: torch.Tensor, opts: Options) -> None:
    """Pairwise exchange: p-1 steps, one peer a step, s each way; (p-1)/p S in all.

    At step k rank i sends to (i+k) mod p and receives from (i-k) mod p; when
    p is a power of two it pairs with i xor k instead, so both partners of a
    step exchange with each other (as MPICH). Blocks go straight from the
    input to the peer's output slot.
    """
    p, i = comm.size, comm.index
    s = input.numel() // p
    output[i * s : (i + 1) * s].copy_(input[i * s : (i + 1) * s])
    power_of_two = p & (p - 1) == 0
    for k in range(1, p):
        to, frm = (i ^ k, i ^ k) if power_of_two else ((i + k) % p, (i - k) % p)
        comm.exchange([(to, input[to * s : (to + 1) * s])], [(frm, output[frm * s : (frm + 1) * s])])


@register("all_to_all", "direct")
def direct(comm: Comm, output: torch.Tensor, input: torch.Tensor, opts: Options) -> None:
    """Direct: every send and receive posted at once in one exchange, p-1 messages of s each way.

    Sends are posted to peers i+1, i+2, ... and receives from i-1, i-2, ...,
    so a rank's k-th send meets its peer's k-th receive and no rank is
    everyone's first peer.
    """
    p, i = comm.size, comm.index
    s = input.numel() // p
    output[i * s : (i + 1) * s].copy_(input[i * s : (i + 1) * s])
    peers = [(i + k) % p for k in range(1, p)]
    comm.exchange(
        [(j, input[j * s : (j + 1) * s]) for j in peers], [(j, output[j * s : (j + 1) * s]) for j in reversed(peers)]
    )


@register("all_to_all", "bruck")
def bruck(comm: Comm, output: torch.Tensor, input: torch.Tensor, opts: Options) -> None:
    """Bruck: ceil(lg p) steps for any p, step k forwards the blocks whose index has bit k set; about S/2 lg p.

    1. Rotate: position j of a scratch buffer gets input block (i+j) mod p.
    2. For k = 0 .. ceil(lg p)-1: pack the positions j with bit k set, send
       them to rank i+2^k, receive the same positions from rank i-2^k and
       unpack them (a block bound from rank a to rank b sits at position b-a
       and moves 2^k ranks on for each set bit of it).
    3. Inverse rotation: output block (i-j) mod p gets position j.

    One scratch of S; the output doubles as the pack buffers (a step packs
    at most floor(p/2) blocks each way).
    """
    p, i = comm.size, comm.index
    s = input.numel() // p
    work = torch.empty_like(input)
    work[: (p - i) * s].copy_(input[i * s :])
    work[(p - i) * s :].copy_(input[: i * s])
    blocks, packed = work.view(p, s), output.view(p, s)
    half = p // 2
    bit = 1
    while bit < p:
        index = torch.tensor([j for j in range(p) if j & bit])
        n = len(index)
        send, recv = packed[:n], packed[half : half + n]
        torch.index_select(blocks, 0, index, out=send)
        comm.exchange([((i + bit) % p, send.view(-1))], [((i - bit) % p, recv.view(-1))])
        blocks.index_copy_(0, index, recv)
        bit <<= 1
    torch.index_select(blocks, 0, torch.tensor([(i - b) % p for b in range(p)]), out=packed)
