"""[27 s20 attsust] The attention tables are short benchmark runs at boost clock; a training step keeps the GPU at its
power limit for seconds. A DGX B200's GPU (1000 W) keeps 0.853 of a short run's attention rate (flashinfer PR #2899:
FlashAttention-4 timed back to back on a B200, 1450 -> 1237 TFLOP/s as the SM clock falls from 1965 to ~1580 MHz)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from commlens.project import ParallelLayout, project
from commlens.project.hardware import ACCELERATORS_ENV, device_for
from commlens.project.validate import load_set, validate_set
from commlens.topology import load_topology
from commlens.workload import load_workload

B200 = load_topology("b200")
CLI = [sys.executable, "-m", "commlens", "project"]


def _boost_clock(tmp_path, value: float = 1.0) -> str:
    path = tmp_path / "boost.yaml"
    path.write_text(
        "format: commlens.accelerators/1\naccelerators:\n"
        f'  "B200": {{attention_sustained: {value}, attention_sustained_origin: "a short benchmark run"}}\n'
    )
    return str(path)


def test_only_the_b200_has_a_sustained_attention_measurement():
    assert device_for("B200").attention_sustained == pytest.approx(1237 / 1450, abs=5e-4)
    assert "2899" in device_for("B200").attention_sustained_origin
    for name in ("B200 (GB200)", "B300 (GB300)", "H100 SXM", "H200 SXM", "A100 SXM 80GB", "MI300X"):
        assert device_for(name).attention_sustained == 1.0, name


def test_a_b200_step_runs_its_attention_at_the_sustained_rate_and_nothing_else_slower(tmp_path):
    """Llama 3 8B at 32K tokens on 8 B200s: the attention kernels take 1 / 0.853 of their short-run time; GEMMs,
    memory-bound kernels and communication are the same."""
    w = load_workload("llama3-8b", {"seq_len": 32768, "global_batch": 8, "micro_batch": 1})
    layout = ParallelLayout(tp=1, recompute="none")  # memory is not what this checks
    sustained = project(w, B200, layout, 8, check_memory=False)
    boost = project(w, B200, layout, 8, accelerators=[_boost_clock(tmp_path)], check_memory=False)
    assert sustained.kernels["attention"] / boost.kernels["attention"] == pytest.approx(1450 / 1237, rel=2e-3)
    assert sustained.kernels["gemm"] == pytest.approx(boost.kernels["gemm"])
    assert sustained.breakdown["memory_bound"] == pytest.approx(boost.breakdown["memory_bound"])
    # attention is about half of this step: the step is ~8% longer, the throughput ~8% lower
    assert 1.05 < sustained.step_time_s / boost.step_time_s < 1.12


def test_nemo_long_context_b200_rows_are_no_longer_optimistic_by_the_attention_share():
    """NeMo's long-sequence table on DGX B200 (8K-1M tokens): at the short-run rates every row was optimistic, more so
    as attention's share grew (+7% at 8K, +14-19% from 128K); at the sustained rate every row is within 6%."""
    table = load_set("nemo-long-context-b200")
    errors = [r.error for r in validate_set(table)]
    assert all(e is not None and abs(e) < 0.06 for e in errors), errors


def test_an_accelerators_file_can_say_its_attention_ran_at_boost_clock(tmp_path):
    w = load_workload("llama3-8b", {"seq_len": 8192, "global_batch": 8, "micro_batch": 1})
    shipped = project(w, B200, ParallelLayout(tp=1), 8)
    boost = project(w, B200, ParallelLayout(tp=1), 8, accelerators=[_boost_clock(tmp_path)])
    assert boost.step_time_s < shipped.step_time_s


