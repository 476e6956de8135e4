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

from commlens.bench.validate import (
    TORCH_DTYPES,
    Pattern,
    all_to_all_pattern,
    count_wrong_chunked,
    gathered_pattern,
    rank_pattern,
    reduce_pattern,
    write_chunked,
)
from commlens.ops import OpSpec, SizePlan

__all__ = ["PLACEMENTS", "Buffers", "Collective", "buffer_bytes", "prepare", "torch_redop"]

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


class Buffers:
    """One rank's send and receive buffers, allocated once for the largest row and viewed for every row.

    Each role (``send``, ``recv``) is one byte buffer on the device; a row takes the first ``count`` elements
    of it in its dtype. :meth:`reserve` sizes both for the sweep's largest row up front (on CPU the pages are
    only touched as rows write them); a row larger than reserved replaces the buffer, dropping the old one
    first, so a rank never holds two generations at once.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self._raw: dict[str, torch.Tensor | None] = {"send": None, "recv": None}

    def reserve(self, send_bytes: int, recv_bytes: int) -> None:
        """Make room for ``send_bytes`` and ``recv_bytes``."""
        self._room("send", send_bytes)
        self._room("recv", recv_bytes)

    def nbytes(self, role: str) -> int:
        """Bytes held for ``role``."""
        raw = self._raw[role]
        return 0 if raw is None else raw.numel()

    def _room(self, role: str, nbytes: int) -> torch.Tensor:
        raw = self._raw[role]
        if raw is None or raw.numel() < nbytes:
            self._raw[role] = raw = None  # free the smaller one before allocating
            raw = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=self.device)
            self._raw[role] = raw
        return raw

    def view(self, role: str, count: int, dtype: torch.dtype) -> torch.Tensor:
        """The first ``count`` elements of ``role``'s buffer as ``dtype`` (contents left from earlier rows)."""
        nbytes = count * dtype.itemsize
        return self._room(role, nbytes)[:nbytes].view(dtype)


def buffer_bytes(spec: OpSpec, plan: SizePlan, elem_size: int) -> tuple[int, int]:
    """(send, receive) bytes :func:`prepare` takes from :class:`Buffers` for one row, at most.

    In-place ops (all_reduce, broadcast, reduce) use the receive buffer alone; the others the op's input and
    output counts of ``plan``.
    """
    if spec.name == "barrier":
        return 0, 0
    if spec.name in ("all_reduce", "broadcast", "reduce"):
        return 0, plan.count * elem_size
    return plan.send_count * elem_size, plan.recv_count * elem_size


_T = TypeVar("_T")


def _given(value: _T | None, what: str, op: str) -> _T:
    """A row's reduction or root where its op has one (None only for an op without)."""
    if value is None:
        raise ValueError(f"{op} needs its {what}")
    return value


@dataclass(frozen=True)
class _Row:
    """What every op's preparation needs of one row (see :func:`prepare`)."""

    name: str
    dtype: str
    redop: str | None
    root: int | None
    in_place: bool
    rank: int
    world: int
    count: int  # the plan's count: elements per rank
    device: torch.device
    group: Any
    async_op: bool
    alg: Any  # an AlgoCalls, or None for torch's built-in call
    pool: Buffers

    @property
    def red(self) -> Any:
        return None if self.redop is None else _REDOPS.get(self.redop)

    def send_view(self, k: int) -> torch.Tensor:
        return self.pool.view("send", k, TORCH_DTYPES[self.dtype])

    def recv_view(self, k: int) -> torch.Tensor:
        return self.pool.view("recv", k, TORCH_DTYPES[self.dtype])

    def inputs(self, r: int, offset: int, reduction: str | None) -> Pattern:
        """Rank ``r``'s input values at buffer elements ``s ..`` (global index ``offset + s``)."""
        return rank_pattern(r, self.world, offset, self.dtype, reduction, self.device)

    def reduced(self, offset: int, reduction: str) -> Pattern:
        """The exact reduction over all ranks' inputs at buffer elements ``s ..`` (global ``offset + s``)."""
        return reduce_pattern(self.world, offset, self.dtype, reduction, self.device)

    def root_rank(self) -> int:
        return _given(self.root, "root", self.name)

    def whole_and_chunk(self, everyone_op: str, whole_role: str) -> tuple[bool, torch.Tensor, torch.Tensor]:
        """The buffers of a gather- or scatter-type row: (whether this rank holds the whole buffer, the whole
        buffer of ``count x world`` elements in ``whole_role``, this rank's chunk of ``count``).

        Every rank holds the whole buffer for ``everyone_op`` (all_gather, reduce_scatter); for the rooted op
        (gather's output, scatter's input) only the root does, the others an empty view. The chunk is this
        rank's slice of the whole buffer in place (where it holds one), else a buffer of the other role.
        """
        holds = self.name == everyone_op or self.rank == self.root_rank()
        c = self.count
        other = "send" if whole_role == "recv" else "recv"
        whole = self.pool.view(whole_role, c * self.world if holds else 0, TORCH_DTYPES[self.dtype])
        if self.in_place and holds:
            return holds, whole, whole[self.rank * c : (self.rank + 1) * c]
        return holds, whole, self.pool.view(other, c, TORCH_DTYPES[self.dtype])

    def reduction(self) -> str:
        return _given(self.redop, "reduction", self.name)


