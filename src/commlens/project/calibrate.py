"""Fit the projection's device constants to measurements: ``commlens project calibrate --from FILE``.

From a measurement file (:mod:`commlens.project.calibration_file`, written by
:func:`commlens.project.calibrate_measure.measure` on a GPU):

1. ``memory_efficiency``: per streaming kernel, the median over input sizes of
   bytes moved per second / the device's HBM bandwidth. The model has one
   number: the median over the eager kernels it charges as memory-bound (add,
   GeLU, softmax, layer norm, dropout: residual adds, activations, norms,
   softmax and dropout of the step model); copy is reported as the ceiling only.
2. GEMM curve: least squares on log time, residual log(model) - log(measured),
   where the model is :func:`commlens.project.compute.gemm_time_s` itself with
   the device's constants replaced by the parameters (so the fit follows any
   change of the curve), its HBM roofline at the memory efficiency of step 1.
   Parameters: the plateau ``gemm_efficiency``; optionally the K overhead and
   the relative throughputs of the tiles below the largest (those stay 1: the
   plateau carries the scale). Fitted shapes: squares, transformer and attention GEMMs,
   bf16 and fp16 against the bf16 peak (equal on A100/H100/H200); small shapes
   are reported, not fitted (launch latency is outside the curve).
   fp8 GEMMs (e4m3, per-tensor scales) fit ``fp8_gemm_efficiency`` alone: the plateau
   the projection runs fp8 GEMMs at against the fp8 peak, on the shape terms just
   fitted (the step model runs every fp8 GEMM on the 16-bit curve's shape at that
   plateau, its operands one byte an element).
3. Errors: MAPE (mean of |model / measured - 1|) on the fitted shapes with the
   device's current constants, with the plateau alone refitted, and with the
   chosen fit; per kind and dtype, and the worst shapes.
4. :func:`fragment_yaml`: the device's entry with the fitted figures, each with
   an origin naming the file, its date and the GPU, loadable with
   ``--accelerators``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from commlens.project.calibration_file import CalibrationFile, GemmRecord
from commlens.project.compute import DEFAULT_K_OVERHEAD, DEFAULT_TILES, gemm_time_s
from commlens.project.errors import ProjectionError
from commlens.project.hardware import ACCELERATORS_FORMAT, Device, GemmShape, active_devices

__all__ = [
    "FIT_KINDS",
    "FIT_PARAMETERS",
    "MODEL_STREAM_KERNELS",
    "CalibrationFit",
    "CurveError",
    "accelerator_for",
    "fit_calibration",
    "fragment_yaml",
    "gemm_entries",
]

FIT_KINDS = ("square", "transformer", "attention")
FIT_PARAMETERS = ("gemm_efficiency", "k_overhead", "tiles")
MODEL_STREAM_KERNELS = ("add", "gelu", "softmax", "layer_norm", "dropout")
# CUDA device names (substrings, first match) -> accelerators.yaml keys
_CUDA_NAMES = (
    ("GB200", "B200 (GB200)"),
    ("B200", "B200"),
    ("H200", "H200 SXM"),
    ("H100", "H100 SXM"),
    ("A100", "A100 SXM 80GB"),
)


class WorstShape(TypedDict):
    """One fitted GEMM shape the curve misses most: signed error = model / measured - 1."""

    error: float
    kind: str
    dtype: str
    label: str
    m: int
    n: int
    k: int
    batch: int
    layout: str
    measured_tflops: float
    model_tflops: float


# One measured attention call as an efficiency-table entry (efficiency.yaml's schema; "pass" is a keyword)
AttentionEntry = TypedDict(
    "AttentionEntry",
    {
        "kernel": str,
        "pass": str,
        "causal": bool,
        "head_dim": int,
        "seq_len": int,
        "tflops": float,
        "sustained": bool,
        "origin": str,
    },
)


@dataclass(frozen=True)
class CurveError:
    """The GEMM curve with one set of constants against the measurements."""

    label: str  # current, plateau, fit
    gemm_efficiency: float
    k_overhead: float
    tiles: tuple[tuple[int, int, float], ...]
    mape: float  # over the fitted shapes
    by_kind: dict[str, float]  # MAPE per kind (small included: not fitted)
    by_dtype: dict[str, float]
    worst: list[WorstShape]  # fitted shapes with the largest |error|

    def as_dict(self) -> dict[str, object]:
        return {
            "label": self.label,
            "gemm_efficiency": self.gemm_efficiency,
            "k_overhead": self.k_overhead,
            "tiles": [list(t) for t in self.tiles],
            "mape": self.mape,
            "by_kind": self.by_kind,
            "by_dtype": self.by_dtype,
            "worst": self.worst,
        }


@dataclass(frozen=True)
class CalibrationFit:
    """What the fit found, and the device entry it makes."""

    source: str
    calibration: CalibrationFile
    base: Device
    fitted: Device
    parameters: tuple[str, ...]
    stream_fraction: dict[str, float]  # kernel -> median over sizes of bytes/s / HBM bytes/s
    stream_range: dict[str, tuple[float, float]]  # kernel -> (min, max) over sizes
    curves: list[CurveError]  # current constants, plateau alone, the fit (16-bit GEMMs)
    notes: list[str] = field(default_factory=list)
    fp8_curves: list[CurveError] = field(default_factory=list)  # current fp8 plateau, the fit; [] if none fitted

    def as_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "measured_device": self.calibration.device.model_dump(),
            "created": self.calibration.created,
            "software": self.calibration.software,
            "accelerator": self.base.name,
            "parameters": list(self.parameters),
            "stream_fraction": self.stream_fraction,
            "stream_range": {k: list(v) for k, v in self.stream_range.items()},
            "memory_efficiency": self.fitted.memory_efficiency,
            "gemm_efficiency": self.fitted.gemm_efficiency,
            "gemm_shape": self.fitted.gemm_shape.model_dump() if self.fitted.gemm_shape else None,
            "attention_sustained": self.fitted.attention_sustained,
            "curves": [c.as_dict() for c in self.curves],
            "fp8_gemm_efficiency": self.fitted.fp8_gemm_efficiency if self.fp8_curves else None,
            "fp8_curves": [c.as_dict() for c in self.fp8_curves],
            "notes": self.notes,
        }


def accelerator_for(cal: CalibrationFile, accelerators: Sequence[str] | None = None) -> str:
    """The accelerators.yaml key of the measured GPU (by CUDA name; its SM count must agree)."""
    devices = active_devices(accelerators)
    for fragment, key in _CUDA_NAMES:
        if fragment in cal.device.name and key in devices:
            if devices[key].sms != cal.device.sms:
                raise ProjectionError(
                    f"the measured {cal.device.name} has {cal.device.sms} SMs but {key!r} has "
                    f"{devices[key].sms}: give the accelerator with --name"
                )
            return key
    raise ProjectionError(
        f"no accelerator known for the measured {cal.device.name!r}; give one with --name "
        f"(known: {', '.join(sorted(devices))})"
    )


def _shape_of(dev: Device) -> tuple[tuple[tuple[int, int, float], ...], float]:
    s = dev.gemm_shape
    return (s.tiles, s.k_overhead) if s else (DEFAULT_TILES, DEFAULT_K_OVERHEAD)


def _model_s(dev: Device, peak: float, r: GemmRecord) -> float:
    return gemm_time_s(dev, peak, r.m, r.n, r.k, r.batch, 1.0 if r.dtype == "fp8" else 2.0)


def _at_plateau(dev: Device, plateau: float) -> Device:
    """``dev`` with ``plateau`` as its GEMM plateau: the curve the step model runs fp8 GEMMs on (against the fp8
    peak, the plateau ``fp8_gemm_efficiency``: step._setup scales the peak by its ratio to ``gemm_efficiency``)."""
    return dev.model_copy(update={"gemm_efficiency": plateau})


def _curve_error(label: str, dev: Device, peak: float, records: list[GemmRecord], worst: int = 8) -> CurveError:
    errors = [(_model_s(dev, peak, r) / r.time_s - 1.0, r) for r in records]
    fitted = [(e, r) for e, r in errors if r.kind in FIT_KINDS]

    def mape(items: list[tuple[float, GemmRecord]]) -> float:
        return sum(abs(e) for e, _ in items) / len(items) if items else float("nan")

    tiles, k_over = _shape_of(dev)
    top = sorted(fitted, key=lambda er: -abs(er[0]))[:worst]
    return CurveError(
        label,
        dev.gemm_efficiency,
        k_over,
        tiles,
        mape(fitted),
        {kind: mape([er for er in errors if er[1].kind == kind]) for kind in dict.fromkeys(r.kind for r in records)},
        {dt: mape([er for er in fitted if er[1].dtype == dt]) for dt in dict.fromkeys(r.dtype for r in records)},
        [
            {
                "error": e,
                "kind": r.kind,
                "dtype": r.dtype,
                "label": r.label,
                "m": r.m,
                "n": r.n,
                "k": r.k,
                "batch": r.batch,
                "layout": r.layout,
                "measured_tflops": r.tflops,
                "model_tflops": r.flops / _model_s(dev, peak, r) / 1e12,
            }
            for e, r in top
        ],
    )


def _with(dev: Device, params: tuple[str, ...], x: list[float], origin: str) -> Device:
    """``dev`` with the fitted parameters ``x`` (in the order of ``params``) applied."""
    tiles, k_over = _shape_of(dev)
    update: dict[str, object] = {}
    i = 0
    if "gemm_efficiency" in params:
        update["gemm_efficiency"] = float(x[i])
        i += 1
    if "k_overhead" in params:
        k_over = float(x[i])
        i += 1
    if "tiles" in params:
        free = iter(float(v) for v in x[i:])
        tiles = tuple((tm, tn, rel if rel >= 1.0 else next(free)) for tm, tn, rel in tiles)
    if "k_overhead" in params or "tiles" in params:
        update["gemm_shape"] = GemmShape(k_overhead=k_over, tiles=tiles, origin=origin)
    return dev.model_copy(update=update)


def _least_squares(dev: Device, peak: float, records: list[GemmRecord], params: tuple[str, ...]) -> Device:
    import numpy as np
    from scipy.optimize import least_squares

    tiles, k_over = _shape_of(dev)
    spec: list[tuple[float, float, float]] = []  # (start, lower, upper) per parameter, in _with's order
    if "gemm_efficiency" in params:
        spec.append((dev.gemm_efficiency, 0.02, 1.0))
    if "k_overhead" in params:
        spec.append((k_over, 0.0, 2048.0))
    if "tiles" in params:
        spec += [(rel, 0.05, 1.0) for _, _, rel in tiles if rel < 1.0]
    x0, lo, hi = (list(v) for v in zip(*spec))
    measured = np.log([r.time_s for r in records])

    def residuals(x: np.ndarray) -> np.ndarray:
        d = _with(dev, params, list(x), "fit")
        return np.log([_model_s(d, peak, r) for r in records]) - measured

    starts = [list(x0)]
    if "k_overhead" in params:  # the K term is not convex in log time: a few starts
        k_at = params.index("k_overhead")
        starts += [x0[:k_at] + [k] + x0[k_at + 1 :] for k in (8.0, 32.0, 128.0, 512.0)]
    fits = []
    for start in starts:
        start = [min(max(v, a + 1e-6), b - 1e-6) for v, a, b in zip(start, lo, hi)]
        # scipy-stubs types diff_step as an array; scipy documents it as array_like, a scalar for every parameter.
        fits.append(least_squares(residuals, start, bounds=(lo, hi), x_scale="jac", diff_step=1e-4))  # type: ignore[arg-type]
    best = min(fits, key=lambda res: res.cost)  # the first of equal costs, as the starts are ordered
    return _with(dev, params, list(best.x), "fit")


def fit_calibration(
    cal: CalibrationFile,
    source: str,
    name: str | None = None,
    parameters: tuple[str, ...] = ("gemm_efficiency", "k_overhead"),
    accelerators: Sequence[str] | None = None,
) -> CalibrationFit:
    """Fit ``parameters`` of the GEMM curve and the memory efficiency of accelerator ``name`` (default: the
    measured GPU's) to ``cal``, with the figures of ``accelerators`` files over the shipped ones (default:
    ``COMMLENS_ACCELERATORS``); raises :class:`ProjectionError` for an unknown accelerator or parameter."""
    unknown = [p for p in parameters if p not in FIT_PARAMETERS]
    if unknown or "gemm_efficiency" not in parameters:
        raise ProjectionError(f"--fit {','.join(parameters)}: gemm_efficiency and any of k_overhead, tiles")
    key = name or accelerator_for(cal, accelerators)
    devices = active_devices(accelerators)
    if key not in devices:
        raise ProjectionError(f"no accelerator {key!r}; known: {', '.join(sorted(devices))}")
    base = devices[key]
    peak = base.peak("bf16")
    where = (
        f"{Path(source).name} ({cal.device.name}, {cal.device.sms} SMs, measured {cal.created}, "
        f"torch {cal.software.get('torch', '?')}, CUDA {cal.software.get('cuda', '?')})"
    )
    notes: list[str] = []
    by_kernel: dict[str, list[float]] = {}
    for s in cal.stream:
        by_kernel.setdefault(s.kernel, []).append(s.bytes_per_s / base.hbm_bytes_per_s)
    fraction = {k: statistics.median(v) for k, v in by_kernel.items()}
    spread = {k: (min(v), max(v)) for k, v in by_kernel.items()}
    dev = base
    model_kernels = [k for k in MODEL_STREAM_KERNELS if k in fraction]
    if model_kernels:
        mem = statistics.median(fraction[k] for k in model_kernels)
        if mem > 1.0:
            notes.append(
                f"streaming kernels measured at {mem:.3f} of the listed HBM bandwidth: kept at 1.0; "
                f"is hbm_bytes_per_s of {key!r} right?"
            )
            mem = 1.0
        dev = dev.model_copy(
            update={
                "memory_efficiency": mem,
                "memory_efficiency_origin": f"median of eager {', '.join(model_kernels)} over "
                f"{len(cal.stream)} runs of 64 MiB-2 GiB, {where}",
            }
        )
    else:
        notes.append("no streaming measurements: memory_efficiency kept")
    records = [r for r in cal.gemm if r.dtype != "fp8"]
    fit_records = [r for r in records if r.kind in FIT_KINDS]
    if not fit_records:
        raise ProjectionError(f"{source}: no square, transformer or attention GEMMs to fit")
    plateau = _least_squares(dev, peak, fit_records, ("gemm_efficiency",))
    fitted = plateau if parameters == ("gemm_efficiency",) else _least_squares(dev, peak, fit_records, parameters)
    update: dict[str, object] = {
        "sms": cal.device.sms,
        "gemm_efficiency": round(fitted.gemm_efficiency, 4),
        "gemm_efficiency_origin": f"fit of the GEMM curve ({', '.join(parameters)}) to {len(fit_records)} GEMMs, "
        f"{where}",
    }
    if "k_overhead" in parameters or "tiles" in parameters:
        fitted_tiles, fitted_k_overhead = _shape_of(fitted)
        update["gemm_shape"] = GemmShape(
            k_overhead=round(fitted_k_overhead, 2),
            tiles=tuple((a, b, round(rel, 4)) for a, b, rel in fitted_tiles),
            origin=f"fit ({', '.join(p for p in parameters if p != 'gemm_efficiency')}) with gemm_efficiency, {where}",
        )
    held = cal.held
    if held is not None:  # what the GPU keeps of a short run's attention rate at its power limit [27 s20 attsust]
        keep = held.keep
        if keep > 1.0:
            notes.append(
                f"the held attention call ran {keep:.3f}x its short run's rate: attention_sustained kept at 1.0"
            )
            keep = 1.0
        tflop = held.flops / 1e12
        update["attention_sustained"] = round(keep, 3)
        update["attention_sustained_origin"] = (
            f"SDPA {held.kernel} causal {held.pass_}, {held.batch} x {held.seq_len} tokens, {held.heads} heads of "
            f"{held.head_dim}: {tflop / held.short_s:.4g} TFLOP/s in a short run (5 + 10 calls after {held.idle_s:g} s "
            f"idle), {tflop / held.held_s:.4g} after {held.hold_s:g} s back to back, {where}"
        )
    final = Device.model_validate({**fitted.model_dump(), **update})
    curves = [
        _curve_error("current", base, peak, records),
        _curve_error("plateau", plateau, peak, records),
        _curve_error("fit", final, peak, records),
    ]
    if any(math.isnan(c.mape) for c in curves):
        notes.append("some curve errors are undefined (no shapes of a kind)")
    final, fp8_curves = _fit_fp8(cal, base, final, where, notes)
    return CalibrationFit(source, cal, base, final, parameters, fraction, spread, curves, notes, fp8_curves)


def _fit_fp8(
    cal: CalibrationFile, base: Device, final: Device, where: str, notes: list[str]
) -> tuple[Device, list[CurveError]]:
    """``final`` with ``fp8_gemm_efficiency`` fitted to the file's fp8 GEMMs on its fitted shape terms, and the fp8
    curve's errors before and after; ``final`` unchanged (and a note) where there is nothing to fit."""
    records = [r for r in cal.gemm if r.dtype == "fp8"]
    fit_records = [r for r in records if r.kind in FIT_KINDS]
    if not fit_records:
        notes.append("no fp8 GEMMs measured: fp8_gemm_efficiency kept")
        return final, []
    if "fp8" not in base.peak_flops:
        notes.append(f"{len(records)} fp8 GEMMs measured, but {base.name!r} lists no fp8 peak: not fitted")
        return final, []
    peak8 = base.peak("fp8")
    current = base.fp8_gemm_efficiency or base.gemm_efficiency  # the model's fp8 plateau without the field
    plateau = _least_squares(_at_plateau(final, current), peak8, fit_records, ("gemm_efficiency",)).gemm_efficiency
    fitted = Device.model_validate(
        {
            **final.model_dump(),
            "fp8_gemm_efficiency": round(plateau, 4),
            "fp8_gemm_efficiency_origin": f"fit of the fp8 GEMM plateau (e4m3, per-tensor scales, bf16 output) on "
            f"the fitted shape terms to {len(fit_records)} fp8 GEMMs, {where}",
        }
    )
    assert fitted.fp8_gemm_efficiency is not None
    return fitted, [
        _curve_error("current", _at_plateau(base, current), peak8, records),
        _curve_error("fit", _at_plateau(fitted, fitted.fp8_gemm_efficiency), peak8, records),
    ]


