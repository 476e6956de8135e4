"""Collective algorithms written over point-to-point, callable like torch.distributed's own.

    from commlens import algos
    algos.all_reduce(t, op="sum", algo="rabenseifner")
    algos.all_gather(out, inp, algo="bruck", group=g)
    algos.broadcast(t, src=0, algo="chain", chunk_bytes=1 << 20)
    algos.all_reduce(t, algo="auto")   # the tuning table's pick for this size (see commlens tune)

Each call runs the named algorithm of :mod:`commlens.algos.base`'s registry
over ``group`` (None: the default group), with the argument conventions of
torch.distributed: ``src``/``dst`` are global ranks, all_gather and
reduce_scatter take the flat ``*_into_tensor``/``*_tensor`` layouts,
all_to_all the equal-split ``all_to_all_single`` layout. Tensors must be
contiguous. ``avg`` reduces as a sum and divides at the end (floating
point only, as in torch.distributed).

``ranks_per_host``: how many consecutive ranks of the group share a host,
for the two-level algorithms and ``auto``'s table lookup (None: one host).
The caller says it; nothing is read from the environment.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from commlens.algos.base import ALGO_OPS, AlgoError, Algorithm, Comm, Options, algorithms_for, get_algorithm

__all__ = [
    "ALGO_OPS",
    "AlgoError",
    "Algorithm",
    "Comm",
    "Options",
    "algorithms_for",
    "all_gather",
    "all_reduce",
    "all_to_all",
    "broadcast",
    "get_algorithm",
    "reduce",
    "reduce_scatter",
    "run",
]

AUTO = "auto"


def _flat(t: torch.Tensor, what: str) -> torch.Tensor:
    if not t.is_contiguous():
        raise AlgoError(f"{what} must be contiguous")
    return t.view(-1)


def _pick(
    op: str, algo: str, nbytes: int, comm: Comm, chunk_bytes: int | None, ranks_per_host: int | None = None
) -> tuple[Algorithm, int | None]:
    """The algorithm to run and its chunk size: ``auto`` takes both from the tuning table's entry for this
    layout (the caller's ``chunk_bytes`` wins when given)."""
    if algo == AUTO:
        from commlens.algos.tuning import lookup  # reads the tuning table once per process

        choice = lookup(op, nbytes, comm.size, ranks_per_host=ranks_per_host)
        return get_algorithm(op, choice.algo), chunk_bytes if chunk_bytes is not None else choice.chunk_bytes
    return get_algorithm(op, algo), chunk_bytes


def _chosen(
    op: str, algo: str, sized: torch.Tensor, comm: Comm, chunk_bytes: int | None, ranks_per_host: int | None
) -> tuple[Callable[..., None], Options]:
    """:func:`_pick` for the bytes of ``sized``: the algorithm's function and the options it runs with."""
    chosen, chunk = _pick(op, algo, sized.numel() * sized.element_size(), comm, chunk_bytes, ranks_per_host)
    return chosen.fn, Options(chunk, ranks_per_host)


def _check_redop(redop: str, t: torch.Tensor) -> None:
    if redop == "avg" and not t.is_floating_point():
        raise AlgoError(f"avg needs a floating-point tensor, got {t.dtype}")


def _finish_avg(t: torch.Tensor, redop: str, world: int) -> None:
    if redop == "avg":
        t.div_(world)


def _root_index(comm: Comm, root: int, what: str) -> int:
    if root not in comm.ranks:
        raise AlgoError(f"{what}={root} is not a rank of the group (ranks {list(comm.ranks)})")
    return comm.ranks.index(root)


def all_reduce(
    tensor: torch.Tensor,
    op: str = "sum",
    group: Any = None,
    *,
    algo: str = "ring",
    chunk_bytes: int | None = None,
    ranks_per_host: int | None = None,
) -> None:
    """Reduce ``tensor`` across the group, in place, with algorithm ``algo``."""
    comm, flat = Comm.of(group), _flat(tensor, "tensor")
    _check_redop(op, flat)
    fn, opts = _chosen("all_reduce", algo, flat, comm, chunk_bytes, ranks_per_host)
    if comm.size > 1:
        fn(comm, flat, op, opts)
    _finish_avg(flat, op, comm.size)


def reduce(
    tensor: torch.Tensor,
    dst: int,
    op: str = "sum",
    group: Any = None,
    *,
    algo: str = "binomial",
    chunk_bytes: int | None = None,
    ranks_per_host: int | None = None,
) -> None:
    """Reduce ``tensor`` onto global rank ``dst``, in place; other ranks' tensors are scratch afterwards."""
    comm, flat = Comm.of(group), _flat(tensor, "tensor")
    _check_redop(op, flat)
    root = _root_index(comm, dst, "dst")
    fn, opts = _chosen("reduce", algo, flat, comm, chunk_bytes, ranks_per_host)
    if comm.size > 1:
        fn(comm, flat, root, op, opts)
    if comm.index == root:
        _finish_avg(flat, op, comm.size)


def broadcast(
    tensor: torch.Tensor,
    src: int,
    group: Any = None,
    *,
    algo: str = "binomial",
    chunk_bytes: int | None = None,
    ranks_per_host: int | None = None,
) -> None:
    """Copy global rank ``src``'s ``tensor`` to every rank of the group, in place."""
    comm, flat = Comm.of(group), _flat(tensor, "tensor")
    root = _root_index(comm, src, "src")
    fn, opts = _chosen("broadcast", algo, flat, comm, chunk_bytes, ranks_per_host)
    if comm.size > 1:
        fn(comm, flat, root, opts)


def _blocked(output: torch.Tensor, input: torch.Tensor, comm: Comm, big: str) -> tuple[torch.Tensor, torch.Tensor]:
    out, inp = _flat(output, "output"), _flat(input, "input")
    if out.dtype != inp.dtype:
        raise AlgoError(f"output is {out.dtype} but input is {inp.dtype}")
    small, large = (out, inp) if big == "input" else (inp, out)
    if big == "both":
        if out.numel() != inp.numel() or out.numel() % comm.size:
            raise AlgoError(
                f"all_to_all needs input and output of equal length divisible by {comm.size} ranks, "
                f"got {inp.numel()} and {out.numel()}"
            )
    elif large.numel() != small.numel() * comm.size:
        raise AlgoError(
            f"{big} must hold {comm.size} x {small.numel()} = {comm.size * small.numel()} elements, got {large.numel()}"
        )
    return out, inp


def all_gather(
    output: torch.Tensor,
    input: torch.Tensor,
    group: Any = None,
    *,
    algo: str = "ring",
    chunk_bytes: int | None = None,
    ranks_per_host: int | None = None,
) -> None:
    """Gather every rank's ``input`` into ``output`` (rank i's block at i x len(input))."""
    _run_blocked("all_gather", "output", output, input, group, algo, chunk_bytes, ranks_per_host)


def _run_blocked(
    op: str,
    big: str,
    output: torch.Tensor,
    input: torch.Tensor,
    group: Any,
    algo: str,
    chunk_bytes: int | None,
    ranks_per_host: int | None,
    redop: str | None = None,
) -> None:
    """A collective over blocks (``big``: which side holds one block per rank, or both), with reduction
    ``redop`` (reduce-scatter) or none; sized by the side that holds every block."""
    comm = Comm.of(group)
    out, inp = _blocked(output, input, comm, big)
    if redop is not None:
        _check_redop(redop, out)
    fn, opts = _chosen(op, algo, out if big == "output" else inp, comm, chunk_bytes, ranks_per_host)
    if comm.size == 1:
        out.copy_(inp)
    elif redop is None:
        fn(comm, out, inp, opts)
    else:
        fn(comm, out, inp, redop, opts)
    if redop is not None:
        _finish_avg(out, redop, comm.size)


def reduce_scatter(
    output: torch.Tensor,
    input: torch.Tensor,
    op: str = "sum",
    group: Any = None,
    *,
    algo: str = "ring",
    chunk_bytes: int | None = None,
    ranks_per_host: int | None = None,
) -> None:
    """Reduce ``input`` across ranks and leave block i of the result in rank i's ``output``."""
    _run_blocked("reduce_scatter", "input", output, input, group, algo, chunk_bytes, ranks_per_host, op)


def all_to_all(
    output: torch.Tensor,
    input: torch.Tensor,
    group: Any = None,
    *,
    algo: str = "pairwise",
    chunk_bytes: int | None = None,
    ranks_per_host: int | None = None,
) -> None:
    """Send block j of ``input`` to rank j; block i of ``output`` arrives from rank i (equal splits)."""
    _run_blocked("all_to_all", "both", output, input, group, algo, chunk_bytes, ranks_per_host)


_CALLS: dict[str, Callable[..., None]] = {
    "all_reduce": all_reduce,
    "reduce": reduce,
    "broadcast": broadcast,
    "all_gather": all_gather,
    "reduce_scatter": reduce_scatter,
    "all_to_all": all_to_all,
}


def run(op: str, *args: Any, **kwargs: Any) -> None:
    """Call the public function of ``op`` by name (for harnesses that hold the op as a string)."""
    try:
        call = _CALLS[op]
    except KeyError:
        raise AlgoError(f"commlens implements no algorithms for {op!r}; it does for {', '.join(ALGO_OPS)}") from None
    call(*args, **kwargs)
