"""GEMM / memory calibration: file format, fit, accelerators files, CLI (measuring itself needs a GPU)."""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from commlens.project import ParallelLayout, project
from commlens.project.calibrate import fit_calibration, fragment_yaml
from commlens.project.calibrate_measure import (
    GemmCase,
    StreamCase,
    _repeats,
    estimate_s,
    measure,
    plan_gemms,
    plan_streams,
)
from commlens.project.calibration_file import (
    STREAM_KERNELS,
    CalibrationFile,
    CalibrationFileError,
    GemmRecord,
    MeasuredDevice,
    StreamRecord,
    load_calibration,
    save_calibration,
)
from commlens.project.compute import gemm_time_s
from commlens.project.hardware import ACCELERATORS_ENV, GemmShape, device_for
from commlens.topology import load_topology
from commlens.workload import load_workload

CLI = [str(Path(sys.executable).parent / "commlens"), "project"]
H200 = device_for("H200 SXM")
TRUE_TILES = ((256, 128, 1.0), (128, 256, 1.0), (128, 128, 0.9), (128, 64, 0.8), (64, 64, 0.6))
TRUE = H200.model_copy(
    update={
        "gemm_efficiency": 0.64,
        "memory_efficiency": 0.87,
        "gemm_shape": GemmShape(k_overhead=110.0, tiles=TRUE_TILES, origin="test"),
    }
)
TRUE_FP8 = 0.58  # the fp8 plateau the synthetic fp8 GEMMs are timed at (the H200's shipped figure is 0.655)


def _synthetic(noise: float = 0.01, seed: int = 1) -> CalibrationFile:
    """A measurement file of the real plan's shapes, timed by the curve itself with TRUE's constants (+ noise)."""
    rng = random.Random(seed)
    peak = H200.peak("bf16")
    gemm = []
    fp8 = TRUE.model_copy(update={"gemm_efficiency": TRUE_FP8})  # the fp8 curve: the same shape, its own plateau
    for c in plan_gemms():
        if c.dtype == "fp8":
            t = gemm_time_s(fp8, H200.peak("fp8"), c.m, c.n, c.k, c.batch, 1.0)
        else:
            t = gemm_time_s(TRUE, peak, c.m, c.n, c.k, c.batch, 2.0)
        times = tuple(t * (1 + rng.gauss(0, noise)) for _ in range(5))
        med = statistics.median(times)
        gemm.append(
            GemmRecord(
                kind=c.kind,
                label=c.label,
                m=c.m,
                n=c.n,
                k=c.k,
                batch=c.batch,
                layout=c.layout,
                dtype=c.dtype,
                times_s=times,
                time_s=med,
                tflops=2.0 * c.m * c.n * c.k * c.batch / med / 1e12,
            )
        )
    stream = []
    fractions = {"copy": 0.92, "add": 0.86, "gelu": 0.88, "softmax": 0.80, "layer_norm": 0.85, "dropout": 0.87}
    for c in plan_streams():
        moved = c.size_bytes * STREAM_KERNELS[c.kernel]
        t = moved / (H200.hbm_bytes_per_s * fractions[c.kernel])
        stream.append(
            StreamRecord(
                kernel=c.kernel,
                size_bytes=c.size_bytes,
                bytes_moved=moved,
                dtype="bf16",
                times_s=(t,),
                time_s=t,
                bytes_per_s=moved / t,
            )
        )
    return CalibrationFile(
        created="2025-01-02T03:04:05+00:00",
        device=MeasuredDevice(name="NVIDIA H200", sms=132, capability="9.0", memory_bytes=150e9),
        software={"torch": "2.11.0+cu128", "cuda": "12.8"},
        settings={"seed": 0},
        gemm=tuple(gemm),
        stream=tuple(stream),
    )


@pytest.fixture(scope="module")
def synthetic_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("cal") / "h200-calibration.json"
    save_calibration(_synthetic(), path)
    return path


