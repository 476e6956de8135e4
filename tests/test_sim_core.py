"""The simulator's parts: max-min rates, the fabric graph, routes, the step and the projection's --network sim."""

from __future__ import annotations

import numpy as np
import pytest

from commlens import project
from commlens.model.patterns import pairwise_rounds
from commlens.project import Scenario
from commlens.project.errors import ProjectionError
from commlens.project.layout import ParallelLayout
from commlens.project.simstep import simulate_step
from commlens.sim import (
    Collective,
    SimConfig,
    SimError,
    SimOptions,
    build_fabric,
    max_min_rates,
    parse_fault,
    route,
    run,
    simulate,
)
from commlens.sim.traffic import ring_channels
from commlens.topology import load_topology
from commlens.workload import load_workload

H100 = load_topology("dgx-h100")
RAIL2 = load_topology("h100-rail-2tier")
META = load_topology("meta-h100-roce")


def test_max_min_rates_are_the_textbook_allocation() -> None:
    """Two links of 10 and 4: flow A on both, B on the first, C on the second. C and A share 4 (2 each), B takes
    the 8 left on the first link."""
    links = np.array([0, 1, 0, 1])
    bundle = np.array([0, 0, 1, 2])
    weight = np.ones(4)
    rate = max_min_rates(links, bundle, weight, np.array([10.0, 4.0]), 3)
    assert rate == pytest.approx([2.0, 8.0, 2.0])


def test_a_bundle_counts_its_flows_on_a_link() -> None:
    """A bundle of 3 flows on one link shares it with a single flow: 3/4 of it, one quarter each."""
    rate = max_min_rates(np.array([0, 0]), np.array([0, 1]), np.array([3.0, 1.0]), np.array([8.0]), 2)
    assert rate == pytest.approx([2.0, 2.0])


def test_the_fabric_has_the_tiers_the_spec_describes() -> None:
    fab = build_fabric(RAIL2, 2048)
    d = fab.describe()
    assert [t["name"] for t in d["tiers"]] == ["leaf", "spine"]
    # 64 groups x 8 rails of leaves with 32 up each; 8 rails x 32 spines
    assert [t["switches"] for t in d["tiers"]] == [512, 256]
    assert d["tiers"][0]["uplinks_per_switch"] == 32
    assert d["gpus"] == 16384
    # a small job builds only the tiers it spans
    assert [t["name"] for t in build_fabric(H100, 16).describe()["tiers"]] == ["leaf"]
    assert [t["name"] for t in build_fabric(H100, 256).describe()["tiers"]] == ["leaf", "spine", "core"]


def test_oversubscription_leaves_fewer_uplinks() -> None:
    data = RAIL2.model_dump()
    data["scale_out"]["tiers"][0]["oversubscription"] = 2.0
    from commlens.topology import Topology

    fab = build_fabric(Topology.model_validate(data), 256)
    assert fab.uplinks[0] == 16


def test_a_job_larger_than_the_fabric_is_refused() -> None:
    with pytest.raises(SimError, match="exceed"):
        build_fabric(RAIL2, 2049)


def test_ring_channels_visit_every_rank_and_cross_on_one_rail() -> None:
    for D, M in ((8, 2), (8, 3), (8, 16), (4, 5), (2, 4)):
        order = ring_channels(D, M)
        assert order.shape == (D, D * M)
        for ch in order:
            assert sorted(ch) == list(range(D * M))
            nxt = np.roll(ch, -1)
            cross = ch // D != nxt // D
            assert (ch[cross] % D == nxt[cross] % D).all()  # same rail both ends: no PXN hop


def test_ecmp_is_seeded_and_spray_spreads_evenly() -> None:
    fab = build_fabric(RAIL2, 64)
    src = np.arange(32) * 8  # rail 0 of nodes 0..31 (leaf group 0)
    dst = src + 32 * 8  # to nodes 32..63 (leaf group 1): every flow climbs to a spine
    key = np.zeros(32, dtype=np.int64)
    b = np.arange(32)
    a = route(fab, src, dst, key, b, "ecmp", seed=1)
    again = route(fab, src, dst, key, b, "ecmp", seed=1)
    other = route(fab, src, dst, key, b, "ecmp", seed=2)
    assert all(np.array_equal(x, y) for x, y in zip(a, again))
    assert not np.array_equal(a[1], other[1])
    _, link, w = route(fab, src, dst, key, np.zeros(32, dtype=np.int64), "spray")
    ups = (link >= fab._tier_off[0]) & (link < fab._tier_off[0] + fab._tier_cables[0])
    assert w[ups] == pytest.approx(np.ones(ups.sum()))  # 32 flows over 32 uplinks: one flow's worth on each


