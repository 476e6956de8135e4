"""MT-NLG 530B (arXiv 2201.11990) as its paper and DeepSpeed's pipeline engine describe the run (issue 27)."""

import pytest

from commlens.project.layout import ParallelLayout
from commlens.project.scenario import Scenario
from commlens.project.step import run
from commlens.project.validate import load_set
from commlens.topology import load_topology
from commlens.workload import load_workload


def _train_schedule(stage: int, p: int, m: int) -> list[tuple[str, int]]:
    # microsoft/DeepSpeed v0.5.4 deepspeed/runtime/pipe/schedule.py TrainSchedule.steps, in its own order: a forward
    # step runs RecvActivation(this micro-batch) then SendGrad(the previous step's), a backward step
    # SendActivation(the previous step's) then RecvGrad(this one), then the step's pass; each send waits for the
    # step after the pass that produced it
    def micro_batch(step: int) -> tuple[int, bool]:
        if step % 2 == stage % 2:
            return (step - step % 2) // 2 - stage // 2, True
        if step % 2 == 0:
            return step // 2 - p + (stage + 1) // 2, False
        return (step - 1) // 2 - p + 1 + stage // 2, False

    cmds: list[tuple[str, int]] = []
    prev = -1
    for step in range(2 * (m + p - 1)):
        mb, forward = micro_batch(step)
        ok, prev_ok = 0 <= mb < m, 0 <= prev < m
        if forward and stage > 0:
            cmds += [("recv_act", mb)] * ok + [("send_grad", prev)] * prev_ok
        elif not forward and stage < p - 1:
            cmds += [("send_act", prev)] * prev_ok + [("recv_grad", mb)] * ok
        if ok:
            cmds.append(("F" if forward else "B", mb))
        prev = mb
    return cmds


_PEER = {"send_act": (1, "recv_act"), "recv_act": (-1, "send_act"), "send_grad": (-1, "recv_grad")}
_PEER["recv_grad"] = (1, "send_grad")


def _rendezvous_s(fwd: list[float], bwd: list[float], xfer: list[float], m: int) -> float:
    """When the last stage finishes: each stage runs its commands in order on one stream; a send and its receive
    are one blocking pair (p2p.py ``dist.send``/``dist.recv``, torch >= 1.8), done together ``xfer`` after the
    later of the two sides is ready."""
    p = len(fwd)
    cmds = [_train_schedule(s, p, m) for s in range(p)]
    at, clock = [0] * p, [0.0] * p
    while any(at[s] < len(cmds[s]) for s in range(p)):
        moved = False
        for s in range(p):
            while at[s] < len(cmds[s]):
                kind, mb = cmds[s][at[s]]
                if kind in ("F", "B"):
                    clock[s] += fwd[s] if kind == "F" else bwd[s]
                else:
                    step, want = _PEER[kind]
                    q = s + step
                    if at[q] >= len(cmds[q]) or cmds[q][at[q]] != (want, mb):
                        break
                    clock[s] = clock[q] = max(clock[s], clock[q]) + max(xfer[s], xfer[q])
                    at[q] += 1
                at[s] += 1
                moved = True
        assert moved, "the schedule deadlocks"
    return max(clock)


@pytest.mark.parametrize("gpus", [2240, 2800, 3360])
def test_deepspeed_train_schedule_adds_no_fill_beyond_1f1b_on_the_mt_nlg_rows(gpus):
    # The rows' pipeline part as the model prices it, (m - 1) x the slowest stage + the sum over the stages, against
    # DeepSpeed's own command order with blocking pairs, fed each stage's modelled times: full recomputation, so a
    # backward is 3 forwards; the serial exchanges (pp_comm, four per micro-batch) as blocking pairs. Without them
    # the engine's order is the formula exactly; with them it is at most the model's (which charges the first and
    # last stage four exchanges, where they make two). MT-NLG's published fixed part, 13.0 s against 6.5 s
    # modelled, is not in the schedule.
    table = load_set("mt-nlg-530b")
    row = next(r for r in table.rows if r.gpus == gpus)
    layout = ParallelLayout.model_validate(row.layout)
    assert (layout.recompute, layout.vpp, layout.pp_p2p) == ("full", 1, "serial")
    w = load_workload(row.workload, row.overrides)
    projection = run(Scenario(w, load_topology(row.topology), layout, row.gpus))
    stages = projection.stages
    m = w.global_batch // (w.micro_batch * gpus // (layout.tp * layout.pp))
    assert m == 1920 // (gpus // 280)
    per_mb = [st["per_micro_batch_s"] for st in stages]
    xfer = [st["pp_comm"] / 4 for st in stages]
    work = [t - 4 * x for t, x in zip(per_mb, xfer, strict=True)]
    assert min(xfer) > 0 and max(per_mb) > min(per_mb)  # the end stages differ from the middle ones
    fwd, bwd = [t / 4 for t in work], [3 * t / 4 for t in work]
    free = _rendezvous_s(fwd, bwd, [0.0] * len(work), m)
    assert free == pytest.approx((m - 1) * max(work) + sum(work), rel=1e-12)
    simulated = _rendezvous_s(fwd, bwd, xfer, m)
    # the model's pipeline part: its step less the DP reduction and optimizer tail after the last micro-batch
    modelled = projection.step_time_s - projection.breakdown["dp_comm"] - projection.breakdown["optimizer"]
    assert modelled == pytest.approx((m - 1) * max(per_mb) + sum(per_mb), rel=1e-9)
    assert free < simulated <= modelled


def test_train_schedule_without_exchanges_is_1f1b():
    # with free exchanges the engine's lock-step order is exactly 1F1B: (m + p - 1) (F + B)
    for p, m in ((4, 16), (35, 160)):
        assert _rendezvous_s([1.0] * p, [3.0] * p, [0.0] * p, m) == pytest.approx(4.0 * (m + p - 1))


def test_rows_carry_the_papers_settings():
    # arXiv 2201.11990: 105 layers, hidden 20480, 128 heads, sequence 2048, global batch 1920, 8-way tensor and
    # 35-way pipeline (Sec. 3.2, 2.2); bfloat16 mixed precision (Sec. 2.3); every transformer block checkpointed and
    # recomputed (Sec. 2.1.1); DeepSpeed's 1F1B pipeline, no interleaving
    for row in load_set("mt-nlg-530b").rows:
        w = load_workload(row.workload, row.overrides)
        assert (w.layers, w.hidden, w.heads, w.seq_len, w.global_batch) == (105, 20480, 128, 2048, 1920)
        assert w.precision == "bf16"
        layout = ParallelLayout.model_validate(row.layout)
        assert (layout.tp, layout.pp, layout.vpp, layout.recompute) == (8, 35, 1, "full")
        assert row.gpus // 280 in (8, 10, 12)
