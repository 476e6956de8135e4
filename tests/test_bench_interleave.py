"""``commlens bench --interleave``: a row's implementations timed round-robin, the run reading as without it."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from benchutil import commlens
from typer.testing import CliRunner

from commlens.bench.config import BenchConfig, ConfigError, build_parser, config_from_args
from commlens.bench.tune import TuneSettings, bench_config
from commlens.bench.worker import measure_interleaved
from commlens.cli.app import _register, app

_register()

ALGOS = "builtin,ring,recursive_doubling"
# int32 avg: every implementation refuses it (gloo and commlens alike), float32 avg runs; all_gather both placements
SWEEP = (
    "--nproc",
    "2",
    "--op",
    "all_reduce,all_gather",
    "--algo",
    ALGOS,
    "-d",
    "float32,int32",
    "-o",
    "avg",
    "-b",
    "64",
    "-e",
    "4K",
    "-f",
    "64",
    "-n",
    "3",
    "-w",
    "1",
    "-q",
    "--no-store",
)


def _bench(tmp: Path, *extra: str) -> tuple[dict[str, Any], str]:
    json_path = tmp / "run.json"
    proc = commlens("bench", *SWEEP, *extra, "--json", str(json_path))
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(json_path.read_text()), proc.stdout


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, tuple[dict[str, Any], str]]:
    """The same sweep on 2 real gloo ranks, implementation after implementation and interleaved."""
    return {
        interleave: _bench(
            tmp_path_factory.mktemp(f"interleave{int(interleave)}"), *(("--interleave",) if interleave else ())
        )
        for interleave in (False, True)
    }


def _rows(doc: dict[str, Any]) -> list[tuple[str, str, str, int, bool]]:
    return [(m["op"], m["algo"], m["dtype"], m["size_bytes"], m["in_place"]) for m in doc["measurements"]]


def _table_shape(stdout: str) -> list[str]:
    """The table without its figures: headers, notes, and each row's size, count, type, redop and root (not the
    verdict under it, which follows the figures)."""
    shape = []
    in_verdict = False  # the expected-performance verdict (issue 30): '# expect:' and its indented lines
    for line in stdout.splitlines()[8:]:  # after the run, system and rank lines
        in_verdict = line.startswith("# expect:") or (in_verdict and line.startswith("#   "))
        if line.startswith("# Avg bus bandwidth") or in_verdict:
            continue
        shape.append(line if line.startswith("#") else " ".join(line.split()[:5]))
    return shape


def test_interleaved_rows_are_the_same_rows_in_the_same_order(both) -> None:
    (plain, plain_out), (mixed, mixed_out) = both[False], both[True]
    assert _rows(mixed) == _rows(plain)
    assert {m["algo"] for m in mixed["measurements"]} == set(ALGOS.split(","))
    assert all(m["nwrong"] == 0 and m["iterations"] == 3 and len(m["samples_s"]) == 3 for m in mixed["measurements"])
    assert mixed["notes"] == plain["notes"]
    assert _table_shape(mixed_out) == _table_shape(plain_out)
    headers = [line for line in mixed_out.splitlines() if line.startswith("# Collective test")]
    assert headers == [
        "# Collective test: all_reduce",
        "# Collective test: all_reduce  algo ring",
        "# Collective test: all_reduce  algo recursive_doubling",
        "# Collective test: all_gather",
        "# Collective test: all_gather  algo ring",
        "# Collective test: all_gather  algo recursive_doubling",
    ]


def test_a_combination_every_implementation_refuses_is_skipped_for_each_with_a_note(both) -> None:
    mixed, stdout = both[True]
    assert not any(m["dtype"] == "int32" and m["op"] == "all_reduce" for m in mixed["measurements"])
    assert {m["algo"] for m in mixed["measurements"] if m["dtype"] == "int32"} == set(ALGOS.split(","))  # all_gather
    skipped = [line for line in stdout.splitlines() if line.startswith("# skipped")]
    assert skipped == [
        (
            "# skipped all_reduce size 64 B int32 avg on gloo: result type Float can't be cast to the desired output "
            "type Int"
        ),
        "# skipped all_reduce size 64 B int32 avg on commlens ring: avg needs a floating-point tensor, got torch.int32",
        (
            "# skipped all_reduce size 64 B int32 avg on commlens recursive_doubling: avg needs a floating-point tensor, "
            "got torch.int32"
        ),
    ]


def test_the_run_records_whether_it_interleaved(both) -> None:
    assert both[True][0]["config"]["interleave"] is True
    assert both[False][0]["config"]["interleave"] is False


def test_interleave_is_an_option_of_bench_and_off_by_default() -> None:
    def parse(*argv: str) -> BenchConfig:
        return config_from_args(build_parser().parse_args(list(argv)))

    assert parse().interleave is False
    assert parse("--algo", "builtin,ring", "--interleave").interleave is True
    assert parse("--interleave").as_dict()["interleave"] is True  # one implementation: accepted


# --- the timed loop --------------------------------------------------------------------------------------------


class _Done:
    def __init__(self, log: list[str], name: str):
        self.log, self.name = log, name

    def wait(self) -> None:
        self.log.append(f"{self.name} done")


def _fake(log: list[str], launched_at: list[float], name: str) -> Any:
    def launch() -> _Done:
        log.append(name)
        launched_at.append(time.perf_counter())
        return _Done(log, name)

    return SimpleNamespace(launch=launch)


def test_the_timed_loop_launches_the_implementations_round_robin() -> None:
    log: list[str] = []
    launched_at: dict[str, list[float]] = {name: [] for name in "abc"}
    colls = [_fake(log, launched_at[name], name) for name in "abc"]
    stamps = measure_interleaved(colls, 4, torch.device("cpu"), blocking=False)
    assert log == [event for _ in range(4) for name in "abc" for event in (name, f"{name} done")]
    assert len(stamps) == 3
    for name, st in zip("abc", stamps):
        assert len(st.starts) == len(st.ends) == 4
        assert all(s <= t <= e for s, t, e in zip(st.starts, launched_at[name], st.ends))  # its own launch
        assert all(d > 0 for d in st.durations)
    order = [s for i in range(4) for s in (stamps[0].starts[i], stamps[1].starts[i], stamps[2].starts[i])]
    assert order == sorted(order) and len(set(order)) == len(order)  # a0 < b0 < c0 < a1 < ...
    assert all(a_end <= b_start for a_end, b_start in zip(stamps[0].ends, stamps[1].starts))


def test_one_implementation_is_timed_back_to_back() -> None:
    log: list[str] = []
    (st,) = measure_interleaved([_fake(log, [], "a")], 3, torch.device("cpu"), blocking=False)
    assert log == ["a", "a done"] * 3
    assert all(e <= s for e, s in zip(st.ends, st.starts[1:]))


# --- an implementation refusing a row that the others run, in one process group --------------------------------


@pytest.fixture(scope="module")
def pool() -> Iterator[Any]:
    """Two ranks in one gloo group: the worker pool of the algorithm tests (tests/algos/harness.py)."""
    sys.path.insert(0, str(Path(__file__).parent / "algos"))
    from harness import Pool

    pool = Pool(2)
    try:
        yield pool
    finally:
        pool.close()


def _sweep_events(
    ctx: Any, interleave: bool, refuse: str | None = None, corrupt_size: int | None = None
) -> tuple[list[dict[str, Any]], list[str]] | None:
    """Rank 0's events and wrong-result messages of an all_reduce sweep; ``refuse`` is made to refuse every row."""
    from commlens.algos import AlgoError
    from commlens.bench import worker
    from commlens.bench.faults import Fault

    real_prepare = worker.prepare

    def prepare(*args: Any, **kwargs: Any) -> Any:
        coll = real_prepare(*args, **kwargs)
        if coll is not None and kwargs["algo"] == refuse:

            def launch() -> None:
                raise AlgoError(f"{refuse} refuses this row (test)")

            coll = dataclasses.replace(coll, launch=launch)
        return coll

    cfg = BenchConfig(
        ops=("all_reduce",),
        min_bytes=64,
        max_bytes=4096,
        step_factor=64,
        iters=3,
        warmup=1,
        algos=("ring", "recursive_doubling", "binomial"),
        interleave=interleave,
    )
    worker.prepare = prepare
    try:
        sweep = worker.Sweep(cfg, ctx.rank, ctx.size, 0, None, None)
        sweep.fault = Fault("corrupt", 1, "all_reduce", corrupt_size) if corrupt_size else None
        reporter = worker.Reporter(None, None) if ctx.rank == 0 else None
        wrong = sweep.run(reporter)
    finally:
        worker.prepare = real_prepare
    return ([e.as_wire() for e in reporter.events], wrong) if reporter else None  # the events as rank 0 sends them


