"""Hybrid Mamba-2 models (Nemotron-H, Nemotron 3) as Megatron-Core's MambaModel trains them: one block a layer, named
by its hybrid_override_pattern character (M Mamba-2, * attention, - MLP, E MoE)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from commlens.project import InfeasibleLayoutError, ParallelLayout, model_flops_per_step, project
from commlens.project.layout import resolve
from commlens.project.memory import activation_bytes_per_token, stage_memory
from commlens.topology import load_topology
from commlens.workload import Workload, WorkloadError
from commlens.workload.spec import workload_from_dict

H100 = load_topology("dgx-h100")
CLI = [sys.executable, "-m", "commlens"]

MAMBA = {"mamba_heads": 64, "mamba_head_dim": 64, "mamba_state": 128, "mamba_groups": 8}


def _plain(layers: int = 8, **kw: object) -> dict[str, object]:
    data: dict[str, object] = {
        "name": "plain",
        "layers": layers,
        "hidden": 2048,
        "ffn_hidden": 8192,
        "gated_ffn": False,
        "heads": 16,
        "kv_heads": 8,
        "head_dim": 128,
        "vocab": 32000,
        "seq_len": 4096,
        "global_batch": 64,
        "micro_batch": 1,
    }
    data.update(kw)
    return data


def _hybrid(pattern: str, mamba: dict[str, int] | None = None, **kw: object) -> Workload:
    return workload_from_dict(_plain(layers=len(pattern), hybrid={"pattern": pattern, **MAMBA, **(mamba or {})}, **kw))


LAYOUT = ParallelLayout.model_validate({"tp": 2, "sp": True, "pp": 1, "dp": 4, "zero": 1, "framework": "megatron-core"})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (_plain(layers=4, hybrid={"pattern": "M-M", **MAMBA}), "hybrid.pattern: 3 symbols for 4 layers"),
        (_plain(layers=3, hybrid={"pattern": "M#M", **MAMBA}), "unknown layer symbol(s) '#'"),
        (_plain(layers=1, hybrid={"pattern": "||", **MAMBA}), "no layer symbols, only pipeline separators"),
        (_plain(layers=4, hybrid={"pattern": "M-|M", **MAMBA}), "hybrid.pattern: 3 symbols for 4 layers"),
        (_plain(layers=3, hybrid={"pattern": "MEM", **MAMBA}), "E layers need moe"),
        (
            _plain(
                layers=3, hybrid={"pattern": "M-M", **MAMBA}, moe={"experts": 8, "top_k": 2, "expert_ffn_hidden": 64}
            ),
            "moe needs E layers",
        ),
        (_plain(layers=2, hybrid={"pattern": "M-", **{**MAMBA, "mamba_groups": 3}}), "3 groups do not divide 64 heads"),
        (
            _plain(
                layers=2,
                hybrid={"pattern": "M*", **MAMBA},
                mla={"kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128},
            ),
            "MLA is not modelled in hybrid models",
        ),
    ],
)
def test_a_bad_hybrid_spec_names_what_is_wrong(data: dict[str, object], message: str) -> None:
    with pytest.raises(WorkloadError, match=message.replace("(", r"\(").replace(")", r"\)")):
        workload_from_dict(data)


def test_a_hybrid_of_attention_and_mlp_layers_costs_what_the_transformer_costs() -> None:
    """Split each transformer layer into its attention block and its MLP block (pattern "*-" a layer): the same GEMMs,
    attention and activations, so the same FLOPs, GEMM and attention seconds, and activation memory."""
    plain = workload_from_dict(_plain(layers=8))
    hybrid = _hybrid("*-" * 8)
    assert model_flops_per_step(hybrid) == pytest.approx(model_flops_per_step(plain), rel=1e-12)
    a, b = project(plain, H100, LAYOUT, 8), project(hybrid, H100, LAYOUT, 8)
    for kind in ("gemm", "attention", "activation"):
        assert b.kernels[kind] == pytest.approx(a.kernels[kind], rel=1e-9), kind
    # what the layers keep for the backward: the same bytes (one block's transient working set is smaller)
    kept_a = 8 * activation_bytes_per_token(plain, LAYOUT, 2, False)
    assert 16 * activation_bytes_per_token(hybrid, LAYOUT, 2, False) == pytest.approx(kept_a, rel=1e-9)
    mem_a = stage_memory(plain, LAYOUT, resolve(LAYOUT, plain, 8, 8))[0]
    mem_b = stage_memory(hybrid, LAYOUT, resolve(LAYOUT, hybrid, 8, 8))[0]
    assert mem_b["weights"] == pytest.approx(mem_a["weights"], rel=1e-9)
    # one TP pair a block: as many TP collectives a step as the transformer's two pairs a layer (twice as many
    # blocks, each block's own GEMMs hiding part of its backward gathers: within a few percent, not twice)
    plain_tp = LAYOUT.model_copy(update={"tp_comm_overlap": False})
    tp_a = project(plain, H100, plain_tp, 8).breakdown["tp_comm"]
    assert project(hybrid, H100, plain_tp, 8).breakdown["tp_comm"] == pytest.approx(tp_a, rel=0.05)


def test_mamba_layers_are_priced_by_their_own_kernels() -> None:
    """Mamba layers show in the breakdown as their own class (the SSD scan, convolution and layout copies), their
    in_proj / out_proj as GEMMs, and a larger state costs more of them."""
    w = _hybrid("M-M*M-M-")
    p = project(w, H100, LAYOUT, 8)
    assert p.kernels["ssm"] > 0
    big = _hybrid("M-M*M-M-", mamba={"mamba_state": 256})
    assert project(big, H100, LAYOUT, 8).kernels["ssm"] > p.kernels["ssm"]
    counts = w.parameter_counts()
    hy = w.hybrid
    assert hy is not None
    assert counts["mamba"] == 4 * hy.mixer_parameters(w.hidden)
    assert counts["attention"] == 1 * sum(k * n for _, k, n in w.attention_linears(1))
    assert counts["ffn"] == 3 * 2 * w.hidden * w.ffn_hidden
    assert counts["norms"] == 9 * w.hidden


def test_the_mixer_parameters_follow_megatron_cores_in_proj() -> None:
    """in_proj: z, x (d_inner each), B, C (groups x state each), dt (one a head); conv over x, B, C; out_proj."""
    hy = _hybrid("M").hybrid
    assert hy is not None
    d_inner = 64 * 64
    in_proj = 2048 * (2 * d_inner + 2 * 8 * 128 + 64)
    conv = (d_inner + 2 * 8 * 128) * (4 + 1)
    assert hy.mixer_parameters(2048) == in_proj + conv + 3 * 64 + d_inner + d_inner * 2048


def test_an_e_layer_has_no_attention() -> None:
    """A hybrid's MoE layer is the MoE block alone: removing the attention layers removes all attention time."""
    moe = {"experts": 8, "top_k": 2, "expert_ffn_hidden": 512}
    w = _hybrid("MEMEM-ME", moe=moe)
    layout = ParallelLayout.model_validate({"tp": 1, "pp": 1, "dp": 8, "ep": 8, "zero": 1, "framework": "nemo"})
    p = project(w, H100, layout, 8)
    assert p.kernels.get("attention", 0.0) == 0.0
    assert p.kernels["grouped_gemm"] > 0 and p.kernels["ssm"] > 0
    assert w.moe_layers == 3 and w.moe_layer_flags == [c == "E" for c in "MEMEM-ME"]


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ({"tp": 16, "sp": True, "pp": 1, "dp": 1}, "tp 16 does not divide the 8 Mamba groups"),
        ({"tp": 1, "pp": 1, "dp": 16, "framework": "torchtitan"}, "hybrid Mamba models are modelled as Megatron-Core"),
    ],
)
def test_layouts_the_hybrid_model_does_not_cover_are_refused(layout: dict[str, object], message: str) -> None:
    with pytest.raises(InfeasibleLayoutError, match=message):
        project(_hybrid("M-M*M-M-"), H100, ParallelLayout.model_validate({"zero": 1, **layout}), 16)


