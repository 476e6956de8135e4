"""all_reduce, reduce_scatter and reduce algorithms against gloo's built-in collectives (property tests).

Every registered algorithm of the three ops runs on real gloo groups of 1 to 8
ranks (and on the sub-groups of harness.SUBGROUPS), with random lengths
(0, 1, fewer elements than ranks, lengths not divisible by the rank count),
dtypes and reductions; chunked algorithms also run with chunks of a few
elements, ``hierarchical`` with 1, 2, 3 and all ranks per host. Each case
compares with ``dist.all_reduce`` / ``dist.reduce_scatter_single`` /
``dist.reduce`` on the same inputs:

- integers, max, min and prod (inputs small whole numbers) must match exactly;
- float sum and avg (inputs uniform in [-1, 1]) must agree within
  ``p * eps(dtype) * sum_j |x_j|`` elementwise, p the group size: two
  summation orders of p terms each stay within (p-1) eps/2 sum |x_j| of the
  exact sum (also for avg, whose final division rounds once more);
- all_reduce leaves bitwise the same values on every rank, for every algorithm
  (float max/min inputs hold -0.0 and +0.0, whose order decides the bits).

Examples are derandomized (fixed seed) so the suite is deterministic.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist
from harness import Member, Pools, errors_of, group_ranks
from hypothesis import example, given, settings
from hypothesis import strategies as st

from commlens import algos
from commlens.algos import AlgoError

BUILTIN = {
    "sum": dist.ReduceOp.SUM,
    "prod": dist.ReduceOp.PRODUCT,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
    "avg": dist.ReduceOp.AVG,
}
INT_DTYPES = (torch.int32, torch.int64)
FLOAT_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}

# Derandomized and small: each example runs every algorithm once on up to 8 processes sharing the CPUs.
SETTINGS = settings(derandomize=True, max_examples=5, deadline=None, database=None)
CHEAP = settings(SETTINGS, max_examples=10)  # reduce_scatter and reduce: fewer variants per example


@st.composite
def cases(draw: st.DrawFn, world: int, max_len: int = 23) -> dict[str, Any]:
    """One test case: the group, a length, a dtype, a reduction, a seed, a chunk size in elements."""
    group = draw(st.sampled_from(["world", *(["odd", "tail"] if world > 1 else [])]))
    dtype = draw(st.sampled_from(INT_DTYPES + FLOAT_DTYPES))
    op = draw(st.sampled_from(["sum", "prod", "max", "min", *(["avg"] if dtype.is_floating_point else [])]))
    return {
        "group": group,
        "n": draw(st.integers(0, max_len)),
        "dtype": dtype,
        "op": op,
        "seed": draw(st.integers(0, 2**16)),
        "chunk": draw(st.integers(1, 5)),
    }


def _input(seed: int, rank: int, n: int, dtype: torch.dtype, op: str) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed * 1009 + rank)
    if op == "prod":  # |product| <= 2^8: exact in every dtype
        return torch.randint(-2, 3, (n,), generator=gen).to(dtype)
    if dtype.is_floating_point and op in ("max", "min"):  # mostly zeros of both signs: ties whose order shows
        whole = torch.randint(-2, 3, (n,), generator=gen).double() * (torch.rand(n, generator=gen) < 0.25)
        signs = torch.randint(0, 2, (n,), generator=gen).double() * 2 - 1
        return torch.where(whole == 0, torch.copysign(whole, signs), whole).to(dtype)
    if dtype.is_floating_point:
        return (torch.rand(n, generator=gen, dtype=torch.float64) * 2 - 1).to(dtype)
    return torch.randint(-100, 101, (n,), generator=gen).to(dtype)


def _variants(op: str, world: int, elem_bytes: int, chunk: int) -> list[tuple[str, str, dict[str, int]]]:
    """(label, algorithm, keyword arguments): every registered algorithm, chunked ones also chunked."""
    out = []
    for name in algos.algorithms_for(op):
        out.append((name, name, {}))
        if algos.get_algorithm(op, name).chunked:
            out.append((f"{name}/chunk{chunk}", name, {"chunk_bytes": chunk * elem_bytes}))
        if name == "hierarchical":
            out += [(f"{name}/local{k}", name, {"ranks_per_host": k}) for k in sorted({1, 2, 3, world})]
    for name in algos.algorithms_for(op, schemes=True):  # the schemes hierarchical picks, run by their own names
        if algos.get_algorithm(op, name).scheme_of is None:
            continue
        if name == "hierarchical_one_way":  # two hosts of the same size, at least 2 ranks each
            locals_ = [world // 2] if world % 2 == 0 and world >= 4 else []
        else:
            locals_ = sorted({1, 2, 3, world})
        out += [(f"{name}/local{k}", name, {"ranks_per_host": k}) for k in locals_]
        if algos.get_algorithm(op, name).chunked and locals_:
            out.append(
                (
                    f"{name}/local{locals_[-1]}/chunk{chunk}",
                    name,
                    {"ranks_per_host": locals_[-1], "chunk_bytes": chunk * elem_bytes},
                )
            )
    return out


def _abs_sum(x: torch.Tensor, m: Member) -> torch.Tensor:
    total = x.abs().double()
    dist.all_reduce(total, group=m.group)
    return total


def _all_reduce_case(m: Member, n: int, dtype: torch.dtype, op: str, seed: int, chunk: int) -> dict[str, Any]:
    x = _input(seed, m.global_rank, n, dtype, op)
    ref = x.clone()
    dist.all_reduce(ref, op=BUILTIN[op], group=m.group)
    got = {}
    for label, name, kwargs in _variants("all_reduce", m.size, x.element_size(), chunk):
        t = x.clone()
        algos.all_reduce(t, op, m.group, algo=name, **kwargs)
        got[label] = t
    return {"ref": ref, "abs_sum": _abs_sum(x, m), "got": got}


def _reduce_scatter_case(m: Member, n: int, dtype: torch.dtype, op: str, seed: int, chunk: int) -> dict[str, Any]:
    x = _input(seed, m.global_rank, n * m.size, dtype, op)
    ref = x.new_empty(n)
    dist.reduce_scatter_single(ref, x.clone(), op=BUILTIN[op], group=m.group)
    got, untouched = {}, {}
    for label, name, kwargs in _variants("reduce_scatter", m.size, x.element_size(), chunk):
        inp, out = x.clone(), x.new_empty(n)
        algos.reduce_scatter(out, inp, op, m.group, algo=name, **kwargs)
        got[label], untouched[label] = out, torch.equal(inp, x)
    return {"ref": ref, "abs_sum": _abs_sum(x, m)[m.rank * n : (m.rank + 1) * n], "got": got, "untouched": untouched}


def _reduce_case(m: Member, n: int, dtype: torch.dtype, op: str, seed: int, chunk: int, root: int) -> dict[str, Any]:
    x = _input(seed, m.global_rank, n, dtype, op)
    ref = x.clone()
    dist.reduce(ref, dst=root, op=BUILTIN[op], group=m.group)
    got = {}
    for label, name, kwargs in _variants("reduce", m.size, x.element_size(), chunk):
        t = x.clone()
        algos.run("reduce", t, root, op, m.group, algo=name, **kwargs)
        got[label] = t
    return {"ref": ref, "abs_sum": _abs_sum(x, m), "got": got}


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(BITS[t.element_size()])


def _check(label: str, got: torch.Tensor, ref: torch.Tensor, abs_sum: torch.Tensor, op: str, p: int) -> None:
    assert got.dtype == ref.dtype and got.shape == ref.shape, label
    if ref.dtype.is_floating_point and op in ("sum", "avg"):
        tol = p * torch.finfo(ref.dtype).eps * abs_sum
        err = (got.double() - ref.double()).abs()
        assert bool((err <= tol).all()), f"{label}: error {err.max():.3g} beyond the tolerance\n{got}\n{ref}"
    else:
        assert torch.equal(got, ref), f"{label}: {got} != {ref}"


def _run(pools: Pools, world: int, fn: Any, case: dict[str, Any], **extra: Any) -> list[dict[str, Any]]:
    return pools.run(
        world,
        fn,
        group=case["group"],
        n=case["n"],
        dtype=case["dtype"],
        op=case["op"],
        seed=case["seed"],
        chunk=case["chunk"],
        **extra,
    )


WORLDS = range(1, 9)
SMALL = {"group": "world", "dtype": torch.float32, "op": "sum", "seed": 1, "chunk": 1}


@pytest.mark.parametrize("world", WORLDS)
@SETTINGS
@given(data=st.data())
@example(data=None)  # the edge cases below, once per world size
def test_all_reduce_matches_builtin_and_is_identical_on_every_rank(pools: Pools, world: int, data: Any) -> None:
    todo = [dict(SMALL, n=n) for n in (0, 1, world - 1)] if data is None else [data.draw(cases(world))]
    for case in todo:
        results = _run(pools, world, _all_reduce_case, case)
        p = len(results)
        first = results[0]["got"]
        for r, res in enumerate(results):
            for label, got in res["got"].items():
                _check(f"rank {r} {label} {case}", got, res["ref"], res["abs_sum"], case["op"], p)
                assert torch.equal(_bits(got), _bits(first[label])), f"{label}: rank {r} differs from rank 0"


@pytest.mark.parametrize("world", WORLDS)
@CHEAP
@given(data=st.data())
@example(data=None)
def test_reduce_scatter_matches_builtin(pools: Pools, world: int, data: Any) -> None:
    todo = [dict(SMALL, n=n) for n in (0, 1)] if data is None else [data.draw(cases(world, max_len=5))]
    for case in todo:
        results = _run(pools, world, _reduce_scatter_case, case)
        for r, res in enumerate(results):
            for label, got in res["got"].items():
                _check(f"rank {r} {label} {case}", got, res["ref"], res["abs_sum"], case["op"], len(results))
                assert res["untouched"][label], f"{label} changed its input on rank {r}"


@pytest.mark.parametrize("world", WORLDS)
@CHEAP
@given(data=st.data())
@example(data=None)
def test_reduce_matches_builtin_on_the_root(pools: Pools, world: int, data: Any) -> None:
    if data is None:
        todo = [(dict(SMALL, n=n), group_ranks(world, "world")[-1]) for n in (0, 1, world - 1)]
    else:
        case = data.draw(cases(world))
        todo = [(case, data.draw(st.sampled_from(group_ranks(world, case["group"]))))]
    for case, root in todo:
        results = _run(pools, world, _reduce_case, case, root=root)
        res = results[group_ranks(world, case["group"]).index(root)]
        for label, got in res["got"].items():
            _check(f"root {root} {label} {case}", got, res["ref"], res["abs_sum"], case["op"], len(results))


def _bad_calls(m: Member) -> dict[str, str]:
    calls = {
        "unknown": lambda: algos.all_reduce(torch.ones(4), "sum", algo="no_such_algo"),
        "avg_int": lambda: algos.all_reduce(torch.ones(4, dtype=torch.int32), "avg", algo="ring"),
        "rs_size": lambda: algos.reduce_scatter(torch.empty(3), torch.ones(3 * m.size + 1), "sum", algo="ring"),
        "reduce_avg_int": lambda: algos.run("reduce", torch.ones(2, dtype=torch.int64), 0, "avg", algo="binomial"),
        "rs_unknown": lambda: algos.reduce_scatter(torch.empty(1), torch.ones(m.size), "sum", algo="bogus"),
    }
    return errors_of(calls, AlgoError)


def test_bad_input_through_the_public_calls_raises_algo_error(pools: Pools) -> None:
    for res in pools.run(3, _bad_calls):
        known = ", ".join(algos.algorithms_for("all_reduce"))
        assert res["unknown"] == f"unknown all_reduce algorithm 'no_such_algo'; known: {known}"
        assert "ring" in known and "rabenseifner" in known and "hierarchical" in known
        assert res["avg_int"] == "avg needs a floating-point tensor, got torch.int32"
        assert res["reduce_avg_int"] == "avg needs a floating-point tensor, got torch.int64"
        assert res["rs_size"] == "input must hold 3 x 3 = 9 elements, got 10"
        assert res["rs_unknown"].startswith("unknown reduce_scatter algorithm 'bogus'; known: ring, recursive_halving")


def test_public_reduce_and_broadcast_stay_callable() -> None:
    # the family modules are bcast.py and rootreduce.py, so loading them leaves the public functions in place
    algos.algorithms_for("reduce")
    assert callable(algos.reduce) and callable(algos.broadcast)


def _two_hosts_case(m: Member, n: int, dtype: torch.dtype, op: str, chunk_bytes: int | None) -> dict[str, Any]:
    from commlens.algos import allreduce
    from commlens.algos.base import Comm, Options

    ranks_per_host = m.size // 2
    x = _input(7, m.global_rank, n, dtype, op)
    ref = x.clone()
    dist.all_reduce(ref, op=BUILTIN[op], group=m.group)
    t = x.clone()
    algos.all_reduce(t, op, m.group, algo="hierarchical", ranks_per_host=ranks_per_host, chunk_bytes=chunk_bytes)
    routed = allreduce._scheme(Comm.of(m.group), x, Options(chunk_bytes, ranks_per_host)) == "hierarchical_one_way"
    return {"ref": ref, "got": t, "abs_sum": _abs_sum(x, m), "routed": routed}


@pytest.mark.parametrize("world", [4, 6])
def test_hierarchical_two_hosts_routes_one_way_and_matches_builtin(pools: Pools, world: int) -> None:
    """Two hosts on gloo: the cross-host phase sends one direction per connection (forwarding through a
    neighbour); results match the built-in and are bitwise equal on every rank, with pieces or without."""
    ranks_per_host = world // 2
    n = 2 * ranks_per_host * (allreduce_min_elems() + 5) + 3  # uneven shards and halves
    for dtype, op, chunk_bytes in [
        (torch.float32, "sum", None),
        (torch.float32, "max", 20000),
        (torch.int32, "sum", 4096),
        (torch.float64, "avg", 3 * 8192 + 8),
    ]:
        results = pools.run(world, _two_hosts_case, n=n, dtype=dtype, op=op, chunk_bytes=chunk_bytes)
        for r, res in enumerate(results):
            assert res["routed"], f"rank {r}: the one-way route was not taken for n={n}"
            _check(f"rank {r} {dtype} {op} chunk {chunk_bytes}", res["got"], res["ref"], res["abs_sum"], op, world)
            assert torch.equal(_bits(res["got"]), _bits(results[0]["got"])), f"rank {r} differs from rank 0"


def allreduce_min_elems() -> int:
    """Elements of a 4-byte half shard at the routing threshold (float64 halves are then twice over it)."""
    from commlens.ops import HIERARCHICAL_ONE_WAY_MIN_BYTES

    return HIERARCHICAL_ONE_WAY_MIN_BYTES // 4  # half a shard of float32; float64 halves are then twice the threshold


def _hier_sizes_case(m: Member, dtype: torch.dtype, op: str) -> dict[str, Any]:
    """hierarchical on both sides of the leaders threshold, 2 and 3 ranks per host (a smaller last host)."""
    from commlens.ops import HIERARCHICAL_LEADERS_MAX_BYTES as LEADERS_MAX_BYTES

    out = {}
    elem = torch.empty(0, dtype=dtype).element_size()
    for n in (LEADERS_MAX_BYTES // elem - 1, LEADERS_MAX_BYTES // elem + 3):
        x = _input(n, m.global_rank, n, dtype, op)
        ref = x.clone()
        dist.all_reduce(ref, op=BUILTIN[op], group=m.group)
        for k in (2, 3):
            t = x.clone()
            algos.all_reduce(t, op, m.group, algo="hierarchical", ranks_per_host=k)
            out[(n, k)] = (t, ref, _abs_sum(x, m))
    return out


@pytest.mark.parametrize("world", [3, 5, 8])
def test_hierarchical_both_sides_of_the_leaders_threshold(pools: Pools, world: int) -> None:
    for dtype, op in ((torch.float32, "sum"), (torch.int64, "max")):
        results = pools.run(world, _hier_sizes_case, dtype=dtype, op=op)
        for r, res in enumerate(results):
            for (n, k), (got, ref, abs_sum) in res.items():
                _check(f"rank {r} n={n} local {k} {dtype} {op}", got, ref, abs_sum, op, world)
                assert torch.equal(_bits(got), _bits(results[0][(n, k)][0])), f"n={n} local {k}: rank {r} differs"


def test_hierarchical_paths_by_layout() -> None:
    """Which phases hierarchical runs: one host or one rank per host stay rings; several full power-of-two
    hosts take the halving; a smaller last host or 3 ranks per host keep the rings."""
    from commlens.algos.allreduce import _hosts
    from commlens.ops import hierarchical_all_reduce_scheme

    def halving(p: int, ranks_per_host: int) -> bool:  # a large buffer on full-duplex pairs, as the library asks
        hosts = _hosts(p, ranks_per_host)
        return (
            hierarchical_all_reduce_scheme(
                1 << 20, 1 << 16, len(hosts), ranks_per_host, len(hosts[-1]) == ranks_per_host, False
            )
            == "rabenseifner"
        )

    assert not halving(4, 4) and not halving(4, 1)
    assert halving(4, 2) and halving(8, 2) and halving(8, 4)
    assert not halving(6, 2) and not halving(6, 3) and not halving(5, 2)


def _one_way_refusal(m: Member) -> dict[str, str]:
    calls = {
        f"local{k}": (
            lambda k=k: algos.all_reduce(torch.ones(8), "sum", m.group, algo="hierarchical_one_way", ranks_per_host=k)
        )
        for k in (1, 2, 3)
    }
    return errors_of(calls, AlgoError)


def test_the_one_way_scheme_by_name_refuses_other_layouts(pools: Pools) -> None:
    for res in pools.run(6, _one_way_refusal):
        assert res["local1"] == (
            "hierarchical_one_way needs two hosts of the same size, at least 2 ranks each; got 6 ranks at 1 per host"
        )
        assert res["local2"].endswith("got 6 ranks at 2 per host") and res["local3"] == "no error"
