"""The registry of collective algorithms and the point-to-point plumbing they share.

Every algorithm is a plain function over a :class:`Comm` (the ordered ranks it
runs over and this rank's place among them) and an :class:`Options`. It moves
data only with :meth:`Comm.exchange`, a batch of sends and receives that is
started together and waited for together, so the same code runs on gloo, NCCL
and MPI. Families (``allreduce.py``, ``allgather.py``, ...) register their
functions here with :func:`register`; the public calls in
:mod:`commlens.algos` look them up by the names the cost models share
(:data:`commlens.model.algorithms.ALGORITHMS`).

Signatures, one per op (``root`` and ranks are indexes into ``comm.ranks``):

- all_reduce(comm, tensor, redop, opts): in place
- reduce(comm, tensor, root, redop, opts): in place, the result on root
- broadcast(comm, tensor, root, opts): in place
- all_gather(comm, output, input, opts): output holds ``comm.size`` blocks of ``input``
- reduce_scatter(comm, output, input, redop, opts): input holds ``comm.size`` blocks of ``output``
- all_to_all(comm, output, input, opts): block j of input goes to rank j, block i of output comes from rank i

Tensors are contiguous and one-dimensional; the public calls flatten views.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from commlens.errors import CommlensError
from commlens.ops import Transport, transport

__all__ = [
    "ALGO_OPS",
    "AlgoError",
    "Algorithm",
    "Comm",
    "Options",
    "algorithms_for",
    "block_bounds",
    "chunk_bounds",
    "combine",
    "get_algorithm",
    "register",
]

# The ops this library implements, in catalog order.
ALGO_OPS: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce")

# Reductions and how two partial results combine, in place into the first.
REDUCTIONS: tuple[str, ...] = ("sum", "prod", "max", "min", "avg")


class AlgoError(CommlensError, ValueError):
    """An unknown algorithm, an op it does not implement, or arguments it cannot take."""


@dataclass(frozen=True)
class Options:
    """Tuning knobs an algorithm may read; each one ignores the knobs it has no use for."""

    chunk_bytes: int | None = None  # pipeline the payload in chunks of this many bytes (None: one piece)
    ranks_per_host: int | None = None  # ranks per host for two-level algorithms and auto (None: one host)

    def __post_init__(self) -> None:
        if self.chunk_bytes is not None and self.chunk_bytes <= 0:
            raise AlgoError(f"chunk_bytes must be positive, got {self.chunk_bytes}")
        if self.ranks_per_host is not None and self.ranks_per_host <= 0:
            raise AlgoError(f"ranks_per_host must be positive, got {self.ranks_per_host}")

    def chunk_elems(self, tensor: torch.Tensor) -> int | None:
        """The chunk size in elements of ``tensor`` (at least 1), or None for no chunking."""
        if self.chunk_bytes is None:
            return None
        return max(1, self.chunk_bytes // tensor.element_size())

    def ranks_per_host_in(self, world: int) -> int:
        """Ranks per host in a group of ``world`` ranks: the option (at most ``world``), else ``world`` (one host).

        The caller says how many ranks share a host (the benchmark's worker knows it from every rank's host
        name); nothing is read from the environment.
        """
        return world if self.ranks_per_host is None else min(self.ranks_per_host, world)


@dataclass(frozen=True)
class Comm:
    """The ranks an algorithm runs over, in order, and this rank's index among them.

    ``ranks`` are global ranks (what torch.distributed's point-to-point calls
    address); ``group`` is the process group they belong to (None: the
    default group). :meth:`sub` narrows to a subset for the phases of a
    two-level algorithm without creating a new process group.
    """

    group: Any
    ranks: tuple[int, ...]
    index: int

    @classmethod
    def of(cls, group: Any = None) -> Comm:
        """The whole of ``group`` (None: the default group) as seen from this rank."""
        world = dist.get_world_size(group)
        ranks = tuple(dist.get_global_rank(group, i) if group is not None else i for i in range(world))
        return cls(group, ranks, dist.get_rank(group))

    @property
    def size(self) -> int:
        return len(self.ranks)

    @property
    def rank(self) -> int:
        """This rank's global rank."""
        return self.ranks[self.index]

    @property
    def transport(self) -> Transport:
        """What the group's backend transport does (:data:`commlens.ops.TRANSPORTS`), for routes that depend on it."""
        return transport(str(dist.get_backend(self.group)))

    def sub(self, indexes: Sequence[int]) -> Comm:
        """The ranks at ``indexes`` (which must include this rank), in that order."""
        ranks = tuple(self.ranks[i] for i in indexes)
        return Comm(self.group, ranks, ranks.index(self.rank))

    def exchange(
        self,
        sends: Sequence[tuple[int, torch.Tensor]] = (),
        recvs: Sequence[tuple[int, torch.Tensor]] = (),
    ) -> None:
        """Send each ``(peer index, tensor)`` and receive into each, all at once; return when all are done.

        Empty tensors are skipped: both sides compute the same sizes, so they
        skip the same messages. Messages between one pair travel in order.
        """
        for work in self.start(sends, recvs):
            work.wait()

    def start(
        self,
        sends: Sequence[tuple[int, torch.Tensor]] = (),
        recvs: Sequence[tuple[int, torch.Tensor]] = (),
    ) -> list[Any]:
        """:meth:`exchange` without the wait: start the batch and return its requests (``.wait()`` each).

        For pipelines that post receives ahead, so data lands while the rank
        computes. A tensor must not be touched until its request completes.
        """
        ops = [dist.P2POp(dist.isend, t, self.ranks[p], self.group) for p, t in sends if t.numel()]
        ops += [dist.P2POp(dist.irecv, t, self.ranks[p], self.group) for p, t in recvs if t.numel()]
        return dist.batch_isend_irecv(ops) if ops else []


