"""Cost formulas per (op, algorithm), and the registry that maps names to them.

``size`` is what nccl-tests means for each op (:mod:`commlens.ops`): the
buffer for all_reduce, broadcast, reduce and sendrecv; the whole gathered or
scattered buffer (``s = size / p`` per rank) for all_gather, reduce_scatter,
gather and scatter; what one rank sends in total for all_to_all.

On a single level (p ranks, latency a, bandwidth B = 1/b, reduction rate
1/g) the formulas are those of Thakur, Rabenseifner and Gropp (IJHPCA 2005,
table in shared/reference/hardware.md), with p' = 2^floor(lg p) and the
standard pre/post steps when p is not a power of two. The patterns in
:mod:`commlens.model.patterns` map each step onto the level it crosses.
"""

from __future__ import annotations

from collections.abc import Callable

from commlens.model.cost import OUT, UP, Cost, ceil_log2, floor_log2
from commlens.model.layout import InfeasibleError, Layout
from commlens.model.patterns import chain, direct, exchange, host_copies, ring, rooted_direct, two_level
from commlens.ops import hierarchical_all_reduce_scheme

__all__ = ["ALGORITHMS", "MODELS", "SCHEMES", "CostFn", "algorithms_for", "auto_candidates"]

CostFn = Callable[[Cost, float], None]

# The shared algorithm names (algorithms library, `commlens bench --algo`, this model).
ALGORITHMS: tuple[str, ...] = (
    "ring",
    "recursive_doubling",
    "rabenseifner",
    "recursive_halving",
    "binomial",
    "double_binary_tree",
    "bruck",
    "pairwise",
    "direct",
    "chain",
    "scatter_allgather",
    "hierarchical",
    "nvls",
    "hierarchical_ring",
    "hierarchical_leaders",
    "hierarchical_one_way",
)

# The schemes a selector picks (``hierarchical``, by :func:`commlens.ops.hierarchical_all_reduce_scheme`): predicted
# by name, left to their selector in ``auto`` and in the all-algorithms listing, as ``--algo all`` leaves them.
SCHEMES: frozenset[str] = frozenset({"hierarchical_ring", "hierarchical_leaders", "hierarchical_one_way"})


def _domains(cost: Cost, algo: str) -> tuple[Layout, int, int]:
    """The layout of a two-level algorithm ``algo``, its ranks per domain D and domains M; InfeasibleError when
    every rank is in one domain."""
    L = cost.layout
    if not L.multi_domain:
        raise InfeasibleError(f"{algo} needs more than one scale-up domain; {L.ranks} ranks fit in one on {L.topology}")
    return L, L.domain_ranks, L.domains


def _needs_switch(cost: Cost) -> None:
    L = cost.layout
    if L.switch_rate <= 0:
        raise InfeasibleError(f"nvls needs in-switch reduction in the scale-up domain; {L.topology} has none")
    if L.domain_ranks < 2:
        raise InfeasibleError("nvls needs at least 2 ranks in a scale-up domain")


def _nvls(cost: Cost, up_bytes: float, out: tuple[float, float, float], reduce_bytes: float = 0.0) -> None:
    """An in-switch (NVLS) model: each rank moves ``up_bytes`` through the switch in one step; across domains,
    pipelined with it (:func:`two_level`), ``out`` is (messages, bytes, rate) and ``reduce_bytes`` what ranks
    reduce. In one domain the switch step alone."""
    _needs_switch(cost)
    L = cost.layout
    if not L.multi_domain:
        cost.stage(
            ((UP, 1, L.switch_latency_s),),
            ((UP, up_bytes, L.switch_rate),),
            pattern=("switch", up_bytes * L.up_rate / L.switch_rate),
        )
        return
    two_level(cost, (1, L.switch_latency_s, up_bytes, L.switch_rate), out, reduce_bytes, inner="switch")