_ALGO_OPS = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all")


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
    buffers: Buffers | None = None,
) -> Collective | None:
    """Buffers and callables for one row, or None when torch offers no such placement.

    ``algo`` other than ``builtin`` runs the row through :mod:`commlens.algos` (same buffers, same
    placements, same check) with ``chunk_bytes`` and ``ranks_per_host`` (ranks on each host, when every
    host has as many; None: one host) passed on.

    The row's tensors are views of ``buffers`` (a fresh :class:`Buffers` when None): at most its send and
    receive counts of ``plan`` (:func:`buffer_bytes`), nothing else of message size. Inputs are written and
    results checked in chunks (:func:`commlens.bench.validate.write_chunked`).
    """
    offered_oop, offered_ip = PLACEMENTS[spec.name]
    if not (offered_ip if in_place else offered_oop):
        return None
    alg = None
    if algo != "builtin":
        from commlens.bench.algorithms import AlgoCalls

        alg = AlgoCalls(algo, group, chunk_bytes, ranks_per_host)
    name = spec.name
    if alg is not None and name not in _ALGO_OPS:
        raise ValueError(f"commlens implements no algorithms for {name}")
    if name == "barrier":
        return Collective(lambda: dist.barrier(group=group, async_op=async_op), lambda: None, lambda: 0)
    pool = buffers if buffers is not None else Buffers(device)
    row = _Row(name, dtype, redop, root, in_place, rank, world, plan.count, device, group, async_op, alg, pool)
    build = _BUILDERS.get(name)
    if build is None:
        raise ValueError(f"no torch.distributed mapping for op {name!r}")
    return build(row, spec.reduces)


def _one_buffer(row: _Row, reduces: bool) -> Collective:
    """all_reduce, broadcast and reduce: in place on the receive buffer."""
    name, alg, group, async_op, red = row.name, row.alg, row.group, row.async_op, row.red
    buf = row.recv_view(row.count)
    values = row.inputs(row.rank, 0, row.redop if reduces else None)

    def reset() -> None:
        write_chunked(buf, values)

    expected: Pattern
    checked = True
    if name == "all_reduce":
        reduction = row.reduction()
        launch = (
            alg.launch("all_reduce", buf, reduction)
            if alg
            else (lambda: dist.all_reduce(buf, op=red, group=group, async_op=async_op))
        )
        expected = row.reduced(0, reduction)
    elif name == "broadcast":
        src_rank = row.root_rank()
        launch = (
            alg.launch("broadcast", buf, src_rank)
            if alg
            else (lambda: dist.broadcast(buf, src=src_rank, group=group, async_op=async_op))
        )
        expected = row.inputs(src_rank, 0, None)
    else:
        dst_rank, reduction = row.root_rank(), row.reduction()
        launch = (
            alg.launch("reduce", buf, dst_rank, reduction)
            if alg
            else (lambda: dist.reduce(buf, dst=dst_rank, op=red, group=group, async_op=async_op))
        )
        expected = row.reduced(0, reduction)
        checked = row.rank == dst_rank  # other ranks' buffers are unspecified after a reduce

    def verify() -> int:
        return count_wrong_chunked(buf, expected, row.dtype, row.redop, row.world) if checked else 0

    return Collective(launch, reset, verify, buf)


