"""``commlens.bench.run``: the benchmark as a library, with typed events, nothing printed or stored.

One real 2-rank gloo run (module fixture) is checked from every side: its events, its Run, its command line.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

import pytest

from commlens import bench
from commlens.bench import BenchConfig, ConfigError, Finished, Local, Note, Progress, RowDone, Started
from commlens.bench.config import build_parser, config_from_args
from commlens.bench.events import event_from_wire
from commlens.results.jsonfmt import FormatError, measurement_to_dict
from commlens.results.records import Run
from commlens.results.table import BenchRow, row_line, run_table_lines

CONFIG = BenchConfig(
    ops=("all_reduce", "broadcast"), min_bytes=8, max_bytes=512, step_factor=8, iters=3, warmup=1, rounds=1
)


@pytest.fixture(scope="module")
def library_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, list[object], Path]:
    home = tmp_path_factory.mktemp("home")
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_DATA_HOME", str(home))  # where a stored run would go: nothing may land there
    mp.delenv("COMMLENS_DB", raising=False)
    events: list[object] = []
    try:
        run = bench.run(CONFIG, placement=Local(2), on_event=events.append)
    finally:
        mp.undo()
    return run, events, home


def test_run_returns_the_sweep_and_stores_nothing(library_run: tuple[Run, list[object], Path]) -> None:
    run, _, home = library_run
    assert run.status == "complete" and run.world_size == 2
    # 8 and 64 and 512 B, two ops; all_reduce in and out of place, broadcast too
    sizes = sorted({(m.op, m.size_bytes) for m in run.measurements})
    assert sizes == [(op, s) for op in ("all_reduce", "broadcast") for s in (8, 64, 512)]
    assert all(m.nwrong == 0 and len(m.samples_s) == 3 for m in run.measurements)
    assert list(home.rglob("*")) == []  # no store, no unsaved copy: storing is the caller's


def test_events_are_typed_and_come_in_order(library_run: tuple[Run, list[object], Path]) -> None:
    run, events, _ = library_run
    assert isinstance(events[0], Started) and events[0].run_id == run.run_id
    assert isinstance(events[-1], Finished) and events[-1].status == "complete" and events[-1].wrong == ()
    rows = [e for e in events if isinstance(e, RowDone)]
    assert len(rows) == 6 and not any(isinstance(e, Note) for e in events)
    assert [m for r in rows for m in r.measurements if m is not None] == list(run.measurements)
    # a Progress announces each row before it is done
    for i, e in enumerate(events):
        if isinstance(e, RowDone):
            before = next(p for p in reversed(events[:i]) if isinstance(p, Progress | RowDone | Started))
            assert isinstance(before, Progress) and (before.op, before.size_bytes) == (e.op, e.size_bytes)


def test_the_recorded_command_line_reproduces_the_config(library_run: tuple[Run, list[object], Path]) -> None:
    run, _, _ = library_run
    argv = shlex.split(run.command_line)
    assert argv[:2] == ["commlens", "bench"] and argv[-2:] == ["--nproc", "2"]
    assert config_from_args(build_parser().parse_args(argv[2:])) == _as_parsed(CONFIG)


@pytest.mark.parametrize(
    "config",
    [
        BenchConfig(),
        BenchConfig(ops=("reduce", "gather"), roots="all", dtypes=("float16", "int32"), redops=("max", "min")),
        BenchConfig(min_bytes=1024, max_bytes=1 << 20, step_bytes=4096, in_place=False, blocking=True, seed=9),
        BenchConfig(iters=7, rounds=3, round_groups="fresh", interleave=True, timeout_s=12.5, warmup=0, check_iters=0),
        BenchConfig(algos=("ring", "recursive_doubling"), chunk_bytes=65536, out_of_place=False, extra={"tag": "a b"}),
    ],
)
def test_a_config_and_its_options_are_one_and_the_same(config: BenchConfig) -> None:
    assert config_from_args(build_parser().parse_args(config.argv())) == _as_parsed(config)


def _as_parsed(config: BenchConfig) -> BenchConfig:
    """The options always record a tag and a revision (None when not given)."""
    return dataclasses.replace(config, extra={"tag": config.extra.get("tag"), "revision": config.extra.get("revision")})


def test_a_placement_that_cannot_run_is_refused_before_any_rank_starts() -> None:
    with pytest.raises(ConfigError, match="--nproc must be >= 1, got 0"):
        bench.run(CONFIG, placement=Local(0))
    with pytest.raises(ConfigError, match=r"--root 3 is not a rank \(world size 2\)"):
        bench.run(BenchConfig(ops=("broadcast",), roots=(3,)), placement=Local(2))


def test_the_launcher_reports_a_failed_rank_with_what_it_wrote(tmp_path: Path) -> None:
    """launch_ranks (bench.run's and diagnose links' launcher): a rank that fails raises RanksFailed, and its
    captured stderr says why (what `diagnose links` names a failed rank with)."""
    from commlens.bench.launcher import RanksFailed, launch_ranks, place, rank_stderr

    with pytest.raises(RanksFailed) as caught:
        launch_ranks("commlens.no_such_module", [], place(Local(2)), tmp_path, capture_stderr=True)
    assert set(caught.value.failures) <= {0, 1} and caught.value.failures
    said = [rank_stderr(tmp_path, r) for r in caught.value.failures]
    assert any("No module named commlens.no_such_module" in text for text in said), said


def test_a_row_is_one_record_from_the_wire_to_the_table(library_run: tuple[Run, list[object], Path]) -> None:
    _, events, _ = library_run
    rows = [e for e in events if isinstance(e, RowDone)]
    for row in rows:
        # the wire line: {"event": "row"}, the row's keys, its notes, then its measurements, in this order
        line = json.dumps(row.as_wire())
        spelled = {
            "event": "row",
            **{k: getattr(row, k) for k in ("op", "algo", "dtype", "redop", "root", "size_bytes", "count")},
            "notes": list(row.notes),
            "measurements": [measurement_to_dict(m) if m else None for m in row.measurements],
        }
        assert line == json.dumps(spelled)
        # read back, the record is the one sent, and the table prints it as its dict form
        back = event_from_wire(json.loads(line))
        assert back == row and isinstance(back, BenchRow)
        assert row_line(back) == row_line(BenchRow.from_dict(json.loads(line)))
    # all_reduce has both placements, broadcast too: one table line for each size of each op
    lines = run_table_lines(rows, 0, 0.0)
    assert [ln.split()[0] for ln in lines if not ln.startswith("#")] == ["8", "64", "512"] * 2


def test_a_row_from_the_wire_is_checked(library_run: tuple[Run, list[object], Path]) -> None:
    _, events, _ = library_run
    wire = next(e for e in events if isinstance(e, RowDone)).as_wire()
    with pytest.raises(KeyError, match="count"):
        event_from_wire({k: v for k, v in wire.items() if k != "count"})
    measured = next(m for m in wire["measurements"] if isinstance(m, dict))
    with pytest.raises(FormatError, match="size_bytes"):  # each measurement as a stored run's
        event_from_wire(dict(wire, measurements=[dict(measured, size_bytes="1K")]))
