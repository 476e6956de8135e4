"""``commlens project calibrate``: measure GEMMs, streaming and attention kernels on a GPU, fit the device constants.

Without ``--from`` it measures (CUDA only; fp8 GEMMs on compute capability 8.9 and up) into ``--out``; with ``--from FILE``
it fits an existing measurement file (any machine). Either way it prints the
fit and, with ``-o``, writes an accelerators file for ``--accelerators``; attention
kernels measured go into that file's ``attention:`` section, which the projection's
attention efficiency reads before the shipped tables.
Exit codes: 0 done; 2 no CUDA GPU to measure on, or a bad file or option
(nothing is written then).
"""

from __future__ import annotations

import json
import sys
import time

import typer

from commlens.cli.app import fail
from commlens.cli.errors import errors_as_exit, fail_with
from commlens.cli.numbers import checked


def calibrate(
    out: str = typer.Option("gemm-calibration.json", "--out", help="measurement file to write (when measuring)"),
    from_file: str | None = typer.Option(None, "--from", help="fit this measurement file instead of measuring"),
    name: str | None = typer.Option(None, "--name", help="accelerator to fit (default: from the measured GPU)"),
    fit: str = typer.Option(
        "gemm_efficiency,k_overhead", "--fit", help="parameters: gemm_efficiency, and any of k_overhead, tiles"
    ),
    output: str | None = typer.Option(None, "--output", "-o", help="write the fitted accelerators YAML here"),
    budget_s: float = typer.Option(150.0, "--budget-s", help="stop measuring GEMMs after this many seconds"),
    hold_s: float = typer.Option(
        5.0,
        "--hold-s",
        help="seconds one attention call runs back to back to measure attention_sustained (0: not measured)",
    ),
    seed: int = typer.Option(0, "--seed", help="seed of the shape sample, its order and the operands"),
    accelerators: str | None = typer.Option(None, "--accelerators", help="accelerators file over the shipped one"),
    as_json: bool = typer.Option(False, "--json", help="print the fit as JSON"),
) -> None:
    """Calibrate the GEMM curve and memory efficiency of an accelerator from measurements on it."""
    from commlens.cli.project_cmd import accelerators_in_force
    from commlens.errors import CommlensError
    from commlens.project.calibrate import fit_calibration, fragment_yaml
    from commlens.project.calibration_file import load_calibration, save_calibration

    checked(budget_s, "--budget-s", above=0)
    checked(hold_s, "--hold-s", at_least=0)
    files = accelerators_in_force(accelerators)
    parameters = tuple(p.strip() for p in fit.split(",") if p.strip())
    if from_file is None:
        import torch

        if not torch.cuda.is_available():
            fail(
                "project calibrate needs a CUDA GPU (torch.cuda.is_available() is False) to measure; "
                "to fit a measurement file from elsewhere: --from FILE"
            )
        try:
            cal = _measure(seed, budget_s, hold_s)
            save_calibration(cal, out)
        except CommlensError as e:
            fail_with(e)
        except OSError as e:
            fail(f"--out {out}: {e.strerror or e}")
        print(
            f"measurements: {out} ({len(cal.gemm)} GEMMs, {len(cal.stream)} streaming runs, "
            f"{len(cal.attention)} attention calls)",
            file=sys.stderr,
        )
        source = out
    else:
        source = from_file
    with errors_as_exit():
        cal = load_calibration(source)
        result = fit_calibration(cal, source, name, parameters, accelerators=files)
        text = fragment_yaml(result)
    if output:
        _write_atomic(output, text)
    if as_json:
        print(json.dumps(result.as_dict(), indent=1))
    else:
        _print_fit(result)
    if output:
        print(f"accelerators file: {output}  (use: --accelerators {output})")


def _measure(seed: int, budget_s: float, hold_s: float):
    from commlens.project.calibrate_measure import measure, plan_attention, plan_gemms, plan_held, plan_streams

    gemms, streams, attention = plan_gemms(seed), plan_streams(), plan_attention()
    t0 = time.monotonic()

    def progress(done: int, total: int, note: str) -> None:
        if done % 25 == 0 or done == total or done <= len(streams):
            print(f"calibrate: {done}/{total} ({time.monotonic() - t0:.0f} s) {note}", file=sys.stderr, flush=True)

    if hold_s:
        print(f"calibrate: one attention call short, then held {hold_s:g} s (attention_sustained)", file=sys.stderr)
    held = plan_held() if hold_s else None
    return measure(
        gemms, streams, seed=seed, budget_s=budget_s, progress=progress, attention=attention, held=held, hold_s=hold_s
    )


