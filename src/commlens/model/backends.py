"""What a backend runs when a benchmark used its built-in collectives (``Measurement.algo == "builtin"``).

Calibration and checks compare a measured row with the model of what
actually ran: the algorithm, and the local staging copies the backend makes
around it (charged at the accelerator's copy rate). For gloo both are fixed
by its source and PyTorch's ``ProcessGroupGloo``; for a backend not listed
here (NCCL picks per call) the model's ``auto`` choice stands in, as a tuner
would pick, with no copies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from commlens.model.algorithms import ALGORITHMS
from commlens.model.cost import Cost
from commlens.model.layout import InfeasibleError, Layout
from commlens.model.predict import AUTO, Prediction, _cost, _op_name, _prediction, layout_for, predict

if TYPE_CHECKING:
    from commlens.topology.plain import AnyTopology

__all__ = [
    "A2A_NIC_SHARE",
    "BUILTIN",
    "DEEPEP_ALL_TO_ALL",
    "DEVICE_ALL_TO_ALL",
    "DEVICE_A2A_OPS",
    "EP_KERNEL_NVLINK",
    "HYBRIDEP_ALL_TO_ALL",
    "NCCL_A2A_NVLINK_EXTRA_S",
    "NCCL_A2A_NVLINK_SHARE",
    "NCCL_ALGORITHMS",
    "NCCL_ALGO_ENV",
    "NCCL_BACKENDS",
    "NCCL_PROTOCOLS",
    "NCCL_SMALL_RING_NVLINK",
    "SMALL_RING_OPS",
    "Implementation",
    "Protocol",
    "a2a_nic_share",
    "ep_kernel_nvlink_share",
    "implementation",
    "nccl_candidates",
    "nccl_choice",
    "nccl_predict",
    "nccl_time_s",
    "small_ring_share",
    "within_one_nvlink_domain",
]


@dataclass(frozen=True)
class Implementation:
    """How a backend runs one op: as which modelled op and algorithm, with which local copies."""

    op: str
    algo: str
    copy_size: float = 0.0  # bytes copied locally per byte of the op's size
    copy_shard: float = 0.0  # bytes copied locally per byte of one rank's shard (size / p)
    min_messages: int = 1  # messages each algorithm step is sent as, at least
    segment_bytes: int = 0  # a step's block (size / p) is sent in messages of at most this (0: no limit)

    def copy_bytes(self, size_bytes: int, world_size: int) -> float:
        return self.copy_size * size_bytes + self.copy_shard * size_bytes / world_size

    def messages_per_step(self, size_bytes: int, world_size: int) -> float:
        block = size_bytes / world_size
        split = -(-block // self.segment_bytes) if self.segment_bytes and block > 0 else 1
        return float(max(self.min_messages, split))


BUILTIN: dict[str, dict[str, Implementation]] = {
    "gloo": {
        # gloo/allreduce.cc: ring is the default algorithm, in place; each rank's block goes in segments of
        # at most 1 MiB (kMaxSegmentSize), at least 2 (one in flight while the other is reduced).
        "all_reduce": Implementation("all_reduce", "ring", min_messages=2, segment_bytes=1 << 20),
        # gloo/allgather.cc: ring, each step's block sent as two halves, after copying the rank's input
        # into the output; ProcessGroupGloo then copies gloo's flat output into the output tensor.
        "all_gather": Implementation("all_gather", "ring", copy_size=1.0, copy_shard=1.0, min_messages=2),
        # ProcessGroupGloo::reduce_scatter_tensor_coalesced: all-reduce a clone of the input, copy this
        # rank's chunk out.
        "reduce_scatter": Implementation(
            "all_reduce", "ring", copy_size=1.0, copy_shard=1.0, min_messages=2, segment_bytes=1 << 20
        ),
        # gloo/alltoall.cc: the rank's own chunk copied locally, every send and receive posted at once.
        "all_to_all": Implementation("all_to_all", "direct", copy_shard=1.0),
        # gloo/broadcast.cc: binomial tree, in place.
        "broadcast": Implementation("broadcast", "binomial"),
        # gloo/reduce.cc: ring reduce-scatter, then every rank sends its chunk to the root.
        "reduce": Implementation("reduce", "rabenseifner"),
        # gloo/gather.cc, gloo/scatter.cc: the root exchanges with every rank; ProcessGroupGloo stages
        # through one flat buffer at the root.
        "gather": Implementation("gather", "direct", copy_size=1.0),
        "scatter": Implementation("scatter", "direct", copy_size=1.0),
        "sendrecv": Implementation("sendrecv", "direct"),
        "barrier": Implementation("barrier", "recursive_doubling"),
    },
}


def implementation(backend: str, op: str, algo: str) -> Implementation:
    """What to model a measured row with: a named algorithm as is, ``builtin`` as the backend runs it."""
    if algo in ALGORITHMS:
        return Implementation(op, algo)
    return BUILTIN.get(backend.lower(), {}).get(op, Implementation(op, AUTO))


# What NCCL (and RCCL) choose among for each op, in commlens' algorithm names (NVIDIA/nccl src/include/device.h,
# NCCL_ALGO_RING / TREE / NVLS; CollNet and PAT have no model here). Its tuner's pick per size is not in a log:
# a row of these backends is modelled over these candidates (commlens.expect's band, the monitor's expectation).
NCCL_BACKENDS = ("nccl", "rccl", "cuda")
NCCL_ALGORITHMS: dict[str, tuple[str, ...]] = {
    "all_reduce": ("ring", "double_binary_tree", "nvls"),
    "all_gather": ("ring", "nvls"),
    "reduce_scatter": ("ring", "nvls"),
    "broadcast": ("chain", "ring"),
    "reduce": ("ring",),
    "all_to_all": ("direct",),
    "sendrecv": ("direct",),
    "gather": ("direct",),
    "scatter": ("direct",),
}
# NCCL_ALGO values (case-insensitive) -> commlens algorithms
NCCL_ALGO_ENV: dict[str, str] = {"ring": "ring", "tree": "double_binary_tree", "nvls": "nvls", "nvlstree": "nvls"}


@lru_cache(maxsize=512)  # a handful of (op, nvls, NCCL_ALGO) keys, asked for by every collective priced
def nccl_candidates(op: str, *, nvls: bool = True, nccl_algo: str = "") -> tuple[str, ...]:
    """The algorithms NCCL may run ``op`` with: the one ``NCCL_ALGO`` names when it names one we model, else
    :data:`NCCL_ALGORITHMS` (NVLS only where ``nvls``: the switch has it and NCCL uses it)."""
    forced = nccl_algo.strip().lower()
    if forced and "," not in forced and ":" not in forced and forced in NCCL_ALGO_ENV:
        return (NCCL_ALGO_ENV[forced],)
    return tuple(a for a in NCCL_ALGORITHMS.get(op, ()) if nvls or a != "nvls")


@dataclass(frozen=True)
class Protocol:
    """One NCCL protocol: its latencies relative to LL's (the topologies' figures are LL's) and its share of
    each link's bandwidth."""

    name: str
    launch: float  # base latency of a collective, over LL's
    up: float  # one scale-up (NVLink) ring step, over LL's
    out: float  # one network ring step, over LL's
    rate: float  # share of the link's bandwidth the protocol's payload gets
    out_alone: float  # one network step with one rank per node (NCCL takes the tree's), over LL's ring step


