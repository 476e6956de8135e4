"""The tuning table: format round trip, validation naming the field, choose() and its fallback, `commlens tune`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchutil import clean_env, commlens, error_lines
from typer.testing import CliRunner

from commlens.algos import algorithms_for, tuning
from commlens.algos.tuning import (
    TuningError,
    bucket_edges,
    choose,
    entry_from_times,
    heuristic,
    load_table,
    lookup,
    new_table,
    reset_cache,
    save_table,
    table_to_dict,
    with_entries,
)
from commlens.cli.app import _register, app

_register()


def tune_in_process(*args: str):
    """`commlens tune` in this process: for input it refuses before any rank starts."""
    return CliRunner().invoke(app, ["tune", *args])


# all_reduce on 4 ranks: recursive doubling wins small sizes, ring large ones; the built-in is never chosen.
TIMES = {
    64: {"builtin": 50e-6, "recursive_doubling": 100e-6, "ring": 300e-6},
    4096: {"builtin": 60e-6, "recursive_doubling": 120e-6, "ring": 200e-6},
    1 << 20: {"builtin": 900e-6, "recursive_doubling": 2e-3, "ring": 1e-3},
}


def _entry(op: str = "all_reduce", world: int = 4, ranks_per_host: int = 4):
    return entry_from_times(
        op,
        world,
        TIMES,
        ranks_per_host=ranks_per_host,
        backend="gloo",
        device="cpu",
        context={"run_id": "abc", "stat": "p50"},
    )


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("COMMLENS_TUNING", raising=False)
    reset_cache()
    yield
    reset_cache()


def test_buckets_split_halfway_on_a_log_scale_and_cover_every_size() -> None:
    assert bucket_edges([64, 4096, 1 << 20]) == [(0, 512), (512, 65536), (65536, None)]
    assert bucket_edges([1, 2]) == [(0, 2), (2, None)]
    entry = _entry()
    assert [(b.size_bytes, b.algo) for b in entry.buckets] == [
        (64, "recursive_doubling"),
        (4096, "recursive_doubling"),
        (1 << 20, "ring"),
    ]
    assert entry.buckets[2].ranked() == [("ring", 1e-3), ("recursive_doubling", 2e-3)]
    assert [entry.bucket_for(n).size_bytes for n in (0, 511, 512, 65535, 65536, 1 << 40)] == [
        64,
        64,
        4096,
        4096,
        1 << 20,
        1 << 20,
    ]


def test_the_table_round_trips_through_its_file_and_choose_reads_it(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "t.json"
    table = new_table([_entry(), _entry(world=2, ranks_per_host=2)], "commlens tune ...")
    save_table(table, path)
    assert json.loads(path.read_text())["format"] == "commlens.tuning/1"
    assert load_table(path) == table
    assert not list(tmp_path.glob(".t.json.*"))  # the temporary file of the atomic write is gone
    monkeypatch.setenv("COMMLENS_TUNING", str(path))
    assert [choose("all_reduce", n, 4) for n in (8, 100_000, 1 << 30)] == ["recursive_doubling", "ring", "ring"]
    assert lookup("all_reduce", 8, 4).source == "table"
    # an op or rank count the table has no entry for: the built-in rule
    assert lookup("all_reduce", 8, 3) == tuning.Choice("recursive_doubling", None, "heuristic")


def test_the_table_is_read_once_per_process(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "t.json"
    save_table(new_table([_entry()]), path)
    monkeypatch.setenv("COMMLENS_TUNING", str(path))
    assert choose("all_reduce", 1 << 20, 4) == "ring"
    path.write_text("not json")  # a later change is not seen until the cache is reset
    assert choose("all_reduce", 1 << 20, 4) == "ring"
    reset_cache()
    with pytest.raises(TuningError, match="not JSON"):
        choose("all_reduce", 1 << 20, 4)


def test_without_a_table_the_documented_rule_decides_and_never_fails(monkeypatch) -> None:
    monkeypatch.setenv("COMMLENS_TUNING", "/nonexistent/tuning.json")
    assert choose("all_reduce", 1024, 4) == "recursive_doubling"
    assert choose("all_reduce", 1 << 20, 4) == "ring"
    assert heuristic("all_reduce", 1 << 20, 4, ranks_per_host=2) == "hierarchical"
    assert choose("all_reduce", 1 << 20, 4, ranks_per_host=2) == "hierarchical"
    from commlens.algos import Comm, _pick

    four = Comm(None, (0, 1, 2, 3), 0)  # picking needs no process group
    assert _pick("all_reduce", "auto", 1 << 20, four, None, 2)[0].name == "hierarchical"  # what algos.* pass on
    # the layout comes from the caller only: the launcher's environment is not a side channel
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("COMMLENS_LOCAL_SIZE", "2")
    reset_cache()
    assert choose("all_reduce", 1 << 20, 4) == "ring"
    for op, (_, small, large) in tuning.HEURISTIC.items():
        assert small in algorithms_for(op) and large in algorithms_for(op), op
        assert choose(op, 8, 4) == small and choose(op, 1 << 26, 4) in (large, "hierarchical")


def test_a_newer_entry_replaces_the_same_experiment_and_keeps_the_others() -> None:
    old = new_table([_entry(), _entry(world=2, ranks_per_host=2)])
    faster = entry_from_times(
        "all_reduce", 4, {8: {"ring": 1e-6, "recursive_doubling": 2e-6}}, ranks_per_host=4, backend="gloo", device="cpu"
    )
    merged = with_entries(old, [faster])
    assert len(merged.entries) == 2
    assert merged.find("all_reduce", 4).buckets[0].algo == "ring"
    assert merged.find("all_reduce", 2).buckets[0].algo == "recursive_doubling"


def test_entries_from_a_run_tune_out_of_place_where_offered_and_skip_what_no_algorithm_ran() -> None:
    from commlens.bench.tune import entries_from_run
    from commlens.results.records import Measurement, Run, SystemInfo

    def row(op: str, algo: str, size: int, in_place: bool, t: float, redop: str | None = None) -> Measurement:
        return Measurement(
            op=op,
            algo=algo,
            dtype="float32",
            redop=redop,
            size_bytes=size,
            count=size // 16,
            in_place=in_place,
            world_size=4,
            samples_s=(t, t, t),
        )

    rows = [
        row("all_gather", "ring", 4096, True, 1e-3),
        row("all_gather", "ring", 4096, False, 5e-3),
        row("all_gather", "bruck", 4096, False, 2e-3),
        row("all_gather", "builtin", 4096, False, 1e-4),
        row("all_gather", "builtin", 65536, False, 1e-4),  # no commlens algorithm ran at 64 KiB
        row("all_gather", "ring", 0, False, 1e-6),  # nothing to tune at 0 B
        row("all_reduce", "builtin", 4096, True, 1e-4, "sum"),
    ]  # the built-in alone: no entry
    run = Run("r1", "2026-01-01T00:00:00+00:00", SystemInfo(4, ("a",), {"a": 4}, "gloo"), tuple(rows))
    (entry,) = entries_from_run(run, "p50")
    assert (entry.op, entry.world_size, entry.ranks_per_host, entry.backend) == ("all_gather", 4, 4, "gloo")
    (bucket,) = entry.buckets
    assert (bucket.size_bytes, bucket.algo) == (4096, "bruck")  # ring's out-of-place row counts, not its in-place
    assert bucket.times_s == {"ring": 5e-3, "bruck": 2e-3, "builtin": 1e-4}


def _broken(tmp_path: Path, mutate) -> Path:  # noqa: ANN001 - a function editing the dict in place
    doc = table_to_dict(new_table([_entry()]))
    mutate(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(format="commlens.run/1"), "not a tuning table (format 'commlens.run/1'"),
        (lambda d: d.update(format="commlens.tuning/9"), "format 'commlens.tuning/9' is not one this commlens reads"),
        (lambda d: d.pop("entries"), "missing 'entries'"),
        (
            lambda d: d["entries"][0].update(op="gather"),
            "entries[0].op: commlens implements no algorithms for 'gather'",
        ),
        (
            lambda d: d["entries"][0]["buckets"][1].update(algo="magic"),
            "entries[0] (all_reduce, 4 ranks).buckets[1].algo: unknown all_reduce algorithm 'magic'; known: ring",
        ),
        (
            lambda d: d["entries"][0]["buckets"][1].update(min_bytes=600),
            "buckets[1].min_bytes: 600 does not continue the previous bucket's max_bytes 512",
        ),
        (
            lambda d: d["entries"][0]["buckets"][2].update(max_bytes=1 << 30),
            "buckets[2].max_bytes: the last bucket must be unbounded (null)",
        ),
        (lambda d: d["entries"][0]["buckets"][0].update(times_s={"ring": -1}), "buckets[0].times_s: expected"),
        (lambda d: d["entries"][0].update(world_size="4"), "entries[0].world_size: expected int, got '4'"),
        (lambda d: d["entries"].append(dict(d["entries"][0])), "entries[1]: a second entry for all_reduce at 4 ranks"),
    ],
)
def test_a_malformed_table_is_refused_naming_the_file_and_the_field(tmp_path: Path, mutate, message: str) -> None:
    path = _broken(tmp_path, mutate)
    with pytest.raises(TuningError) as err:
        load_table(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value), str(err.value)


def test_tune_writes_a_table_that_auto_then_runs(tmp_path: Path) -> None:
    """`commlens tune` on 2 real ranks, then `bench --algo auto` reading the table through COMMLENS_TUNING."""
    table = tmp_path / "tuning.json"
    env = clean_env(COMMLENS_TUNING=str(table))
    proc = commlens(
        "tune",
        "--op",
        "all_reduce",
        "--nproc",
        "2",
        "-b",
        "1K",
        "-e",
        "64K",
        "-f",
        "64",
        "-n",
        "2",
        "-w",
        "1",
        "-q",
        "--no-store",
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "# all_reduce on 2 ranks (1 host x 2, gloo/cpu), p50 time" in proc.stdout
    assert f"# wrote {table}: 1 entry from run" in proc.stdout
    written = load_table(table)
    ar = written.find("all_reduce", 2)
    assert [b.size_bytes for b in ar.buckets] == [1024, 65536]
    for b in ar.buckets:
        assert set(b.times_s) == {"builtin", *algorithms_for("all_reduce")}
        assert b.algo == min((a for a in b.times_s if a != "builtin"), key=b.times_s.__getitem__)
    out = tmp_path / "auto.json"
    run = commlens(
        "bench",
        "--nproc",
        "2",
        "--op",
        "all_reduce",
        "--algo",
        "auto",
        "-b",
        "1K",
        "-e",
        "64K",
        "-f",
        "64",
        "-n",
        "2",
        "-w",
        "1",
        "-q",
        "--no-store",
        "--json",
        str(out),
        env=env,
    )
    assert run.returncode == 0, run.stderr
    doc = json.loads(out.read_text())
    assert [(m["algo"], m["nwrong"]) for m in doc["measurements"]] == [("auto", 0), ("auto", 0)]
    said, last = [], None  # a note where the choice changes
    for b in ar.buckets:
        if b.algo != last:
            said.append(f"auto: all_reduce from {b.size_bytes} B on 2 ranks runs {b.algo} (table)")
            last = b.algo
    assert [n for n in doc["notes"] if n.startswith("auto:")] == said


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--op", "gather"), "error: commlens tunes all_reduce, all_gather"),
        (("--op", "all_reduce", "--algo", "builtin"), "error: --algo: give commlens algorithms to tune"),
        (("--op", "all_reduce", "--algo", "nope"), "error: unknown all_reduce algorithm 'nope'"),
        (("--op", "all_reduce", "--stat", "max"), "error: --stat must be one of p50, mean, min"),
        (("--op", "all_reduce", "-b", "1G", "-e", "1K"), "error: min size 1073741824 B is larger than max size 1024 B"),
    ],
)
def test_tune_refuses_bad_input_with_exit_2(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    proc = tune_in_process("--nproc", "2", *args, "-o", str(tmp_path / "t.json"), "--no-store")
    assert proc.exit_code == 2, proc.stderr
    (line,) = error_lines(proc.stderr)
    assert line.startswith(message), line
    assert not (tmp_path / "t.json").exists()


def test_tune_will_not_overwrite_a_table_it_cannot_read(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"format": "commlens.tuning/1", "entries": [{"op": "all_reduce"}]}')
    proc = tune_in_process("--nproc", "2", "--op", "all_reduce", "-o", str(path), "--no-store")
    assert proc.exit_code == 2
    (line,) = error_lines(proc.stderr)
    assert line == (
        f"error: {path}: entries[0]: missing 'world_size' (fix or remove it, or pass --replace to overwrite it)"
    )
    assert "world_size" not in path.read_text()


def test_auto_runs_the_tuned_algorithm_with_its_tuned_chunk(tmp_path: Path, monkeypatch) -> None:
    from commlens.algos import Comm, _pick

    path = tmp_path / "t.json"
    entry = entry_from_times(
        "all_reduce",
        4,
        TIMES,
        ranks_per_host=4,
        backend="gloo",
        device="cpu",
        chunk_bytes=65536,
        context={"run_id": "abc"},
    )
    save_table(new_table([entry]), path)
    monkeypatch.setenv("COMMLENS_TUNING", str(path))
    comm = Comm(None, (0, 1, 2, 3), 0)  # four ranks; picking needs no process group
    chosen, chunk = _pick("all_reduce", "auto", 1 << 20, comm, None)
    assert (chosen.name, chunk) == ("ring", 65536)
    chosen, chunk = _pick("all_reduce", "auto", 1 << 20, comm, 4096)  # the caller's chunk wins
    assert (chosen.name, chunk) == ("ring", 4096)
    chosen, chunk = _pick("all_reduce", "rabenseifner", 1 << 20, comm, None)  # a named algorithm: as asked
    assert (chosen.name, chunk) == ("rabenseifner", None)
