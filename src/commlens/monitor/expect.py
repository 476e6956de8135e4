"""What a collective should take here: the cost model's time for its op, size and group span.

The group's span is how many hosts its ranks sit on, from the launcher's
placement (``LOCAL_WORLD_SIZE`` ranks per host, ranks numbered host after
host, as ``torchrun`` places them). The model is a topology (a preset or a
file written by ``commlens model fit``); with the backend's own collectives
(gloo) the row is modelled as the backend runs it
(:mod:`commlens.model.backends`), as ``model check`` does. The description
names the model and its calibration, or says that the preset's constants are
uncalibrated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from commlens.model.backends import NCCL_BACKENDS, implementation, nccl_candidates
from commlens.model.layout import InfeasibleError, Layout
from commlens.model.predict import Prediction, layout_for, predict, predict_implementation
from commlens.ops import get_op
from commlens.topology import Topology

__all__ = ["Expectation", "Expectations", "describe_model", "group_span"]


@dataclass(frozen=True)
class Expectation:
    time_s: float
    busbw_bytes_per_s: float
    algo: str  # the modelled algorithm (``ring``)


def group_span(ranks: tuple[int, ...], ranks_per_host: int) -> tuple[int, int]:
    """(hosts, ranks per host) of a group whose global ranks are ``ranks``, ranks packed host by host."""
    per_host: dict[int, int] = {}
    for r in ranks:
        per_host[r // max(ranks_per_host, 1)] = per_host.get(r // max(ranks_per_host, 1), 0) + 1
    hosts = len(per_host)
    counts = set(per_host.values())
    return hosts, (counts.pop() if len(counts) == 1 else max(per_host.values()))


def describe_model(topology: Topology | None) -> str:
    """``model local-cpu, calibrated by commlens model fit on run f56f2a2031dd (gloo, 105 rows)``."""
    if topology is None:
        return "no model: no topology given and none known for this device"
    cal = topology.calibration
    if not cal:
        return f"model {topology.name}: preset constants, not calibrated on this cluster (commlens model fit)"
    listed_runs, listed_backends = cal.get("runs"), cal.get("backends")
    runs = ", ".join(str(r)[:12] for r in listed_runs) if isinstance(listed_runs, list) else ""
    backends = "/".join(str(b) for b in listed_backends) if isinstance(listed_backends, list) else ""
    rows = cal.get("rows")
    return f"model {topology.name}, calibrated by {cal.get('tool', 'commlens model fit')} on run {runs} ({backends}, {rows} rows)"


class Expectations:
    """The model's expectation per (op, size, group), remembered (a window asks for the same ones often)."""

    def __init__(self, topology: Topology | None, backend: str, ranks_per_host: int) -> None:
        self.topology = topology
        self.backend = backend
        self.ranks_per_host = max(ranks_per_host, 1)
        self.description = describe_model(topology)
        self.model = topology.name if topology is not None else ""
        self._cache: dict[tuple[str, int, tuple[int, ...]], Expectation | None] = {}

    def expected(self, op: str, size_bytes: int, group_ranks: tuple[int, ...]) -> Expectation | None:
        """None when there is no model, or the model cannot run this (the reason is logged once)."""
        if self.topology is None or op == "barrier" or size_bytes <= 0:
            return None
        key = (op, size_bytes, group_ranks)
        if key in self._cache:
            return self._cache[key]
        out = None
        nodes, per_host = group_span(group_ranks, self.ranks_per_host)
        try:
            layout = layout_for(self.topology, nodes, per_host)
            if self.backend.lower() in NCCL_BACKENDS:  # the fastest of what NCCL chooses among, as commlens expect
                p = _fastest_nccl(self.topology, op, size_bytes, layout)
                time_s = p.time_s  # no staging copies
            else:
                impl = implementation(self.backend, op, "builtin")
                p, time_s = predict_implementation(self.topology, impl, size_bytes, layout, len(group_ranks))
            spec = get_op(op)
            if time_s > 0 and math.isfinite(time_s):
                out = Expectation(time_s, spec.busbw(size_bytes, time_s, len(group_ranks)), p.algo)
        except InfeasibleError:
            out = None
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[key] = out
        return out


def _fastest_nccl(topology: Topology, op: str, size_bytes: int, layout: Layout) -> Prediction:
    """The fastest prediction among the algorithms NCCL chooses among for ``op`` (InfeasibleError if none runs)."""
    best: Prediction | None = None
    for algo in nccl_candidates(op, nvls=topology.scale_up.in_switch_reduction):
        try:
            p = predict(topology, op, size_bytes, algo=algo, layout=layout)
        except InfeasibleError:
            continue
        if best is None or p.time_s < best.time_s:
            best = p
    if best is None:
        raise InfeasibleError(f"no algorithm NCCL runs can run {op} here")
    return best