# NVIDIA/nccl src/graph/tuning.cc (at 5067397, ncclTunerConstantsDefaults; ncclTopoTuneModel): every collective runs
# on one (algorithm, protocol) pair, the one with the least latency + size / bandwidth. Ring latencies in us,
# LL / LL128 / Simple: base 6.6 / 14.0 / 8.4, NVLink step 0.6 / 1.9 / 3.4, network step 2.7 / 4.0 / 14.0. LL sends a
# flag with every 4-byte word (busBw * .5), LL128 120 of every 128 bytes (* .92), Simple the whole link but with a
# fence and a flush per step (its larger latency). The topologies give LL's latencies; pairing them with Simple's
# bandwidth is a protocol NCCL does not have.
# With one rank per node "latencies are fully exposed": NCCL prices each network step at the tree's latency, LL /
# LL128 / Simple 5.0 / 8.5 / 14 us.
NCCL_PROTOCOLS: tuple[Protocol, ...] = (
    Protocol("LL", 1.0, 1.0, 1.0, 0.5, 5.0 / 2.7),
    Protocol("LL128", 14.0 / 6.6, 1.9 / 0.6, 4.0 / 2.7, 0.92, 8.5 / 2.7),
    Protocol("Simple", 8.4 / 6.6, 3.4 / 0.6, 14.0 / 2.7, 1.0, 14.0 / 2.7),
)
SIMPLE = NCCL_PROTOCOLS[2]
_PROTOCOL_NAMES = tuple(p.name for p in NCCL_PROTOCOLS)
# NVLS and NVLS-tree run Simple only (tuning.cc: `(a == NVLS || a == NVLS_TREE) && p != SIMPLE` skipped); their
# switch step is already Simple's (the topologies' in_switch_latency_s). Point-to-point (all-to-all, send/recv) is
# not a collective algorithm with protocols: it keeps the topology's figures.
_PROTOCOL_ALGOS = frozenset({"ring", "double_binary_tree", "chain", "nvls"})

