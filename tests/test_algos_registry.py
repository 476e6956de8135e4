"""Every algorithm commlens implements has a cost model under the same name, and the model runs on the local box."""

from __future__ import annotations

import pytest

from commlens.algos import ALGO_OPS, algorithms_for, get_algorithm
from commlens.model import predict
from commlens.model.algorithms import ALGORITHMS, MODELS
from commlens.topology import load_topology

REGISTERED = [(op, name) for op in ALGO_OPS for name in algorithms_for(op)]


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
    if name == "hierarchical":  # two-level: needs hosts; 2 hosts x 2 ranks, as the emulated cluster runs it
        local, shape = load_topology("emulated-cluster"), {"nodes": 2, "ranks_per_node": 2}
    else:
        local, shape = load_topology("local-cpu"), {"nodes": 1, "ranks_per_node": 4}
    times = [predict(local, op, size, algo=name, **shape).time_s for size in (0, 4096, 1 << 20, 64 << 20)]
    assert all(t > 0 for t in times)
    assert times == sorted(times), f"{op}/{name}: predicted time falls as the size grows: {times}"


def test_model_and_library_share_the_one_way_routing_threshold() -> None:
    """The cost model predicts hierarchical's two-host route from the same threshold the library routes at."""
    from commlens.algos.allreduce import ONE_WAY_MIN_BYTES as library
    from commlens.model.algorithms import ONE_WAY_MIN_BYTES as model

    assert library == model


def test_model_and_library_share_the_leaders_threshold() -> None:
    from commlens.algos.allreduce import LEADERS_MAX_BYTES as library
    from commlens.model.algorithms import LEADERS_MAX_BYTES as model

    assert library == model