def _pow2_split(p: int) -> tuple[int, int]:
    """(p', r): the largest power of two <= p and the ranks left over."""
    pp = 1 << floor_log2(p)
    return pp, p - pp


# ---- all_reduce (size n: the buffer) ---------------------------------------------------------


def _ar_ring(cost: Cost, n: float) -> None:
    """2(p-1) a + 2(p-1)/p n b + (p-1)/p n g."""
    p = cost.layout.ranks
    ring(cost, 2, 2 * (p - 1) / p * n, (p - 1) / p * n)


def _ar_recursive_doubling(cost: Cost, n: float) -> None:
    """lg p' (a + n b + n g), plus pre (a + n b + n g) and post (a + n b) steps when p != p'."""
    pp, r = _pow2_split(cost.layout.ranks)
    steps = [(1 << i, n, n) for i in range(floor_log2(pp))]
    if r:
        steps += [(1, n, n), (1, n, 0.0)]
    exchange(cost, steps, all_send=True)


def _ar_rabenseifner(cost: Cost, n: float) -> None:
    """Reduce-scatter by recursive halving, all-gather by recursive doubling (distance doubling, as MPICH).

    2 lg p' a + 2 (p'-1)/p' n b + (p'-1)/p' n g, plus (2a + 2n b + n g) for the pre/post steps when p != p'.
    """
    pp, r = _pow2_split(cost.layout.ranks)
    halves = [(1 << i, n / (2 << i)) for i in range(floor_log2(pp))]
    steps = [(d, b, b) for d, b in halves] + [(d, b, 0.0) for d, b in reversed(halves)]
    if r:
        steps += [(1, n, n), (1, n, 0.0)]
    exchange(cost, steps, all_send=True)


def _ar_binomial(cost: Cost, n: float) -> None:
    """Binomial reduce then binomial broadcast: 2 ceil(lg p) (a + n b) + ceil(lg p) n g."""
    lg = ceil_log2(cost.layout.ranks)
    steps = [(1 << i, n, n) for i in range(lg)] + [(1 << i, n, 0.0) for i in range(lg)]
    exchange(cost, steps, all_send=False)


def _ar_direct(cost: Cost, n: float) -> None:
    """One-shot: every rank sends its n to every other at once and reduces all p buffers itself.

    One message latency (all in flight), (p-1) n b each way, (p-1) n g: the
    fewest steps of any all-reduce, the most bytes; latency-bound sizes only.
    """
    direct(cost, n, reduce=True)