@pytest.mark.parametrize(
    "fields, message",
    [
        ("{attention_sustained: 1.2, attention_sustained_origin: x}", "attention_sustained: Input should be less"),
        ("{attention_sustained: 0, attention_sustained_origin: x}", "attention_sustained: Input should be greater"),
        ("{attention_sustained: 0.9}", "attention_sustained: given without attention_sustained_origin"),
    ],
)
def test_a_bad_sustained_factor_exits_2_naming_the_file_and_field(tmp_path, fields, message):
    path = tmp_path / "acc.yaml"
    path.write_text(f'format: commlens.accelerators/1\naccelerators:\n  "B200": {fields}\n')
    proc = subprocess.run(
        CLI + ["llama3-8b", "-t", "b200", "--gpus", "8"],
        capture_output=True,
        text=True,
        env={**os.environ, ACCELERATORS_ENV: str(path)},
    )
    assert proc.returncode == 2 and f"error: {path}: " in proc.stderr and message in proc.stderr, proc.stderr
    assert not proc.stdout


def _b200_row(tmp_path, extra: str, name: str = "b200-attention.yaml") -> str:
    path = tmp_path / name
    path.write_text(
        'format: commlens.efficiency/1\ngpus:\n  "B200":\n    attention:\n'
        f"      - {{kernel: fa2, pass: fwd, causal: true, head_dim: 128, seq_len: 8192, tflops: 1000{extra}, "
        'origin: "test"}\n'
    )
    return str(path)


def test_a_sustained_measurement_is_read_as_it_is(tmp_path, monkeypatch):
    """Rows that say `sustained: true` (what `commlens project calibrate` writes: its sweep keeps the GPU at its power
    limit) are the rate a step sees; rows without it are short runs and get the B200's 0.853."""
    from commlens.project.efficiency import attention_tflops

    monkeypatch.setenv("COMMLENS_EFFICIENCY", _b200_row(tmp_path, "", "short.yaml"))
    short = attention_tflops("B200", "fa2", "fwd", 128, 8192)
    assert short == pytest.approx(1000e12 * device_for("B200").attention_sustained)
    monkeypatch.setenv("COMMLENS_EFFICIENCY", _b200_row(tmp_path, ", sustained: true", "held.yaml"))
    assert attention_tflops("B200", "fa2", "fwd", 128, 8192) == pytest.approx(1000e12)


def test_a_b200_calibration_is_not_scaled_again(tmp_path):
    """`commlens project calibrate` times attention among the sweep's GEMMs, the GPU at its power limit: its fragment
    marks the rows sustained, and a B200 projection reads them as measured, not x 0.853 (tiny attention on the CPU,
    SDPA's math backend, wall clock, as tests/test_project_calibrate.py measures it)."""
    from commlens.project.calibrate import attention_entries, fit_calibration, fragment_yaml
    from commlens.project.calibrate_measure import AttentionCase, GemmCase, measure
    from commlens.project.calibration_file import save_calibration
    from commlens.project.efficiency import attention_tflops

    cases = [AttentionCase("fa2", p, 2, 4, 64, 16) for p in ("fwd", "bwd")]
    cal = measure([GemmCase("square", "sq", 64, 64, 64)], [], device="cpu", repeats=(1, 3, 1), attention=cases)
    path = tmp_path / "cpu.json"
    save_calibration(cal, path)
    fit = fit_calibration(cal, str(path), "B200", ("gemm_efficiency",))
    entries = attention_entries(fit)
    assert all(e["sustained"] for e in entries)
    fragment = tmp_path / "b200.yaml"
    fragment.write_text(fragment_yaml(fit))
    got = attention_tflops("B200", "fa2", "fwd", 16, 64, (str(fragment),))
    assert got == pytest.approx(entries[0]["tflops"] * 1e12)


def test_a_sustained_flag_that_is_not_true_or_false_exits_2(tmp_path):
    path = _b200_row(tmp_path, ', sustained: "yes"')
    proc = subprocess.run(
        CLI + ["llama3-8b", "-t", "b200", "--gpus", "8"],
        capture_output=True,
        text=True,
        env={**os.environ, "COMMLENS_EFFICIENCY": path},
    )
    assert proc.returncode == 2 and "attention 1: sustained: expected true or false, got 'yes'" in proc.stderr, (
        proc.stderr
    )
    assert not proc.stdout
