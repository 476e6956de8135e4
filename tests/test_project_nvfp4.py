"""NVFP4 training as Transformer Engine's NVFP4BlockScaling recipe runs it [27 s25 nvfp4]: `fp8_recipe: nvfp4` under
fp8 precision. Its GEMMs run at the device's measured rate against per-tensor fp8 GEMMs, its casts move what TE's
quantizer reads and writes (one read fewer from TE 2.14), the weight gradient's inputs are kept in 4 bits, sequence
parallelism and the optimizer's parameter all-gather move 4-bit copies, and a GPU without NVFP4 tensor cores is
refused. The Megatron-Bridge pages' NVFP4 rows (held out) project."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from commlens.project import InfeasibleLayoutError, ParallelLayout, Projection, project
from commlens.project.frameworks import framework
from commlens.project.hardware import AcceleratorsFileError, device_for, load_accelerators_file
from commlens.project.kernels import NVFP4_EXPERT_GEMM_HOST_S, LayerShape, layer_kernels
from commlens.project.memory import NVFP4_BYTES, activation_parts
from commlens.project.sweep import Base, project_point
from commlens.project.validate import load_set, validate_set
from commlens.project.whatif import explore
from commlens.topology import load_topology
from commlens.workload import load_workload

GB300, GB200, H100 = (load_topology(n) for n in ("gb300-nvl72", "gb200-nvl72", "dgx-h100"))
W70 = load_workload("llama3-70b", {"seq_len": 8192, "global_batch": 256, "micro_batch": 1, "precision": "fp8"})


def _70b(topology, recipe: str, **layout: object) -> Projection:
    """Llama 3 70B on 64 GPUs at the 26.04.01 rows' PP 4 x VP 5: TP 1 on a GB300, TP 2 (sequence parallel, no TP
    overlap, as the NVFP4 rows) on a GB200, unless given."""
    tp = {"tp": 2, "sp": True, "tp_comm_overlap": False} if topology is GB200 else {}
    lay = {"pp": 4, "vpp": 5, "recompute": "none", "framework": "nemo", **tp, **layout}
    # the time, whatever the memory: per-tensor fp8 without fp8 weights overflows a GB300 at TP 1
    return project(W70, topology, ParallelLayout(**lay, fp8_recipe=recipe), 64, check_memory=False)  # type: ignore[arg-type]


def test_a_gpu_without_nvfp4_tensor_cores_is_refused_naming_te_s_check():
    with pytest.raises(InfeasibleLayoutError, match="check_nvfp4_support.*H100 SXM \\(hopper\\)"):
        _70b(H100, "nvfp4", tp=4)
    cmd = [sys.executable, "-m", "commlens", "project", "llama3-70b", "-t", "dgx-h100", "-n", "64", "--tp", "4"]
    cmd += ["--pp", "4", "--precision", "fp8", "--set", "layout.fp8_recipe=nvfp4"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("error: fp8_recipe nvfp4 needs NVFP4 tensor cores")


def test_a_stack_older_than_te_2_7_is_refused():
    """NVFP4 came with Transformer Engine 2.7 (Megatron-Core's get_fp4_recipe requires it): the NeMo 25.07 container's
    TE 2.5 has none; the 25.09 release's profile runs it."""
    with pytest.raises(InfeasibleLayoutError, match="nemo-25.07 runs a Transformer Engine .* older than NVFP4"):
        _70b(GB300, "nvfp4", framework="nemo-25.07")
    assert _70b(GB300, "nvfp4", framework="megatron-core-25.09").step_time_s > 0


def test_fp8_attention_beside_nvfp4_linears_runs_per_tensor_current_scaling():
    """TE has no NVFP4 attention; beside NVFP4 linears it runs FP8 attention with a recipe of its own
    (NVTE_DPA_FP8_RECIPE): the same attention kernels and casts as under current scaling."""
    nv, cur = _70b(GB300, "nvfp4", fp8_attention="fwd_bwd"), _70b(GB300, "current", fp8_attention="fwd_bwd")
    assert nv.kernels["attention"] == pytest.approx(cur.kernels["attention"])
    assert nv.kernels["attention"] < _70b(GB300, "nvfp4").kernels["attention"]


def _layer_gemm_s(accelerator: str, recipe: str) -> float:
    """One Llama 3 70B layer's GEMMs (forward and backward) at TP 1, 8,192 tokens, on ``accelerator``."""
    dev = device_for(accelerator)
    shape = LayerShape(tokens=8192.0, keys=8192.0, tp=1, ep=1, sp=False, tp_chunks=1)
    peak = dev.peak("fp8") * (dev.fp8_gemm_efficiency or dev.gemm_efficiency) / dev.gemm_efficiency
    lay = ParallelLayout(framework="nemo", fp8_recipe=recipe)  # type: ignore[arg-type]
    kernels = layer_kernels(dev, framework("nemo"), W70, lay, shape, peak, dev.peak("bf16"), False)
    return sum(k.fwd_s + k.bwd_s for k in kernels if k.kind == "gemm")


def test_the_layers_gemms_run_at_the_measured_rate_against_per_tensor_fp8():
    """On a GB300: 1.81x per-tensor fp8 (TE's B300 GEMM profile, one layer's twelve GEMMs pre-quantized); on a GB200
    1.57x and a B200 1.50x: vLLM's measured 2.73x bf16 at the GPU's bf16 plateau. The output layer stays in 16 bits
    under either recipe, so a step gains less than its layers."""
    for accelerator, rate in (("B300 (GB300)", 1.81), ("B200 (GB200)", 1.57), ("B200", 1.50)):
        assert _layer_gemm_s(accelerator, "current") / _layer_gemm_s(accelerator, "nvfp4") == pytest.approx(rate)
    step = _70b(GB300, "current").kernels["gemm"] / _70b(GB300, "nvfp4").kernels["gemm"]
    assert 1.5 < step < 1.81


def test_the_casts_move_what_te_s_quantizer_reads_and_writes():
    """Per cast element TE 2.14 on reads the 16-bit tensor twice (both amaxes, then one kernel for the row-wise and the
    Hadamard column-wise copy), TE 2.12 (the 26.02 container) three times; both write 2 x 0.5625 B; the output
    gradient's stochastic rounding slows its quantize 6.4 / 4.5 times. So the 26.02 release's casts cost between
    7.125 / 5.125 (forward) and 9.29 / 6.44 (backward) of the later ones'."""
    fused = _70b(GB300, "nvfp4").kernels["fp8_cast"]
    unfused = _70b(GB300, "nvfp4", framework="megatron-core-26.02").kernels["fp8_cast"]
    assert 7.125 / 5.125 * 0.999 < unfused / fused < 9.289 / 6.444 * 1.001
    # and both cost more than MXFP8's one-pass cast of 4.06 B
    assert fused > _70b(GB300, "mxfp8").kernels["fp8_cast"]


def test_the_weight_gradient_inputs_are_kept_in_four_bits():
    """A linear keeps its input's NVFP4 column-wise copy (0.5625 B an element) for the weight gradient, not fp8's
    1 B: less activation memory on every stage."""
    lay = ParallelLayout(pp=4, vpp=5, recompute="none", framework="nemo", fp8_recipe="nvfp4")
    nv = activation_parts(W70, lay, 1, False)
    fp8 = activation_parts(W70, lay.model_copy(update={"fp8_recipe": "current"}), 1, False)
    assert fp8["mlp"] - nv["mlp"] == pytest.approx((1.0 - NVFP4_BYTES) * W70.ffn_hidden)
    mem = {r: _70b(GB300, r).memory["activations"] for r in ("current", "nvfp4")}
    assert mem["nvfp4"] < mem["current"]


def test_sequence_parallel_gathers_and_the_parameter_gather_move_four_bit_copies():
    """Under TP 2 with sequence parallelism TE quantizes before the all-gather (its amax all-reduced over TP first), so
    the gathers carry NVFP4 where MXFP8's carry 16 bits; with Megatron's fp4 parameter gather (fp8_param_gather) the
    distributed optimizer's all-gather moves 0.5625 B a weight where per-tensor fp8's moves 1 B."""
    assert _70b(GB200, "nvfp4").breakdown["tp_comm"] < _70b(GB200, "mxfp8").breakdown["tp_comm"]
    exposed = {"overlap_param_gather": False, "overlap_grad_reduce": False, "fp8_param_gather": True}
    nv = _70b(GB200, "nvfp4", **exposed).breakdown["dp_comm"]
    cur = _70b(GB200, "current", **exposed).breakdown["dp_comm"]
    bf16 = _70b(GB200, "nvfp4", **{**exposed, "fp8_param_gather": False}).breakdown["dp_comm"]
    assert nv < cur < bf16


def test_an_accelerators_file_gives_the_rate_with_its_origin(tmp_path: Path):
    bad = tmp_path / "b.yaml"
    bad.write_text('format: commlens.accelerators/1\naccelerators:\n  "B200":\n    nvfp4_gemm_rate: 1.6\n')
    with pytest.raises(AcceleratorsFileError, match="nvfp4_gemm_rate: given without nvfp4_gemm_rate_origin"):
        load_accelerators_file(bad)
    good = tmp_path / "g.yaml"
    good.write_text(
        'format: commlens.accelerators/1\naccelerators:\n  "H100 SXM":\n    nvfp4_gemm_rate: 1.5\n'
        '    nvfp4_gemm_rate_origin: "a what-if"\n'
    )
    assert load_accelerators_file(good)["H100 SXM"].nvfp4_gemm_rate == 1.5


def test_the_pages_nvfp4_rows_project():
    """Held out (session 25): 26.02.01 -14.8 +4.2 -6.6 -3.4%, 26.04.01 -15.3 +0.4 -10.1 -10.3% (GB300 70B, GB200
    70B, GB300 405B, GB200 405B); the GB300 rows as the GB300 rows of the other recipes (-7 to -11%); mean 8.1%. (With
    the GB200 rate's first derivation, 1.39, the GB200 rows were -2.1 -9.7 -5.8 -16.2%.)"""
    errors: list[float] = []
    for name in ("megatron-bridge-perf-26.02.01-dense", "megatron-bridge-perf-26.04.01-dense"):
        table = load_set(name)
        for row, r in zip(table.rows, validate_set(table)):
            if row.layout.get("fp8_recipe") == "nvfp4":
                assert r.predicted is not None and r.error is not None, r.refused
                errors.append(r.error)
    assert len(errors) == 8 and all(-0.2 < e < 0.06 for e in errors)
    assert sum(abs(e) for e in errors) / 8 < 0.09


def test_the_what_if_offers_nvfp4_for_an_fp8_layout_on_blackwell_and_not_on_hopper():
    """The 26.04.01 GB200 Llama 3 70B MXFP8 layout: NVFP4 is the best change, at the model's own gain; an NVFP4 layout
    is offered NVFP4 no more, and Hopper is offered no NVFP4."""
    gb200 = Base(
        "llama3-70b", "gb200-nvl72", 64,
        {"tp": 2, "pp": 4, "vpp": 5, "recompute": "none", "fp8_recipe": "mxfp8"},
        {"precision": "fp8", "global_batch": 256},
    )  # fmt: skip
    now, nv = project_point(gb200, {}), project_point(gb200, {"layout.fp8_recipe": "nvfp4"})
    best = explore(gb200, {}).changes[0]
    assert best.label == "NVFP4 (fp8_recipe nvfp4)" and best.step_time_s == pytest.approx(nv.step_time_s)
    assert nv.step_time_s < now.step_time_s / 1.2
    labels = [c.label for c in explore(gb200, {"layout.fp8_recipe": "nvfp4"}, top=50).changes]
    assert not any(label.startswith("NVFP4") for label in labels) and "fp8 attention (fwd+bwd)" in labels
    h100 = Base("llama3-70b", "dgx-h100", 64, {"tp": 4, "pp": 4, "recompute": "none"}, {"precision": "fp8"})
    assert not any(c.label.startswith("NVFP4") for c in explore(h100, {}, top=50).changes)


def test_grouped_linear_casts_all_experts_in_one_set_of_kernels():
    """TE's GroupedLinear under NVFP4 (v2.12 on) casts every local expert's slice in grouped kernels, where MXFP8 and
    current scaling cast expert by expert: 16 more local experts add 16 GEMM calls to fc2's forward under NVFP4,
    16 x (GEMM call + cast) under MXFP8; a block-scaled GEMM call issues its measured host time, on this Grace host
    34 us against a plain launch's 2.75 x 10 us [27 s30 nvfp4call]."""
    qwen = load_workload("qwen3-30b-a3b", {"seq_len": 4096, "global_batch": 512, "micro_batch": 4, "precision": "fp8"})
    dev, fw = device_for("B200 (GB200)"), framework("nemo")
    peak = dev.peak("fp8") * (dev.fp8_gemm_efficiency or dev.gemm_efficiency) / dev.gemm_efficiency

    def fc2_launches(recipe: str, ep: int) -> float:
        lay = ParallelLayout(ep=ep, framework="nemo", fp8_recipe=recipe, moe_dispatcher="hybridep")  # type: ignore[arg-type]
        shape = LayerShape(tokens=16384.0, keys=4096.0, tp=1, ep=ep, sp=False, tp_chunks=1)
        kernels = layer_kernels(dev, fw, qwen, lay, shape, peak, dev.peak("bf16"), True)
        return next(k.launches for k in kernels if k.name == "experts_out")

    call = NVFP4_EXPERT_GEMM_HOST_S / (fw.host_s_per_kernel * dev.host_op_factor)  # launches' worth, here 1.24
    assert call == pytest.approx(34e-6 / 27.5e-6)
    assert fc2_launches("nvfp4", 4) - fc2_launches("nvfp4", 8) == pytest.approx(16 * call)
    assert fc2_launches("mxfp8", 4) - fc2_launches("mxfp8", 8) == pytest.approx(16 * (call + 1))


def test_the_hadamard_transform_and_stochastic_rounding_as_the_run_sets_them():
    """MLPerf Training v5.1's NVFP4 configs turn TE's Hadamard transform off (NVTE_NVFP4_DISABLE_RHT=1; the 405B ones
    stochastic rounding too): then one kernel casts both copies after a plain amax pass whatever the release, so the
    26.02 container's casts cost what later ones do, and less than its Hadamard casts; without stochastic rounding the
    output gradients' casts cost what the inputs' do."""
    off = {"nvfp4_rht": False}
    old, new = _70b(GB300, "nvfp4", framework="megatron-core-26.02", **off), _70b(GB300, "nvfp4", **off)
    assert old.kernels["fp8_cast"] == pytest.approx(new.kernels["fp8_cast"])
    assert old.kernels["fp8_cast"] < _70b(GB300, "nvfp4", framework="megatron-core-26.02").kernels["fp8_cast"]
    plain = _70b(GB300, "nvfp4", nvfp4_stochastic_rounding=False, **off).kernels["fp8_cast"]
    assert plain < new.kernels["fp8_cast"]
    # with neither, the casts are 5.125 B an element each way: the ratio of their times is the ratio of the elements
    rounded = new.kernels["fp8_cast"] / plain
    assert 1.0 < rounded < 1.0 + (6.4 / 4.5 - 1.0) * 3.125 / 5.125


def test_mlperf_v5_1_nvfp4_results_project():
    """Held out: v5.1's fifteen NVFP4 results (Hadamard transform off; the 405B ones without stochastic rounding, the
    8B ones with FP8 attention beside the NVFP4 linears): 405B GB200 -1.5 +1.3 -6.7%, GB300 -4.0%, 8B GB200 / GB300
    -7.5 -8.2%, B200 -4.0 -4.2 -4.0 -5.4 -3.9 -3.4 -2.9 +4.7 +8.1% (session 25): mean 4.9%, as their FP8 twins err."""
    table = load_set("mlperf-training-llm")
    errors: list[float] = []
    for row, r in zip(table.rows, validate_set(table)):
        if row.layout.get("fp8_recipe") == "nvfp4" and row.topology != "dgx-b300":  # B300's: test_project_b300.py
            assert r.predicted is not None and r.error is not None, r.refused
            errors.append(r.error)
    assert len(errors) == 15 and max(abs(e) for e in errors) < 0.1
    assert sum(abs(e) for e in errors) / 15 < 0.06


W8B = load_workload("llama3-8b", {"seq_len": 8192, "global_batch": 64, "micro_batch": 1, "precision": "fp8"})


def _8b(precision: str = "fp8", gpus: int = 8, **layout: object) -> Projection:
    w = W8B if precision == "fp8" else load_workload("llama3-8b", {**W8B.model_dump(), "precision": precision})
    lay = {"recompute": "none", "framework": "nemo", "fp8_recipe": "nvfp4", **layout}
    return project(w, GB300, ParallelLayout(**lay), gpus, check_memory=False)  # type: ignore[arg-type]


def test_layers_kept_in_16_bits_cost_what_a_bf16_layer_costs():
    """Megatron-Core's first_last_layers_bf16 (bf16_layers_start / _end): each such layer runs as under bf16
    precision. At PP 1, 4 of Llama 3 8B's 32 layers in 16 bits add 4 / 32 of what the whole model in bf16 adds to a
    micro-batch (the output layer is in 16 bits either way)."""
    base, four = _8b(), _8b(bf16_layers_end=4)
    whole = _8b("bf16")
    per_mb = [p.stages[0]["per_micro_batch_s"] for p in (base, four, whole)]
    assert per_mb[1] - per_mb[0] == pytest.approx(4 / 32 * (per_mb[2] - per_mb[0]), rel=0.02)
    assert four.memory["activations"] > base.memory["activations"]  # their GEMM inputs kept in 16 bits
    # the first layers are the first stage's, the last the last stage's
    first, last = _8b(gpus=16, pp=2, bf16_layers_start=2), _8b(gpus=16, pp=2, bf16_layers_end=2)
    even = _8b(gpus=16, pp=2)
    assert first.stages[0]["per_micro_batch_s"] > even.stages[0]["per_micro_batch_s"]
    assert first.stages[1]["per_micro_batch_s"] == pytest.approx(even.stages[1]["per_micro_batch_s"])
    assert last.stages[1]["per_micro_batch_s"] > even.stages[1]["per_micro_batch_s"]
    assert last.stages[0]["per_micro_batch_s"] == pytest.approx(even.stages[0]["per_micro_batch_s"])


def test_bf16_layers_are_checked_and_do_nothing_under_bf16():
    with pytest.raises(InfeasibleLayoutError, match="bf16_layers_start 20 \\+ bf16_layers_end 20 exceed"):
        _8b(bf16_layers_start=20, bf16_layers_end=20)
    assert _8b("bf16", bf16_layers_end=4).step_time_s == _8b("bf16").step_time_s


def test_the_tutorial_s_four_precisions_at_one_layout():
    """Megatron-Bridge's low-precision tutorial (Llama 3.1 8B, 4 GB200, one layout; held out, session 25): BF16
    11.65 s, FP8 current scaling 8.57 s (first and last layers in BF16), MXFP8 8.63 s, NVFP4 7.47 s (last 4 of 32
    layers in BF16): +3.1, -3.5, -3.2, -7.0%; the speed-ups over BF16 published 1.36 / 1.35 / 1.56."""
    table = load_set("megatron-bridge-tutorial-precision-gb200")
    res = validate_set(table)
    assert [r.error is not None and abs(r.error) < 0.08 for r in res] == [True] * 4
    bf16, fp8, mx, nv = (r.predicted for r in res)
    assert bf16 is not None and fp8 is not None and mx is not None and nv is not None
    assert nv < fp8 < bf16 and nv < mx < bf16  # step times: NVFP4 the fastest, BF16 the slowest
    # validate names an fp8 row's recipe beside its layout (the four rows share one layout)
    assert [r.layout.rsplit(" ", 1)[-1] for r in res] == ["dp4", "current", "mxfp8", "nvfp4"]
    assert bf16 / nv == pytest.approx(11.65 / 7.47, rel=0.1)