def test_a_failed_spine_is_routed_around_and_a_dead_path_is_an_error() -> None:
    fab = build_fabric(RAIL2, 64)
    src, dst = np.array([0]), np.array([32 * 8])
    failed = fab.with_faults((parse_fault("spine*", False),))
    with pytest.raises(SimError, match="no live path"):
        route(failed, src, dst, np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64))
    some = fab.with_faults((parse_fault("spine[0-9]", False),))
    _, link, _ = route(some, src, dst, np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64))
    assert (some.capacity[link] > 0).all()
    with pytest.raises(SimError, match="matches no"):
        fab.with_faults((parse_fault("spine999", False),))
    with pytest.raises(SimError, match="factor"):
        parse_fault("leaf0-spine0:1.5", True)


def test_a_failed_nic_moves_its_flows_to_another() -> None:
    groups = np.arange(32)[None, :]
    ok = run(
        SimConfig(H100, 4, (Collective("ar", "all_reduce", 1 << 28, groups, algo="ring"),), SimOptions(routing="spray"))
    )
    hurt = run(
        SimConfig(
            H100,
            4,
            (Collective("ar", "all_reduce", 1 << 28, groups, algo="ring"),),
            SimOptions(routing="spray", faults=(parse_fault("node1.nic3", False),)),
        )
    )
    assert hurt.collectives[0].time_s > ok.collectives[0].time_s


def test_two_jobs_on_shared_uplinks_slow_each_other() -> None:
    """Two DP-like all-reduces whose rings cross the same leaves: together slower than either alone."""
    nodes = 64
    ring_a = (np.arange(32) * 2) * 8  # even nodes, rail 0
    ring_b = (np.arange(32) * 2 + 1) * 8  # odd nodes, rail 0
    perm = np.random.default_rng(0).permutation(32)
    a = Collective("a", "all_reduce", 1 << 28, ring_a[perm][None, :], algo="ring")
    b = Collective("b", "all_reduce", 1 << 28, ring_b[perm][None, :], algo="ring")
    alone = run(SimConfig(RAIL2, nodes, (a,), SimOptions(routing="spray"))).collectives[0].time_s
    both = run(SimConfig(RAIL2, nodes, (a, b), SimOptions(routing="spray")))
    assert max(c.time_s for c in both.collectives) >= alone * (1 - 1e-9)
    after = run(
        SimConfig(RAIL2, nodes, (a, Collective("b", "all_reduce", 1 << 28, b.groups, algo="ring", after=("a",))))
    )
    assert after.collectives[1].start_s >= after.collectives[0].end_s * (1 - 1e-12)


def test_project_network_sim_matches_analytic_where_nothing_contends() -> None:
    """TP 8 inside each node and DP over 2 nodes of one leaf: no shared link, so the simulated terms are the
    analytic ones."""
    w = load_workload("llama3-8b")
    layout = ParallelLayout(tp=8)
    a = project.run(Scenario(w, H100, layout, 16))
    s = project.run(Scenario(w, H100, layout, 16, sim=SimOptions(routing="spray")))
    assert s.step_time_s == pytest.approx(a.step_time_s, rel=0.01)
    with pytest.raises(ProjectionError, match="^sim: must be SimOptions or None, got str"):
        Scenario(w, H100, layout, 16, sim="packets")  # type: ignore[arg-type]


def test_a_failed_link_shows_in_the_projection() -> None:
    w = load_workload("llama3-8b")
    layout = ParallelLayout(tp=2)
    base = project.run(Scenario(w, META, layout, 64, sim=SimOptions(routing="spray")))
    faults = (parse_fault("rack*-pod*:0.25", True),)
    hurt = project.run(Scenario(w, META, layout, 64, sim=SimOptions(routing="spray", faults=faults)))
    assert hurt.breakdown.get("dp_comm", 0) + hurt.overlapped_s.get("dp_comm", 0) > base.breakdown.get(
        "dp_comm", 0
    ) + base.overlapped_s.get("dp_comm", 0)