_PROTOCOL_LAYOUTS: dict[int, tuple[Layout, tuple[Layout, ...]]] = {}


def _protocol_layouts(layout: Layout) -> tuple[Layout, ...]:
    """``layout`` as each of :data:`NCCL_PROTOCOLS` sees it (remembered per layout object)."""
    hit = _PROTOCOL_LAYOUTS.get(id(layout))
    if hit is not None and hit[0] is layout:
        return hit[1]
    out = tuple(
        layout.evolve(
            launch_s=layout.launch_s * p.launch,
            up_latency_s=layout.up_latency_s * p.up,
            out_latency_s=tuple(
                x * (p.out if layout.ranks_per_host > 1 else p.out_alone) for x in layout.out_latency_s
            ),
            up_rate=layout.up_rate * p.rate,
            up_cached_rate=layout.up_cached_rate * p.rate,
            nic_rate=layout.nic_rate * p.rate,
        )
        for p in NCCL_PROTOCOLS
    )
    if len(_PROTOCOL_LAYOUTS) >= 256:
        _PROTOCOL_LAYOUTS.clear()
    _PROTOCOL_LAYOUTS[id(layout)] = (layout, out)
    return out


# [27 s11 a2anvl] NCCL's all-to-all over a rack's NVLink (NVL72: one scale-up domain spanning several hosts, MNNVL).
# NCCL runs an all-to-all as p - 1 sends and receives on its p2p transport, not as a collective with NCCL's tuned
# protocols, and it falls short of the link twice over. Sized on nccl-tests' alltoall_perf, 8 x A100-SXM4 on NVSwitch
# (microsoft/superbenchmark @ 700d6501 tests/data/nccl_alltoall.log, 1 MiB .. 8 GiB; the same log is
# ../shared/realdata/nccltests/superbench-a100-8gpu-nccl_alltoall.log), the only measured curve over the sizes EP sends:
# - its rate: at 8 GiB busBw is 224.3 GB/s, 0.935 of the 240 GB/s NCCL credits the A100's NVLink (SM80_NVLINK_BW x 12).
#   The racks' own runs at 4-16 GiB agree within 8%: GB200 NVL72 (NCCL 2.27.3) 0.92 of NCCL's 721.8 GB/s over 2 trays
#   (8 ranks), 0.86 over 16 (64 ranks); GB300 NVL72 (NCCL 2.28.7) 0.95 and 0.92 (Oracle's "OCI GPU Quick Start" pages
#   for GB200 and GB300, alltoall_perf -b 512K -e 16G, NCCL_MNNVL_ENABLE=1);
# - a fixed cost the rate does not explain: what the log's time exceeds the model's latency and the bytes at that rate
#   by, per size (what one rank sends, nccl-tests' size): 73-140 us from 1 MiB to 2 GiB, 5-20% of an EP transfer on a
#   rack's NVLink5.
# Checked, not sized, on the Megatron-Core MoE report's Table 7 (arXiv 2603.07685: NCCL all-to-all of DeepSeek-V3's
# dispatch and combine on GB200 at EP 8-64): 735-930 us measured, 577-648 modelled before, 752-828 after
# (tests/test_project_a2anvl.py). Within one host's NVSwitch (DGX H100 / B200) it applies too: the log is itself one
# 8-GPU host's, and without it Table 7's H100 EP 8 was 12-13% fast (with it +4/+5%; docs/project-evidence.md [27 s11 a2anvl]).
# Across domains the NIC sets the pace and the curve says nothing of it (:data:`A2A_NIC_SHARE` there). The GPUs' own
# all-to-all kernels (DeepEP, HybridEP, symmetric memory) are no NCCL p2p: :data:`DEVICE_ALL_TO_ALL` and their own ops.
NCCL_A2A_NVLINK_SHARE = 224.31 / 240.0
NCCL_A2A_NVLINK_EXTRA_S: tuple[tuple[int, float], ...] = (
    (1 << 20, 76.1e-6),
    (2 << 20, 74.2e-6),
    (4 << 20, 72.9e-6),
    (8 << 20, 81.2e-6),
    (16 << 20, 87.8e-6),
    (32 << 20, 99.4e-6),
    (64 << 20, 127.8e-6),
    (128 << 20, 102.8e-6),
    (256 << 20, 134.8e-6),
    (512 << 20, 135.1e-6),
    (1 << 30, 139.8e-6),
    (2 << 30, 126.2e-6),
    (4 << 30, 98.8e-6),
    (8 << 30, 0.0),
)
# An all-to-all run by the GPUs' own kernels rather than NCCL (DeepEP, HybridEP, symmetric-memory reads): the direct
# exchange at the link's rate, without NCCL's p2p costs (:func:`nccl_choice`). DeepEP's and HybridEP's kernels have
# their own ops: inside one NVLink domain they run at their measured rates (:data:`EP_KERNEL_NVLINK`).
DEVICE_ALL_TO_ALL = "device_all_to_all"
DEEPEP_ALL_TO_ALL = "deepep_all_to_all"
HYBRIDEP_ALL_TO_ALL = "hybridep_all_to_all"
DEVICE_A2A_OPS = frozenset({DEVICE_ALL_TO_ALL, DEEPEP_ALL_TO_ALL, HYBRIDEP_ALL_TO_ALL})

