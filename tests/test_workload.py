"""Workload specs: presets load, parameter counts match the published sizes, bad specs name the field."""

import pytest

from commlens.workload import WorkloadError, list_presets, load_workload, workload_data, workload_from_dict

PUBLISHED_BILLIONS = {  # parameters as published (Megatron rows: training-runs.md; others: their papers)
    "megatron-gpt-1.7b": 1.7,
    "megatron-gpt-18.4b": 18.4,
    "megatron-gpt-145.6b": 145.6,
    "megatron-gpt-1t": 1008.0,
    "gpt3-175b": 175.0,
    "llama3-8b": 8.0,
    "llama3-70b": 70.6,
    "llama3-405b": 405.0,
    "mixtral-8x7b": 46.7,
    "nemotron4-15b": 15.7,  # 3.2B embedding + 12.5B other (Parmar et al., arXiv 2402.16819)
    "nemotron4-340b": 341.0,  # 9.4B embedding + 331.6B other (arXiv 2406.11704)
    "qwen3-30b-a3b": 30.5,  # Qwen3 technical report
    "qwen3-235b-a22b": 235.0,
    "korthikanti-22b": 22.0,  # Korthikanti et al., arXiv 2205.05198, Table 3
    "llama2-7b": 6.74,  # Touvron et al., arXiv 2307.09288 (Llama 2), the released checkpoints' counts
    "llama2-13b": 13.0,
    "llama2-70b": 69.0,
    "gpt-oss-120b": 116.8,  # OpenAI gpt-oss model card (arXiv 2508.10925): 116.8B total parameters
    "gpt-oss-20b": 20.9,  # the same card, Table 1: 20.9B total parameters
    "bloom-176b": 176.247,  # Le Scao et al., arXiv 2211.05100 (BLOOM): 176,247M parameters
    "olmo2-7b": 7.30,  # allenai/OLMo-2-1124-7B model card: 7.3B ('2 OLMo 2 Furious', arXiv 2501.00656)
    "olmo2-13b": 13.7,  # allenai/OLMo-2-1124-13B model card: 13.7B
    "olmo-core-1b-2024": 1.336,
    "llama4-scout-17b-16e": 109.0,  # meta-llama/Llama-4-Scout-17B-16E model card: 109B total (vision encoder included)
    "llama4-maverick-17b-128e": 400.0,  # meta-llama/Llama-4-Maverick-17B-128E model card: 400B total
    "grok-1-314b": 314.0,  # xai-org/grok-1 README: 314B parameters (the preset counts 315.7B with the tied embedding)  # OLMo-core TransformerConfig.olmo_1B num_params at e27ba745 (no model card)
}


def test_presets_listed():
    names = list_presets()
    for required in ("gpt3-175b", "llama3-8b", "llama3-70b", "llama3-405b", "mixtral-8x7b", "deepseek-v3-like"):
        assert required in names
    assert sum(n.startswith("megatron-gpt-") for n in names) == 10


@pytest.mark.parametrize("name,billions", sorted(PUBLISHED_BILLIONS.items()))
def test_parameter_counts_match_published(name, billions):
    # within 4%: biases and position embeddings are not counted
    assert load_workload(name).parameters / 1e9 == pytest.approx(billions, rel=0.04)


def test_moe_active_parameters():
    w = load_workload("mixtral-8x7b")
    assert w.active_parameters / 1e9 == pytest.approx(12.9, rel=0.03)  # Mixtral paper: 13B active
    assert load_workload("qwen3-30b-a3b").active_parameters / 1e9 == pytest.approx(3.3, rel=0.03)
    assert load_workload("qwen3-235b-a22b").active_parameters / 1e9 == pytest.approx(22.0, rel=0.03)
    assert w.moe_layers == 32


def test_gpt_oss_active_parameters_match_the_model_card():
    # arXiv 2508.10925 Table 1: 3.6B active (20b) and 5.1B active (120b); the card counts the unembedding but not the
    # input embedding (a lookup), which active_parameters includes: one vocab x hidden matrix apart
    for name, active in (("gpt-oss-20b", 3.6), ("gpt-oss-120b", 5.1)):
        w = load_workload(name)
        assert (w.active_parameters - w.vocab * w.hidden) / 1e9 == pytest.approx(active, rel=0.03)
    small = load_workload("gpt-oss-20b")
    assert small.moe_layers == 24 and small.moe is not None and small.moe.experts == 32 and small.moe.top_k == 4


def test_overrides_and_errors():
    w = load_workload("llama3-8b", {"seq_len": 131072, "moe.experts": 8, "moe.top_k": 2, "moe.expert_ffn_hidden": 4096})
    assert w.seq_len == 131072 and w.moe.top_k == 2
    with pytest.raises(WorkloadError, match="moe.top_k: 9 exceeds the 8 experts"):
        load_workload("mixtral-8x7b", {"moe.top_k": 9})
    with pytest.raises(WorkloadError, match="heads: 7 heads do not divide hidden size 4096"):
        load_workload("llama3-8b", {"heads": 7, "kv_heads": 7})
    with pytest.raises(WorkloadError, match="nonsense: unknown field"):
        load_workload("llama3-8b", {"nonsense": 1})
    with pytest.raises(WorkloadError, match="unknown workload preset 'nope'"):
        load_workload("nope")
    data = workload_data("llama3-8b")
    data["micro_batch"] = 3
    with pytest.raises(WorkloadError, match="micro_batch: 3 does not divide global_batch 512"):
        workload_from_dict(data)
