"""One rank of a replay: ``python -m commlens.replay.worker --plan PLAN --out TIMES``.

Under ``commlens replay run`` (which launches it through the bench launcher and passes ``--settings``)
and under any external launcher (``torchrun``, ``srun``: the standard environment, as ``commlens bench``
reads it). Every rank reads the plan (from a path all ranks see), creates every process group of the plan
in the same order (torch requires it), then issues its own calls in the recorded order, waiting the
recorded gap before each (unless ``gaps`` is off), and times each call from its launch to its completion
on the host's monotonic clock. Rank 0 gathers every rank's times and writes them to ``--out``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import queue
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from commlens.bench.collectives import Buffers, buffer_bytes, prepare
from commlens.bench.sysinfo import local_facts, system_info
from commlens.bench.worker import normalize_launcher_env
from commlens.files import atomic_text
from commlens.ops import OPS, SizePlan
from commlens.replay.plan import P2P_OPS, PlanCall, ReplayPlan, first_waits, load_plan
from commlens.replay.runner import TIMES_FORMAT
from commlens.replay.settings import ReplaySettings

__all__ = ["TIMES_FORMAT", "algo_for", "main", "replay_rank"]

_SPIN_BELOW_S = 0.002

Groups = dict[str, "dist.ProcessGroup | None"]  # the plan's group name -> its group (None: the default group)


_BUSY = torch.ones(32, 32)
_BUSY_OUT = torch.empty(32, 32)


def _wait_until(t: float, sleep: bool) -> None:
    """Until the monotonic clock reads ``t``: computing all along (small matrix products, which release the GIL
    as the job's compute does, so the backend's completion callbacks still run), or sleeping to within 2 ms
    first, then spinning."""
    left = t - time.perf_counter()
    if sleep:
        if left > _SPIN_BELOW_S:
            time.sleep(left - _SPIN_BELOW_S)
        while time.perf_counter() < t:
            pass
        return
    while time.perf_counter() < t:
        torch.mm(_BUSY, _BUSY, out=_BUSY_OUT)


def _scaled(count: int, scale: float) -> int:
    return count if scale == 1.0 else max(0, round(count * scale))


class _Calls:
    """Each distinct call of this rank prepared once (buffers written once); ``launch(call)`` issues it."""

    def __init__(self, plan: ReplayPlan, rank: int, groups: Groups, settings: ReplaySettings):
        self.plan, self.rank, self.groups, self.settings = plan, rank, groups, settings
        self.device = (
            torch.device("cuda", torch.cuda.current_device()) if settings.device == "cuda" else torch.device("cpu")
        )
        self.buffers = Buffers(self.device)
        self.cache: dict[tuple[Any, ...], Any] = {}

    def reserve(self, calls: tuple[PlanCall, ...]) -> None:
        """Room for the largest call up front, so no buffer is replaced (and every view stays valid)."""
        send = recv = 0
        for c in calls:
            s, r = self._bytes(c)
            send, recv = max(send, s), max(recv, r)
        self.buffers.reserve(send, recv)

    def _size_plan(self, c: PlanCall) -> tuple[SizePlan, int]:
        n = len(self.plan.group(c.group).ranks)
        count = _scaled(c.count, self.settings.size_scale)
        spec = OPS[c.op]
        send, recv = count, count
        if spec.per_rank_split:
            send, recv = {
                "all_gather": (count, count * n),
                "gather": (count, count * n),
                "reduce_scatter": (count * n, count),
                "scatter": (count * n, count),
                "all_to_all": (count * n, count * n),
            }[c.op]
        elem = torch.empty((), dtype=_dtype(c.dtype)).element_size()
        size = max(send, recv) * elem
        return SizePlan(size, size, count, send, recv, False), n

    def _bytes(self, c: PlanCall) -> tuple[int, int]:
        if c.op in P2P_OPS:
            nbytes = _scaled(c.count, self.settings.size_scale) * torch.empty((), dtype=_dtype(c.dtype)).element_size()
            return nbytes, nbytes
        plan, _ = self._size_plan(c)
        return buffer_bytes(OPS[c.op], plan, torch.empty((), dtype=_dtype(c.dtype)).element_size())

    def launch(self, c: PlanCall) -> Any:
        """Issue ``c``: its Work when the call is asynchronous (``--timeline``), else None once it is done."""
        key = (c.op, c.group, c.count, c.dtype, c.redop, c.root, c.peer)
        fn = self.cache.get(key)
        if fn is None:
            fn = self.cache[key] = self._prepare(c)
        return fn()

    def _prepare(self, c: PlanCall) -> Any:
        group = self.groups[c.group]
        if c.op in P2P_OPS:
            count = _scaled(c.count, self.settings.size_scale)
            role = "send" if c.op == "send" else "recv"
            buf = self.buffers.view(role, count, _dtype(c.dtype))
            peer = c.peer
            if self.settings.timeline:
                send_or_recv = dist.isend if c.op == "send" else dist.irecv
                return lambda: send_or_recv(buf, peer, group=group)
            if c.op == "send":
                return lambda: dist.send(buf, peer, group=group)
            return lambda: dist.recv(buf, peer, group=group)
        size_plan, n = self._size_plan(c)
        members = self.plan.group(c.group).ranks
        in_place = c.op in ("all_reduce", "broadcast", "reduce")
        coll = prepare(
            OPS[c.op],
            size_plan,
            c.dtype,
            c.redop,
            c.root,
            in_place,
            members.index(self.rank),
            n,
            self.device,
            group=group,
            async_op=self.settings.timeline,
            algo=algo_for(self.settings.algo, c.op),
            buffers=self.buffers,
        )
        if coll is None:  # torch offers no such placement; every op replayed has one of the two
            raise RuntimeError(f"{c.op}: no placement")
        coll.reset()  # defined values (no NaN or denormals that could slow a reduction)
        return coll.launch


@functools.cache
def algo_for(algo: str, op: str) -> str:
    """``algo`` where commlens implements it for ``op``, else the backend's own (``builtin``)."""
    from commlens.bench.algorithms import validate_algos

    if algo == "builtin" or op in P2P_OPS:
        return "builtin"
    try:
        validate_algos((algo,), (op,))
    except ValueError:
        return "builtin"
    return algo