def test_cli_projects_a_hybrid_file_and_names_a_bad_one(tmp_path) -> None:
    import yaml

    good = tmp_path / "hybrid.yaml"
    good.write_text(
        yaml.safe_dump({"format": "commlens.workload/1", **_plain(layers=4, hybrid={"pattern": "M-M*", **MAMBA})})
    )
    out = subprocess.run(CLI + ["project", str(good), "-t", "dgx-h100", "--gpus", "8"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "ssm" in out.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump({"format": "commlens.workload/1", **_plain(layers=5, hybrid={"pattern": "M-M*", **MAMBA})})
    )
    out = subprocess.run(CLI + ["project", str(bad), "-t", "dgx-h100", "--gpus", "8"], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.startswith("error: ") and "hybrid.pattern: 4 symbols for 5 layers" in out.stderr


def test_the_ssd_scan_runs_at_the_rate_measured_on_an_h100() -> None:
    """vLLM PR #27299's microbenchmark (one H100; the five-kernel SSD forward, z None, chunk 128, 128 heads of 64, one
    group, state 128): 1.262e7 tokens/s at 8,192 tokens. The model's forward scan for that shape takes the same."""
    from commlens.project.compute import stream_time_s
    from commlens.project.hardware import device_for
    from commlens.project.kernels import SSD_STREAM_FRACTION, ssd_bytes_per_token

    dev = device_for(H100.accelerator.name)
    fwd, _ = ssd_bytes_per_token(128, 1, 64, 128, 128)
    fwd -= 4 * 128 * 64  # no gate: z not read, out_x not written
    seconds_a_token = stream_time_s(dev, fwd) / SSD_STREAM_FRACTION
    assert 1 / seconds_a_token == pytest.approx(1.262327e7, rel=0.02)


def test_the_shipped_hybrid_presets_have_their_published_sizes() -> None:
    """Nemotron-H 8B / 47B / 56B and Nemotron 3 Nano (31.6B, 3.6B active): the layer counts of their patterns and
    their parameters."""
    from commlens.workload import load_workload

    sizes = {
        "nemotron-h-8b": (8.1, 24, 4, 24, 0),
        "nemotron-h-47b": (46.8, 45, 5, 48, 0),
        "nemotron-h-56b": (56.3, 54, 10, 54, 0),
    }
    sizes["nemotron-3-nano-30b-a3b"] = (31.6, 23, 6, 0, 23)
    for name, (billions, m, a, f, e) in sizes.items():
        w = load_workload(name)
        hy = w.hybrid
        assert hy is not None
        assert (hy.count("M"), hy.count("*"), hy.count("-"), hy.count("E")) == (m, a, f, e), name
        assert w.parameters / 1e9 == pytest.approx(billions, abs=0.05), name
    assert load_workload("nemotron-3-nano-30b-a3b").active_parameters / 1e9 == pytest.approx(3.58, abs=0.01)


def test_a_latent_moe_sends_latent_tokens_and_pays_its_two_projections() -> None:
    """Megatron-Core's latent MoE (moe_latent_size): the dispatch carries latent-wide tokens and the experts work at
    that width; two hidden x latent projections run once a token. At latent = hidden it is the plain MoE plus them."""
    moe = {"experts": 64, "top_k": 4, "expert_ffn_hidden": 1024}
    layout = ParallelLayout.model_validate(
        {"tp": 1, "pp": 1, "dp": 8, "ep": 8, "zero": 1, "framework": "nemo", "moe_dispatcher": "alltoall"}
    )
    plain = _hybrid("MEMEM*ME", moe=moe)
    same = _hybrid("MEMEM*ME", moe={**moe, "latent_size": 2048})
    quarter = _hybrid("MEMEM*ME", moe={**moe, "latent_size": 512})
    tokens = plain.global_batch * plain.seq_len
    projections = 3 * 3 * 2 * 2 * tokens * 2048 * 2048  # 3 E layers, two GEMMs, forward + backward
    assert model_flops_per_step(same) - model_flops_per_step(plain) == pytest.approx(projections, rel=1e-9)
    p_plain, p_same, p_quarter = (project(w, H100, layout, 8) for w in (plain, same, quarter))
    assert p_same.breakdown["ep_comm"] == pytest.approx(p_plain.breakdown["ep_comm"], rel=1e-9)
    assert p_quarter.breakdown["ep_comm"] < p_same.breakdown["ep_comm"] / 2  # 4x fewer bytes, some fixed cost
    assert p_quarter.kernels["grouped_gemm"] < p_same.kernels["grouped_gemm"] / 2
    assert same.parameter_counts()["router"] - plain.parameter_counts()["router"] == 3 * 2 * 2048 * 2048


def test_a_hybrid_mtp_module_is_an_attention_and_an_e_block() -> None:
    """Nemotron 3's multi-token prediction ('*E' a depth): each depth adds an attention block, an E block, eh_proj
    and the output layer again to the last stage; repeated depths share one module's weights."""
    moe = {"experts": 16, "top_k": 2, "expert_ffn_hidden": 1024}
    base = _hybrid("MEMEM*ME", moe=moe)
    mtp = _hybrid("MEMEM*ME", moe=moe, mtp_layers=2)
    shared = _hybrid("MEMEM*ME", moe=moe, mtp_layers=2, mtp_repeated=True)
    tokens, h = base.global_batch * base.seq_len, base.hidden
    attn = 2 * tokens * sum(k * n for _, k, n in base.attention_linears(1))
    attn += 2 * tokens * base.seq_len * base.heads * (base.qk_head_dim + base.v_head_dim)
    e_block = 2 * tokens * h * 16 + 2 * tokens * 2 * h * 1024 * 2
    per_depth = attn + e_block + 2 * tokens * 2 * h * h + 2 * tokens * h * base.vocab
    assert model_flops_per_step(mtp) - model_flops_per_step(base) == pytest.approx(3 * 2 * per_depth, rel=1e-9)
    layout = ParallelLayout.model_validate({"tp": 1, "pp": 1, "dp": 8, "ep": 8, "zero": 1, "framework": "nemo"})
    assert project(mtp, H100, layout, 8).step_time_s > project(base, H100, layout, 8).step_time_s
    assert sum(shared.mtp_parameter_counts().values()) * 2 == sum(mtp.mtp_parameter_counts().values())


def test_mtp_kept_in_bf16_runs_at_the_16_bit_rate() -> None:
    """Megatron-Bridge's keep_mtp_spec_in_bf16 (layout mtp_bf16): under fp8 the MTP modules run in 16 bits, so the
    step grows by their layer's fp8 gain; nothing changes without MTP or in bf16."""
    moe = {"experts": 16, "top_k": 2, "expert_ffn_hidden": 4096}
    base = {"tp": 1, "pp": 1, "dp": 8, "ep": 8, "zero": 1, "framework": "nemo"}
    fp8, kept = (ParallelLayout.model_validate({**base, "mtp_bf16": v}) for v in (False, True))
    # wide enough that fp8 pays (at hidden 2048 its casts cost about what its GEMMs save)
    wide = {"hidden": 8192, "heads": 64, "mamba": {"mamba_heads": 256}}
    mtp = _hybrid("MEMEM*ME", moe=moe, mtp_layers=2, precision="fp8", **wide)
    assert project(mtp, H100, kept, 8).step_time_s > project(mtp, H100, fp8, 8).step_time_s
    for w in (_hybrid("MEMEM*ME", moe=moe, precision="fp8"), _hybrid("MEMEM*ME", moe=moe, mtp_layers=2)):
        assert project(w, H100, kept, 8).step_time_s == project(w, H100, fp8, 8).step_time_s
    from commlens.workload import load_workload

    dsv3 = load_workload(
        "deepseek-v3-like", {"mtp_layers": 1, "precision": "fp8", "layers": 8, "moe.first_moe_layer": 1}
    )
    big = {"tp": 1, "pp": 1, "dp": 64, "ep": 64, "zero": 1, "framework": "nemo"}
    a = project(dsv3, load_topology("gb200-nvl72"), ParallelLayout.model_validate(big), 64, check_memory=False)
    b = project(
        dsv3,
        load_topology("gb200-nvl72"),
        ParallelLayout.model_validate({**big, "mtp_bf16": True}),
        64,
        check_memory=False,
    )
    assert b.step_time_s > a.step_time_s
