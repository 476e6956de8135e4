"""``commlens bench --rounds``: a row's iterations split into independent rounds, on 2 real gloo ranks.

Every run here is small (all_reduce, 1 KiB to 4 KiB, 2 ranks): the tests check which samples belong to
which round, in the JSON file and in the store, and that the printed table keeps its layout.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from benchutil import commlens, error_lines, stored_runs, table_rows

from commlens import bench
from commlens.bench import BenchConfig, BenchFailure, Local, Progress, RowDone
from commlens.bench.config import DEFAULT_ROUNDS, build_parser, config_from_args
from commlens.bench.faults import fault_from_env
from commlens.store import Store, db_url

SWEEP = ("--nproc", "2", "--op", "all_reduce", "-b", "1K", "-e", "4K", "-f", "2", "-w", "1")
SIZES = [1024, 2048, 4096]


@dataclass
class Bench:
    proc: subprocess.CompletedProcess[str]
    doc: dict[str, Any]  # the --json file
    db: Path

    def stored_measurements(self) -> list[Any]:
        (summary,) = stored_runs(self.db)
        with Store.open(db_url(str(self.db)), create=False) as store:
            return list(store.get_run(summary["run_id"]).measurements)


_CACHE: dict[tuple[str, ...], Bench] = {}


def _bench(tmp_path_factory: pytest.TempPathFactory, *extra: str) -> Bench:
    """One real run per option set, shared by the tests of this module."""
    if extra not in _CACHE:
        out = tmp_path_factory.mktemp("rounds")
        json_path, db = out / "run.json", out / "results.db"
        proc = commlens("bench", *SWEEP, *extra, "--json", str(json_path), "--db", str(db), timeout=240)
        assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        _CACHE[extra] = Bench(proc, json.loads(json_path.read_text()), db)
    return _CACHE[extra]


@pytest.mark.parametrize("groups", ["fresh", "shared"])
def test_three_rounds_of_three_iterations_are_recorded_on_every_row(
    groups: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    run = _bench(tmp_path_factory, "--rounds", "3", "-n", "9", "--round-groups", groups)
    rows = run.doc["measurements"]
    assert run.doc["status"] == "complete"
    assert run.doc["config"]["rounds"] == 3 and run.doc["config"]["round_groups"] == groups
    assert [m["size_bytes"] for m in rows] == SIZES
    assert [m["rounds"] for m in rows] == [[3, 3, 3]] * len(SIZES)
    assert all(len(m["samples_s"]) == 9 and m["nwrong"] == 0 for m in rows)
    for m in rows:  # later rounds too are every rank's timestamps (gathered once per round), not rank 0's own
        assert [len(r) for r in m["rank_samples_s"]] == [9, 9]
        assert all(0 < s <= max(col) + 1e-12 for s, col in zip(m["samples_s"], zip(*m["rank_samples_s"])))
    stored = run.stored_measurements()
    assert [(m.size_bytes, m.rounds) for m in stored] == [(size, (3, 3, 3)) for size in SIZES]
    assert all(m.round_count == 3 and [len(r) for r in m.round_samples()] == [3, 3, 3] for m in stored)
    # the store keeps the very samples the file has, round after round
    assert [list(m.samples_s) for m in stored] == [m["samples_s"] for m in rows]


def test_more_rounds_than_iterations_is_refused_naming_the_option(tmp_path: Path) -> None:
    proc = commlens("bench", *SWEEP, "--rounds", "4", "-n", "3", "--db", str(tmp_path / "results.db"))
    assert proc.returncode == 2
    (line,) = error_lines(proc.stderr)
    assert "--rounds 4" in line and "--iters 3" in line
    assert not (tmp_path / "results.db").exists()  # refused before anything ran or was stored


def test_without_rounds_the_iterations_are_split_into_the_default_or_fewer() -> None:
    def rounds(*argv: str) -> int:
        return config_from_args(build_parser().parse_args(list(argv))).rounds

    assert rounds() == DEFAULT_ROUNDS == 5
    assert rounds("-n", "2") == 2 and rounds("-n", "1") == 1 and rounds("-n", "7") == 5
    assert config_from_args(build_parser().parse_args(["-n", "7"])).round_iters() == [2, 2, 1, 1, 1]


# Two iterations and the default rounds: the run the next two tests share. Its int32 avg rows are refused by gloo
# (the refused-combination test); the float32 avg rows are the default-rounds test's rows.
TWO_ITERS_WITH_A_REFUSAL = ("-d", "float32,int32", "-o", "avg", "-n", "2")


def test_default_rounds_with_two_iterations_give_two_rounds(tmp_path_factory: pytest.TempPathFactory) -> None:
    run = _bench(tmp_path_factory, *TWO_ITERS_WITH_A_REFUSAL)
    assert "--rounds" not in run.doc["command_line"]  # the 2 rounds are the default's, not asked for
    assert run.doc["config"]["rounds"] == 2
    # each round in a new process group unless asked otherwise: the A/A gate needs rounds that do not share one
    # set of connections (docs/bench.md, Rounds)
    assert run.doc["config"]["round_groups"] == "fresh" and "--round-groups" not in run.doc["command_line"]
    assert [m["rounds"] for m in run.doc["measurements"]] == [[1, 1]] * len(SIZES)
    assert [m.rounds for m in run.stored_measurements()] == [(1, 1)] * len(SIZES)


def _shape(stdout: str) -> list[str]:
    """The table without its figures: its ``#`` lines after the run's header and each row's first five columns
    (not the expected-performance verdict under it, which follows the figures)."""
    header = ("# commlens ", "# ops ", "# backend ", "#  Rank ", "# Avg bus bandwidth")
    lines = stdout.splitlines()
    if any(line.startswith("# expect:") for line in lines):  # the verdict and its indented lines end the output
        lines = lines[: next(i for i, line in enumerate(lines) if line.startswith("# expect:"))]
    return [
        line if line.startswith("#") else " ".join(line.split()[:5]) for line in lines if not line.startswith(header)
    ]


def test_the_table_has_the_layout_of_a_single_round_run(tmp_path_factory: pytest.TempPathFactory) -> None:
    single = _bench(tmp_path_factory, "--rounds", "1", "-n", "3")
    rounds = _bench(tmp_path_factory, "--rounds", "3", "-n", "9", "--round-groups", "fresh")
    assert [m.get("rounds") for m in single.doc["measurements"]] == [None] * len(SIZES)
    assert _shape(rounds.proc.stdout) == _shape(single.proc.stdout)
    assert len(table_rows(rounds.proc.stdout)) == len(table_rows(single.proc.stdout)) == len(SIZES)
    widths = {len(line) for line in table_rows(rounds.proc.stdout) + table_rows(single.proc.stdout)}
    assert len(widths) == 1


def test_a_refused_combination_is_skipped_with_a_note_in_every_round(tmp_path_factory: pytest.TempPathFactory) -> None:
    """int32 avg is refused by gloo: noted once, at its first size; float32 avg is measured in both rounds."""
    run = _bench(tmp_path_factory, *TWO_ITERS_WITH_A_REFUSAL)
    assert run.doc["config"]["rounds"] == 2
    assert [(m["dtype"], m["size_bytes"], m["rounds"]) for m in run.doc["measurements"]] == [
        ("float32", size, [1, 1]) for size in SIZES
    ]
    skipped = [line for line in run.proc.stdout.splitlines() if line.startswith("# skipped")]
    assert len(skipped) == 1 and skipped[0].startswith("# skipped all_reduce size 1024 B int32 avg on gloo: ")


def test_a_rank_failing_in_a_later_round_leaves_the_finished_rounds_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 1 fails at the 4 KiB row of round 3 (``round=3`` of the fault hook). Rounds 1 and 2 were gathered:
    every row keeps both, with every rank's samples. The rows round 3 timed before the failure were never
    gathered; they must not swap the finished rounds' per-rank samples for rank 0's own durations."""
    monkeypatch.setenv("COMMLENS_INJECT_FAULT", "raise:rank=1,size=4096,round=3")
    monkeypatch.delenv("COMMLENS_DB", raising=False)
    cfg = BenchConfig(ops=("all_reduce",), min_bytes=1024, max_bytes=8192, iters=6, warmup=1, rounds=3)
    events: list[object] = []
    with pytest.raises(BenchFailure, match="rank 1: all_reduce size 4096 B .*injected failure"):
        bench.run(cfg, placement=Local(2), on_event=events.append)
    round3 = [e.size_bytes for e in events if isinstance(e, Progress) and e.round == 3]
    assert round3[-1] == 4096 and len(round3) >= 2, round3  # some row was timed in round 3 before the failure
    rows = [m for e in events if isinstance(e, RowDone) for m in e.measurements if m is not None]
    assert sorted(m.size_bytes for m in rows) == [1024, 2048, 4096, 8192]  # no row lost
    for m in rows:
        assert m.rounds == (2, 2) and len(m.samples_s) == 4, (m.size_bytes, m.rounds)
        assert m.rank_samples_s is not None and [len(r) for r in m.rank_samples_s] == [4, 4], m.size_bytes


def test_the_fault_hook_strikes_in_its_round_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COMMLENS_INJECT_FAULT", "raise:rank=1,op=all_reduce,round=2")
    fault = fault_from_env()
    assert fault is not None and fault.round == 2
    assert [fault.matches(1, "all_reduce", 64, r) for r in range(3)] == [False, True, False]  # rounds from 0
    assert not fault.matches(0, "all_reduce", 64, 1)
    for bad in ("0", "x", "-1"):
        monkeypatch.setenv("COMMLENS_INJECT_FAULT", f"raise:rank=1,round={bad}")
        with pytest.raises(ValueError, match="round must be a round number from 1"):
            fault_from_env()