def _write_atomic(path: str, text: str) -> None:
    from commlens.files import atomic_text

    try:
        with atomic_text(path) as f:
            f.write(text)
    except OSError as e:
        fail(f"-o {path}: {e.strerror or e}")


def _print_fit(fit) -> None:
    from commlens.cli.tables import new_table, print_table, right
    from commlens.results.units import format_percent

    cal, base, dev = fit.calibration, fit.base, fit.fitted
    print(
        f"{fit.source}: {cal.device.name} ({cal.device.sms} SMs), torch {cal.software.get('torch', '?')}, "
        f"CUDA {cal.software.get('cuda', '?')}, measured {cal.created}"
    )
    print(
        f"accelerator {base.name!r}: bf16 peak {base.peak('bf16') / 1e12:.0f} TFLOP/s, "
        f"HBM {base.hbm_bytes_per_s / 1e9:.0f} GB/s"
    )
    if fit.stream_fraction:
        print("\nstreaming kernels, fraction of HBM bandwidth (median over sizes; min-max):")
        streams = new_table("kernel", right("fraction"), right("min-max"))
        for kernel, frac in fit.stream_fraction.items():
            lo, hi = fit.stream_range[kernel]
            streams.add_row(kernel, f"{frac:.3f}", f"{lo:.3f}-{hi:.3f}")
        print_table(streams, indent=2)
    print(
        f"memory_efficiency {dev.memory_efficiency:.3f} (was {base.memory_efficiency:.3f}): "
        f"{dev.memory_efficiency_origin}"
    )
    if cal.held is not None:
        print(
            f"attention_sustained {dev.attention_sustained:.3f} (was {base.attention_sustained:.3f}): "
            f"{dev.attention_sustained_origin}"
        )
    kinds = list(fit.curves[0].by_kind)
    dtypes = list(fit.curves[0].by_dtype)
    print(f"\nGEMM curve, mean absolute error on {len(cal.gemm)} measured GEMMs (small ones not fitted):")
    curves = new_table("constants", *map(right, ("gemm_eff", "k_over", "MAPE", *kinds, *dtypes)))
    for c in fit.curves:
        curves.add_row(
            c.label,
            f"{c.gemm_efficiency:.4f}",
            f"{c.k_overhead:.1f}",
            format_percent(c.mape),
            *(format_percent(c.by_kind[k]) for k in kinds),
            *(format_percent(c.by_dtype[d]) for d in dtypes),
        )
    print_table(curves, indent=2)
    if dev.gemm_shape is not None and "tiles" in fit.parameters:
        print("  tiles: " + ", ".join(f"{a}x{b} {rel:.3f}" for a, b, rel in dev.gemm_shape.tiles))
    print("\nworst fitted shapes after the fit (error = model / measured - 1):")
    worst = new_table(
        right("error"), "dtype", "layout", "shape", "case", right("measured TFLOP/s"), right("model TFLOP/s")
    )
    for w in fit.curves[-1].worst:
        shape = f"{w['m']}x{w['n']}x{w['k']}" + (f" b{w['batch']}" if w["batch"] > 1 else "")
        worst.add_row(
            format_percent(w["error"], sign=True),
            w["dtype"],
            w["layout"],
            shape,
            w["label"],
            f"{w['measured_tflops']:.1f}",
            f"{w['model_tflops']:.1f}",
        )
    print_table(worst, indent=2)
    if fit.fp8_curves:
        _print_fp8(fit)
    for note in fit.notes:
        print(f"note: {note}")


def _print_fp8(fit) -> None:
    """The fp8 plateau's fit: its MAPE before and after, and the shapes it misses most."""
    from commlens.cli.tables import new_table, print_table, right
    from commlens.results.units import format_percent

    cur, new = fit.fp8_curves
    n = sum(1 for r in fit.calibration.gemm if r.dtype == "fp8")
    print(
        f"\nfp8 GEMMs (e4m3, per-tensor scales, bf16 output), {n} measured: fp8_gemm_efficiency "
        f"{new.gemm_efficiency:.4f} (was {cur.gemm_efficiency:.4f}); mean absolute error "
        f"{format_percent(cur.mape)} with the current plateau, {format_percent(new.mape)} after the fit"
    )
    worst = new_table(right("error"), "shape", "case", right("measured TFLOP/s"), right("model TFLOP/s"))
    for w in new.worst[:5]:
        worst.add_row(
            format_percent(w["error"], sign=True),
            f"{w['m']}x{w['n']}x{w['k']}",
            w["label"],
            f"{w['measured_tflops']:.1f}",
            f"{w['model_tflops']:.1f}",
        )
    print_table(worst, indent=2)
