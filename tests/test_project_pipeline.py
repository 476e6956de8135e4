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


def _megatron_interleaved_order(rank: int, p: int, v: int, m: int) -> list[tuple[str, int, int]]:
    # Megatron-LM's interleaved 1F1B on one rank (schedules.py, micro-batches grouped by p): its warm-up forwards,
    # then one forward and one backward at a time, then the remaining backwards; (pass, micro-batch, chunk)
    total = m * v
    warm = min((p - rank - 1) * 2 + (v - 1) * p, total)

    def chunk(k: int, forward: bool) -> tuple[str, int, int]:
        c = (k // p) % v
        return ("F" if forward else "B", (k // (p * v)) * p + k % p, c if forward else v - 1 - c)

    order = [chunk(k, True) for k in range(warm)]
    for i in range(total - warm):
        order += [chunk(warm + i, True), chunk(i, False)]
    return order + [chunk(k, False) for k in range(total - warm, total)]


def _deepspeed_order(stage: int, p: int, m: int) -> list[tuple[str, int, int]]:
    # DeepSpeed's TrainSchedule (v0.5.4 runtime/pipe/schedule.py): 2 (m + p - 1) steps, a stage runs a forward on
    # steps of its own parity and a backward on the others, skipping micro-batches out of range
    order = []
    for step in range(2 * (m + p - 1)):
        forward = step % 2 == stage % 2
        if forward:
            mb = (step if step % 2 == 0 else step - 1) // 2 - stage // 2
        elif step % 2 == 0:
            mb = step // 2 - p + (stage + 1) // 2
        else:
            mb = (step - 1) // 2 - p + 1 + stage // 2
        if 0 <= mb < m:
            order.append(("F" if forward else "B", mb, 0))
    return order


def _dataflow_s(orders: list[list[tuple[str, int, int]]], v: int, fwd: float, bwd: float) -> float:
    """When the last rank finishes: each rank runs its order, each pass once its input exists (the previous
    virtual stage's forward, the next one's backward)."""
    p = len(orders)
    done: dict[tuple[str, int, int, int], float] = {}
    at, clock = [0] * p, [0.0] * p
    while any(at[r] < len(orders[r]) for r in range(p)):
        moved = False
        for r in range(p):
            while at[r] < len(orders[r]):
                kind, mb, c = orders[r][at[r]]
                if kind == "F":
                    dep = ("F", mb, c, r - 1) if r > 0 else (("F", mb, c - 1, p - 1) if c > 0 else None)
                elif r < p - 1:
                    dep = ("B", mb, c, r + 1)
                else:
                    dep = ("B", mb, c + 1, 0) if c < v - 1 else ("F", mb, c, r)
                if dep is not None and dep not in done:
                    break
                clock[r] = max(clock[r], done[dep] if dep else 0.0) + (fwd if kind == "F" else bwd) / v
                done[(kind, mb, c, r)] = clock[r]
                at[r] += 1
                moved = True
        assert moved, "the schedule deadlocks"
    return max(clock)


@pytest.mark.parametrize("p,v,m", [(16, 8, 16), (12, 8, 36), (8, 2, 8), (4, 5, 32), (8, 1, 8)])
def test_interleaved_fill_and_drain_is_the_schedules_own(p, v, m):
    from commlens.project.step import PIPELINE_FILL

    t = 3.0  # a forward of 1 and a backward of 2 per micro-batch
    model = m * t + (p - 1) * t * PIPELINE_FILL["interleaved" if v > 1 else "1f1b"](p, v)
    orders = [_megatron_interleaved_order(r, p, v, m) for r in range(p)]
    assert _dataflow_s(orders, v, 1.0, 2.0) == pytest.approx(model, rel=1e-12)


@pytest.mark.parametrize("p,m", [(4, 16), (35, 160)])
def test_deepspeed_train_schedule_runs_as_1f1b(p, m):
    from commlens.project.step import PIPELINE_FILL

    model = m * 4.0 + (p - 1) * 4.0 * PIPELINE_FILL["1f1b"](p, 1)  # full recomputation: backward 3 x forward
    assert _dataflow_s([_deepspeed_order(s, p, m) for s in range(p)], 1, 1.0, 3.0) == pytest.approx(model)


def test_deepspeed_pipeline_engine_middle_stages_send_both_ways_over_the_link_they_take():
    # [27 s14 bloomtp] a middle stage runs all four sends/receives: two over the boundary to the previous stage, two
    # to the next. With PP outermost (DeepSpeed's PipeModelDataParallelTopology, axes pipe, data, model) and TP x DP
    # = 4 on 8-GPU nodes, stages 2k and 2k + 1 share a node (NVLink) and 2k + 1 -> 2k + 2 crosses to the next one.
    # The first and last stages are priced with four over their one boundary (the schedule's two: "Known, not
    # modelled" in docs/project-evidence.md)
    w = _tiny(layers=8)
    lay = ParallelLayout(tp=1, pp=4, zero=1, recompute="none", sp=False, pp_p2p="serial")
    p = project(w, A100, lay, 16)
    whole = w.micro_batch * w.seq_len * w.hidden * 2
    near = nccl_predict(A100, "sendrecv", int(whole), nodes=1, ranks_per_host=2).time_s
    far = nccl_predict(A100, "sendrecv", int(whole), nodes=2, ranks_per_host=1).time_s
    assert [st["pp_comm"] for st in p.stages] == pytest.approx(
        [4 * near, 2 * (near + far), 2 * (far + near), 4 * near], rel=1e-9
    )
    # a stage per node (TP x DP = 8): every boundary crosses nodes, as before
    q = project(w, A100, lay.model_copy(update={"tp": 2, "pp_scatter_gather": False}), 32)
    assert [st["pp_comm"] for st in q.stages] == pytest.approx([4 * far] * 4, rel=1e-9)
