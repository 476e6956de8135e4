"""Calibrate a topology's constants from measured runs by robust regression.

Steps (``fit``):

1. Turn every measured row into an :class:`~commlens.model.observe.Observation`
   (job shape from the run's hosts; the algorithm and staging copies of what
   the backend ran, :mod:`commlens.model.backends`).
2. Pick the constants the rows can inform: the launch cost, scale-up
   latency and rate always; the cached rate if the rows straddle the
   level's ``cache_bytes``; the reduction rate if a row reduces; the copy
   rate if the backend copies; scale-out latency and rate if a row spans
   scale-up domains. The others keep the template's values.
3. Minimise the robust loss (soft L1, scale 10%) of the log ratio
   predicted / measured over the constants' logarithms
   (``scipy.optimize.least_squares``): every row weighs by its relative
   error, the constants stay positive, and outliers (a descheduled
   iteration on a shared machine) pull far less than in least squares.
4. Uncertainties from the Jacobian at the optimum, weighted as the loss
   weighs each row: cov = s^2 (J'WJ)^-1 with s^2 the weighted residual
   variance; reported as a relative standard error per constant. A
   constant the rows cannot pin down (relative error above 100%, e.g. the
   reduction rate when every reducing row reduces in proportion to what it
   sends) keeps the template's value, and the others are fitted again.
5. Write the fitted constants into a copy of the template: latencies as
   fitted; each rate as the efficiency of the template's line rate (the line
   rate is raised, with efficiency 1, when the measured rate exceeds it);
   every changed origin says which runs it was fitted on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, TypedDict

from commlens.errors import CommlensError
from commlens.model.layout import Layout
from commlens.model.observe import Observation, observations
from commlens.model.predict import layout_for, predict
from commlens.ops import OPS
from commlens.results.records import Run
from commlens.topology import Topology, topology_from_dict, topology_to_dict

__all__ = ["FitError", "FitResult", "FittedParam", "Residual", "fit", "fit_runs", "predict_observations"]

LOSS: Final = "soft_l1"
F_SCALE = 0.1  # residuals (log ratios) beyond ~10% count linearly, not quadratically
MAX_RELATIVE_STDERR = 1.0  # a constant known worse than a factor e either way is not determined: held


class FitError(CommlensError, ValueError):
    """Runs that cannot calibrate a topology (no usable rows, nothing to fit)."""


class _Changes(TypedDict, total=False):
    """The Layout fields a fitted constant changes, with their new values."""

    launch_s: float
    up_latency_s: float
    up_rate: float
    switch_rate: float
    up_cached_rate: float
    reduce_rate: float
    copy_rate: float
    nic_rate: float
    out_latency_s: tuple[float, ...]


@dataclass(frozen=True)
class _Param:
    name: str
    unit: str
    get: Callable[[Layout], float]
    put: Callable[[Layout, float], _Changes]  # the layout fields that change


def _out_latency(L: Layout, v: float) -> _Changes:
    shift = v - L.out_latency_s[0]
    return {"out_latency_s": tuple(t + shift for t in L.out_latency_s)}


def _up_rate(L: Layout, v: float) -> _Changes:
    ratio = L.switch_rate / L.up_rate if L.up_rate > 0 else 0.0
    return {"up_rate": v, "switch_rate": v * ratio}


_PARAMS: tuple[_Param, ...] = (
    _Param("launch_latency_s", "s", lambda L: L.launch_s, lambda L, v: {"launch_s": v}),
    _Param("scale_up.latency_s", "s", lambda L: L.up_latency_s, lambda L, v: {"up_latency_s": v}),
    _Param("scale_up.rate_bytes_per_s", "B/s", lambda L: L.up_rate, _up_rate),
    _Param("scale_up.cached_rate_bytes_per_s", "B/s", lambda L: L.up_cached_rate, lambda L, v: {"up_cached_rate": v}),
    _Param("accelerator.reduction_bytes_per_s", "B/s", lambda L: L.reduce_rate, lambda L, v: {"reduce_rate": v}),
    _Param("accelerator.copy_bytes_per_s", "B/s", lambda L: L.copy_rate, lambda L, v: {"copy_rate": v}),
    _Param("scale_out.latency_s", "s", lambda L: L.out_latency_s[0], _out_latency),
    _Param("scale_out.rate_bytes_per_s", "B/s", lambda L: L.nic_rate, lambda L, v: {"nic_rate": v}),
)


@dataclass(frozen=True)
class FittedParam:
    """One constant: its fitted value and relative standard error, or why it kept the template's value."""

    name: str
    unit: str
    initial: float
    value: float
    relative_stderr: float | None  # None when held
    held_because: str | None = None

    @property
    def stderr(self) -> float | None:
        return None if self.relative_stderr is None else self.value * self.relative_stderr

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "unit": self.unit,
            "initial": self.initial,
            "value": self.value,
            "relative_stderr": self.relative_stderr,
            "held": self.held_because,
        }


