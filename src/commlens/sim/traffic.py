"""Collectives as tasks of flows: the cost model's own stages, replayed over the fabric.

The algorithm functions of :mod:`commlens.model.algorithms` record, stage by stage, the traffic they price
(:class:`commlens.model.cost.Cost` with ``record=True``). Here each recorded stage becomes one task per group:
the stage's latency and reduction terms as the model computes them, and its bandwidth as flows between the
group's GPUs, whose time the engine finds on the shared fabric. So a collective simulated alone on an idle,
non-blocking fabric takes what the analytic model predicts, and one sharing the fabric takes longer by exactly
what the contention costs.

Patterns (per group of ``p`` ranks, ``D`` per scale-up domain, ``M`` domains):

- ``ring``: inside one domain, one ring; across domains, ``D`` channels (NCCL's rings over every NIC): channel
  ``c`` visits each domain's ranks starting at ``(c - k) mod D`` in domain ``k`` and leaves it from the rank
  before, so each channel crosses to the next domain on one rail and every NIC carries one channel.
- ``two_level``: a ring (or the in-switch reduction) inside each domain and, at the same time, a ring across
  domains of the ranks at the same place in theirs (hierarchical, NVLS-tree).
- ``exchange``: the steps one after another, step ``k`` at distance ``d_k``: every rank sends to ``r + d`` (all
  send: recursive doubling/halving, Bruck) or the pairs of a binomial tree level send one way.
- ``direct``: every rank to every other at once; pairwise: the stage's rounds (the model's
  :func:`~commlens.model.patterns.pairwise_rounds`), round ``k`` to ``r ^ k`` or to ``r + k``.
- ``switch``: each rank's bytes up to the domain's switch and back (NVLS).
- ``pair``: rank ``r`` to ``r + 1`` (send/recv).
- anything else (chains, rooted and tree-shaped two-level stages): the model's own time, as a delay.

``sync`` (default): the flows of one step of one group move as one bundle, each waiting for the slowest (the
step's synchronisation, as a ring's chunks wait for their predecessor); without it every flow has its own rate.
"""

from __future__ import annotations

import hashlib
import zlib
from dataclasses import dataclass

import numpy as np

from commlens.model import InfeasibleError, predict
from commlens.model.algorithms import MODELS
from commlens.model.cost import LAUNCH, Cost
from commlens.model.layout import Layout, build_layout
from commlens.ops import OPS, get_op
from commlens.sim.engine import Bundle, Engine, Task
from commlens.sim.fabric import Fabric, SimError
from commlens.sim.routing import route
from commlens.topology import Topology

__all__ = ["Collective", "groups_by_stride", "plan"]


@dataclass
class Collective:
    """One collective run by every group of ``groups`` (rows: groups, columns: the group's ranks as GPU ids)."""

    name: str
    op: str
    size_bytes: float
    groups: np.ndarray
    algo: str = "auto"
    ranks_per_host: int | None = None  # of each group (default: from its GPU ids)
    after: tuple[str, ...] = ()  # collectives that must end first (in every group)
    delay_s: float = 0.0  # compute or other time before it starts (after its dependencies)
    communicator: str = ""  # collectives of one communicator share connections, so routes (default: the name)
    lockstep: bool = False  # every group runs each stage together (one task): data-parallel replicas in step