def test_fit_recovers_the_constants_it_was_generated_from(synthetic_file):
    cal = load_calibration(synthetic_file)
    fit = fit_calibration(cal, str(synthetic_file), parameters=("gemm_efficiency", "k_overhead", "tiles"))
    assert fit.base.name == "H200 SXM"
    assert fit.fitted.gemm_efficiency == pytest.approx(0.64, rel=0.01)
    assert fit.fitted.gemm_shape.k_overhead == pytest.approx(110.0, rel=0.05)
    # the smallest tile wins few shapes once a batch's tiles share waves: it is the least determined
    for (_, _, got), (_, _, want), tol in zip(fit.fitted.gemm_shape.tiles, TRUE_TILES, (0.01,) * 4 + (0.1,)):
        assert got == pytest.approx(want, abs=tol)
    # memory: the median of the eager kernels the model charges (copy is not one of them)
    assert fit.fitted.memory_efficiency == pytest.approx(statistics.median([0.86, 0.88, 0.80, 0.85, 0.87]))
    assert fit.stream_fraction["copy"] == pytest.approx(0.92)
    current, plateau, final = fit.curves
    assert current.mape > 0.05 and final.mape < 0.01 and plateau.mape > final.mape
    assert "h200-calibration.json" in fit.fitted.gemm_efficiency_origin
    assert "NVIDIA H200" in fit.fitted.memory_efficiency_origin
    # the fp8 GEMMs fit their own plateau on the fitted shape terms, and stay out of the 16-bit fit above
    assert fit.fitted.fp8_gemm_efficiency == pytest.approx(TRUE_FP8, rel=0.01)
    assert (
        "fp8 GEMMs" in fit.fitted.fp8_gemm_efficiency_origin and "NVIDIA H200" in fit.fitted.fp8_gemm_efficiency_origin
    )
    fp8_current, fp8_fit = fit.fp8_curves
    assert fp8_current.gemm_efficiency == H200.fp8_gemm_efficiency and fp8_current.mape > 0.05 and fp8_fit.mape < 0.01
    assert set(fp8_fit.by_dtype) == {"fp8"} and set(final.by_dtype) == {"bf16", "fp16"}


def test_fp8_gemms_are_not_fitted_where_there_is_nothing_to_fit(synthetic_file):
    cal = load_calibration(synthetic_file)
    a100 = fit_calibration(cal, str(synthetic_file), "A100 SXM 80GB", ("gemm_efficiency",))
    assert a100.fitted.fp8_gemm_efficiency is None and a100.fp8_curves == []
    assert any("lists no fp8 peak: not fitted" in n for n in a100.notes)
    assert "fp8_gemm_efficiency" not in fragment_yaml(a100)
    bf16_only = cal.model_copy(update={"gemm": tuple(r for r in cal.gemm if r.dtype != "fp8")})
    kept = fit_calibration(bf16_only, str(synthetic_file), parameters=("gemm_efficiency",))
    assert kept.fitted.fp8_gemm_efficiency == H200.fp8_gemm_efficiency and kept.fp8_curves == []
    assert "no fp8 GEMMs measured: fp8_gemm_efficiency kept" in kept.notes


def test_plateau_only_fit_keeps_the_default_shape_terms(synthetic_file):
    fit = fit_calibration(load_calibration(synthetic_file), str(synthetic_file), parameters=("gemm_efficiency",))
    assert fit.fitted.gemm_shape is None
    assert 0.6 < fit.fitted.gemm_efficiency < 0.8
    assert fit.curves[1].mape == pytest.approx(fit.curves[2].mape, rel=0.01)  # the rounded plateau only


def test_file_round_trip_and_atomic_write(tmp_path):
    cal = _synthetic()
    path = tmp_path / "cal.json"
    save_calibration(cal, path)
    assert load_calibration(path) == cal
    assert json.loads(path.read_text())["format"] == "commlens.gemm-calibration/1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cal.json"]  # no temporary file left


