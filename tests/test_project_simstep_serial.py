"""``commlens sim step`` under ``pp_p2p: serial``: DeepSpeed's pipeline engine exchanges activations and gradients
as blocking sends and receives in its own command order, each with TP after a shape header, and rebuilds the
partitioned tensors by TP all-gathers (as ``step._pp_p2p_serial`` prices them analytically)."""

from __future__ import annotations

import pytest

from commlens.project import Scenario
from commlens.project.layout import ParallelLayout
from commlens.project.simstep import SimStep, _serial_commands, simulate_step
from commlens.topology import load_topology
from commlens.workload import load_workload

H100 = load_topology("dgx-h100")


def _step(pp_p2p: str | None, framework: str = "deepspeed", sp: bool = False) -> SimStep:
    """llama3-8b on 64 H100s, TP 4 x PP 4 x DP 4: 16 micro-batches a pipeline."""
    w = load_workload("llama3-8b").model_copy(update={"global_batch": 64})
    layout = ParallelLayout(
        tp=4,
        pp=4,
        dp=4,
        zero=1,
        sp=sp,
        recompute="full",
        order=("tp", "cp", "pp", "dp"),
        pp_p2p=pp_p2p,  # type: ignore[arg-type]
        framework=framework,
    )
    return simulate_step(Scenario(w, H100, layout, 64))


def test_commands_follow_deepspeeds_train_schedule():
    """TrainSchedule (DeepSpeed v0.5.4 pipe/schedule.py) on 3 stages and 3 micro-batches: a forward step receives its
    activation then sends the previous backward's gradient; a backward step sends the previous forward's activation
    then receives its gradient; idle steps still exchange."""
    assert _serial_commands(3, 3, 0) == [
        ("F", 0), ("send_act", 0), ("F", 1), ("send_act", 1), ("F", 2), ("send_act", 2),
        ("recv_grad", 0), ("B", 0), ("recv_grad", 1), ("B", 1), ("recv_grad", 2), ("B", 2),
    ]  # fmt: skip
    assert _serial_commands(3, 3, 1) == [
        ("recv_act", 0), ("F", 0), ("send_act", 0), ("recv_act", 1), ("F", 1), ("send_act", 1),
        ("recv_grad", 0), ("B", 0), ("recv_act", 2), ("send_grad", 0), ("F", 2), ("send_act", 2),
        ("recv_grad", 1), ("B", 1), ("send_grad", 1), ("recv_grad", 2), ("B", 2), ("send_grad", 2),
    ]  # fmt: skip
    assert _serial_commands(3, 3, 2) == [
        ("recv_act", 0), ("F", 0), ("B", 0), ("recv_act", 1), ("send_grad", 0), ("F", 1),
        ("B", 1), ("recv_act", 2), ("send_grad", 1), ("F", 2), ("B", 2), ("send_grad", 2),
    ]  # fmt: skip


def test_serial_exchange_is_simulated_as_deepspeed_runs_it():
    """DeepSpeed's profile (pp_p2p serial) and the layout field both take the serial path: every exchange a header
    and a tensor (2 x 3 boundaries x 16 micro-batches more collectives than one send each), the forward's input and
    the backward's output and gradient rebuilt by a TP all-gather (3 x 4 stages x 16), the sender held until its
    receiver takes the tensor: the simulated step is longer than with batched exchanges, which it equalled before."""
    serial, batched = _step(None), _step("batched")
    assert _step("serial").step_time_s == serial.step_time_s
    assert serial.collectives - batched.collectives == 2 * 3 * 16 + 3 * 4 * 16
    assert serial.step_time_s > batched.step_time_s * 1.002
    assert serial.communication_s["tp"] > batched.communication_s["tp"]  # the rebuilds' all-gathers
    assert serial.projected_step_time_s > batched.projected_step_time_s
    # the simulated step stays near the projection that prices the same exchange analytically
    assert serial.step_time_s == pytest.approx(serial.projected_step_time_s, rel=0.05)


def test_sequence_parallel_sends_shards_and_rebuilds_nothing():
    """With SP the activation is already sharded over TP: headers, no all-gather rebuild."""
    serial, batched = _step("serial", "megatron-core", sp=True), _step("batched", "megatron-core", sp=True)
    assert serial.collectives - batched.collectives == 2 * 3 * 16
    assert serial.step_time_s > batched.step_time_s


def test_a_pipeline_shorter_than_its_stages_still_orders():
    """Fewer micro-batches than stages (DeepSpeed's idle steps): every command placed, the step simulated."""
    w = load_workload("llama3-8b").model_copy(update={"global_batch": 8})
    layout = ParallelLayout(tp=4, pp=4, dp=4, zero=1, sp=False, recompute="full", framework="deepspeed")
    step = simulate_step(Scenario(w, H100, layout, 64))
    assert step.micro_batches == 2
    assert step.step_time_s == pytest.approx(step.projected_step_time_s, rel=0.1)