# [27 s11 deepepnv] DeepEP's and HybridEP's dispatch and combine inside one NVLink domain, as their own benchmarks
# measured them. Both count "logical" bytes: each token once per destination rank, the local rank included (DeepEP
# tests/legacy/test_intranode.py nvl_recv_bytes = recv_x.numel() * 2; HybridEP tests/test_hybrid_ep.py nvl_dispatch =
# dispatched_hidden.numel() * 2), as the model's EP bytes do (deepep_share). The model sends (p - 1) / p of them over
# the link, so a rate R (logical) is the share R (p - 1) / p of the platform's modelled link rate. Per op and NVLink
# generation: (ranks, dispatch GB/s, combine GB/s) as published, and the modelled link rate of the platform measured.
# - DeepEP normal kernels, NVLink4: H800 EP 8, 4096 tokens of 7168, top-8 of 256, FP8 dispatch, BF16 combine, 24 SMs
#   (the test's only count): 153 / 158 GB/s (deepseek-ai/DeepEP docs/legacy.md at b306af0, 'Intranode'); H800's
#   modelled NVLink is 160 GB/s (deepseek-h800 preset). No H100 figure was found: H100 takes H800's share of its link.
# - DeepEP normal kernels, NVLink5: GB200 EP 8 / 16 / 24 (one NVL72 domain), 4096 tokens of 7168, top-8, 8 experts a
#   rank, BF16, 24 SMs, torch API (the level DeepEP's own figure is taken at): dispatch 512.72 / 442.47 / 450.22,
#   combine 425.95 / 378.32 / 163.62 GB/s (DeepEP hybrid-ep docs/README_Hybrid-EP.md at 41cad944, 'DeepEP Performance
#   Results'). Its B200 EP 8 row at 24 SMs (494 / 420) agrees within 3%; the Megatron-LM DeepSeek-V3 GB200 guide's
#   ~400 / 190 GB/s at EP 32 in NVL72 agrees with the flat-beyond EP 24 figure.
# - HybridEP, NVLink5: GB200 EP 8 / 16 / 24 / 32 / 36, the same shape, 32 SMs (the Megatron-Bridge recipes'
#   moe_hybridep_num_sms), kernel only, BF16 (as [27 s11 a2aib] read its H100 table): dispatch 764.03 / 706.95 /
#   665.97 / 642.23 / 632.31, combine 737.13 / 666.26 / 639.80 / 605.15 / 596.99 GB/s (same README, 'GB200
#   Platform'). Its B200 EP 8 row (16 SMs: 734.95 / 673.84) is within 2% of GB200's at 16 SMs.
# Platform link rates: NCCL's credit, 721.8 GB/s for NVLink5. HybridEP on Hopper and anything on other links keep the
# link's rate: no intranode figure was found. A dispatch and a combine cost the mean of their two times (the harmonic
# mean of the rates); log2-interpolated in ranks, held flat beyond the table. Checked, not sized, on the MoE report's
# Table 7 (HybridEP at EP 8 on GB200 and H100: tests/test_project_mcorerep.py).
EP_KERNEL_NVLINK: dict[tuple[str, str], tuple[float, tuple[tuple[int, float, float], ...]]] = {
    (DEEPEP_ALL_TO_ALL, "nvlink4"): (160e9, ((8, 153.0, 158.0),)),
    (DEEPEP_ALL_TO_ALL, "nvlink5"): (721.8e9, ((8, 512.72, 425.95), (16, 442.47, 378.32), (24, 450.22, 163.62))),
    (HYBRIDEP_ALL_TO_ALL, "nvlink5"): (
        721.8e9,
        (
            (8, 764.03, 737.13),
            (16, 706.95, 666.26),
            (24, 665.97, 639.80),
            (32, 642.23, 605.15),
            (36, 632.31, 596.99),
        ),
    ),
}


