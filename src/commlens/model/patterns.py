"""Communication patterns mapped onto the levels of a layout.

Every algorithm is built from a few patterns. Each pattern decides which
level a message crosses (same scale-up domain or not; for the fabric, which
tier holds both ends), which rate it gets (a rank's scale-up link, its share
of the node's NICs when several ranks send at once, a whole domain's NICs
when ring channels spread over every rail, tapered by oversubscribed tiers),
and adds the resulting stage to a :class:`Cost`.

Ranks are node-major (see :mod:`commlens.model.layout`), so partners at a
distance below the domain size stay in the domain.
"""

from __future__ import annotations

import math
from functools import lru_cache

from commlens.model.cost import OUT, UP, Cost
from commlens.model.layout import Layout

__all__ = ["chain", "direct", "exchange", "host_copies", "pairwise_rounds", "ring", "rooted_direct", "two_level"]


def host_copies(L: Layout, bytes_per_rank: float) -> float:
    """What all ranks of a node copy when each sends ``bytes_per_rank`` and receives as much (0 without a host budget)."""
    return 2.0 * bytes_per_rank * L.ranks_per_host if L.host_cores else 0.0


def ring(cost: Cost, passes: int, bytes_per_rank: float, reduce_bytes: float = 0.0) -> None:
    """``passes`` ring passes over all ranks; each rank sends ``bytes_per_rank`` over all passes.

    Steps are pipelined: each step waits for its slowest hop. Across domains,
    NCCL-style channels spread the ring's boundary crossings over every NIC of
    the domain, so the crossing rate is the domain's NICs together, slowed only
    where a tier's uplinks cannot carry it (:meth:`Layout.ring_taper`: a ring
    leaves each group once per channel, not once per rank).
    """
    L = cost.layout
    steps = passes * (L.ranks - 1)
    host = host_copies(L, bytes_per_rank)
    if not L.multi_domain:
        cost.stage(
            ((UP, steps, L.up_latency_s),),
            ((UP, bytes_per_rank, L.up_rate),),
            reduce_bytes,
            host_bytes=host,
            node_messages=2 * L.ranks_per_host,
            pattern=("ring", bytes_per_rank),
        )
        return
    inter = passes * (L.domains - 1)
    # each of the domain's channels leaves it from one rank (over that rank's NIC): (D-1)/D of a rank's bytes
    # stay on its scale-up link
    up_bytes = bytes_per_rank * (L.domain_ranks - 1) / L.domain_ranks if L.domain_ranks > 1 else 0.0
    # two ranks: each step swaps blocks over one connection (a ring of three or more sends one way per pair)
    pair = L.out_pair_both if L.ranks == 2 else 1.0
    cost.stage(
        ((UP, steps - inter, L.up_latency_s), (OUT, inter, L.out_latency_s[L.job_tier])),
        ((UP, up_bytes, L.up_rate), (OUT, bytes_per_rank, L.domain_nic_rate() / pair / L.ring_taper())),
        reduce_bytes,
        host_bytes=host,
        node_messages=2 * L.ranks_per_host,
        pattern=("ring", bytes_per_rank),
    )


def two_level(
    cost: Cost,
    up: tuple[float, float, float, float],
    out: tuple[float, float, float],
    reduce_bytes: float = 0.0,
    inner: str | None = None,
) -> None:
    """A scale-up phase and a scale-out phase pipelined chunk by chunk (hierarchical, NVLS across domains).

    ``up`` is (messages, latency each, bytes, rate) inside the domain, ``out``
    (messages, bytes, rate) across domains. As in NCCL's tree and NVLS-tree,
    the phases overlap: latencies add, the bandwidth terms run at the same
    time, and the first chunk must pass the faster level before the pipeline
    is full (one chunk of fill at that level's rate).

    ``inner``: the traffic inside the domain as the simulator replays it, ``"ring"`` (a ring over the domain's
    ranks) or ``"switch"`` (through the in-switch reduction), with a ring across domains of the ranks at the same
    place in theirs; None: the stage is not replayed flow by flow (the simulator takes its time as is).
    """
    L = cost.layout
    up_n, up_alpha, up_bytes, up_rate = up
    out_n, out_bytes, out_rate = out
    cost.stage(
        ((UP, up_n, up_alpha), (OUT, out_n, L.out_latency_s[L.job_tier])),
        ((UP, up_bytes, up_rate), (OUT, out_bytes, out_rate)),
        reduce_bytes,
        host_bytes=host_copies(L, up_bytes + out_bytes),
        node_messages=2 * L.ranks_per_host,
        pattern=("two_level", inner, up_bytes * L.up_rate / up_rate, out_bytes) if inner else None,
    )
    if up_bytes > 0 and out_bytes > 0:
        if up_bytes / up_rate >= out_bytes / out_rate:
            cost.stage(bandwidth=((OUT, min(L.chunk_bytes, out_bytes), out_rate),))
        else:
            cost.stage(bandwidth=((UP, min(L.chunk_bytes, up_bytes), up_rate),))