def _readable(events: list[dict[str, Any]]) -> list[str]:
    return [
        f"{e['algo']} {e['size_bytes']}" if e["event"] == "row" else e["text"]
        for e in events
        if e["event"] in ("row", "note")
    ]


def test_an_implementation_that_refuses_is_skipped_while_the_others_run(pool: Any) -> None:
    (events, wrong), _ = pool.run(_sweep_events, interleave=True, refuse="recursive_doubling")
    assert _readable(events) == [
        "ring 64",
        "ring 4096",
        (
            "skipped all_reduce size 64 B float32 sum on commlens recursive_doubling: recursive_doubling refuses this "
            "row (test)"
        ),
        "binomial 64",
        "binomial 4096",
    ]
    rows = [e for e in events if e["event"] == "row"]
    assert all(m["nwrong"] == 0 and m["iterations"] == 3 for e in rows for m in e["measurements"] if m)
    assert wrong == []
    (plain, _), _ = pool.run(_sweep_events, interleave=False, refuse="recursive_doubling")
    assert _readable(plain) == _readable(events)


def test_progress_counts_every_row_once_and_rows_wait_for_their_op(pool: Any) -> None:
    (events, _), _ = pool.run(_sweep_events, interleave=True)
    progress = [e for e in events if e["event"] == "progress"]
    assert [(e["index"], e["total"], e["algo"], e["size_bytes"]) for e in progress] == [
        (0, 6, "ring,recursive_doubling,binomial", 64),
        (3, 6, "ring,recursive_doubling,binomial", 4096),
    ]
    kinds = [e["event"] for e in events]
    assert kinds == ["progress", "progress", *["row"] * 6]