# [27 s22 smallring] NCCL's all-gather and reduce-scatter on a ring of fewer than 8 GPUs inside one NVLink domain move
# fewer bytes a second per link than the 8-GPU rings the presets' NVLink rate is sized on (nccl-tests' 8 x H100,
# ring busBw ~370 GB/s). Sized on OpenXLA's measured collective table (xla/service/gpu/model/
# collective_interpolator_data.h at openxla e97611c4, 2026-02-13, generated by xla/tools/collective_perf_table_gen:
# median of 20 runs, bytes / time), entries sm_90 (8 x H100), sm_100_B200 (8 x B200), sm_100_GB200 and sm_103
# (GB200 / GB300 NVL72), groups of 2, 4 and 8 contiguous GPUs run side by side, 4 MiB .. 4 GiB. Against the model,
# measured = a + c x model fits each (op, ranks) within 2-12% rms; c over its 8-GPU value (the harness's own offset,
# 5-15%, divides out): 2 GPUs 1.36 / 1.74 (H100 all-gather / reduce-scatter), 1.47 / 1.45 (B200); 4 GPUs 1.08 / 1.15,
# 1.13 / 1.10, and on NVL72 1.11 / 1.10 (GB200), 1.10 / 1.09 (GB300) against the 8-GPU groups there. Their means:
# the link's rate x 1 / 1.50 on 2 GPUs, x 1 / 1.11 on 4 (log2-interpolated, 1 from 8 on). All-reduce is left alone:
# the table's 8-GPU all-reduce is itself below NCCL's NVLS figure, so it cannot anchor a ratio.
NCCL_SMALL_RING_NVLINK: tuple[tuple[int, float], ...] = ((2, 1.0 / 1.50), (4, 1.0 / 1.11), (8, 1.0))
SMALL_RING_OPS = frozenset({"all_gather", "reduce_scatter"})


def small_ring_share(ranks: int) -> float:
    """The share of the modelled NVLink rate NCCL's all-gather and reduce-scatter reach on ``ranks`` GPUs of one
    NVLink domain (:data:`NCCL_SMALL_RING_NVLINK`); 1 from 8 GPUs on."""
    return _log2_interp(NCCL_SMALL_RING_NVLINK, max(2, ranks))


def ep_kernel_nvlink_share(op: str, link: str, ranks: int) -> float:
    """The share of the modelled link rate DeepEP's or HybridEP's kernels (``op``) reach over ``ranks`` GPUs of one
    NVLink domain whose scale-up link is named ``link`` (:data:`EP_KERNEL_NVLINK`); 1 where nothing was measured."""
    gen = next((g for g in ("nvlink4", "nvlink5") if g in link.lower()), "")
    entry = EP_KERNEL_NVLINK.get((op, gen))
    if entry is None or ranks < 2:
        return 1.0
    rate, rows = entry
    # each row's share: the harmonic mean of its dispatch and combine rates, over the (p - 1) / p of the bytes that
    # leave the GPU, against the modelled link
    shares = tuple((p, 2.0 * d * c / (d + c) * 1e9 * (p - 1) / p / rate) for p, d, c in rows)
    return _log2_interp(shares, ranks)


