"""How each catalog op runs on ``torch.distributed``: buffers, the call, the check.

torch.distributed offers some ops only in place (all_reduce, broadcast,
reduce work on one tensor) and some only out of place (all_to_all,
send/recv); :data:`PLACEMENTS` says which, and the harness reports the other
placement as not run rather than timing an extra copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from commlens.bench.validate import TORCH_DTYPES, count_wrong, rank_values, reduce_values
from commlens.ops import OpSpec, SizePlan

__all__ = ["PLACEMENTS", "Collective", "prepare", "torch_redop"]

# Newer torch renames the tensor forms (`*_single`) and deprecates the old names.
all_gather_tensor = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_tensor_op = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

# op -> (out-of-place offered, in-place offered) by torch.distributed's API.
PLACEMENTS: dict[str, tuple[bool, bool]] = {
    "all_reduce": (False, True),
    "broadcast": (False, True),
    "reduce": (False, True),
    "all_gather": (True, True),
    "reduce_scatter": (True, True),
    "gather": (True, True),
    "scatter": (True, True),
    "all_to_all": (True, False),
    "sendrecv": (True, False),
    "barrier": (True, False),
}

_REDOPS = {
    "sum": dist.ReduceOp.SUM,
    "prod": dist.ReduceOp.PRODUCT,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "avg": dist.ReduceOp.AVG,
}


def torch_redop(name: str) -> Any:
    return _REDOPS[name]


@dataclass
class Collective:
    """One prepared row: ``launch()`` starts an iteration, ``check()`` validates one."""

    launch: Callable[[], Any]  # returns a Work handle or None
    reset: Callable[[], None]  # rewrite inputs and clear outputs
    verify: Callable[[], int]  # wrong elements on this rank after one launch
    output: torch.Tensor | None = None  # the buffer verify() reads


_T = TypeVar("_T")


def _given(value: _T | None, what: str, op: str) -> _T:
    """A row's reduction or root where its op has one (None only for an op without)."""
    if value is None:
        raise ValueError(f"{op} needs its {what}")
    return value


def _fill(t: torch.Tensor, values: torch.Tensor) -> None:
    t.copy_(values.to(dtype=t.dtype))