def test_a_corrupting_rank_is_caught_for_every_implementation_of_its_row(pool: Any) -> None:
    (events, wrong), _ = pool.run(_sweep_events, interleave=True, corrupt_size=4096)
    assert wrong == [
        f"all_reduce ({algo}) size 4096 B float32 sum in-place: 1 wrong elements on rank 1"
        for algo in ("ring", "recursive_doubling", "binomial")
    ]
    assert [e["measurements"][1]["nwrong"] for e in events if e["event"] == "row"] == [0, 1, 0, 1, 0, 1]


# --- commlens tune -------------------------------------------------------------------------------------------


def test_tune_interleaves_its_sweep_unless_told_not_to() -> None:
    on, _ = bench_config(TuneSettings())
    off, _ = bench_config(TuneSettings(interleave=False))
    assert on.interleave is True and off.interleave is False
    assert "--interleave" in on.argv() and "--interleave" not in off.argv()
    assert config_from_args(build_parser().parse_args(on.argv())).interleave is True


def test_tune_cli_passes_interleave_on(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[TuneSettings] = []

    def fake_tune(settings: TuneSettings, **_: Any) -> Any:
        seen.append(settings)
        raise ConfigError("stop here")

    monkeypatch.setattr("commlens.bench.tune.tune", fake_tune)
    for args, expected in (((), True), (("--no-interleave",), False), (("--interleave",), True)):
        proc = CliRunner().invoke(
            app, ["tune", "--op", "all_reduce", *args, "--no-store", "-o", str(tmp_path / "t.json")]
        )
        assert proc.exit_code == 2, proc.output
        assert seen.pop().interleave is expected


def test_rounds_are_shuffled_alike_on_every_rank_when_seeded() -> None:
    """Seeded rounds are permutations, reproducible from the seed (all ranks draw the same), and put every
    implementation first, last and after each neighbour at some point; unseeded rounds keep the given order."""
    from commlens.bench.worker import round_orders

    orders = round_orders(4, 40, seed=7)
    assert orders == round_orders(4, 40, seed=7) and orders != round_orders(4, 40, seed=8)
    assert all(sorted(o) == [0, 1, 2, 3] for o in orders)
    assert {o[0] for o in orders} == {o[-1] for o in orders} == {0, 1, 2, 3}
    assert {(o[k], o[k + 1]) for o in orders for k in range(3)} == {
        (a, b) for a in range(4) for b in range(4) if a != b
    }
    assert round_orders(3, 5, seed=None) == [[0, 1, 2]] * 5 and round_orders(1, 3, seed=1) == [[0]] * 3
    log: list[str] = []
    stamps = measure_interleaved(
        [_fake(log, [], name) for name in "abc"], 6, torch.device("cpu"), blocking=False, seed=3
    )
    launched = [e for e in log if not e.endswith("done")]
    assert launched == ["abc"[j] for o in round_orders(3, 6, seed=3) for j in o]
    assert all(len(st.starts) == 6 for st in stamps)


def test_gloo_average_of_integers_is_refused_before_launching_with_torchs_message() -> None:
    """gloo's average divides the sum in place; torch refuses that for integer tensors. The harness asks torch the
    same division on one element, on every rank, instead of launching the collective (whose refusal gloo's worker
    thread once raised a row late on one rank)."""
    from commlens.bench.worker import gloo_average_refusal

    assert gloo_average_refusal("gloo", "builtin", "int32", "avg", 3) == (
        "result type Float can't be cast to the desired output type Int"
    )
    assert gloo_average_refusal("gloo", "builtin", "uint8", "avg", 4) == (
        "result type Float can't be cast to the desired output type Byte"
    )
    for dtype in ("float32", "bfloat16", "float16", "float64"):
        assert gloo_average_refusal("gloo", "builtin", dtype, "avg", 3) is None
    assert gloo_average_refusal("nccl", "builtin", "int32", "avg", 3) is None  # not gloo: the launch probes it
    assert gloo_average_refusal("gloo", "ring", "int32", "avg", 3) is None  # commlens' own algorithms say why
    assert gloo_average_refusal("gloo", "builtin", "int32", "sum", 3) is None
