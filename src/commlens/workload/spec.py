"""Training workloads as strict pydantic specs: a decoder transformer, dense or MoE, or a hybrid of Mamba-2,
attention, MLP and MoE layers, and its batch.

A workload is data (YAML with exactly these keys); ranges are checked when it
is built and a bad value raises :class:`WorkloadError` naming the field
(``moe.top_k``). Parallel layout and hardware are not part of a workload: the
same model can be projected on any cluster under any layout.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, model_validator

from commlens.errors import CommlensError
from commlens.specdata import StrictSpec, model_from_data

__all__ = [
    "FORMAT",
    "HYBRID_KINDS",
    "Hybrid",
    "Moe",
    "SlidingWindow",
    "Workload",
    "WorkloadError",
    "workload_from_dict",
]

FORMAT = "commlens.workload/1"
Precision = Literal["bf16", "fp8"]


class WorkloadError(CommlensError, ValueError):
    """A workload spec that cannot be built, or a preset that does not exist."""


class _Spec(StrictSpec):
    model_config = ConfigDict(validate_default=True)


class Moe(_Spec):
    """Mixture-of-experts feed-forward blocks (every ``every``-th layer, from ``first_moe_layer`` on)."""

    experts: int = Field(ge=2, description="routed experts per MoE layer")
    top_k: int = Field(ge=1, description="routed experts each token goes to")
    shared_experts: int = Field(default=0, ge=0, description="experts every token goes to (DeepSeek style)")
    expert_ffn_hidden: int = Field(ge=1, description="FFN hidden size of one expert")
    capacity_factor: float | None = Field(
        default=None, gt=0, description="tokens an expert takes, x its fair share (None: dropless, = 1.0 in cost)"
    )
    first_moe_layer: int = Field(default=0, ge=0, description="layers before this one are dense")
    # [27 s16 llama4] interleaved MoE layers: Hugging Face Llama 4 config interleave_moe_layer_step (transformers
    # Llama4TextConfig: moe_layers = range(step - 1, layers, step)); Megatron-Core moe_layer_freq as a list (NeMo
    # v2.4.0 llama.py Llama4Experts128Config: [0, 1] * 24, MoE on layers 1, 3, ..., 47 counted from 0)
    every: int = Field(
        default=1,
        ge=1,
        description="from first_moe_layer on, every every-th layer is MoE and the others dense: layers first_moe_layer "
        "+ every - 1, + 2 every - 1, ... (Llama 4 Maverick: 2, MoE on the odd layers counted from 0); 1: every layer",
    )
    expert_bias: bool = Field(default=False, description="the experts' two linears carry biases (gpt-oss)")
    # [27 s28 latent] Megatron-Core's latent MoE (moe_latent_size; NVIDIA/Megatron-LM cd4afffa
    # megatron/core/transformer/moe/moe_layer.py 265-296, 482, 575; experts.py 207-233): fc1_latent_proj (hidden ->
    # latent) after the router and before the dispatch, fc2_latent_proj (latent -> hidden) after the combine, both
    # TE linears duplicated over TP; the dispatch carries latent-wide tokens and the routed experts read and write
    # the latent width; the router and the shared experts see the full hidden (Nemotron 3 Super: 1024 of 4096)
    latent_size: int | None = Field(
        default=None,
        ge=1,
        description="the routed experts' width: tokens projected to it before the dispatch and back after the combine "
        "(Megatron-Core moe_latent_size, Nemotron 3 Super / Ultra); None: the hidden size",
    )
    glu_clamp: float | None = Field(
        default=None,
        gt=0,
        description="the experts' gated activation clamps its inputs to this limit first (gpt-oss: 7.0); None: none",
    )

    # [27 s11 grouplim] group-limited routing (DeepSeek-V3 report Sec. 2.1.2, node-limited routing M = 4; HF config
    # n_group / topk_group; Megatron-Core moe_router_num_groups / moe_router_group_topk, moe_utils.group_limited_topk)
    router_groups: int | None = Field(
        default=None,
        ge=1,
        description="the experts form this many equal groups of consecutive experts (Megatron-Core "
        "moe_router_num_groups, HF n_group); None: no group limit",
    )
    group_topk: int | None = Field(
        default=None,
        ge=1,
        description="groups a token's experts are chosen from, those with the highest top_k / group_topk scores "
        "(Megatron-Core moe_router_group_topk, HF topk_group); None: no group limit",
    )

    def routed_width(self, hidden: int) -> int:
        """The width of a routed token: the latent size, or the hidden size."""
        return hidden if self.latent_size is None else self.latent_size

    def latent_parameters(self, hidden: int) -> int:
        """One MoE layer's two latent projections (hidden x latent each); 0 without a latent."""
        return 0 if self.latent_size is None else 2 * hidden * self.latent_size

    @model_validator(mode="after")
    def _k_fits(self) -> Moe:
        if self.top_k > self.experts:
            raise ValueError(f"top_k: {self.top_k} exceeds the {self.experts} experts")
        if (self.router_groups is None) != (self.group_topk is None):
            raise ValueError("router_groups and group_topk: set both or neither")
        if self.router_groups is not None and self.group_topk is not None:
            if self.experts % self.router_groups:
                raise ValueError(f"router_groups: {self.router_groups} does not divide the {self.experts} experts")
            if self.group_topk > self.router_groups:
                raise ValueError(f"group_topk: {self.group_topk} exceeds the {self.router_groups} router_groups")
            if self.group_topk * self.experts // self.router_groups < self.top_k:
                raise ValueError(f"group_topk: {self.group_topk} groups hold fewer than top_k {self.top_k} experts")
        return self