def combine(acc: torch.Tensor, incoming: torch.Tensor, redop: str) -> None:
    """acc <- acc (redop) incoming, elementwise and in place. ``avg`` combines as a sum."""
    if redop in ("sum", "avg"):
        acc.add_(incoming)
    elif redop == "prod":
        acc.mul_(incoming)
    elif redop == "max":
        torch.maximum(acc, incoming, out=acc)
    elif redop == "min":
        torch.minimum(acc, incoming, out=acc)
    else:
        raise AlgoError(f"unknown reduction {redop!r}; known: {', '.join(REDUCTIONS)}")


def block_bounds(count: int, parts: int) -> list[tuple[int, int]]:
    """Split ``count`` elements into ``parts`` contiguous blocks (the first ``count % parts`` one longer)."""
    base, extra = divmod(count, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def chunk_bounds(count: int, chunk: int | None) -> list[tuple[int, int]]:
    """Split ``count`` elements into pieces of at most ``chunk`` (None: one piece; at least one piece)."""
    if chunk is None or count <= chunk:
        return [(0, count)]
    return [(s, min(s + chunk, count)) for s in range(0, count, chunk)]


AlgoFn = Callable[..., None]


@dataclass(frozen=True)
class Algorithm:
    """One registered algorithm: which op, its shared name, the function, and what it honours."""

    op: str
    name: str
    fn: AlgoFn
    chunked: bool  # honours Options.chunk_bytes
    summary: str  # one line for `commlens bench --algo list` and the docs
    scheme_of: str | None = None  # the algorithm that picks this one by size and layout (None: a choice of its own)


_REGISTRY: dict[str, dict[str, Algorithm]] = {op: {} for op in ALGO_OPS}


def register(op: str, name: str, *, chunked: bool = False, scheme_of: str | None = None) -> Callable[[AlgoFn], AlgoFn]:
    """Decorator: enter ``fn`` as ``op``'s algorithm ``name``; its docstring's first line is the summary.

    ``scheme_of``: the selector that runs this algorithm where it fits (``hierarchical``); such a scheme runs
    by its own name too, but ``all``, the tuner and ``auto``'s fallback leave it to its selector.
    """
    if op not in _REGISTRY:
        raise AlgoError(f"no algorithm family for op {op!r}; known: {', '.join(ALGO_OPS)}")

    def enter(fn: AlgoFn) -> AlgoFn:
        if name in _REGISTRY[op]:
            raise AlgoError(f"{op} algorithm {name!r} registered twice")
        summary = (fn.__doc__ or name).strip().splitlines()[0]
        _REGISTRY[op][name] = Algorithm(op, name, fn, chunked, summary, scheme_of)
        return fn

    return enter


def algorithms_for(op: str, *, schemes: bool = False) -> tuple[str, ...]:
    """The names registered for ``op``, in registration order (empty for an op with none).

    Without ``schemes``, the choices only: what ``--algo all`` and the tuner run; the schemes a selector
    picks (``Algorithm.scheme_of``) are left to it.
    """
    _load_families()
    return tuple(name for name, a in _REGISTRY.get(op, {}).items() if schemes or a.scheme_of is None)


def get_algorithm(op: str, name: str) -> Algorithm:
    """The algorithm ``name`` of ``op``, or an :class:`AlgoError` listing the known ones."""
    _load_families()
    if op not in _REGISTRY:
        raise AlgoError(f"commlens implements no algorithms for {op!r}; it does for {', '.join(ALGO_OPS)}")
    try:
        return _REGISTRY[op][name]
    except KeyError:
        known = ", ".join(algorithms_for(op)) or "none"
        raise AlgoError(f"unknown {op} algorithm {name!r}; known: {known}") from None


def _load_families() -> None:
    """Import the family modules, which register themselves (once)."""
    from commlens.algos import allgather, allreduce, alltoall, bcast, reducescatter, rootreduce  # noqa: F401
