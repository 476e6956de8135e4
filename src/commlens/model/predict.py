"""Predict a collective's time, algBW and busBW on a topology; pick the fastest algorithm (``auto``).

algBW and busBW follow nccl-tests exactly (size / time, times the op's busBW
factor from :mod:`commlens.ops`), so a predicted row reads like a measured one.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from commlens.errors import CommlensError
from commlens.model.algorithms import ALGORITHMS, MODELS, algorithms_for, auto_candidates
from commlens.model.cost import Cost, Term, make_terms
from commlens.model.layout import InfeasibleError, Layout, build_layout
from commlens.ops import OPS, get_op
from commlens.results.nccltests_json import to_nccl_tests

if TYPE_CHECKING:
    from commlens.model.backends import Implementation
    from commlens.topology.plain import AnyTopology  # the pydantic spec or its plain form: the model reads either

__all__ = [
    "AUTO",
    "PredictError",
    "Prediction",
    "TableRow",
    "layout_for",
    "predict",
    "predict_algorithms",
    "predict_implementation",
    "predicted_table",
    "sweep",
    "sweep_sizes",
]

AUTO = "auto"


class PredictError(CommlensError, ValueError):
    """A prediction request that is not valid: a sweep's sizes or step factor, an unknown dtype."""


@dataclass(frozen=True, slots=True)
class Prediction:
    """One predicted row: what ran where, how long it takes, and why."""

    op: str
    algo: str
    size_bytes: int
    world_size: int
    nodes: int
    ranks_per_host: int
    topology: str
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    raw_terms: tuple[tuple, ...]
    chosen_by_auto: bool = False

    @property
    def terms(self) -> tuple[Term, ...]:
        """What the time is made of, term by term (built on demand: predictions in a sweep are many)."""
        return make_terms(self.raw_terms)

    @property
    def bottleneck(self) -> str:
        """The level and term that weigh most on the critical path (``scale_out bandwidth``)."""
        best = max((t for t in self.raw_terms if t[5]), key=lambda t: t[4])
        return f"{best[1]} {best[2]}"

    def breakdown(self) -> list[dict[str, object]]:
        """Every term as a dict: stage, level, term, amount, time_s, critical."""
        return [t.as_dict() for t in self.terms]

    def as_dict(self, with_breakdown: bool = True) -> dict[str, object]:
        out: dict[str, object] = {
            "op": self.op,
            "algo": self.algo,
            "auto": self.chosen_by_auto,
            "size_bytes": self.size_bytes,
            "world_size": self.world_size,
            "nodes": self.nodes,
            "ranks_per_node": self.ranks_per_host,
            "topology": self.topology,
            "time_s": self.time_s,
            "algbw_bytes_per_s": self.algbw_bytes_per_s,
            "busbw_bytes_per_s": self.busbw_bytes_per_s,
            "bottleneck": self.bottleneck,
        }
        if with_breakdown:
            out["breakdown"] = self.breakdown()
        return out


_LAYOUTS: dict[tuple[int, int, int | None, int], tuple[AnyTopology, Layout]] = {}


def layout_for(topology: AnyTopology, nodes: int, ranks_per_host: int | None, span_nodes: int = 0) -> Layout:
    """:func:`build_layout`, remembered per topology object and job shape (sweeps ask for the same one often).

    ``span_nodes``: the nodes the job's ranks range over when they are not consecutive (a communicator strided over
    a larger job); its fabric crossings then climb to the lowest tier holding that span ([27 s13 roce405])."""
    key = (id(topology), nodes, ranks_per_host, span_nodes)
    hit = _LAYOUTS.get(key)
    if hit is not None and hit[0] is topology:
        return hit[1]
    layout = build_layout(topology, nodes, ranks_per_host)
    if nodes > 1 and span_nodes > nodes and span_nodes > topology.domain_nodes and layout.nic_rate > 0:
        layout = _strided_over_domains(layout, topology.domain_nodes, span_nodes)
    if len(_LAYOUTS) >= 256:
        _LAYOUTS.clear()
    _LAYOUTS[key] = (topology, layout)
    return layout


