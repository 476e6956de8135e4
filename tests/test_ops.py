"""The op catalog against nccl-tests' own definitions (size, counts, busBW factors, names)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from commlens.ops import OP_NAMES, OPS, UnknownOpError, get_op, parse_ops

# nccl-tests <op>GetBw: busBW / algBW as a function of the rank count n.
NCCL_TESTS_FACTORS = {
    "all_reduce": lambda n: Fraction(2 * (n - 1), n),
    "all_gather": lambda n: Fraction(n - 1, n),
    "reduce_scatter": lambda n: Fraction(n - 1, n),
    "all_to_all": lambda n: Fraction(n - 1, n),
    "gather": lambda n: Fraction(n - 1, n),
    "scatter": lambda n: Fraction(n - 1, n),
    "broadcast": lambda n: Fraction(1),
    "reduce": lambda n: Fraction(1),
    "sendrecv": lambda n: Fraction(1),
}


@pytest.mark.parametrize("op", sorted(NCCL_TESTS_FACTORS))
@pytest.mark.parametrize("n", range(1, 9))
def test_busbw_factor_is_the_nccl_tests_formula(op: str, n: int) -> None:
    expected = float(NCCL_TESTS_FACTORS[op](n))
    assert OPS[op].busbw_factor(n) == pytest.approx(expected, abs=1e-15)
    # busBW = algBW x factor, algBW = size / time
    assert OPS[op].algbw(4096, 2e-3) == pytest.approx(4096 / 2e-3)
    assert OPS[op].busbw(4096, 2e-3, n) == pytest.approx(4096 / 2e-3 * expected)


def test_every_payload_op_has_a_factor_and_barrier_has_no_bandwidth() -> None:
    assert set(NCCL_TESTS_FACTORS) | {"barrier"} == set(OP_NAMES)
    assert OPS["barrier"].busbw_factor(4) == 0.0
    with pytest.raises(ValueError, match="world_size"):
        OPS["all_reduce"].busbw_factor(0)


@pytest.mark.parametrize(
    "op, size, elem, n, size_bytes, count, send, recv",
    [
        # whole-buffer ops: count = size / elem (integer division)
        ("all_reduce", 1024, 4, 4, 1024, 256, 256, 256),
        ("all_reduce", 10, 4, 4, 8, 2, 2, 2),
        ("broadcast", 10, 2, 3, 10, 5, 5, 5),
        ("reduce", 1000, 8, 3, 1000, 125, 125, 125),
        ("sendrecv", 7, 4, 2, 4, 1, 1, 1),
        # per-rank ops: count = (size / elem) / n per rank, size = count x elem x n
        ("all_gather", 1024, 4, 4, 1024, 64, 64, 256),
        ("all_gather", 1000, 4, 3, 996, 83, 83, 249),
        ("all_gather", 10, 4, 4, 0, 0, 0, 0),  # 2 elements cannot be split over 4 ranks
        ("reduce_scatter", 1024, 4, 3, 1020, 85, 255, 85),
        ("reduce_scatter", 4096, 2, 8, 4096, 256, 2048, 256),
        ("all_to_all", 1024, 8, 3, 1008, 42, 126, 126),
        ("gather", 100, 1, 3, 99, 33, 33, 99),
        ("scatter", 100, 1, 3, 99, 33, 99, 33),
        ("all_gather", 64, 4, 1, 64, 16, 16, 16),
    ],
)
def test_plan_size_rounds_as_nccl_tests(
    op: str, size: int, elem: int, n: int, size_bytes: int, count: int, send: int, recv: int
) -> None:
    plan = OPS[op].plan_size(size, elem, n)
    assert (plan.size_bytes, plan.count, plan.send_count, plan.recv_count) == (size_bytes, count, send, recv)
    assert plan.requested_bytes == size
    assert plan.rounded == (size_bytes != size)


def test_barrier_has_no_payload() -> None:
    plan = OPS["barrier"].plan_size(1024, 4, 4)
    assert (plan.size_bytes, plan.count, plan.send_count, plan.recv_count) == (0, 0, 0, 0)


def test_plan_size_refuses_impossible_inputs() -> None:
    with pytest.raises(ValueError, match="size"):
        OPS["all_reduce"].plan_size(-1, 4, 2)
    with pytest.raises(ValueError):
        OPS["all_reduce"].plan_size(64, 4, 0)


@pytest.mark.parametrize(
    "name, canonical",
    [
        ("allreduce", "all_reduce"),
        ("AllReduce", "all_reduce"),
        ("all-gather", "all_gather"),
        ("allgather", "all_gather"),
        ("reducescatter", "reduce_scatter"),
        ("alltoall", "all_to_all"),
        ("all_to_all", "all_to_all"),
        (" sendrecv ", "sendrecv"),
        ("barrier", "barrier"),
    ],
)
def test_nccl_tests_spellings_are_accepted(name: str, canonical: str) -> None:
    assert get_op(name).name == canonical


def test_unknown_op_is_named_in_the_error() -> None:
    with pytest.raises(UnknownOpError, match="'allreduce2'"):
        get_op("allreduce2")
    with pytest.raises(UnknownOpError, match="'bogus'"):
        parse_ops("all_reduce,bogus")
    with pytest.raises(UnknownOpError):
        parse_ops(" , ")


def test_parse_ops_all_list_and_duplicates() -> None:
    assert [s.name for s in parse_ops("all")] == [n for n in OP_NAMES if n != "barrier"]
    assert [s.name for s in parse_ops("alltoall,allreduce,all_reduce")] == ["all_to_all", "all_reduce"]
    assert [s.name for s in parse_ops(["broadcast", "reduce,gather"])] == ["broadcast", "reduce", "gather"]
