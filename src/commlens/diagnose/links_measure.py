"""The per-rank measurement of ``diagnose links``: pairwise exchanges in tournament rounds, latency, a ring;
or (``measure_groups``) the adaptive group tests of ``links_groups``.

Runs in every rank of a gloo (or any) process group, one rank per host. All ranks take part in every
round's barrier; the pairs of a round run concurrently, so a round measures disjoint links at once. Within
a pair each direction is timed on its own (the lower rank sends first), on the sender's clock, up to the
receiver's ack: a bidirectional exchange would measure gloo's handling of two streams on one socket, which
on a small machine runs far below the link rate.
Returns, on rank 0, the raw samples of every rank (the analysis is in ``links_analysis``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from commlens.diagnose.links_analysis import LinkRecord, Thresholds
from commlens.diagnose.links_groups import GroupSearch, GroupTest
from commlens.diagnose.tournament import partner, rounds
from commlens.errors import CommlensError

__all__ = ["LinkProbe", "ProbeError", "measure", "measure_groups"]


class ProbeError(CommlensError, ValueError):
    """Probe settings that cannot measure (a message too small to time, no iterations)."""


@dataclass(frozen=True)
class LinkProbe:
    """How hard to probe: one field per knob, checked at construction."""

    size_bytes: int = 4 * 1024 * 1024  # bytes sent each way per exchange
    iters: int = 3  # timed exchanges per pair per pass
    warmup: int = 1  # untimed exchanges per pair per pass
    passes: int = 3  # full tournaments; a fault must show in most of them
    latency_iters: int = 10  # 8-byte ping-pongs per pair per pass
    ring: bool = True

    def __post_init__(self) -> None:
        if self.size_bytes < 1024:
            raise ProbeError("size_bytes must be >= 1024")
        if self.iters < 1 or self.passes < 1 or self.latency_iters < 1 or self.warmup < 0:
            raise ProbeError("iters, passes and latency_iters must be >= 1, warmup >= 0")


def _one_way(dist: Any, data: Any, ack: Any, peer: int, sending: bool) -> float:
    """Send ``data`` one way; the sender's clock stops when the receiver's 8-byte ack arrives.

    Timing the sender alone would stop when the data is in its socket buffer, not delivered.
    """
    t0 = time.perf_counter()
    if sending:
        dist.send(data, peer)
        dist.recv(ack, peer)
    else:
        dist.recv(data, peer)
        dist.send(ack, peer)
    return time.perf_counter() - t0


def _pingpong(dist: Any, buf: Any, peer: int, first: bool) -> float:
    """Half a round trip of ``buf`` (the one-way latency of a small message)."""
    return _one_way(dist, buf, buf, peer, first) / 2


def measure(probe: LinkProbe) -> list[LinkRecord] | None:
    """Measure from this rank (process group already initialised); rank 0 gets every rank's records."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    count = probe.size_bytes // 4
    send, recv = torch.ones(count, dtype=torch.float32), torch.empty(count, dtype=torch.float32)
    if probe.ring:
        ring_recv = torch.empty(count, dtype=torch.float32)
    tiny = torch.zeros(2, dtype=torch.float32)
    records: list[LinkRecord] = []
    schedule = rounds(world)
    for p in range(probe.passes):
        for r, pairs in enumerate(schedule):
            dist.barrier()
            peer = partner(pairs, rank)
            if peer is None:
                continue
            times = []  # this rank -> peer
            for i in range(probe.warmup + probe.iters):
                for sender in sorted((rank, peer)):
                    t = _one_way(dist, send if sender == rank else recv, tiny, peer, sender == rank)
                    if sender == rank and i >= probe.warmup:
                        times.append(t)
            lat = [_pingpong(dist, tiny, peer, rank < peer) for _ in range(probe.latency_iters)]
            # record: this rank's sends to ``peer``; both ranks of a pair report, one direction each
            records.append(
                {
                    "kind": "pair",
                    "pass": p,
                    "round": r,
                    "rank": rank,
                    "peer": peer,
                    "size_bytes": probe.size_bytes,
                    "times_s": times,
                    "latency_s": lat,
                }
            )
    if probe.ring and world > 1:
        dist.barrier()
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        times = []
        for i in range(probe.warmup + probe.iters):
            dist.barrier()
            t0 = time.perf_counter()
            works = (dist.isend(send, nxt), dist.irecv(ring_recv, prv))
            for w in works:
                if w is not None:  # None only on a rank outside the group, which the default group has none of
                    w.wait()
            if i >= probe.warmup:
                times.append(time.perf_counter() - t0)
        records.append({"kind": "ring", "rank": rank, "size_bytes": probe.size_bytes, "times_s": times})
    gathered: list[Any] | None = [None] * world if rank == 0 else None
    dist.gather_object(records, gathered, dst=0)
    return None if gathered is None else [rec for recs in gathered for rec in recs]


