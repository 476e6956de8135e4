"""Which pipeline rank a published peak is ([27 s14 mem1f1b]): torchtitan's DeepSeek-V3 GB300 report prints the PP2
run's peak on rank 0 (the first PP stage), while torchtitan's end-2024 page takes the maximum across all GPUs
(its footnote 1), which is the model's largest stage."""

from __future__ import annotations

from commlens.project.layout import ParallelLayout, resolve
from commlens.project.memory import RUNTIME_BYTES, stage_memory
from commlens.project.validate import load_memory_figures, validate_memory
from commlens.workload import load_workload


def _stages(fig):
    w = load_workload(fig.workload, fig.overrides)
    layout = ParallelLayout.model_validate(fig.layout)
    return stage_memory(w, layout, resolve(layout, w, fig.gpus, 8))


def test_dsv3_gb300_pp2_compares_rank_0():
    """The report: '263.25 GiB on rank 0'; the model's figure is pipeline rank 0's reserved peak, whatever rank 1 has."""
    fig = next(f for f in load_memory_figures() if f.name == "torchtitan-dsv3-gb300-pp2-vpp8")
    assert fig.stage == "first"
    res = next(r for r in validate_memory() if r.name == fig.name)
    assert res.stage == "first"
    assert res.predicted_bytes == _stages(fig)[0]["reserved"] - RUNTIME_BYTES


def test_torchtitan_2024_pp_rows_take_the_max_over_ranks():
    """Footnote 1 of the end-2024 page: the maximum across all GPUs; the 1F1B rows' largest stage is the last."""
    figs = [f for f in load_memory_figures() if f.name.startswith("torchtitan-405b-512gpu")]
    assert len(figs) == 6 and all(f.stage == "any" for f in figs)
    one_f_one_b = next(f for f in figs if "pp8x1" in f.name)
    reserved = [st["reserved"] for st in _stages(one_f_one_b)]
    assert max(reserved) == reserved[-1]