def exchange(cost: Cost, steps: list[tuple[int, float, float]], all_send: bool) -> None:
    """Distance-based steps, one after another: (distance in ranks, bytes sent, bytes reduced) each.

    A step whose partner is at least a domain away crosses the fabric at the
    lowest tier holding both ends: its latency, and its rate tapered by the
    oversubscription below that tier. ``all_send``: every rank sends (and
    receives) in every step (recursive doubling, Bruck), sharing the node's
    NICs; else a rank either sends or receives and one rank per domain
    crosses the fabric (binomial trees). An all-send step swaps data over
    one connection, so a fabric whose connections carry one direction at a
    time (``pair_full_duplex: false``) takes twice as long for it.
    """
    L = cost.layout
    D, ranks_per_host, p = L.domain_ranks, L.ranks_per_host, L.ranks
    up_n = up_b = up_r = up_t = up_m = 0.0
    out_n = out_b = out_r = out_lat = out_t = out_m = 0.0
    up_steps: list[tuple[int, float]] = []
    out_steps: list[tuple[int, float]] = []
    base_rate = L.nic_share(ranks_per_host) if all_send else L.nic_rate
    per_rank = L.up_both if all_send else 1.0
    for dist, nbytes, rbytes in steps:
        # sends and receives a node's ranks handle in this step: all of them swap, or the tree's pairs do
        msgs = 2 * ranks_per_host if all_send else 2 * min(dist, p - dist) * ranks_per_host / p
        if dist < D:
            up_steps.append((dist, nbytes))
            up_m += msgs
            up_n += 1
            up_b += nbytes
            up_r += rbytes
            t = nbytes * per_rank / L.up_rate
            if L.host_cores:
                # every rank of the node copies what it sends and receives; in a tree step only the
                # senders and receivers at this distance do, once each
                copies = host_copies(L, nbytes) if all_send else 2 * min(dist, p - dist) * ranks_per_host / p * nbytes
                t = max(t, copies / L.host_rate)
            up_t += t
        else:
            out_steps.append((dist, nbytes))
            k = L.tier_for_span(2 * dist / ranks_per_host)
            out_m += msgs
            out_n += 1
            out_lat += L.out_latency_s[k]
            out_t += nbytes * L.out_taper[k] / base_rate * (L.out_pair_both if all_send else 1.0)
            out_b += nbytes
            out_r += rbytes
    if up_n:
        rate = up_b * per_rank / up_t if up_t > 0 else L.up_rate  # the steps' own limits, summed
        cost.stage(
            ((UP, up_n, L.up_latency_s),),
            ((UP, up_b, rate),),
            up_r,
            one_way=not all_send,
            node_messages=up_m / up_n,
            pattern=("exchange", tuple(up_steps), all_send),
        )
    if out_n:
        rate = out_b / out_t if out_t > 0 else base_rate
        cost.stage(
            ((OUT, out_n, out_lat / out_n),),
            ((OUT, out_b, rate),),
            out_r,
            one_way=not all_send,
            node_messages=out_m / out_n,
            pattern=("exchange", tuple(out_steps), all_send),
        )


