"""Persistent gloo worker pools for testing distributed code: one pool per world size.

A :class:`Pool` of ``world`` processes joins one gloo process group (FileStore
in a temporary directory, loopback sockets) when it starts, creates the
sub-groups of :data:`SUBGROUPS` once, and then runs calls until closed. A
call runs a module-level function on every member of a group and returns
each member's result in group-rank order::

    def my_check(ctx: Member, n: int) -> list[int]:      # module level, runs in every worker
        t = torch.full((n,), ctx.rank)
        dist.all_reduce(t, group=ctx.group)
        return t.tolist()                                  # anything picklable

    def test_it(pools):                                    # `pools` fixture from conftest.py
        results = pools.run(4, my_check, n=3)              # default group of 4 ranks
        results = pools.run(5, my_check, group="odd", n=3) # ranks 1 and 3 of 5; others sit it out

An exception in a worker fails the call with the worker's traceback; a call
that has not finished after ``timeout_s`` (60 s) fails with
:class:`HarnessTimeout` instead of hanging. After either, the pool is killed
(gloo may hold unmatched messages) and the next call starts a fresh one.
:class:`Pools` starts pools lazily and closes them all at session end.

Workers are forked from a forkserver that has imported torch once, so a pool
starts in well under a second per rank.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
import multiprocessing.connection as mpc
import os
import pickle
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["SUBGROUPS", "HarnessError", "HarnessTimeout", "Member", "Pool", "Pools", "errors_of", "group_ranks"]

CALL_TIMEOUT_S = 60.0  # a call that runs longer fails: a deadlocked algorithm must not hang the suite
ERROR_GRACE_S = 2.0  # after one rank fails, how long the others get to report before the pool is killed

# Sub-groups every pool creates (where the world has the ranks), by name: global ranks in group order.
SUBGROUPS: dict[str, Callable[[int], list[int]]] = {
    "odd": lambda world: list(range(1, world, 2)),  # 1, 3, 5, ...: strided, and size 1 when world is 2 or 3
    "tail": lambda world: list(range(1, world)),  # every rank but 0: a group whose rank 0 is global rank 1
}


def errors_of(calls: dict[str, Callable[[], Any]], error: type[BaseException]) -> dict[str, str]:
    """Run each call; its ``error`` message by name, or "no error" (for bad-input checks inside a worker)."""
    out = {}
    for name, call in calls.items():
        try:
            call()
            out[name] = "no error"
        except error as e:
            out[name] = str(e)
    return out


def group_ranks(world: int, group: str) -> list[int]:
    """The global ranks of ``group`` ("world" or a :data:`SUBGROUPS` name) in a pool of ``world``."""
    if group == "world":
        return list(range(world))
    ranks = SUBGROUPS[group](world)
    if not ranks:
        raise ValueError(f"group {group!r} is empty in a world of {world}")
    return ranks


class HarnessError(AssertionError):
    """A worker raised; the message carries each failing rank's traceback."""


class HarnessTimeout(HarnessError):
    """A call did not finish in time (a deadlock, or a test too big for its timeout)."""


@dataclass(frozen=True)
class Member:
    """What a called function learns about where it runs."""

    group: Any  # the process group handle (None: the default group)
    group_name: str
    rank: int  # rank within the group
    size: int  # ranks in the group
    global_rank: int
    world: int  # ranks in the pool


def _worker(rank: int, world: int, store_path: str, conn: mpc.Connection, gloo_timeout_s: float) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)  # up to 8 ranks share 2 cores
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store_path}",
        rank=rank,
        world_size=world,
        timeout=dt.timedelta(seconds=gloo_timeout_s),
    )
    members: dict[str, Member] = {"world": Member(None, "world", rank, world, rank, world)}
    for name, spec in SUBGROUPS.items():
        ranks = spec(world)
        if not ranks:
            continue
        handle = dist.new_group(ranks)  # every rank creates every group, in the same order
        if rank in ranks:
            members[name] = Member(handle, name, ranks.index(rank), len(ranks), rank, world)
    conn.send_bytes(pickle.dumps(("ready", None)))
    try:
        while True:
            try:
                path, payload = pickle.loads(conn.recv_bytes())
            except EOFError:
                return
            if payload is None:
                return
            for entry in path:
                if entry not in sys.path:
                    sys.path.append(entry)
            try:
                fn, group, kwargs = pickle.loads(payload)
                member = members.get(group)
                result = None if member is None else fn(member, **kwargs)
                reply = pickle.dumps(("ok", result))
            except BaseException:  # noqa: BLE001 - every failure goes back to the test, with its traceback
                reply = pickle.dumps(("error", f"rank {rank}:\n{traceback.format_exc()}"))
            conn.send_bytes(reply)
    finally:
        dist.destroy_process_group()