def _log2_interp(table: tuple[tuple[int, float], ...], x: float) -> float:
    """``table``'s value at ``x``: interpolated in log2 of the key between its rows, held flat beyond its ends."""
    if x <= table[0][0]:
        return table[0][1]
    for (x0, y0), (x1, y1) in zip(table, table[1:]):
        if x <= x1:
            return y0 + math.log2(x / x0) / math.log2(x1 / x0) * (y1 - y0)
    return table[-1][1]


def _a2a_extra_s(size_bytes: int) -> float:
    """:data:`NCCL_A2A_NVLINK_EXTRA_S` at ``size_bytes`` (interpolated in log2 size, held flat beyond the table)."""
    return _log2_interp(NCCL_A2A_NVLINK_EXTRA_S, size_bytes)


# [27 s11 a2aib] An all-to-all across scale-up domains: what one NIC achieves, as a share of its line rate, when every
# GPU exchanges with the GPUs of the other domains over the RDMA fabric (each NIC with its rail peers in N - 1 other
# domains). The model's NIC rate is NCCL's credit for a ring's one peer (48 of 50 GB/s on ConnectX-7 NDR); under an
# all-to-all the NICs reach less, least over 2 domains. Measured by the GPU-driven EP kernels on 8-GPU hosts with one
# 400 Gb/s CX7 per GPU. Their tables count each token once per destination node, their own node included ("logical"
# bandwidth, DeepEP's README says so): the bytes that cross the NIC are that times the remote share, (N - 1) / N for
# routing uniform over the nodes.
# - HybridEP on H100 (deepseek-ai/DeepEP docs/README_Hybrid-EP.md at 41cad944, 'H100 Platform': 4096 tokens of 7168 to
#   top-8 of 8 experts a rank, uniform, kernel-only BF16, the better of its SM counts per op; bytes as
#   tests/test_hybrid_ep.py count_rdma_send_from_routing_map): 2 nodes dispatch 76.80, combine 68.00 GB/s logical ->
#   38.40, 34.00 on the NIC; 4 nodes 57.69, 57.46 -> 43.27, 43.10; 8 nodes 50.55, 51.03 -> 44.23, 44.65.
# - DeepEP V2 (README.md at 0297fc80, 'Performance': 8K tokens of 7168, top-8, FP8 dispatch, BF16 combine; uniform,
#   tests/elastic/test_ep.py): SM90 EP 8 x 2 dispatch 90, combine 81 -> 45.0, 40.5; SM90 EP 8 x 4 61, 61 -> 45.75,
#   45.75; SM100 EP 8 x 2 90, 91 -> 45.0, 45.5.
# - DeepEP V1 internode normal kernels on H800 (docs/legacy.md at 0297fc80; tests/test_internode.py, top-min(N, 4)
#   node groups): EP 32 dispatch 58, combine 57 -> x 3/4 = 43.5, 42.75; EP 64 51, 50 -> x 7/8 (4 of 8 nodes a token,
#   its own one half the time) = 44.63, 43.75. Its EP 16 (43 GB/s: 21.5 on the NIC) is left out: there H800's NVLink
#   (~160 GB/s) binds, its forwarded bytes at ~140 GB/s.
# The mean per node count, over 50 GB/s: 2 -> 41.40 GB/s (0.828), 4 -> 44.02 (0.880), 8 -> 44.31 (0.886);
# log2-interpolated in the domain count, held flat beyond. It caps the NIC rate of NCCL's all-to-all and of the GPUs'
# own kernels (:data:`DEVICE_ALL_TO_ALL`) alike: the NIC's share under all-to-all traffic, whoever posts the writes.
# Checked, not sized, on the MoE report's Table 7 (NCCL's all-to-all on H100 at EP 16 / 32 / 64: 5,774 / 8,059 / 9,164
# us dispatch, 40.7 / 43.7 / 44.9 GB/s on the NIC; tests/test_project_a2aib.py).
A2A_NIC_SHARE: tuple[tuple[int, float], ...] = (
    (2, (38.40 + 34.00 + 45.00 + 40.50 + 45.00 + 45.50) / 6 / 50.0),
    (4, (43.27 + 43.10 + 45.75 + 45.75 + 43.50 + 42.75) / 6 / 50.0),
    (8, (44.23 + 44.65 + 44.63 + 43.75) / 4 / 50.0),
)