def chain(cost: Cost, nbytes: float, reduce: bool) -> None:
    """A pipelined chain through all ranks (ring broadcast or reduce), in chunks of ``pipeline_chunk_bytes``.

    T = sum over hops of (alpha + c/B) + (k - 1) x the slowest hop, for k
    chunks of c bytes: the first chunk crosses every hop, the rest follow
    one slowest-hop time apart.
    """
    L = cost.layout
    chunk = min(L.chunk_bytes, nbytes) if nbytes > 0 else 0.0
    k = math.ceil(nbytes / chunk) if chunk > 0 else 1
    hops_out = L.domains - 1
    hops_up = L.ranks - 1 - hops_out
    out_lat = L.out_latency_s[L.job_tier] if hops_out else 0.0
    out_rate = L.domain_nic_rate() / L.ring_taper() if hops_out else 1.0
    hop_up = L.up_latency_s + chunk / L.up_rate
    hop_out = out_lat + chunk / out_rate
    up_slowest = hops_out == 0 or (hops_up > 0 and hop_up >= hop_out)
    n_up = hops_up + (k - 1 if up_slowest else 0)
    n_out = hops_out + (0 if up_slowest else k - 1)
    cost.stage(
        ((UP, n_up, L.up_latency_s), (OUT, n_out, out_lat)),
        ((UP, n_up * chunk, L.up_rate), (OUT, n_out * chunk, out_rate)),
        nbytes if reduce else 0.0,
        concurrent=False,
        host_bytes=host_copies(L, (n_up if hops_up else 0) * chunk),
        node_messages=2 * L.ranks_per_host if k > 1 else 2.0,  # a full pipeline keeps every rank forwarding
    )


def direct(cost: Cost, per_peer_bytes: float, reduce: bool, sequential: bool = False, xor: bool = False) -> None:
    """Every rank exchanges ``per_peer_bytes`` with every other rank (all-to-all traffic).

    ``sequential``: one peer after another (pairwise exchange, :func:`pairwise_rounds`; ``xor`` pairs by XOR
    where ``p`` is a power of two), else all at once (direct: one message latency where the transport is
    offloaded; on a CPU-driven one, ``host_cores``, the CPU handles the p - 1 messages one by one, so they
    cost p - 1 latencies too). Fabric traffic shares the node's NICs and the tiers'
    uplinks (:meth:`Layout.a2a_taper`); on rail-optimized fabrics the bytes
    bound for another rail first hop over scale-up to the right NIC (PXN).
    Every pair exchanges both ways, at half the rate where a connection
    carries one direction at a time (``pair_full_duplex: false``).
    """
    L = cost.layout
    if sequential:
        _pairwise(cost, per_peer_bytes, reduce, xor)
        return
    D, p = L.domain_ranks, L.ranks
    up_bytes = (D - 1) * per_peer_bytes
    out_bytes = (p - D) * per_peer_bytes
    if out_bytes and L.rail_optimized and L.ranks_per_host > 1:
        up_bytes += out_bytes * (L.ranks_per_host - 1) / L.ranks_per_host
    out_rate = L.nic_share(L.ranks_per_host) / L.a2a_taper() / L.out_pair_both if out_bytes else 1.0
    out_lat = L.out_latency_s[L.job_tier] if out_bytes else 0.0
    red = (p - 1) * per_peer_bytes if reduce else 0.0
    latency: tuple[tuple[str, float, float], ...]
    if L.host_cores:
        latency = ((UP, D - 1, L.up_latency_s), (OUT, p - D, out_lat))
    else:  # every message in flight at once: one message latency, of the slowest level
        latency = ((OUT, 1, out_lat),) if out_bytes else ((UP, 1, L.up_latency_s),)
    cost.stage(
        latency,
        ((UP, up_bytes, L.up_rate), (OUT, out_bytes, out_rate)),
        red,
        host_bytes=host_copies(L, up_bytes + out_bytes),
        node_messages=2 * L.ranks_per_host,
        pattern=("direct", per_peer_bytes, None),
    )


def pairwise_rounds(p: int, D: int, R: int, xor: bool) -> dict[int, list[tuple[int, int]]]:
    """The rounds ``k = 1 .. p-1`` of a pairwise exchange by senders per host (see :func:`_pairwise_rounds`);
    computed once per shape (a projection prices the same groups again and again)."""
    return {c: list(runs) for c, runs in _pairwise_rounds_cached(p, D, R, xor)}


@lru_cache(maxsize=4096)
def _pairwise_rounds_cached(p: int, D: int, R: int, xor: bool) -> tuple[tuple[int, tuple[tuple[int, int], ...]], ...]:
    return tuple((c, tuple(runs)) for c, runs in _pairwise_rounds(p, D, R, xor).items())


