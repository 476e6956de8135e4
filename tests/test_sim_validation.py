"""The simulator's validation properties at small scale (benchmarks/sim_validation.py reports them at full scale):
no contention equals the analytic model, ECMP never beats spraying, lost capacity costs what it removes, seeds
decide ECMP and nothing else, faults reroute or fail loudly."""

from __future__ import annotations

import numpy as np
import pytest

from commlens.sim import Collective, SimConfig, SimError, SimOptions, SimResult, groups_by_stride, parse_fault, run
from commlens.topology import load_topology

GiB = 1 << 30
RAIL = load_topology("h100-rail-2tier")  # leaf groups of 32 nodes, 32 uplinks per leaf
DGX = load_topology("dgx-h100")


def _time(r: SimResult) -> float:
    return r.collectives[0].time_s


def _alternating_ring() -> Collective:
    """A rail-0 ring over 64 nodes alternating between the two leaf groups: every rail-0 leaf sends 32 flows up,
    one per uplink (the uplinks fully loaded)."""
    order = np.ravel(np.column_stack([np.arange(32), np.arange(32) + 32])) * 8
    return Collective("ring", "all_reduce", GiB, order[None, :], algo="ring")


def _dp_rings(nodes: int) -> Collective:
    """The DP all-reduce of a TP 8 x PP 16 layout: rings of one GPU per node, neighbours 16 nodes apart (crossing
    leaves), every ring at once."""
    gpus = nodes * 8
    return Collective("dp", "all_reduce", GiB, groups_by_stride(gpus, gpus // 128, 128), algo="ring")


def _link_ids(r: SimResult, prefix: str) -> list[int]:
    assert r.graph is not None
    return [i for i in range(r.graph.links) if r.graph.link_name(i).startswith(prefix)]


@pytest.mark.parametrize(
    ("op", "algo"),
    [
        ("all_reduce", "ring"),
        ("all_reduce", "hierarchical"),
        ("all_reduce", "nvls"),
        ("all_reduce", "rabenseifner"),
        ("all_reduce", "recursive_doubling"),
        ("all_gather", "ring"),
        ("reduce_scatter", "ring"),
        ("all_to_all", "direct"),
    ],
)
def test_alone_on_an_idle_fabric_the_simulation_equals_the_analytic_model(op: str, algo: str) -> None:
    r = run(
        SimConfig(DGX, 16, (Collective("c", op, GiB, np.arange(128)[None, :], algo=algo),), SimOptions(routing="spray"))
    )
    c = r.collectives[0]
    assert c.algo == algo
    assert c.time_s == pytest.approx(c.analytic_s, rel=0.01)


@pytest.mark.parametrize(
    ("topo", "nodes", "coll"),
    [
        (RAIL, 256, _dp_rings(256)),
        (RAIL, 64, _alternating_ring()),
        (DGX, 16, Collective("c", "all_reduce", GiB, np.arange(128)[None, :], algo="ring")),
    ],
    ids=["dp-rings", "alternating-ring", "full-ring"],
)
def test_ecmp_is_never_faster_than_spraying(topo, nodes: int, coll: Collective) -> None:
    spray = _time(run(SimConfig(topo, nodes, (coll,), SimOptions(routing="spray"))))
    for seed in range(4):
        assert _time(run(SimConfig(topo, nodes, (coll,), SimOptions(routing="ecmp", seed=seed)))) >= spray * (1 - 1e-9)


def test_ecmp_collisions_slow_rings_that_cross_leaves() -> None:
    coll = _dp_rings(256)
    spray = _time(run(SimConfig(RAIL, 256, (coll,), SimOptions(routing="spray"))))
    ecmp = [_time(run(SimConfig(RAIL, 256, (coll,), SimOptions(routing="ecmp", seed=seed)))) for seed in range(4)]
    assert max(ecmp) > 1.2 * spray
    # more queue pairs per connection spread the same traffic over more paths
    eight = _time(run(SimConfig(RAIL, 256, (coll,), SimOptions(routing="ecmp", seed=0, qps=8))))
    assert spray <= eight < ecmp[0]


@pytest.mark.parametrize("fault", ["leaf0-spine0", "spine0"])
def test_a_lost_uplink_under_full_load_costs_its_share_of_capacity(fault: str) -> None:
    ring = _alternating_ring()
    base = _time(run(SimConfig(RAIL, 64, (ring,), SimOptions(routing="spray"))))
    failed = _time(run(SimConfig(RAIL, 64, (ring,), SimOptions(routing="spray", faults=(parse_fault(fault, False),)))))
    assert failed / base == pytest.approx(32 / 31, rel=0.01)


def test_a_link_degraded_to_half_halves_the_flow_it_carries() -> None:
    pair = Collective("p", "all_reduce", GiB, np.array([[0, 256]]), algo="ring")  # node 0 to node 32: other leaf
    base = run(SimConfig(RAIL, 64, (pair,), SimOptions(routing="ecmp", channels=1)))  # one connection: one cable up
    assert base.link_util is not None and base.graph is not None
    used = [i for i in _link_ids(base, "leaf0-spine") if base.link_util[i] > 0 and "(up)" in base.graph.link_name(i)]
    assert len(used) == 1
    cable = base.graph.link_name(used[0]).split(" ")[0]
    degraded = run(
        SimConfig(
            RAIL, 64, (pair,), SimOptions(routing="ecmp", channels=1, faults=(parse_fault(f"{cable}:0.5", True),))
        )
    )
    assert _time(degraded) / _time(base) == pytest.approx(2.0, rel=0.01)


def test_the_same_seed_gives_the_same_result_and_another_seed_other_paths() -> None:
    coll = _dp_rings(256)
    a = run(SimConfig(RAIL, 256, (coll,), SimOptions(routing="ecmp", seed=3)))
    b = run(SimConfig(RAIL, 256, (coll,), SimOptions(routing="ecmp", seed=3)))
    c = run(SimConfig(RAIL, 256, (coll,), SimOptions(routing="ecmp", seed=4)))
    doc_a, doc_b = a.as_dict(), b.as_dict()
    doc_a.pop("wall_s")
    doc_b.pop("wall_s")
    assert doc_a == doc_b
    assert a.link_util is not None and c.link_util is not None
    assert not np.array_equal(a.link_util, c.link_util)
    assert a.as_dict()["seed"] == 3 and c.as_dict()["seed"] == 4


def test_a_failed_nic_is_routed_around() -> None:
    ring = Collective("c", "all_reduce", GiB, np.arange(128)[None, :], algo="ring")
    base = run(SimConfig(DGX, 16, (ring,), SimOptions(routing="spray")))
    failed = run(SimConfig(DGX, 16, (ring,), SimOptions(routing="spray", faults=(parse_fault("node3.nic2", False),))))
    assert np.isfinite(_time(failed)) and _time(failed) >= _time(base)
    assert failed.link_util is not None
    assert all(failed.link_util[i] == 0 for i in _link_ids(failed, "node3.nic2-"))


def test_a_leaf_without_live_uplinks_is_refused() -> None:
    with pytest.raises(SimError, match="no live path"):
        run(
            SimConfig(
                RAIL,
                64,
                (_alternating_ring(),),
                SimOptions(routing="spray", faults=(parse_fault("leaf0-spine*", False),)),
            )
        )


def test_an_unknown_fault_name_is_refused() -> None:
    with pytest.raises(SimError, match="nosuch3"):
        run(
            SimConfig(
                RAIL, 64, (_alternating_ring(),), SimOptions(routing="spray", faults=(parse_fault("nosuch3", False),))
            )
        )