def fragment_yaml(fit: CalibrationFit) -> str:
    """An accelerators file (``format: commlens.accelerators/1``) with the fitted entry, for ``--accelerators``."""
    d = fit.fitted
    entry: dict[str, object] = {
        "peak_flops": dict(d.peak_flops),
        "hbm_bytes": d.hbm_bytes,
        "hbm_bytes_per_s": d.hbm_bytes_per_s,
        "sms": d.sms,
        "gemm_efficiency": d.gemm_efficiency,
        "gemm_efficiency_origin": d.gemm_efficiency_origin,
        "memory_efficiency": round(d.memory_efficiency, 4),
        "memory_efficiency_origin": d.memory_efficiency_origin,
    }
    if fit.fp8_curves:
        entry["fp8_gemm_efficiency"] = d.fp8_gemm_efficiency
        entry["fp8_gemm_efficiency_origin"] = d.fp8_gemm_efficiency_origin
    if fit.calibration.held is not None:
        entry["attention_sustained"] = d.attention_sustained
        entry["attention_sustained_origin"] = d.attention_sustained_origin
    if d.gemm_shape is not None:
        entry["gemm_shape"] = {
            "k_overhead": d.gemm_shape.k_overhead,
            "tiles": [list(t) for t in d.gemm_shape.tiles],
            "origin": d.gemm_shape.origin,
        }
    attention = attention_entries(fit)
    gemms = gemm_entries(fit)
    cur, new = fit.curves[0], fit.curves[-1]
    fitted = [r for r in fit.calibration.gemm if r.kind in FIT_KINDS]
    n8 = sum(1 for r in fitted if r.dtype == "fp8")
    head = (
        f"# commlens project calibrate --from {Path(fit.source).name}: {fit.calibration.device.name}, "
        f"measured {fit.calibration.created}\n"
        f"# GEMM curve MAPE on {len(fitted) - n8} shapes: "
        f"{cur.mape * 100:.1f}% with the current constants, {new.mape * 100:.1f}% after the fit\n"
    )
    if fit.fp8_curves:
        head += (
            f"# fp8 GEMM curve MAPE on {n8} shapes: {fit.fp8_curves[0].mape * 100:.1f}% with the current plateau, "
            f"{fit.fp8_curves[-1].mape * 100:.1f}% after the fit\n"
        )
    head += "# use: commlens project ... --accelerators THIS_FILE (or COMMLENS_ACCELERATORS=THIS_FILE)\n"
    import yaml

    doc: dict[str, object] = {"format": ACCELERATORS_FORMAT, "accelerators": {d.name: entry}}
    if attention:  # measured attention kernels: the efficiency tables' entries (commlens.project.efficiency)
        doc["attention"] = {d.name: attention}
    if gemms:  # the measured GEMMs' upper envelope: what caps a GEMM launched alone (efficiency.gemm_rate_cap)
        doc["gemm"] = {d.name: gemms}
    body = yaml.dump(
        doc,
        Dumper=_dumper(),
        sort_keys=False,
        width=120,
        default_flow_style=None,
    )
    return head + body


