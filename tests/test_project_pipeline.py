"""Pipeline costs of the step model: what the stacks do between and around the stages (issue 27)."""

import pytest
from test_project import _tiny

from commlens.model.backends import nccl_predict
from commlens.project import ParallelLayout, project
from commlens.project.compute import stream_time_s
from commlens.project.hardware import device_for
from commlens.topology import load_topology

A100 = load_topology("dgx-a100")


def _two_stages(**layout):
    # TP 2 x DP 4 inside a node, PP outermost: the first and the last stage sit on different nodes
    return ParallelLayout(tp=2, pp=2, zero=1, recompute="none", sp=False, **layout)


def test_tied_embedding_gradients_are_summed_over_the_first_and_last_stage():
    # Megatron-LM's _allreduce_word_embedding_grads, DeepSpeed's ReduceTiedGrads: after the DP reduction the two
    # stages holding a copy of the tied word embedding all-reduce its gradient, on the step's critical path
    tied = project(_tiny(tied_embeddings=True), A100, _two_stages(), 16)
    untied = project(_tiny(tied_embeddings=False), A100, _two_stages(), 16)
    w = _tiny()
    pair = nccl_predict(A100, "all_reduce", int(w.vocab * w.hidden / 2 * 4), nodes=2, ranks_per_host=1).time_s
    assert pair > 0
    assert tied.step_time_s - untied.step_time_s == pytest.approx(pair, rel=1e-9)
    assert tied.breakdown["dp_comm"] - untied.breakdown["dp_comm"] == pytest.approx(pair, rel=1e-9)
    # one stage holds the whole model: nothing to keep in step
    one = ParallelLayout(tp=2, pp=1, zero=1, recompute="none", sp=False)
    tied1 = project(_tiny(tied_embeddings=True), A100, one, 8)
    assert tied1.breakdown["dp_comm"] < tied.breakdown["dp_comm"]


@pytest.mark.parametrize("fusion", [True, False])
def test_embedding_weight_gradient_is_dense_on_the_first_stage(fusion):
    # the embedding's backward zero-fills a vocab/TP x hidden gradient (16 bits) every micro-batch and the gradient
    # hook adds it into the fp32 main grads (2 + 2 x 4 B): a first-stage cost that grows with the vocabulary and
    # leaves the other stages alone
    lay = _two_stages(grad_accum_fusion=fusion)
    small = project(_tiny(vocab=32000), A100, lay, 16)
    large = project(_tiny(vocab=64000), A100, lay, 16)
    per_mb = stream_time_s(device_for(A100.accelerator.name), 32000 * 1024 / 2 * (2 + 2 + 2 * 4))
    first = large.stages[0]["memory_bound"] - small.stages[0]["memory_bound"]
    assert first == pytest.approx(per_mb, rel=1e-9)
    assert large.stages[0]["per_micro_batch_s"] > small.stages[0]["per_micro_batch_s"]


def test_deepspeed_pipeline_engine_sends_one_tensor_at_a_time():
    # DeepSpeed's pipeline engine (v0.5.4 TrainSchedule): per micro-batch four blocking sends/receives, one after
    # another, each of a TP rank's partition after a small meta tensor; the receiver rebuilds the whole activation
    # or gradient with a TP all-gather three times (PartitionedTensor.full: a zero-filled buffer, then a clone)
    w = _tiny()
    batched = project(w, A100, _two_stages(pp_scatter_gather=True), 16)
    serial = project(w, A100, _two_stages(pp_scatter_gather=True, pp_p2p="serial"), 16)
    whole = w.micro_batch * w.seq_len * w.hidden * 2
    part = nccl_predict(A100, "sendrecv", int(whole / 2), nodes=2, ranks_per_host=1).time_s
    header = nccl_predict(A100, "sendrecv", 128, nodes=2, ranks_per_host=1).time_s
    gather = nccl_predict(A100, "all_gather", int(whole), nodes=1, ranks_per_host=2).time_s
    copies = stream_time_s(device_for(A100.accelerator.name), 9 * whole + 4 * whole / 2)
    assert batched.stages[0]["pp_comm"] == pytest.approx(2 * (part + gather), rel=1e-9)
    assert serial.stages[0]["pp_comm"] == pytest.approx(4 * (part + header) + 3 * gather + copies, rel=1e-9)
    # the deepspeed profile runs its engine so; a layout can say otherwise
    assert project(w, A100, _two_stages(pp_scatter_gather=True, framework="deepspeed"), 16).stages[0][
        "pp_comm"
    ] == pytest.approx(serial.stages[0]["pp_comm"], rel=1e-9)
    assert serial.step_time_s > batched.step_time_s