def _gathering(row: _Row, reduces: bool) -> Collective:
    """all_gather and gather: each rank's chunk into the (root's) output."""
    name, alg, group, async_op, rank, c, n = row.name, row.alg, row.group, row.async_op, row.rank, row.count, row.world
    receives, out, src = row.whole_and_chunk("all_gather", "recv")
    values = row.inputs(rank, rank * c, None)

    def reset() -> None:
        if receives:
            out.zero_()
        write_chunked(src, values)

    if name == "all_gather":
        launch = (
            alg.launch("all_gather", out, src)
            if alg
            else (lambda: all_gather_tensor(out, src, group=group, async_op=async_op))
        )
    else:
        dst_rank = row.root_rank()
        gathered = list(out.chunk(n)) if receives and n > 0 else None
        launch = lambda: dist.gather(src, gathered, dst=dst_rank, group=group, async_op=async_op)  # noqa: E731

    def verify() -> int:
        if not receives:
            return 0
        return count_wrong_chunked(out, gathered_pattern(c, row.device), row.dtype, None, n)

    return Collective(launch, reset, verify, out)


def _scattering(row: _Row, reduces: bool) -> Collective:
    """reduce_scatter and scatter: the (root's) full input into each rank's chunk."""
    name, alg, group, async_op, rank, c, n = row.name, row.alg, row.group, row.async_op, row.rank, row.count, row.world
    sends, full, dst = row.whole_and_chunk("reduce_scatter", "send")
    if name == "reduce_scatter":
        reduction, red = row.reduction(), row.red
        values = row.inputs(rank, 0, reduction)
        launch = (
            alg.launch("reduce_scatter", dst, full, reduction)
            if alg
            else (lambda: reduce_scatter_tensor_op(dst, full, op=red, group=group, async_op=async_op))
        )
        expected = row.reduced(rank * c, reduction)
    else:
        src_rank = row.root_rank()
        values = row.inputs(src_rank, 0, None)
        chunks = list(full.chunk(n)) if sends else None
        launch = lambda: dist.scatter(dst, chunks, src=src_rank, group=group, async_op=async_op)  # noqa: E731
        expected = row.inputs(src_rank, rank * c, None)

    def reset() -> None:
        write_chunked(full, values)
        if not (row.in_place and sends):
            dst.zero_()

    def verify() -> int:
        return count_wrong_chunked(dst, expected, row.dtype, row.redop, n)

    return Collective(launch, reset, verify, dst)


def _all_to_all(row: _Row, reduces: bool) -> Collective:
    alg, group, async_op, rank, c, n = row.alg, row.group, row.async_op, row.rank, row.count, row.world
    send = row.send_view(c * n)
    recv = row.recv_view(c * n)
    values = row.inputs(rank, 0, None)

    def reset() -> None:
        write_chunked(send, values)
        recv.zero_()

    def verify() -> int:
        return count_wrong_chunked(recv, all_to_all_pattern(rank, c, row.device), row.dtype, None, n)

    launch = (
        alg.launch("all_to_all", recv, send)
        if alg
        else (lambda: dist.all_to_all_single(recv, send, group=group, async_op=async_op))
    )
    return Collective(launch, reset, verify, recv)


def _sendrecv(row: _Row, reduces: bool) -> Collective:
    """A ring: each rank sends to the next and receives from the previous."""
    group, async_op, rank, c, n = row.group, row.async_op, row.rank, row.count, row.world
    send = row.send_view(c)
    recv = row.recv_view(c)
    values = row.inputs(rank, 0, None)
    peer_next, peer_prev = (rank + 1) % n, (rank - 1) % n

    def reset() -> None:
        write_chunked(send, values)
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
        return count_wrong_chunked(recv, row.inputs(peer_prev, 0, None), row.dtype, None, n)

    return Collective(launch, reset, verify, recv)


_BUILDERS: dict[str, Callable[[_Row, bool], Collective]] = {
    "all_reduce": _one_buffer,
    "broadcast": _one_buffer,
    "reduce": _one_buffer,
    "all_gather": _gathering,
    "gather": _gathering,
    "reduce_scatter": _scattering,
    "scatter": _scattering,
    "all_to_all": _all_to_all,
    "sendrecv": _sendrecv,
}