def _dtype(name: str) -> torch.dtype:
    from commlens.bench.validate import TORCH_DTYPES

    return TORCH_DTYPES[name]


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def replay_rank(
    plan: ReplayPlan, settings: ReplaySettings, rank: int, groups: Groups
) -> list[list[tuple[float, float]]]:
    """This rank's calls replayed: per measured pass, (start, end) of each call on the monotonic clock."""
    mine = next((r.calls for r in plan.ranks if r.rank == rank), ())
    calls = _Calls(plan, rank, groups, settings)
    calls.reserve(mine)
    for c in mine:  # prepare every distinct call before the clock starts
        key = (c.op, c.group, c.count, c.dtype, c.redop, c.root, c.peer)
        if key not in calls.cache:
            calls.cache[key] = calls._prepare(c)
    passes: list[list[tuple[float, float]]] = []
    wait0 = first_waits(plan).get(rank, 0.0)
    for p in range(settings.warmup_passes + settings.passes):
        dist.barrier()
        if settings.timeline:
            stamps = _timeline_pass(mine, calls, settings, wait0)
            if p >= settings.warmup_passes:
                passes.append(stamps)
            continue
        stamps = []
        prev_end = time.perf_counter()
        for c in mine:
            if settings.gaps and c.gap_s > 0:
                _wait_until(prev_end + c.gap_s, settings.compute == "sleep")
            t0 = time.perf_counter()
            work = calls.launch(c)
            if work is not None and hasattr(work, "wait"):
                work.wait()
            _sync(settings.device)
            prev_end = time.perf_counter()
            stamps.append((t0, prev_end))
        if p >= settings.warmup_passes:
            passes.append(stamps)
    return passes


def _timeline_pass(
    mine: tuple[PlanCall, ...], calls: _Calls, settings: ReplaySettings, first_wait: float
) -> list[tuple[float, float]]:
    """One pass issuing each call at its recorded offset from the rank's first call (from when its last peer
    arrived at it: ``first_wait`` after its start, see plan.first_waits), without waiting for the
    ones before it (as an async job does: DDP's buckets, FSDP's prefetch); each call's end is when its Work
    completes, taken by a callback on its future from the backend's thread. A Work without a future (gloo's
    send, recv and reduce_scatter_tensor) is waited for by a second thread, in issue order, as soon as it is
    issued: its end is when that wait returns (late only where a later one of them completes before an
    earlier one). Calls without a Work (a commlens algorithm runs synchronously) end when they return."""
    n = len(mine)
    starts = [0.0] * n
    ends: list[float | None] = [None] * n
    works: list[tuple[int, Any]] = []
    base, first = time.perf_counter(), mine[0].start_s + first_wait if mine else 0.0

    def finished(j: int) -> Any:
        def mark(_: Any) -> None:
            ends[j] = time.perf_counter()

        return mark

    waiter = _Waiter(ends)
    try:
        for j, c in enumerate(mine):
            _wait_until(base + (c.start_s - first), settings.compute == "sleep")
            starts[j] = time.perf_counter()
            work = calls.launch(c)
            if work is None:
                ends[j] = time.perf_counter()
                continue
            try:
                work.get_future().add_done_callback(finished(j))
            except RuntimeError:  # "Work::getFuture not implemented"
                waiter.put(j, work)
                continue
            works.append((j, work))
    finally:
        waiter.close()
    waited: dict[int, float] = {}
    for j, w in works:
        w.wait()
        waited[j] = time.perf_counter()
    _sync(settings.device)
    deadline = time.perf_counter() + 1.0
    while any(e is None for e in ends) and time.perf_counter() < deadline:  # a callback may run just after wait()
        time.sleep(0.0005)
    # a future that never ran its callback: its end is when wait() returned, an upper bound
    return [(s, e if e is not None else waited[j]) for j, (s, e) in enumerate(zip(starts, ends))]


