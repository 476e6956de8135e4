"""torchtitan's Llama 3.1 405B on 512 H100s (its end-2024 Table 5) as torch's pipelining runs FSDP2: what the step
pays after the pipeline (issue 27)."""

from __future__ import annotations

from commlens.model.backends import nccl_predict
from commlens.project import ParallelLayout
from commlens.project.scenario import Scenario
from commlens.project.step import Projection, run
from commlens.topology import load_topology
from commlens.workload import load_workload

TOPO = load_topology("grand-teton-h100-96gb")


def _table5(vpp: int, framework: str = "torchtitan") -> Projection:
    """FSDP 8 x TP 8 x PP 8, local batch 32 in 8 micro-batches of 4, 126 layers as 15/16 x 6/15 per rank."""
    w = load_workload("llama3-405b", {"seq_len": 8192, "global_batch": 256, "micro_batch": 4, "precision": "fp8"})
    layout = ParallelLayout(
        tp=8,
        sp=True,
        pp=8,
        vpp=vpp,
        zero=3,
        reshard_after_forward=False,
        recompute="full",
        tp_comm_overlap=True,
        compile=True,
        compile_loss=False,
        schedule="interleaved" if vpp > 1 else "1f1b",
        stage_layers=(15, 16, 16, 16, 16, 16, 16, 15),
        optimizer_impl="foreach",
        framework=framework,
    )
    return run(Scenario(w, TOPO, layout, 512, check_memory=False))


def _stage_reduce_scatter_s() -> float:
    """The fp32 reduce-scatter of one 16-layer stage's gradients (per TP rank) over its 8 DP ranks, one per host."""
    w = load_workload("llama3-405b")
    layer = w.parameter_counts()["attention"] / w.layers + 2 * w.hidden + 3 * w.hidden * w.ffn_hidden
    nbytes = 16 * layer / 8 * 4
    return nccl_predict(TOPO, "reduce_scatter", int(nbytes), nodes=8, ranks_per_host=1).time_s


def test_torch_pipelining_reduces_fsdp_gradients_after_the_stages_last_backward():
    """torch's pipeline stage runs every micro-batch's backward with FSDP's gradient sync off, the last one too, and
    calls FSDP's post_backward for every block only once that backward is over (torch v2.6.0 stage.py
    backward_maybe_with_nosync, run_post_backward): the stage's whole fp32 reduce-scatter follows the pipeline,
    none of it beside a backward. Interleaved, the drain still waits for it ([27 s11 amscale]: every stage's, in
    turn, tests/test_project_amscale.py)."""
    rs = _stage_reduce_scatter_s()
    assert rs > 0.2  # 25 GB of fp32 gradients per GPU over 400 Gb/s
    one = _table5(vpp=1)
    assert one.breakdown["dp_comm"] >= rs
    two = _table5(vpp=2)
    assert two.breakdown["dp_comm"] >= rs


def _head_s(p: Projection) -> float:
    """The last stage's compute beyond its 15 layers (a middle stage's 16, scaled): the output projection."""
    return p.stages[-1]["compute"] - p.stages[1]["compute"] * 15 / 16


def test_the_output_projection_stays_in_bf16_under_fp8():
    """torchtitan converts nn.Linear to torchao's Float8Linear except the output projection (float8.py at 9dec370:
    module_filter_fn fqn != "output"; later float8.filter_fqns ["output"]), and Megatron-Core builds it as a
    tensor_parallel.ColumnParallelLinear, outside Transformer Engine's fp8 modules: under fp8 the logits' three GEMMs
    of either stack take at least their FLOPs at the bf16 peak, where at the fp8 rate they would take about half."""
    w = load_workload("llama3-405b")
    flops = 3 * 2 * (4 * 8192) * w.hidden * w.vocab / 8  # forward, data and weight gradients of one micro-batch
    bf16_floor = flops / 912e12  # the 500 W H100's bf16 peak (accelerators.yaml)
    assert _head_s(_table5(vpp=1)) > bf16_floor
    assert _head_s(_table5(vpp=1, framework="megatron-core")) > bf16_floor