class Mla(_Spec):
    """Multi-head latent attention (DeepSeek-V2/V3): queries and keys/values through low-rank latents."""

    q_lora_rank: int | None = Field(default=None, ge=1, description="query latent size; None: queries not compressed")
    kv_lora_rank: int = Field(ge=1, description="key/value latent size")
    qk_nope_head_dim: int = Field(ge=1, description="per-head query/key size without rotary")
    qk_rope_head_dim: int = Field(ge=0, description="per-head query/key rotary size (the rotary key is shared)")
    v_head_dim: int = Field(ge=1, description="per-head value size")


class SlidingWindow(_Spec):
    """Sliding-window attention (gpt-oss, Mistral, Gemma): on the windowed layers each query attends to itself and
    the ``tokens - 1`` keys before it; the other layers attend over the whole sequence."""

    tokens: int = Field(
        ge=1,
        description="keys one query attends to, itself included (Hugging Face config sliding_window; Megatron-Core "
        "window_size (tokens - 1, 0))",
    )
    full_every: int = Field(
        default=0,
        ge=0,
        description="every full_every-th layer, counted from 1, attends over the whole sequence and the others over "
        "the window (Megatron-Core window_attn_skip_freq); 0: every layer windowed",
    )


# Megatron-Core's hybrid layer symbols (megatron/core/ssm/mamba_hybrid_layer_allocation.py Symbols): one character a
# layer of hybrid_override_pattern, each layer one block with its own pre-norm and residual
HYBRID_KINDS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
PIPE = "|"  # Megatron-Core's pipeline-segment separator in hybrid_layer_pattern (hybrid_layer_allocation.Symbols)


