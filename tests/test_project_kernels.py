"""Issue 27: the operator-level step, framework profiles, schedules, per-module recomputation, MLA, the error band
and the memory verdict, through ``commlens.project.project`` and the CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from commlens.project import InfeasibleLayoutError, ParallelLayout, project
from commlens.project.bands import Residual, band, family_of, prediction_band
from commlens.project.compute import stream_time_s
from commlens.project.efficiency import EFFICIENCY_ENV, attention_tflops
from commlens.project.frameworks import framework, framework_names, generation
from commlens.project.hardware import device_for
from commlens.project.kernels import EAGER_STREAM_FRACTION, KINDS
from commlens.project.layout import resolve
from commlens.project.memory import LOGIT_BYTES, MEMORY_TOLERANCE, UNFUSED_LOGIT_BYTES, stage_memory, stage_parameters
from commlens.topology import load_topology
from commlens.workload import load_workload

H100 = load_topology("dgx-h100")
A100 = load_topology("dgx-a100")
CLI = [sys.executable, "-m", "commlens"]


def test_the_kernel_classes_add_up_to_the_pace_stage_s_gpu_time():
    w = load_workload("llama3-70b")
    p = project(w, H100, ParallelLayout(tp=8, pp=4), 1024)
    assert set(p.kernels) <= set(KINDS) and {"gemm", "attention", "norm", "rotary", "activation"} <= set(p.kernels)
    stage = p.stages[p.pace_stage]
    m = p.layout["micro_batches"]
    gpu = sum(v for k, v in p.kernels.items() if k != "optimizer")
    assert gpu == pytest.approx(m * (stage["compute"] + stage["memory_bound"]), rel=1e-9)
    assert p.kernels["gemm"] > p.kernels["attention"] > p.kernels["norm"]  # 70B at 8k: GEMM-bound


def test_a_model_with_learned_positions_has_no_rotary_kernel():
    p = project(load_workload("megatron-gpt-7.5b"), A100, ParallelLayout(tp=4, recompute="full"), 128)
    assert "rotary" not in p.kernels


def test_frameworks_change_the_step_as_their_stacks_do():
    assert {"megatron-core", "nemo", "torchtitan", "deepspeed"} <= set(framework_names())
    assert framework("nemo").overlap == framework("megatron-core").overlap  # NeMo runs Megatron-Core
    w = load_workload("llama3-8b", {"seq_len": 8192})
    steps = {}
    for fw, compile_ in (("megatron-core", None), ("torchtitan", False), ("torchtitan", True)):
        lay = ParallelLayout(tp=1, zero=3, framework=fw, compile=compile_, recompute="none")
        steps[(fw, compile_)] = project(w, H100, lay, 8)
    eager, compiled = steps[("torchtitan", False)], steps[("torchtitan", True)]
    # torchtitan eager runs norms, rotary and SwiGLU as several PyTorch ops and calls FlashAttention-2 on H100
    assert eager.kernels["norm"] > 3 * steps[("megatron-core", None)].kernels["norm"]
    assert eager.step_time_s > compiled.step_time_s > 0
    assert compiled.kernels["norm"] == pytest.approx(steps[("megatron-core", None)].kernels["norm"])


def test_eager_ops_move_more_bytes_and_stream_slower_than_fused_ones():
    """An eager op is several ATen kernels moving more bytes (SwiGLU 1.7x, rotary in complex fp32 5x), and those
    kernels stream at the rate measured for eager ops on an H200 (0.633 of HBM), not a fused kernel's 0.8."""
    assert EAGER_STREAM_FRACTION == pytest.approx(0.633 / 0.8)
    w = load_workload("llama3-8b", {"seq_len": 8192})

    def classes(compile_: bool) -> dict[str, float]:
        lay = ParallelLayout(tp=1, zero=3, framework="torchtitan", compile=compile_, recompute="none")
        return project(w, H100, lay, 8).kernels

    eager, fused = classes(False), classes(True)
    assert eager["activation"] / fused["activation"] == pytest.approx(1.7 / EAGER_STREAM_FRACTION)
    megatron = project(w, H100, ParallelLayout(tp=1, zero=3, recompute="none"), 8).kernels  # fused rotary
    assert eager["rotary"] / megatron["rotary"] == pytest.approx(5.0 / EAGER_STREAM_FRACTION)


def test_torch_compile_leaves_torchtitan_s_complex_rotary_eager():
    """torchtitan applies the rotary embedding in complex arithmetic (view_as_complex), which Inductor sends to its
    ATen kernels: compiling the blocks fuses the norms and SwiGLU but leaves the rotary as costly as eager. On
    torchtitan's end-2024 Table 1 (Llama 3.1 8B, 8 H100) compile saved 0.386 s of a 2.843 s step (5762 -> 6667
    TPS/GPU); fusing the rotary as well would credit it about 0.5 s."""
    w = load_workload("llama3-8b", {"seq_len": 8192})

    def run(framework_: str, compile_: bool) -> dict[str, float]:
        lay = ParallelLayout(tp=1, zero=3, framework=framework_, compile=compile_, recompute="none")
        return project(w, H100, lay, 8).kernels

    eager, compiled = run("torchtitan", False), run("torchtitan", True)
    assert compiled["rotary"] == pytest.approx(eager["rotary"])
    assert compiled["norm"] < eager["norm"] / 3 and compiled["activation"] < eager["activation"]
    assert "rotary" in framework("torchtitan").compile_eager
    # a stack without complex arithmetic gets its rotary fused by compile
    assert run("megatron-core", True)["rotary"] < eager["rotary"] / 5


def test_an_unknown_framework_or_a_schedule_it_lacks_is_refused():
    with pytest.raises(ValueError, match="unknown framework 'jax'"):
        ParallelLayout(framework="jax")
    w = load_workload("llama3-70b")
    with pytest.raises(InfeasibleLayoutError, match="megatron-core has no dualpipe pipeline schedule"):
        project(w, H100, ParallelLayout(tp=8, pp=4, schedule="dualpipe"), 1024)


