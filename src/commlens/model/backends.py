"""What a backend runs when a benchmark used its built-in collectives (``Measurement.algo == "builtin"``).

Calibration and checks compare a measured row with the model of what
actually ran: the algorithm, and the local staging copies the backend makes
around it (charged at the accelerator's copy rate). For gloo both are fixed
by its source and PyTorch's ``ProcessGroupGloo``; for a backend not listed
here (NCCL picks per call) the model's ``auto`` choice stands in, as a tuner
would pick, with no copies.
"""

from __future__ import annotations

from dataclasses import dataclass

from commlens.model.algorithms import ALGORITHMS
from commlens.model.predict import AUTO

__all__ = [
    "BUILTIN",
    "NCCL_ALGORITHMS",
    "NCCL_ALGO_ENV",
    "NCCL_BACKENDS",
    "Implementation",
    "implementation",
    "nccl_candidates",
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