@dataclass(frozen=True)
class Residual:
    """A row, what the model predicts for it, and the relative error (predicted - measured) / measured."""

    obs: Observation
    predicted_s: float

    @property
    def error(self) -> float:
        return (self.predicted_s - self.obs.measured_s) / self.obs.measured_s

    def busbw(self, time_s: float) -> float:
        return OPS[self.obs.op].busbw(self.obs.size_bytes, time_s, self.obs.world_size)

    def as_dict(self) -> dict[str, object]:
        """The row as ``commlens model fit/check --json`` prints it."""
        o = self.obs
        return {
            "run_id": o.run_id,
            "op": o.op,
            "algo": o.algo,
            "model": f"{o.model_op}/{o.model_algo}",
            "size_bytes": o.size_bytes,
            "in_place": o.in_place,
            "world_size": o.world_size,
            "measured_s": o.measured_s,
            "predicted_s": self.predicted_s,
            "error_pct": 100.0 * self.error,
            "measured_busbw_bytes_per_s": self.busbw(o.measured_s),
            "predicted_busbw_bytes_per_s": self.busbw(self.predicted_s),
        }


@dataclass(frozen=True)
class FitResult:
    """The calibrated topology, its constants with uncertainties, and every row's residual."""

    topology: Topology
    params: tuple[FittedParam, ...]
    residuals: tuple[Residual, ...]
    runs: tuple[str, ...]
    stat: str
    cost: float  # the robust loss at the optimum

    @property
    def mape_pct(self) -> float:
        return 100.0 * sum(abs(r.error) for r in self.residuals) / len(self.residuals)

    @property
    def max_ape_pct(self) -> float:
        return 100.0 * max(abs(r.error) for r in self.residuals)

    def as_dict(self) -> dict[str, object]:
        """The calibrated topology, the constants, the error and every residual (``model fit --json``)."""
        from commlens.topology import topology_to_dict

        return {
            "topology": topology_to_dict(self.topology),
            "parameters": [p.as_dict() for p in self.params],
            "mape_pct": self.mape_pct,
            "max_ape_pct": self.max_ape_pct,
            "stat": self.stat,
            "residuals": [r.as_dict() for r in self.residuals],
        }


def _layouts(topology: Topology, obs: Sequence[Observation]) -> list[Layout]:
    return [layout_for(topology, o.nodes, o.ranks_per_host) for o in obs]


def predict_observations(
    topology: Topology, obs: Sequence[Observation], layouts: Sequence[Layout] | None = None
) -> list[float]:
    """The model's time for each row, with the algorithm the row ran."""
    layouts = layouts if layouts is not None else _layouts(topology, obs)
    return [
        predict(
            topology, o.model_op, o.size_bytes, algo=o.model_algo, layout=L, messages_per_step=o.messages_per_step
        ).time_s
        + o.copy_bytes / L.copy_rate
        for o, L in zip(obs, layouts)
    ]


def _informs(param: _Param, obs: Sequence[Observation], layouts: Sequence[Layout]) -> str | None:
    """Why the rows cannot inform ``param`` (None when they can)."""
    if param.name.startswith("scale_out") and not any(L.multi_domain for L in layouts):
        return "no row spans more than one scale-up domain"
    if param.name == "accelerator.reduction_bytes_per_s" and not any(OPS[o.model_op].reduces for o in obs):
        return "no row reduces"
    if param.name == "accelerator.copy_bytes_per_s" and not any(o.copy_bytes for o in obs):
        return "the backend makes no local copies in these rows"
    if param.name == "scale_up.cached_rate_bytes_per_s":
        cache = layouts[0].up_cache_bytes
        if not cache:
            return "the topology's scale_up has no cache_bytes"
        if not any(o.size_bytes < cache for o in obs) or not any(o.size_bytes > cache for o in obs):
            return "the rows do not straddle scale_up.cache_bytes"
    return None


