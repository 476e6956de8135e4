"""How per-iteration times across ranks are formed from every rank's timestamps."""

from __future__ import annotations

import pytest

from commlens.bench.worker import iteration_times


def test_shared_clock_measures_from_the_last_start_to_the_last_end() -> None:
    # Two ranks, back to back. Rank 0 finishes each iteration early and starts the next early,
    # then waits for rank 1: its own durations alternate short/long, rank 1's long/short.
    starts = [[0.0, 1.0, 3.0], [0.5, 2.0, 3.2]]
    ends = [[1.0, 3.0, 4.0], [2.0, 3.2, 4.5]]
    times = iteration_times(starts, ends, shared_clock=True)
    assert times == pytest.approx([2.0 - 0.5, 3.2 - 2.0, 4.5 - 3.2])
    # back-to-back iterations add up to the loop's wall time after the last rank joined
    assert sum(times) == pytest.approx(4.5 - 0.5)


def test_without_a_shared_clock_the_longest_rank_duration_counts() -> None:
    starts = [[0.0, 1.0, 3.0], [0.5, 2.0, 3.2]]
    ends = [[1.0, 3.0, 4.0], [2.0, 3.2, 4.5]]
    assert iteration_times(starts, ends, shared_clock=False) == pytest.approx([1.5, 2.0, 1.3])


def test_a_single_rank_times_are_its_durations() -> None:
    assert iteration_times([[1.0, 2.5]], [[2.0, 2.75]], shared_clock=True) == pytest.approx([1.0, 0.25])