def test_a_whole_step_simulates_every_group() -> None:
    w = load_workload("llama3-8b").model_copy(update={"global_batch": 64})
    layout = ParallelLayout(tp=4, pp=4, dp=4, zero=1, order=("tp", "cp", "pp", "dp"))
    step = simulate_step(Scenario(w, H100, layout, 64))
    assert step.collectives > 4 * step.micro_batches
    assert set(step.communication_s) >= {"tp", "pp", "dp"}
    assert not set(step.communication_s) & {"ep", "edp", "cp"}  # a dense model without CP has none of these
    # the same compute, the same collectives: within a fifth of the projection (the sim rebuilds 1F1B itself)
    assert step.step_time_s == pytest.approx(step.projected_step_time_s, rel=0.2)
    # the scenario's simulator options are the ones the step ran with (default: SimOptions())
    assert step.options == SimOptions() and step.as_dict()["routing"] == "ecmp"
    sprayed = simulate_step(Scenario(w, H100, layout, 64, sim=SimOptions(routing="spray")))
    assert sprayed.as_dict()["routing"] == "spray" and sprayed.projected_step_time_s == step.projected_step_time_s


def test_a_whole_moe_step_runs_its_expert_all_to_alls_and_reduces_experts_over_their_own_groups() -> None:
    w = load_workload("mixtral-8x7b").model_copy(update={"global_batch": 64})
    layout = ParallelLayout(tp=2, pp=2, ep=8, order=("tp", "cp", "pp", "dp"))
    step = simulate_step(Scenario(w, H100, layout, 64))
    parts = step.communication_s
    assert set(parts) >= {"tp", "ep", "pp", "dp", "edp"}, parts
    # the all-to-alls are most of this step's communication, as the projection says
    assert parts["ep"] > parts["tp"] + parts["pp"]
    assert step.step_time_s == pytest.approx(step.projected_step_time_s, rel=0.2)


def test_a_whole_step_with_context_parallelism_exchanges_k_and_v_beside_the_compute() -> None:
    w = load_workload("llama3-8b").model_copy(update={"global_batch": 16, "seq_len": 32768})
    layout = ParallelLayout(tp=2, cp=4, pp=2, order=("tp", "cp", "pp", "dp"))
    step = simulate_step(Scenario(w, H100, layout, 64))
    assert step.communication_s.get("cp", 0.0) > 0.0, step.communication_s
    # hidden behind the compute where it can be: the step is not longer than compute and exposed parts
    assert step.step_time_s == pytest.approx(step.projected_step_time_s, rel=0.2)


_ALONE = [
    ("all_reduce", "ring"),
    ("all_reduce", "hierarchical"),
    ("all_reduce", "nvls"),
    ("all_reduce", "double_binary_tree"),
    ("all_reduce", "rabenseifner"),
    ("all_reduce", "recursive_doubling"),
    ("all_gather", "ring"),
    ("reduce_scatter", "ring"),
    ("reduce_scatter", "pairwise"),
    ("all_to_all", "direct"),
    ("all_to_all", "pairwise"),
    ("broadcast", "binomial"),
]


# hierarchical needs two scale-up domains: not asked of one node
@pytest.mark.parametrize(
    ("op", "algo", "nodes"),
    [(op, algo, n) for op, algo in _ALONE for n in (1, 2, 3, 16) if (algo, n) != ("hierarchical", 1)],
)
def test_alone_on_an_idle_fabric_a_collective_takes_what_the_model_says(op: str, algo: str, nodes: int) -> None:
    r = run(
        SimConfig(
            H100,
            nodes,
            (Collective("c", op, 1 << 28, np.arange(nodes * 8)[None, :], algo=algo),),
            SimOptions(routing="spray"),
        )
    )
    c = r.collectives[0]
    assert c.time_s == pytest.approx(c.analytic_s, rel=0.01)


def test_pairwise_rounds_pair_by_xor_on_powers_of_two_and_shift_otherwise() -> None:
    # 2 domains of 8: XOR keeps rounds 1-7 inside the domain and sends every rank off it in rounds 8-15
    assert pairwise_rounds(16, 8, 8, xor=True) == {0: [(1, 7)], 8: [(8, 15)]}
    # shifted: round l < 8 sends the domain's last l ranks off it, round 8 + l its first 8 - l (the others are
    # home again): no round stays inside, and a round's cost is its host's busiest count of off-domain senders
    shifted = pairwise_rounds(16, 8, 8, xor=False)
    assert 0 not in shifted and sum(b - a + 1 for runs in shifted.values() for a, b in runs) == 15
    assert shifted[1] == [(1, 1), (15, 15)] and shifted[8] == [(8, 8)]
    # 3 domains: rounds 8-16 send every rank one or two domains on
    assert pairwise_rounds(24, 8, 8, xor=False)[8] == [(8, 16)]
    # a pairwise all-to-all on 2 nodes: two stages, 7 rounds on NVLink then 8 over the NICs; the NIC rounds
    # set its time
    r = run(SimConfig(H100, 2, (Collective("a", "all_to_all", 1 << 28, np.arange(16)[None, :], algo="pairwise"),)))
    stages = r.collectives[0].stages
    assert len(stages) == 2 and float(stages[1]["time_s"]) > 5 * float(stages[0]["time_s"]), stages