class Hybrid(_Spec):
    """A hybrid model's layers as Megatron-Core's MambaModel builds them (Nemotron-H, Nemotron 3): each layer ONE
    block, named by one character of ``pattern`` (Megatron-Core ``hybrid_override_pattern``): ``M`` a Mamba-2 mixer,
    ``*`` self-attention (the workload's heads), ``-`` an MLP (its ffn_hidden), ``E`` an MoE block (its moe)."""

    pattern: str = Field(
        min_length=1,
        description="one character a layer, first to last: M Mamba-2, * attention, - MLP, E MoE (Megatron-Core "
        "hybrid_layer_pattern); '|' cuts it into pipeline segments, PP x VPP of them, segment v x PP + rank on "
        "pipeline rank `rank` as its model chunk v (Megatron-Core's flexible VPP); without '|' the stages split it "
        "evenly",
    )
    mamba_heads: int = Field(ge=1, description="Mamba-2 heads (Megatron-Core mamba_num_heads; HF mamba_num_heads)")
    mamba_head_dim: int = Field(ge=1, description="size of one Mamba-2 head (mamba_head_dim)")
    mamba_state: int = Field(ge=1, description="SSM state size per head (mamba_state_dim; HF ssm_state_size)")
    mamba_groups: int = Field(
        ge=1, description="groups sharing one B and C (mamba_num_groups; HF n_groups); divides mamba_heads"
    )
    conv_kernel: int = Field(default=4, ge=1, description="the causal depthwise convolution's width (d_conv)")
    chunk: int = Field(default=128, ge=1, description="the SSD scan's chunk length (Megatron-Core chunk_size)")

    @model_validator(mode="after")
    def _pattern_known(self) -> Hybrid:
        bad = sorted(set(self.pattern) - set(HYBRID_KINDS) - {PIPE})
        if bad:
            raise ValueError(
                f"pattern: unknown layer symbol(s) {''.join(bad)!r}; known: M (Mamba-2), * (attention), - (MLP), "
                "E (MoE)"
            )
        if not self.layer_symbols:
            raise ValueError("pattern: no layer symbols, only pipeline separators '|'")
        if self.mamba_heads % self.mamba_groups:
            raise ValueError(f"mamba_groups: {self.mamba_groups} groups do not divide {self.mamba_heads} heads")
        return self

    @property
    def layer_symbols(self) -> str:
        """The pattern's layers, first to last, without its pipeline separators."""
        return self.pattern.replace(PIPE, "")

    @property
    def segments(self) -> tuple[str, ...] | None:
        """The pipeline segments '|' cuts the pattern into, in order; None without a separator [27 s29 hybridpipe]."""
        return tuple(self.pattern.split(PIPE)) if PIPE in self.pattern else None

    @property
    def d_inner(self) -> int:
        """The mixer's inner width: heads x head size (Megatron-Core d_inner)."""
        return self.mamba_heads * self.mamba_head_dim

    # The non-MoE blocks the model's dense layer kind stands for: a pipeline stage's own (``for_blocks``), else
    # None, the whole pattern's. A stage's kernels, activations and parameters are its own blocks' mean, not the
    # model's (Megatron-Core gives each pipeline stage a slice of the pattern: hybrid_layer_allocation.py
    # select_pipeline_segment at d98e8a64) [27 s29 hybridpp]
    _blocks: str | None = PrivateAttr(default=None)

    def count(self, symbol: str) -> int:
        """Layers of one symbol."""
        return self.layer_symbols.count(symbol)

    def dense_mix(self) -> list[tuple[str, int]]:
        """(symbol, blocks) of the M, * and - blocks the dense layer kind averages: the pattern's, or a stage's."""
        blocks = self.layer_symbols if self._blocks is None else self._blocks
        return [(sym, blocks.count(sym)) for sym in "M*-"]

    def for_blocks(self, blocks: str) -> Hybrid:
        """This hybrid with its dense layer kind standing for ``blocks`` (a pipeline stage's symbols) alone."""
        out = self.model_copy()
        out._blocks = blocks
        return out

    def in_proj_width(self, tp: int = 1) -> float:
        """in_proj's output width on one of ``tp`` GPUs: z and x (d_inner each), B and C (groups x state each), dt
        (one per head); all split by TP (Megatron-Core mamba_mixer.py, in_proj output_size)."""
        return (2 * self.d_inner + 2 * self.mamba_groups * self.mamba_state + self.mamba_heads) / tp

    def conv_channels(self, tp: int = 1) -> float:
        """Channels of the causal convolution on one of ``tp`` GPUs: x, B and C."""
        return (self.d_inner + 2 * self.mamba_groups * self.mamba_state) / tp

    def mixer_parameters(self, hidden: int) -> int:
        """One Mamba-2 mixer's parameters (its layer's pre-norm apart): in_proj, the convolution's weight and bias,
        dt_bias, A_log and D per head, the gated norm's weight and out_proj."""
        conv = self.conv_channels()
        return int(
            hidden * self.in_proj_width()
            + conv * (self.conv_kernel + 1)
            + 3 * self.mamba_heads
            + self.d_inner
            + self.d_inner * hidden
        )


# Workload.parameter_counts' answers by id(workload), each kept with its workload; cleared when full
_COUNTS: dict[int, tuple[Workload, dict[str, int]]] = {}
_COUNTS_MAX = 512