class _Waiter:
    """A thread that waits for Works without a future, in the order given, and notes when each completed."""

    def __init__(self, ends: list[float | None]):
        self.ends = ends
        self.queue: queue.SimpleQueue[tuple[int, Any] | None] = queue.SimpleQueue()
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None

    def put(self, j: int, work: Any) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="replay-waiter", daemon=True)
            self.thread.start()
        self.queue.put((j, work))

    def _run(self) -> None:
        while (item := self.queue.get()) is not None:
            j, work = item
            try:
                work.wait()
            except BaseException as e:  # re-raised on the main thread by close()
                self.error = self.error or e
            self.ends[j] = time.perf_counter()

    def close(self) -> None:
        """Wait until every Work put has completed; a Work's failure is raised here."""
        if self.thread is None:
            return
        self.queue.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error


def _groups(plan: ReplayPlan, world: int) -> Groups:
    """Every process group of the plan, created on every rank in the plan's order (the whole world: WORLD).

    A rank keeps the groups it is a member of: new_group gives the others torch's GroupMember.NON_GROUP_MEMBER
    (-100; typed so from torch 2.14), and the plan's checks keep each rank's calls within its own groups.
    """
    out: Groups = {}
    for g in plan.groups:
        if list(g.ranks) == list(range(world)):
            out[g.name] = None
            continue
        group = dist.new_group(list(g.ranks))  # entered by every rank, member or not
        if isinstance(group, dist.ProcessGroup):
            out[g.name] = group
    return out


def _gloo_world() -> dist.ProcessGroup:
    """A gloo group of every rank, for the objects gathered at the end when the plan's backend is not gloo."""
    group = dist.new_group(backend="gloo")
    if not isinstance(group, dist.ProcessGroup):  # every rank is a member: torch cannot give NON_GROUP_MEMBER
        raise RuntimeError(f"torch.distributed.new_group() over every rank gave {group!r}, not a process group")
    return group


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m commlens.replay.worker", description=__doc__.splitlines()[0])
    p.add_argument("--plan", required=True)
    p.add_argument("--out", required=True, help="rank 0 writes every rank's call times here (JSON)")
    p.add_argument("--settings", default=None, help="a JSON file of ReplaySettings (commlens replay run writes it)")
    p.add_argument("--backend", default="gloo")
    p.add_argument("--algo", default="builtin")
    p.add_argument("--no-gaps", action="store_true")
    p.add_argument("--compute", default="spin", choices=("spin", "sleep"))
    p.add_argument("--timeline", action="store_true")
    p.add_argument("--scale-sizes", type=float, default=1.0)
    p.add_argument("--passes", type=int, default=1)
    p.add_argument("--warmup-passes", type=int, default=1)
    p.add_argument("--timeout", type=float, default=300.0)
    return p


def _settings(ns: argparse.Namespace) -> ReplaySettings:
    if ns.settings:
        return ReplaySettings.from_dict(json.loads(Path(ns.settings).read_text()))
    return ReplaySettings(
        backend=ns.backend,
        device="cuda" if ns.backend == "nccl" else "cpu",
        algo=ns.algo,
        gaps=not ns.no_gaps,
        compute=ns.compute,
        timeline=ns.timeline,
        size_scale=ns.scale_sizes,
        passes=ns.passes,
        warmup_passes=ns.warmup_passes,
        timeout_s=ns.timeout,
    )


def run_worker(argv: list[str]) -> int:
    ns = _parser().parse_args(argv)
    from commlens.errors import CommlensError

    try:
        settings = _settings(ns)
        plan = load_plan(ns.plan)
    except CommlensError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    normalize_launcher_env()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world != plan.world_size:
        print(f"error: the plan has {plan.world_size} ranks, this launch {world} (see --map-ranks)", file=sys.stderr)
        return 2
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device_id = None
    if settings.device == "cuda":
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        device_id = torch.device("cuda", torch.cuda.current_device())
    torch.set_num_threads(1)
    dist.init_process_group(
        backend=settings.backend, timeout=dt.timedelta(seconds=settings.timeout_s), device_id=device_id
    )
    try:
        rank = dist.get_rank()
        groups = _groups(plan, world)
        ctrl = None if settings.backend == "gloo" else _gloo_world()
        started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        passes = replay_rank(plan, settings, rank, groups)
        facts: list[Any] = [None] * world
        dist.all_gather_object(facts, local_facts(settings.device, local_rank), group=ctrl)
        gathered: list[Any] = [None] * world if rank == 0 else []
        dist.gather_object(passes, gathered if rank == 0 else None, dst=0, group=ctrl)
        if rank == 0:
            system = system_info(world, settings.backend, settings.device, facts)
            out = {
                "format": TIMES_FORMAT,
                "started_at": started,
                "settings": settings.as_dict(),
                "system": asdict(system),
                "ranks": {str(r): gathered[r] for r in range(world)},
            }
            with atomic_text(ns.out) as fp:
                json.dump(out, fp, separators=(",", ":"))
        return 0
    finally:
        dist.destroy_process_group()


def main() -> None:
    sys.exit(run_worker(sys.argv[1:]))


if __name__ == "__main__":
    main()