def _ar_double_binary_tree(cost: Cost, n: float) -> None:
    """Two complementary binary trees, each carrying n/2, reduce and broadcast pipelined in chunks.

    Each rank is inner node of one tree and leaf of the other, so per chunk
    step it moves 4 chunks each way: T = (2 depth + k - 1)(a + 4c b) for k
    chunks of c bytes per tree (about 2 n b for large n, as NCCL's tree).
    Across domains the trees span the domains (depth lg M) with a chain
    through each domain (D - 1 hops), as NCCL builds them.
    """
    L = cost.layout
    half = n / 2
    chunk = min(L.chunk_bytes, half) if half > 0 else 0.0
    k = -(-half // chunk) if chunk > 0 else 1
    if not L.multi_domain:
        depth = floor_log2(L.ranks)
        steps = 2 * depth + k - 1
        cost.stage(
            ((UP, steps, L.up_latency_s),),
            ((UP, steps * 4 * chunk, L.up_rate),),
            n,
            host_bytes=host_copies(L, steps * 4 * chunk),
            pattern=("tree", steps * 4 * chunk, 0.0),
        )
        return
    depth_out = floor_log2(L.domains)
    hops_up = 2 * (L.domain_ranks - 1)
    cost.stage(
        ((UP, hops_up + k - 1, L.up_latency_s), (OUT, 2 * depth_out, L.out_latency_s[L.job_tier])),
        (
            (UP, (hops_up + k - 1) * 4 * chunk if L.domain_ranks > 1 else 0.0, L.up_rate),
            (OUT, (2 * depth_out + k - 1) * 4 * chunk, L.domain_nic_rate()),
        ),
        n,
        pattern=(
            "tree",
            (hops_up + k - 1) * 4 * chunk if L.domain_ranks > 1 else 0.0,
            (2 * depth_out + k - 1) * 4 * chunk,
        ),
    )


def _ar_hierarchical(cost: Cost, n: float) -> None:
    """Two-level all-reduce: the scheme commlens' ``hierarchical`` runs, by the library's own rule.

    On a CPU-driven transport (``host_cores``), the scheme
    :func:`commlens.ops.hierarchical_all_reduce_scheme` picks for this size,
    the job's domains as hosts and the fabric's ``pair_full_duplex`` as the
    transport's half-duplex pairs: ``hierarchical_leaders``,
    ``hierarchical_one_way``, ``rabenseifner`` or ``hierarchical_ring``. On an
    offloaded one, the pipelined two-level rings at every size
    (:func:`_ar_hierarchical_ring`).
    """
    L, D, M = _domains(cost, "hierarchical")
    scheme = "hierarchical_ring"
    if L.host_cores:
        scheme = hierarchical_all_reduce_scheme(n, n / D / 2, M, D, True, L.out_pair_both > 1)
    MODELS["all_reduce"][scheme](cost, n)


def _ar_hierarchical_ring(cost: Cost, n: float) -> None:
    """Ring reduce-scatter in each domain, ring all-reduce across domains on each n/D shard, ring all-gather back.

    The three phases pipeline chunk by chunk; every rank runs its own
    cross-domain ring, so the node's ranks share its NICs. On a CPU-driven
    transport (``host_cores``) the phases run one after another, as
    commlens.algos runs them:

    1. Ring reduce-scatter in each domain: D - 1 steps, (D-1)/D n sent and reduced per rank.
    2. Across domains, each rank's n/D shard: a ring all-reduce of the M ranks owning it,
       2(M-1) steps of n/(DM); the node's ranks share its NICs. Two domains swap halves over one
       connection per pair (at half the rate on half-duplex pairs).
    3. Ring all-gather in each domain: D - 1 steps of n/D.
    """
    L, D, M = _domains(cost, "hierarchical_ring")
    if not L.host_cores:
        two_level(
            cost,
            (2 * (D - 1), L.up_latency_s, 2 * (D - 1) / D * n, L.up_rate),
            (2 * (M - 1), 2 * (M - 1) / M * n / D, L.nic_share(L.ranks_per_host)),
            (D - 1) / D * n + (M - 1) / M * n / D,
            inner="ring",
        )
        return
    shard = n / D
    pair = L.out_pair_both if M == 2 else 1.0
    cross = 2 * (M - 1) / M * shard
    _host_phase(cost, n)
    cost.stage(
        ((OUT, 2 * (M - 1), L.out_latency_s[L.job_tier]),),
        ((OUT, cross, L.nic_share(L.ranks_per_host) / pair),),
        (M - 1) / M * shard,
        host_bytes=host_copies(L, cross),
        node_messages=2 * L.ranks_per_host,
    )
    _host_phase(cost, n, reduce=False)


def _host_phase(cost: Cost, n: float, reduce: bool = True) -> None:
    """One ring phase inside each domain, D - 1 steps of n/D, every rank sending and receiving in every step."""
    L = cost.layout
    D = L.domain_ranks
    if D == 1:
        return
    local = (D - 1) / D * n
    cost.stage(
        ((UP, D - 1, L.up_latency_s),),
        ((UP, local, L.up_rate),),
        local if reduce else 0.0,
        host_bytes=host_copies(L, local),
        node_messages=2 * L.ranks_per_host,
    )


def _ar_hierarchical_one_way(cost: Cost, n: float) -> None:
    """Two domains: ring phases in each, the cross-domain exchange routed one way per connection.

    Host 1 -> host 0 goes through the next rank of host 0, which forwards it locally while the next piece
    crosses (2 fabric and 2 local messages; each direction of the link carries the n/D shard once, the
    forward moves it once more inside host 0).
    """
    L, D, M = _domains(cost, "hierarchical_one_way")
    if M != 2 or D < 2:
        raise InfeasibleError(
            f"hierarchical_one_way needs two scale-up domains of at least 2 ranks; the job has {M} of {D}"
        )
    shard = n / D
    _host_phase(cost, n)
    cost.stage(
        ((OUT, 2, L.out_latency_s[L.job_tier]), (UP, 2, L.up_latency_s)),
        ((OUT, shard, L.nic_share(L.ranks_per_host)), (UP, shard, L.up_rate)),
        shard / 2,
        one_way=True,
        host_bytes=host_copies(L, shard),
        node_messages=2 * L.ranks_per_host,
    )
    _host_phase(cost, n, reduce=False)


def _ar_hierarchical_leaders(cost: Cost, n: float) -> None:
    """Binomial reduce onto one leader per domain, recursive doubling among the M leaders, binomial broadcast back.

    The leaders' swaps cross at one rank per node, at the whole NIC (at half the rate on half-duplex
    connections). Every step moves the whole n.
    """
    L, D, M = _domains(cost, "hierarchical_leaders")
    lg_d = ceil_log2(D)
    up = ((UP, lg_d, L.up_latency_s),)
    if lg_d:
        # a tree step's pairs, averaged over the steps: min(2^k, D - 2^k) pairs per domain, 2 messages each
        tree = sum(2 * min(1 << k, D - (1 << k)) for k in range(lg_d)) / lg_d * L.ranks_per_host / D
        cost.stage(
            up,
            ((UP, lg_d * n, L.up_rate),),
            lg_d * n,
            one_way=True,
            host_bytes=2 * lg_d * n if L.host_cores else 0.0,
            node_messages=tree,
        )
    pp, r = _pow2_split(M)
    swaps = floor_log2(pp)
    out_lat = L.out_latency_s[L.job_tier]
    cost.stage(
        ((OUT, swaps + 2 * (r > 0), out_lat),),
        ((OUT, swaps * n * L.out_pair_both + 2 * (r > 0) * n, L.nic_rate / L.out_taper[L.job_tier]),),
        (swaps + (r > 0)) * n,
        one_way=True,
        host_bytes=2 * (swaps + 2 * (r > 0)) * n if L.host_cores else 0.0,
        node_messages=2.0,
    )
    if lg_d:
        cost.stage(
            up,
            ((UP, lg_d * n, L.up_rate),),
            one_way=True,
            host_bytes=2 * lg_d * n if L.host_cores else 0.0,
            node_messages=tree,
        )


def _ar_nvls(cost: Cost, n: float) -> None:
    """In-switch all-reduce: each rank sends n (multimem loads) plus n/D (multicast store), and receives as much.

    The switch reduces, so ranks do no reduction. Across domains, NCCL's
    NVLS-tree, pipelined: NVLS reduce-scatter, each n/D shard all-reduced
    over a double binary tree of the domains, NVLS all-gather. A rank is an
    inner node of one tree and a leaf of the other, so it sends and receives
    2 n/D over the fabric (n/D where two domains swap their shards), in
    2 lg M network steps (NVIDIA/nccl src/graph/tuning.cc: NVLS_TREE's
    inter-node bandwidth doubled only for nNodes <= 2, latency
    2 log2(nNodes) network steps). A ring across the domains would move
    only 2 (M-1)/M n/D: faster than NCCL at a few domains (495 against the
    370-380 GB/s NVIDIA shows for NVLS-tree across DGX H100 nodes, GTC 2024
    via NVIDIA/nccl#1649).
    """
    L = cost.layout
    D, M = L.domain_ranks, L.domains
    _nvls(
        cost,
        n * (1 + 1 / D),
        (2 * floor_log2(M), (1 if M == 2 else 2) * n / D, L.nic_share(L.ranks_per_host)),
        (M - 1) / M * n / D,
    )


# ---- reduce_scatter (size S: the full input; s = S/p per rank) ----------------------------------


def _rs_ring(cost: Cost, size: float) -> None:
    """(p-1) a + (p-1)/p S (b + g)."""
    p = cost.layout.ranks
    ring(cost, 1, (p - 1) / p * size, (p - 1) / p * size)


def _rs_rabenseifner(cost: Cost, size: float) -> None:
    """Recursive halving: lg p' a + (p'-1)/p' S (b + g), plus pre (a + S b + S g) and post (a + s b) when p != p'."""
    p = cost.layout.ranks
    pp, r = _pow2_split(p)
    steps = [(1 << i, size / (2 << i), size / (2 << i)) for i in range(floor_log2(pp))]
    if r:
        steps += [(1, size, size), (1, size / p, 0.0)]
    exchange(cost, steps, all_send=True)


def _rs_pairwise(cost: Cost, size: float) -> None:
    """(p-1) a + (p-1)/p S (b + g), one peer after another."""
    direct(cost, size / cost.layout.ranks, reduce=True, sequential=True)


def _rs_direct(cost: Cost, size: float) -> None:
    """All peers at once: (p-1) a + (p-1)/p S (b + g), levels overlapping."""
    direct(cost, size / cost.layout.ranks, reduce=True)


def _rs_hierarchical(cost: Cost, size: float) -> None:
    """Ring reduce-scatter in each domain on S, then ring reduce-scatter across domains on each S/D block."""
    L, D, M = _domains(cost, "hierarchical")
    two_level(
        cost,
        (D - 1, L.up_latency_s, (D - 1) / D * size, L.up_rate),
        (M - 1, (M - 1) / M * size / D, L.nic_share(L.ranks_per_host)),
        (D - 1) / D * size + (M - 1) / M * size / D,
        inner="ring",
    )


def _rs_nvls(cost: Cost, size: float) -> None:
    """Each rank's S leaves through the switch (multimem loads), its reduced s comes back."""
    L = cost.layout
    D, M = L.domain_ranks, L.domains
    _nvls(cost, size, (M - 1, (M - 1) / M * size / D, L.nic_share(L.ranks_per_host)), (M - 1) / M * size / D)


# ---- reduce (size n: the buffer) -----------------------------------------------------------------


def _reduce_binomial(cost: Cost, n: float) -> None:
    """ceil(lg p) (a + n b + n g)."""
    exchange(cost, [(1 << i, n, n) for i in range(ceil_log2(cost.layout.ranks))], all_send=False)


def _reduce_ring(cost: Cost, n: float) -> None:
    """A pipelined chain to the root: (p - 1 + k - 1)(a + c b) for k chunks of c bytes, plus n g."""
    chain(cost, n, reduce=True)


def _reduce_rabenseifner(cost: Cost, n: float) -> None:
    """Reduce-scatter by recursive halving, then binomial gather to the root (Rabenseifner's reduce)."""
    p = cost.layout.ranks
    pp, r = _pow2_split(p)
    lg = floor_log2(pp)
    steps = [(1 << i, n / (2 << i), n / (2 << i)) for i in range(lg)]
    steps += [(1 << i, n / (2 << i), 0.0) for i in reversed(range(lg))]
    if r:
        steps += [(1, n, n)]
    exchange(cost, steps, all_send=True)


def _reduce_direct(cost: Cost, n: float) -> None:
    """The root receives n from each rank at once: (p-1) a + (p-1) n (b + g), its links the bottleneck."""
    rooted_direct(cost, n, reduce=True)


def _reduce_hierarchical(cost: Cost, n: float) -> None:
    """Binomial reduce in each domain, then binomial reduce among the domain leaders."""
    _binomial_levels(cost, n, reduce=True)


def _binomial_levels(cost: Cost, n: float, reduce: bool) -> None:
    """A binomial tree in each domain and one among the domain leaders, pipelined: lg D steps of n inside, lg M
    across (the hierarchical reduce, each step reducing n, and its mirror, the hierarchical broadcast)."""
    L, D, M = _domains(cost, "hierarchical")
    lg_d, lg_m = ceil_log2(D), ceil_log2(M)
    two_level(
        cost,
        (lg_d, L.up_latency_s, lg_d * n, L.up_rate),
        (lg_m, lg_m * n, L.nic_rate / L.out_taper[L.job_tier]),
        (lg_d + lg_m) * n if reduce else 0.0,
    )


# ---- all_gather (size S: the gathered whole; s = S/p per rank) -----------------------------------


def _ag_ring(cost: Cost, size: float) -> None:
    """(p-1) a + (p-1)/p S b."""
    p = cost.layout.ranks
    ring(cost, 1, (p - 1) / p * size)


def _ag_recursive_doubling(cost: Cost, size: float) -> None:
    """lg p' a + (p'-1)/p' S b, plus pre (a + s b) and post (a + S b) steps when p != p'."""
    p = cost.layout.ranks
    pp, r = _pow2_split(p)
    steps = [(1 << i, (1 << i) * size / pp, 0.0) for i in range(floor_log2(pp))]
    if r:
        steps += [(1, size / p, 0.0), (1, size, 0.0)]
    exchange(cost, steps, all_send=True)


def _doubling(cost: Cost, size: float, all_send: bool) -> None:
    """Steps k = 0 .. ceil(lg p) - 1 at distance 2^k, each moving min(2^k, p - 2^k) blocks of s = S/p: (p-1) s in
    all (Bruck's all-gather, every rank sending; the binomial gather)."""
    p = cost.layout.ranks
    s = size / p
    exchange(cost, [(1 << k, min(1 << k, p - (1 << k)) * s, 0.0) for k in range(ceil_log2(p))], all_send=all_send)


def _ag_bruck(cost: Cost, size: float) -> None:
    """ceil(lg p) a + (p-1)/p S b: step k sends min(2^k, p - 2^k) blocks of s to rank - 2^k."""
    _doubling(cost, size, all_send=True)


def _direct_blocks(cost: Cost, size: float) -> None:
    """Every rank sends s = S/p to every other rank at once, levels overlapping: (p-1) a + (p-1)/p S b (all_gather's
    and all_to_all's direct)."""
    direct(cost, size / cost.layout.ranks, reduce=False)


def _ag_hierarchical(cost: Cost, size: float) -> None:
    """Ring all-gather of each s across domains, then ring all-gather of the M s blocks in each domain."""
    L, D, M = _domains(cost, "hierarchical")
    s = size / L.ranks
    two_level(
        cost,
        (D - 1, L.up_latency_s, (D - 1) * M * s, L.up_rate),
        (M - 1, (M - 1) * s, L.nic_share(L.ranks_per_host)),
        inner="ring",
    )


def _ag_nvls(cost: Cost, size: float) -> None:
    """Each rank multicasts its s through the switch; every rank receives the whole S."""
    L = cost.layout
    _nvls(cost, size, (L.domains - 1, (L.domains - 1) * size / L.ranks, L.nic_share(L.ranks_per_host)))


# ---- all_to_all (size S: what one rank sends in total; s = S/p per peer) --------------------------


def _a2a_pairwise(cost: Cost, size: float) -> None:
    """(p-1) a + (p-1)/p S b, one peer after another (XOR partners where p is a power of two, as
    :func:`commlens.algos.alltoall.pairwise` pairs them)."""
    direct(cost, size / cost.layout.ranks, reduce=False, sequential=True, xor=True)


def _a2a_bruck(cost: Cost, size: float) -> None:
    """ceil(lg p) a + about (S/2) lg p b: step k forwards the blocks whose index has bit k set."""
    p = cost.layout.ranks
    s = size / p
    steps = []
    for k in range(ceil_log2(p)):
        bit = 1 << k
        blocks = (p >> (k + 1)) * bit + max(0, p % (bit << 1) - bit)
        steps.append((bit, blocks * s, 0.0))
    exchange(cost, steps, all_send=True)


def _a2a_hierarchical(cost: Cost, size: float) -> None:
    """Regroup in each domain by destination (direct, (D-1)/D S), then direct across domains ((M-1)/M S)."""
    L, D, M = _domains(cost, "hierarchical")
    two_level(
        cost,
        (D - 1, L.up_latency_s, (D - 1) / D * size, L.up_rate),
        (M - 1, (M - 1) / M * size, L.nic_share(L.ranks_per_host) / L.a2a_taper()),
    )


# ---- broadcast (size n: the buffer) --------------------------------------------------------------


def _bcast_binomial(cost: Cost, n: float) -> None:
    """ceil(lg p)(a + n b)."""
    exchange(cost, [(1 << i, n, 0.0) for i in range(ceil_log2(cost.layout.ranks))], all_send=False)


def _bcast_chain(cost: Cost, n: float) -> None:
    """A pipelined chain from the root, root -> root+1 -> ...: (p - 1 + k - 1)(a + c b) for k chunks of c bytes,
    c = ``pipeline_chunk_bytes``: the ``ring`` broadcast and commlens' ``chain``.

    The library's chain forwards chunks of the presets' pipeline_chunk_bytes (512 KiB) unless given
    chunk_bytes: the same pipeline as the ring.
    """
    chain(cost, n, reduce=False)


def _bcast_scatter_allgather(cost: Cost, n: float) -> None:
    """Binomial scatter of p blocks, then ring all-gather (van de Geijn).

    ceil(lg p) a + (p-1)/p n b for the scatter (step with mask m sends m blocks of n/p, a rank sends or
    receives), then (p-1) a + (p-1)/p n b for the ring: about 2 n b for large n, against lg p n b for the
    binomial tree.
    """
    p = cost.layout.ranks
    masks = [1 << i for i in reversed(range(ceil_log2(p)))]
    exchange(cost, [(m, min(m, p - m) * n / p, 0.0) for m in masks], all_send=False)
    ring(cost, 1, (p - 1) / p * n)


def _bcast_direct(cost: Cost, n: float) -> None:
    """The root sends n to every rank at once: (p-1) a + (p-1) n b, its links the bottleneck."""
    rooted_direct(cost, n, reduce=False)


def _bcast_hierarchical(cost: Cost, n: float) -> None:
    """Binomial broadcast among domain leaders, then binomial broadcast in each domain."""
    _binomial_levels(cost, n, reduce=False)


# ---- gather and scatter (size S: all ranks' data together; s = S/p) -------------------------------


def _gather_binomial(cost: Cost, size: float) -> None:
    """ceil(lg p) a + (p-1)/p S b: step i forwards 2^i blocks of s."""
    _doubling(cost, size, all_send=False)


def _gather_direct(cost: Cost, size: float) -> None:
    """The root exchanges s with every rank at once: (p-1) a + (p-1)/p S b."""
    rooted_direct(cost, size / cost.layout.ranks, reduce=False)


def _gather_hierarchical(cost: Cost, size: float) -> None:
    """Binomial gather to each domain leader, then the leaders' D s blocks to the root at once."""
    L, D, M = _domains(cost, "hierarchical")
    s = size / L.ranks
    two_level(
        cost,
        (ceil_log2(D), L.up_latency_s, (D - 1) * s, L.up_rate),
        (M - 1, (M - 1) * D * s, L.nic_rate / L.out_taper[L.job_tier]),
    )


# ---- sendrecv and barrier ------------------------------------------------------------------------


def _sendrecv_direct(cost: Cost, size: float) -> None:
    """Rank r sends to r+1 while receiving from r-1: a + S b on the slowest pair (a domain boundary if any)."""
    L = cost.layout
    if L.multi_domain:
        cost.stage(
            ((OUT, 1, L.out_latency_s[L.job_tier]),),
            ((UP, size if L.domain_ranks > 1 else 0.0, L.up_rate), (OUT, size, L.nic_rate)),
            pattern=("pair", size),
        )
    else:
        cost.stage(
            ((UP, 1, L.up_latency_s),),
            ((UP, size, L.up_rate),),
            host_bytes=host_copies(L, size),
            pattern=("pair", size),
        )


def _barrier_recursive_doubling(cost: Cost, size: float) -> None:
    """Dissemination: ceil(lg p) a, no payload."""
    exchange(cost, [(1 << i, 0.0, 0.0) for i in range(ceil_log2(cost.layout.ranks))], all_send=True)


# One entry per (op, algorithm); an algorithm absent for an op is infeasible for it.
MODELS: dict[str, dict[str, CostFn]] = {
    "all_reduce": {
        "ring": _ar_ring,
        "recursive_doubling": _ar_recursive_doubling,
        "rabenseifner": _ar_rabenseifner,
        "binomial": _ar_binomial,
        "direct": _ar_direct,
        "double_binary_tree": _ar_double_binary_tree,
        "hierarchical": _ar_hierarchical,
        "nvls": _ar_nvls,
        "hierarchical_ring": _ar_hierarchical_ring,
        "hierarchical_leaders": _ar_hierarchical_leaders,
        "hierarchical_one_way": _ar_hierarchical_one_way,
    },
    "reduce_scatter": {
        "ring": _rs_ring,
        "rabenseifner": _rs_rabenseifner,
        "recursive_halving": _rs_rabenseifner,
        "pairwise": _rs_pairwise,
        "direct": _rs_direct,
        "hierarchical": _rs_hierarchical,
        "nvls": _rs_nvls,
    },
    "reduce": {
        "binomial": _reduce_binomial,
        "ring": _reduce_ring,
        "rabenseifner": _reduce_rabenseifner,
        "direct": _reduce_direct,
        "hierarchical": _reduce_hierarchical,
    },
    "all_gather": {
        "ring": _ag_ring,
        "recursive_doubling": _ag_recursive_doubling,
        "bruck": _ag_bruck,
        "direct": _direct_blocks,
        "hierarchical": _ag_hierarchical,
        "nvls": _ag_nvls,
    },
    "all_to_all": {
        "pairwise": _a2a_pairwise,
        "direct": _direct_blocks,
        "bruck": _a2a_bruck,
        "hierarchical": _a2a_hierarchical,
    },
    "broadcast": {
        "binomial": _bcast_binomial,
        "ring": _bcast_chain,
        "chain": _bcast_chain,
        "scatter_allgather": _bcast_scatter_allgather,
        "direct": _bcast_direct,
        "hierarchical": _bcast_hierarchical,
    },
    "gather": {"binomial": _gather_binomial, "direct": _gather_direct, "hierarchical": _gather_hierarchical},
    "scatter": {"binomial": _gather_binomial, "direct": _gather_direct, "hierarchical": _gather_hierarchical},
    "sendrecv": {"direct": _sendrecv_direct},
    "barrier": {"recursive_doubling": _barrier_recursive_doubling},
}


def algorithms_for(op: str) -> tuple[str, ...]:
    """The algorithms with a model for ``op``, in the shared order, without the :data:`SCHEMES` a selector picks."""
    models = MODELS.get(op, {})
    return tuple(a for a in ALGORITHMS if a in models and a not in SCHEMES)


def auto_candidates(op: str) -> tuple[str, ...]:
    """What ``auto`` chooses among for ``op``: every model but the :data:`SCHEMES`, in :data:`MODELS` order."""
    return tuple(a for a in MODELS.get(op, {}) if a not in SCHEMES)
