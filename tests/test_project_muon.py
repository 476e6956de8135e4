"""[27 s26 muon] Muon as Megatron-Core runs it: Newton-Schulz on whole matrices, on their owner rank."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from commlens.project import ParallelLayout, project
from commlens.project.compute import gemm_time_s
from commlens.project.errors import InfeasibleLayoutError
from commlens.project.hardware import device_for
from commlens.project.muon import MUON_NS_STEPS, layer_matrices, newton_schulz_s
from commlens.topology import load_topology
from commlens.workload import load_workload

CLI = [str(Path(sys.executable).parent / "commlens"), "project"]
H100 = device_for("H100 SXM")


def test_one_iteration_is_three_gemms_on_the_narrow_side():
    # a 4096 x 16384 matrix: A = X X^T (4096 x 4096 over K 16384), A A, then B X (4096 x 16384 over K 4096), bf16
    peak = H100.peak("bf16")
    want = MUON_NS_STEPS * (
        gemm_time_s(H100, peak, 4096, 4096, 16384)
        + gemm_time_s(H100, peak, 4096, 4096, 4096)
        + gemm_time_s(H100, peak, 4096, 16384, 4096)
    )
    assert newton_schulz_s(H100, 4096, 16384) == pytest.approx(want)
    assert newton_schulz_s(H100, 16384, 4096) == pytest.approx(want)  # the wide side is transposed
    # at the plateau that is 5 x (4 a^2 b + 2 a^3) FLOPs
    flops = MUON_NS_STEPS * (4 * 4096**2 * 16384 + 2 * 4096**3)
    assert 0.8 < flops / (peak * H100.gemm_efficiency) / want < 1.01


def test_the_matrices_are_megatrons_fused_weights():
    w = load_workload("llama3-70b")
    dense, experts = layer_matrices(w, moe=False)
    h, f = w.hidden, w.ffn_hidden
    assert (2 * f, h) in dense and (h, f) in dense and experts == []  # fc1 with gate and up, fc2
    assert sum(r * c for r, c in dense) == pytest.approx(w.parameter_counts()["attention"] / w.layers + 3 * h * f)
    # blockwise TP: each rank's shards, column-parallel split by rows and row-parallel by columns
    shards, _ = layer_matrices(w, moe=False, tp=4)
    assert (2 * f / 4, h) in shards and (h, f / 4) in shards
    assert sum(r * c for r, c in shards) == pytest.approx(sum(r * c for r, c in dense) / 4)
    q = load_workload("qwen3-30b-a3b")
    dense, experts = layer_matrices(q, moe=True)
    assert experts == [(2 * q.moe.expert_ffn_hidden, q.hidden), (q.hidden, q.moe.expert_ffn_hidden)]
    assert (q.moe.experts, q.hidden) in dense  # the router


def _opt_s(workload: str, topology: str, gpus: int, **layout) -> tuple[float, float]:
    w, t = load_workload(workload), load_topology(topology)
    steps = []
    for opt in ("adam", "muon"):
        lay = ParallelLayout(**layout, optimizer=opt, optimizer_state_bytes=8)
        steps.append(project(w, t, lay, gpus).breakdown["optimizer"])
    return steps[0], steps[1]


def test_muon_costs_more_where_each_owner_holds_more_matrices():
    adam, muon = _opt_s("llama3-70b", "dgx-h100", 64, tp=4, pp=4, dp=4)
    assert muon > adam + 0.2  # 20 layers a stage, a quarter of their shards on each owner
    _, muon_wide = _opt_s("llama3-70b", "dgx-h100", 256, tp=4, pp=4, dp=16)
    assert muon_wide < muon / 2  # four times the owners
    # blockwise: TP 8 halves each owner's shards; duplicated: every TP rank orthogonalizes whole matrices
    _, muon_tp8 = _opt_s("llama3-70b", "dgx-h100", 128, tp=8, pp=4, dp=4)
    assert muon_tp8 < 0.7 * muon
    _, whole = _opt_s("llama3-70b", "dgx-h100", 64, tp=4, pp=4, dp=4, muon_tp_mode="duplicated")
    assert whole > 3 * muon


def test_muon_is_refused_where_the_stack_or_the_sharding_has_none():
    w, t = load_workload("llama3-8b"), load_topology("dgx-h100")
    with pytest.raises(InfeasibleLayoutError, match="torchtitan has no Muon optimizer"):
        project(w, t, ParallelLayout(framework="torchtitan", optimizer="muon"), 8, check_memory=False)
    with pytest.raises(InfeasibleLayoutError, match="optimizer muon with zero 3"):
        project(w, t, ParallelLayout(zero=3, optimizer="muon"), 8, check_memory=False)
    proc = subprocess.run(
        CLI + ["llama3-8b", "-t", "dgx-h100", "--gpus", "8", "--set", "layout.optimizer=lion"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "optimizer" in proc.stderr and proc.stderr.startswith("error:"), proc.stderr
    ok = subprocess.run(
        CLI + ["llama3-8b", "-t", "dgx-h100", "--gpus", "8", "--tp", "2", "--set", "layout.optimizer=muon", "--json"],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["breakdown"]["optimizer"] > 0
    banner = subprocess.run(
        CLI
        + ["llama3-8b", "-t", "dgx-h100", "--gpus", "8", "--tp", "2", "--set", "layout.optimizer=muon", "--no-what-if"],
        capture_output=True,
        text=True,
    )
    assert banner.returncode == 0 and banner.stdout.splitlines()[0].endswith("micro-batches, optimizer muon")
