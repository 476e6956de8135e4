"""FSDP's deferred gradient reduction [27 s9]: with ``fsdp_defer_grad_reduce`` the parameters are gathered on the first
micro-batch and kept, the gradients accumulate unsharded (torch's FSDP2 ``to_accumulated_grad_if_needed``) and are
reduce-scattered in the last micro-batch's backward only (torchtitan's ``fsdp_defer_gradient_reduction``, set on the
DeepSeek-V3 GB300 PP1 run in scripts/dsv3_671b_dist_moe_256gpu/mast_configs.py @37023786)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from commlens.project import ParallelLayout, project
from commlens.project.layout import resolve
from commlens.project.memory import stage_memory
from commlens.topology import load_topology
from commlens.workload import load_workload

SET = {"seq_len": 4096, "global_batch": 64, "micro_batch": 1, "precision": "bf16"}
BASE = {"tp": 1, "sp": False, "pp": 1, "dp": 8, "zero": 3, "reshard_after_forward": False, "framework": "torchtitan"}


def _run(**extra):
    layout = ParallelLayout.model_validate({**BASE, **extra})
    return project(load_workload("llama3-8b", SET), load_topology("dgx-h100"), layout, 8, check_memory=False)


def test_deferring_the_reduction_gathers_and_reduces_once_a_step_instead_of_every_micro_batch():
    every, once = _run(), _run(fsdp_defer_grad_reduce=True)
    # 8 micro-batches a GPU: the per-micro-batch gathers and reduce-scatters were most of the FSDP traffic
    assert once.breakdown["dp_comm"] < 0.5 * every.breakdown["dp_comm"]
    assert once.step_time_s < every.step_time_s


def test_the_deferred_gradients_are_held_unsharded():
    w = load_workload("llama3-8b", SET)

    def grads(**extra):
        layout = ParallelLayout.model_validate({**BASE, **extra})
        return stage_memory(w, layout, resolve(layout, w, 8, 8))[0]["gradients"]

    params = w.parameters  # one stage: every parameter accumulates unsharded, in fp32
    assert grads(fsdp_defer_grad_reduce=True) - grads() == pytest.approx(4.0 * params, rel=0.02)


@pytest.mark.parametrize("bad", [{"zero": 1}, {"reshard_after_forward": True}])
def test_deferring_needs_zero_3_with_the_parameters_kept_gathered(bad):
    with pytest.raises(ValidationError, match="fsdp_defer_grad_reduce needs zero 3"):
        ParallelLayout.model_validate({**BASE, "fsdp_defer_grad_reduce": True, **bad})


def test_a_bf16_reduction_accumulates_in_bf16_where_the_stack_reduces_every_layer_so():
    """FSDP2 clamps the reduce dtype to None where it equals the parameters' and leaves the accumulation to autograd, in
    bf16: half the held bytes of an fp32 reduction."""
    w = load_workload("llama3-8b", SET)

    def held(**extra):
        layout = ParallelLayout.model_validate({**BASE, "fsdp_defer_grad_reduce": True, **extra})
        without = ParallelLayout.model_validate({**BASE, **extra})
        mem = stage_memory(w, layout, resolve(layout, w, 8, 8))[0]["gradients"]
        return mem - stage_memory(w, without, resolve(without, w, 8, 8))[0]["gradients"]

    assert held(grad_reduce_bytes=2) == pytest.approx(0.5 * held(grad_reduce_bytes=4), rel=1e-6)
    # NeMo AutoModel's dense layers reduce in fp32 whatever its rows' (experts') grad_reduce_bytes say
    assert held(grad_reduce_bytes=2, framework="automodel") == pytest.approx(held(grad_reduce_bytes=4), rel=1e-6)
