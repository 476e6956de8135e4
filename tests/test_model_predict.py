"""Predictions: the reference figures of shared/reference/hardware.md, monotonicity, auto, the registry."""

from __future__ import annotations

import pytest

from commlens.model import ALGORITHMS, MODELS, InfeasibleError, algorithms_for, predict, predict_algorithms, sweep
from commlens.ops import OP_NAMES, OPS
from commlens.topology import load_topology, topology_from_dict, topology_to_dict

GiB = 1 << 30


# ---- validation targets (issue 4, item 5): within 10% of shared/reference/hardware.md ---------------


def test_h100_node_ring_all_reduce_reaches_the_reference_busbw() -> None:
    """8 x H100, one node, ring all-reduce: ~370 GB/s busBW (nccl-tests issue 212)."""
    pred = predict(load_topology("dgx-h100"), "all_reduce", 8 * GiB, algo="ring")
    assert pred.busbw_bytes_per_s == pytest.approx(370e9, rel=0.10)


def test_h100_node_nvls_all_reduce_reaches_the_reference_busbw() -> None:
    """8 x H100, one node, NVLS all-reduce: ~480 GB/s busBW, ~275 GB/s algBW (nccl-tests issues 212, 290)."""
    pred = predict(load_topology("dgx-h100"), "all_reduce", 8 * GiB, algo="nvls")
    assert pred.busbw_bytes_per_s == pytest.approx(480e9, rel=0.10)
    assert pred.algbw_bytes_per_s == pytest.approx(275e9, rel=0.10)
    assert predict(load_topology("dgx-h100"), "all_reduce", 8 * GiB).algo == "nvls"  # auto takes it too


def test_one_400g_nic_reaches_the_reference_bandwidth() -> None:
    """One 400 Gb/s NDR NIC: 46-48 GB/s (NVIDIA, nccl-tests issue 290): one rank per node over two nodes."""
    h100 = load_topology("dgx-h100")
    ring = predict(h100, "all_reduce", 8 * GiB, nodes=2, ranks_per_host=1, algo="ring")
    assert ring.busbw_bytes_per_s == pytest.approx(47e9, rel=0.10)
    pair = predict(h100, "sendrecv", 8 * GiB, nodes=2)
    assert pair.busbw_bytes_per_s == pytest.approx(47e9, rel=0.10)
    assert pair.bottleneck == "scale_out bandwidth"


def test_efficiencies_are_one_constant_per_level_not_per_case() -> None:
    """The ring and NVLS figures come from the same NVLink efficiency; NVLS only adds the switch's own factor."""
    h100 = load_topology("dgx-h100")
    ring = predict(h100, "all_reduce", 8 * GiB, algo="ring").busbw_bytes_per_s
    nvls = predict(h100, "all_reduce", 8 * GiB, algo="nvls").algbw_bytes_per_s
    link = 450e9 * h100.scale_up.efficiency
    assert ring == pytest.approx(link, rel=0.01)
    assert nvls == pytest.approx(link * h100.scale_up.in_switch_efficiency * 8 / 9, rel=0.01)


# ---- monotonicity ---------------------------------------------------------------------------------------

SHAPES = [
    ("dgx-h100", 1, None),
    ("dgx-h100", 4, None),
    ("dgx-a100", 3, 5),
    ("gb200-nvl72", 36, None),
    ("local-cpu", 1, 3),
    ("local-cpu", 1, 8),
]
SIZES = [0, 8, 1000, 1 << 16, 3 << 20, 1 << 27, 1 << 33]


def _feasible(topology, op, algo, size, nodes, ranks_per_host):
    try:
        return predict(topology, op, size, nodes=nodes, ranks_per_host=ranks_per_host, algo=algo).time_s
    except InfeasibleError:
        return None


@pytest.mark.parametrize("name,nodes,ranks_per_host", SHAPES)
def test_more_bytes_never_take_less_time(name: str, nodes: int, ranks_per_host: int | None) -> None:
    topology = load_topology(name)
    for op in OP_NAMES:
        for algo in (*algorithms_for(op), "auto"):
            times = [_feasible(topology, op, algo, s, nodes, ranks_per_host) for s in SIZES]
            if times[0] is None:
                continue
            assert all(b >= a * (1 - 1e-12) for a, b in zip(times, times[1:])), (op, algo, times)


def _scaled(name: str, factor: float):
    d = topology_to_dict(load_topology(name))
    d["scale_up"]["bandwidth_bytes_per_s"] *= factor
    if d["scale_up"].get("cached_bandwidth_bytes_per_s"):
        d["scale_up"]["cached_bandwidth_bytes_per_s"] *= factor
    if d.get("scale_out"):
        d["scale_out"]["nic_bandwidth_bytes_per_s"] *= factor
    d["accelerator"]["reduction_bytes_per_s"] *= factor
    return topology_from_dict(d)