def test_a_two_plane_fabric_halves_each_plane_and_spreads_flows_over_both() -> None:
    data = RAIL2.model_dump()
    data["scale_out"]["planes"] = 2
    from commlens.topology import Topology

    two = Topology.model_validate(data)
    fab = build_fabric(two, 64)
    assert fab.describe()["planes"] == 2
    assert fab.switches[0] == 2 * build_fabric(RAIL2, 64).switches[0]
    nic = fab.capacity[fab.nic_off]
    assert nic == pytest.approx(build_fabric(RAIL2, 64).capacity[fab.nic_off] / 2)
    ring = Collective("ar", "all_reduce", 1 << 28, (np.arange(64) * 8)[None, :], algo="ring")
    one = run(SimConfig(RAIL2, 64, (ring,), SimOptions(routing="spray"))).collectives[0].time_s
    both = run(SimConfig(two, 64, (ring,), SimOptions(routing="spray"))).collectives[0].time_s
    assert both == pytest.approx(one, rel=1e-6)  # sprayed over both planes: the NIC's whole rate
    names, _ = fab.cable_names()
    assert any(".p1-" in n for n in names)


def test_without_sync_every_flow_has_its_own_rate() -> None:
    """Two rings share one uplink under ECMP: synchronised, a ring's every flow waits for its slowest; without
    sync the flows off the shared link finish early, so the link carries the same bytes but rates differ."""
    order = np.ravel(np.column_stack([np.arange(32), np.arange(32) + 32])) * 8
    ring = Collective("ring", "all_reduce", 1 << 28, order[None, :], algo="ring")
    synced = run(SimConfig(RAIL2, 64, (ring,), SimOptions(routing="ecmp", seed=3)))
    free = run(SimConfig(RAIL2, 64, (ring,), SimOptions(routing="ecmp", seed=3), sync=False))
    assert free.collectives[0].time_s <= synced.collectives[0].time_s * (1 + 1e-9)
    assert free.events > synced.events


def test_the_simulators_options_are_checked_in_one_record() -> None:
    """SimOptions refuses an out-of-range field by name, SimConfig a wrong field by name; the simulate shorthand
    runs the same simulation as run(SimConfig)."""
    for bad, field in (({"qps": 0}, "qps"), ({"channels": 33}, "channels"), ({"seed": -1}, "seed")):
        with pytest.raises(SimError, match=f"^{field}: must be between"):
            SimOptions(**bad)
    with pytest.raises(SimError, match="routing: 'adaptive'; known: ecmp, spray"):
        SimOptions(routing="adaptive")
    with pytest.raises(SimError, match="expected NAME:FACTOR"):
        SimOptions.parse(degrade=["leaf0-spine0"])
    opts = SimOptions.parse(routing="spray", qps=2, degrade=["leaf*:0.5"])
    assert opts.faults[0].factor == 0.5
    colls = [Collective("ar", "all_reduce", 2**28, np.arange(32).reshape(1, 32))]
    whole = run(SimConfig(H100, 4, tuple(colls), opts))
    short = simulate(H100, 4, colls, options=opts)
    assert whole.makespan_s == short.makespan_s and whole.qps == 2 and whole.routing == "spray"
    for bad_config, message in (
        ({"nodes": 0}, "^nodes: must be a whole number >= 1, got 0"),
        ({"top": True}, "^top: must be a whole number >= 1, got True"),
        ({"collectives": ()}, "^nothing to simulate: no collective given"),
        ({"collectives": colls}, "^collectives: must be a tuple of Collective"),
        ({"options": "spray"}, "^options: must be SimOptions, got str"),
    ):
        with pytest.raises(SimError, match=message):
            SimConfig(**{"topology": H100, "nodes": 4, "collectives": tuple(colls), **bad_config})  # type: ignore[arg-type]
