"""The expected busBW of one row: the model's figure for the algorithms NCCL may pick, as a band.

Steps of :func:`expectation`:

1. The candidate algorithms: for a backend's own collectives (gloo) the algorithm that backend runs; for NCCL
   the one ``NCCL_ALGO`` names when the run set it, else what NCCL chooses among for the op, NVLS only where the
   system allows it (:func:`commlens.model.backends.nccl_candidates`, shared with the monitor).
2. Each candidate is predicted on the inferred topology; those within ``choice_margin`` of the fastest
   predicted time are the ones NCCL may pick at that size (its tuner's choice is not in the log).
3. The band runs from the slowest of those, less the error, to the fastest, plus it (for the system given: where
   the log lists no NICs, :mod:`commlens.expect.verdict` asks again with a documented build of fewer NICs). The error
   is the bandwidth (or PCIe) error of ``bands.yaml`` plus the share of the model's time spent in launch and latency
   terms times the latency error (all of it from ``latency_bound_share`` on), widened for a topology with
   assumptions. The share also names the row's size range: latency-bound, mid-size (from ``mid_size_share``)
   or bandwidth-bound.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from commlens.expect.system import ExpectError, InferredSystem
from commlens.expect.tables import tables
from commlens.model.backends import NCCL_BACKENDS, implementation, nccl_candidates
from commlens.model.layout import InfeasibleError, Layout
from commlens.model.predict import Prediction, layout_for, predict, predict_implementation
from commlens.ops import OPS
from commlens.results.jsonvalue import JsonObject, JsonValue

__all__ = [
    "BANDWIDTH_BOUND",
    "LATENCY_BOUND",
    "MID_SIZE",
    "BandsTable",
    "Expectation",
    "bands_table",
    "expectation",
    "system_layout",
]

LATENCY_BOUND, MID_SIZE, BANDWIDTH_BOUND = "latency-bound", "mid-size", "bandwidth-bound"


@dataclass(frozen=True)
class Expectation:
    """What a row should reach: the band of busBW, the model's figure, the algorithms and the limiting level."""

    op: str
    size_bytes: int
    lower_bytes_per_s: float
    upper_bytes_per_s: float
    model_bytes_per_s: float  # the fastest candidate's busBW
    algos: tuple[str, ...]
    limit: str  # "NVLink4 + NVSwitch bandwidth", "launch latency", "NIC bandwidth (NDR InfiniBand)"
    size_range: str  # "latency-bound" | "mid-size" | "bandwidth-bound", by the latency share of the model's time
    latency_share: float  # launch and latency terms over the model's time
    error_pct: float

    @property
    def latency_bound(self) -> bool:
        return self.size_range == LATENCY_BOUND

    def as_dict(self) -> JsonObject:
        return {
            "lower_busbw_bytes_per_s": self.lower_bytes_per_s,
            "upper_busbw_bytes_per_s": self.upper_bytes_per_s,
            "model_busbw_bytes_per_s": self.model_bytes_per_s,
            "algos": list(self.algos),
            "limit": self.limit,
            "size_range": self.size_range,
            "latency_share": round(self.latency_share, 4),
            "error_pct": self.error_pct,
        }


class BandsTable(NamedTuple):
    """``bands.yaml``: the error of each kind of term, the latency shares that name a size range, the margin."""

    error_pct: dict[str, float]  # "bandwidth", "pcie", "latency": the error of that kind of term, in percent
    latency_bound_share: float
    mid_size_share: float
    approximate_extra_pct: float
    choice_margin: float


def _number(data: Mapping[str, JsonValue], key: str, where: str) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ExpectError(f"bands.yaml: {where}{key}: expected a number, got {value!r}")
    return value


@functools.cache
def bands_table() -> BandsTable:
    """``bands.yaml``, checked once."""
    data = tables()["bands"]
    if not isinstance(data, dict) or data.get("format") != "commlens.expect-bands/1":
        raise ExpectError("bands.yaml: expected format commlens.expect-bands/1")
    errors = data.get("error_pct")
    if not isinstance(errors, dict):
        raise ExpectError("bands.yaml: error_pct: expected a mapping")
    pct = {}
    for kind in ("bandwidth", "pcie", "latency"):
        entry = errors.get(kind)
        if not isinstance(entry, dict):
            raise ExpectError(f"bands.yaml: error_pct.{kind}: expected a mapping with pct and origin")
        pct[kind] = _number(entry, "pct", f"error_pct.{kind}.")
    return BandsTable(
        error_pct=pct,
        latency_bound_share=_number(data, "latency_bound_share", ""),
        mid_size_share=_number(data, "mid_size_share", ""),
        approximate_extra_pct=_number(data, "approximate_extra_pct", ""),
        choice_margin=_number(data, "choice_margin", ""),
    )