def _broken(tmp_path: Path, edit) -> Path:
    data = _synthetic().model_dump(mode="json")
    edit(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda d: d.update(format="commlens.gemm-calibration/2"),
            "format 'commlens.gemm-calibration/2' is not supported (this commlens reads commlens.gemm-calibration/1)",
        ),
        (lambda d: d["gemm"][3].pop("k"), "gemm[3].k: Field required"),
        (
            lambda d: d["gemm"][0].update(times_s=[-1e-3, 2e-3, 3e-3], time_s=2e-3, tflops=1.0),
            "gemm[0]: times_s: every time must be > 0 s (got -0.001)",
        ),
        (lambda d: d["stream"][1].update(time_s=-1.0), "stream[1].time_s: Input should be greater than 0"),
        (lambda d: d["gemm"][2].update(tflops=d["gemm"][2]["tflops"] * 2), "does not follow from the shape and time_s"),
    ],
)
def test_bad_files_exit_2_naming_the_problem_and_write_nothing(tmp_path, edit, message):
    path = _broken(tmp_path, edit)
    with pytest.raises(CalibrationFileError, match="bad.json"):
        load_calibration(path)
    out = tmp_path / "frag.yaml"
    proc = subprocess.run(CLI + ["calibrate", "--from", str(path), "-o", str(out)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {path}: ") and message in proc.stderr, proc.stderr
    assert not out.exists() and proc.stdout == ""


def test_cli_fit_writes_a_fragment_the_projection_loads(synthetic_file, tmp_path):
    out = tmp_path / "h200.yaml"
    proc = subprocess.run(
        CLI + ["calibrate", "--from", str(synthetic_file), "-o", str(out)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert "memory_efficiency 0.860 (was 0.800)" in proc.stdout
    assert "worst fitted shapes after the fit" in proc.stdout
    fp8_line = next(line for line in proc.stdout.splitlines() if line.startswith("fp8 GEMMs"))
    assert f"(was {H200.fp8_gemm_efficiency:.4f})" in fp8_line  # tiles not fitted here: the plateau within 2%
    assert float(fp8_line.split("fp8_gemm_efficiency ")[1].split()[0]) == pytest.approx(TRUE_FP8, rel=0.02)
    rows = {line.split()[0]: line for line in proc.stdout.splitlines() if line.startswith(("  current", "  fit"))}
    assert rows["current"].split()[1:3] == [f"{H200.gemm_efficiency:.4f}", "64.0"]
    data = yaml.safe_load(out.read_text())
    assert data["format"] == "commlens.accelerators/1"
    entry = data["accelerators"]["H200 SXM"]
    assert entry["peak_flops"] == {"bf16": 989e12, "fp8": 1979e12} and entry["sms"] == 132
    assert set(entry) == {
        "peak_flops",
        "hbm_bytes",
        "hbm_bytes_per_s",
        "sms",
        "gemm_efficiency",
        "gemm_efficiency_origin",
        "memory_efficiency",
        "memory_efficiency_origin",
        "fp8_gemm_efficiency",
        "fp8_gemm_efficiency_origin",
        "gemm_shape",
    }
    assert entry["fp8_gemm_efficiency"] == pytest.approx(TRUE_FP8, rel=0.02)
    assert "fp8 GEMM curve MAPE on" in out.read_text().split("format:")[0]
    env = {**os.environ, ACCELERATORS_ENV: str(out)}
    code = (
        "from commlens.project import device_for; d = device_for('H200 SXM'); print(d.gemm_efficiency, "
        "d.memory_efficiency, d.gemm_shape.k_overhead)"
    )
    got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    eff, mem, k_over = (float(v) for v in got.stdout.split())
    assert eff == entry["gemm_efficiency"] and mem == 0.86 and k_over == entry["gemm_shape"]["k_overhead"]
    # an fp8 projection on the H200 reads the fitted fp8 plateau (lower than the shipped one): its step is longer
    args = ["--gpus", "8", "-t", "dgx-h200", "--json"]

    def step(workload: str, *extra: str) -> float:
        proc = subprocess.run(CLI + [workload, *args, *extra], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["step_time_s"]

    fp8_shipped, fp8_fitted = (
        step("llama3-8b", "--set", "workload.precision=fp8", *x) for x in ((), ("--accelerators", str(out)))
    )
    assert fp8_fitted > fp8_shipped


def _h100_override(tmp_path: Path, gemm_efficiency: float) -> Path:
    path = tmp_path / f"h100-{gemm_efficiency}.yaml"
    path.write_text(
        f"format: commlens.accelerators/1\naccelerators:\n  H100 SXM:\n"
        f"    gemm_efficiency: {gemm_efficiency}\n    gemm_efficiency_origin: test\n"
    )
    return path


def test_accelerators_override_moves_the_step_the_expected_way(tmp_path, monkeypatch):
    args = ["llama3-8b", "-t", "dgx-h100", "--gpus", "64", "--tp", "2", "--json"]

    def step(*extra: str, env: dict | None = None) -> float:
        proc = subprocess.run(
            CLI + args + list(extra), capture_output=True, text=True, env={**os.environ, **(env or {})}
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["step_time_s"]

    shipped = step()
    faster = step("--accelerators", str(_h100_override(tmp_path, 0.95)))
    slower = step(env={ACCELERATORS_ENV: str(_h100_override(tmp_path, 0.6))})
    assert faster < shipped < slower
    # the library reads the same variable; without it, the shipped figures
    w, topo = load_workload("llama3-8b"), load_topology("dgx-h100")
    monkeypatch.setenv(ACCELERATORS_ENV, str(_h100_override(tmp_path, 0.95)))
    assert project(w, topo, ParallelLayout(tp=2), 64).step_time_s == pytest.approx(faster, rel=1e-12)
    monkeypatch.delenv(ACCELERATORS_ENV)
    assert project(w, topo, ParallelLayout(tp=2), 64).step_time_s == pytest.approx(shipped, rel=1e-12)


def test_accelerators_files_are_an_argument_and_the_argument_wins_over_the_variable(tmp_path, monkeypatch):
    """The library takes the files as an argument (what the CLI's --accelerators passes down): they replace
    COMMLENS_ACCELERATORS, and a sweep's points see them in its worker processes too."""
    from commlens.project.sweep import Base, run_sweep

    w, topo, lay = load_workload("llama3-8b"), load_topology("dgx-h100"), ParallelLayout(tp=2)
    fast, slow = str(_h100_override(tmp_path, 0.95)), str(_h100_override(tmp_path, 0.6))
    shipped = project(w, topo, lay, 64).step_time_s
    monkeypatch.setenv(ACCELERATORS_ENV, slow)
    faster = project(w, topo, lay, 64, accelerators=(fast,)).step_time_s
    assert faster < shipped < project(w, topo, lay, 64).step_time_s
    assert project(w, topo, lay, 64, accelerators=()).step_time_s == shipped
    points = [{"topology.nic_gbps": 100 + i} for i in range(64)]
    rows = run_sweep(Base("llama3-8b", "dgx-h100", 64, {"tp": 2}, {}, (fast,)), points, workers=2).rows
    assert rows[0].figures["step_time_s"] == pytest.approx(faster, rel=0.05) and all(r.error is None for r in rows)
    monkeypatch.delenv(ACCELERATORS_ENV)
    assert rows == run_sweep(Base("llama3-8b", "dgx-h100", 64, {"tp": 2}, {}, (fast,)), points, workers=1).rows


def test_sweep_workers_see_the_override(tmp_path):
    base = [
        "sweep",
        "llama3-8b",
        "-t",
        "dgx-h100",
        "--gpus",
        "64",
        "--tp",
        "2",
        "--vary",
        "topology.nic_gbps=" + ",".join(str(100 + i) for i in range(70)),
        "--workers",
        "2",
        "--json",
    ]
    shipped = json.loads(subprocess.run(CLI + base, capture_output=True, text=True, check=True).stdout)
    faster = json.loads(
        subprocess.run(
            CLI + base + ["--accelerators", str(_h100_override(tmp_path, 0.95))],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert all(a["step_time_s"] > b["step_time_s"] for a, b in zip(shipped["rows"], faster["rows"]))


@pytest.mark.parametrize(
    "body, message",
    [
        ("accelerators:\n  H100 SXM:\n    sms: 1\n", "format None; expected commlens.accelerators/1"),
        (
            "format: commlens.accelerators/1\naccelerators:\n  H100 SXM:\n    gemm_eff: 0.9\n",
            "accelerators.'H100 SXM'.gemm_eff: unknown key",
        ),
        (
            "format: commlens.accelerators/1\naccelerators:\n  H100 SXM:\n    gemm_efficiency: 1.5\n"
            "    gemm_efficiency_origin: x\n",
            "accelerators.'H100 SXM'.gemm_efficiency: Input should be less than or equal to 1",
        ),
        (
            "format: commlens.accelerators/1\naccelerators:\n  H100 SXM:\n    memory_efficiency: 0.9\n",
            "accelerators.'H100 SXM'.memory_efficiency: given without memory_efficiency_origin",
        ),
        (
            "format: commlens.accelerators/1\naccelerators:\n  H100 SXM:\n    fp8_gemm_efficiency: 0.6\n",
            "accelerators.'H100 SXM'.fp8_gemm_efficiency: given without fp8_gemm_efficiency_origin",
        ),
        (
            "format: commlens.accelerators/1\naccelerators:\n  H100 SXM:\n    sms: 132\ngemms: {}\n",
            "unknown key 'gemms' (known: format, accelerators, attention, gemm)",
        ),
        (
            "format: commlens.accelerators/1\naccelerators:\n  X1:\n    sms: 10\n",
            "accelerators.'X1': missing peak_flops, hbm_bytes",
        ),
        (
            "format: commlens.accelerators/1\naccelerators:\n  H100 SXM:\n    gemm_shape: {k_overhead: 1, tiles: [[0, 1, 1]], "
            "origin: x}\n",
            "accelerators.'H100 SXM'.gemm_shape.tiles: tile 0x1",
        ),
    ],
)
def test_bad_accelerators_files_exit_2_naming_file_and_field(tmp_path, body, message):
    path = tmp_path / "acc.yaml"
    path.write_text(body)
    for argv, env in (
        (["validate", "--accelerators", str(path)], {}),
        (["llama3-8b", "-t", "dgx-h100", "--gpus", "64"], {ACCELERATORS_ENV: str(path)}),
    ):
        proc = subprocess.run(CLI + argv, capture_output=True, text=True, env={**os.environ, **env})
        assert proc.returncode == 2 and f"error: {path}: " in proc.stderr and message in proc.stderr, proc.stderr


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a GPU")
def test_measuring_without_cuda_exits_2(tmp_path):
    proc = subprocess.run(
        CLI + ["calibrate", "--out", str(tmp_path / "c.json")], capture_output=True, text=True, cwd=tmp_path
    )
    assert proc.returncode == 2
    assert "error: project calibrate needs a CUDA GPU (torch.cuda.is_available() is False)" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_plan_covers_the_projection_within_budget():
    gemms = plan_gemms()
    kinds = {(c.kind, c.dtype) for c in gemms}
    assert {
        ("square", "bf16"),
        ("transformer", "bf16"),
        ("attention", "bf16"),
        ("small", "bf16"),
        ("square", "fp16"),
        ("transformer", "fp16"),
        ("square", "fp8"),
        ("transformer", "fp8"),
    } <= kinds
    assert 300 <= len(gemms) <= 700 and plan_gemms() == gemms  # seeded: the same plan every time
    # fp8 in the one layout cuBLASLt runs it (B column-major), every dimension a multiple of 16, each shape once
    fp8 = [c for c in gemms if c.dtype == "fp8"]
    assert len(fp8) >= 100 and {c.layout for c in fp8} == {"nt"} and len(set(fp8)) == len(fp8)
    assert all(c.m % 16 == 0 and c.n % 16 == 0 and c.k % 16 == 0 and c.batch == 1 for c in fp8)
    shapes = {(c.m, c.n, c.k, c.layout) for c in gemms}
    # every GEMM of the 1T row of Megatron SC'21 (h 25600, TP 8, 2048 tokens): fc1 forward, dgrad, wgrad
    assert {(2048, 12800, 25600, "nt"), (2048, 25600, 12800, "nn"), (25600, 12800, 2048, "tn")} <= shapes
    assert {c.k for c in gemms if c.kind == "attention"} >= {64, 128}
    # planned device time at nominal H200 rates (warm-up + timed windows, plus ~3 ms per case to set up)
    total = sum(
        (w + r) * i * estimate_s(c) + 3e-3 for c in [*gemms, *plan_streams()] for w, r, i in [_repeats(estimate_s(c))]
    )
    assert total < 60


def test_measure_code_runs_end_to_end_on_cpu(tmp_path):
    # Tiny shapes with the wall clock: checks operand layouts, batching, stream kernels, the records and the file.
    gemms = [
        GemmCase("square", "sq", 64, 64, 64),
        GemmCase("transformer", "t", 96, 32, 48, layout="nt"),
        GemmCase("transformer", "w", 48, 32, 96, layout="tn", dtype="fp16"),
        GemmCase("attention", "a", 32, 32, 16, batch=3, layout="nt"),
        GemmCase("transformer", "f8", 96, 32, 48, layout="nt", dtype="fp8"),
    ]
    streams = [StreamCase(k, 1 << 20) for k in STREAM_KERNELS]
    seen = []
    cal = measure(
        gemms, streams, device="cpu", progress=lambda done, total, note: seen.append((done, total)), repeats=(1, 3, 2)
    )
    assert len(cal.gemm) == 5 and len(cal.stream) == len(STREAM_KERNELS) and not cal.settings["failed"]
    assert seen[-1] == (5 + len(STREAM_KERNELS),) * 2
    assert all(len(r.times_s) == 3 for r in cal.gemm + cal.stream)
    assert cal.gemm[3].batch == 3 and cal.gemm[2].dtype == "fp16" and cal.gemm[1].layout == "nt"
    assert cal.gemm[4].dtype == "fp8" and cal.settings["fp8"].startswith("e4m3 operands, per-tensor scales")
    path = tmp_path / "cpu.json"
    save_calibration(cal, path)
    assert load_calibration(path) == cal
    proc = subprocess.run(CLI + ["calibrate", "--from", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2 and "give one with --name" in proc.stderr


def test_attention_is_measured_and_lands_in_the_fragment_the_projection_reads(tmp_path):
    # Tiny causal attention on the CPU (SDPA's math backend, wall clock): the records, the file, the fragment's
    # attention section, and the projection reading its rate before the shipped tables.
    from commlens.project.calibrate import attention_entries
    from commlens.project.calibrate_measure import AttentionCase, plan_attention
    from commlens.project.efficiency import attention_tflops

    assert {(c.kernel, c.pass_) for c in plan_attention()} == {(k, p) for k in ("fa2", "cudnn") for p in ("fwd", "bwd")}
    cases = [AttentionCase("fa2", p, 2, 4, 64, 16) for p in ("fwd", "bwd")]
    cal = measure([GemmCase("square", "sq", 64, 64, 64)], [], device="cpu", repeats=(1, 3, 1), attention=cases)
    assert [(r.pass_, r.seq_len, r.head_dim) for r in cal.attention] == [("fwd", 64, 16), ("bwd", 64, 16)]
    assert cal.attention[1].flops == 2.5 * cal.attention[0].flops
    path = tmp_path / "cpu.json"
    save_calibration(cal, path)
    assert load_calibration(path) == cal
    fit = fit_calibration(cal, str(path), "H100 SXM", ("gemm_efficiency",))
    entries = attention_entries(fit)
    assert [e["pass"] for e in entries] == ["fwd", "bwd"] and entries[0]["tflops"] == pytest.approx(
        cal.attention[0].tflops, rel=1e-3
    )
    fragment = tmp_path / "h100.yaml"
    fragment.write_text(fragment_yaml(fit))
    got = attention_tflops("H100 SXM", "fa2", "fwd", 16, 64, (str(fragment),))
    assert got == pytest.approx(entries[0]["tflops"] * 1e12)


REAL = Path(__file__).parent / "data" / "calibration" / "h200-calibration.json"


def test_shipped_h200_curve_against_the_gemms_measured_on_an_h200():
    # 539 GEMMs measured with scripts/gpu-check.sh on an NVIDIA H200 (2026-11-29); the shipped constants must
    # describe them: transformer GEMMs within 8% on average, the batched attention products within 15% (before
    # batches shared waves in the curve, those were off by 47%).
    cal = load_calibration(REAL)
    assert cal.device.name == "NVIDIA H200" and len(cal.gemm) == 539
    fit = fit_calibration(cal, str(REAL), parameters=("gemm_efficiency",))
    shipped = fit.curves[0]
    assert shipped.gemm_efficiency == device_for("H200 SXM").gemm_efficiency
    assert shipped.by_kind["transformer"] < 0.08
    assert shipped.by_kind["attention"] < 0.15
    assert shipped.by_kind["square"] < 0.08
    # the plateau the shipped file carries is the one these measurements give
    assert fit.curves[2].gemm_efficiency == pytest.approx(shipped.gemm_efficiency, abs=0.005)


def test_measured_gemms_cap_the_expert_gemms_of_the_calibrated_gpu(synthetic_file, tmp_path):
    # The fragment carries the sweep's GEMMs on their rate envelope (per dtype, the smallest dimension at least 512,
    # single products); a projection given it caps a GEMM launched alone by them instead of the published rows.
    from commlens.project.calibrate import gemm_entries
    from commlens.project.efficiency import GEMM_CAP_MIN_DIM, gemm_rate_cap

    fit = fit_calibration(load_calibration(synthetic_file), str(synthetic_file), parameters=("gemm_efficiency",))
    rows = gemm_entries(fit)
    assert {r["dtype"] for r in rows} == {"bf16", "fp8"}
    for dtype in ("bf16", "fp8"):
        mine = [r for r in rows if r["dtype"] == dtype]
        flops = [2 * r["m"] * r["n"] * r["k"] for r in mine]
        rates = [r["tflops"] for r in mine]
        assert flops == sorted(flops) and rates == sorted(rates) and len(set(rates)) == len(rates)  # an envelope
        assert all(min(r["m"], r["n"], r["k"]) >= GEMM_CAP_MIN_DIM for r in mine)
        # every measured single product of that dtype lies on or under it
        measured = [g for g in fit.calibration.gemm if g.batch == 1 and (g.dtype == "fp8") == (dtype == "fp8")]
        for g in measured:
            if min(g.m, g.n, g.k) >= GEMM_CAP_MIN_DIM:
                assert g.tflops <= max(r for f, r in zip(flops, rates) if f <= g.flops) * 1.0001
    fragment = tmp_path / "h200.yaml"
    fragment.write_text(fragment_yaml(fit))
    assert yaml.safe_load(fragment.read_text())["gemm"]["H200 SXM"] == rows
    top = [r for r in rows if r["dtype"] == "fp8"][-1]
    at = 2.0 * top["m"] * top["n"] * top["k"]
    assert gemm_rate_cap("H200 SXM", "fp8", at, (str(fragment),)) == pytest.approx(top["tflops"] * 1e12)
    assert gemm_rate_cap("H200 SXM", "fp8", at) != pytest.approx(top["tflops"] * 1e12)  # the shipped rows
    # an MoE projection on the H200 reads them; a dense one never launches a GEMM alone
    args = ["-t", "dgx-h200", "--gpus", "8", "--json"]
    for workload, extra, moves in (("qwen3-30b-a3b", ["--ep", "8"], True), ("llama3-8b", [], False)):
        with_gemms = fragment_yaml(fit)
        no_gemms = yaml.safe_load(with_gemms)
        no_gemms.pop("gemm")
        plain = tmp_path / "plain.yaml"
        plain.write_text(yaml.safe_dump(no_gemms))
        steps = []
        for path in (plain, fragment):
            proc = subprocess.run(
                CLI + [workload, *args, *extra, "--accelerators", str(path)], capture_output=True, text=True
            )
            assert proc.returncode == 0, proc.stderr
            steps.append(json.loads(proc.stdout)["step_time_s"])
        assert (steps[0] != steps[1]) is moves, (workload, steps)


def test_a_bad_gemm_section_exits_2_naming_the_file_and_row(tmp_path):
    path = tmp_path / "acc.yaml"
    path.write_text(
        "format: commlens.accelerators/1\naccelerators:\n  H200 SXM:\n    sms: 132\n"
        "gemm:\n  H200 SXM:\n    - {dtype: bf16, m: 4096, n: 4096, k: 0, tflops: 700, origin: x}\n"
    )
    # refused when the file is loaded, also where no GEMM is capped (a dense model launches none alone)
    for args in (["qwen3-30b-a3b", "--ep", "8"], ["llama3-8b", "--tp", "2"]):
        proc = subprocess.run(
            CLI + [*args, "-t", "dgx-h200", "--gpus", "8", "--accelerators", str(path)], capture_output=True, text=True
        )
        assert proc.returncode == 2 and proc.stdout == ""
        want = f"error: {path}: H200 SXM: gemm row 1: expected a positive number, got 0"
        assert proc.stderr.startswith(want), proc.stderr


def test_fp8_gemms_are_dropped_and_said_where_the_gpu_has_no_fp8(monkeypatch):
    # This CPU runs torch._scaled_mm, so the check passes here; a GPU below compute capability 8.9 cannot be lent,
    # so its answer stands in for the check (the rest of the sweep runs for real on the CPU).
    import commlens.project.calibrate_measure as cm

    assert cm._fp8_unsupported("cpu") == ""
    reason = "compute capability 8.0 has no fp8 tensor cores (8.9 and up have)"
    monkeypatch.setattr(cm, "_fp8_unsupported", lambda device: reason)
    gemms = [GemmCase("square", "sq", 64, 64, 64), GemmCase("transformer", "f8", 96, 32, 48, layout="nt", dtype="fp8")]
    cal = measure(gemms, [], device="cpu", repeats=(1, 2, 1))
    assert [r.dtype for r in cal.gemm] == ["bf16"] and not cal.settings["failed"]
    assert cal.settings["fp8"] == f"1 fp8 GEMMs planned, not measured: {reason}"
    fit = fit_calibration(cal, "cpu.json", "H100 SXM", ("gemm_efficiency",))
    assert fit.fp8_curves == [] and "no fp8 GEMMs measured: fp8_gemm_efficiency kept" in fit.notes
