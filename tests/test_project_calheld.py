"""[27 s20 attsust] `commlens project calibrate` measures what a GPU keeps of a short run's attention rate when the
call is held back to back at its power limit (`HeldRecord`), and the fit writes it as the accelerator's
`attention_sustained`. Measured here on the CPU (SDPA's math backend, wall clock): the plumbing, not a GPU's figure."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from commlens.project.calibrate import fit_calibration, fragment_yaml
from commlens.project.calibrate_measure import AttentionCase, GemmCase, measure, plan_held
from commlens.project.calibration_file import HeldRecord, load_calibration, save_calibration
from commlens.project.hardware import device_for

CLI = [sys.executable, "-m", "commlens", "project"]
TINY = AttentionCase("cudnn", "fwd", 2, 4, 64, 16)


def _measured(tmp_path, held=TINY):
    cal = measure(
        [GemmCase("square", "sq", 64, 64, 64)], [], device="cpu", repeats=(1, 3, 1), held=held, hold_s=0.2, idle_s=0
    )
    path = tmp_path / "cpu.json"
    save_calibration(cal, path)
    return cal, path


def test_the_held_call_is_timed_short_then_held_and_kept_in_the_file(tmp_path):
    cal, path = _measured(tmp_path)
    h = cal.held
    assert h is not None and (h.kernel, h.pass_, h.seq_len, h.head_dim) == ("cudnn", "fwd", 64, 16)
    assert len(h.short_times_s) == 10 and len(h.held_times_s) == 10  # a published table's 10 timed calls
    assert h.hold_s == 0.2 and h.keep == pytest.approx(h.short_s / h.held_s)
    assert load_calibration(path) == cal
    # the shape the CLI holds: flashinfer PR #2899's (4 x 8192 tokens, 16 heads of 128)
    assert (plan_held().batch, plan_held().seq_len, plan_held().heads, plan_held().head_dim) == (4, 8192, 16, 128)


def test_the_fit_states_it_as_attention_sustained_with_its_origin(tmp_path):
    cal, path = _measured(tmp_path)
    fit = fit_calibration(cal, str(path), "B200 (GB200)", ("gemm_efficiency",))
    assert fit.base.attention_sustained == 1.0
    assert fit.fitted.attention_sustained == pytest.approx(min(1.0, cal.held.keep), abs=1e-3)
    assert "after 0.2 s back to back" in fit.fitted.attention_sustained_origin
    entry = yaml.safe_load(fragment_yaml(fit))["accelerators"]["B200 (GB200)"]
    assert entry["attention_sustained"] == fit.fitted.attention_sustained
    assert "short run" in entry["attention_sustained_origin"]


def test_a_held_call_faster_than_its_short_run_is_kept_at_1(tmp_path):
    cal, path = _measured(tmp_path)
    h = cal.held
    faster = h.model_copy(update={"held_times_s": (h.short_s / 1.1,), "held_s": h.short_s / 1.1, "keep": 1.1})
    cal = cal.model_copy(update={"held": HeldRecord.model_validate(faster.model_dump(by_alias=True))})
    fit = fit_calibration(cal, str(path), "B200", ("gemm_efficiency",))
    assert fit.fitted.attention_sustained == 1.0 and any("kept at 1.0" in n for n in fit.notes)


def test_without_a_held_call_the_device_keeps_its_figure(tmp_path):
    cal, path = _measured(tmp_path, held=None)
    assert cal.held is None
    fit = fit_calibration(cal, str(path), "B200", ("gemm_efficiency",))
    assert fit.fitted.attention_sustained == device_for("B200").attention_sustained
    assert "attention_sustained" not in yaml.safe_load(fragment_yaml(fit))["accelerators"]["B200"]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"keep": 0.5}, "held: keep 0.5 is not short_s / held_s"),
        ({"held_s": 1.0}, "held: held_s 1.0 is not the median of held_times_s"),
        ({"hold_s": 0}, "held.hold_s: Input should be greater than 0"),
    ],
)
def test_a_bad_held_record_exits_2_naming_the_field(tmp_path, change, message):
    _, path = _measured(tmp_path)
    data = json.loads(path.read_text())
    data["held"].update(change)
    path.write_text(json.dumps(data))
    proc = subprocess.run(CLI + ["calibrate", "--from", str(path), "--name", "B200"], capture_output=True, text=True)
    assert proc.returncode == 2 and f"error: {path}: " in proc.stderr and message in proc.stderr, proc.stderr
    assert not proc.stdout


def test_a_negative_hold_exits_2():
    proc = subprocess.run(CLI + ["calibrate", "--hold-s", "-1"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--hold-s" in proc.stderr, proc.stderr


def test_the_held_call_does_not_eat_the_gemms_budget():
    # the hold (0.5 s here) is longer than the GEMMs' budget: the GEMMs are still measured, none skipped
    cal = measure(
        [GemmCase("square", "sq", 64, 64, 64)],
        [],
        device="cpu",
        repeats=(1, 3, 1),
        budget_s=0.2,
        held=TINY,
        hold_s=0.5,
        idle_s=0,
    )
    assert cal.held is not None and len(cal.gemm) == 1
    assert cal.settings["gemm_cases_skipped_over_budget"] == 0


def test_a_backend_the_gpu_lacks_leaves_no_held_record_and_the_sweep_goes_on(tmp_path, monkeypatch):
    # where SDPA has no cuDNN kernel it raises "No available kernel"; injected here, as this CPU always has one
    import commlens.project.calibrate_measure as cm

    def lacking(case, device):
        raise RuntimeError("No available kernel. Aborting execution.")

    monkeypatch.setattr(cm, "_attention_call", lacking)
    cal = measure([GemmCase("square", "sq", 64, 64, 64)], [], device="cpu", repeats=(1, 3, 1), held=TINY, hold_s=0.1)
    assert cal.held is None and len(cal.gemm) == 1
    assert cal.settings["failed"] == {"held attention cudnn fwd d16 s64": "No available kernel. Aborting execution."}
    path = tmp_path / "cpu.json"
    save_calibration(cal, path)
    fit = fit_calibration(load_calibration(path), str(path), "B200", ("gemm_efficiency",))
    assert fit.fitted.attention_sustained == device_for("B200").attention_sustained
