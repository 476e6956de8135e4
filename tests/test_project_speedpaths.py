"""The shortcuts a projection takes for speed give what the long way gives: a collective priced by its time alone
(``backends.nccl_time_s``) against NCCL's full prediction, and a pipeline stage summed once for all the stages alike
(``step._stages``) against each stage summed on its own, and the GEMM shape curve skipping the tiles that cannot win
(``compute.shape_factor``) against the best of every tile."""

from __future__ import annotations

import random

import pytest

from commlens.model.backends import DEEPEP_ALL_TO_ALL, DEVICE_ALL_TO_ALL, nccl_predict, nccl_time_s
from commlens.model.layout import InfeasibleError
from commlens.project import step
from commlens.project import validate as v
from commlens.project.compute import DEFAULT_K_OVERHEAD, DEFAULT_TILES, shape_factor
from commlens.project.hardware import active_devices
from commlens.project.layout import ParallelLayout
from commlens.project.scenario import Scenario
from commlens.topology import load_topology
from commlens.workload import load_workload


def _every_tile(m, n, k, sms, tiles, k_overhead, batch):
    """The shape curve the long way: every tile's share of the plateau, the best of them."""
    shares = []
    for tm, tn, rel in tiles:
        rows, cols = -(-m // tm), -(-n // tn)
        count = rows * cols * batch
        waves = -(-count // sms)
        shares.append((m * n) / (rows * tm * cols * tn) * count / (waves * sms) * rel)
    return max(shares) * k / (k + k_overhead)


def test_the_shape_curve_skipping_tiles_that_cannot_win_gives_the_best_tile():
    curves = {(DEFAULT_TILES, DEFAULT_K_OVERHEAD)} | {
        (d.gemm_shape.tiles, d.gemm_shape.k_overhead) for d in active_devices().values() if d.gemm_shape is not None
    }
    curves.add((((64, 64, 0.7), (128, 128, 0.95), (256, 128, 1.0)), 64.0))  # the smaller tiles first
    rng = random.Random(27)
    sides = [1, 7, 64, 127, 128, 129, 255, 1000, 1536, 4096, 5120, 9216, 14336, 53248, 131072]
    checked = 0
    for tiles, k_overhead in sorted(curves):
        for _ in range(400):
            m, n, k = rng.choice(sides) + rng.randrange(3), rng.choice(sides), rng.choice(sides)
            sms, batch = rng.choice([80, 108, 132, 148, 160, 304]), rng.choice([1, 1, 2, 8, 64])
            want = _every_tile(m, n, k, sms, tiles, k_overhead, batch)
            assert shape_factor(m, n, k, sms, tiles, k_overhead, batch) == want, (m, n, k, sms, tiles, batch)
            checked += 1
    assert len(curves) >= 3 and checked >= 1200


OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "sendrecv")


@pytest.mark.parametrize("topology", ["dgx-h100", "gb200-nvl72", "dgx-a100", "meta-h100-roce"])
def test_a_collectives_time_alone_is_its_predictions(topology):
    t = load_topology(topology)
    per_node = t.accelerators_per_node
    for op in (*OPS, DEVICE_ALL_TO_ALL, DEEPEP_ALL_TO_ALL):
        for nodes, rph in ((1, 2), (1, per_node), (2, per_node), (16, per_node), (64, 1)):
            for size in (0, 4096, 3 << 20, 1 << 30):
                for nvls in (True, False):
                    kw = {"nodes": nodes, "ranks_per_host": rph, "span_nodes": 4 * nodes if rph == 1 else 0}
                    want = nccl_predict(t, op, size, nvls=nvls, **kw).time_s
                    assert nccl_time_s(t, op, size, nvls=nvls, **kw) == want, (op, nodes, rph, size, nvls)


def test_a_collective_that_cannot_run_is_refused_alike():
    t = load_topology("dgx-h100")
    with pytest.raises(InfeasibleError) as full:
        nccl_predict(t, "all_reduce", -1, nodes=2, ranks_per_host=8)
    with pytest.raises(InfeasibleError) as alone:
        nccl_time_s(t, "all_reduce", -1, nodes=2, ranks_per_host=8)
    assert str(alone.value) == str(full.value) == "size must be >= 0 bytes, got -1"


def _pipelined_rows(limit: int):
    """Published rows of three or more pipeline stages, not hybrids (their stages go through ``_all_stages``)."""
    rows = []
    for name in v.table_names():
        if name in ("memory", "megatron-sc21"):  # (the SC'21 table is built by validate_megatron)
            continue
        for row in v.load_set(name).rows:
            w = load_workload(row.workload, row.overrides)
            if row.layout.get("pp", 1) >= 3 and w.hybrid is None:
                rows.append((w, row))
    step_ = max(1, len(rows) // limit)
    return rows[::step_][:limit]


# middle stages that differ: uneven torchtitan split points, a MoE model's dense first layers on a middle stage,
# full recomputation of some layers per chunk
UNEVEN = (
    ("llama3-8b", {}, "dgx-h100", {"pp": 5, "stage_layers": (6, 7, 6, 7, 6), "framework": "torchtitan"}, 40),
    (
        "deepseek-v3-like",
        {"global_batch": 512},
        "dgx-h100",
        {"pp": 16, "tp": 2, "ep": 8, "stage_layers": (1, 2, 6, *[4] * 12, 4)},
        1024,
    ),
    ("llama3-70b", {}, "dgx-h100", {"pp": 4, "vpp": 2, "tp": 8, "recompute": "full", "recompute_layers": 3}, 64),
)


def _stage_checks(scenario: Scenario) -> int:
    """Every stage summed alone equals its sum beside the others; how many middle stages equal the one before."""
    c, _, _ = step._setup(scenario)
    kind_times, kind_seconds, lc = step._layer_times(c)
    pp_p2p, ends = step._pp_p2p_stages(c), step._ends(c, c.gemm_peak, lc.tp_bytes)
    together, classes = step._stages(c, kind_times, kind_seconds, pp_p2p, ends, scenario.gpus)
    for i in range(c.r.pp):
        alone, alone_classes = step._stages(c, kind_times, kind_seconds, pp_p2p, ends, scenario.gpus, frozenset({i}))
        assert together[i] == alone[i] and classes[i] == alone_classes[i], (scenario.layout, i)
    return sum(1 for i in range(2, c.r.pp - 1) if together[i] == together[i - 1])


@pytest.mark.parametrize("workload, overrides, topology, layout, gpus", UNEVEN)
def test_stages_that_differ_are_summed_each_on_its_own(workload, overrides, topology, layout, gpus):
    w = load_workload(workload, overrides)
    _stage_checks(Scenario(w, load_topology(topology), ParallelLayout(**layout), gpus, check_memory=False))


def test_stages_alike_summed_once_are_each_summed_alone():
    rows = _pipelined_rows(40)
    assert len(rows) >= 30
    checked_alike = 0
    for w, row in rows:
        scenario = Scenario(w, load_topology(row.topology), ParallelLayout.model_validate(row.layout), row.gpus)
        checked_alike += _stage_checks(scenario)
    assert checked_alike > 50  # the rows hold many middle stages alike: the shortcut was taken


def test_a_cleared_projection_keeps_nothing_it_worked_out_for_the_scenario():
    """``step.clear_caches`` (the benchmark's cold rounds) leaves none of what a projection computed for its
    scenario's shapes: job layouts and their protocol views, ring tapers, GEMM shape-curve points, measured GEMM
    rate caps and attention lookups, collective costs and parameter counts."""
    import importlib

    from commlens.model import backends
    from commlens.model import layout as model_layout
    from commlens.project import compute, efficiency, project

    predict_module = importlib.import_module("commlens.model.predict")
    w = load_workload("llama3-70b", {})
    project(w, load_topology("dgx-h100"), ParallelLayout(tp=8, pp=4, vpp=5), 1024)
    assert predict_module._LAYOUTS and backends._PROTOCOL_LAYOUTS and step._COMM
    assert compute._cached_shape_factor.cache_info().currsize and efficiency._lookup.cache_info().currsize
    step.clear_caches()
    assert not predict_module._LAYOUTS and not backends._PROTOCOL_LAYOUTS and not step._COMM
    for cached in (
        compute._cached_shape_factor,
        efficiency._cap,
        efficiency._lookup,
        model_layout._ring_taper,
        step.slowest_gpu_factor,
    ):
        assert cached.cache_info().currsize == 0, cached
