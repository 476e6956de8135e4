"""Cost formulas against hand-computed values (p = 2, 3, 4, 8) and their mapping onto topology levels.

On one level with latency A, seconds per byte B and reduction seconds per
byte G, the formulas are Thakur, Rabenseifner and Gropp's (table in
shared/reference/hardware.md), with p' = 2^floor(lg p) and r = p - p' for
the pre/post steps of non-powers of two. Sizes follow nccl-tests: S is the
whole gathered/scattered buffer, or what one rank sends in total for
all_to_all, so "n" of the paper's all-to-all is (p-1)/p S here. Direct
algorithms post every message at once and pay one message latency.
"""

from __future__ import annotations

import math

import pytest

from commlens.model import InfeasibleError, build_layout, predict
from commlens.topology import load_topology, topology_from_dict, topology_to_dict

A = 2e-6  # seconds per message
BW = 1e9  # bytes per second
B = 1 / BW
GR = 4e9  # bytes reduced per second
G = 1 / GR
N = 1 << 20


def flat(*, duplex: bool = True, overlap: bool = False, chunk: int = 1 << 30, launch: float = 0.0):
    """One scale-up level with round constants and nothing else."""
    d = topology_to_dict(load_topology("local-cpu"))
    d["name"] = "flat"
    d["launch_latency_s"] = launch
    d["pipeline_chunk_bytes"] = chunk
    d["accelerator"].update(reduction_bytes_per_s=GR, reduction_overlaps_transfer=overlap)
    up = d["scale_up"]
    up.update(latency_s=A, bandwidth_bytes_per_s=BW, efficiency=1.0, full_duplex=duplex)
    up.pop("cache_bytes", None)
    up.pop("cached_bandwidth_bytes_per_s", None)
    up.pop("host_cores", None)
    return topology_from_dict(d)


def lg(p: int) -> int:
    return math.ceil(math.log2(p))


def split(p: int) -> tuple[int, int, int]:
    pp = 1 << (p.bit_length() - 1)
    return pp, int(math.log2(pp)), 1 if p != pp else 0


def bruck_blocks(p: int) -> int:
    """Blocks a rank forwards over all Bruck all-to-all steps, counted by hand for the cases tested."""
    return {2: 1, 3: 2, 4: 4, 8: 12}[p]


def expected(op: str, algo: str, p: int, n: float) -> float:
    pp, lgpp, r = split(p)
    f = (p - 1) / p
    table = {
        ("all_reduce", "ring"): 2 * (p - 1) * A + 2 * f * n * B + f * n * G,
        ("all_reduce", "recursive_doubling"): (lgpp + 2 * r) * A + (lgpp + 2 * r) * n * B + (lgpp + r) * n * G,
        ("all_reduce", "rabenseifner"): (2 * lgpp + 2 * r) * A
        + (2 * (pp - 1) / pp + 2 * r) * n * B
        + ((pp - 1) / pp + r) * n * G,
        ("all_reduce", "binomial"): 2 * lg(p) * (A + n * B) + lg(p) * n * G,
        ("all_gather", "ring"): (p - 1) * A + f * n * B,
        ("all_gather", "bruck"): lg(p) * A + f * n * B,
        ("all_gather", "direct"): A + f * n * B,  # every message in flight at once: one latency
        ("all_gather", "recursive_doubling"): (lgpp + 2 * r) * A + ((pp - 1) / pp * n + r * (n / p + n)) * B,
        ("reduce_scatter", "ring"): (p - 1) * A + f * n * (B + G),
        ("reduce_scatter", "pairwise"): (p - 1) * A + f * n * (B + G),
        ("reduce_scatter", "direct"): A + f * n * (B + G),
        ("reduce_scatter", "rabenseifner"): (lgpp + 2 * r) * A
        + ((pp - 1) / pp * n + r * (n + n / p)) * B
        + ((pp - 1) / pp * n + r * n) * G,
        ("all_to_all", "pairwise"): (p - 1) * A + f * n * B,
        ("all_to_all", "direct"): A + f * n * B,
        ("all_to_all", "bruck"): lg(p) * A + bruck_blocks(p) * n / p * B,
        ("broadcast", "binomial"): lg(p) * (A + n * B),
        ("broadcast", "ring"): (p - 1) * (A + n * B),  # one chunk: no pipelining
        ("broadcast", "direct"): A + (p - 1) * n * B,  # the root's link carries every copy
        ("reduce", "binomial"): lg(p) * (A + n * B + n * G),
        ("reduce", "direct"): A + (p - 1) * n * (B + G),
        ("gather", "binomial"): lg(p) * A + f * n * B,
        ("gather", "direct"): A + f * n * B,
        ("scatter", "binomial"): lg(p) * A + f * n * B,
        ("scatter", "direct"): A + f * n * B,
        ("sendrecv", "direct"): A + n * B,
        ("barrier", "recursive_doubling"): lg(p) * A,
    }
    return table[(op, algo)]