def _strided_over_domains(layout: Layout, domain_nodes_full: int, span_nodes: int) -> Layout:
    """A strided communicator (its ranks ``span_nodes`` nodes apart from first to last, evenly): the scale-up domains
    its ranks sit in, and the fabric tier its crossings reach ([27 s13 roce405]). [27 s21 span] With domains of
    several nodes (NVL72 racks of 18 trays) a strided group holds fewer ranks a domain than the same nodes side by
    side: an expert-data-parallel group of 4 ranks 8 trays apart spans 25 trays, two racks, though 4 trays fit in one;
    64 ranks 8 trays apart hold 2-3 a rack, not 16. As many ranks share a domain as the stride lets (placed from a
    domain's start); the domain count is rounded up to one that divides the nodes, as :func:`build_layout` splits a
    job; a count no larger than the side-by-side one changes nothing."""
    stride = (span_nodes - 1) / (layout.nodes - 1)
    per_domain = int((domain_nodes_full - 1) // stride) + 1
    domains = -(-layout.nodes // per_domain)
    while layout.nodes % domains:
        domains += 1
    if domains > layout.domains:  # more domains than the same nodes placed side by side would fill
        domain_nodes = layout.nodes // domains
        layout = layout.evolve(
            domains=domains, domain_nodes=domain_nodes, domain_ranks=domain_nodes * layout.ranks_per_host
        )
    if not layout.multi_domain:
        return layout
    return layout.evolve(job_tier=max(layout.job_tier, layout.tier_for_span(span_nodes)))


def _op_name(op: str) -> str:
    return op if op in OPS else get_op(op).name


def _cost(
    layout: Layout, op: str, algo: str, size_bytes: int, messages_per_step: float = 1.0, terms: bool = True
) -> Cost:
    """The stages of ``algo`` running ``op`` on ``layout``; :class:`InfeasibleError` if it cannot. Without
    ``terms`` the cost keeps its time only."""
    try:
        model = MODELS[op][algo]
    except KeyError:
        if algo not in ALGORITHMS:
            raise InfeasibleError(f"unknown algorithm {algo!r}; known: {', '.join(ALGORITHMS)} or auto") from None
        raise InfeasibleError(f"no {algo} algorithm for {op}; {op} has: {', '.join(algorithms_for(op))}") from None
    cost = Cost(layout.for_size(size_bytes) if layout.up_cache_bytes else layout, messages_per_step, terms=terms)
    if layout.ranks > 1:
        model(cost, float(size_bytes))
    return cost


def _prediction(layout: Layout, op: str, algo: str, size_bytes: int, cost: Cost, auto: bool = False) -> Prediction:
    time_s = cost.time_s
    algbw = size_bytes / time_s if time_s > 0 else 0.0
    return Prediction(
        op,
        algo,
        size_bytes,
        layout.ranks,
        layout.nodes,
        layout.ranks_per_host,
        layout.topology,
        time_s,
        algbw,
        algbw * OPS[op].busbw_factor(layout.ranks),
        cost.raw_terms(),
        auto,
    )


def predict(
    topology: AnyTopology,
    op: str,
    size_bytes: int,
    *,
    nodes: int = 1,
    ranks_per_host: int | None = None,
    algo: str = AUTO,
    layout: Layout | None = None,
    messages_per_step: float = 1.0,
) -> Prediction:
    """Predict one collective; ``algo="auto"`` picks the fastest feasible algorithm.

    ``messages_per_step``: for a backend that sends each algorithm step as
    several messages (gloo's segments), each paying the latency.

    Raises :class:`InfeasibleError` (with the reason) when the job shape or
    the algorithm cannot run on the topology, ``UnknownOpError`` for an op
    not in the catalog.
    """
    if size_bytes < 0:
        raise InfeasibleError(f"size must be >= 0 bytes, got {size_bytes}")
    name = op if op in OPS else _op_name(op)
    if layout is None:
        layout = layout_for(topology, nodes, ranks_per_host)
    if algo != AUTO:
        return _prediction(layout, name, algo, size_bytes, _cost(layout, name, algo, size_bytes, messages_per_step))
    best: Cost | None = None
    best_algo = ""
    reasons = []
    for candidate in auto_candidates(name):
        try:
            cost = _cost(layout, name, candidate, size_bytes, messages_per_step)
        except InfeasibleError as e:
            reasons.append(f"{candidate}: {e}")
            continue
        if best is None or cost.time_s < best.time_s:
            best, best_algo = cost, candidate
    if best is None:
        raise InfeasibleError(f"no algorithm can run {name} here: " + "; ".join(reasons))
    return _prediction(layout, name, best_algo, size_bytes, best, auto=True)


def predict_algorithms(
    topology: AnyTopology,
    op: str,
    size_bytes: int,
    *,
    nodes: int = 1,
    ranks_per_host: int | None = None,
    layout: Layout | None = None,
) -> dict[str, Prediction | InfeasibleError]:
    """Every algorithm with a model for ``op``: its prediction, or the reason it cannot run."""
    name = _op_name(op)
    if layout is None:
        layout = layout_for(topology, nodes, ranks_per_host)
    out: dict[str, Prediction | InfeasibleError] = {}
    for algo in algorithms_for(name):
        try:
            out[algo] = _prediction(layout, name, algo, size_bytes, _cost(layout, name, algo, size_bytes))
        except InfeasibleError as e:
            out[algo] = e
    return out


def predict_implementation(
    topology: AnyTopology, impl: Implementation, size_bytes: int, layout: Layout, ranks: int
) -> tuple[Prediction, float]:
    """A collective as a backend runs it (:mod:`commlens.model.backends`): the prediction of its algorithm, each
    step sent as its messages, and the time with its local staging copies at the accelerator's copy rate.
    ``ranks``: the group's size. :class:`InfeasibleError` where it cannot run."""
    messages = impl.messages_per_step(size_bytes, ranks)
    p = predict(topology, impl.op, size_bytes, algo=impl.algo, layout=layout, messages_per_step=messages)
    return p, p.time_s + impl.copy_bytes(size_bytes, ranks) / layout.copy_rate


def sweep(
    topology: AnyTopology,
    ops: Iterable[str],
    sizes: Iterable[int],
    *,
    nodes: int = 1,
    ranks_per_host: int | None = None,
    algo: str = AUTO,
) -> Iterator[Prediction | InfeasibleError]:
    """The predicted nccl-tests table: one row per (op, size), in that order; infeasible rows as errors."""
    layout = layout_for(topology, nodes, ranks_per_host)
    sizes = list(sizes)
    for op in ops:
        for size in sizes:
            try:
                yield predict(topology, op, size, algo=algo, layout=layout)
            except InfeasibleError as e:
                yield e


@dataclass(frozen=True, slots=True)
class TableRow:
    """One row of a predicted nccl-tests table: the size and count nccl-tests would run, and its prediction
    (or the reason no algorithm can run it). ``redop`` and ``root`` are None for ops without them."""

    op: str
    size_bytes: int
    count: int
    dtype: str
    redop: str | None
    root: int | None
    prediction: Prediction | None
    infeasible: str | None = None

    def as_dict(self) -> dict[str, object]:
        """The row as ``commlens model predict --sweep --json`` prints it (nccl-tests' ``none`` and ``-1``)."""
        redop, root = to_nccl_tests(self.redop, self.root)
        out: dict[str, object] = {
            "op": self.op,
            "size_bytes": self.size_bytes,
            "count": self.count,
            "type": self.dtype,
            "redop": redop,
            "root": root,
        }
        if self.prediction is None:
            out["infeasible"] = self.infeasible
        else:
            out.update({k: v for k, v in self.prediction.as_dict(with_breakdown=False).items() if k not in out})
        return out


def sweep_sizes(min_bytes: int, max_bytes: int, step_factor: int) -> list[int]:
    """The requested sizes of nccl-tests' ``-b MIN -e MAX -f FACTOR``: MIN, MIN*FACTOR, ... up to MAX."""
    if step_factor < 2:
        raise PredictError(f"step factor must be >= 2, got {step_factor}")
    if min_bytes < 1 or max_bytes < min_bytes:
        raise PredictError(f"sizes must satisfy 1 <= min <= max, got {min_bytes} and {max_bytes}")
    sizes = []
    size = min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= step_factor
    return sizes


def predicted_table(
    topology: AnyTopology, ops: Iterable[str], sizes: Iterable[int], *, dtype: str, layout: Layout, algo: str = AUTO
) -> list[TableRow]:
    """The predicted nccl-tests table: per op and requested size, the size nccl-tests runs (rounded to whole
    elements per rank) and its prediction. An unknown ``dtype`` raises PredictError."""
    from commlens.results.records import DTYPE_SIZES

    if dtype not in DTYPE_SIZES:
        raise PredictError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPE_SIZES)}")
    elem = DTYPE_SIZES[dtype]
    sizes = list(sizes)
    rows: list[TableRow] = []
    for op in ops:
        spec = OPS[_op_name(op)]
        for requested in sizes:
            plan = spec.plan_size(requested, elem, layout.ranks)
            redop, root = ("sum" if spec.reduces else None), (0 if spec.has_root else None)
            try:
                pred = predict(topology, spec.name, plan.size_bytes, algo=algo, layout=layout)
            except InfeasibleError as e:
                rows.append(TableRow(spec.name, plan.size_bytes, plan.count, dtype, redop, root, None, str(e)))
            else:
                rows.append(TableRow(spec.name, plan.size_bytes, plan.count, dtype, redop, root, pred))
    return rows