def attention_entries(fit: CalibrationFit) -> list[AttentionEntry]:
    """The measured attention calls as efficiency-table entries (``efficiency.yaml``'s schema), the median
    TFLOP/s of each (kernel, pass, head size, sequence length), marked ``sustained``: timed among the sweep's GEMMs
    with the GPU at its power limit, they are not scaled by the device's ``attention_sustained``."""
    cal = fit.calibration
    where = f"commlens project calibrate on {cal.device.name}, {cal.created}, torch {cal.software.get('torch', '?')}"
    return [
        {
            "kernel": r.kernel,
            "pass": r.pass_,
            "causal": r.causal,
            "head_dim": r.head_dim,
            "seq_len": r.seq_len,
            "tflops": float(f"{r.tflops:.4g}"),
            # timed among the sweep's other kernels, the GPU at its power limit: not scaled by attention_sustained
            "sustained": True,
            "origin": f"{where}: SDPA {r.kernel}, batch {r.batch} x {r.heads} heads",
        }
        for r in cal.attention
    ]


class GemmEntry(TypedDict):
    """One measured GEMM as a row of the efficiency tables' ``gemm`` schema (efficiency.yaml)."""

    dtype: str
    m: int
    n: int
    k: int
    tflops: float
    library: str
    origin: str