def test_zero_bubble_shrinks_the_bubble_and_dualpipe_doubles_the_parameters():
    w = load_workload("llama3-70b")
    base = project(w, H100, ParallelLayout(tp=8, pp=8, framework="torchtitan"), 1024)
    zb = project(w, H100, ParallelLayout(tp=8, pp=8, framework="torchtitan", schedule="zero-bubble"), 1024)
    assert zb.breakdown["bubble"] == pytest.approx(base.breakdown["bubble"] / 3, rel=1e-6)
    dual = ParallelLayout(tp=8, pp=8, framework="torchtitan", schedule="dualpipe")
    r = resolve(dual, w, 1024, 8)
    assert stage_memory(w, dual, r)[1]["weights"] == pytest.approx(
        2 * stage_memory(w, ParallelLayout(tp=8, pp=8), r)[1]["weights"]
    )


def test_a_compiled_loss_keeps_no_fp32_copies_of_the_logits():
    """torchtitan's eager cross-entropy keeps fp32 copies of the logits; torch.compile of the loss fuses them away.
    The loss is compiled with the blocks unless the layout says it was not (torchtitan at the end of 2024)."""
    w = load_workload("llama3-8b", {"global_batch": 64, "micro_batch": 2})

    def memory(**kw):
        lay = ParallelLayout(tp=1, zero=3, framework="torchtitan", **kw)
        return stage_memory(w, lay, resolve(lay, w, 32, 8))[0]["activations"]

    eager_loss = memory(compile=True, compile_loss=False)
    logits = 2 * 8192 * w.vocab
    assert eager_loss - memory(compile=True) == pytest.approx(logits * (UNFUSED_LOGIT_BYTES - LOGIT_BYTES))
    assert memory(compile=False) == eager_loss
    assert memory(compile=False, compile_loss=True) == memory(compile=True)
    # the step streams the eager loss's extra bytes too
    lay = {"tp": 1, "zero": 3, "framework": "torchtitan", "compile": True}
    eager_step = project(w, H100, ParallelLayout(**lay, compile_loss=False), 32).kernels["loss"]
    assert eager_step > project(w, H100, ParallelLayout(**lay), 32).kernels["loss"]
    # Megatron's vocabulary-parallel loss is fused whatever compile says
    meg = ParallelLayout(tp=1, compile_loss=False)
    assert (
        stage_memory(w, meg, resolve(meg, w, 32, 8))[0]["activations"]
        == stage_memory(w, ParallelLayout(tp=1), resolve(ParallelLayout(tp=1), w, 32, 8))[0]["activations"]
    )


def test_fsdp_under_pp_accumulates_expert_gradients_as_the_stack_wraps_them():
    """FSDP under PP keeps each stage's gradients unsharded until the last micro-batch. torchtitan wraps the routed
    experts with the fp32 reduce policy (4 B each); NeMo AutoModel wraps them without one (bf16, 2 B) and leaves
    them out of FSDP where EP already shards them fully (no second copy at all)."""
    w = load_workload("deepseek-v3-like", {"seq_len": 4096, "global_batch": 512, "micro_batch": 1})

    def grads(framework: str, gpus: int) -> tuple[float, float]:
        lay = ParallelLayout(
            tp=1, pp=4, ep=64, zero=3, recompute="full", stage_layers=(16, 15, 15, 15), framework=framework
        )
        r = resolve(lay, w, gpus, 8)
        return stage_memory(w, lay, r)[1]["gradients"], stage_parameters(w, r)[1][1]

    titan, experts = grads("torchtitan", 256)  # 64 GPUs a stage, EP 64: nothing left for FSDP to shard experts over
    auto, _ = grads("automodel", 256)
    assert titan - auto == pytest.approx(4.0 * experts)
    titan, experts = grads("torchtitan", 1024)  # FSDP shards each expert over 4 GPUs
    auto, _ = grads("automodel", 1024)
    assert titan - auto == pytest.approx(2.0 * experts)


def test_deepspeed_gathers_zero3_parameters_on_demand():
    """ZeRO-3 with DeepSpeed's on-demand fetch exposes every gather; FSDP's one-layer prefetch hides most."""
    w = load_workload("megatron-gpt-7.5b", {"global_batch": 512, "micro_batch": 8})
    lay = {"tp": 1, "zero": 3, "recompute": "full", "flash_attention": False}
    ds = project(w, A100, ParallelLayout(**lay, framework="deepspeed"), 64)
    fsdp = project(w, A100, ParallelLayout(**lay, framework="torchtitan"), 64)
    assert ds.overlapped_s["fsdp_gather"] == 0 and ds.breakdown["dp_comm"] > fsdp.breakdown["dp_comm"]
    assert fsdp.overlapped_s["fsdp_gather"] > 0


def test_deepspeed_zero3_pays_one_collective_per_submodule_and_per_bucket():
    """DeepSpeed gathers each submodule's parameters with an all-gather of its own and reduce-scatters the gradients
    bucket by bucket (a weight larger than the bucket alone): at 1024 GPUs each of those rings pays its latency, so
    the exposed ZeRO-3 communication is the sum of those collectives, not the model's bytes in one collective spread
    over the layers."""
    from commlens.model.backends import nccl_predict

    w = load_workload("megatron-gpt-1t", {"seq_len": 1024, "global_batch": 8192, "micro_batch": 8})
    lay = ParallelLayout(
        tp=1, sp=False, zero=3, recompute="full", grad_reduce_bytes=2, flash_attention=False, framework="deepspeed"
    )
    p = project(w, A100, lay, 1024, check_memory=False)

    def t(op: str, nbytes: float) -> float:
        return nccl_predict(A100, op, int(nbytes), nodes=128, ranks_per_host=8).time_s

    h, f = w.hidden, w.ffn_hidden
    modules = [3 * h * h, h * h, h * f, f * h]  # QKV, attention output, the FFN's two linears: each over 5e8
    rest = stage_parameters(w, resolve(lay, w, 1024, 8))[0][0] - w.layers * sum(modules)
    gathers = w.layers * sum(t("all_gather", 2 * n) for n in modules) + t("all_gather", 2 * rest)
    reduces = w.layers * sum(t("reduce_scatter", 2 * n) for n in modules) + t("reduce_scatter", 2 * rest)
    # the forward, its recomputation and the backward each gather every submodule, on demand: nothing hides them;
    # each reduce-scatter's gradients are divided in place first (a 16-bit read and write each)
    divide = stream_time_s(device_for("A100 SXM 80GB"), 4 * stage_parameters(w, resolve(lay, w, 1024, 8))[0][0])
    # after the step, each norm weight and bias and each bias under 1e5 elements is gathered again, one at a time
    # (1T: the FFN's 4h bias is over it): [27 s12 dsfixed], tests/test_project_dsfixed.py
    persistent = w.layers * sum(t("all_gather", 2 * n) for n in (h, h, 3 * h, h, h, h, h))
    # and that 4h bias is gathered with its weight and both copied out of the coalesced buffer at each of the three
    # gathers ([27 s14 zero3size], tests/test_project_zero3size.py)
    copy_out = 3 * w.layers * stream_time_s(device_for("A100 SXM 80GB"), 4 * (h * f + f))
    expected = 3 * gathers + reduces + divide + persistent + copy_out
    assert p.breakdown["dp_comm"] == pytest.approx(expected, rel=1e-6)
    one_ring = 3 * t("all_gather", 2 * (w.layers * sum(modules) + rest))
    assert 3 * gathers > one_ring


