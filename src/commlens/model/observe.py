"""Measured rows as the model sees them: job shape, the algorithm that ran, one time per row."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace

from commlens.model.backends import implementation
from commlens.model.layout import InfeasibleError
from commlens.results.records import Measurement, Run

__all__ = ["STATS", "Observation", "job_shape", "observations"]

STATS: tuple[str, ...] = ("mean", "p50", "min")

# commlens.algos' two-level algorithms with every rank on one host: what they run instead (the docstring of
# commlens.algos.allreduce.hierarchical: "with one host this is the ring").
ONE_HOST: dict[tuple[str, str], str] = {("all_reduce", "hierarchical"): "ring"}


@dataclass(frozen=True)
class Observation:
    """One measured row: where it ran, what the model should run for it, and its time."""

    run_id: str
    backend: str
    op: str
    algo: str  # as recorded: "builtin" or an algorithm name
    size_bytes: int
    in_place: bool
    world_size: int
    nodes: int
    ranks_per_host: int
    model_op: str
    model_algo: str
    measured_s: float
    copy_bytes: float = 0.0  # the backend's local staging copies
    messages_per_step: float = 1.0  # messages the backend sends per algorithm step


def job_shape(run: Run) -> tuple[int, int]:
    """(nodes, ranks per node) of a run, from its hosts; one node when the run names none."""
    nodes = max(len(run.system.hosts), 1)
    if run.world_size % nodes:
        raise InfeasibleError(f"run {run.run_id[:12]}: {run.world_size} ranks do not split evenly over {nodes} hosts")
    return nodes, run.world_size // nodes


def _time(m: Measurement, stat: str) -> float | None:
    s = m.stats
    return {"mean": s.mean_s, "p50": s.p50_s, "min": s.min_s}[stat]


def observations(
    runs: Iterable[Run], stat: str = "mean", min_size_bytes: int = 1, algos: Collection[str] | None = None
) -> list[Observation]:
    """Every row of ``runs`` with a positive time and a size >= ``min_size_bytes`` (barriers excluded).

    ``algos``: only rows that ran one of these (``builtin`` for the backend's own collectives); ``auto``
    rows are left out unless asked for, since what they ran varies with the size.
    """
    if stat not in STATS:
        raise ValueError(f"stat must be one of {', '.join(STATS)}, got {stat!r}")
    out: list[Observation] = []
    for run in runs:
        nodes, ranks_per_host = job_shape(run)
        backend = run.system.backend or ""
        for m in run.measurements:
            t = _time(m, stat)
            if m.op == "barrier" or m.size_bytes < max(min_size_bytes, 1) or t is None or t <= 0:
                continue
            if (m.algo not in algos) if algos is not None else m.algo == "auto":
                continue
            impl = implementation(backend, m.op, m.algo)
            if nodes == 1 and (m.op, m.algo) in ONE_HOST:
                impl = replace(impl, algo=ONE_HOST[(m.op, m.algo)])
            out.append(
                Observation(
                    run.run_id,
                    backend,
                    m.op,
                    m.algo,
                    m.size_bytes,
                    m.in_place,
                    m.world_size,
                    nodes,
                    ranks_per_host,
                    impl.op,
                    impl.algo,
                    t,
                    impl.copy_bytes(m.size_bytes, m.world_size),
                    impl.messages_per_step(m.size_bytes, m.world_size),
                )
            )
    return out