def system_layout(system: InferredSystem) -> Layout:
    """The model's layout of the run's job shape; :class:`ExpectError` if the topology cannot hold it."""
    try:
        return layout_for(system.topology, system.hosts, system.ranks_per_host)
    except InfeasibleError as e:
        raise ExpectError(f"the topology {system.topology.name} cannot hold this run: {e}") from None


def _predictions(
    system: InferredSystem, layout: Layout, backend: str, op: str, size_bytes: int
) -> list[tuple[Prediction, float, float]]:
    """(prediction, time s, busBW B/s) of each candidate that can run: for NCCL each algorithm it chooses among;
    for a backend's own collectives (gloo) what it runs, with its staging copies and messages per step, as
    ``model check`` and the monitor model it."""
    out = []
    if backend and backend.lower() not in NCCL_BACKENDS:
        impl = implementation(backend, op, "builtin")
        try:
            p, time_s = predict_implementation(system.topology, impl, size_bytes, layout, layout.ranks)
        except InfeasibleError:
            return []
        return [(p, time_s, OPS[op].busbw(size_bytes, time_s, layout.ranks))]
    for algo in nccl_candidates(op, nvls=system.nvls_possible, nccl_algo=system.env.get("NCCL_ALGO", "")):
        try:
            p = predict(system.topology, op, size_bytes, algo=algo, layout=layout)
        except InfeasibleError:
            continue
        out.append((p, p.time_s, p.busbw_bytes_per_s))
    return out


def _limit(system: InferredSystem, p: Prediction) -> tuple[str, float]:
    """The level that limits a prediction, in words, and the share of its time that is launch and latency."""
    latency_s = sum(t[4] for t in p.raw_terms if t[5] and t[2] in ("launch", "latency"))
    share = latency_s / p.time_s if p.time_s > 0 else 1.0
    topo = system.topology
    if share >= 0.5:
        return ("launch latency" if latency_s < 2 * topo.launch_latency_s else "message latency"), share
    level = max((t for t in p.raw_terms if t[5] and t[2] not in ("launch", "latency")), key=lambda t: t[4])[1]
    if level == "scale_out" and topo.scale_out is not None:
        return f"NIC bandwidth ({topo.scale_out.name})", share
    if level == "scale_up":
        return ("NVLS" if p.algo == "nvls" else topo.scale_up.name) + " bandwidth", share
    if level == "compute":
        return "reduction on the GPU", share
    return f"{level} bandwidth", share


def expectation(system: InferredSystem, layout: Layout, backend: str, op: str, size_bytes: int) -> Expectation | None:
    """The band for one (op, size) of the run (see the module's steps); None where no algorithm can run it."""
    if op not in OPS or op == "barrier" or size_bytes <= 0:
        return None
    table = bands_table()
    preds = _predictions(system, layout, backend, op, size_bytes)
    if not preds:
        return None
    best = min(preds, key=lambda c: c[1])
    margin = 1.0 + float(table.choice_margin)
    chosen = sorted((c for c in preds if c[1] <= best[1] * margin), key=lambda c: c[1])
    limit, share = _limit(system, best[0])
    full_latency = float(table.latency_bound_share)
    if "PCIe" in system.topology.scale_up.name and "NIC" not in limit:
        bw_pct = table.error_pct["pcie"]
    else:
        bw_pct = table.error_pct["bandwidth"]
    # the latency terms carry the latency error, the bandwidth terms the bandwidth error, in proportion
    pct = bw_pct + (table.error_pct["latency"] - bw_pct) * min(1.0, share / full_latency)
    kind = LATENCY_BOUND if share >= full_latency else MID_SIZE if share >= table.mid_size_share else BANDWIDTH_BOUND
    if system.approximate:
        pct += table.approximate_extra_pct
    fastest = max(c[2] for c in chosen)
    slowest = min(c[2] for c in chosen)
    return Expectation(
        op=op,
        size_bytes=size_bytes,
        lower_bytes_per_s=slowest * (1 - pct / 100),
        upper_bytes_per_s=fastest * (1 + pct / 100),
        model_bytes_per_s=best[2],
        algos=tuple(c[0].algo for c in chosen),
        limit=limit,
        size_range=kind,
        latency_share=share,
        error_pct=float(pct),
    )