def test_the_2022_deepspeed_runs_attend_without_flash_attention():
    """FlashAttention reached Megatron-LM in December 2022, after the DeepSpeed Azure runs (July 2022): their rows
    attend unfused, the softmax through HBM, which costs the 175B row time."""
    from commlens.project.validate import load_set

    rows = load_set("deepspeed-zero3-azure-2022").rows
    layouts = [ParallelLayout.model_validate(r.layout) for r in rows]
    assert layouts and not any(lay.flash_attention for lay in layouts)
    w = load_workload(rows[0].workload, rows[0].overrides)
    flash = layouts[0].model_copy(update={"flash_attention": True})
    unfused = project(w, A100, layouts[0], rows[0].gpus)
    assert unfused.step_time_s > project(w, A100, flash, rows[0].gpus).step_time_s


def test_per_module_recomputation_trades_memory_for_time():
    w = load_workload("deepseek-v3-like", {"seq_len": 4096, "global_batch": 1024, "micro_batch": 1})
    topo = load_topology("gb200-nvl72")
    base = {"tp": 1, "pp": 4, "ep": 64, "zero": 1, "stage_layers": (16, 16, 16, 13)}
    none = ParallelLayout(**base, recompute="none")
    up = ParallelLayout(**base, recompute="selective", recompute_modules=("mla_up_proj",))
    moe = ParallelLayout(**base, recompute="selective", recompute_modules="mla_up_proj,moe")
    r = resolve(none, w, 256, topo.accelerators_per_node)
    act = [stage_memory(w, lay, r)[0]["activations"] for lay in (none, up, moe)]
    assert act[0] > act[1] > act[2]
    steps = [project(w, topo, lay, 256, check_memory=False).step_time_s for lay in (none, up, moe)]
    assert steps[0] < steps[1] < steps[2]


def test_mla_counts_deepseek_v3_s_parameters():
    w = load_workload("deepseek-v3-like")
    assert w.parameters == pytest.approx(671e9, rel=0.005)  # DeepSeek-V3: 671B total
    assert w.active_parameters == pytest.approx(37.5e9, rel=0.02)  # and 37B active (+ embeddings)
    names = [n for n, _, _ in w.attention_linears(1)]
    assert names == ["q_down", "q_up", "kv_down", "kv_up", "attention_out"]


def test_the_band_comes_from_the_nearest_family_with_enough_rows():
    fam = ("hopper", "megatron-core", "dense", "long")
    rows = [Residual(fam, x) for x in (0.01, -0.02, 0.03)] + [Residual(("ampere", "deepspeed", "dense", "short"), 0.5)]
    b = band(10.0, fam, rows)
    assert b is not None and b.rows == 3 and b.family == "hopper x megatron-core x dense x long"
    assert b.low_s < 10.0 < b.high_s
    # a family without rows of its own falls back field by field, and says so
    other = band(10.0, ("blackwell", "torchtitan", "moe", "short"), rows)
    assert other is not None and other.rows == 4 and other.family == "* x * x * x *"
    low, high = prediction_band([0.1, 0.1, 0.1])
    assert low == pytest.approx(math.exp(0.1)) and high == pytest.approx(math.exp(0.1))
    assert family_of("H100 SXM", "nemo", True, 131072) == ("hopper", "megatron-core", "moe", "very-long")
    assert (
        generation("MI300X") == "cdna3"
        and generation("GB200") == "blackwell"
        and generation("A100 SXM 80GB") == "ampere"
    )