def fit(obs: Sequence[Observation], template: Topology, *, name: str | None = None) -> FitResult:
    """Fit ``template``'s constants to the rows ``obs`` (see the module docstring for the steps)."""
    import numpy as np

    if not obs:
        raise FitError("no usable rows to fit (every row empty, zero-sized or a barrier)")
    base = _layouts(template, obs)
    held = {p.name: _informs(p, obs, base) for p in _PARAMS}
    measured = np.array([o.measured_s for o in obs])
    for _ in range(len(_PARAMS)):
        free = [p for p in _PARAMS if held[p.name] is None]
        if not free:
            raise FitError("the rows determine none of the topology's constants")
        if len(obs) <= len(free):
            raise FitError(f"{len(obs)} rows cannot determine {len(free)} constants; measure more sizes")
        result, rel_err = _solve(free, base, obs, template, measured)
        loosest = max(range(len(free)), key=lambda i: rel_err[i])
        if rel_err[loosest] <= MAX_RELATIVE_STDERR:
            break
        # Hold the worst-determined constant only: its partner in a collinear pair may then be fitted.
        held[free[loosest].name] = "the rows cannot separate it from the other constants (template value kept)"
    values = np.exp(result.x)
    params = []
    for p in _PARAMS:
        if p in free:
            i = free.index(p)
            params.append(FittedParam(p.name, p.unit, p.get(base[0]), float(values[i]), rel_err[i]))
        else:
            params.append(FittedParam(p.name, p.unit, p.get(base[0]), p.get(base[0]), None, held[p.name]))
    run_ids = tuple(dict.fromkeys(o.run_id for o in obs))
    fitted = _write_topology(template, params, obs, run_ids, name)
    predicted = predict_observations(fitted, obs)
    res = tuple(Residual(o, t) for o, t in zip(obs, predicted))
    return FitResult(fitted, tuple(params), res, run_ids, stat="", cost=float(result.cost))


def _solve(
    free: list[_Param], base: list[Layout], obs: Sequence[Observation], template: Topology, measured: Any
) -> tuple[Any, list[float]]:
    """One robust least-squares solve over the log of the ``free`` constants; the result and relative errors."""
    import numpy as np
    from scipy.optimize import least_squares

    x0 = np.log([p.get(base[0]) for p in free])

    def layouts_at(x: np.ndarray) -> list[Layout]:
        values = np.exp(x)
        cache: dict[int, Layout] = {}
        out = []
        for L in base:
            key = id(L)
            if key not in cache:
                changes: _Changes = {}
                for p, v in zip(free, values):
                    changes.update(p.put(replace(L, **changes), float(v)))
                cache[key] = replace(L, **changes)
            out.append(cache[key])
        return out

    def residuals(x: np.ndarray) -> np.ndarray:
        predicted = np.array(predict_observations(template, obs, layouts_at(x)))
        return np.log(predicted / measured)

    result = least_squares(residuals, x0, loss=LOSS, f_scale=F_SCALE, ftol=1e-10, xtol=1e-10, max_nfev=400)
    return result, _relative_stderr(result.jac, result.fun, len(free))


def _relative_stderr(jac: Any, fun: Any, k: int) -> list[float]:
    """Standard errors of the log-constants (= relative errors), robust-weighted; inf when undetermined."""
    import numpy as np

    weights = 1.0 / np.sqrt(1.0 + (fun / F_SCALE) ** 2)  # soft_l1's IRLS weights
    jw = jac * np.sqrt(weights)[:, None]
    s2 = float(np.sum(weights * fun**2) / max(len(fun) - k, 1))
    eigval, eigvec = np.linalg.eigh(jw.T @ jw)
    usable = eigval > 1e-10 * max(float(eigval.max()), 1e-300)
    cov = (eigvec[:, usable] / eigval[usable]) @ eigvec[:, usable].T * s2
    # A constant that leans on a direction the rows do not constrain has no meaningful error bar.
    undetermined = (np.abs(eigvec[:, ~usable]) > 0.1).any(axis=1) if (~usable).any() else np.zeros(k, bool)
    return [math.inf if undetermined[i] else math.sqrt(max(float(cov[i, i]), 0.0)) for i in range(k)]


