"""Framework profiles: what a training stack does, so one layout can be projected as each stack runs it.

A profile (``frameworks.yaml`` beside this module, each fact with its source) says which attention kernel the
stack calls on each GPU generation, which memory-bound ops it fuses, whether it compiles, its host cost per kernel,
what overlaps with what (DP gradient reduction, ZeRO-3/FSDP parameter prefetch, TP, CP, EP, the optimizer), the
pipeline schedules and recomputation granularities it offers, and whether its MoE dispatcher syncs with the host.
``ParallelLayout.framework`` names the profile (``megatron-core`` by default); :func:`framework` returns it.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from commlens.project.errors import ProjectionError
from commlens.specdata import load_yaml

if TYPE_CHECKING:
    from commlens.project.layout import ParallelLayout

__all__ = [
    "fp8_attention_recipe",
    "FRAMEWORKS_FORMAT",
    "Framework",
    "Fused",
    "Overlap",
    "framework",
    "framework_names",
    "generation",
]

FRAMEWORKS_FORMAT = "commlens.frameworks/1"
Generation = Literal["volta", "ampere", "hopper", "blackwell", "cdna3"]
AttentionKernel = Literal["fa1", "fa2", "fa3", "cudnn", "cudnn_9.13", "cudnn_9.4", "cudnn_9.19", "ck", "unfused"]
Schedule = Literal["1f1b", "interleaved", "zero-bubble", "dualpipe", "gpipe"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Fused(_Strict):
    """Memory-bound ops the stack runs as one fused kernel when eager (compile fuses them all)."""

    norm: bool = Field(description="RMSNorm/LayerNorm as one kernel (else ~5 eager ops over the tensor)")
    rotary: bool = Field(description="rotary embedding of Q and K as one kernel")
    rotary_yarn: bool | None = Field(
        default=None, description="the YaRN variant of the rotary embedding as one kernel; None: as rotary"
    )
    activation: bool = Field(description="SwiGLU/GeLU as one kernel")
    expert_activation: bool | None = Field(
        default=None,
        description="the MoE experts' SwiGLU (with the routing weights) as one kernel; None: as activation",
    )
    bias_dropout_add: bool = Field(description="residual add (with dropout) as one kernel")
    cross_entropy: bool = Field(description="vocabulary-parallel cross-entropy fused")

    def of(self, op: str) -> bool:
        """Whether ``op`` (a field name) runs as one kernel."""
        value: bool | None = getattr(self, op)
        if value is None:
            return self.rotary if op == "rotary_yarn" else self.activation
        return value


class Overlap(_Strict):
    """What the stack runs beside what."""

    grad_reduce: Literal["bucketed", "per_layer", "none"] = Field(description="DP gradient reduction in backward")
    param_prefetch_layers: int = Field(ge=0, le=8, description="ZeRO-3/FSDP all-gathers issued this many layers ahead")
    reshard_after_forward: bool = Field(description="default of freeing gathered parameters after forward")
    tp: Literal["userbuffers", "async_tp", "none"] = Field(description="TP communication overlap the stack offers")
    cp: Literal["ring", "allgather", "none"] = Field(
        description="CP K/V exchange: ring (one chunk a step, each beside that step's attention), allgather (all "
        "chunks in one all-gather beside the first step's attention, waited for before the second), none (exposed)"
    )
    ep: Literal["exposed", "overlapped", "combined_1f1b"] = Field(
        description="EP all-to-all on the critical path, hidden, or hidden where the layout sets moe_a2a_overlap "
        "(combined_1f1b: Megatron-Core's overlap_moe_expert_parallel_comm)"
    )
    optimizer: Literal["after_step", "overlapped"] = Field(description="optimizer step after the backward or beside")
    param_gather: Literal["next_forward", "after_step"] = Field(
        description="ZeRO-1/2's all-gather of updated parameters: beside the next step's first forward, or after the step"
    )
    bucket_elements: float = Field(
        ge=0, description="gradient elements per DP bucket (0: one bucket per layer, as FSDP reduces each block)"
    )
    bucket_elements_per_dp_rank: float = Field(
        default=0, ge=0, description="the bucket grows by this many elements per DP rank (Megatron: 1e6)"
    )

    def dp_bucket_elements(self, dp: int) -> float:
        """Elements per gradient bucket at DP size ``dp`` (0: per layer)."""
        return max(self.bucket_elements, self.bucket_elements_per_dp_rank * dp)


class Framework(_Strict):
    """One stack's profile."""

    name: str
    title: str
    release_of: str | None = Field(
        default=None,
        description="the stack this profile is one past release or run mode of (nemo-24.03: nemo; megatron-core-fsdp2: "
        "megatron-core): it prices those published runs, shares the stack's error-band family, and is no what-if for a "
        "new job",
    )
    source: str = Field(min_length=1)
    attention: dict[Generation, AttentionKernel]
    fused: Fused
    compile: bool
    compile_eager: tuple[str, ...] = Field(
        default=(),
        description="memory-bound ops (kernels.UNFUSED names) that torch.compile leaves to eager ATen kernels: the "
        "stack writes them in complex arithmetic, which Inductor does not generate code for",
    )
    cp_step_bytes: tuple[float, float, float, float] = Field(
        default=(0.0, 0.0, 0.0, 0.0),
        description="bytes the CP ring's own ops move per ring step beside the attention kernels: forward per "
        "attention-output element, forward per K/V element, backward per query element, backward per K/V element "
        "(0: not counted)",
    )
    cp_call_bytes: tuple[float, float, float, float] = Field(
        default=(0.0, 0.0, 0.0, 0.0),
        description="bytes the CP ring's own ops move once per attention call (outside its ring steps), in the same "
        "four places as cp_step_bytes; counted where the block runs eager (compile fuses them into the ring's "
        "other pointwise ops) (0: not counted)",
    )
    cp_kv_expanded: bool = Field(
        default=False,
        description="K and V reach the attention repeated to every query head (GQA expanded before it), so CP's ring "
        "ops and its exchange move them at query-head width",
    )
    cp_grad_bytes: float = Field(
        default=2.0,
        gt=0,
        description="bytes per element of the K/V gradients CP passes round its ring in the backward (2: in the "
        "activations' 16 bits; 4: accumulated and sent in fp32)",
    )
    unfused_mask_bytes: float = Field(
        default=0.0,
        ge=0,
        le=200.0,
        description="bytes through HBM per score entry (one sq x sk mask per layer and forward, not per head) that "
        "the stack's unfused attention spends building its causal mask in the forward: Transformer Engine "
        "bee4649c (2.2.0.dev0) UnfusedDotProductAttention calls dot_product_attention/utils.py get_full_mask every "
        "forward, whose int32 / int64 / bool tensor ops over sq x sk move 81 B an entry [27 s17 dsv3gb200]; 0: "
        "no such mask is built (Megatron's own unfused path applies its causal mask inside the fused softmax)",
    )
    qkv_separate: bool = Field(
        default=False,
        description="the model code projects Q, K and V with three linears (three GEMMs, K's and V's at the KV heads' "
        "width), where Megatron-Core's linear_qkv runs one",
    )
    gate_up_fused: bool = Field(
        default=False,
        description="a gated FFN's gate and up projections are ONE linear of twice the FFN width (one GEMM of N = 2 x "
        "ffn per pass: Megatron-Core's linear_fc1), where false runs two GEMMs of N = ffn (torchtitan's w1 and w3); "
        "the dense MLP and the shared experts [27 s10 gateup]",
    )
    experts_gate_up_fused: bool | None = Field(
        default=None,
        description="the same for the routed experts' fc1, per expert (one [experts, dim, 2 x ffn] weight); None: as "
        "gate_up_fused [27 s10 gateup]",
    )
    sp_wgrad_gather: bool = Field(
        default=False,
        description="under sequence parallelism the column-parallel linears (QKV, FFN-in) save their input's shard, "
        "all-gather it again in the backward beside the data-gradient GEMM and reduce-scatter the input gradient "
        "beside the weight-gradient GEMM; otherwise the gathered input is kept and the backward's TP collectives "
        "mirror the forward's",
    )
    fp8_recipe: Literal["delayed", "current", "mxfp8", "nvfp4"] = Field(
        default="current",
        description="the fp8 scaling recipe of a layout that names none (ParallelLayout.fp8_recipe): per-tensor "
        "current scaling, the recipe of the NeMo / Megatron-Bridge performance configs (fp8_cs) and torchao's "
        "tensorwise float8",
    )
    nvfp4: bool = Field(
        default=True,
        description="the stack can run fp8_recipe nvfp4: Transformer Engine 2.7 or newer (Megatron-Core's "
        "get_fp4_recipe requires it) [27 s25 nvfp4]",
    )
    nvfp4_rht_cast_fused: bool = Field(
        default=True,
        description="fp8_recipe nvfp4: Transformer Engine casts a GEMM input or output gradient row-wise and, "
        "Hadamard-transformed, column-wise in one kernel (TransformerEngine PR #2555, v2.14 on: one 16-bit read), "
        "after the pass that takes both amaxes; false: in two kernels (v2.8 to v2.13: two reads) [27 s25 nvfp4]",
    )
    muon: bool = Field(
        default=False,
        description="the stack offers the Muon optimizer (layout optimizer muon) [27 s26 muon]",
    )
    fused_mlp_dglu_dbias_slowdown: float = Field(
        default=1.0,
        ge=1.0,
        description="the fused grouped MLP's backward kernel of fc2's data gradient with the GLU's backward and fc1's "
        "bias gradient (cuDNN's grouped_gemm_dglu with dbias, experts with biases) runs this many times its GEMM's "
        "time: 1 but where the release's cudnn-frontend has a measured regression of it [27 s26 dglu]",
    )
    nvfp4_scale_swizzles: int = Field(
        default=2,
        ge=0,
        le=4,
        description="fp8_recipe nvfp4: the kernels that move a Hadamard cast's block scales into the layout cuBLASLt "
        "reads, after each such cast (two until TransformerEngine PR #3011, first in v2.17; 0 after it) "
        "[27 s25 nvfp4]",
    )
    host_s_per_kernel: float = Field(gt=0, le=1e-3)
    module_host_s: float = Field(
        default=0.0,
        ge=0,
        le=1e-3,
        description="host time of one linear module's forward beyond its kernels' launches (Transformer Engine's "
        "te.Linear / GroupedLinear: quantizers, workspaces and autograd bookkeeping in Python)",
    )
    module_bwd_ratio: float = Field(
        default=2.0,
        ge=0,
        le=20.0,
        description="a linear module's own host time in the backward over module_host_s (its backward GEMM launches "
        "are counted apart); 2: as the backward's launches, where no measurement says otherwise "
        "[27 s11 hostbwd]",
    )
    fp8_weight_cast_per_forward: bool = Field(
        default=False,
        description="under fp8 each dense layer's linear weights are cast (and, on Hopper, transposed) to fp8 on every "
        "forward call, each micro-batch and each recompute: the model calls Transformer Engine's te.Linear without "
        "is_first_microbatch, so TE does not keep the fp8 copy across micro-batches; otherwise the weight casts run "
        "once a step and are not charged [27 s14 fp8foundry]",
    )
    fp8_weight_bwd_copy: bool = Field(
        default=False,
        description="torchao's Float8Linear: the data-gradient GEMM takes the fp8 weight column-major, so each "
        "backward copies every gathered fp8 weight into that layout (float8_ops.py preprocess_addmm "
        "b_data.t().contiguous().t(); 1 B read and 1 B written per weight element, each micro-batch). Charged where "
        "FSDP gathers the weights in fp8 (fsdp_fp8_all_gather): the weight enters the linear already cast, so no "
        "cast kernel can absorb the copy [27 s15 olmo13b]",
    )
    fp8_bwd_casts_grad_only: bool = Field(
        default=False,
        description="an fp8 linear's backward casts only its output gradient (Transformer Engine: the forward's "
        "cast keeps the input's column-wise copy for the weight gradient and the weight's is cached), so it "
        "launches its two GEMMs and one input's casts; otherwise twice the forward's launches [27 s11 hostbwd]",
    )
    overlap: Overlap
    parallel: tuple[Literal["tp", "cp", "pp", "ep"], ...] = Field(
        default=("tp", "cp", "pp", "ep"),
        description="the model-parallel dimensions the stack implements beside data parallelism (tensor, context "
        "as a K/V ring or all-gather, pipeline, expert); a layout using another one is refused, and the what-if "
        "does not offer the stack for it",
    )
    schedules: tuple[Schedule, ...] = Field(min_length=1)
    pp_p2p: Literal["batched", "serial"] = Field(
        default="batched",
        description="how a pipeline stage exchanges activations and gradients: batched (one batched send/receive "
        "each way per pass) or serial (each tensor its own blocking call, partitioned over TP and rebuilt: "
        "DeepSpeed's pipeline engine)",
    )
    recompute: tuple[Literal["full", "selective"], ...]
    selective_default: tuple[str, ...] = Field(
        min_length=1, description="what selective recomputation redoes when the layout names no modules"
    )
    allocator_fragmentation: float = Field(
        default=1.03, ge=1.0, le=1.5, description="reserved / allocated of the caching allocator as the stack runs it"
    )
    moe_dispatch_sync: bool
    moe_sync_after_permute: bool = Field(
        default=False,
        description="the all-to-all dispatcher's host waits for the token counts only after issuing the first "
        "permutation (copied on a side stream), so the GPU still holds that permutation when the host resumes; "
        "otherwise the wait drains the stream (Megatron-Core's 'before_ep_alltoall' sync point)",
    )
    moe_local_sort: bool = Field(
        default=False,
        description="the NCCL all-to-all dispatcher sorts the tokens it receives by local expert, and back before "
        "the return all-to-all: one more read and write of every routed token each way where a GPU holds more than "
        "one expert (Megatron-Core's 'permutation 2')",
    )
    expert_bias_loop: tuple[Literal["fc1", "fc2"], ...] = Field(
        default=(),
        description="expert linears (of a workload with moe.expert_bias) whose bias the stack adds in a Python loop "
        "over the local experts (split, add, cat) instead of the grouped GEMM's epilogue",
    )
    clamped_glu: Literal["fused", "eager", "eager_sync"] = Field(
        default="fused",
        description="how the stack runs the clamp of a workload with moe.glu_clamp: fused into the activation "
        "kernel; eager (two clamp kernels, fused under compile); eager_sync (two clamps and a cat before the fused "
        "kernel, and a scalar tensor built on the GPU each call: a blocking host-to-device copy)",
    )
    zero3_live_params: float = Field(
        default=0,
        ge=0,
        description="ZeRO-3 gathers submodule by submodule with at most this many parameters live (0: a layer at "
        "a time, as FSDP's per-block units)",
    )
    fsdp_copy_out: bool = Field(
        default=False,
        description="FSDP2: each all-gather's output is copied into the parameters on the compute stream (a 16-bit "
        "read and write of every gathered parameter per unshard)",
    )
    cuda: str | None = Field(
        default=None,
        description="the CUDA toolkit of the stack's published runs where it is older than the device's measured "
        "GEMM plateau's: bf16 GEMMs run at the device's gemm_efficiency_by_cuda for it, fp8 GEMMs at its "
        "fp8_gemm_efficiency_by_cuda where it has one (None: the device's plateaus)",
    )
    optimizer_impl: Literal["fused", "foreach"] = Field(
        default="fused",
        description="the Adam step's kernels: fused (one pass over param, grad and both moments) or torch's foreach "
        "(eight passes, an fp32 temporary for the denominator)",
    )
    # Under fp8 the output projection stays in 16 bits in the stacks profiled: Megatron-Core builds it as
    # tensor_parallel.ColumnParallelLinear (megatron/core/models/gpt/gpt_model.py), not a Transformer Engine module,
    # so TE's fp8_autocast does not reach it; torchtitan's float8 conversion filters it out (see frameworks.yaml).
    fp8_output_layer: bool = Field(
        default=False,
        description="under fp8 training the output layer's (logits) GEMMs run in fp8 like the blocks' linears; "
        "false (every profiled stack): the output projection stays in 16 bits",
    )
    clip_always_scales: bool = Field(
        default=False,
        description="gradient clipping multiplies every gradient by the clamped coefficient even when it is 1 (torch's "
        "clip_grads_with_norm_, to avoid a host sync): a read and write of the fp32 gradients per step",
    )
    zero_grad_buffer: bool = Field(
        default=False,
        description="each step begins by zeroing the whole contiguous gradient buffer of the local parameters "
        "(Megatron-Core DDP zero_grad_buffer -> _ParamAndGradBuffer.reset: grad_data.zero_(), in the gradient "
        "reduce dtype): a write of every local gradient per step; false where gradients are set to None instead "
        "(torch's optimizer.zero_grad default, FSDP2, DeepSpeed)",
    )
    fp8_bucket_merge: bool = Field(
        default=False,
        description="ZeRO-1/2 with fp8 parameters (layout fp8_param_gather): every non-fp8 gradient bucket (norms, "
        "embedding, output layer, biases) joins the bucket group of the model's first layers, which is ready only "
        "when the backward ends and is the first all-gathered before the next forward (Megatron-Core 0.9+ "
        "partition_buckets, case 3): that group's reduce-scatter and all-gather are exposed whole",
    )
    dp_later_stages_one_bucket: bool = Field(
        default=False,
        description="ZeRO-0/1/2 under PP: pipeline stages after the first, and model chunks after the first under VPP, "
        "keep each gradient buffer in one bucket and one bucket group (Megatron-Core DDP: bucket_size None where the "
        "pipeline rank is > 0 or disable_bucketing): that stage's reduce-scatter is issued when its last backward "
        "ends and its all-gather waits in its first forward",
    )
    fsdp_copy_in: bool = Field(
        default=False,
        description="FSDP2: each reduce-scatter's input is copied from the gradients into one buffer in the reduce "
        "dtype before the compute stream may free them (a 16-bit read and a reduce-dtype write per gradient element)",
    )
    activation_offload_blocking: bool = Field(
        default=False,
        description="activation offload (layout offload_activation_layers) copies each offloaded layer's input to "
        "host memory in its forward and back in its backward with blocking copies on the compute stream, nothing "
        "hidden (DeepSpeed's CPU checkpointing); False: the copies hide under compute (Megatron's --cpu-offloading)",
    )
    zero3_persistence_threshold: float = Field(
        default=0,
        ge=0,
        description="ZeRO-3: parameters under this many elements stay gathered between steps and are all-gathered "
        "again after every optimizer step, one blocking collective each (DeepSpeed's persistent parameters); 0: none",
    )
    zero3_gather_copy_out: bool = Field(
        default=False,
        description="ZeRO-3: a submodule with more than one gathered (non-persistent) parameter is all-gathered into "
        "one flat buffer and each parameter then copied out of it on the gather stream before the compute may use "
        "it (DeepSpeed's AllGatherCoalescedHandle.wait); a submodule with one gathered parameter is gathered in place",
    )
    zero3_grad_predivide: bool = Field(
        default=False,
        description="ZeRO-3: each reduce-scatter's flattened gradients are divided by the DP size in place before "
        "the collective (a read and a write of every gradient element in the reduce dtype), on the reduce stream",
    )
    zero3_grad_prescale_bf16: bool = Field(
        default=False,
        description="ZeRO-3 (Megatron FSDP, average_in_collective off): each bf16 gradient bucket is multiplied by "
        "1/DP in place before its reduce-scatter (fp32 buckets fold the scale into NCCL's premul-sum): a read and a "
        "write of every gradient element in bf16 per reduction, on the reduce stream",
    )
    zero3_grad_prescale_shard: bool = Field(
        default=False,
        description="that bf16 pre-scale multiplies the rank's shard of the sharded gradient buffer (1/DP of the "
        "elements) instead of the unsharded bucket about to be reduce-scattered (Megatron-LM 0d8e0714 / 92c8482e, "
        "Megatron-Bridge 25.11's: gradient_reduce_preprocessing(gbuf.data, ...))",
    )
    zero3_reduce_every_microbatch: bool = Field(
        default=False,
        description="ZeRO-3/FSDP: every micro-batch's backward reduce-scatters its gradients (accumulated into the "
        "sharded gradients), also under gradient accumulation; false: only the last micro-batch's backward does, "
        "unless grad_reduce is per_layer (FSDP2, which always does)",
    )
    zero3_recompute_keeps_gather: bool = Field(
        default=False,
        description="ZeRO-3/FSDP with full recomputation: the recomputed forward gathers each layer's parameters "
        "and its backward keeps them (one gather per layer in the backward); false: the recomputed forward gathers "
        "as a pass of its own and the backward gathers again where parameters are resharded",
    )
    fsdp_pp_unsharded_grads: bool = Field(
        default=False,
        description="with PP, FSDP skips the reduce-scatter until the last micro-batch and accumulates the stage's "
        "gradients unsharded, in the reduce dtype (fsdp_dense_accum_bytes)",
    )
    fsdp_dense_accum_bytes: float | None = Field(
        default=None,
        ge=2,
        le=4,
        description="bytes per dense parameter of that unsharded accumulation; None: the layout's grad_reduce_bytes "
        "(torch FSDP2 _fsdp_param.py to_accumulated_grad_if_needed accumulates in the mixed-precision reduce dtype, "
        "in autograd's bf16 where that is the parameters' own); a number where the layout's figure is the experts'",
    )
    fsdp_expert_grad_bytes: float = Field(
        default=4.0,
        ge=0,
        le=4,
        description="bytes per routed-expert parameter of that unsharded accumulation: 4 where the experts' FSDP "
        "units reduce in fp32 as the rest; 2 where they run without a mixed-precision policy (bf16 gradients)",
    )
    tp_fp8_all_gather: bool = Field(
        default=False,
        description="under fp8 with per-tensor current scaling, TP's all-gathers (the linears' inputs forward, the "
        "row-parallel outputs' gradients backward) move fp8, cast before the collective; false: 16 bits",
    )
    te_tp_fp8_gather: bool = Field(
        default=False,
        description="with tp_fp8_all_gather, Transformer Engine's fp8 all-gather: every cast before a TP all-gather "
        "first all-reduces its amax over the TP group, a 4-byte collective the quantize waits for "
        "(kernels.fp8_tp_amax_reductions), and on GPUs whose fp8 GEMMs take only the TN layout the weight gradient "
        "transposes the gathered fp8 tensor (kernels.fp8_gather_transposes) [27 s10 fp8cs]",
    )
    nccl_nvls: bool = Field(
        default=True,
        description="NCCL may run NVLink SHARP (NVLS) collectives where the scale-up switch reduces; false: the "
        "release's launch scripts set NCCL_NVLS_ENABLE=0 for every run, so NCCL's tuner picks among ring and tree "
        "only (a layout's nccl_nvls overrides it per run) [27 s16 nvls]",
    )
    te_autocast_amax_reduction: bool = Field(
        default=False,
        description="under fp8 delayed scaling, Transformer Engine (1.6 and later) all-reduces the amaxes of every fp8 "
        "module on the GPU when the outermost fp8_autocast exits and again at the end of the backward of the "
        "autocast's first fp8 module, synchronously on the compute stream, over the autocast's fp8_group; "
        "Megatron-Core wraps each model chunk's block in one autocast with its amax reduction group (TP x DP x CP): "
        "two small all-reduces per model chunk and micro-batch on the critical path [27 s16 fp8twins]",
    )
    tp_seq_dim_copies: bool = Field(
        default=False,
        description="sequence parallelism through DTensor on [batch, seq, hidden] activations: torch's functional "
        "all-gather / reduce-scatter on dim 1 copies the whole gathered or unreduced tensor (chunk + cat) around "
        "each collective, except where async TP fuses it (kernels.seq_dim_copies) [27 s14 tt8btp]",
    )
    torchao_float8_tp: bool = Field(
        default=False,
        description="with tp_fp8_all_gather, torchao's float8 TP (tensorwise dynamic scaling on DTensors): every cast "
        "of a TP-sharded tensor all-reduces its amax (MAX) over the TP group before the scale is applied, a 4-byte "
        "collective the cast waits for (the two module inputs and the row-parallel linears' inputs, each linear's "
        "weight unless FSDP gathers it in fp8 with precomputed scales, forward; each linear's output gradient, "
        "backward: kernels.torchao_tp_amax_reductions), and the weight-gradient GEMMs copy the gathered fp8 tensors "
        "into the layout torch._scaled_mm takes (kernels.fp8_gather_transposes) [27 s14 tt70b]",
    )
    tp_saves_gathered_input: bool = Field(
        default=False,
        description="TP with sequence parallelism: the column-parallel linears keep the all-gathered (full-sequence) "
        "norm output for their weight gradient (DTensor TP: the input is redistributed to Replicate before the "
        "linear); false: they keep the sequence shard and gather it again in backward (Megatron-Core)",
    )
    fsdp_root_unsharded: bool = Field(
        default=False,
        description="FSDP2: the root module's own parameters (outside every per-layer unit: the embedding, final "
        "norm and output layer) stay gathered from the forward to the end of the backward, whatever "
        "reshard_after_forward says; false: gathered and freed with the layers' window",
    )
    pp_recv_buffers: bool = Field(
        default=False,
        description="1F1B/interleaved pipelining allocates every micro-batch's activation and gradient receive "
        "buffers once and keeps them, and each stage input's gradient stays in its buffer until the next step "
        "(torch.distributed.pipelining); false: received and freed per micro-batch (Megatron-Core)",
    )
    pp_retained_outputs: Literal["none", "last", "all"] = Field(
        default="none",
        description="stage outputs the pipeline keeps until the next step: every stage's (torch 2.6-2.7), the last "
        "stage's (its logits; torch 2.8+, where the other stages' are kept only until their backward), or none",
    )
    fsdp_ignores_ep_sharded_experts: bool = Field(
        default=False,
        description="experts that EP (and PP) already shard fully (one copy per expert-data group) are left out of "
        "FSDP: no unsharded copy of their gradients, the one counted is theirs",
    )

    def fsdp_accum_bytes(self, grad_reduce_bytes: float) -> float:
        """Bytes per dense parameter of FSDP's unsharded gradient accumulation (``fsdp_dense_accum_bytes``)."""
        return self.fsdp_dense_accum_bytes or (4.0 if grad_reduce_bytes >= 4 else 2.0)

    def experts_fused_fc1(self) -> bool:
        """Whether the routed experts' gate and up projections are one GEMM per expert (experts_gate_up_fused)."""
        return self.gate_up_fused if self.experts_gate_up_fused is None else self.experts_gate_up_fused

    def attention_kernel(self, gen: str) -> str:
        """The attention kernel family the stack calls on GPU generation ``gen``."""
        return self.attention.get(gen, "fa2")  # type: ignore[call-overload]