CASES = [
    ("all_reduce", "ring"),
    ("all_reduce", "recursive_doubling"),
    ("all_reduce", "rabenseifner"),
    ("all_reduce", "binomial"),
    ("all_gather", "ring"),
    ("all_gather", "bruck"),
    ("all_gather", "direct"),
    ("all_gather", "recursive_doubling"),
    ("reduce_scatter", "ring"),
    ("reduce_scatter", "pairwise"),
    ("reduce_scatter", "direct"),
    ("reduce_scatter", "rabenseifner"),
    ("all_to_all", "pairwise"),
    ("all_to_all", "direct"),
    ("all_to_all", "bruck"),
    ("broadcast", "binomial"),
    ("broadcast", "ring"),
    ("broadcast", "direct"),
    ("reduce", "binomial"),
    ("reduce", "direct"),
    ("gather", "binomial"),
    ("gather", "direct"),
    ("scatter", "binomial"),
    ("scatter", "direct"),
    ("sendrecv", "direct"),
    ("barrier", "recursive_doubling"),
]


@pytest.mark.parametrize("p", [2, 3, 4, 8])
@pytest.mark.parametrize("op,algo", CASES)
def test_single_level_formula_matches_the_hand_computed_value(op: str, algo: str, p: int) -> None:
    size = 0 if op == "barrier" else N
    pred = predict(flat(), op, size, ranks_per_host=p, algo=algo)
    assert pred.time_s == pytest.approx(expected(op, algo, p, size), rel=1e-9)


def test_thakur_table_values_for_p8_written_out() -> None:
    """Two rows of the reference table, p = 8, n = 1 MiB, computed by hand once more."""
    t = flat()
    ring = predict(t, "all_reduce", N, ranks_per_host=8, algo="ring").time_s
    assert ring == pytest.approx(14 * 2e-6 + 1.75 * N / 1e9 + 0.875 * N / 4e9)
    bcast = predict(t, "broadcast", N, ranks_per_host=8, algo="binomial").time_s
    assert bcast == pytest.approx(3 * (2e-6 + N / 1e9))


def test_launch_cost_is_added_once_and_one_rank_costs_only_the_launch() -> None:
    t = flat(launch=5e-6)
    assert predict(t, "all_reduce", N, ranks_per_host=4, algo="ring").time_s == pytest.approx(
        5e-6 + expected("all_reduce", "ring", 4, N)
    )
    alone = predict(t, "all_reduce", N, ranks_per_host=1, algo="ring")
    assert alone.time_s == pytest.approx(5e-6) and alone.busbw_bytes_per_s == 0.0


def test_overlapped_reduction_costs_the_larger_of_transfer_and_reduction() -> None:
    t = flat(overlap=True)
    p = 4
    got = predict(t, "reduce_scatter", N, ranks_per_host=p, algo="ring").time_s
    assert got == pytest.approx((p - 1) * A + max(0.75 * N * B, 0.75 * N * G))