def test_every_projection_prints_its_band_and_validate_reports_the_coverage():
    out = subprocess.run(
        [*CLI, "project", "llama3-70b", "-t", "dgx-h100", "--gpus", "1024", "--tp", "8", "--pp", "4", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    p = json.loads(out.stdout)
    assert p["band"]["low_s"] < p["step_time_s"] * 1.5 and p["band"]["high_s"] > p["band"]["low_s"]
    assert p["band"]["rows"] >= 3 and p["framework"] == "megatron-core" and p["memory_fit"] == "fits"
    val = subprocess.run([*CLI, "project", "validate", "--json"], capture_output=True, text=True)
    data = json.loads(val.stdout)
    cov = data["band_coverage"]
    assert cov["rows"] == sum(r["in_band"] is not None for r in data["rows"])
    assert cov["covered"] == sum(bool(r["in_band"]) for r in data["rows"])


def test_a_layout_just_over_capacity_is_projected_as_tight_and_further_over_refused():
    w = load_workload("llama3-405b", {"seq_len": 8192, "global_batch": 2048, "micro_batch": 1})
    topo = load_topology("meta-h100-roce")
    lay = ParallelLayout(
        tp=8, pp=16, vpp=8, zero=2, recompute="none", order="tp,cp,pp,dp", embedding_in_split=True,
        loss_in_split=True,
    )  # fmt: skip
    p = project(w, topo, lay, 8192)  # Llama 3's Table 4 run, predicted a few % over 80 GB
    assert p.memory_fit == "tight" and p.memory_capacity_bytes < p.memory_bytes_per_gpu
    assert p.memory_bytes_per_gpu <= p.memory_capacity_bytes * (1 + MEMORY_TOLERANCE)
    with pytest.raises(InfeasibleLayoutError, match="more than the memory model's 10% error over"):
        project(w, topo, ParallelLayout(tp=8, pp=2, zero=1, recompute="none"), 8192)


def test_attention_efficiency_is_read_from_tables_and_interpolated(tmp_path, monkeypatch):
    table = tmp_path / "eff.yaml"
    table.write_text(
        "format: commlens.efficiency/1\n"
        "gpus:\n"
        '  "H100 SXM":\n'
        "    attention:\n"
        "      - {kernel: fa3, pass: fwd, causal: true, head_dim: 128, seq_len: 1024, tflops: 400, origin: test}\n"
        "      - {kernel: fa3, pass: fwd, causal: true, head_dim: 128, seq_len: 4096, tflops: 600, origin: test}\n"
    )
    monkeypatch.setenv(EFFICIENCY_ENV, str(table))
    assert attention_tflops("H100 SXM", "fa3", "fwd", 128, 2048) == pytest.approx(500e12)
    assert attention_tflops("H100 SXM", "fa3", "fwd", 128, 65536) == pytest.approx(600e12)  # held at the ends
    assert attention_tflops("H200 SXM", "fa3", "fwd", 128, 4096) == pytest.approx(600e12)  # H200 borrows H100's
    assert attention_tflops("H100 SXM", "unfused", "fwd", 128, 4096) is None


def test_expert_tp_below_tp_folds_ep_over_tp_and_dp():
    w = load_workload("qwen3-235b-a22b", {"seq_len": 4096, "global_batch": 8192, "micro_batch": 1})
    base = {"tp": 2, "pp": 8, "vpp": 4, "ep": 32, "embedding_in_split": True, "loss_in_split": True}
    with pytest.raises(InfeasibleLayoutError, match="EP 32 does not divide DP x CP = 16"):
        project(w, H100, ParallelLayout(**base), 256)
    folded = ParallelLayout(**base, etp=1)
    r = resolve(folded, w, 256, 8)
    assert r.expert_tp == 1 and r.groups["ep"].size == 32 and r.groups["edp"].size == 1
    p = project(w, H100, folded, 256, check_memory=False)
    assert p.step_time_s > 0 and p.breakdown["ep_comm"] > 0
    with pytest.raises(ValueError, match="expert TP 3 does not divide TP 2"):
        resolve(ParallelLayout(**base, etp=3), w, 256, 8)


def test_torchtitan_selective_is_its_op_policy_and_its_loss_keeps_fp32_logits():
    w = load_workload("llama3-8b", {"seq_len": 8192, "global_batch": 16, "micro_batch": 2})
    topo = load_topology("dgx-h100")
    lay = {"tp": 1, "zero": 3, "recompute": "selective"}
    titan, mcore = ParallelLayout(**lay, framework="torchtitan"), ParallelLayout(**lay, framework="megatron-core")
    r = resolve(titan, w, 8, 8)
    t_mem, m_mem = stage_memory(w, titan, r)[0], stage_memory(w, mcore, r)[0]
    assert t_mem["activations"] < m_mem["activations"]  # op policy keeps ~63 KB/token/layer, core_attn ~137 KB
    explicit = ParallelLayout(**lay, framework="torchtitan", recompute_modules=("op",))
    assert stage_memory(w, explicit, r)[0]["activations"] == t_mem["activations"]
    # the same model with torchtitan recomputes its norms and even matmuls: more GPU time than core_attn's redo
    titan_p, mcore_p = (project(w, topo, lay, 8, check_memory=False) for lay in (titan, mcore))
    assert titan_p.kernels["norm"] > mcore_p.kernels["norm"]


def test_torchtitan_op_policy_recomputes_every_second_matmul_in_call_order():
    """torchtitan's op policy (parallelize_llama.py at 9dec370) keeps aten.mm outputs except every second one,
    counted in call order wq, wk, wv, wo, w1, w3, w2: K, the output projection and up are recomputed; Q, V, gate
    and down are kept (the model once had it the other way round, which recomputed ~75% more matmul FLOPs)."""
    from commlens.project.kernels import recompute_share
    from commlens.project.memory import op_policy_bytes

    w = load_workload("llama3-8b", {"seq_len": 8192, "micro_batch": 2})
    op = frozenset({"op"})
    assert recompute_share("attention_out", op, w) == 1.0 and recompute_share("ffn_out", op, w) == 0.0
    assert recompute_share("qkv", op, w) == pytest.approx(8 / (32 + 2 * 8))  # K's 8 heads of Q 32 + K 8 + V 8
    assert recompute_share("ffn_in", op, w) == 0.5 and recompute_share("input_norm", op, w) == 1.0
    h, f, d = 4096, 14336, 128
    kept = 2 * h + 2 * h + 4 * 32 + 2 * h + 2 * 8 * d + 2 * f + 2 * h  # input, SDPA out, lse, Q, V, gate, down
    assert op_policy_bytes(w, ParallelLayout(tp=1, framework="torchtitan"), 1, False) == pytest.approx(kept)
    # Float8 linears count the same (torchao's Float8Linear calls torch.mm on Float8Tensors: the mode sees aten.mm)
    w8 = load_workload("llama3-8b", {"seq_len": 8192, "micro_batch": 2, "precision": "fp8"})
    assert recompute_share("attention_out", op, w8) == 1.0 and recompute_share("ffn_out", op, w8) == 0.0


def test_what_if_tries_the_other_frameworks_and_compile():
    from commlens.project.sweep import Base
    from commlens.project.whatif import explore

    base = Base("llama3-8b", "dgx-h100", 8, {"tp": 1, "zero": 3, "framework": "torchtitan"}, {})
    found = explore(base, {}, top=20)
    labels = {c.label for c in found.changes} | {r.label for r in found.refused}
    assert "torch.compile" in labels and "framework torchtitan -> megatron-core" in labels
    assert all("-> torchtitan" not in label for label in labels)


def test_each_linear_module_is_counted_once_for_its_host_time():
    from commlens.project.frameworks import framework
    from commlens.project.hardware import device_for
    from commlens.project.kernels import LayerShape, layer_kernels
    from commlens.project.layout import ParallelLayout
    from commlens.workload import load_workload

    dev, fw = device_for("H100 SXM"), framework("megatron-core")
    w = load_workload("qwen3-30b-a3b", {"seq_len": 4096, "micro_batch": 1})
    shape = LayerShape(tokens=4096, keys=4096, tp=1, ep=8, sp=False, tp_chunks=1)
    lay = ParallelLayout(ep=8)
    dense = {k.name: k.modules for k in layer_kernels(dev, fw, w, lay, shape, 989e12, 989e12, False) if k.modules}
    assert dense == {"qkv": 1.0, "attention_out": 1.0, "ffn_in": 1.0, "ffn_out": 1.0}
    moe = {k.name: k.modules for k in layer_kernels(dev, fw, w, lay, shape, 989e12, 989e12, True) if k.modules}
    # 16 local experts, one GroupedLinear each way; the router's matmul is no module
    assert moe == {"qkv": 1.0, "attention_out": 1.0, "experts_in": 1.0, "experts_out": 1.0}


def test_megatron_all_to_all_dispatch_sorts_tokens_by_local_expert_both_ways():
    """Megatron-Core's all-to-all dispatcher reads and writes every routed token once more each way (sort by local
    expert after the all-to-all, unsort before the return) where a GPU holds more than one expert; the flex (DeepEP)
    dispatcher and a GPU with one expert do not, and the step is longer for it."""
    from commlens.project.hardware import device_for
    from commlens.project.kernels import LayerShape, layer_kernels

    dev = device_for("H100 SXM")
    w = load_workload("qwen3-30b-a3b", {"seq_len": 4096, "micro_batch": 1})
    shape = LayerShape(tokens=4096, keys=4096, tp=1, ep=8, sp=False, tp_chunks=1)

    def sort_kernel(fw: str, layout: ParallelLayout, s: LayerShape = shape):
        ks = {k.name: k for k in layer_kernels(dev, framework(fw), w, layout, s, 989e12, 989e12, True)}
        return ks.get("sort_by_expert")

    k = sort_kernel("megatron-core", ParallelLayout(ep=8))
    assert k is not None
    routed = 4096 * w.moe.top_k  # 16 local experts, balanced: the GPU receives as many copies as it sends
    assert k.nbytes == pytest.approx(2 * 4 * routed * w.hidden * ParallelLayout().moe_load_imbalance)
    assert k.bwd_s == pytest.approx(k.fwd_s)  # the inverse permutation moves the same bytes
    assert sort_kernel("nemo", ParallelLayout(ep=8)) is not None  # Megatron-Bridge runs the same dispatcher
    assert sort_kernel("megatron-core", ParallelLayout(ep=8, moe_dispatcher="deepep")) is None
    assert sort_kernel("torchtitan", ParallelLayout(ep=8)) is None
    one_each = LayerShape(tokens=4096, keys=4096, tp=1, ep=128, sp=False, tp_chunks=1)
    assert sort_kernel("megatron-core", ParallelLayout(ep=128), one_each) is None

    topo = load_topology("b200")  # as the published 8-GPU Qwen3-30B-A3B runs (DGX B200)
    base = {"tp": 1, "pp": 1, "ep": 8, "dp": 8, "zero": 1}
    a2a = project(w, topo, ParallelLayout(**base), 8)
    flex = project(w, topo, ParallelLayout(**base, moe_dispatcher="deepep"), 8)  # one node: no dedup either way
    assert a2a.step_time_s > flex.step_time_s * 1.01


def test_untabled_flash_attention_backward_does_two_and_a_half_times_the_forward_s_flops():
    """FlashAttention's backward recomputes the scores: five matmuls against the forward's two, 2.5x its FLOPs (the
    FlashAttention benchmarks' fwd+bwd count, 3.5x the forward, which FLASH_ATTENTION_FRACTION's A100 figure is
    read against). A GPU with no attention table (MI355X) runs both passes at that default rate; a tabled one (H100)
    at its own backward rate."""
    from commlens.project.hardware import device_for
    from commlens.project.kernels import LayerShape, layer_kernels

    w = load_workload("llama3-8b", {"seq_len": 8192, "micro_batch": 1})
    shape = LayerShape(tokens=8192, keys=8192, tp=1, ep=1, sp=False, tp_chunks=1)
    for name, peak in (("MI355X", 2516.6e12), ("A100 SXM 80GB", 312e12)):
        ks = {
            k.name: k
            for k in layer_kernels(
                device_for(name), framework("megatron-core"), w, ParallelLayout(), shape, peak, peak, False
            )
        }
        assert ks["attention"].bwd_s == pytest.approx(2.5 * ks["attention"].fwd_s, rel=1e-12)
    h100 = {
        k.name: k
        for k in layer_kernels(
            device_for("H100 SXM"), framework("megatron-core"), w, ParallelLayout(), shape, 989e12, 989e12, False
        )
    }
    assert h100["attention"].bwd_s != pytest.approx(2.5 * h100["attention"].fwd_s, rel=1e-3)  # its own bwd rate


def test_automodel_experts_swiglu_is_one_compiled_kernel_its_dense_mlp_and_quick_geglu_are_not():
    """AutoModel's DeepEP experts run SwiGLU as weighted_bias_swiglu_impl, a torch.compile'd kernel with the routing
    weights folded in; its dense MLP (silu x up) stays eager, and a model whose experts use quick_geglu (gpt-oss)
    runs that as eager ops: the layout says so (expert_activation_fused false)."""
    from commlens.project.hardware import device_for
    from commlens.project.kernels import LayerShape, layer_kernels

    dev = device_for("H100 SXM")
    w = load_workload("qwen3-30b-a3b", {"seq_len": 4096, "micro_batch": 1})
    shape = LayerShape(tokens=4096, keys=4096, tp=1, ep=8, sp=False, tp_chunks=1)

    def kernel(fw: str, name: str, moe: bool, **lay: object):
        layout = ParallelLayout(ep=8, framework=fw, **lay)
        return {k.name: k for k in layer_kernels(dev, framework(fw), w, layout, shape, 989e12, 989e12, moe)}[name]

    fused, eager = kernel("automodel", "experts_activation", True), kernel("torchtitan", "experts_activation", True)
    assert fused.nbytes * 1.7 == pytest.approx(eager.nbytes) and fused.launches < eager.launches
    assert kernel("automodel", "ffn_activation", False).nbytes == kernel("torchtitan", "ffn_activation", False).nbytes
    forced = kernel("automodel", "experts_activation", True, expert_activation_fused=False)
    assert forced.nbytes == pytest.approx(eager.nbytes)
    assert kernel("megatron-core", "experts_activation", True).nbytes == pytest.approx(fused.nbytes)


def test_torch_async_tp_sums_the_partial_outputs_in_a_kernel_of_its_own():
    """torch's async TP pulls every rank's partial matmul output through symmetric memory and sums them in a separate
    reduction kernel after the pipeline (the forward's 2 reduce-scatters a layer pass, 16-bit; the backward's stay
    NCCL's), and copies this rank's shard into its symmetric buffer before each fused all-gather (2 a pass each way);
    Megatron's userbuffers and NCCL's reduce-scatter reduce inside the collective."""
    w = load_workload("llama3-70b", {"seq_len": 8192, "micro_batch": 2, "global_batch": 64})

    def kernels(fw: str, overlap: bool, recompute: str = "none") -> dict[str, float]:
        lay = ParallelLayout(tp=8, sp=True, zero=3, framework=fw, tp_comm_overlap=overlap, recompute=recompute)
        # without recomputation torchtitan's gathered TP inputs do not fit in 80 GB: the kernels are what is asked
        return project(w, H100, lay, 256, check_memory=False).kernels

    async_tp = kernels("torchtitan", True)
    assert async_tp["tp_reduce"] > 0
    assert "tp_reduce" not in kernels("torchtitan", False)
    assert "tp_reduce" not in kernels("megatron-core", True)
    dev = device_for(H100.accelerator.name)
    elements = 2 * 8192 * w.hidden  # one micro-batch's gathered activations
    # a read of the whole unreduced output (8 shards) and a write of one, in 16 bits, at the stream rate
    reduce = stream_time_s(dev, 2.0 * elements * (1 + 1 / 8))
    copy = stream_time_s(dev, 2.0 * 2 * elements / 8)  # a read and a write of this rank's 16-bit shard
    micro_batches = 64 // 32 // 2
    forward, backward = 2 * (reduce + copy), 2 * copy
    assert async_tp["tp_reduce"] == pytest.approx((forward + backward) * w.layers * micro_batches, rel=0.02)
    # full recomputation runs the forward's again
    full = kernels("torchtitan", True, "full")["tp_reduce"]
    assert full == pytest.approx((2 * forward + backward) * w.layers * micro_batches, rel=0.02)


def test_torch_async_tp_leaves_the_backward_reduce_scatters_to_nccl():
    """torch's micro-pipeline pass fuses a reduce-scatter only when one matmul produces its input; the backward's
    input gradients of torchtitan's QKV (wq, wk, wv) and FFN-in (w1, w3) are sums of matmuls, so those two reduce-
    scatters a layer stay exposed NCCL collectives. Transformer Engine's userbuffers overlap them (in bulk beside the
    weight-gradient GEMM): on the same layout async TP hides less of TP's communication than Megatron's overlap."""
    w = load_workload("llama3-70b", {"seq_len": 8192, "micro_batch": 2, "global_batch": 64})

    def run(fw: str, overlap: bool):
        lay = ParallelLayout(tp=8, sp=True, zero=3, framework=fw, tp_comm_overlap=overlap, recompute="full")
        return project(w, H100, lay, 256)

    titan, megatron = run("torchtitan", True), run("megatron-core", True)
    # without any TP overlap torch exposes every collective; Megatron runs its column-parallel backward's beside GEMMs
    assert run("torchtitan", False).breakdown["tp_comm"] > run("megatron-core", False).breakdown["tp_comm"]
    # 2 of the 12 collectives of a layer's three passes stay whole: about a sixth of TP's time exposed on top of the
    # pipelines' first chunks (Megatron's 14 a layer, its backward's two extra all-gathers in bulk beside GEMMs)
    assert titan.breakdown["tp_comm"] > 1.3 * megatron.breakdown["tp_comm"]
    assert titan.overlapped_s["tp_comm"] < 0.9 * megatron.overlapped_s["tp_comm"]


def test_megatron_s_sequence_parallel_backward_gathers_the_column_parallel_inputs_again():
    """Megatron-Core (and Transformer Engine) under sequence parallelism keeps only the shard of QKV's and FFN-in's
    input: the backward all-gathers it again beside the data-gradient GEMM and reduce-scatters the input gradient
    beside the weight-gradient GEMM (async NCCL, or userbuffers' bulk overlap under --tp-comm-overlap), so a layer's
    backward runs six TP collectives, four of them beside GEMMs; torch's TP keeps the gathered input (four, all
    exposed without async TP)."""
    w = load_workload("llama3-70b", {"seq_len": 8192, "micro_batch": 1, "global_batch": 128})

    def run(fw: str, overlap: bool):
        lay = ParallelLayout(tp=4, sp=True, zero=3, framework=fw, tp_comm_overlap=overlap, recompute="full")
        return project(w, H100, lay, 256)

    # torch, per layer: (AG + RS) x 2 in each of three passes (forward, recomputed forward, backward), all exposed
    titan = run("torchtitan", False)
    megatron, overlapped = run("megatron-core", False), run("megatron-core", True)
    assert framework("megatron-core").sp_wgrad_gather and not framework("torchtitan").sp_wgrad_gather
    assert titan.overlapped_s["tp_comm"] == 0
    # the column-parallel backward's two all-gathers and two reduce-scatters hide under their GEMMs: a third of
    # torch's (which also holds the embedding's and the head's few collectives)
    assert megatron.overlapped_s["tp_comm"] == pytest.approx(titan.breakdown["tp_comm"] / 3, rel=0.01)
    # exposed: the two forwards' eight and the row-parallel output gradients' two all-gathers, and NCCL's SMs beside
    assert 0.85 * titan.breakdown["tp_comm"] < megatron.breakdown["tp_comm"] < 0.95 * titan.breakdown["tp_comm"]
    # with userbuffers all fourteen are chunked or in bulk: 8 AG + 6 RS against torch's 6 + 6
    total = overlapped.breakdown["tp_comm"] + overlapped.overlapped_s["tp_comm"]
    assert total > 1.15 * titan.breakdown["tp_comm"]


def test_a_column_parallel_block_s_data_gradient_gemm_runs_whole_under_tp_overlap():
    """Under TP overlap the forward GEMMs run in TP row chunks, and so do the row-parallel projections' data-gradient
    GEMMs (after a chunked all-gather of the output gradient); QKV's and FFN-in's data gradients run whole (TE:
    bulk overlap; torch: the reduce-scatter is not fused)."""
    from commlens.project.compute import gemm_time_s
    from commlens.project.kernels import LayerShape, layer_kernels

    dev = device_for("H100 SXM")
    w = load_workload("llama3-8b", {"seq_len": 4096, "micro_batch": 1})
    shape = LayerShape(tokens=4096, keys=4096, tp=8, ep=1, sp=True, tp_chunks=8)
    layout = ParallelLayout(tp=8, sp=True, tp_comm_overlap=True)
    ks = {k.name: k for k in layer_kernels(dev, framework("megatron-core"), w, layout, shape, 989e12, 989e12, False)}
    peak = 989e12
    (_, qkv_k, qkv_n), (_, out_k, out_n) = w.attention_linears(8)

    def gemm(m: float, n: float, k: float) -> float:
        return gemm_time_s(dev, peak, m, n, k)

    assert ks["qkv"].bwd_s == pytest.approx(gemm(4096, qkv_k, qkv_n) + gemm(qkv_k, qkv_n, 4096))
    assert ks["qkv"].fwd_s == pytest.approx(8 * gemm(512, qkv_n, qkv_k))
    assert ks["attention_out"].bwd_s == pytest.approx(8 * gemm(512, out_k, out_n) + gemm(out_k, out_n, 4096))


def test_all_gather_based_cp_waits_for_its_k_and_v():
    """Llama 3's CP all-gathers K and V before the local query chunk's attention and waits for them ('the all-gather
    communication latency is exposed in the critical path', arXiv 2407.21783 section 3.3.2): with cp_comm_overlap
    false none of CP's exchange hides under the attention; unset, the framework's ring overlap holds."""
    w = load_workload("llama3-70b", {"seq_len": 131072, "global_batch": 8})
    topo = load_topology("meta-h100-roce")

    def run(overlap: bool | None):
        return project(w, topo, ParallelLayout(tp=8, cp=16, pp=1, cp_comm_overlap=overlap, recompute="full"), 128)

    ring, default, gathered = run(True), run(None), run(False)
    assert default.step_time_s == ring.step_time_s
    assert ring.overlapped_s.get("cp_comm", 0.0) > 0
    assert gathered.overlapped_s.get("cp_comm", 0.0) == 0.0
    # all of it exposed: the ring's hidden part too (less the SM share the ring already charged for it)
    hidden = ring.overlapped_s["cp_comm"]
    assert (
        ring.breakdown["cp_comm"] + 0.8 * hidden < gathered.breakdown["cp_comm"] <= ring.breakdown["cp_comm"] + hidden
    )
    assert gathered.step_time_s > ring.step_time_s


def test_fsdp_under_pp_accumulates_the_unsharded_gradients_in_fp32_every_micro_batch():
    """torch's pipeline stage keeps FSDP from reducing until the last micro-batch, and FSDP2 keeps the unsharded
    gradient in the reduce dtype meanwhile (to_accumulated_grad_if_needed, then accumulate_unsharded_grad_if_needed):
    the first micro-batch's 16-bit gradient copied to fp32 (2 + 4 B a parameter), each later one added into it
    (2 + 4 + 4 B). Megatron-Core adds into its main grads inside the weight-gradient GEMM (no such pass)."""
    w = load_workload("llama3-70b", {"seq_len": 8192, "global_batch": 64})
    lay = {"tp": 8, "pp": 4, "zero": 3, "reshard_after_forward": False, "recompute": "full"}
    titan = ParallelLayout(**lay, framework="torchtitan")
    p = project(w, H100, titan, 128)
    m = p.layout["micro_batches"]
    assert m > 1
    dense = stage_parameters(w, resolve(titan, w, 128, 8))[p.pace_stage][0]
    per_step = stream_time_s(device_for(H100.accelerator.name), dense * ((2 + 4) + (m - 1) * (2 + 4 + 4)))
    assert p.kernels["grad_accum"] == pytest.approx(per_step, rel=1e-6)
    assert "grad_accum" not in project(w, H100, ParallelLayout(**lay), 128).kernels  # megatron-core
    no_pp = ParallelLayout(**{**lay, "pp": 1, "reshard_after_forward": True}, framework="torchtitan")
    assert "grad_accum" not in project(w, H100, no_pp, 128).kernels


def test_torch_s_ring_attention_moves_k_v_and_the_merged_output_every_step():
    """torch's CP ring (torchtitan) concatenates K and V for every exchange, merges each step's output into an fp32
    one, and accumulates and concatenates the K/V gradients in fp32, at query-head width since torchtitan repeats K
    and V before SDPA: CP - 1 ring steps a pass each way at HBM rate. Megatron-Core's (Transformer Engine's) ring
    ops are fewer (tests/test_project_cp.py)."""
    w = load_workload("llama3-8b", {"seq_len": 65536, "global_batch": 2, "micro_batch": 1})
    lay = {"tp": 1, "cp": 4, "zero": 3, "recompute": "full"}
    p = project(w, H100, ParallelLayout(**lay, framework="torchtitan"), 8)
    tokens = 65536 / 4
    q = tokens * w.heads * w.v_head_dim
    kv = tokens * w.heads * (w.qk_head_dim + w.v_head_dim)  # repeated to the 32 query heads, not the 8 K/V heads
    dev = device_for(H100.accelerator.name)
    # CP - 1 = 3 steps, and once a call torch's fp32 bookkeeping (Framework.cp_call_bytes); full recompute
    one_pass = stream_time_s(dev, 3 * (10 * q + 4 * kv) + 12 * q + 4 * kv) * 2
    one_pass += stream_time_s(dev, 3 * (10 * q + 22 * kv) + 20 * q + 32 * kv)
    assert p.kernels["cp_ring"] == pytest.approx(one_pass * w.layers * p.layout["micro_batches"], rel=1e-6)
    assert project(w, H100, ParallelLayout(**lay), 8).kernels["cp_ring"] < p.kernels["cp_ring"] / 4  # megatron-core
    no_cp = ParallelLayout(**{**lay, "cp": 1}, framework="torchtitan")
    short = load_workload("llama3-8b", {"seq_len": 16384, "global_batch": 8, "micro_batch": 1})
    assert "cp_ring" not in project(short, H100, no_cp, 8).kernels


def test_torchtitan_projects_q_k_and_v_with_three_gemms():
    """torchtitan's Attention runs wq, wk and wv as three linears: K's and V's GEMMs are KV heads wide and each reads
    the whole input again, where Megatron-Core's linear_qkv is one GEMM; the FLOPs are the same."""
    from commlens.project.compute import gemm_time_s
    from commlens.project.kernels import LayerShape, layer_kernels

    dev = device_for("H100 SXM")
    w = load_workload("llama3-70b", {"seq_len": 8192, "micro_batch": 1})
    shape = LayerShape(tokens=8192, keys=8192, tp=8, ep=1, sp=True, tp_chunks=1)
    layout = ParallelLayout(tp=8, sp=True)

    def qkv(fw: str):
        ks = layer_kernels(dev, framework(fw), w, layout, shape, 989e12, 989e12, False)
        return next(k for k in ks if k.name == "qkv")

    titan, megatron = qkv("torchtitan"), qkv("megatron-core")
    assert framework("torchtitan").qkv_separate and not framework("megatron-core").qkv_separate
    assert titan.flops == pytest.approx(megatron.flops)
    d, h = w.head_size, w.hidden
    q, kv = w.heads // 8 * d, w.kv_heads_n // 8 * d
    fwd = sum(gemm_time_s(dev, 989e12, 8192, n, h) for n in (q, kv, kv))
    assert titan.fwd_s == pytest.approx(fwd)
    assert titan.fwd_s > 1.1 * megatron.fwd_s  # two more reads of the input, and K, V only 128 wide
    assert titan.launches == 3 * megatron.launches


def test_megatron_core_moe_routing_launches_what_its_layer_was_counted_to_dispatch():
    """Megatron-Core's router and all-to-all dispatcher launch the kernels benchmarks/moe_host_overhead.py counted in
    megatron-core 0.16.1 (forward 22 router, 26 dispatch at EP > 1 and 11 at EP 1, 4 sorting; their backward fewer:
    10, 11 and 5, 3); other stacks and the flex dispatcher keep the estimate, whose backward is twice the forward. The
    host time follows: more before the MoE sync, less in the backward."""
    from commlens.project.hardware import device_for
    from commlens.project.kernels import LayerShape, layer_kernels

    dev = device_for("H100 SXM")
    w = load_workload("qwen3-30b-a3b", {"seq_len": 4096, "micro_batch": 1})

    def launches(fw: str, layout: ParallelLayout, ep: int = 8) -> dict[str, tuple[float, float | None]]:
        shape = LayerShape(tokens=4096, keys=4096, tp=1, ep=ep, sp=False, tp_chunks=1)
        ks = layer_kernels(dev, framework(fw), w, layout, shape, 989e12, 989e12, True)
        return {k.name: (k.launches, k.bwd_launches) for k in ks if k.kind == "moe_routing"}

    mcore = launches("megatron-core", ParallelLayout(ep=8))
    assert mcore == {"router_topk": (22, 10), "permute": (26, 11), "sort_by_expert": (4, 3)}
    assert launches("nemo", ParallelLayout(ep=8)) == mcore
    assert launches("megatron-core", ParallelLayout(ep=1), ep=1) == {"router_topk": (22, 10), "permute": (11, 5)}
    flex = launches("megatron-core", ParallelLayout(ep=8, moe_dispatcher="deepep"))
    assert flex == {"router_topk": (22, 10), "permute": (10, None)}
    assert launches("torchtitan", ParallelLayout(ep=8)) == {"router_topk": (8, None), "permute": (10, None)}


def test_transformer_engine_grouped_linear_backward_casts_one_input_per_expert():
    """TE's GroupedLinear (Megatron-Core's TEGroupedMLP) launches per local expert a GEMM and its input's casts
    forward, and a data- and a weight-gradient GEMM with the output gradient's casts backward (TE v2.9 and v2.16
    grouped_linear.py: split_quantize per expert, general_grouped_gemm one cuBLASLt GEMM per expert and pass): bf16
    1 and 2 launches an expert, fp8 the casts once each way, not twice in the backward."""
    from commlens.project.hardware import device_for
    from commlens.project.kernels import LayerShape, layer_kernels

    dev = device_for("H100 SXM")
    shape = LayerShape(tokens=4096, keys=4096, tp=1, ep=8, sp=False, tp_chunks=1)

    def experts(precision: str) -> dict[str, tuple[float, float | None]]:
        w = load_workload("qwen3-30b-a3b", {"seq_len": 4096, "micro_batch": 1, "precision": precision})
        ks = layer_kernels(dev, framework("megatron-core"), w, ParallelLayout(ep=8), shape, 989e12, 989e12, True)
        return {k.name: (k.launches, k.bwd_launches) for k in ks if k.kind == "grouped_gemm"}

    local = 128 // 8
    assert experts("bf16") == {"experts_in": (local, 2 * local), "experts_out": (local, 2 * local)}
    fp8 = experts("fp8")
    casts = fp8["experts_in"][0] / local - 1
    assert casts >= 1
    assert fp8 == {
        "experts_in": (local * (1 + casts), local * (2 + casts)),
        "experts_out": (local * (1 + casts), local * (2 + casts)),
    }
