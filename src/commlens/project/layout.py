"""The parallel layout of a training job: TP (+SP), CP, PP (1F1B / interleaved), DP (ZeRO / FSDP), EP.

A :class:`ParallelLayout` is data like a workload (pydantic, strict keys);
:func:`resolve` checks it against a workload and a GPU count and returns the
derived sizes, or raises :class:`InfeasibleLayoutError` with the reason.

Placement: ranks are numbered node-major (as launchers place them); the
dimensions in ``order`` are laid out innermost first, so by default TP groups
are consecutive ranks inside a node's scale-up domain, then CP, then DP, with
PP outermost. EP groups are carved from the innermost part of DP (experts are
data-parallel over the rest), as Megatron-LM does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from commlens.project.errors import InfeasibleLayoutError
from commlens.specdata import StrictSpec
from commlens.workload import Workload

__all__ = ["CudaGraphScope", "Group", "ParallelLayout", "Resolved", "resolve"]

Recompute = Literal["none", "selective", "full"]
RecomputeMethod = Literal["block", "uniform"]
RecomputeModule = Literal["core_attn", "mla_up_proj", "layernorm", "mlp", "moe", "moe_act", "shared_experts", "op"]
Schedule = Literal["1f1b", "interleaved", "zero-bubble", "dualpipe", "gpipe"]
AttentionKernel = Literal["fa2", "fa3", "cudnn", "ck", "unfused"]
Fp8Recipe = Literal["delayed", "current", "mxfp8", "nvfp4"]
CudaGraphScope = Literal["attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "full_iteration"]
_DIMS = ("tp", "cp", "dp", "pp")


class ParallelLayout(StrictSpec):
    """How a job splits one training step over its GPUs."""

    tp: int = Field(default=1, ge=1, description="tensor-parallel size")
    sp: bool = Field(default=True, description="sequence parallelism: TP all-gather/reduce-scatter, norms split")
    cp: int = Field(default=1, ge=1, description="context-parallel size (sequence split, ring attention)")
    pp: int = Field(default=1, ge=1, description="pipeline stages")
    vpp: int = Field(default=1, ge=1, description="virtual stages per GPU (>1: interleaved 1F1B)")
    first_stage_layers: int | None = Field(
        default=None, ge=0, description="layers of the first stage (Megatron --decoder-first-pipeline-num-layers)"
    )
    last_stage_layers: int | None = Field(
        default=None, ge=0, description="layers of the last stage (Megatron --decoder-last-pipeline-num-layers)"
    )
    embedding_in_split: bool = Field(
        default=False,
        description="the embedding takes one layer's slot on the first stage (Megatron "
        "--account-for-embedding-in-pipeline-split)",
    )
    launch_blocking: bool = Field(
        default=False,
        description="CUDA_LAUNCH_BLOCKING=1: every launch returns when its kernel is done, so the host's time per "
        "kernel adds to the GPU's instead of running ahead of it",
    )
    loss_in_split: bool = Field(
        default=False,
        description="the output layer and loss take one layer's slot on the last stage (Megatron "
        "--account-for-loss-in-pipeline-split)",
    )
    stage_layers: tuple[int, ...] | None = Field(
        default=None, description="layers of every stage, first to last (torchtitan's split points); sums to layers"
    )
    ep: int = Field(default=1, ge=1, description="expert-parallel size (MoE), carved from DP (x TP when etp < tp)")
    etp: int | None = Field(
        default=None,
        ge=1,
        description="expert tensor-parallel size (Megatron --expert-tensor-parallel-size); None: TP. Below TP, EP "
        "folds over the rest of TP and DP (MoE parallel folding)",
    )
    dp: int | None = Field(default=None, ge=1, description="data-parallel size; None: GPUs / (TP x CP x PP)")
    zero: Literal[0, 1, 2, 3] = Field(default=1, description="ZeRO stage: 1 optimizer, 2 +grads, 3 +params (FSDP)")
    reshard_after_forward: bool = Field(
        default=True, description="ZeRO-3/FSDP frees gathered parameters after forward (false: kept until backward)"
    )
    pp_schedule_micro_batches: int | None = Field(
        default=None,
        ge=1,
        description="micro-batches one run of the pipeline schedule takes (the recipe's local batch / micro-batch): "
        "the step runs its micro-batches as back-to-back schedule runs, each with its own fill and drain, and "
        "accumulates gradients over the runs (torch.distributed.pipelining: one schedule.step() per local batch, as "
        "NeMo AutoModel's recipes with GA > 1 run it); None: one run of all of them",
    )
    fsdp_defer_grad_reduce: bool = Field(
        default=False,
        description="ZeRO-3/FSDP with several micro-batches: parameters gathered on the first micro-batch and kept, "
        "gradients accumulated unsharded and reduce-scattered in the last micro-batch's backward only (FSDP2's "
        "set_requires_gradient_sync / set_reshard_after_backward off before it: torchtitan's "
        "fsdp_defer_gradient_reduction); needs zero 3 and reshard_after_forward false",
    )
    fsdp_fp8_all_gather: bool = Field(
        default=False,
        description="with fp8 precision and ZeRO-3/FSDP: the fp8 linears' weights are cast to fp8 before the "
        "all-gather and computed with as gathered, 1 B a parameter (torchao's enable_fsdp_float8_all_gather); the "
        "embedding, norms and output projection stay 16-bit; no effect otherwise",
    )
    fp8_param_gather: bool = Field(
        default=False,
        description="with fp8 precision and ZeRO-1/2 (Megatron's distributed optimizer): the blocks' Transformer "
        "Engine linears (attention, dense and expert FFNs) hold fp8 weights (Megatron fp8_param_gather, which the "
        "Megatron-Bridge fp8 recipes set), and the parameter all-gather moves them as stored: 1 B a weight under "
        "per-tensor scaling (delayed, current: the Float8Tensor's data in a uint8 buffer), 2 B under mxfp8 (its "
        "buffer is a bf16 view of the gradient buffer, quantized after the gather); router, norms, embedding and "
        "output layer 2 B; ZeRO-3 is fsdp_fp8_all_gather's",
    )
    optimizer_state_bytes: float = Field(
        default=12.0,
        gt=0,
        le=16,
        description="optimizer bytes per parameter: fp32 master + Adam moments 12; bf16 moments 8",
    )
    recompute: Recompute = Field(default="selective", description="activation recomputation: none, selective, full")
    recompute_modules: tuple[RecomputeModule, ...] = Field(
        default=(),
        description="modules selective recomputation redoes (Megatron --recompute-modules: core_attn, mla_up_proj, "
        "layernorm, mlp, moe, moe_act, shared_experts; op: torchtitan's op-level policy); empty: the framework's "
        "default",
    )
    recompute_layers: int | None = Field(
        default=None,
        description="with recompute full: Megatron's --recompute-num-layers N, per model chunk (a stage, or each "
        "virtual stage under vpp > 1); with recompute_method block the first N layers of each chunk are recomputed "
        "and the rest keep their activations, with uniform the chunk is checkpointed in groups of N layers; None: "
        "every layer recomputed, each checkpointed at its own input (uniform, 1)",
    )
    recompute_method: RecomputeMethod | None = Field(
        default=None,
        description="how recompute_layers is read (Megatron --recompute-method): block (the default) or uniform",
    )
    flash_attention: bool = Field(default=True, description="fused (flash) attention; false: unfused, s^2 in HBM")
    overlap_grad_reduce: bool = Field(default=True, description="DP gradient reduction overlaps the last backward")
    overlap_param_gather: bool = Field(default=True, description="ZeRO parameter all-gather overlaps forward")
    grad_reduce_bytes: int = Field(default=4, ge=1, le=4, description="bytes per gradient element reduced (fp32: 4)")
    dp_bucket_elements: float | None = Field(
        default=None,
        gt=0,
        description="gradient elements per DP bucket as the run sets it (Megatron-Core DistributedDataParallelConfig "
        "bucket_size: a bucket closes once it holds this many, so a size under one weight puts each weight in its own "
        "bucket); None: the framework's default (frameworks.yaml overlap.bucket_elements)",
    )
    grad_accum_fusion: bool = Field(
        default=True,
        description="weight-gradient GEMMs add into the main grads; false: a separate add per "
        "micro-batch, 2 + 2 x grad_reduce_bytes B per parameter (Megatron-LM of 2021)",
    )
    tp_comm_overlap: bool = Field(
        default=False,
        description="TP all-gather/reduce-scatter split into chunks behind the GEMMs they feed (Transformer Engine "
        "userbuffers, Megatron --tp-comm-overlap)",
    )
    cp_comm_overlap: bool | None = Field(
        default=None,
        description="CP's K/V exchange runs beside the attention as the framework overlaps it (a ring: each step's "
        "beside that step's; torch's all-gather rotater: beside the first step's; a framework without CP overlap: "
        "a ring); false: gathered before it and waited for (all-gather based CP, as Llama 3's); None: as the "
        "framework does",
    )
    pp_scatter_gather: bool = Field(
        default=True,
        description="each TP rank sends 1/TP of a stage's activations and they are all-gathered after (Megatron-LM "
        "since 2021); false: every TP rank sends the whole tensor",
    )
    pp_p2p: Literal["batched", "serial"] | None = Field(
        default=None,
        description="how a stage exchanges activations and gradients with its neighbours: batched (one batched "
        "send/receive each way per pass, both directions at once: Megatron-LM, torch pipelining) or serial "
        "(DeepSpeed's pipeline engine: each tensor its own blocking send or receive after a shape header, one after "
        "another, and a partitioned tensor rebuilt by a TP all-gather three times per micro-batch); None: as the "
        "framework does",
    )
    zero1_all_reduce: bool = Field(
        default=False,
        description="ZeRO-1: the gradients are all-reduced whole (each rank then keeps its partition of the sum) "
        "before the optimizer step and the parameters' all-gather, rather than reduce-scattered: DeepSpeed's stage 1 "
        "through stage2.py in 2021 (v0.5.x: contiguous gradients off in stage 1, buffered_reduce_fallback -> "
        "allreduce_bucket)",
    )
    grad_accum_cast: bool = Field(
        default=False,
        description="with grad_accum_fusion false: each 16-bit weight gradient is first cast to a temporary tensor "
        "of grad_reduce_bytes, then added into the main grads (2 x grad_reduce_bytes B more per parameter and "
        "micro-batch: the temporary written and read); DeepSpeed's BF16_Optimizer.update_hp_grads "
        "(hp_grad.add_(lp.grad.to(hp_grad.dtype)), microsoft/DeepSpeed 56c522386, 2022-04)",
    )
    offload_activation_layers: int = Field(
        default=0,
        ge=0,
        description="layers per stage whose saved activations go to host memory during forward (Megatron "
        "--cpu-offloading-num-layers); the copies are taken to hide under compute, except under a framework with "
        "activation_offload_blocking (DeepSpeed's CPU checkpointing: blocking copies at the host-link rate)",
    )
    fp8_output_layer: bool | None = Field(
        default=None,
        description="under fp8 the output layer's (logits) GEMMs run in fp8 as the blocks' linears do, as this run set "
        "it (Megatron-Bridge's FP8_OUTPUT_PROJ: the MXFP8 LM-head output projection of MLPerf v6.0's GB300 DeepSeek-V3 "
        "configs); unset, the framework profile's fp8_output_layer [27 s21 fp8out]",
    )
    nccl_nvls: bool | None = Field(
        default=None,
        description="NCCL_NVLS_ENABLE as this run's launch set it: false, NCCL runs no NVLink SHARP (NVLS) "
        "collective; true, NVLS where the scale-up switch reduces; unset, the framework profile's nccl_nvls "
        "[27 s16 nvls]",
    )
    cuda_graphs: bool = Field(
        default=False,
        description="CUDA graphs replay the layers' static kernels (no host launch cost); MoE dispatch stays eager",
    )
    cuda_graph_scope: tuple[CudaGraphScope, ...] | None = Field(
        default=None,
        description="with cuda_graphs, what Megatron-Core captures (--cuda-graph-scope, Megatron-LM 0d8e0714 and "
        "44151194 transformer_config.py / transformer_layer.py): attn (input norm, attention, its projection and "
        "residual add), mlp (a dense layer's pre-MLP norm, MLP and residual add), mamba (a hybrid's Mamba layers "
        "whole), moe_router (an MoE layer's pre-MLP "
        "norm and router; its residual add after the combine stays eager), moe_preprocess (with moe_router: the "
        "dispatcher's token counts and, for the all-to-all dispatcher, permutation 1, whose count copy then moves "
        "to the sync point, so the host's wait drains the stream), full_iteration (Megatron's local whole-step "
        "graph: every static kernel, as cuda_graphs alone; an MoE layer's dispatch and experts too only with "
        "moe_expert_capacity, the static expert budget), moe (the whole MoE layer: refused, it needs drop-and-pad "
        "experts: moe_pad_to_capacity); kernels outside the scope pay their host launches and gaps. None: every static "
        "kernel of the layers, the experts and dispatch eager",
    )
    order: tuple[str, ...] = Field(default=_DIMS, description="placement of dimensions, innermost first")
    framework: str = Field(
        default="megatron-core",
        description="the training stack whose kernels and overlaps the step follows (frameworks.yaml: megatron-core, "
        "nemo, torchtitan, deepspeed)",
    )
    schedule: Schedule | None = Field(
        default=None,
        description="pipeline schedule: 1f1b, interleaved, zero-bubble, dualpipe, gpipe; None: interleaved when "
        "vpp > 1, else 1f1b",
    )
    compile: bool | None = Field(
        default=None, description="torch.compile of each block (fuses memory-bound ops); None: the framework's default"
    )
    compile_loss: bool | None = Field(
        default=None,
        description="torch.compile of the loss (a fused cross-entropy: no fp32 copy of the logits kept); None: "
        "compiled when the blocks are",
    )
    attention_kernel: AttentionKernel | None = Field(
        default=None, description="attention kernel family (fa2, fa3, cudnn, ck); None: what the framework calls"
    )
    expert_activation_fused: bool | None = Field(
        default=None,
        description="the MoE experts' activation runs as one kernel; None: as the framework fuses it (false: the "
        "model's experts use an activation the stack runs as eager ops)",
    )
    fp8_recipe: Fp8Recipe | None = Field(
        default=None,
        description="low-precision recipe of the GEMM inputs (precision fp8), as Transformer Engine names them: "
        "delayed (per-tensor fp8, amax history), current (per-tensor current scaling, Megatron --fp8-recipe "
        "tensorwise), mxfp8 (1x32 blocks with E8M0 scales, Blackwell) or nvfp4 (4-bit NVFP4BlockScaling: 1x16 blocks "
        "with E4M3 scales and a per-tensor scale, Hadamard-transformed weight-gradient inputs, stochastic rounding of "
        "gradients; Blackwell; Megatron --fp4-format e2m1); None: the framework's default",
    )
    bf16_layers_start: int = Field(
        default=0,
        ge=0,
        description="under fp8 precision, the first N transformer layers kept in 16 bits, outside the fp8 / NVFP4 "
        "autocast (Megatron-Core's first_last_layers_bf16 with num_layers_at_start_in_bf16) [27 s25 bf16layers]",
    )
    bf16_layers_end: int = Field(
        default=0,
        ge=0,
        description="under fp8 precision, the last N transformer layers kept in 16 bits (num_layers_at_end_in_bf16; "
        "NVIDIA's NVFP4 recipes keep about the last 15%) [27 s25 bf16layers]",
    )
    mtp_bf16: bool = Field(
        default=False,
        description="under fp8 precision, the multi-token prediction modules run outside the fp8 / fp4 autocast, in 16 "
        "bits (Megatron-Bridge keep_mtp_spec_in_bf16: multi_token_prediction.py builds them outside it; the "
        "Nemotron-H bridge's default, set by the Nemotron 3 Super recipes) [27 s28 super]",
    )
    # [27 s29 quantrecipe] Megatron-Core's quant_recipe (a Transformer Engine quantization config's glob matchers,
    # megatron/core/quantization/utils.py load_quantization_recipe): some modules at another precision than the fp8 /
    # NVFP4 recipe's. Megatron-Bridge's Nemotron 3 Super NVFP4 perf recipes load te_quant.cfg: *.linear_qkv and
    # *.linear_proj, *mlp.fc[12]_latent_proj (and mtp.*, mtp_bf16) in BF16, *mixer.out_proj in MXFP8
    module_precision: dict[Literal["attention", "latent", "mamba_out"], Literal["bf16", "mxfp8"]] | None = Field(
        default=None,
        description="under fp8 precision, modules of a hybrid model at their own precision (Megatron-Core "
        "quant_recipe): attention (linear_qkv, linear_proj), latent (a latent MoE's fc1/fc2_latent_proj), mamba_out "
        "(the Mamba mixer's out_proj) -> bf16 or mxfp8 [27 s29 quantrecipe]",
    )
    nvfp4_rht: bool = Field(
        default=True,
        description="fp8_recipe nvfp4: the Hadamard transform of the weight gradient's inputs (Transformer Engine's "
        "default; false: NVTE_NVFP4_DISABLE_RHT=1, as MLPerf Training v5.1's NVFP4 configs set it) [27 s25 nvfp4]",
    )
    nvfp4_stochastic_rounding: bool = Field(
        default=True,
        description="fp8_recipe nvfp4: the output gradients' stochastic rounding (TE's default; false: "
        "NVTE_NVFP4_DISABLE_STOCHASTIC_ROUNDING=1) [27 s25 nvfp4]",
    )
    optimizer: Literal["adam", "muon"] = Field(
        default="adam",
        description="the optimizer: adam (AdamW) or muon (Megatron-Core's Muon: the transformer layers' 2D weights "
        "orthogonalized by Newton-Schulz iterations on their owner rank, the rest Adam-style; set "
        "optimizer_state_bytes 8 for its fp32 main weights and one momentum) [27 s26 muon]",
    )
    muon_tp_mode: Literal["blockwise", "duplicated"] = Field(
        default="blockwise",
        description="optimizer muon with TP: blockwise (each TP rank orthogonalizes its own shard, what "
        "Megatron-Bridge's Muon recipes pass) or duplicated (the gradient gathered over TP, the whole matrix on every "
        "TP rank: TensorParallelMuon's own default) [27 s26 muon]",
    )
    optimizer_impl: Literal["fused", "foreach"] | None = Field(
        default=None,
        description="the Adam step's kernels: fused or torch's foreach (eight passes over fp32 tensors); None: the "
        "framework's default",
    )
    moe_load_imbalance: float = Field(
        default=1.0,
        ge=1.0,
        le=8.0,
        description="tokens of the most loaded GPU's experts over the mean (1: balanced routing); EP waits for it",
    )

    moe_dispatcher: Literal["alltoall", "deepep", "hybridep", "distmoe"] = Field(
        default="alltoall",
        description="how MoE tokens cross scale-up domains: alltoall (NCCL all-to-all, one copy per routed expert), "
        "deepep (DeepEP / Megatron's flex dispatcher: one copy per destination domain over the scale-out network, "
        "forwarded over NVLink inside it; inside one domain, one copy per destination GPU) or hybridep (Megatron's "
        "flex dispatcher with the HybridEP backend: the copies as deepep, and under fp8 the dispatch pads each "
        "expert's tokens to the GEMM's alignment itself, so the experts run no padding pass), or distmoe (Meta's "
        "Dist-MoE, torchtitan's DistMoE recipes: each route's row read from its peer's symmetric HBM inside the expert "
        "GEMM and its output stored back from the GEMM's epilogue, one copy per routed expert; the EP group within "
        "one NVLink domain)",
    )
    moe_fused_mlp: bool = Field(
        default=False,
        description="the routed experts run as Transformer Engine's fused grouped MLP (Megatron-Core "
        "use_transformer_engine_op_fuser with NVTE_CUTEDSL_FUSED_GROUPED_MLP=1: TE's CuTe DSL kernels, MXFP8 on "
        "Blackwell): one grouped GEMM kernel per linear over all local experts, the activation (gpt-oss's clamp and "
        "bias included), the routing-weight scale and the next GEMM's fp8 cast in its epilogue; false: TE's "
        "GroupedLinear, one GEMM and one cast per expert, the activation and Megatron's bias loop apart",
    )
    moe_expert_capacity: float | None = Field(
        default=None,
        ge=1.0,
        description="HybridEP's static token budget per EP rank (Megatron-Core moe_expert_rank_capacity_factor): the "
        "dispatch writes into a buffer of tokens x top-k x this factor, drops what exceeds it and never copies the "
        "token counts to the host; needs moe_dispatcher hybridep and moe_fused_mlp (transformer_config.py at "
        "cd4afffa). None: the buffers sized from the counts, a host read every MoE layer",
    )
    moe_capacity_factor: float | None = Field(
        default=None,
        gt=0.0,
        description="Megatron-Core's token drop (moe_expert_capacity_factor; Megatron-LM core_v0.14.0 "
        "moe_utils.py get_capacity / apply_router_token_dropping): each expert takes at most ceil(tokens x top-k / "
        "experts x this factor) of each rank's tokens, those of highest routing probability; the rest are dropped "
        "(not computed). The router runs a top-k over the probabilities of each expert's column to build the "
        "capacity mask. Without moe_pad_to_capacity the dispatcher still copies the counts to the host (its sync "
        "point moves to before permutation 1). None: dropless",
    )
    moe_pad_to_capacity: bool = Field(
        default=False,
        description="with moe_capacity_factor: every expert gets exactly its capacity of rows, padded with "
        "zero-probability tokens (Megatron-Core moe_pad_expert_input_to_capacity, the all-to-all dispatcher's "
        "drop_and_pad at core_v0.14.0 token_dispatcher.py): the splits are known on the host, nothing is copied "
        "back or waited for (cuda_sync_point stays no_sync), the experts' shapes are static and a CUDA graph "
        "captures the whole MoE layer. Megatron-Core refuses it with the flex dispatcher (deepep, hybridep)",
    )
    moe_a2a_overlap: bool = Field(
        default=False,
        description="Megatron-Core's EP all-to-all overlap (overlap_moe_expert_parallel_comm; moe_dev's "
        "--combined-1f1b --combined-1f1b-recipe ep_a2a): one micro-batch's forward layer runs beside another's "
        "backward layer and each one's dispatch/combine on a second stream beside the other's compute. Needs EP > 1, "
        "the alltoall/deepep/hybridep dispatcher, no full recomputation, and VPP where PP > 1",
    )
    delay_wgrad_compute: bool = Field(
        default=False,
        description="with moe_a2a_overlap: the experts' and the attention's weight gradients run after the "
        "backward's dispatch is issued (Megatron-Core delay_wgrad_compute)",
    )
    fp8_attention: Literal["fwd_bwd", "fwd"] | None = Field(
        default=None,
        description="the attention core in fp8 (Megatron-Core fp8_dot_product_attention: Transformer Engine's "
        "fp8_dpa on cuDNN's fused attention, in the layout's fp8 recipe): fwd_bwd (TE's default, NVTE_FP8_DPA_BWD=1) "
        "or fwd (NVTE_FP8_DPA_BWD=0: the backward in 16 bits). Needs precision fp8 on megatron-core or nemo with "
        "cuDNN attention; mxfp8 and current scaling need Blackwell (TE 4329ff84 dot_product_attention/utils.py "
        "get_attention_backend). None: attention in 16 bits",
    )
    moe_routing: Literal["uniform", "consecutive"] = Field(
        default="uniform",
        description="which top-k experts a token takes: uniform (a trained, load-balanced router: k experts drawn "
        "evenly) or consecutive (a benchmark gate giving token t experts t*k .. t*k+k-1 mod E, as AutoModel's "
        "FakeBalancedGate): what a per-destination dispatcher (deepep) deduplicates",
    )

    @field_validator("framework")
    @classmethod
    def _known_framework(cls, v: str) -> str:
        from commlens.project.frameworks import framework_names

        if v not in framework_names():
            raise ValueError(f"unknown framework {v!r}; known: {', '.join(framework_names())}")
        return v

    @field_validator("recompute_layers")
    @classmethod
    def _recompute_layers(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise ValueError(f"must be at least 1 layer per model chunk, got {v} (no layer recomputed: recompute none)")
        return v

    @model_validator(mode="after")
    def _recompute_count(self) -> ParallelLayout:
        # Megatron-Core (transformer_config.py) takes a method and a layer count only with full granularity
        if self.recompute != "full":
            given = [k for k in ("recompute_layers", "recompute_method") if getattr(self, k) is not None]
            if given:
                raise ValueError(f"{' and '.join(given)} need recompute full, not {self.recompute}")
        elif self.recompute_method is not None and self.recompute_layers is None:
            raise ValueError(f"recompute_method {self.recompute_method} needs recompute_layers (layers per chunk)")
        return self

    @model_validator(mode="after")
    def _deferred_reduce(self) -> ParallelLayout:
        if self.fsdp_defer_grad_reduce and (self.zero != 3 or self.reshard_after_forward):
            raise ValueError(
                "fsdp_defer_grad_reduce needs zero 3 with reshard_after_forward false (the parameters stay gathered "
                f"from the first micro-batch), not zero {self.zero} with reshard_after_forward "
                f"{str(self.reshard_after_forward).lower()}"
            )
        return self

    @model_validator(mode="after")
    def _graph_scope(self) -> ParallelLayout:
        # Megatron-Core's own checks (transformer_config.py __post_init__ at 0d8e0714)
        scope = self.cuda_graph_scope
        if scope is None:
            return self
        if not self.cuda_graphs:
            raise ValueError("cuda_graph_scope needs cuda_graphs true")
        if "full_iteration" in scope and len(scope) > 1:
            raise ValueError("full_iteration is a scope of its own (Megatron's local implementation)")
        if "moe" in scope and "moe_router" in scope:
            raise ValueError("cuda_graph_scope must not contain both moe and moe_router")
        if "moe_preprocess" in scope and "moe_router" not in scope:
            raise ValueError("moe_preprocess is captured only with moe_router")
        return self

    @model_validator(mode="after")
    def _expert_capacity(self) -> ParallelLayout:
        # Megatron-Core's own check (transformer_config.py __post_init__ at cd4afffa): the rank budget is the flex
        # dispatcher's (hybridep or ncclep), and with hybridep it needs the op fuser's grouped MLP
        if self.moe_expert_capacity is not None and (self.moe_dispatcher != "hybridep" or not self.moe_fused_mlp):
            raise ValueError("moe_expert_capacity needs moe_dispatcher hybridep and moe_fused_mlp")
        return self

    @model_validator(mode="after")
    def _token_drop(self) -> ParallelLayout:
        # Megatron-Core's own checks (core_v0.14.0 transformer_config.py __post_init__): padding needs the capacity
        # factor, and the flex dispatcher (DeepEP, HybridEP) refuses padding [27 s10 tokdrop]
        if self.moe_pad_to_capacity and self.moe_capacity_factor is None:
            raise ValueError("moe_pad_to_capacity needs moe_capacity_factor (moe_expert_capacity_factor)")
        if self.moe_pad_to_capacity and self.moe_dispatcher in ("deepep", "hybridep"):
            raise ValueError(
                f"moe_pad_to_capacity: Megatron-Core's flex dispatcher ({self.moe_dispatcher}) does not support "
                "moe_pad_expert_input_to_capacity; use moe_dispatcher alltoall"
            )
        if self.moe_capacity_factor is not None and self.moe_dispatcher == "distmoe":
            raise ValueError("moe_capacity_factor: Dist-MoE has no token drop (its experts are dropless)")
        return self

    @field_validator("recompute_modules", "cuda_graph_scope", mode="before")  # a --set string: "a-b" ("a,b" in Python)
    @classmethod
    def _modules(cls, v: Any) -> Any:  # --set layout.cuda_graph_scope=moe_router-moe_preprocess
        return tuple(x for x in v.replace("-", ",").split(",") if x) if isinstance(v, str) else v

    @field_validator("stage_layers", mode="before")
    @classmethod
    def _stage_layers(cls, v: Any) -> Any:
        if isinstance(v, str):
            v = [x for x in v.replace("-", ",").split(",") if x]
        if v is not None and not isinstance(v, list | tuple):
            raise ValueError("must be a list of layer counts, first stage to last")
        return v

    @field_validator("order", mode="before")
    @classmethod
    def _order(cls, v: Any) -> tuple[str, ...]:  # the raw input, before pydantic's own check
        items = tuple(v.replace("-", ",").split(",")) if isinstance(v, str) else tuple(v)
        if sorted(items) != sorted(_DIMS):
            raise ValueError(f"must name each of {', '.join(_DIMS)} once, got {', '.join(items)}")
        return items


@dataclass(frozen=True, slots=True)
class Group:
    """One communicator of a parallel dimension: its size and how its ranks sit on nodes."""

    size: int
    nodes: int
    ranks_per_host: int
    # [27 s13 roce405] nodes from its first rank's to its last's (0: as ``nodes``, consecutive): a group strided
    # over nodes (DP outside TP and PP) reaches as far up the fabric as that span, not as ``nodes`` consecutive ones
    span: int = 0


@dataclass(frozen=True, slots=True)
class Resolved:
    """A layout checked against a workload and a GPU count, with everything derived."""

    gpus: int
    tp: int
    cp: int
    pp: int
    vpp: int
    dp: int
    ep: int
    micro_batches: int  # per pipeline per step
    stage_layers: tuple[int, ...]  # transformer layers of each pipeline stage, first to last
    groups: dict[str, Group]  # tp, cp, dp (dp x cp for dense grads), edp (experts' DP), ep, pp
    # each group's (size, stride) in GPU ids: its ranks are ``base + k x stride`` (for the simulator's placement)
    placement: dict[str, tuple[int, int]] = field(default_factory=dict)
    etp: int = 0  # expert tensor-parallel size (0: as TP)

    @property
    def expert_tp(self) -> int:
        return self.etp or self.tp

    @property
    def layers_per_stage(self) -> int:
        """Layers of the fullest stage."""
        return max(self.stage_layers)


def _group(size: int, stride: int, per_node: int) -> Group:
    if size == 1:
        return Group(1, 1, 1)
    if stride >= per_node:
        return Group(size, size, 1, (size - 1) * (stride // per_node) + 1)
    if stride * size <= per_node:
        return Group(size, 1, size)
    ranks_per_host = per_node // stride
    return Group(size, -(-size // ranks_per_host), ranks_per_host)


def resolve(layout: ParallelLayout, workload: Workload, gpus: int, per_node: int) -> Resolved:
    """Derived sizes and groups; :class:`InfeasibleLayoutError` naming the first reason it cannot run."""
    tp, cp, pp, vpp, ep = layout.tp, layout.cp, layout.pp, layout.vpp, layout.ep
    if gpus < 1:
        raise InfeasibleLayoutError(f"gpus must be >= 1, got {gpus}", "divides")
    model_par = tp * cp * pp
    if gpus % model_par:
        raise InfeasibleLayoutError(
            f"TP x CP x PP = {tp} x {cp} x {pp} = {model_par} does not divide {gpus} GPUs", "divides"
        )
    dp = gpus // model_par
    if layout.dp is not None and layout.dp != dp:
        raise InfeasibleLayoutError(f"dp {layout.dp} x TP {tp} x CP {cp} x PP {pp} != {gpus} GPUs", "divides")
    w = workload
    if w.heads % tp:
        raise InfeasibleLayoutError(f"TP {tp} does not divide {w.heads} attention heads", "divides")
    if w.kv_heads_n % tp and tp % w.kv_heads_n:
        raise InfeasibleLayoutError(f"TP {tp} and {w.kv_heads_n} KV heads: neither divides the other", "divides")
    segments = w.hybrid.segments if w.hybrid is not None else None
    stage_layers = _stage_split(layout, w.layers) if segments is None else _segment_split(layout, segments)
    if vpp > 1 and pp == 1:
        raise InfeasibleLayoutError("interleaved schedule (vpp > 1) needs pp > 1", "divides")
    chunk = -(-max(stage_layers) // vpp)  # layers of the fullest model chunk
    if layout.recompute_layers is not None and layout.recompute_layers > chunk:
        raise InfeasibleLayoutError(
            f"recompute_layers {layout.recompute_layers} counts layers per model chunk, and the fullest chunk has "
            f"{chunk} ({max(stage_layers)} layers on a stage{f' over VPP {vpp}' if vpp > 1 else ''})",
            "divides",
        )
    if w.seq_len % (2 * cp if cp > 1 else 1):
        raise InfeasibleLayoutError(
            f"CP {cp}: sequence length {w.seq_len} does not split into {2 * cp} chunks (load-balanced causal split)",
            "divides",
        )
    if w.global_batch % (dp * w.micro_batch):
        raise InfeasibleLayoutError(
            f"global batch {w.global_batch} does not split into DP {dp} x micro-batch {w.micro_batch}", "divides"
        )
    micro_batches = w.global_batch // (dp * w.micro_batch)
    if vpp > 1 and micro_batches % pp:
        raise InfeasibleLayoutError(
            f"interleaved schedule: {micro_batches} micro-batches are not a multiple of PP {pp}", "divides"
        )
    run = layout.pp_schedule_micro_batches
    if run is not None and (micro_batches % run or (vpp > 1 and run % pp)):
        raise InfeasibleLayoutError(
            f"pipeline schedule runs of {run} micro-batches do not split {micro_batches} (interleaved: a multiple "
            f"of PP {pp})",
            "divides",
        )
    _check_token_drop(layout, w)
    _check_graph_scope(layout, w)
    _check_ep_overlap(layout, w, pp, vpp)
    _check_fp8_attention(layout, w)
    if layout.bf16_layers_start + layout.bf16_layers_end > w.layers:
        raise InfeasibleLayoutError(
            f"bf16_layers_start {layout.bf16_layers_start} + bf16_layers_end {layout.bf16_layers_end} exceed the "
            f"model's {w.layers} layers",
            "divides",
        )
    if w.moe is None:
        if ep > 1:
            raise InfeasibleLayoutError(f"EP {ep} on a dense model (no experts)", "divides")
    else:
        if w.moe.experts % ep:
            raise InfeasibleLayoutError(f"EP {ep} does not divide {w.moe.experts} experts", "divides")
        etp = layout.etp or tp
        if tp % etp:
            raise InfeasibleLayoutError(f"expert TP {etp} does not divide TP {tp}", "divides")
        if etp == tp and (dp * cp) % ep:
            raise InfeasibleLayoutError(f"EP {ep} does not divide DP x CP = {dp * cp}", "divides")
        if (tp * dp * cp) % (ep * etp):
            raise InfeasibleLayoutError(
                f"EP {ep} x expert TP {etp} does not divide TP x DP x CP = {tp * dp * cp}", "divides"
            )
    if gpus > per_node and gpus % per_node:
        raise InfeasibleLayoutError(f"{gpus} GPUs do not fill whole nodes of {per_node}", "topology")
    sizes = {"tp": tp, "cp": cp, "dp": dp, "pp": pp}
    strides, stride = {}, 1
    for dim in layout.order:
        strides[dim] = stride
        stride *= sizes[dim]
    groups = {dim: _group(sizes[dim], strides[dim], per_node) for dim in _DIMS}
    if layout.order.index("cp") + 1 == layout.order.index("dp"):  # CP and DP adjacent: one gradient group
        groups["dp"] = _group(dp * cp, strides["cp"], per_node)
    else:
        groups["dp"] = _group(dp, strides["dp"], per_node)  # CP's share folded in as more bytes, see step
    ep_stride = strides["cp"] if layout.order.index("cp") + 1 == layout.order.index("dp") else strides["dp"]
    etp = layout.etp or tp
    edp = tp * dp * cp // (ep * etp) if w.moe is not None else dp * cp
    if etp < tp:  # MoE parallel folding: EP spans the TP ranks past the expert TP, then DP
        ep_stride = etp
    groups["ep"] = _group(ep, ep_stride, per_node)
    groups["edp"] = _group(edp, ep_stride * ep, per_node)
    groups["etp"] = _group(etp, 1, per_node)  # expert TP: the innermost TP ranks (all of TP unless folded)
    placement = {dim: (sizes[dim], strides[dim]) for dim in _DIMS}
    if layout.order.index("cp") + 1 == layout.order.index("dp"):
        placement["dp"] = (dp * cp, strides["cp"])
    placement["ep"] = (ep, ep_stride)
    placement["edp"] = (edp, ep_stride * ep)
    return Resolved(gpus, tp, cp, pp, vpp, dp, ep, micro_batches, stage_layers, groups, placement, etp)


def _check_graph_scope(layout: ParallelLayout, w: Workload) -> None:
    """Scopes Megatron-Core cannot capture for this model (transformer_config.py at 0d8e0714): MoE scopes on a dense
    model, the whole MoE layer without drop-and-pad experts (and commlens models dropless experts only), a
    whole-step graph around dropless experts' dynamic shapes. A whole-step graph of an MoE model is captured where
    nothing in the layer reads the token counts on the host: HybridEP with a static rank budget
    (moe_expert_capacity: token_dispatcher.py _HybridEPManager.setup_metadata at cd4afffa sizes the buffers from
    it) feeding TE's fused grouped MLP, which takes the per-expert counts as a device tensor (experts.py
    TEGroupedMLP._fused_forward; TE 4329ff84 ops/fused/grouped_mlp.py), as the 26.08 Megatron-Bridge recipes run
    (perf_recipes/*/common.py full-iteration helpers at v0.6.0)."""
    scope = layout.cuda_graph_scope or ()
    moe_scopes = [s for s in scope if s.startswith("moe")]
    if w.moe is None and moe_scopes:
        raise InfeasibleLayoutError(f"cuda_graph_scope {', '.join(moe_scopes)} on a dense model")
    if "mamba" in scope and w.hybrid is None:
        raise InfeasibleLayoutError("cuda_graph_scope mamba on a model without Mamba layers")
    static = "full_iteration" in scope and layout.moe_expert_capacity is not None
    if w.moe is not None and layout.moe_pad_to_capacity:  # drop-and-pad: static shapes [27 s10 tokdrop]
        static = True
    if w.moe is not None and not static and ("moe" in scope or "full_iteration" in scope):
        raise InfeasibleLayoutError(
            "cuda_graph_scope moe / full_iteration capture the experts, which needs static token counts: "
            "drop-and-pad MoE (moe_pad_to_capacity) or HybridEP's rank budget (moe_expert_capacity) with TE's fused "
            "grouped MLP; these experts are dropless"
        )
    if layout.moe_fused_mlp and (w.moe is None or w.precision != "fp8" or layout.fp8_recipe != "mxfp8"):
        raise InfeasibleLayoutError(
            "moe_fused_mlp: Transformer Engine fuses the grouped MLP only for an MoE model in fp8 with the mxfp8 "
            "recipe (TE 4329ff84 ops/fused/grouped_mlp.py fuse_grouped_mlp_ops; its NVFP4 path is not modelled); "
            "otherwise the op fuser runs its unfused ops, which commlens does not model"
        )


def _check_token_drop(layout: ParallelLayout, w: Workload) -> None:
    """Where Megatron-Core's token drop cannot be stated [27 s10 tokdrop]: a dense model, a stack other than
    Megatron-Core (its capacity factor is Megatron-Core's router and dispatcher: core_v0.14.0 router.py
    apply_router_token_dropping, token_dispatcher.py drop_and_pad), or a workload whose moe.capacity_factor already
    states the experts' capacity (one of the two, not both)."""
    if layout.moe_capacity_factor is None:
        return
    from commlens.project.frameworks import framework

    if w.moe is None:
        raise InfeasibleLayoutError("moe_capacity_factor on a dense model")
    if not framework(layout.framework).moe_local_sort:
        raise InfeasibleLayoutError(
            f"moe_capacity_factor: Megatron-Core's token drop; {layout.framework} does not run Megatron-Core's MoE "
            "layer"
        )
    if w.moe.capacity_factor is not None:
        raise InfeasibleLayoutError(
            f"moe_capacity_factor {layout.moe_capacity_factor} and the workload's moe.capacity_factor "
            f"{w.moe.capacity_factor} both state the experts' capacity; state one"
        )


def _check_ep_overlap(layout: ParallelLayout, w: Workload, pp: int, vpp: int) -> None:
    """What Megatron-Core asserts before it runs the EP all-to-all overlap (transformer_config.py
    ``__post_init__`` at 0d8e0714, 44151194 and cd4afffa): EP > 1, the alltoall or flex dispatcher, no full
    recomputation, VPP where PP > 1."""
    if not layout.moe_a2a_overlap:
        if layout.delay_wgrad_compute:
            raise InfeasibleLayoutError("delay_wgrad_compute needs moe_a2a_overlap")
        return
    if w.moe is None or layout.ep < 2:
        raise InfeasibleLayoutError("moe_a2a_overlap needs expert parallelism (EP > 1)")
    if layout.moe_dispatcher == "distmoe":
        raise InfeasibleLayoutError("moe_a2a_overlap needs the alltoall or flex dispatcher, not distmoe")
    if layout.recompute == "full" or "moe" in layout.recompute_modules:
        raise InfeasibleLayoutError("moe_a2a_overlap runs without full recomputation or recompute of the moe module")
    if pp > 1 and vpp < 2:
        raise InfeasibleLayoutError("moe_a2a_overlap with PP > 1 needs the interleaved schedule (vpp > 1)")


def _check_fp8_attention(layout: ParallelLayout, w: Workload) -> None:
    """Where Transformer Engine has no backend for fp8 attention in training (TE 4329ff84
    dot_product_attention/utils.py get_attention_backend): it needs fp8 autocast with fp8_dpa (Megatron-Core's
    fp8_dot_product_attention), FlashAttention 2/3/4 and the unfused path are disabled for it, so only cuDNN's
    fused attention runs it; the stacks without TE's attention (torchtitan, automodel, deepspeed as modelled)
    have none. The GPU's part (mxfp8 and current scaling on sm100 only) is checked with the device
    (kernels.fp8_attention_rates)."""
    if layout.fp8_attention is None:
        return
    if w.precision != "fp8":
        raise InfeasibleLayoutError("fp8_attention needs precision fp8 (TE's fp8_dpa runs inside fp8 autocast)")
    from commlens.project.frameworks import framework

    # Megatron-Core, NeMo on it, and their release profiles (release_of megatron-core: the containers' stacks)
    if layout.framework not in ("megatron-core", "nemo") and framework(layout.framework).release_of != "megatron-core":
        raise InfeasibleLayoutError(
            f"fp8_attention: {layout.framework} has no fp8 attention (Transformer Engine's fp8_dpa is reached "
            "through Megatron-Core's fp8_dot_product_attention)"
        )
    if not layout.flash_attention or layout.attention_kernel not in (None, "cudnn"):
        raise InfeasibleLayoutError(
            "fp8_attention runs on cuDNN's fused attention only: Transformer Engine disables FlashAttention 2/3/4 "
            "and the unfused path for fp8 training (TE 4329ff84 get_attention_backend)"
        )


def _segment_split(layout: ParallelLayout, segments: tuple[str, ...]) -> tuple[int, ...]:
    """Layers of each pipeline stage of a hybrid whose pattern '|' cuts into segments (Megatron-Core
    hybrid_layer_allocation.py ``select_pipeline_segment`` at d98e8a64): PP x VPP segments, rank r holding segments
    v x PP + r; the pattern is the split, so first/last or explicit stage layers and the embedding or loss in the
    split are refused, as Megatron-Core refuses them [27 s29 hybridpipe]."""
    pp, vpp = layout.pp, layout.vpp
    if len(segments) != pp * vpp:
        raise InfeasibleLayoutError(
            f"the hybrid pattern's '|' cuts it into {len(segments)} pipeline segments; PP {pp} x VPP {vpp} needs "
            f"{pp * vpp}",
            "divides",
        )
    given = [
        name
        for name, value in (
            ("stage_layers", layout.stage_layers),
            ("first_stage_layers", layout.first_stage_layers),
            ("last_stage_layers", layout.last_stage_layers),
        )
        if value is not None
    ]
    given += [name for name in ("embedding_in_split", "loss_in_split") if getattr(layout, name)]
    if given:
        raise InfeasibleLayoutError(
            f"{', '.join(given)}: the hybrid pattern's '|' separators already split the layers into stages", "divides"
        )
    split = tuple(sum(len(segments[v * pp + rank]) for v in range(vpp)) for rank in range(pp))
    if max(split) == 0:
        raise InfeasibleLayoutError("the hybrid pattern's segments are all empty", "divides")
    return split


def _stage_split(layout: ParallelLayout, layers: int) -> tuple[int, ...]:
    """Transformer layers of each pipeline stage: explicit, first/last given with the rest even, or even."""
    pp, vpp = layout.pp, layout.vpp
    first, last = layout.first_stage_layers, layout.last_stage_layers
    if layout.stage_layers is not None:
        split = tuple(layout.stage_layers)
        if first is not None or last is not None:
            raise InfeasibleLayoutError("give stage_layers or first/last_stage_layers, not both", "divides")
        if len(split) != pp:
            raise InfeasibleLayoutError(f"stage_layers names {len(split)} stages, PP is {pp}", "divides")
        if any(n < 0 for n in split) or sum(split) != layers:
            raise InfeasibleLayoutError(f"stage_layers {list(split)} do not add up to {layers} layers", "divides")
        if max(split) == 0:
            raise InfeasibleLayoutError("stage_layers: every stage is empty", "divides")
        return split
    slots = layout.embedding_in_split + layout.loss_in_split
    if slots and (first is not None or last is not None):
        raise InfeasibleLayoutError("give first/last_stage_layers or embedding/loss_in_split, not both", "divides")
    if slots:
        if (layers + slots) % (pp * vpp):
            raise InfeasibleLayoutError(
                f"PP {pp} x VPP {vpp} = {pp * vpp} does not divide {layers} layers + {slots} "
                f"(embedding/loss in the split)",
                "divides",
            )
        each = (layers + slots) // pp
        stages = [each] * pp
        stages[0] -= layout.embedding_in_split
        stages[-1] -= layout.loss_in_split
        return tuple(stages)
    if first is None and last is None:
        if layers % (pp * vpp):
            raise InfeasibleLayoutError(f"PP {pp} x VPP {vpp} = {pp * vpp} does not divide {layers} layers", "divides")
        return (layers // pp,) * pp
    if pp < 2 or (first is not None and last is not None and pp < 3):
        raise InfeasibleLayoutError(
            f"first/last stage layers need PP >= {2 if first is None or last is None else 3}, got {pp}", "divides"
        )
    ends = (first or 0) + (last or 0)
    middle = pp - (first is not None) - (last is not None)
    rest = layers - ends
    if rest < 0 or (middle and rest % middle) or (not middle and rest):
        raise InfeasibleLayoutError(
            f"{layers} layers less {ends} on the first/last stages do not split evenly over {middle} stages",
            "divides",
        )
    if vpp > 1 and middle and (rest // middle) % vpp:
        raise InfeasibleLayoutError(
            f"VPP {vpp} does not divide the {rest // middle} layers of each middle stage", "divides"
        )
    each = rest // middle if middle else 0
    stages = [each] * pp
    if first is not None:
        stages[0] = first
    if last is not None:
        stages[-1] = last
    return tuple(stages)