def _run_test(
    dist: Any, probe: LinkProbe, bufs: tuple[Any, Any], phases: int, test: GroupTest | None, rank: int
) -> list[float]:
    """One pass of one test, this rank's part: each exchange in ``phases`` steps (``GroupTest.phases``), each
    step after a barrier of all ranks (every rank calls this; ``test`` is None for a rank outside the round's
    tests). Returns this rank's timed sends to the next host of the ring."""
    data, ack = bufs
    steps = test.phases() if test is not None else []
    times = []
    for i in range(probe.warmup + probe.iters):
        for step in range(phases):
            dist.barrier()
            edge = next((e for e in steps[step] if rank in e), None) if step < len(steps) else None
            if edge is None:
                continue
            sending = edge[0] == rank
            took = _one_way(dist, data, ack, edge[1] if sending else edge[0], sending)
            if sending and i >= probe.warmup:
                times.append(took)
    return times


def measure_groups(probe: LinkProbe, thresholds: Thresholds = Thresholds()) -> list[LinkRecord] | None:
    """Adaptive group tests (``links_groups.GroupSearch``, planned on rank 0, each round broadcast to all);
    rank 0 gets every rank's records, each naming its round, test and pass."""
    import torch
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    bufs = (torch.ones(probe.size_bytes // 4, dtype=torch.float32), torch.zeros(2, dtype=torch.float32))
    search = GroupSearch(world, thresholds) if rank == 0 else None
    every: list[LinkRecord] = []
    round_no = 0
    while True:
        plan: list[Any] = [None]
        if search is not None:
            ids = search.next_round()
            plan = [None if ids is None else [(i, search.tests[i]) for i in ids]]
        dist.broadcast_object_list(plan, src=0)
        if plan[0] is None:
            break
        tests: list[tuple[int, GroupTest]] = plan[0]
        phases = max(len(t.phases()) for _, t in tests)
        mine = next(((i, t) for i, t in tests if rank in t.hosts), None)
        records: list[LinkRecord] = []
        for p in range(probe.passes):
            times = _run_test(dist, probe, bufs, phases, mine[1] if mine else None, rank)
            if mine is not None:
                i, hosts = mine[0], mine[1].hosts
                nxt = hosts[(hosts.index(rank) + 1) % len(hosts)]
                records.append(
                    {
                        "kind": "group",
                        "round": round_no,
                        "pass": p,
                        "test": i,
                        "hosts": list(hosts),
                        "rank": rank,
                        "peer": nxt,
                        "size_bytes": probe.size_bytes,
                        "times_s": times,
                    }
                )
        gathered: list[Any] | None = [None] * world if rank == 0 else None
        dist.gather_object(records, gathered, dst=0)
        if search is not None and gathered is not None:
            flat = [rec for recs in gathered for rec in recs]
            search.observe(flat)
            every.extend(flat)
        round_no += 1
    return every if rank == 0 else None