def _write_topology(
    template: Topology,
    params: Sequence[FittedParam],
    obs: Sequence[Observation],
    run_ids: tuple[str, ...],
    name: str | None,
) -> Topology:
    """A copy of ``template`` with the fitted constants, their origins and a calibration record."""
    data = topology_to_dict(template)
    runs = ", ".join(r[:12] for r in run_ids)
    backends = sorted({o.backend for o in obs if o.backend}) or ["unknown backend"]
    origin = f"fitted by commlens model fit on run {runs} ({'/'.join(backends)}, {len(obs)} rows)"
    applicable = [p for p in params if template.scale_out is not None or not p.name.startswith("scale_out")]
    data["name"] = name or f"{template.name}-fitted"
    # Still approximate if the template was and some of its estimates were kept.
    data["approximate"] = template.approximate and any(p.held_because for p in applicable)
    data["description"] = f"{template.name} calibrated on {runs} ({'/'.join(backends)})"
    by_name = {p.name: p for p in params}

    def fitted(pname: str) -> FittedParam | None:
        p = by_name[pname]
        return p if p.held_because is None else None

    if p := fitted("launch_latency_s"):
        data["launch_latency_s"], data["launch_latency_origin"] = p.value, origin
    if p := fitted("scale_up.latency_s"):
        data["scale_up"]["latency_s"], data["scale_up"]["latency_origin"] = p.value, origin
    if p := fitted("scale_up.rate_bytes_per_s"):
        _set_rate(data["scale_up"], "bandwidth_bytes_per_s", p.value, origin)
    if p := fitted("scale_up.cached_rate_bytes_per_s"):
        data["scale_up"]["cached_bandwidth_bytes_per_s"] = p.value
    if p := fitted("accelerator.reduction_bytes_per_s"):
        data["accelerator"]["reduction_bytes_per_s"], data["accelerator"]["reduction_origin"] = p.value, origin
    if p := fitted("accelerator.copy_bytes_per_s"):
        data["accelerator"]["copy_bytes_per_s"], data["accelerator"]["copy_origin"] = p.value, origin
    if data.get("scale_out"):
        if p := fitted("scale_out.latency_s"):
            data["scale_out"]["latency_s"], data["scale_out"]["latency_origin"] = p.value, origin
        if p := fitted("scale_out.rate_bytes_per_s"):
            _set_rate(data["scale_out"], "nic_bandwidth_bytes_per_s", p.value, origin)
    data["calibration"] = {
        "tool": "commlens model fit",
        "template": template.name,
        "runs": list(run_ids),
        "backends": backends,
        "rows": len(obs),
        "loss": f"{LOSS} on log(predicted/measured), f_scale {F_SCALE}",
        "algorithms": {
            (o.op if o.algo == "builtin" else f"{o.op}/{o.algo}"): f"{o.model_op}/{o.model_algo}" for o in obs
        },
        "parameters": {
            p.name: {
                "value": p.value,
                "unit": p.unit,
                **(
                    {"held": p.held_because}
                    if p.held_because
                    else {"relative_stderr": round(p.relative_stderr or 0.0, 4)}
                ),
            }
            for p in applicable
        },
    }
    return topology_from_dict(data, source="fitted topology")


def _set_rate(level: dict[str, object], line_key: str, rate: float, origin: str) -> None:
    """Keep the line rate (hardware data) and fit its efficiency; a rate above the line rate raises it.
    ``level``: a tier of a checked topology's plain data, whose line rate is a number."""
    line = level[line_key]
    if not isinstance(line, (int, float)):
        raise FitError(f"{line_key}: the template's line rate is not a number ({line!r})")
    if rate <= line:
        level["efficiency"] = round(rate / line, 6)
    else:
        level[line_key], level["efficiency"] = rate, 1.0
    level["efficiency_origin"] = origin


def fit_runs(
    runs: Iterable[Run],
    template: Topology,
    *,
    stat: str = "mean",
    min_size_bytes: int = 1,
    sizes: Callable[[int], bool] | None = None,
    name: str | None = None,
    algos: Collection[str] | None = None,
) -> FitResult:
    """:func:`fit` on the rows of ``runs`` (optionally only sizes for which ``sizes(size)`` is true, only
    rows that ran ``algos``)."""
    obs = observations(runs, stat=stat, min_size_bytes=min_size_bytes, algos=algos)
    if sizes is not None:
        obs = [o for o in obs if sizes(o.size_bytes)]
    result = fit(obs, template, name=name)
    calibration = dict(result.topology.calibration or {}, stat=stat)
    topology = result.topology.model_copy(update={"calibration": calibration})
    return replace(result, topology=topology, stat=stat)
