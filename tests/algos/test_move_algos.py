"""all_gather, all_to_all and broadcast algorithms against gloo's built-in collectives (property tests).

Every registered algorithm of the three ops runs on real gloo groups of 1 to 8
ranks and on the sub-groups of harness.SUBGROUPS, with random block lengths
(0, 1, fewer elements than ranks, odd lengths), every dtype gloo's built-ins
move, and random roots; chunked algorithms also run with chunks of a few
bytes (not always a whole number of elements). These ops only move data, so
each result must be bitwise the same as ``dist.all_gather_single`` /
``dist.all_to_all_single`` / ``dist.broadcast`` on the same input: inputs are
random bit patterns (NaNs, infinities and -0.0 included) and results are
compared as bytes. The in-place all-gather phases that all_reduce reuses run
on uneven and empty blocks, and every algorithm is also called directly on a
one-rank group.

Examples are derandomized (fixed seed) so the suite is deterministic.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
import torch.distributed as dist
from harness import Member, Pools, errors_of, group_ranks
from hypothesis import example, given, settings
from hypothesis import strategies as st

from commlens import algos
from commlens.algos import AlgoError, Comm, Options
from commlens.algos.allgather import doubling_all_gather_inplace, ring_all_gather_inplace

# Every dtype gloo's all_gather, all_to_all and broadcast take (int16 they refuse).
DTYPES = (
    torch.bool,
    torch.int8,
    torch.uint8,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
)
SETTINGS = settings(derandomize=True, max_examples=4, deadline=None, database=None)
WORLDS = range(1, 9)
SENTINEL = 0xA5  # the byte every output starts as


def _random(seed: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    """``n`` elements of random bits (bool: 0 or 1), the same for the same seed."""
    gen = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=gen, dtype=torch.uint8).bool()
    nbytes = n * torch.empty(0, dtype=dtype).element_size()
    return torch.randint(0, 256, (nbytes,), generator=gen, dtype=torch.uint8).view(dtype)


def _sentinel(n: int, dtype: torch.dtype) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.ones(n, dtype=torch.bool)
    return torch.full((n * torch.empty(0, dtype=dtype).element_size(),), SENTINEL, dtype=torch.uint8).view(dtype)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def _variants(op: str, chunk_bytes: int) -> list[tuple[str, str, dict[str, int]]]:
    """(label, algorithm, keyword arguments): every registered algorithm, chunked ones also chunked."""
    out = []
    for name in algos.algorithms_for(op):
        out.append((name, name, {}))
        if algos.get_algorithm(op, name).chunked:
            out.append((f"{name}/chunk{chunk_bytes}B", name, {"chunk_bytes": chunk_bytes}))
    return out


# ---- per-rank case functions (run in the pool's workers) ---------------------------------------


def _all_gather_case(m: Member, n: int, dtype: torch.dtype, seed: int, chunk_bytes: int) -> dict[str, Any]:
    x = _random(seed * 1009 + m.global_rank, n, dtype)
    ref = _sentinel(n * m.size, dtype)
    dist.all_gather_single(ref, x.clone(), group=m.group)
    got, aliased, untouched = {}, {}, {}
    for label, name, kwargs in _variants("all_gather", chunk_bytes):
        inp, out = x.clone(), _sentinel(n * m.size, dtype)
        algos.all_gather(out, inp, m.group, algo=name, **kwargs)
        got[label], untouched[label] = out, _same_bits(inp, x)
        out = _sentinel(n * m.size, dtype)  # input already in place, as torch allows
        own = out[m.rank * n : (m.rank + 1) * n]
        own.copy_(x)
        algos.all_gather(out, own, m.group, algo=name, **kwargs)
        aliased[label] = out
    return {"ref": ref, "got": got, "aliased": aliased, "untouched": untouched}


def _inplace_case(
    m: Member, lengths: list[int], dtype: torch.dtype, seed: int, chunk_bytes: int | None
) -> dict[str, bool]:
    starts = [sum(lengths[:k]) for k in range(len(lengths) + 1)]
    bounds = list(itertools.pairwise(starts))
    whole = _random(seed, starts[-1], dtype)  # every rank knows what the gathered buffer must hold
    comm, ok = Comm.of(m.group), {}
    for name, phase in (("ring", ring_all_gather_inplace), ("doubling", doubling_all_gather_inplace)):
        buf = _sentinel(starts[-1], dtype)
        a, z = bounds[m.rank]
        buf[a:z] = whole[a:z]
        phase(comm, buf, bounds, Options(chunk_bytes=chunk_bytes))
        ok[name] = _same_bits(buf, whole)
    return ok


def _all_to_all_case(m: Member, n: int, dtype: torch.dtype, seed: int, chunk_bytes: int) -> dict[str, Any]:
    x = _random(seed * 1009 + m.global_rank, n * m.size, dtype)
    ref = _sentinel(n * m.size, dtype)
    dist.all_to_all_single(ref, x.clone(), group=m.group)
    got, untouched = {}, {}
    for label, name, kwargs in _variants("all_to_all", chunk_bytes):
        inp, out = x.clone(), _sentinel(n * m.size, dtype)
        algos.all_to_all(out, inp, m.group, algo=name, **kwargs)
        got[label], untouched[label] = out, _same_bits(inp, x)
    return {"ref": ref, "got": got, "untouched": untouched}


def _broadcast_case(m: Member, n: int, dtype: torch.dtype, seed: int, chunk_bytes: int, root: int) -> dict[str, Any]:
    # only the root's data is random; the others start from their own garbage
    x = _random(seed * 1009 + m.global_rank, n, dtype)
    ref = x.clone()
    dist.broadcast(ref, root, group=m.group)
    got = {}
    for label, name, kwargs in _variants("broadcast", chunk_bytes):
        t = x.clone()
        algos.broadcast(t, root, m.group, algo=name, **kwargs)
        got[label] = t
    return {"ref": ref, "got": got}


def _direct_one_rank(m: Member, n: int) -> dict[str, bool]:
    """Every algorithm function called straight on a one-rank group (no public call in between)."""
    comm, ok = Comm(m.group, (m.global_rank,), 0), {}
    x = _random(n, n, torch.float32)
    for op in ("all_gather", "all_to_all", "broadcast"):
        for name in algos.algorithms_for(op):
            fn = algos.get_algorithm(op, name).fn
            for opts in (Options(), Options(chunk_bytes=4)):
                if op == "broadcast":
                    t = x.clone()
                    fn(comm, t, 0, opts)
                else:
                    t = _sentinel(n, torch.float32)
                    fn(comm, t, x.clone(), opts)
                ok[f"{op}/{name}/{opts.chunk_bytes}"] = _same_bits(t, x)
    return ok


# ---- strategies and checks ----------------------------------------------------------------------


@st.composite
def cases(draw: st.DrawFn, world: int, max_len: int = 9) -> dict[str, Any]:
    """One case: the group, a block length, a dtype, a seed, a chunk size in bytes (1..12)."""
    return {
        "group": draw(st.sampled_from(["world", *(["odd", "tail"] if world > 1 else [])])),
        "n": draw(st.integers(0, max_len)),
        "dtype": draw(st.sampled_from(DTYPES)),
        "seed": draw(st.integers(0, 2**16)),
        "chunk_bytes": draw(st.integers(1, 12)),
    }


def _edges(world: int) -> list[dict[str, Any]]:
    """Lengths 0, 1 and world-1 on the whole world and on a sub-group whose rank 0 is global rank 1."""
    groups = ["world", "tail"] if world > 1 else ["world"]
    return [
        {"group": g, "n": n, "dtype": torch.float32, "seed": 1, "chunk_bytes": 4}
        for g in groups
        for n in sorted({0, 1, world - 1})
    ]


def _run(pools: Pools, world: int, fn: Any, case: dict[str, Any], **extra: Any) -> list[dict[str, Any]]:
    return pools.run(
        world,
        fn,
        group=case["group"],
        n=case["n"],
        dtype=case["dtype"],
        seed=case["seed"],
        chunk_bytes=case["chunk_bytes"],
        **extra,
    )


def _expect(results: list[dict[str, Any]], case: dict[str, Any], *, ops: str, extra: tuple[str, ...] = ()) -> None:
    for r, res in enumerate(results):
        labels = {label for label, _, _ in _variants(ops, case["chunk_bytes"])}
        assert set(res["got"]) == labels
        for key in ("got", *extra):
            for label, got in res[key].items():
                assert _same_bits(got, res["ref"]), f"rank {r} {key} {label} {case}:\n{got}\n!= {res['ref']}"
        for label, same in res.get("untouched", {}).items():
            assert same, f"{label} changed its input on rank {r} {case}"


# ---- tests --------------------------------------------------------------------------------------


@pytest.mark.parametrize("world", WORLDS)
@SETTINGS
@given(data=st.data())
@example(data=None)  # the edge cases, once per world size
def test_all_gather_matches_builtin_bitwise(pools: Pools, world: int, data: Any) -> None:
    for case in _edges(world) if data is None else [data.draw(cases(world))]:
        _expect(_run(pools, world, _all_gather_case, case), case, ops="all_gather", extra=("aliased",))


@pytest.mark.parametrize("world", WORLDS)
@SETTINGS
@given(data=st.data())
@example(data=None)
def test_all_to_all_matches_builtin_bitwise(pools: Pools, world: int, data: Any) -> None:
    for case in _edges(world) if data is None else [data.draw(cases(world))]:
        _expect(_run(pools, world, _all_to_all_case, case), case, ops="all_to_all")


@pytest.mark.parametrize("world", WORLDS)
@SETTINGS
@given(data=st.data())
@example(data=None)
def test_broadcast_matches_builtin_bitwise_from_any_root(pools: Pools, world: int, data: Any) -> None:
    if data is None:  # every root of the whole world, and the sub-group's last rank
        todo = [(c, root) for c in _edges(world) for root in group_ranks(world, c["group"])]
    else:
        case = data.draw(cases(world, max_len=40))
        todo = [(case, data.draw(st.sampled_from(group_ranks(world, case["group"]))))]
    for case, root in todo:
        _expect(_run(pools, world, _broadcast_case, case, root=root), case, ops="broadcast")


@pytest.mark.parametrize("world", WORLDS)
@SETTINGS
@given(data=st.data())
def test_inplace_all_gather_phases_take_uneven_and_empty_blocks(pools: Pools, world: int, data: Any) -> None:
    group = data.draw(st.sampled_from(["world", *(["odd", "tail"] if world > 1 else [])]))
    size = len(group_ranks(world, group))
    lengths = data.draw(st.lists(st.integers(0, 5), min_size=size, max_size=size))
    chunk_bytes = data.draw(st.sampled_from([None, 1, 3, 8]))
    dtype = data.draw(st.sampled_from(DTYPES))
    for res in pools.run(
        world, _inplace_case, group=group, lengths=lengths, dtype=dtype, seed=7, chunk_bytes=chunk_bytes
    ):
        assert res == {"ring": True, "doubling": True}, (group, lengths, chunk_bytes, dtype)


def test_chain_broadcast_pipelines_big_buffers_in_default_chunks(pools: Pools) -> None:
    # 150,000 float64 = 1.2 MB: three default chunks of 512 KiB, the last one short; every root of 5 ranks
    for root in range(5):
        case = {"group": "world", "n": 150_000, "dtype": torch.float64, "seed": 3, "chunk_bytes": 400_000}
        _expect(_run(pools, 5, _broadcast_case, case, root=root), case, ops="broadcast")


@pytest.mark.parametrize("world,group", [(1, "world"), (2, "odd"), (3, "odd")])
def test_every_algorithm_runs_directly_on_one_rank(pools: Pools, world: int, group: str) -> None:
    for n in (0, 5):
        (res,) = pools.run(world, _direct_one_rank, group=group, n=n)
        assert res and all(res.values()), res


def test_registry_lists_the_algorithms_with_one_line_summaries() -> None:
    assert algos.algorithms_for("all_gather") == ("ring", "recursive_doubling", "bruck")
    assert algos.algorithms_for("all_to_all") == ("pairwise", "direct", "bruck")
    assert algos.algorithms_for("broadcast") == ("binomial", "chain", "scatter_allgather")
    chunked = {
        (op, name)
        for op in ("all_gather", "all_to_all", "broadcast")
        for name in algos.algorithms_for(op)
        if algos.get_algorithm(op, name).chunked
    }
    assert chunked == {("all_gather", "ring"), ("broadcast", "chain"), ("broadcast", "scatter_allgather")}
    for op in ("all_gather", "all_to_all", "broadcast"):
        for name in algos.algorithms_for(op):
            summary = algos.get_algorithm(op, name).summary
            assert summary and summary != name and "\n" not in summary, (op, name, summary)


def _bad_calls(m: Member) -> dict[str, str]:
    p = m.size
    calls = {
        "ag_size": lambda: algos.all_gather(torch.empty(2 * p + 1), torch.ones(2), m.group, algo="ring"),
        "ag_dtype": lambda: algos.all_gather(torch.empty(2 * p), torch.ones(2, dtype=torch.int32), m.group),
        "ag_unknown": lambda: algos.all_gather(torch.empty(p), torch.ones(1), m.group, algo="nope"),
        "ag_strided": lambda: algos.all_gather(torch.empty(2 * p, 2)[:, 0], torch.ones(2), m.group),
        "a2a_size": lambda: algos.all_to_all(torch.empty(p), torch.ones(p + 1), m.group, algo="bruck"),
        "a2a_split": lambda: algos.all_to_all(torch.empty(p + 1), torch.ones(p + 1), m.group),
        "a2a_dtype": lambda: algos.all_to_all(torch.empty(p, dtype=torch.float64), torch.ones(p), m.group),
        "bc_src": lambda: algos.run("broadcast", torch.ones(3), 0, m.group, algo="chain"),
        "bc_unknown": lambda: algos.run("broadcast", torch.ones(3), m.global_rank, m.group, algo="nope"),
        "bc_chunk": lambda: algos.run("broadcast", torch.ones(3), 1, m.group, algo="chain", chunk_bytes=0),
    }
    return errors_of(calls, AlgoError)


def test_bad_input_through_the_public_calls_raises_algo_error(pools: Pools) -> None:
    # the group of global ranks 1 and 3 of 4: rank 0 is not in it
    for res in pools.run(4, _bad_calls, group="odd"):
        assert res["ag_size"] == "output must hold 2 x 2 = 4 elements, got 5"
        assert res["ag_dtype"] == "output is torch.float32 but input is torch.int32"
        assert res["ag_unknown"] == "unknown all_gather algorithm 'nope'; known: ring, recursive_doubling, bruck"
        assert res["ag_strided"] == "output must be contiguous"
        assert res["a2a_size"] == (
            "all_to_all needs input and output of equal length divisible by 2 ranks, got 3 and 2"
        )
        assert res["a2a_split"] == (
            "all_to_all needs input and output of equal length divisible by 2 ranks, got 3 and 3"
        )
        assert res["a2a_dtype"] == "output is torch.float64 but input is torch.float32"
        assert res["bc_src"] == "src=0 is not a rank of the group (ranks [1, 3])"
        assert res["bc_unknown"] == ("unknown broadcast algorithm 'nope'; known: binomial, chain, scatter_allgather")
        assert res["bc_chunk"] == "chunk_bytes must be positive, got 0"