def _context() -> mp.context.BaseContext:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["torch", "torch.distributed"])
    return ctx


class Pool:
    """``world`` worker processes in one gloo group, running calls until :meth:`close`."""

    def __init__(self, world: int, *, timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.world = world
        self.timeout_s = timeout_s
        self._dir = tempfile.TemporaryDirectory(prefix=f"commlens-pool{world}-")
        self._procs: list[mp.process.BaseProcess] = []
        self._conns: list[mpc.Connection] = []
        ctx = _context()
        store = os.path.join(self._dir.name, "store")
        try:
            for rank in range(world):
                ours, theirs = ctx.Pipe()
                proc = ctx.Process(
                    target=_worker,
                    args=(rank, world, store, theirs, timeout_s * 0.75),
                    name=f"pool{world}-rank{rank}",
                    daemon=True,
                )
                proc.start()
                theirs.close()
                self._procs.append(proc)
                self._conns.append(ours)
            self._collect(f"starting a pool of {world}", timeout_s)
        except BaseException:
            self.close()
            raise

    @property
    def alive(self) -> bool:
        return bool(self._procs) and all(p.is_alive() for p in self._procs)

    def run(
        self, fn: Callable[..., Any], *, group: str = "world", timeout_s: float | None = None, **kwargs: Any
    ) -> list[Any]:
        """Run ``fn(member, **kwargs)`` on every rank of ``group``; return their results in group-rank order."""
        ranks = group_ranks(self.world, group)
        message = pickle.dumps((list(sys.path), pickle.dumps((fn, group, kwargs))))
        for conn in self._conns:
            conn.send_bytes(message)
        what = f"{getattr(fn, '__name__', fn)}({kwargs}) on group {group!r} of a {self.world}-rank pool"
        results = self._collect(what, timeout_s or self.timeout_s)
        return [results[r] for r in ranks]

    def _collect(self, what: str, timeout_s: float) -> list[Any]:
        results: dict[int, Any] = {}
        errors: dict[int, str] = {}
        deadline = time.monotonic() + timeout_s
        pending = dict(enumerate(self._conns))
        while pending:
            now = time.monotonic()
            if errors:
                deadline = min(deadline, now + ERROR_GRACE_S)
            ready = mpc.wait(list(pending.values()), timeout=max(0.0, deadline - now))
            if not ready:
                break
            for conn in ready:
                rank = self._conns.index(conn)
                del pending[rank]
                try:
                    status, value = pickle.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    status, value = "error", f"rank {rank}: worker died (exit code {self._procs[rank].exitcode})"
                (results if status in ("ok", "ready") else errors)[rank] = value
        if errors or pending:
            self.close(force=bool(pending))
            detail = "\n".join(errors[r] for r in sorted(errors))
            if pending and not errors:
                raise HarnessTimeout(f"{what}: ranks {sorted(pending)} did not finish within {timeout_s:.0f} s")
            hung = f"\n(ranks {sorted(pending)} had not finished)" if pending else ""
            raise HarnessError(f"{what} failed:\n{detail}{hung}")
        return [results[r] for r in range(self.world)]

    def close(self, *, force: bool = False) -> None:
        """Stop the workers (politely unless ``force``, as when some are stuck) and remove the store."""
        for conn in self._conns if not force else ():
            try:
                conn.send_bytes(pickle.dumps(([], None)))
            except OSError:
                pass
        deadline = time.monotonic() + (0.0 if force else 5.0)
        for proc in self._procs:
            proc.join(max(0.0, deadline - time.monotonic()))
        for proc in self._procs:
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self._conns:
            conn.close()
        self._procs, self._conns = [], []
        self._dir.cleanup()


class Pools:
    """One :class:`Pool` per world size, started on first use and restarted after a failed call."""

    def __init__(self, *, timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._pools: dict[int, Pool] = {}

    def get(self, world: int) -> Pool:
        pool = self._pools.get(world)
        if pool is None or not pool.alive:
            pool = self._pools[world] = Pool(world, timeout_s=self.timeout_s)
        return pool

    def run(
        self, world: int, fn: Callable[..., Any], *, group: str = "world", timeout_s: float | None = None, **kwargs: Any
    ) -> list[Any]:
        """:meth:`Pool.run` on the pool of ``world`` ranks."""
        return self.get(world).run(fn, group=group, timeout_s=timeout_s, **kwargs)

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
