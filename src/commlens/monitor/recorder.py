"""The hot path: record every collective a job issues through ``torch.distributed``, on this rank.

:class:`Recorder` replaces the collectives of the ``torch.distributed``
namespace (``all_reduce``, ``all_gather_into_tensor``, FSDP2's
``all_gather_single`` and ``reduce_scatter_single``, ...) with thin wrappers.
A wrapper looks the process group up (cached per group), takes the group's
next sequence number, the message size with nccl-tests' meaning and the
dtype, notes the call as in flight, calls the real function, and records the
collective when it completes:

- a blocking call: when it returns;
- an async call (``async_op=True``, as DDP's comm hook and FSDP2 issue
  them): when its ``Work``'s future completes, from the backend's thread, so
  nothing waits for it (gloo);
- on NCCL: from the process group's completion hook, with the CUDA-timed
  duration (``TORCH_NCCL_ENABLE_TIMING=1``); no host synchronisation.

No wrapper adds a device sync, a barrier or a collective. A record is one
tuple written into a fixed-size ring (:data:`DEFAULT_CAPACITY` slots); the
window thread and the HTTP endpoint read it by cursor, and a reader that
falls behind by more than the ring's size counts what it lost.

Collectives DDP issues from C++ are not seen by a Python wrapper; :meth:`Recorder.watch_ddp`
registers DDP's own all-reduce comm hook, which issues them through
``torch.distributed.all_reduce``. Functional collectives (DTensor's) and
point-to-point sends are not recorded.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from commlens.results.collectives import CollectiveRecord
from commlens.results.records import DTYPE_SIZES

__all__ = ["DEFAULT_CAPACITY", "GroupInfo", "Recorder", "RECORDED_CALLS"]

log = logging.getLogger(__name__)

DEFAULT_CAPACITY = 1 << 16  # records kept per rank: the ring's slots


@dataclass(frozen=True)
class _Call:
    """How to read one ``torch.distributed`` function's arguments."""

    op: str  # commlens' catalog name
    inputs: str | None  # parameter holding what the rank sends (a tensor or a list of them)
    outputs: str | None  # parameter holding what it receives
    per_rank: bool = False  # the tensor given on a non-root rank is one rank's share (gather, scatter)


# torch.distributed's collectives, as torch 2.13 names their parameters.
RECORDED_CALLS: dict[str, _Call] = {
    "all_reduce": _Call("all_reduce", "tensor", None),
    "all_gather_into_tensor": _Call("all_gather", "input_tensor", "output_tensor"),
    "all_gather_single": _Call("all_gather", "input_tensor", "output_tensor"),
    "all_gather": _Call("all_gather", "tensor", "tensor_list"),
    "reduce_scatter_tensor": _Call("reduce_scatter", "input", "output"),
    "reduce_scatter_single": _Call("reduce_scatter", "input", "output"),
    "reduce_scatter": _Call("reduce_scatter", "input_list", "output"),
    "all_to_all_single": _Call("all_to_all", "input", "output"),
    "all_to_all": _Call("all_to_all", "input_tensor_list", "output_tensor_list"),
    "broadcast": _Call("broadcast", "tensor", None),
    "reduce": _Call("reduce", "tensor", None),
    "gather": _Call("gather", "tensor", "gather_list", per_rank=True),
    "scatter": _Call("scatter", "scatter_list", "tensor", per_rank=True),
    "barrier": _Call("barrier", None, None),
}


def _nbytes(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, list | tuple):
        return sum(t.numel() * t.element_size() for t in value)
    return int(value.numel() * value.element_size())


def _dtype(value: Any) -> str:
    if isinstance(value, list | tuple):
        value = value[0] if value else None
    if value is None:
        return "uint8"
    name = str(value.dtype).removeprefix("torch.")
    return name if name in DTYPE_SIZES else "other"


def _ranks_label(ranks: tuple[int, ...]) -> str:
    """A group's default name, the same on each of its ranks: ``ranks0-3``, ``ranks0,2,4,6``."""
    if ranks == tuple(range(ranks[0], ranks[0] + len(ranks))):
        return f"ranks{ranks[0]}-{ranks[-1]}"
    text = ",".join(map(str, ranks))
    if len(text) <= 60:
        return f"ranks{text}"
    import hashlib

    return f"ranks{ranks[0]}..{ranks[-1]}#" + hashlib.sha256(text.encode()).hexdigest()[:8]


class GroupInfo:
    """One process group as this rank sees it: its label, its ranks, its next sequence number."""

    __slots__ = ("index", "name", "size", "ranks", "seq", "backend", "hook_timed", "issued", "pg")

    def __init__(self, index: int, name: str, ranks: tuple[int, ...], backend: str, pg: Any) -> None:
        self.index = index
        self.name = name
        self.size = len(ranks)
        self.ranks = ranks
        self.seq = itertools.count()
        self.backend = backend
        self.hook_timed = False  # NCCL: timing comes from the completion hook
        self.issued: deque[tuple[int, str, int, str, float, int | None]] = deque()  # waiting for the hook
        self.pg = pg


