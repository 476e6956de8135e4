"""What a backend runs when a benchmark used its built-in collectives (``Measurement.algo == "builtin"``).

Calibration and checks compare a measured row with the model of what
actually ran: the algorithm, and the local staging copies the backend makes
around it (charged at the accelerator's copy rate). For gloo both are fixed
by its source and PyTorch's ``ProcessGroupGloo``; for a backend not listed
here (NCCL picks per call) the model's ``auto`` choice stands in, as a tuner
would pick, with no copies.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from commlens.model.algorithms import ALGORITHMS
from commlens.model.layout import InfeasibleError, Layout
from commlens.model.predict import AUTO, Prediction, layout_for, predict

if TYPE_CHECKING:
    from commlens.topology.plain import AnyTopology

__all__ = [
    "BUILTIN",
    "NCCL_ALGORITHMS",
    "NCCL_ALGO_ENV",
    "NCCL_BACKENDS",
    "NCCL_PROTOCOLS",
    "Implementation",
    "Protocol",
    "implementation",
    "nccl_candidates",
    "nccl_choice",
    "nccl_predict",
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
        replace(
            layout,
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


def nccl_choice(
    topology: AnyTopology, op: str, size_bytes: int, *, nodes: int = 1, ranks_per_host: int | None = None
) -> tuple[Prediction, str]:
    """What NCCL runs ``op`` with on this job: the fastest of its algorithms (:func:`nccl_candidates`) on each of
    its protocols, as its tuner picks them; (the prediction, the protocol's name).

    Across scale-up domains NCCL's NVLS all-gather and reduce-scatter need CollNet (tuning.cc sets their bandwidth
    to 0 otherwise), so there they run as rings. An op NCCL has no candidate for, or a CPU-driven transport
    (``host_cores``), is predicted as ``auto`` with the topology's figures."""
    layout = layout_for(topology, nodes, ranks_per_host)
    algos = nccl_candidates(op, nvls=layout.switch_rate > 0)
    if layout.multi_domain and op in ("all_gather", "reduce_scatter"):
        algos = tuple(a for a in algos if a != "nvls")
    if not algos or layout.host_cores:
        return predict(topology, op, size_bytes, layout=layout), ""
    per_protocol = _protocol_layouts(layout)
    best: tuple[Prediction, str] | None = None
    reasons = []
    options: tuple[tuple[Layout, str], ...]
    for algo in algos:
        if algo in _PROTOCOL_ALGOS:
            options = (
                ((per_protocol[2], SIMPLE.name),)
                if algo == "nvls"
                else tuple(zip(per_protocol, (p.name for p in NCCL_PROTOCOLS)))
            )
        else:
            options = ((layout, ""),)
        for lay, proto in options:
            try:
                pred = predict(topology, op, size_bytes, algo=algo, layout=lay)
            except InfeasibleError as e:
                reasons.append(f"{algo}: {e}")
                break
            if best is None or pred.time_s < best[0].time_s:
                best = (pred, proto)
    if best is None:
        raise InfeasibleError(f"NCCL cannot run {op} here: " + "; ".join(reasons))
    return best


def nccl_predict(
    topology: AnyTopology, op: str, size_bytes: int, *, nodes: int = 1, ranks_per_host: int | None = None
) -> Prediction:
    """:func:`nccl_choice`'s prediction: the collective as NCCL would run it."""
    return nccl_choice(topology, op, size_bytes, nodes=nodes, ranks_per_host=ranks_per_host)[0]