def prepare(
    spec: OpSpec,
    plan: SizePlan,
    dtype: str,
    redop: str | None,
    root: int | None,
    in_place: bool,
    rank: int,
    world: int,
    device: torch.device,
    group: Any = None,
    async_op: bool = False,
    algo: str = "builtin",
    chunk_bytes: int | None = None,
    ranks_per_host: int | None = None,
) -> Collective | None:
    """Buffers and callables for one row, or None when torch offers no such placement.

    ``algo`` other than ``builtin`` runs the row through :mod:`commlens.algos` (same buffers, same
    placements, same check) with ``chunk_bytes`` and ``ranks_per_host`` (ranks on each host, when every
    host has as many; None: one host) passed on.
    """
    offered_oop, offered_ip = PLACEMENTS[spec.name]
    if not (offered_ip if in_place else offered_oop):
        return None
    alg = None
    if algo != "builtin":
        from commlens.bench.algorithms import AlgoCalls

        alg = AlgoCalls(algo, group, chunk_bytes, ranks_per_host)
    tdt = TORCH_DTYPES[dtype]
    c = plan.count
    n = world
    red = None if redop is None else _REDOPS.get(redop)
    empty = lambda k: torch.zeros(k, dtype=tdt, device=device)  # noqa: E731

    name = spec.name
    if alg is not None and name not in (
        "all_reduce",
        "broadcast",
        "reduce",
        "all_gather",
        "reduce_scatter",
        "all_to_all",
    ):
        raise ValueError(f"commlens implements no algorithms for {name}")
    if name == "barrier":
        return Collective(lambda: dist.barrier(group=group, async_op=async_op), lambda: None, lambda: 0)

    if name in ("all_reduce", "broadcast", "reduce"):
        buf = empty(c)
        values = rank_values(rank, n, 0, c, dtype, redop if spec.reduces else None)

        def reset() -> None:
            _fill(buf, values)

        if name == "all_reduce":
            reduction = _given(redop, "reduction", name)
            launch = (
                alg.all_reduce(buf, reduction)
                if alg
                else (lambda: dist.all_reduce(buf, op=red, group=group, async_op=async_op))
            )
            expected = lambda: reduce_values(n, 0, c, dtype, reduction)  # noqa: E731
            checked = True
        elif name == "broadcast":
            src_rank = _given(root, "root", name)
            launch = (
                alg.broadcast(buf, src_rank)
                if alg
                else (lambda: dist.broadcast(buf, src=src_rank, group=group, async_op=async_op))
            )
            expected = lambda: rank_values(src_rank, n, 0, c, dtype, None)  # noqa: E731
            checked = True
        else:
            dst_rank, reduction = _given(root, "root", name), _given(redop, "reduction", name)
            launch = (
                alg.reduce(buf, dst_rank, reduction)
                if alg
                else (lambda: dist.reduce(buf, dst=dst_rank, op=red, group=group, async_op=async_op))
            )
            expected = lambda: reduce_values(n, 0, c, dtype, reduction)  # noqa: E731
            checked = rank == dst_rank  # other ranks' buffers are unspecified after a reduce

        def verify() -> int:
            return count_wrong(buf, expected(), dtype, redop, n) if checked else 0

        return Collective(launch, reset, verify, buf)

    if name in ("all_gather", "gather"):
        out = empty(c * n)
        src = out[rank * c : (rank + 1) * c] if in_place else empty(c)
        values = rank_values(rank, n, rank * c, c, dtype, None)
        gathered = None

        def reset() -> None:
            out.zero_()
            _fill(src, values)

        if name == "all_gather":
            launch = (
                alg.all_gather(out, src)
                if alg
                else (lambda: all_gather_tensor(out, src, group=group, async_op=async_op))
            )
            checked = True
        else:
            dst_rank = _given(root, "root", name)
            gathered = list(out.chunk(n)) if rank == dst_rank and n > 0 else None
            if in_place and rank != dst_rank:
                src = empty(c)  # only the root's input lives inside its output
            launch = lambda: dist.gather(src, gathered, dst=dst_rank, group=group, async_op=async_op)  # noqa: E731
            checked = rank == dst_rank

        def verify() -> int:
            if not checked:
                return 0
            exp = torch.cat([rank_values(k, n, k * c, c, dtype, None) for k in range(n)])
            return count_wrong(out, exp, dtype, None, n)

        return Collective(launch, reset, verify, out)

    if name in ("reduce_scatter", "scatter"):
        full = empty(c * n)
        dst = full[rank * c : (rank + 1) * c] if in_place else empty(c)
        if name == "reduce_scatter":
            reduction = _given(redop, "reduction", name)
            values = rank_values(rank, n, 0, c * n, dtype, reduction)
            launch = (
                alg.reduce_scatter(dst, full, reduction)
                if alg
                else (lambda: reduce_scatter_tensor_op(dst, full, op=red, group=group, async_op=async_op))
            )
            expected = lambda: reduce_values(n, rank * c, c, dtype, reduction)  # noqa: E731
        else:
            src_rank = _given(root, "root", name)
            values = rank_values(src_rank, n, 0, c * n, dtype, None)
            if in_place and rank != src_rank:
                dst = empty(c)
            chunks = list(full.chunk(n)) if rank == src_rank else None
            launch = lambda: dist.scatter(dst, chunks, src=src_rank, group=group, async_op=async_op)  # noqa: E731
            expected = lambda: rank_values(src_rank, n, rank * c, c, dtype, None)  # noqa: E731

        def reset() -> None:
            _fill(full, values)
            if not in_place:
                dst.zero_()

        def verify() -> int:
            return count_wrong(dst, expected(), dtype, redop, n)

        return Collective(launch, reset, verify, dst)

    if name == "all_to_all":
        send = empty(c * n)
        recv = empty(c * n)
        values = rank_values(rank, n, 0, c * n, dtype, None)

        def reset() -> None:
            _fill(send, values)
            recv.zero_()

        def verify() -> int:
            exp = torch.cat([rank_values(s, n, rank * c, c, dtype, None) for s in range(n)])
            return count_wrong(recv, exp, dtype, None, n)

        launch = (
            alg.all_to_all(recv, send)
            if alg
            else (lambda: dist.all_to_all_single(recv, send, group=group, async_op=async_op))
        )
        return Collective(launch, reset, verify, recv)

    if name == "sendrecv":
        send = empty(c)
        recv = empty(c)
        values = rank_values(rank, n, 0, c, dtype, None)
        peer_next, peer_prev = (rank + 1) % n, (rank - 1) % n

        def reset() -> None:
            _fill(send, values)
            recv.zero_()

        def launch() -> Any:
            if n == 1:  # a send to oneself is a local copy, as NCCL does it
                recv.copy_(send)
                return None
            nxt = dist.get_global_rank(group, peer_next) if group is not None else peer_next
            prv = dist.get_global_rank(group, peer_prev) if group is not None else peer_prev
            works = dist.batch_isend_irecv(
                [dist.P2POp(dist.isend, send, nxt, group), dist.P2POp(dist.irecv, recv, prv, group)]
            )
            if async_op:
                return works
            for w in works:
                w.wait()
            return None

        def verify() -> int:
            return count_wrong(recv, rank_values(peer_prev, n, 0, c, dtype, None), dtype, None, n)

        return Collective(launch, reset, verify, recv)

    raise ValueError(f"no torch.distributed mapping for op {name!r}")