class Recorder:
    """Records collectives into a ring of tuples; see the module docstring.

    A slot holds ``(group index, seq, op, size_bytes, dtype, start_s, end_s, step)``.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY, *, group_names: dict[Any, str] | None = None) -> None:
        if capacity < 16 or capacity & (capacity - 1):
            raise ValueError(f"capacity must be a power of two >= 16, got {capacity}")
        self.capacity = capacity
        self._mask = capacity - 1
        self._ring: list[tuple[Any, ...] | None] = [None] * capacity
        self._counter = itertools.count()
        self.written = 0  # slots written (the cursor a reader catches up to)
        self.groups: list[GroupInfo] = []
        self._by_id: dict[int, GroupInfo | None] = {}
        self._names = dict(group_names or {})
        self.inflight: dict[tuple[int, int], float] = {}
        self.step: int | None = None
        self.rank = 0
        self.host = os.uname().nodename
        self._originals: dict[str, Callable[..., Any]] = {}
        self._local = threading.local()
        self._lock = threading.Lock()  # group registration only; the hot path takes no lock
        self.active = False

    # ---- groups -------------------------------------------------------------------------------------

    def name_group(self, group: Any, name: str) -> None:
        """Label ``group`` (a ProcessGroup) as ``name`` in records and metrics (``"dp"``, ``"tp"``)."""
        self._names[id(group)] = name
        info = self._by_id.get(id(group))
        if info is not None:
            info.name = name

    def _register(self, group: Any) -> GroupInfo | None:
        import torch.distributed as dist

        with self._lock:
            key = id(group)
            if key in self._by_id:
                return self._by_id[key]
            pg = group if group is not None else dist.group.WORLD
            try:
                ranks = tuple(dist.get_process_group_ranks(pg))
            except (RuntimeError, ValueError):  # not a member of this group, or not a group at all
                self._by_id[key] = None
                return None
            world = dist.distributed_c10d._get_default_group()
            if pg is world:
                default = "world"
            else:
                desc = getattr(pg, "group_desc", "") or ""
                default = desc if desc and desc not in ("undefined", "default_pg") else _ranks_label(ranks)
            name = self._names.get(id(pg)) or self._names.get(key) or default
            try:
                backend = str(dist.get_backend(pg))
            except (RuntimeError, ValueError):
                backend = ""
            info = GroupInfo(len(self.groups), name, ranks, backend, pg)
            if backend == "nccl":
                info.hook_timed = self._hook_nccl(info)
            self.groups.append(info)
            self._by_id[key] = info
            self._by_id[id(pg)] = info
            return info

    def _hook_nccl(self, info: GroupInfo) -> bool:
        """Time this NCCL group's collectives from its completion hook (CUDA events, no host sync)."""
        register = getattr(info.pg, "_register_on_completion_hook", None)
        if register is None:
            return False
        try:
            register(functools.partial(self._nccl_done, info))
        except RuntimeError as e:  # a hook already registered by someone else, or timing unsupported
            log.warning("group %s: NCCL completion hook not registered (%s); timing by Work completion", info.name, e)
            return False
        return True

    def _nccl_done(self, info: GroupInfo, work_info: Any) -> None:
        # Completion hooks run in order of completion, which for one communicator is the order of issue.
        try:
            seq, op, size, dtype, t0, step = info.issued.popleft()
        except IndexError:  # a collective issued from C++ (DDP without the comm hook): op and size unknown
            return
        finished = work_info.time_finished.timestamp()
        active = work_info.active_duration.total_seconds()
        started = finished - active if active > 0 else max(t0, work_info.time_started.timestamp())
        self.inflight.pop((info.index, seq), None)
        self._put((info.index, seq, op, size, dtype, started, finished, step))

    # ---- the ring -----------------------------------------------------------------------------------

    def _put(self, slot: tuple[Any, ...]) -> None:
        i = next(self._counter)
        self._ring[i & self._mask] = slot
        if i >= self.written:
            self.written = i + 1

    def _done(
        self, gidx: int, seq: int, op: str, size: int, dtype: str, t0: float, step: int | None, _fut: Any
    ) -> None:
        end = time.time()
        self.inflight.pop((gidx, seq), None)
        self._put((gidx, seq, op, size, dtype, t0, end, step))

    def read(self, cursor: int, limit: int | None = None) -> tuple[list[CollectiveRecord], int, int]:
        """Records written at or after ``cursor``: (records, next cursor, records lost to the ring's wrap)."""
        hi = self.written
        lost = max(0, hi - self.capacity - cursor)
        lo = cursor + lost
        if limit is not None and hi - lo > limit:
            hi = lo + limit
        out = []
        for i in range(lo, hi):
            slot = self._ring[i & self._mask]
            if slot is None:
                continue
            out.append(self.record(slot))
        return out, hi, lost

    def record(self, slot: tuple[Any, ...]) -> CollectiveRecord:
        gidx, seq, op, size, dtype, t0, t1, step = slot
        info = self.groups[gidx]
        return CollectiveRecord(
            rank=self.rank,
            group=info.name,
            group_size=info.size,
            seq=seq,
            op=op,
            size_bytes=size,
            dtype=dtype,
            start_s=t0,
            end_s=max(t1, t0),
            group_ranks=info.ranks,
            host=self.host,
            step=step,
            timing="cuda" if info.hook_timed else "cpu",
        )

    def oldest_inflight(self) -> tuple[str, int, float] | None:
        """(group, seq, start) of the collective in flight the longest, or None."""
        try:
            items = list(self.inflight.items())
        except RuntimeError:  # resized while copied (another thread completed one): try once more
            items = list(self.inflight.items())
        if not items:
            return None
        (gidx, seq), t0 = min(items, key=lambda kv: kv[1])
        return self.groups[gidx].name, seq, t0

    # ---- patching -----------------------------------------------------------------------------------

    def install(self) -> None:
        """Wrap ``torch.distributed``'s collectives (the namespace a training script and FSDP2 call)."""
        import torch.distributed as dist

        self.rank = dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))
        for name, call in RECORDED_CALLS.items():
            original = getattr(dist, name, None)
            if original is None or name in self._originals:
                continue
            self._originals[name] = original
            setattr(dist, name, self._wrap(name, original, call))
        self.active = True

    def uninstall(self) -> None:
        import torch.distributed as dist

        for name, original in self._originals.items():
            setattr(dist, name, original)
        self._originals.clear()
        self.active = False
        for info in self.groups:  # a stopped monitor keeps no process group alive past destroy_process_group
            info.pg = None

    def _wrap(self, name: str, original: Callable[..., Any], call: _Call) -> Callable[..., Any]:
        import inspect

        params = list(inspect.signature(original).parameters)
        group_at = params.index("group")
        async_at = params.index("async_op")
        in_at = params.index(call.inputs) if call.inputs else -1
        out_at = params.index(call.outputs) if call.outputs else -1
        op, per_rank = call.op, call.per_rank
        local = self._local
        by_id = self._by_id

        def arg(args: tuple[Any, ...], kwargs: dict[str, Any], at: int, key: str | None) -> Any:
            if at < 0:
                return None
            return args[at] if len(args) > at else kwargs.get(key) if key else None

        @functools.wraps(original)
        def recorded(*args: Any, **kwargs: Any) -> Any:
            if not self.active or getattr(local, "inside", False):
                return original(*args, **kwargs)
            group = args[group_at] if len(args) > group_at else kwargs.get("group")
            key = id(group)
            info = by_id[key] if key in by_id else self._register(group)
            if info is None:
                return original(*args, **kwargs)
            sent = arg(args, kwargs, in_at, call.inputs)
            received = arg(args, kwargs, out_at, call.outputs)
            if per_rank:
                share = received if sent is None or isinstance(sent, list | tuple) else sent
                size = _nbytes(share) * (info.size if not isinstance(share, list | tuple) else 1)
            else:
                size = max(_nbytes(sent), _nbytes(received))
            dtype = _dtype(sent if sent is not None else received)
            is_async = args[async_at] if len(args) > async_at else kwargs.get("async_op", False)
            seq = next(info.seq)
            step = self.step
            t0 = time.time()
            self.inflight[(info.index, seq)] = t0
            if info.hook_timed:
                info.issued.append((seq, op, size, dtype, t0, step))
            local.inside = True
            try:
                work = original(*args, **kwargs)
            except BaseException:
                self.inflight.pop((info.index, seq), None)
                if info.hook_timed and info.issued:
                    info.issued.pop()
                raise
            finally:
                local.inside = False
            if info.hook_timed:
                return work
            if is_async and work is not None:
                work.get_future().add_done_callback(
                    functools.partial(self._done, info.index, seq, op, size, dtype, t0, step)
                )
            else:
                self._done(info.index, seq, op, size, dtype, t0, step, None)
            return work

        recorded.__commlens_recorded__ = True  # type: ignore[attr-defined]
        return recorded

    # ---- DDP ----------------------------------------------------------------------------------------

    def watch_ddp(self, model: Any, process_group: Any = None) -> bool:
        """Have DDP issue its gradient all-reduces through ``torch.distributed.all_reduce``.

        DDP's reducer calls the process group from C++, which no Python wrapper sees; registering DDP's
        own default comm hook (``allreduce_hook``: divide by the group size, all-reduce, async) routes the
        same all-reduces through Python, unchanged in what they compute. Returns False (and records
        nothing extra) when the model already has a comm hook, whose all-reduces are then seen if it
        issues them through ``torch.distributed``.
        """
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        try:
            model.register_comm_hook(process_group, allreduce_hook)
        except RuntimeError as e:
            log.info("DDP model already has a comm hook (%s); its collectives are recorded as it issues them", e)
            return False
        return True
