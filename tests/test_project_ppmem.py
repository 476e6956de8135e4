"""torch.distributed.pipelining's own memory (torch v2.6.0 to 2.9 stage.py): every micro-batch's receive buffers
allocated once and kept, and each input gradient kept in its buffer until the next step."""

from __future__ import annotations

from commlens.project import ParallelLayout
from commlens.project.layout import resolve
from commlens.project.memory import pp_peak_counts, pp_retained, stage_memory, torch_pp_order
from commlens.workload import load_workload

H, VOCAB, TP = 16384, 128256, 8  # llama3-405b
TOKENS = 4 * 8192  # Table 5: micro-batch 4 at 8k
BOUNDARY = TOKENS * H * 2 / TP  # one micro-batch's hidden state per GPU (sequence-parallel shard), bf16
LOGITS = TOKENS * VOCAB / TP * 2  # one micro-batch's bf16 logits per GPU (vocabulary-parallel)


def _table5(vpp: int, framework: str = "torchtitan", schedule: str | None = None):
    w = load_workload("llama3-405b", {"seq_len": 8192, "global_batch": 256, "micro_batch": 4, "precision": "fp8"})
    layout = ParallelLayout(
        tp=TP,
        sp=True,
        pp=8,
        vpp=vpp,
        zero=3,
        reshard_after_forward=False,
        recompute="full",
        stage_layers=(15, 16, 16, 16, 16, 16, 16, 15),
        framework=framework,
        schedule=schedule,
        fsdp_fp8_all_gather=True,
        compile=True,
        compile_loss=False,
    )
    return w, layout, resolve(layout, w, 512, 8)


def test_torch_orders_run_every_pass_once_after_its_forward():
    """Schedule1F1B: stage i runs min(m, p - i) forwards first; Interleaved1F1B at p = m = 8, v = 2: rank 0's warm-up
    is min((v - 1) m + 2 (p - 1), m v) = 16, every forward before its first backward; rank 7's is 8, and then each
    op runs its forward before its backward."""
    for rank in range(8):
        order = torch_pp_order(rank, 8, 1, 8)
        assert order.index((False, 0)) == 8 - rank
    assert torch_pp_order(0, 8, 2, 8).index((False, 1)) == 16
    assert torch_pp_order(7, 8, 2, 8).index((False, 1)) == 9
    for rank in range(8):
        order = torch_pp_order(rank, 8, 2, 8)
        for chunk in (0, 1):
            assert order.count((True, chunk)) == order.count((False, chunk)) == 8
            done = 0
            for forward, c in order:
                if c == chunk:
                    done += 1 if forward else -1
                    assert done >= 0


def test_table5_1f1b_keeps_receive_buffers_and_input_grads():
    """At the last steady backward of 1F1B (8 micro-batches): stage 0 keeps its 8 output-gradient buffers; stage 1
    (7 in flight) also 1 idle input buffer and 1 input gradient; the last stage 7 idle input buffers and 7 input
    gradients. torchtitan keeps no outputs since e5ef99aa (return_outputs=False): no logits beyond the one counted."""
    w, layout, r = _table5(1)
    extra = pp_retained(w, layout, r, TOKENS, BOUNDARY)
    assert extra[0] == 8 * BOUNDARY
    assert extra[1] == 10 * BOUNDARY
    assert extra[7] == 14 * BOUNDARY


def test_interleaved_counts_every_chunk():
    """Interleaved (v = 2) on rank 0: every forward has run at the first backward (16 chunks in flight), so chunk 0
    (stage 0) keeps its 8 output-gradient buffers and chunk 1 (stage 8) its 8 and 8 input buffers in flight;
    on rank 7 the last stage (chunk 1, stage 15) has no output-gradient buffers."""
    w, layout, r = _table5(2)
    extra = pp_retained(w, layout, r, TOKENS, BOUNDARY)
    assert extra[0] == 16 * BOUNDARY
    assert pp_peak_counts(0, 8, 2, 8) == [(8, 0, 8), (8, 0, 8)]
    (f0, b0, l0), (f1, b1, l1) = pp_peak_counts(7, 8, 2, 8)
    assert extra[7] == ((8 - l0 + b0) + 8 + (8 - l1 + b1)) * BOUNDARY


def test_only_torch_pipelining_schedules_pay():
    """Megatron-Core frees what it receives per micro-batch; DualPipe and GPipe here are not torch's 1F1B code read;
    AutoModel's are left off (its schedule's micro-batches are not the layout's)."""
    for framework, schedule in (("megatron-core", None), ("torchtitan", "dualpipe"), ("automodel", None)):
        w, layout, r = _table5(1, framework, schedule)
        assert pp_retained(w, layout, r, TOKENS, BOUNDARY) == [0.0] * 8
    w, layout, r = _table5(2)
    assert all(x > 0 for x in pp_retained(w, layout, r, TOKENS, BOUNDARY))


def test_peak_counts_match_the_order():
    """The closed form of the counts at the peak backward equals a walk through torch's order."""
    for pp, vpp, m in ((8, 1, 8), (8, 1, 3), (4, 1, 32), (8, 2, 8), (4, 8, 32), (4, 8, 8), (2, 8, 32), (4, 5, 12)):
        for rank in range(pp):
            fwd, bwd = [0] * vpp, [0] * vpp
            best_live, best = -1, []
            for forward, c in torch_pp_order(rank, pp, vpp, m):
                if forward:
                    fwd[c] += 1
                    continue
                if sum(fwd) - sum(bwd) >= best_live:
                    best_live, best = sum(fwd) - sum(bwd), [(f, b, f - b) for f, b in zip(fwd, bwd)]
                bwd[c] += 1
            assert pp_peak_counts(rank, pp, vpp, m) == best, (pp, vpp, m, rank)


def test_fsdp2_root_stays_gathered():
    """torchtitan's 8B on 8 GPUs (FSDP2, resharded after forward): the gathered window is two layers plus the root's
    embedding, final norm and output (torch v2.6.0 _fsdp_state.py: the root does not reshard after forward), 16-bit;
    AutoModel (lm_head its own unit) keeps the old two-layer share of them."""
    w = load_workload("llama3-8b", {"seq_len": 8192, "global_batch": 16, "micro_batch": 2, "precision": "bf16"})
    h, kv, ffn, vocab = 4096, 1024, 14336, 128256
    layer = 2 * h * h + 2 * h * kv + 3 * h * ffn + 2 * h
    root = 2 * vocab * h + h
    for framework, gathered in (("torchtitan", 2 * layer + root), ("automodel", (32 * layer + root) * 2 / 32)):
        layout = ParallelLayout(zero=3, recompute="selective", framework=framework)
        weights = stage_memory(w, layout, resolve(layout, w, 8, 8))[0]["weights"]
        assert abs(weights - 2.0 * gathered) < 1e-6 * weights, framework