def _pairwise_rounds(p: int, D: int, R: int, xor: bool) -> dict[int, list[tuple[int, int]]]:
    """The rounds ``k = 1 .. p-1`` of a pairwise exchange, by how many ranks of a host send off the domain in them.

    Round ``k`` pairs rank ``r`` with ``r ^ k`` (``xor``, ``p`` a power of two: rounds below ``D`` stay in
    the domain, the others all leave it) or sends to ``r + k`` (rounds ``j D + l``: with ``l > 0`` the last
    ``l`` ranks of each domain cross one domain further, which is home again when ``j = M - 1``). Returns
    senders per host (0: the round stays inside every domain) -> runs ``(first, last)`` of rounds. ``D``
    must divide ``p``.
    """
    M = p // D
    classes: dict[int, list[tuple[int, int]]] = {}

    def add(c: int, k: int) -> None:
        runs = classes.setdefault(c, [])
        if runs and runs[-1][1] == k - 1:
            runs[-1] = (runs[-1][0], k)
        else:
            runs.append((k, k))

    for k in range(1, p):
        if M == 1 or (xor and k < D):
            c = 0
        elif xor:
            c = R
        else:
            j, shift = divmod(k, D)
            if shift == 0 or 0 < j < M - 1:
                c = R
            elif j == 0:
                c = min(shift, R)  # the domain's last `shift` ranks, on its last host
            else:
                c = min(D - shift, R)  # j = M - 1: its first D - shift ranks, on its first host
        add(c, k)
    return classes


def _pairwise(cost: Cost, s: float, reduce: bool, xor: bool) -> None:
    """Pairwise exchange: ``p - 1`` rounds, each waiting for its slowest flow. Rounds with the same number of
    off-domain senders per host cost alike and make one stage: a round inside the domains costs one scale-up
    message; one with ``c`` senders per host, one fabric message at the NIC rate ``c`` senders get (each at
    most one NIC's rate), its scale-up hops (same-domain partners, PXN relays) overlapping."""
    L = cost.layout
    D, p, R = L.domain_ranks, L.ranks, L.ranks_per_host
    xor = xor and p & (p - 1) == 0
    if p % D:  # a domain the group does not fill: every round priced as one that leaves it
        classes = {R: [(1, p - 1)]} if L.multi_domain else {0: [(1, p - 1)]}
    else:
        classes = pairwise_rounds(p, D, R, xor)
    scheme = "xor" if xor else "shift"
    out_lat = L.out_latency_s[L.job_tier] if L.multi_domain else 0.0
    latency: tuple[tuple[str, float, float], ...]
    bandwidth: tuple[tuple[str, float, float], ...]
    for c, runs in sorted(classes.items()):
        n = sum(b - a + 1 for a, b in runs)
        if c == 0:
            latency, bandwidth = ((UP, n, L.up_latency_s),), ((UP, n * s, L.up_rate),)
        else:
            rate = min(L.nic_rate, L.node_nic_rate() / c) / L.a2a_taper() / L.out_pair_both
            relay = n * s * (R - 1) / R if L.rail_optimized and R > 1 else 0.0  # PXN: to the partner's rail
            # a shifted round also keeps some partners inside the domain: at most one flow per scale-up link
            up = relay if xor else max(relay, n * s)
            latency, bandwidth = ((OUT, n, out_lat),), ((UP, up, L.up_rate), (OUT, n * s, rate))
        cost.stage(
            latency,
            bandwidth,
            n * s if reduce else 0.0,
            host_bytes=host_copies(L, n * s),
            node_messages=2 * R,
            pattern=("direct", s, (scheme, tuple(runs))),
        )


def rooted_direct(cost: Cost, per_peer_bytes: float, reduce: bool) -> None:
    """The root exchanges ``per_peer_bytes`` with every other rank at once (direct gather/scatter/broadcast/reduce).

    One message latency (all in flight at once); the root's own links are
    the bottleneck: its scale-up link for its domain, its one NIC for the rest.
    """
    L = cost.layout
    D, p = L.domain_ranks, L.ranks
    out_bytes = (p - D) * per_peer_bytes
    out_rate = L.nic_rate / L.out_taper[L.job_tier] if out_bytes else 1.0
    out_lat = L.out_latency_s[L.job_tier] if out_bytes else 0.0
    cost.stage(
        ((OUT, 1, out_lat),) if out_bytes else ((UP, 1, L.up_latency_s),),
        ((UP, (D - 1) * per_peer_bytes, L.up_rate), (OUT, out_bytes, out_rate)),
        (p - 1) * per_peer_bytes if reduce else 0.0,
        one_way=True,
        host_bytes=2 * (min(D, L.ranks_per_host) - 1) * per_peer_bytes if L.host_cores else 0.0,
    )