class Workload(_Spec):
    """A decoder-only transformer and the batch it trains on."""

    format: str = Field(default=FORMAT, description="file format version, 'commlens.workload/1'")
    name: str = Field(min_length=1, description="preset or file name")
    description: str = Field(default="", description="one line on what this is and where its figures come from")
    layers: int = Field(ge=1, description="transformer layers")
    hidden: int = Field(ge=1, description="model (hidden) size h")
    ffn_hidden: int = Field(ge=1, description="FFN inner size of a dense layer")
    gated_ffn: bool = Field(description="SwiGLU-style FFN: three weight matrices instead of two")
    heads: int = Field(ge=1, description="attention (query) heads")
    kv_heads: int | None = Field(default=None, ge=1, description="key/value heads (GQA); None: = heads")
    head_dim: int | None = Field(default=None, ge=1, description="size of one head; None: hidden / heads")
    vocab: int = Field(ge=1, description="vocabulary size V")
    seq_len: int = Field(ge=1, description="tokens per sample s")
    tied_embeddings: bool = Field(default=False, description="the output layer reuses the input embedding")
    dropout: bool = Field(
        default=False, description="hidden dropout after attention and FFN (GPT-3 style; Llama-style models: none)"
    )
    position_embedding: Literal["rotary", "yarn", "learned", "none"] = Field(
        default="rotary",
        description="rotary (applied to Q and K in every layer), yarn (rotary with YaRN's scaled frequencies and "
        "attention scale, gpt-oss), learned absolute positions, or none (Nemotron-H: its Mamba layers carry the "
        "order; Megatron-Core position_embedding_type 'none')",
    )
    mla: Mla | None = Field(default=None, description="multi-head latent attention; None: (grouped-query) attention")
    sliding_window: SlidingWindow | None = Field(
        default=None, description="sliding-window attention on some layers; None: every layer attends in full"
    )
    moe: Moe | None = Field(default=None, description="mixture-of-experts FFN; None: dense")
    hybrid: Hybrid | None = Field(
        default=None,
        description="a hybrid model's layer pattern and Mamba-2 mixer (Nemotron-H, Nemotron 3); None: every layer is "
        "attention and an FFN",
    )
    # [27 s16 llama4] Llama 4's chunked attention (HF text_config attention_chunk_size 8192; NeMo Llama4Config
    # attention_chunk_size 8192): on its RoPE layers a query attends only within its chunk of the sequence. Up to one
    # chunk that is full causal attention, which is what commlens prices; a longer sequence is refused.
    attention_chunk: int | None = Field(
        default=None,
        ge=1,
        description="chunked attention (Llama 4): tokens of one attention chunk; the model prices full causal "
        "attention, exact while seq_len <= attention_chunk, and refuses a longer sequence; None: not chunked",
    )
    mtp_layers: int = Field(
        default=0,
        ge=0,
        description="multi-token prediction depth D (DeepSeek-V3 report, arXiv 2412.19437 Sec. 2.2: D = 1; "
        "Megatron-Core mtp_num_layers): D modules after the last layer, on the last pipeline stage, each the next "
        "token's embedding and the hidden state normed, concatenated and projected 2h -> h, one transformer layer "
        "like the model's last, a norm, and a second pass through the shared output head and cross-entropy; 0: none",
    )
    mtp_repeated: bool = Field(
        default=False,
        description="the mtp_layers modules share one module's weights, run mtp_layers times (Megatron-Core "
        "mtp_use_repeated_layer: Nemotron 3 Super); False: a module of its own each",
    )
    precision: Precision = Field(default="bf16", description="GEMM precision: bf16 or fp8 (weights kept in bf16)")
    global_batch: int = Field(ge=1, description="samples per optimizer step")
    micro_batch: int = Field(default=1, ge=1, description="samples per micro-batch on one pipeline")

    @model_validator(mode="after")
    def _shapes_fit(self) -> Workload:
        if self.format != FORMAT:
            raise ValueError(f"format: unsupported workload format {self.format!r}; this commlens reads {FORMAT!r}")
        if self.head_dim is None and self.hidden % self.heads:
            raise ValueError(f"heads: {self.heads} heads do not divide hidden size {self.hidden}")
        if self.heads % self.kv_heads_n:
            raise ValueError(f"kv_heads: {self.kv_heads_n} KV heads do not divide {self.heads} heads")
        if self.global_batch % self.micro_batch:
            raise ValueError(f"micro_batch: {self.micro_batch} does not divide global_batch {self.global_batch}")
        if self.moe is not None and self.hybrid is None and self.moe.first_moe_layer >= self.layers:
            raise ValueError(
                f"moe.first_moe_layer: {self.moe.first_moe_layer} leaves no MoE layer in {self.layers} layers"
            )
        if self.attention_chunk is not None and self.seq_len > self.attention_chunk:
            raise ValueError(
                f"seq_len: {self.seq_len} exceeds attention_chunk {self.attention_chunk}; chunked attention (each "
                "chunk its own causal block) is not modelled, only a sequence of one chunk or less"
            )
        if self.hybrid is not None:
            self._hybrid_fits(self.hybrid)
        elif self.moe is not None and self.moe.first_moe_layer + self.moe.every > self.layers:
            raise ValueError(
                f"moe.every: {self.moe.every} from layer {self.moe.first_moe_layer} leaves no MoE layer in "
                f"{self.layers} layers"
            )
        return self

    def _hybrid_fits(self, hy: Hybrid) -> None:
        if len(hy.layer_symbols) != self.layers:
            raise ValueError(f"hybrid.pattern: {len(hy.layer_symbols)} symbols for {self.layers} layers")
        if ("E" in hy.pattern) != (self.moe is not None):
            raise ValueError("hybrid.pattern: E layers need moe, and moe needs E layers")
        if self.moe is not None and (self.moe.first_moe_layer or self.moe.every != 1):
            raise ValueError("moe.first_moe_layer / moe.every: a hybrid's MoE layers are its pattern's E layers")
        if self.mla is not None:
            raise ValueError("hybrid: MLA is not modelled in hybrid models")

    @property
    def kv_heads_n(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def head_size(self) -> int:
        return self.hidden // self.heads if self.head_dim is None else self.head_dim

    @property
    def moe_layer_flags(self) -> list[bool]:
        """Whether each layer, first to last, is an MoE layer: from ``moe.first_moe_layer`` on, every
        ``moe.every``-th (the ``every``-th, ``2 every``-th, ... counted from 1 there)."""
        if self.moe is None:
            return [False] * self.layers
        if self.hybrid is not None:
            return [c == "E" for c in self.hybrid.layer_symbols]
        first, every = self.moe.first_moe_layer, self.moe.every
        return [i >= first and (i - first + 1) % every == 0 for i in range(self.layers)]

    @property
    def moe_layers(self) -> int:
        """MoE layers: ``sum(moe_layer_flags)``, counted without building the list."""
        if self.moe is None:
            return 0
        if self.hybrid is not None:
            return self.hybrid.count("E")
        return (self.layers - self.moe.first_moe_layer) // self.moe.every

    @property
    def mtp_moe(self) -> bool:
        """The multi-token prediction modules' layer is an MoE layer: each is built like the model's last layer
        (Megatron-Core gpt_layer_specs.py ``get_gpt_mtp_block_spec`` takes the decoder's last layer spec; torchtitan's
        ``_build_mtp_layers(model.layers[-1], ...)``), and the MoE layers are the last ones."""
        return self.moe is not None

    def mtp_parameter_counts(self) -> dict[str, int]:
        """Parameters of the ``mtp_layers`` modules by part, not in :meth:`parameter_counts` (the published sizes,
        671B for DeepSeek-V3, leave them out): each module's transformer layer (its attention with its two norms, and
        its FFN or experts, shared experts and router), its ``eh_proj`` (2h x h) and three norms (enorm, hnorm,
        final). The embedding and output head are the main model's, shared (DeepSeek-V3 report Sec. 2.2)."""
        # a hybrid's module is an attention block and an E block (an MLP block without experts): Megatron-Core's MTP
        # pattern '*E' of Nemotron 3 (multi_token_prediction.py at cd4afffa builds a HybridStack of it), the same
        # parts as a transformer layer's; repeated modules (mtp_repeated) hold one module's weights
        d, h = (1 if self.mtp_repeated and self.mtp_layers else self.mtp_layers), self.hidden
        mats = 3 if self.gated_ffn else 2
        attn = self.attention_parameters + 2 * h
        out = {"attention": d * attn, "ffn": 0, "experts": 0, "shared_experts": 0, "router": 0}
        if self.moe is not None:
            m = self.moe
            out["experts"] = d * m.experts * mats * m.routed_width(h) * m.expert_ffn_hidden
            out["shared_experts"] = d * m.shared_experts * mats * h * m.expert_ffn_hidden
            out["router"] = d * h * m.experts + d * m.latent_parameters(h)
        else:
            out["ffn"] = d * mats * h * self.ffn_hidden
        out["projection"] = d * (2 * h * h + 3 * h)
        return out

    @property
    def window_layers(self) -> int:
        """Layers whose attention is windowed (``sliding_window``): all but every ``full_every``-th."""
        sw = self.sliding_window
        if sw is None:
            return 0
        return self.layers - (self.layers // sw.full_every if sw.full_every else 0)

    @property
    def qk_head_dim(self) -> int:
        """Per-head size of queries and keys (MLA: without and with rotary)."""
        m = self.mla
        return self.head_size if m is None else m.qk_nope_head_dim + m.qk_rope_head_dim

    @property
    def v_head_dim(self) -> int:
        """Per-head size of values and of the attention output."""
        return self.head_size if self.mla is None else self.mla.v_head_dim

    @property
    def attention_parameters(self) -> int:
        """Weights of one layer's attention linears (QKV and the output projection; MLA's down- and
        up-projections), whole: :meth:`attention_linears` on one GPU."""
        return int(sum(k * n for _, k, n in self.attention_linears(1)))

    def attention_linears(self, tp: int = 1) -> list[tuple[str, float, float]]:
        """(name, K, N per GPU) of each attention GEMM of one layer for one token, on one of ``tp`` GPUs: QKV and
        the output projection; MLA's down-projections are replicated over TP, its up-projections split by head."""
        h, a_t = self.hidden, self.heads / tp
        m = self.mla
        if m is None:
            d, g_t = self.head_size, max(self.kv_heads_n / tp, 1.0)
            return [("qkv", h, (a_t + 2 * g_t) * d), ("attention_out", a_t * d, h)]
        out: list[tuple[str, float, float]] = []
        q_in = h
        if m.q_lora_rank is not None:
            out.append(("q_down", h, m.q_lora_rank))
            q_in = m.q_lora_rank
        out += [
            ("q_up", q_in, a_t * self.qk_head_dim),
            ("kv_down", h, m.kv_lora_rank + m.qk_rope_head_dim),
            ("kv_up", m.kv_lora_rank, a_t * (m.qk_nope_head_dim + m.v_head_dim)),
            ("attention_out", a_t * m.v_head_dim, h),
        ]
        return out

    def parameter_counts(self) -> dict[str, int]:
        """Parameters by part (:meth:`_parameter_counts`), counted once a workload: specs are frozen, so a count
        stays true for the object it was made for (kept with it, so that its id is not reused while kept)."""
        hit = _COUNTS.get(id(self))
        if hit is None or hit[0] is not self:
            if len(_COUNTS) >= _COUNTS_MAX:
                _COUNTS.clear()
            hit = _COUNTS[id(self)] = (self, self._parameter_counts())
        return dict(hit[1])

    def _parameter_counts(self) -> dict[str, int]:
        """Parameters by part: attention, dense FFN, experts (routed), shared experts, router, norms, embeddings; a
        hybrid's Mamba mixers as ``mamba`` (each part over the layers that have it: a hybrid layer has one pre-norm)."""
        h = self.hidden
        attn = self.attention_parameters
        mats = 3 if self.gated_ffn else 2
        dense_layers = self.layers - self.moe_layers
        out = {
            "attention": self.layers * attn,
            "ffn": dense_layers * mats * h * self.ffn_hidden,
            "experts": 0,
            "shared_experts": 0,
            "router": 0,
            "norms": self.layers * 2 * h + h,
            "embedding": self.vocab * h * (1 if self.tied_embeddings else 2),
        }
        hy = self.hybrid
        if hy is not None:
            out["attention"] = hy.count("*") * attn
            out["ffn"] = hy.count("-") * mats * h * self.ffn_hidden
            out["norms"] = self.layers * h + h
            out["mamba"] = hy.count("M") * hy.mixer_parameters(h)
        if self.moe is not None:
            m = self.moe
            out["experts"] = self.moe_layers * m.experts * mats * m.routed_width(h) * m.expert_ffn_hidden
            out["shared_experts"] = self.moe_layers * m.shared_experts * mats * h * m.expert_ffn_hidden
            # the router, and a latent MoE's two projections (dense parameters of the MoE layer, as the router)
            out["router"] = self.moe_layers * (h * m.experts + m.latent_parameters(h))
        return out

    def layer_linear_parameters(self, moe: bool) -> float:
        """Parameters of one layer's linear modules outside the routed experts (the weights a stack can hold in
        fp8), a layer of each kind: dense (attention and FFN) or MoE (attention and shared experts); in a hybrid
        the mean over its non-MoE layers (Mamba's in_proj and out_proj, attention, MLP) or an E layer's shared
        experts."""
        h, mats = self.hidden, 3 if self.gated_ffn else 2
        attn = self.attention_parameters
        ffn = mats * h * self.ffn_hidden
        shared = 0.0
        if self.moe is not None:  # the shared experts and a latent MoE's projections (TE linears)
            shared = mats * h * self.moe.expert_ffn_hidden * self.moe.shared_experts + self.moe.latent_parameters(h)
        hy = self.hybrid
        if hy is None:
            return attn + (shared if moe else ffn)
        if moe:
            return shared
        mixer = h * hy.in_proj_width() + hy.d_inner * h
        mix = dict(hy.dense_mix())
        n = sum(mix.values())
        return (mix["M"] * mixer + mix["*"] * attn + mix["-"] * ffn) / n if n else 0.0

    def layer_dense_parameters(self, moe: bool) -> float:
        """Parameters of one layer outside the routed experts, norms included, a layer of each kind (a hybrid's
        dense kind: the mean over its M, * and - layers)."""
        hy = self.hybrid
        if hy is not None and not moe and hy._blocks is not None:  # a pipeline stage's blocks: each at its share
            mix = dict(hy.dense_mix())
            n = sum(mix.values())
            per = {
                "M": hy.mixer_parameters(self.hidden),
                "*": self.attention_parameters,
                "-": (3 if self.gated_ffn else 2) * self.hidden * self.ffn_hidden,
            }
            return (sum(mix[k] * per[k] for k in mix) + n * self.hidden) / n if n else 0.0
        c = self.parameter_counts()
        if hy is None:
            base = c["attention"] / self.layers + 2 * self.hidden
            if not moe:
                return base + (3 if self.gated_ffn else 2) * self.hidden * self.ffn_hidden
            return base + ((c["shared_experts"] + c["router"]) / self.moe_layers if self.moe_layers else 0.0)
        if moe:
            return self.hidden + ((c["shared_experts"] + c["router"]) / self.moe_layers if self.moe_layers else 0.0)
        n = self.layers - self.moe_layers
        return (c["attention"] + c["ffn"] + c["mamba"] + n * self.hidden) / n if n else 0.0

    @property
    def parameters(self) -> int:
        """All parameters."""
        return sum(self.parameter_counts().values())

    @property
    def active_parameters(self) -> int:
        """Parameters one token goes through (routed experts: top_k of them)."""
        c = self.parameter_counts()
        if self.moe is None:
            return sum(c.values())
        return sum(c.values()) - c["experts"] + c["experts"] // self.moe.experts * self.moe.top_k


def workload_from_dict(data: Any, source: str = "workload") -> Workload:
    """Build a :class:`Workload` from parsed YAML/JSON; errors name the field and say why."""
    return model_from_data(Workload, data, source, WorkloadError, _describe)


def _describe(err: Mapping[str, Any]) -> str:
    loc = ".".join(str(p) for p in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        return f"{loc}: unknown field"
    if err["type"] == "missing":
        return f"{loc}: missing"
    if re.match(r"^[a-z_][a-z0-9_.]*: ", msg):  # a cross-field check naming its field within its model
        return f"{loc}.{msg}" if loc else msg
    return f"{loc}: {msg}" if loc else msg