def a2a_nic_share(domains: int) -> float:
    """:data:`A2A_NIC_SHARE` for an all-to-all over ``domains`` scale-up domains (log2-interpolated, flat beyond)."""
    return _log2_interp(A2A_NIC_SHARE, domains)


def _a2a_across(topology: AnyTopology, layout: Layout) -> Layout:
    """``layout`` with its NIC rate capped at :func:`a2a_nic_share` of the line rate where an all-to-all crosses
    scale-up domains over an offloaded (GPU- or NIC-driven) fabric; else ``layout`` itself."""
    out = topology.scale_out
    if not layout.multi_domain or layout.host_cores or out is None:
        return layout
    cap = out.nic_bandwidth_bytes_per_s * a2a_nic_share(layout.domains)
    return layout.evolve(nic_rate=cap) if cap < layout.nic_rate else layout


def within_one_nvlink_domain(topology: AnyTopology, layout: Layout) -> bool:
    """Whether ``layout``'s ranks (two or more) sit in one scale-up domain of an NVLink topology and its GPUs drive the
    transfers, whether the domain spans a rack's hosts (NVL72's trays) or is one host's NVSwitch (DGX H100 / B200):
    where NCCL's measured NVLink shares apply (all-to-all, :data:`NCCL_A2A_NVLINK_SHARE`; small rings, [27 s22
    smallring]) and DeepEP's and HybridEP's measured rates [27 s11 a2anvl, lead]."""
    return (
        layout.ranks > 1
        and not layout.multi_domain
        and not layout.host_cores
        and "nvlink" in topology.scale_up.name.lower()
    )


def nccl_choice(
    topology: AnyTopology,
    op: str,
    size_bytes: int,
    *,
    nodes: int = 1,
    ranks_per_host: int | None = None,
    span_nodes: int = 0,
    nvls: bool = True,
) -> tuple[Prediction, str]:
    """What NCCL runs ``op`` with on this job: the fastest of its algorithms (:func:`nccl_candidates`) on each of
    its protocols, as its tuner picks them; (the prediction, the protocol's name).

    Across scale-up domains NCCL's NVLS all-gather and reduce-scatter need CollNet (tuning.cc sets their bandwidth
    to 0 otherwise), so there they run as rings. An op NCCL has no candidate for, or a CPU-driven transport
    (``host_cores``), is predicted as ``auto`` with the topology's figures. NCCL's all-to-all over a rack's NVLink runs
    at its measured share of the link plus its measured fixed cost (:data:`NCCL_A2A_NVLINK_SHARE`); ``op``
    :data:`DEVICE_ALL_TO_ALL` is the same exchange run by the GPUs' own kernels, at the link's rate. Across scale-up
    domains either one's NICs run at their measured share under all-to-all traffic (:data:`A2A_NIC_SHARE`).
    ``span_nodes``: the nodes a strided communicator's ranks range over (:func:`layout_for`). ``nvls`` false: the job
    runs with NVLink SHARP off (NCCL_NVLS_ENABLE=0), so NCCL has no NVLS candidate even where the switch reduces."""
    layout, alone, algos = _nccl_plan(topology, op, size_bytes, nodes, ranks_per_host, span_nodes, nvls)
    if not algos:
        return predict(topology, alone[0], size_bytes, algo=alone[1], layout=layout), ""
    name = _op_name(op)
    _, lay, algo, proto = _nccl_pick(layout, op, name, algos, size_bytes, terms=False)
    # only the winner's terms are kept: it is costed again with them
    return _prediction(lay, name, algo, size_bytes, _cost(lay, name, algo, size_bytes)), proto


def nccl_time_s(
    topology: AnyTopology,
    op: str,
    size_bytes: int,
    *,
    nodes: int = 1,
    ranks_per_host: int | None = None,
    span_nodes: int = 0,
    nvls: bool = True,
) -> float:
    """:func:`nccl_choice`'s time alone, without building its prediction's terms (a projection asks for many)."""
    layout, alone, algos = _nccl_plan(topology, op, size_bytes, nodes, ranks_per_host, span_nodes, nvls)
    if not algos:
        return predict(topology, alone[0], size_bytes, algo=alone[1], layout=layout).time_s
    return _nccl_pick(layout, op, _op_name(op), algos, size_bytes, terms=False)[0].time_s