def groups_by_stride(gpus: int, size: int, stride: int) -> np.ndarray:
    """The groups of a parallel dimension of ``size`` laid out with ``stride`` (inner dimensions' product)."""
    if size < 1 or stride < 1 or gpus % (size * stride):
        raise SimError(f"a dimension of {size} with stride {stride} does not tile {gpus} GPUs")
    ids = np.arange(gpus).reshape(gpus // (size * stride), size, stride)
    return ids.transpose(0, 2, 1).reshape(-1, size)


def _shape(fabric: Fabric, group: np.ndarray) -> tuple[int, int]:
    """(nodes, ranks per node) of one group, from its GPU ids; every node of it must hold as many."""
    nodes, counts = np.unique(group // fabric.gpus_per_node, return_counts=True)
    if (counts != counts[0]).any():
        raise SimError("a group holds different numbers of ranks on its nodes")
    return int(nodes.size), int(counts[0])


def recorded(topology: Topology, layout: Layout, op: str, algo: str, size_bytes: float) -> tuple[str, Cost]:
    """The algorithm (``auto`` resolved as the model resolves it) and its recorded stages."""
    name = op if op in OPS else get_op(op).name
    if algo == "auto":
        algo = predict(topology, name, int(size_bytes), nodes=layout.nodes, ranks_per_host=layout.ranks_per_host).algo
    try:
        fn = MODELS[name][algo]
    except KeyError:
        raise SimError(f"no {algo} algorithm for {name}") from None
    cost = Cost(layout, record=True)
    if layout.ranks > 1:
        try:
            fn(cost, float(size_bytes))
        except InfeasibleError as e:
            raise SimError(str(e)) from None
    return algo, cost


def ring_channels(D: int, M: int) -> np.ndarray:
    """(channel, position) -> rank of ``D`` ring channels over ``M`` domains of ``D`` ranks.

    Each channel enters a domain at one rank and leaves it from another, whose NIC carries it to the rank of the
    next domain on the same rail (entry ``e_k`` of domain ``k`` is the exit rail of domain ``k - 1``): entries
    alternate between ranks ``c + 1`` and ``c`` of the domains (``c + 2`` for the first of an odd number of
    domains), so the ring closes on one rail too, and over the ``D`` channels every rank enters and leaves once.
    """
    c = np.arange(D)[:, None]
    if D == 1:
        return np.arange(M)[None, :]
    if D < 3 and M % 2:  # no third rank to close an odd ring on: rotate (its closing hop changes rail)
        kk = np.arange(M)[None, :, None]
        ii = np.arange(D)[None, None, :]
        return np.asarray((kk * D + (c[:, :, None] - kk + ii) % D).reshape(D, M * D))
    entry = np.empty((D, M), dtype=np.int64)
    for k in range(M):
        entry[:, k] = (np.arange(D) + (1 if k % 2 == 0 else 0)) % D
    if M % 2:
        entry[:, 0] = (np.arange(D) + 2) % D
    exit_ = np.roll(entry, -1, axis=1)
    order = np.empty((D, M * D), dtype=np.int64)
    for ch in range(D):
        for k in range(M):
            e, x = int(entry[ch, k]), int(exit_[ch, k])
            middle = [(e + j) % D for j in range(1, D) if (e + j) % D != x]
            order[ch, k * D : (k + 1) * D] = [k * D + e, *(k * D + m for m in middle), k * D + x]
    return order


def _flows(pattern: tuple, p: int, D: int) -> list[list[tuple[np.ndarray, np.ndarray, float]]]:
    """Steps (run one after another) of flow sets (src rank, dst rank, bytes per flow) within one group."""
    kind = pattern[0]
    r = np.arange(p)
    M = p // D
    if kind == "ring":
        nbytes = pattern[1]
        if M == 1:
            return [[(r, (r + 1) % p, nbytes)]]
        order = ring_channels(D, M)
        return [[(order.ravel(), np.roll(order, -1, axis=1).ravel(), nbytes / D)]]
    if kind == "two_level":
        _, inner, up_bytes, out_bytes = pattern
        sets = []
        if up_bytes > 0 and D > 1:
            if inner == "switch":
                sets.append((r, r, up_bytes))
            else:
                sets.append((r, (r // D) * D + (r % D + 1) % D, up_bytes))
        if out_bytes > 0 and M > 1:
            sets.append((r, (r + D) % p, out_bytes))
        return [sets]
    if kind == "exchange":
        _, steps, all_send = pattern
        out = []
        for dist, nbytes in steps:
            if all_send:
                # partners at a power-of-two distance pair by XOR (recursive doubling/halving), which keeps
                # distances below the domain's size inside it; other distances shift
                xor = dist & (dist - 1) == 0 and p % (2 * dist) == 0
                out.append([(r, r ^ dist if xor else (r + dist) % p, nbytes)])
            else:
                lo = r[(r % (2 * dist) == 0) & (r + dist < p)]
                out.append([(lo + dist, lo, nbytes)])
        return out
    if kind == "direct":
        _, per_peer, rounds = pattern
        if rounds is not None:  # pairwise exchange: this stage's rounds, round k to r ^ k or to r + k
            scheme, runs = rounds
            ks = [k for a, b in runs for k in range(a, b + 1)]
            return [[(r, r ^ k if scheme == "xor" else (r + k) % p, per_peer)] for k in ks]
        src = np.repeat(r, p - 1)
        dst = (src + np.tile(np.arange(1, p), p)) % p
        return [[(src, dst, per_peer)]]
    if kind == "tree":
        # double binary tree: a chain both ways inside each domain; across domains two binary trees (heap order
        # and its mirror), each edge both ways, spread over the domains' ranks as channels (one per rail). A domain
        # is inner node of one tree and leaf of the other, so its NICs carry four edges' worth each way.
        _, up_bytes, out_bytes = pattern
        sets = []
        if up_bytes > 0 and D > 1:
            local = r % D
            nxt = r[local < D - 1]
            sets.append((np.concatenate([nxt, nxt + 1]), np.concatenate([nxt + 1, nxt]), up_bytes / 2))
        if out_bytes > 0 and M > 1:
            child = np.arange(1, M)
            parent = (child - 1) // 2
            edges = np.concatenate([np.stack([parent, child], 1), np.stack([M - 1 - parent, M - 1 - child], 1)])
            a = (edges[:, :1] * D + np.arange(D)[None, :]).ravel()
            b = (edges[:, 1:] * D + np.arange(D)[None, :]).ravel()
            sets.append((np.concatenate([a, b]), np.concatenate([b, a]), out_bytes / 4 / D))
        return [sets]
    if kind == "switch":
        return [[(r, r, pattern[1])]]
    if kind == "pair":
        return [[(r, (r + 1) % p, pattern[1])]] if p > 1 else []
    return []


_ROUTES: dict[tuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
_ROUTE_CACHE_ENTRIES = 8_000_000  # (bundle, link) entries kept over all cached routes: about 200 MB


def _digest(a: np.ndarray) -> str:
    return hashlib.blake2b(np.ascontiguousarray(a).tobytes(), digest_size=16).hexdigest()


def _bundles(
    fabric: Fabric,
    groups: np.ndarray,
    flow_sets: list[tuple[np.ndarray, np.ndarray, float]],
    routing: str,
    seed: int,
    key: int,
    sync: bool,
    qps: int = 1,
) -> list[list[Bundle]]:
    """Per group, the bundles of one step; ``qps``: each flow split over that many flows hashed apart (NCCL's
    channels x its queue pairs per connection, NCCL_IB_QPS_PER_CONNECTION: Meta's QP scaling)."""
    G = groups.shape[0]
    per_group: list[list[Bundle]] = [[] for _ in range(G)]
    for s, (src_r, dst_r, nbytes) in enumerate(flow_sets):
        if nbytes <= 0 or src_r.size == 0:
            continue
        if qps > 1:
            src_r, dst_r, nbytes = np.repeat(src_r, qps), np.repeat(dst_r, qps), nbytes / qps
        n = src_r.size
        src = groups[:, src_r].ravel()
        dst = groups[:, dst_r].ravel()
        g_of = np.repeat(np.arange(G), n)
        bid = g_of if sync else np.arange(G * n)
        loop = src == dst  # in-switch traffic: up to the switch and back
        # a flow's identity: its communicator's (the collective's name), its place in the step, its ends; the
        # same for every collective of that name (connections persist, so their routes do too)
        flow_key = np.tile(np.arange(n), G) + (key * 64 + s) * 1_000_003
        cache_key = (
            fabric.serial,
            routing,
            seed,
            sync,
            key,
            s,
            groups.shape,
            _digest(groups),
            _digest(src_r),
            _digest(dst_r),
        )
        hit = _ROUTES.get(cache_key)
        if hit is None:
            hit = route(fabric, src[~loop], dst[~loop], flow_key[~loop], bid[~loop], routing, seed)
            while _ROUTES and sum(x[0].size for x in _ROUTES.values()) + hit[0].size > _ROUTE_CACHE_ENTRIES:
                _ROUTES.pop(next(iter(_ROUTES)))
            _ROUTES[cache_key] = hit
        b, link, w = hit
        if loop.any():
            lb = bid[loop]
            b = np.concatenate([b, lb, lb])
            link = np.concatenate([link, fabric.nvlink_up(src[loop]), fabric.nvlink_down(src[loop])])
            w = np.concatenate([w, np.ones(2 * lb.size)])
        order = np.argsort(b, kind="stable")
        b, link, w = b[order], link[order], w[order]
        cuts = np.searchsorted(b, np.arange(int(bid.max()) + 2))
        owner = np.arange(int(bid.max()) + 1) if sync else g_of
        for x in range(int(bid.max()) + 1):
            lo, hi = cuts[x], cuts[x + 1]
            if hi > lo:
                per_group[int(owner[x])].append(Bundle(link[lo:hi], w[lo:hi], float(nbytes), 1))
    return per_group


def plan(
    engine: Engine,
    fabric: Fabric,
    collective: Collective,
    *,
    routing: str = "ecmp",
    seed: int = 0,
    sync: bool = True,
    deps: list[list[int]] | None = None,
    qps: int = 1,
) -> tuple[str, list[list[int]], list[tuple[str, float, list[int]]]]:
    """Add ``collective``'s tasks to ``engine``: (algorithm, task ids per group, (stage, analytic s, its task ids)
    per stage).

    ``deps``: per group, tasks its first stage waits for.
    """
    topology = fabric.topology
    groups = np.asarray(collective.groups, dtype=np.int64)
    if groups.ndim != 2 or groups.size == 0:
        raise SimError(f"{collective.name}: groups must be a non-empty table of GPU ids")
    if groups.max() >= fabric.gpus or groups.min() < 0:
        raise SimError(f"{collective.name}: a group names a GPU outside the fabric's {fabric.gpus}")
    G, p = groups.shape
    comm_key = zlib.crc32((collective.communicator or collective.name).encode()) % 100_003
    lock = collective.lockstep
    nodes, per_host = _shape(fabric, groups[0])
    try:
        layout = build_layout(topology, nodes=nodes, ranks_per_host=collective.ranks_per_host or per_host)
    except InfeasibleError as e:
        raise SimError(f"{collective.name}: {e}") from None
    algo, cost = recorded(topology, layout, collective.op, collective.algo, collective.size_bytes)
    launch = sum(t[4] for t in cost.raw_terms() if t[1] == LAUNCH)
    overlaps = layout.reduce_overlaps
    ids: list[list[int]] = [[] for _ in range(G)]
    stages: list[tuple[str, float, list[int]]] = []
    prev: list[list[int]] = deps if deps is not None else [[] for _ in range(G)]
    first = True
    for index, pattern, lat_s, transfer_s, red_s in cost.patterns or []:
        steps = _flows(pattern, p, layout.domain_ranks)
        analytic = lat_s + (max(transfer_s, red_s) if overlaps else transfer_s + red_s)
        stage_name = f"{collective.name}/{index}:{pattern[0]}"
        mine: list[int] = []
        stages.append((stage_name, analytic, mine))
        extra = (launch + collective.delay_s) if first else 0.0
        first = False
        if not steps and lock:
            tid = engine.add(Task(stage_name, latency_s=extra + analytic, deps=sorted({d for p_ in prev for d in p_})))
            mine.append(tid)
            for g in range(G):
                ids[g].append(tid)
            prev = [[tid] for _ in range(G)]
            continue
        if not steps:  # not replayed: the model's time
            for g in range(G):
                ids[g].append(
                    engine.add(Task(stage_name, latency_s=extra + analytic, deps=list(prev[g]), tag=collective.name))
                )
                mine.append(ids[g][-1])
            prev = [[ids[g][-1]] for g in range(G)]
            continue
        total = sum(sum(fs[2] * fs[0].size for fs in step) for step in steps) or 1.0
        for k, step in enumerate(steps):
            frac = sum(fs[2] * fs[0].size for fs in step) / total
            bundles = _bundles(fabric, groups, step, routing, seed, comm_key * 4096 + index * 64 + k, sync, qps)
            red = red_s * frac
            if lock:
                tid = engine.add(
                    Task(
                        f"{stage_name}.{k}" if len(steps) > 1 else stage_name,
                        bundles=[b for per in bundles for b in per],
                        latency_s=lat_s / len(steps) + extra,
                        min_s=red if overlaps else 0.0,
                        post_s=0.0 if overlaps else red,
                        deps=sorted({d for p_ in prev for d in p_}),
                        tag=collective.name,
                    )
                )
                mine.append(tid)
                for g in range(G):
                    ids[g].append(tid)
                extra = 0.0
                prev = [[tid] for _ in range(G)]
                continue
            for g in range(G):
                task = Task(
                    f"{stage_name}.{k}" if len(steps) > 1 else stage_name,
                    bundles=bundles[g],
                    latency_s=lat_s / len(steps) + extra,
                    min_s=red if overlaps else 0.0,
                    post_s=0.0 if overlaps else red,
                    deps=list(prev[g]),
                    tag=collective.name,
                )
                ids[g].append(engine.add(task))
                mine.append(ids[g][-1])
            extra = 0.0
            prev = [[ids[g][-1]] for g in range(G)]
    if not cost.patterns:  # one rank: launch only
        for g in range(G):
            ids[g].append(
                engine.add(
                    Task(
                        collective.name,
                        latency_s=launch + collective.delay_s,
                        deps=list(prev[g]),
                        tag=collective.name,
                    )
                )
            )
    return algo, ids, stages
