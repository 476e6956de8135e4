"""Every algorithm commlens implements has a cost model under the same name, and the model runs on the local box."""

from __future__ import annotations

import pytest

from commlens.algos import ALGO_OPS, algorithms_for, get_algorithm
from commlens.model import predict
from commlens.model.algorithms import ALGORITHMS, MODELS
from commlens.topology import load_topology

REGISTERED = [(op, name) for op in ALGO_OPS for name in algorithms_for(op, schemes=True)]


def test_the_library_registers_algorithms_for_every_op_it_names() -> None:
    for op in ALGO_OPS:
        assert algorithms_for(op), f"no {op} algorithm registered"


@pytest.mark.parametrize(("op", "name"), REGISTERED, ids=[f"{op}-{name}" for op, name in REGISTERED])
def test_every_registered_algorithm_has_a_cost_model(op: str, name: str) -> None:
    assert name in ALGORITHMS, f"{op}/{name}: add the name to commlens.model.algorithms.ALGORITHMS"
    assert name in MODELS[op], f"{op}/{name}: add its cost formula to commlens.model.algorithms.MODELS[{op!r}]"
    assert get_algorithm(op, name).summary


@pytest.mark.parametrize(("op", "name"), REGISTERED, ids=[f"{op}-{name}" for op, name in REGISTERED])
def test_every_model_predicts_on_the_local_box_at_four_ranks_and_grows_with_size(op: str, name: str) -> None:
    if name.startswith("hierarchical"):  # two-level: needs hosts; 2 hosts x 2 ranks, as the emulated cluster runs it
        local, shape = load_topology("emulated-cluster"), {"nodes": 2, "ranks_per_host": 2}
    else:
        local, shape = load_topology("local-cpu"), {"nodes": 1, "ranks_per_host": 4}
    times = [predict(local, op, size, algo=name, **shape).time_s for size in (0, 4096, 1 << 20, 64 << 20)]
    assert all(t > 0 for t in times)
    assert times == sorted(times), f"{op}/{name}: predicted time falls as the size grows: {times}"


def test_the_schemes_hierarchical_picks_are_registered_as_schemes_with_models_of_their_own() -> None:
    """``all`` and the model's ``auto`` leave them to ``hierarchical``; each has its own cost formula."""
    from commlens.model.algorithms import SCHEMES, auto_candidates
    from commlens.model.algorithms import algorithms_for as modelled

    schemes = {n for n in algorithms_for("all_reduce", schemes=True) if get_algorithm("all_reduce", n).scheme_of}
    assert schemes == set(SCHEMES) == {"hierarchical_ring", "hierarchical_leaders", "hierarchical_one_way"}
    assert all(get_algorithm("all_reduce", n).scheme_of == "hierarchical" for n in schemes)
    assert not schemes & set(algorithms_for("all_reduce")) and "hierarchical" in algorithms_for("all_reduce")
    assert not schemes & set(modelled("all_reduce")) and not schemes & set(auto_candidates("all_reduce"))
    assert len({MODELS["all_reduce"][n] for n in (*schemes, "hierarchical", "rabenseifner")}) == 5


@pytest.mark.parametrize("pair_full_duplex", [False, True])
def test_model_prices_hierarchical_as_the_scheme_the_shared_rule_picks(pair_full_duplex: bool) -> None:
    """The one rule (commlens.ops.hierarchical_all_reduce_scheme) decides for the library and the model: on
    both sides of each threshold the model's hierarchical costs what the named scheme it picks costs."""
    from commlens.ops import (
        HIERARCHICAL_LEADERS_MAX_BYTES,
        HIERARCHICAL_ONE_WAY_MIN_BYTES,
        hierarchical_all_reduce_scheme,
    )
    from commlens.topology import topology_from_dict, topology_to_dict

    d = topology_to_dict(load_topology("emulated-cluster"))
    d["scale_out"]["pair_full_duplex"] = pair_full_duplex
    emu = topology_from_dict(d)
    seen = set()
    for nodes, ranks_per_host in ((2, 2), (2, 3), (4, 2), (3, 2)):
        one_way = HIERARCHICAL_ONE_WAY_MIN_BYTES * 2 * ranks_per_host
        for size in (
            HIERARCHICAL_LEADERS_MAX_BYTES - 8,
            HIERARCHICAL_LEADERS_MAX_BYTES,
            one_way - 8 * ranks_per_host,
            one_way,
        ):
            scheme = hierarchical_all_reduce_scheme(
                size, size / ranks_per_host / 2, nodes, ranks_per_host, True, not pair_full_duplex
            )
            seen.add(scheme)
            got = predict(emu, "all_reduce", size, algo="hierarchical", nodes=nodes, ranks_per_host=ranks_per_host)
            want = predict(emu, "all_reduce", size, algo=scheme, nodes=nodes, ranks_per_host=ranks_per_host)
            assert got.time_s == want.time_s and got.terms == want.terms, (nodes, ranks_per_host, size, scheme)
    expected = {"hierarchical_leaders", "rabenseifner", "hierarchical_ring"}
    assert seen == (expected if pair_full_duplex else expected | {"hierarchical_one_way"})


def test_the_shared_rule_picks_by_size_layout_and_transport() -> None:
    from commlens.ops import TRANSPORTS, transport
    from commlens.ops import hierarchical_all_reduce_scheme as pick

    big = 1 << 20
    assert pick(big - 1, big / 8, 2, 4, True, True) == "hierarchical_one_way"
    assert pick(big, big / 8, 2, 4, True, False) == "rabenseifner"
    assert pick(100, 12, 2, 4, True, True) == "hierarchical_leaders"
    assert pick(big, big / 6, 2, 3, True, False) == "hierarchical_ring"  # 3 ranks per host: no halving
    assert pick(big, big / 4, 3, 2, False, True) == "hierarchical_ring"  # a smaller last host
    assert pick(100, 50, 1, 4, True, True) == "hierarchical_ring"  # one host: the ring
    assert pick(100, 50, 4, 1, True, True) == "hierarchical_ring"  # one rank per host: the ring across hosts
    assert transport("GLOO") is TRANSPORTS["gloo"] and transport("gloo").half_duplex_pairs
    assert not transport("nccl").half_duplex_pairs and not transport("some_new_backend").half_duplex_pairs


def test_ranks_per_host_comes_from_the_caller_not_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from commlens.algos import AlgoError, Options

    monkeypatch.setenv("COMMLENS_LOCAL_SIZE", "2")  # what the launcher or an old worker may leave behind
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert Options().ranks_per_host_in(4) == 4  # not told: one host
    assert Options(ranks_per_host=2).ranks_per_host_in(4) == 2
    assert Options(ranks_per_host=8).ranks_per_host_in(4) == 4  # at most the group
    with pytest.raises(AlgoError, match="^ranks_per_host must be positive, got 0$"):
        Options(ranks_per_host=0)