@pytest.mark.parametrize("name,nodes,ranks_per_host", SHAPES)
def test_more_bandwidth_is_never_slower(name: str, nodes: int, ranks_per_host: int | None) -> None:
    slow, fast = load_topology(name), _scaled(name, 2.0)
    for op in OP_NAMES:
        for algo in (*algorithms_for(op), "auto"):
            for size in (1 << 12, 1 << 24, 1 << 32):
                t_slow = _feasible(slow, op, algo, size, nodes, ranks_per_host)
                if t_slow is None:
                    continue
                t_fast = _feasible(fast, op, algo, size, nodes, ranks_per_host)
                assert t_fast <= t_slow * (1 + 1e-12), (op, algo, size)
                if size == 1 << 32 and op != "barrier":
                    assert t_fast < t_slow, (op, algo)


def test_more_nodes_never_make_a_ring_all_reduce_faster_per_byte_of_busbw() -> None:
    """From 2 nodes on (one node is NVLink-bound at 370.8 GB/s; across nodes each channel leaves a node over one
    GPU's NIC, so the 8 NICs' 384 GB/s set the pace)."""
    h100 = load_topology("dgx-h100")
    busbw = [predict(h100, "all_reduce", GiB, nodes=n, algo="ring").busbw_bytes_per_s for n in (2, 8, 32, 128)]
    assert all(b <= a * (1 + 1e-9) for a, b in zip(busbw, busbw[1:]))


# ---- auto, registry, units ------------------------------------------------------------------------------


def test_auto_picks_the_fastest_feasible_algorithm_and_says_so() -> None:
    h100 = load_topology("dgx-h100")
    for op in ("all_reduce", "all_gather", "all_to_all", "broadcast"):
        for size in (1024, 1 << 20, 1 << 30):
            everything = predict_algorithms(h100, op, size, nodes=4)
            feasible = {a: p for a, p in everything.items() if not isinstance(p, InfeasibleError)}
            auto = predict(h100, op, size, nodes=4)
            assert auto.chosen_by_auto
            assert auto.time_s == min(p.time_s for p in feasible.values())
            assert auto.algo in feasible


def test_every_shared_algorithm_name_has_a_model_and_every_op_has_one() -> None:
    assert ALGORITHMS == (
        "ring",
        "recursive_doubling",
        "rabenseifner",
        "recursive_halving",
        "binomial",
        "double_binary_tree",
        "bruck",
        "pairwise",
        "direct",
        "chain",
        "scatter_allgather",
        "hierarchical",
        "nvls",
        "hierarchical_ring",
        "hierarchical_leaders",
        "hierarchical_one_way",
    )
    modelled = {algo for models in MODELS.values() for algo in models}
    assert modelled == set(ALGORITHMS)
    assert set(MODELS) == set(OP_NAMES)
    for op, models in MODELS.items():
        for algo, fn in models.items():
            assert algo in ALGORITHMS and fn.__doc__, (op, algo)


def test_bandwidths_follow_the_op_catalog() -> None:
    h100 = load_topology("dgx-h100")
    for op in OP_NAMES:
        if op == "barrier":
            continue
        pred = predict(h100, op, 1 << 26)
        assert pred.algbw_bytes_per_s == pytest.approx((1 << 26) / pred.time_s)
        assert pred.busbw_bytes_per_s == pytest.approx(pred.algbw_bytes_per_s * OPS[op].busbw_factor(8))


def test_breakdown_sums_to_the_time_on_the_critical_path() -> None:
    h100 = load_topology("dgx-h100")
    for algo in algorithms_for("all_reduce"):
        try:
            pred = predict(h100, "all_reduce", GiB, nodes=4, algo=algo)
        except InfeasibleError:
            continue
        assert sum(t.time_s for t in pred.terms if t.critical) == pytest.approx(pred.time_s), algo
        assert {t.level for t in pred.terms} <= {"software", "scale_up", "scale_out", "host", "compute"}


def test_nccl_tests_spellings_of_ops_are_accepted() -> None:
    h100 = load_topology("dgx-h100")
    assert predict(h100, "allreduce", 1 << 20).op == "all_reduce"
    assert predict(h100, "alltoall", 1 << 20).op == "all_to_all"


def test_a_sweep_yields_one_row_per_op_and_size_with_infeasible_rows_as_errors() -> None:
    a100 = load_topology("dgx-a100")
    rows = list(sweep(a100, ["all_reduce", "all_gather"], [1 << k for k in range(10, 20)], algo="nvls"))
    assert len(rows) == 20
    assert all(isinstance(r, InfeasibleError) for r in rows)
    rows = list(sweep(a100, ["all_reduce", "all_gather"], [1 << k for k in range(10, 20)], nodes=2))
    assert [r.op for r in rows] == ["all_reduce"] * 10 + ["all_gather"] * 10