def test_half_duplex_levels_count_sent_and_received_bytes() -> None:
    """A CPU-driven transport: ring ranks send and receive at once (x2); binomial ranks do one or the other."""
    t = flat(duplex=False)
    assert predict(t, "all_gather", N, ranks_per_host=4, algo="ring").time_s == pytest.approx(3 * A + 2 * 0.75 * N * B)
    assert predict(t, "broadcast", N, ranks_per_host=4, algo="binomial").time_s == pytest.approx(2 * (A + N * B))


def test_a_pipelined_chain_forwards_chunks() -> None:
    """Ring broadcast of 4 chunks over p ranks: (p - 1 + 4 - 1)(A + c B)."""
    c = N // 4
    for p in (2, 3, 8):
        got = predict(flat(chunk=c), "broadcast", N, ranks_per_host=p, algo="ring").time_s
        assert got == pytest.approx((p - 1 + 3) * (A + c * B))


def test_double_binary_tree_pipelines_two_half_trees() -> None:
    """p = 8, depth 3. One chunk per tree (c = n/2): (2*3 + 1 - 1)(A + 4c B) + n G; four: (6 + 3)(A + 4 n/8 B)."""
    t = flat()
    assert predict(t, "all_reduce", N, ranks_per_host=8, algo="double_binary_tree").time_s == pytest.approx(
        6 * (A + 4 * (N / 2) * B) + N * G
    )
    t4 = flat(chunk=N // 8)
    assert predict(t4, "all_reduce", N, ranks_per_host=8, algo="double_binary_tree").time_s == pytest.approx(
        9 * (A + 4 * (N / 8) * B) + N * G
    )


# ---- mapped onto levels ------------------------------------------------------------------------------

H100 = load_topology("dgx-h100")
NVLINK = 450e9 * 0.824
NIC = 50e9 * 0.96


def test_ring_across_nodes_splits_steps_between_levels() -> None:
    """16 DGX H100: 2(p-1) = 254 steps, 2(M-1) = 30 cross the leaf switch.

    Each of the node's 8 channels leaves it from one GPU over that GPU's NIC, so NVLink carries 7/8 of a rank's
    bytes (7/8 / 370.8 GB/s < 1 / 384 GB/s): the 8 NICs together set the pace."""
    n = 1 << 30
    p = 128
    got = predict(H100, "all_reduce", n, nodes=16, algo="ring")
    lat = 6.6e-6 + (254 - 30) * 0.6e-6 + 30 * 2.7e-6
    bw = 2 * (p - 1) / p * n / (8 * NIC)
    assert 2 * (p - 1) / p * n * 7 / 8 / NVLINK < bw
    assert got.time_s == pytest.approx(lat + bw)
    assert got.bottleneck == "scale_out bandwidth"


def test_ranks_sharing_a_nic_share_its_bandwidth() -> None:
    """Recursive doubling across 2 nodes: all 8 ranks of a node cross at once, each at its share of the NICs."""
    n = 1 << 28
    eight = predict(H100, "all_reduce", n, nodes=2, algo="recursive_doubling")
    d = topology_to_dict(H100)
    d["scale_out"]["nics_per_node"] = 4
    four = predict(topology_from_dict(d), "all_reduce", n, nodes=2, algo="recursive_doubling")

    def fabric_s(pred) -> float:
        return sum(t.time_s for t in pred.terms if t.level == "scale_out" and t.kind == "bandwidth")

    assert fabric_s(eight) == pytest.approx(n / NIC)  # one step of n bytes across the fabric, one NIC per rank
    assert fabric_s(four) == pytest.approx(2 * n / NIC)


def test_oversubscribed_tiers_slow_fabric_wide_traffic_only() -> None:
    d = topology_to_dict(H100)
    d["scale_out"]["tiers"][0]["oversubscription"] = 4.0  # leaf uplinks carry a quarter of the downlinks
    tapered = topology_from_dict(d)
    size = 1 << 30
    # 64 nodes, 32 per leaf: half of each node's fabric bytes go up through the leaf, at a quarter of the rate.
    a2a = predict(H100, "all_to_all", size, nodes=64, algo="direct")
    a2a_tapered = predict(tapered, "all_to_all", size, nodes=64, algo="direct")

    def fabric_s(pred) -> float:
        return sum(t.time_s for t in pred.terms if t.level == "scale_out" and t.kind == "bandwidth")

    assert fabric_s(a2a_tapered) == pytest.approx(fabric_s(a2a) * 4 * 0.5 / (1 - 1 / 64))
    ring = predict(H100, "all_reduce", size, nodes=64, algo="ring").time_s
    ring_tapered = predict(tapered, "all_reduce", size, nodes=64, algo="ring").time_s
    assert ring_tapered == pytest.approx(ring, rel=0.02)  # neighbours stay below the leaf, save the latency


def test_tier_latency_grows_with_the_tiers_crossed() -> None:
    small = 8
    within_leaf = predict(H100, "sendrecv", small, nodes=32).time_s
    across_spine = predict(H100, "sendrecv", small, nodes=64).time_s
    assert across_spine - within_leaf == pytest.approx(2 * 1.3e-7)


def test_sendrecv_across_two_nodes_runs_at_one_nic() -> None:
    got = predict(H100, "sendrecv", 1 << 30, nodes=2)
    assert got.time_s == pytest.approx(6.6e-6 + 2.7e-6 + (1 << 30) / NIC)


def test_job_shapes_a_topology_cannot_hold_are_infeasible_with_a_reason() -> None:
    with pytest.raises(InfeasibleError, match="no scale_out level"):
        build_layout(load_topology("local-cpu"), nodes=2)
    with pytest.raises(InfeasibleError, match=r"exceed dgx-h100's fabric"):
        build_layout(H100, nodes=10_000)
    with pytest.raises(InfeasibleError, match="ranks per node must be between 1 and"):
        build_layout(H100, nodes=1, ranks_per_host=9)
    with pytest.raises(InfeasibleError, match="do not fill whole scale-up domains of 18 nodes"):
        build_layout(load_topology("gb200-nvl72"), nodes=19)  # prime: 19 racks of one tray
    spread = build_layout(load_topology("gb200-nvl72"), nodes=64)  # 256 GPUs: 4 racks of 16 trays
    assert (spread.domains, spread.domain_nodes) == (4, 16)
    with pytest.raises(InfeasibleError, match="nvls needs in-switch reduction.*dgx-a100"):
        predict(load_topology("dgx-a100"), "all_reduce", N, algo="nvls")
    with pytest.raises(InfeasibleError, match="hierarchical needs more than one scale-up domain"):
        predict(H100, "all_reduce", N, algo="hierarchical")
    with pytest.raises(InfeasibleError, match="no bruck algorithm for all_reduce; all_reduce has: ring"):
        predict(H100, "all_reduce", N, algo="bruck")
    with pytest.raises(InfeasibleError, match="unknown algorithm 'tree'"):
        predict(H100, "all_reduce", N, algo="tree")


def test_cache_resident_buffers_move_at_the_cached_rate() -> None:
    """With cache_bytes C: 1/rate = f/cached + (1-f)/rate, f = min(1, C/size)."""
    d = topology_to_dict(flat())
    d["scale_up"].update(cache_bytes=N, cached_bandwidth_bytes_per_s=4 * BW)
    t = topology_from_dict(d)
    small = predict(t, "sendrecv", N // 2, ranks_per_host=2).time_s
    assert small == pytest.approx(A + (N // 2) / (4 * BW))
    big = predict(t, "sendrecv", 4 * N, ranks_per_host=2).time_s
    assert big == pytest.approx(A + 4 * N * (0.25 / (4 * BW) + 0.75 / BW))


def test_ranks_sharing_fewer_cores_share_the_copy_budget() -> None:
    """host_cores = 2: a node copies at most 2 x one rank's rate. Ring all_gather on 4 ranks of a half-duplex
    host: each rank copies 2b (b = 3/4 S sent), the node 4 x 2b over 2 cores; on 2 ranks the cores suffice.
    Binomial broadcast on 4 ranks: one pair copies at step 0 (N/B), two pairs at step 1 (4N over 2 cores).
    Messages share the cores too: a ring step on 4 ranks handles 8 sends and receives on 2 cores, 2 latencies;
    the tree's steps (2 and 4 messages) and a 2-rank ring (4) fit in one."""
    d = topology_to_dict(flat(duplex=False))
    d["scale_up"]["host_cores"] = 2
    t = topology_from_dict(d)
    assert predict(t, "all_gather", N, ranks_per_host=4, algo="ring").time_s == pytest.approx(
        2 * 3 * A + 4 * 0.75 * N * B
    )
    assert predict(t, "all_gather", N, ranks_per_host=2, algo="ring").time_s == pytest.approx(A + N * B)
    assert predict(t, "broadcast", N, ranks_per_host=4, algo="binomial").time_s == pytest.approx(2 * A + 3 * N * B)
    host = [term for term in predict(t, "all_gather", N, ranks_per_host=4, algo="ring").terms if term.level == "host"]
    assert len(host) == 1 and host[0].critical and host[0].amount == pytest.approx(2 * 0.75 * N * 4)


def test_a_backend_that_splits_steps_into_messages_pays_each_latency() -> None:
    """gloo sends each ring step as at least two messages: the latency term doubles, the bandwidth term does not."""
    one = predict(flat(), "all_gather", N, ranks_per_host=4, algo="ring", messages_per_step=1).time_s
    two = predict(flat(), "all_gather", N, ranks_per_host=4, algo="ring", messages_per_step=2).time_s
    assert two - one == pytest.approx(3 * A)


EMU = load_topology("emulated-cluster")


def _fabric_bandwidth_s(pred) -> float:  # noqa: ANN001 - a Prediction
    return sum(t.time_s for t in pred.terms if t.level == "scale_out" and t.kind == "bandwidth")


def _with_pair_duplex(topology, value: bool):  # noqa: ANN001, ANN202
    d = topology_to_dict(topology)
    d["scale_out"]["pair_full_duplex"] = value
    return topology_from_dict(d)


def test_connections_carrying_one_direction_at_a_time_slow_swaps_not_one_way_flows() -> None:
    """pair_full_duplex false: recursive doubling's cross-host swap takes twice as long, the ring's one-way
    hops do not (2 hosts x 2 ranks, the emulated cluster's shaping)."""
    n = 16 << 20
    full = _with_pair_duplex(EMU, True)
    for algo, factor in (("recursive_doubling", 2.0), ("rabenseifner", 2.0), ("ring", 1.0)):
        half_s = _fabric_bandwidth_s(predict(EMU, "all_reduce", n, algo=algo, nodes=2, ranks_per_host=2))
        full_s = _fabric_bandwidth_s(predict(full, "all_reduce", n, algo=algo, nodes=2, ranks_per_host=2))
        assert half_s == pytest.approx(factor * full_s), algo
    # a two-rank ring is a swap too
    two = [
        _fabric_bandwidth_s(predict(t, "all_reduce", n, algo="ring", nodes=2, ranks_per_host=1)) for t in (EMU, full)
    ]
    assert two[0] == pytest.approx(2 * two[1])


def test_hierarchical_on_a_cpu_transport_routes_two_hosts_one_way_from_the_threshold() -> None:
    """commlens' hierarchical: phases in sequence; two hosts on half-duplex connections send each shard one
    way (n per direction of the link, against the flat ring's 1.5 n), below the threshold they swap."""
    from commlens.ops import HIERARCHICAL_ONE_WAY_MIN_BYTES as ONE_WAY_MIN_BYTES

    nic = EMU.scale_out.nic_bandwidth_bytes_per_s * EMU.scale_out.efficiency
    n = 16 << 20
    hier = predict(EMU, "all_reduce", n, algo="hierarchical", nodes=2, ranks_per_host=2)
    ring_ = predict(EMU, "all_reduce", n, algo="ring", nodes=2, ranks_per_host=2)
    assert _fabric_bandwidth_s(hier) == pytest.approx(n / 2 / (nic / 2))  # each of 2 ranks sends n/2 at half the NIC
    assert _fabric_bandwidth_s(ring_) == pytest.approx(1.5 * n / nic)
    assert hier.time_s < ring_.time_s
    stages = {t.stage for t in hier.terms if t.stage > 0}
    assert len(stages) == 3  # reduce-scatter, cross-host, all-gather one after another
    # just below the threshold (half a shard = n/6 with 3 ranks per host) the hosts swap: twice the time per byte
    small = 6 * ONE_WAY_MIN_BYTES - 6
    swap = predict(EMU, "all_reduce", small, algo="hierarchical", nodes=2, ranks_per_host=3)
    routed = predict(EMU, "all_reduce", 6 * ONE_WAY_MIN_BYTES, algo="hierarchical", nodes=2, ranks_per_host=3)
    assert _fabric_bandwidth_s(swap) / small == pytest.approx(2 * _fabric_bandwidth_s(routed) / (6 * ONE_WAY_MIN_BYTES))


def test_direct_on_a_cpu_transport_pays_every_message_latency() -> None:
    """The CPU posts direct's p - 1 messages one by one (host_cores set); an offloaded transport pays one."""
    cpu = load_topology("local-cpu")
    one = predict(cpu, "all_reduce", 8, algo="direct", ranks_per_host=2)
    four = predict(cpu, "all_reduce", 8, algo="direct", ranks_per_host=5)

    def latency_msgs(pred) -> float:  # noqa: ANN001
        return sum(t.amount for t in pred.terms if t.kind == "latency")

    # 5 ranks on 2 cores: 10 sends and receives per step crowd the cores 2.5-fold (Cost.stage's node_messages)
    assert latency_msgs(one) == 1 and latency_msgs(four) == 4 * 2.5
    gpu = predict(H100, "all_reduce", 8, algo="direct")
    assert latency_msgs(gpu) == 1


def test_hierarchical_small_buffers_go_through_one_leader_per_host() -> None:
    """Below HIERARCHICAL_LEADERS_MAX_BYTES: binomial reduce, leaders' recursive doubling, binomial broadcast: with 2 hosts of
    4 ranks (1 core each) that is 2 + 1 + 2 steps, the trees' steps 1.5 latencies each on average (2 then 4
    messages on one core), against the ring's 14 steps of 8 messages."""
    from commlens.ops import HIERARCHICAL_LEADERS_MAX_BYTES as LEADERS_MAX_BYTES

    small = LEADERS_MAX_BYTES // 2
    hier = predict(EMU, "all_reduce", small, algo="hierarchical", nodes=2, ranks_per_host=4)
    msgs = {
        lvl: sum(t.amount for t in hier.terms if t.kind == "latency" and t.level == lvl)
        for lvl in ("scale_up", "scale_out")
    }
    assert msgs == {"scale_up": 6, "scale_out": 1}
    ring_ = predict(EMU, "all_reduce", small, algo="ring", nodes=2, ranks_per_host=4)
    assert hier.time_s < ring_.time_s
    # from the threshold, powers of two of full hosts: the library runs Rabenseifner's halving, near peers first
    big = predict(EMU, "all_reduce", LEADERS_MAX_BYTES, algo="hierarchical", nodes=2, ranks_per_host=4)
    halving = predict(EMU, "all_reduce", LEADERS_MAX_BYTES, algo="rabenseifner", nodes=2, ranks_per_host=4)
    assert big.time_s == pytest.approx(halving.time_s)
    three = predict(EMU, "all_reduce", LEADERS_MAX_BYTES, algo="hierarchical", nodes=2, ranks_per_host=3)
    assert sum(t.amount for t in three.terms if t.kind == "latency" and t.level == "scale_up") == 2 * 2 * 3  # rings