def _nccl_plan(
    topology: AnyTopology,
    op: str,
    size_bytes: int,
    nodes: int,
    ranks_per_host: int | None,
    span_nodes: int,
    nvls: bool,
) -> tuple[Layout, tuple[str, str], tuple[str, ...]]:
    """(the layout ``op`` runs on, (the op and algorithm to predict it with where NCCL's tuner does not choose: the
    GPUs' own all-to-all as ``all_to_all``, ``direct`` or ``auto``), NCCL's candidates where it does (empty where it
    does not)) for :func:`nccl_choice` and :func:`nccl_time_s`."""
    layout = layout_for(topology, nodes, ranks_per_host, span_nodes)
    if op in DEVICE_A2A_OPS:
        if within_one_nvlink_domain(topology, layout):  # one NVLink domain: DeepEP's and HybridEP's measured rates
            f = ep_kernel_nvlink_share(op, topology.scale_up.name, layout.ranks)
            layout = layout.evolve(up_rate=layout.up_rate * f, up_cached_rate=layout.up_cached_rate * f)
        return _a2a_across(topology, layout), ("all_to_all", "direct"), ()
    if op == "all_to_all" and within_one_nvlink_domain(topology, layout):
        slowed = layout.evolve(
            launch_s=layout.launch_s + _a2a_extra_s(size_bytes),
            up_rate=layout.up_rate * NCCL_A2A_NVLINK_SHARE,
            up_cached_rate=layout.up_cached_rate * NCCL_A2A_NVLINK_SHARE,
        )
        return slowed, (op, "direct"), ()
    if op == "all_to_all":
        layout = _a2a_across(topology, layout)
    if op in SMALL_RING_OPS and layout.ranks < 8 and within_one_nvlink_domain(topology, layout):
        f = small_ring_share(layout.ranks)  # [27 s22 smallring]
        layout = layout.evolve(up_rate=layout.up_rate * f, up_cached_rate=layout.up_cached_rate * f)
    algos = nccl_candidates(op, nvls=nvls and layout.switch_rate > 0)
    if layout.multi_domain and op in ("all_gather", "reduce_scatter"):
        algos = tuple(a for a in algos if a != "nvls")
    if not algos or layout.host_cores:
        return layout, (op, AUTO), ()
    if size_bytes < 0:
        raise InfeasibleError(f"size must be >= 0 bytes, got {size_bytes}")
    return layout, (op, ""), algos


def _nccl_pick(
    layout: Layout, op: str, name: str, algos: tuple[str, ...], size_bytes: int, terms: bool
) -> tuple[Cost, Layout, str, str]:
    """The fastest of ``algos`` running ``op`` (its catalog ``name``) on each of their protocols: (its cost, the
    protocol's layout, the algorithm, the protocol's name); the costs keep their terms only with ``terms``."""
    per_protocol = _protocol_layouts(layout)
    # the candidates' costs are compared, and only the fastest one becomes a prediction (a projection asks for
    # thousands of these)
    best: tuple[Cost, Layout, str, str] | None = None
    reasons = []
    options: tuple[tuple[Layout, str], ...]
    for algo in algos:
        if algo in _PROTOCOL_ALGOS:
            options = ((per_protocol[2], SIMPLE.name),) if algo == "nvls" else tuple(zip(per_protocol, _PROTOCOL_NAMES))
        else:
            options = ((layout, ""),)
        for lay, proto in options:
            try:
                cost = _cost(lay, name, algo, size_bytes, terms=terms)
            except InfeasibleError as e:
                reasons.append(f"{algo}: {e}")
                break
            if best is None or cost.time_s < best[0].time_s:
                best = (cost, lay, algo, proto)
    if best is None:
        raise InfeasibleError(f"NCCL cannot run {op} here: " + "; ".join(reasons))
    return best


def nccl_predict(
    topology: AnyTopology,
    op: str,
    size_bytes: int,
    *,
    nodes: int = 1,
    ranks_per_host: int | None = None,
    span_nodes: int = 0,
    nvls: bool = True,
) -> Prediction:
    """:func:`nccl_choice`'s prediction: the collective as NCCL would run it."""
    return nccl_choice(
        topology, op, size_bytes, nodes=nodes, ranks_per_host=ranks_per_host, span_nodes=span_nodes, nvls=nvls
    )[0]