def fp8_attention_recipe(fw: Framework, layout: ParallelLayout) -> str:
    """The recipe fp8 attention runs: the linears' own, but per-tensor current scaling beside NVFP4 linears (TE has
    no NVFP4 attention: its recipe table in dot_product_attention.py, v2.8 and v2.16, runs FP8 attention beside NVFP4
    linears with a recipe of its own, NVTE_DPA_FP8_RECIPE="Float8CurrentScaling" or "DelayedScaling", both on cuDNN's
    per-tensor fp8 kernels) [27 s25 nvfp4]."""
    recipe = layout.fp8_recipe or fw.fp8_recipe
    return "current" if recipe == "nvfp4" else recipe


def generation(accelerator_name: str) -> str:
    """The GPU generation of an accelerator's name (``volta``, ``ampere``, ``hopper``, ``blackwell``, ``cdna3``)."""
    name = accelerator_name.upper()
    if "MI3" in name:
        return "cdna3"
    if "V100" in name:
        return "volta"
    if name.startswith(("B", "GB")):
        return "blackwell"
    if name.startswith(("H", "GH")):
        return "hopper"
    return "ampere"


@cache
def _profiles() -> dict[str, Framework]:
    text = (resources.files("commlens.project") / "frameworks.yaml").read_text(encoding="utf-8")
    data: Any = load_yaml(text, shipped=True)
    if not isinstance(data, dict) or data.get("format") != FRAMEWORKS_FORMAT:
        raise ProjectionError(f"frameworks.yaml: format must be {FRAMEWORKS_FORMAT!r}")
    raw = data.get("frameworks") or {}
    if not isinstance(raw, dict):
        raise ProjectionError("frameworks.yaml: frameworks must be a mapping of name to profile")
    out: dict[str, Framework] = {}
    for name, entry in raw.items():
        base = entry
        if "same_as" in entry:  # a stack built on another: its profile, with what the entry says otherwise
            base = dict(raw[entry["same_as"]])
            for key, value in entry.items():
                if key == "same_as":
                    continue
                base[key] = {**base[key], **value} if isinstance(value, dict) and key in base else value
        try:
            out[name] = Framework.model_validate({**base, "name": name})
        except ValidationError as e:
            raise ProjectionError(f"frameworks.yaml: {name}: {e.errors()[0]['loc']}: {e.errors()[0]['msg']}") from None
    return out


def framework_names() -> list[str]:
    return sorted(_profiles())


def framework(name: str) -> Framework:
    """The profile named ``name``; :class:`ProjectionError` naming the known ones otherwise."""
    try:
        return _profiles()[name]
    except KeyError:
        raise ProjectionError(f"unknown framework {name!r}; known: {', '.join(framework_names())}") from None


def loss_fused(fw: Framework, compile_blocks: bool | None, compile_loss: bool | None) -> bool:
    """Whether the cross-entropy runs as one fused kernel: the stack's own fused loss, or torch.compile of the loss
    (``compile_loss``; None: compiled when the blocks are, ``compile_blocks`` or the stack's default). torchtitan
    compiled the loss with its blocks from 2024-10-22 (e10cb94) to 2024-12-18 (e8977b0, "turning off compile on
    loss function": CUDA errors) and again from 2025-04-02 (bbb1b61, ``build_cross_entropy_loss``)."""
    if fw.fused.cross_entropy:
        return True
    if compile_loss is not None:
        return compile_loss
    return bool(fw.compile if compile_blocks is None else compile_blocks)