def gemm_entries(fit: CalibrationFit) -> list[GemmEntry]:
    """The measured GEMMs the projection's per-GEMM cap reads (``efficiency.gemm_rate_cap``: a GEMM launched alone,
    an expert's, runs no faster than the measured GEMMs of its FLOP count): per dtype (fp16 as bf16, which runs at its
    rate), the single products whose smallest dimension is at least ``GEMM_CAP_MIN_DIM`` and which lie on the upper
    envelope of rate against FLOPs, the only rows the cap can read. An accelerators file with them replaces the
    device's published GEMM rows for those dtypes."""
    from commlens.project.efficiency import GEMM_CAP_MIN_DIM, GEMM_DTYPES

    cal = fit.calibration
    where = f"commlens project calibrate on {cal.device.name}, {cal.created}, torch {cal.software.get('torch', '?')}"
    out: list[GemmEntry] = []
    for dtype in dict.fromkeys(GEMM_DTYPES.values()):
        rows = sorted(
            (r for r in cal.gemm if r.batch == 1 and GEMM_DTYPES.get(r.dtype) == dtype),
            key=lambda r: (r.flops, -r.tflops),
        )
        best = 0.0
        for r in rows:
            if min(r.m, r.n, r.k) < GEMM_CAP_MIN_DIM or r.tflops <= best:
                continue
            best = r.tflops
            out.append(
                {
                    "dtype": dtype,
                    "m": r.m,
                    "n": r.n,
                    "k": r.k,
                    "tflops": float(f"{r.tflops:.5g}"),
                    "library": "torch._scaled_mm (cuBLASLt)" if r.dtype == "fp8" else "torch.mm (cuBLAS)",
                    "origin": f"{where}: {r.dtype} {r.label} (layout {r.layout}, median of {len(r.times_s)} windows)",
                }
            )
    return out


def _dumper() -> type:
    import yaml

    class Dumper(yaml.SafeDumper):
        """Large floats as 989.0e+12 (as accelerators.yaml writes them), never as 15-digit integers."""

    def big_float(dumper: yaml.SafeDumper, value: float) -> yaml.Node:
        if abs(value) < 1e6:
            return dumper.represent_float(value)
        mantissa, exponent = f"{value:.12e}".split("e")
        mantissa = mantissa.rstrip("0")
        return dumper.represent_scalar(
            "tag:yaml.org,2002:float", f"{mantissa}{'0' if mantissa.endswith('.') else ''}e{exponent}"
        )

    Dumper.add_representer(float, big_float)
    return Dumper
