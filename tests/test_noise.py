"""Noise floors: learned from seeded A/A-like history, kept in the store (SQLite and PostgreSQL), and
``commlens noise learn`` / ``commlens noise show``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from store_backends import pg_server, pg_url, store_url  # noqa: F401
from typer.testing import CliRunner

from commlens.cli import noise_cmd  # noqa: F401  (registers the noise commands)
from commlens.cli.app import app
from commlens.regress import learn_floors
from commlens.results import Measurement, Run, SystemInfo
from commlens.results.records import FloorKey, MeasurementKey
from commlens.store import Store
from commlens.store.noise import NoiseFloor

SYSTEM = SystemInfo(world_size=4, backend="gloo", cpu_model="test-cpu", cpu_cores=8, torch_version="2.4.0")
OTHER = SystemInfo(world_size=4, backend="gloo", cpu_model="other-cpu", cpu_cores=8, torch_version="2.4.0")
SIZES = (1024, 1 << 20)
RUN_SD = 0.04  # the seeded runs' run-to-run sd of ln(time): what a floor should find


def make_run(
    run_id: str,
    factor: float,
    rng: np.random.Generator,
    *,
    revision: str | None,
    tag: str | None = None,
    status: str = "complete",
    system: SystemInfo = SYSTEM,
    run_sd: float = RUN_SD,
) -> Run:
    """all_reduce at SIZES, out of place, 3 rounds of 4 iterations: the whole run's level is drawn once
    (exp(N(0, run_sd)), the machine's state for this run); rounds and iterations scatter by 0.2 % around it."""
    run_level = factor * math.exp(rng.normal(0.0, run_sd))
    ms = []
    for size in SIZES:
        rounds = run_level * (20e-6 + size / 5e9) * np.exp(rng.normal(0.0, 0.002, 3))
        samples = np.concatenate([r * (1.0 + rng.normal(0.0, 0.002, 4)) for r in rounds])
        ms.append(
            Measurement(
                op="all_reduce",
                dtype="float32",
                redop="sum",
                size_bytes=size,
                count=size // 4,
                in_place=False,
                world_size=4,
                samples_s=tuple(samples),
                rounds=(4, 4, 4),
            )
        )
    return Run(
        run_id=run_id,
        started_at="2025-05-01T02:00:00Z",
        system=system,
        measurements=tuple(ms),
        revision=revision,
        tag=tag,
        status=status,
    )  # type: ignore[arg-type]


REVISIONS = (("r1", 1.0), ("r2", 1.2), ("r3", 0.9), ("r4", 1.1))


def _offsets(seed: int) -> np.ndarray:
    """Each nightly's ln offset from its revision's level, [revision][run]: N(0, RUN_SD)."""
    return np.random.default_rng(seed).normal(0.0, RUN_SD, (len(REVISIONS), 8))


def history(seed: int = 7) -> list[Run]:
    """Nightlies of four revisions (8 runs each), their code at different speeds; two incomplete runs at a wild
    level; four runs without a revision."""
    rng = np.random.default_rng(seed + 1000)
    runs = [
        make_run(f"{rev}-{i}", factor * math.exp(offset), rng, revision=rev, tag="nightly", run_sd=0.0)
        for (rev, factor), offsets in zip(REVISIONS, _offsets(seed))
        for i, offset in enumerate(offsets)
    ]
    runs += [make_run(f"cut-{i}", 3.0, rng, revision="r1", tag="nightly", status="incomplete") for i in range(2)]
    runs += [make_run(f"norev-{i}", 2.0 + i, rng, revision=None, tag="adhoc") for i in range(4)]
    return runs


def test_the_floor_is_the_run_to_run_sd_within_a_revision() -> None:
    offsets = _offsets(7)
    drawn = math.sqrt(float(((offsets - offsets.mean(axis=1, keepdims=True)) ** 2).sum()) / (offsets.size - 4))
    assert drawn == pytest.approx(RUN_SD, rel=0.3)  # 28 degrees of freedom: about 13 % either way
    floors = learn_floors(history())
    assert [(f.fingerprint, f.key.op, f.key.size_bytes, f.key.in_place) for f in floors] == [
        (SYSTEM.fingerprint(), "all_reduce", size, False) for size in SIZES
    ]
    for f in floors:
        # the pooled sd of the drawn run offsets, give or take what the rounds' 0.2 % scatter adds
        assert f.sd_log == pytest.approx(drawn, rel=0.03)
        # the incomplete runs and the runs without a revision are left out
        assert (f.runs, f.groups) == (32, 4)
        assert (f.key.algo, f.key.dtype, f.key.redop, f.key.root) == ("builtin", "float32", "sum", None)
        assert f.learned_at.endswith("+00:00")
    # the revisions' own speeds are code changes, not noise: pooled over all runs the floor is several times larger
    pooled = learn_floors([r for r in history() if r.revision is not None], by="all")
    assert all(p.sd_log > 2.5 * f.sd_log and p.groups == 1 for p, f in zip(pooled, floors))


def test_grouping_by_tag_and_runs_without_a_revision() -> None:
    rng = np.random.default_rng(8)
    aa = [make_run(f"aa{g}-{i}", 1.0 + 0.3 * g, rng, revision=None, tag=f"aa-{g}") for g in range(2) for i in range(10)]
    assert learn_floors(aa) == []  # by revision: none of these runs has one
    by_tag = learn_floors(aa, by="tag")
    assert [(f.runs, f.groups) for f in by_tag] == [(20, 2)] * 2
    assert all(f.sd_log == pytest.approx(RUN_SD, rel=0.3) for f in by_tag)
    by_all = learn_floors(aa, by="all")
    assert all(a.sd_log > 2 * t.sd_log for a, t in zip(by_all, by_tag))


def test_incomplete_runs_are_skipped() -> None:
    """Two incomplete runs of r1 at 3x its level: taken as complete, they would swamp the floor."""
    runs = history()
    complete = [r for r in runs if r.status == "complete"]
    assert [(f.sd_log, f.runs) for f in learn_floors(runs)] == [(f.sd_log, f.runs) for f in learn_floors(complete)]
    as_complete = [Run(**{**r.__dict__, "status": "complete"}) for r in runs]
    assert all(w.sd_log > 3 * f.sd_log and w.runs == 34 for w, f in zip(learn_floors(as_complete), learn_floors(runs)))


def test_min_df_is_the_history_a_floor_needs() -> None:
    rng = np.random.default_rng(3)
    pair = [make_run(f"p{i}", 1.0, rng, revision="r1") for i in range(2)]
    assert learn_floors(pair) == []  # two runs: one degree of freedom, the default needs two
    one = learn_floors(pair, min_df=1)
    assert [(f.runs, f.groups) for f in one] == [(2, 1)] * 2
    x = [math.fsum(math.log(np.median(s)) for s in r.measurements[0].round_samples()) / 3 for r in pair]
    assert one[0].sd_log == pytest.approx(abs(x[0] - x[1]) / math.sqrt(2))  # the sd of two values
    # two revisions of two runs each: two degrees of freedom
    more = pair + [make_run(f"q{i}", 1.5, rng, revision="r2") for i in range(2)]
    assert [(f.runs, f.groups) for f in learn_floors(more)] == [(4, 2)] * 2
    with pytest.raises(ValueError, match="min_df must be >= 1, got 0"):
        learn_floors(pair, min_df=0)


def test_each_system_has_its_own_floor() -> None:
    rng = np.random.default_rng(4)
    runs = [make_run(f"a{i}", 1.0, rng, revision="r1") for i in range(6)]
    runs += [make_run(f"b{i}", 1.0, rng, revision="r1", system=OTHER, run_sd=0.2) for i in range(6)]
    floors = learn_floors(runs)
    assert sorted({f.fingerprint for f in floors}) == sorted({SYSTEM.fingerprint(), OTHER.fingerprint()})
    by_fp = {(f.fingerprint, f.key.size_bytes): f.sd_log for f in floors}
    assert all(by_fp[(OTHER.fingerprint(), s)] > 2 * by_fp[(SYSTEM.fingerprint(), s)] for s in SIZES)


# -- the store -----------------------------------------------------------------------------------


def _floor(size_bytes: int, sd_log: float, fingerprint: str = "fp-a", **kw: object) -> NoiseFloor:
    """A floor of all_reduce float32 sum at ``size_bytes``; ``kw`` sets a key field (``in_place``, ``algo``) or a
    figure (``runs``, ``groups``, ``learned_at``)."""
    key = MeasurementKey("all_reduce", "builtin", "float32", "sum", None, size_bytes, False)
    key = key._replace(**{k: v for k, v in kw.items() if k in MeasurementKey._fields})
    figures: dict[str, object] = {"runs": 8, "groups": 2, "learned_at": "2025-05-02T00:00:00+00:00"}
    figures.update({k: v for k, v in kw.items() if k not in MeasurementKey._fields})
    return NoiseFloor(fingerprint, key, sd_log, **figures)  # type: ignore[arg-type]


def test_floors_are_saved_listed_and_loaded(store_url: str) -> None:
    floors = [
        _floor(1 << 20, 0.05),
        _floor(1024, 0.03),
        _floor(1024, 0.07, in_place=True),
        _floor(1024, 0.02, fingerprint="fp-b", algo="ring", runs=12, groups=3),
    ]
    with Store.open(store_url) as store:
        assert store.floors.list() == []
        assert store.floors.save(floors) == 4
        assert store.floors.save([]) == 0
        # by system, op, algo, dtype, redop, root, placement, size
        assert store.floors.list() == [floors[1], floors[0], floors[2], floors[3]]
        assert store.floors.list(["fp-b"]) == [floors[3]]
        assert store.floors.list(["fp-none"]) == []
        assert store.floors.load(["fp-a"]) == {
            FloorKey("fp-a", MeasurementKey("all_reduce", "builtin", "float32", "sum", None, 1024, False)): 0.03,
            FloorKey("fp-a", MeasurementKey("all_reduce", "builtin", "float32", "sum", None, 1 << 20, False)): 0.05,
            FloorKey("fp-a", MeasurementKey("all_reduce", "builtin", "float32", "sum", None, 1024, True)): 0.07,
        }
        assert store.floors.load()[floors[3].series] == 0.02


def test_learning_again_replaces_a_series_floor(store_url: str) -> None:
    with Store.open(store_url) as store:
        store.floors.save([_floor(1024, 0.03), _floor(2048, 0.04)])
        relearned = _floor(1024, 0.06, runs=20, groups=5, learned_at="2025-06-01T00:00:00+00:00")
        assert store.floors.save([relearned]) == 1
        assert store.floors.list() == [relearned, _floor(2048, 0.04)]
    with Store.open(store_url) as store:  # and it is kept
        assert [f.sd_log for f in store.floors.list()] == [0.06, 0.04]


def test_learned_floors_round_trip_through_the_store(store_url: str) -> None:
    runs = history()
    with Store.open(store_url) as store:
        store.save_runs(runs)
        stored = list(store.iter_runs([r.run_id for r in runs]))
        floors = learn_floors(stored)
        assert [f.sd_log for f in floors] == [f.sd_log for f in learn_floors(runs)]  # rounds survive the store
        store.floors.save(floors)
        assert store.floors.list() == floors


# -- the CLI -------------------------------------------------------------------------------------


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture()
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "results.db")
    with Store.open(path) as store:
        store.save_runs(history())
    return path


def test_noise_learn_stores_and_show_prints_them(db: str) -> None:
    result = invoke("noise", "learn", "--db", db)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "#",
        "system",
        "op",
        "size",
        "dtype",
        "redop",
        "place",
        "floor",
        "runs",
        "groups",
        "learned",
        "(UTC)",
    ]
    cells = [line.split() for line in lines[1:3]]
    floors = learn_floors(history())
    assert [c[:6] + c[7:9] for c in cells] == [
        [SYSTEM.fingerprint()[:8], "all_reduce", size, "float32", "sum", "out", "32", "4"] for size in ("1K", "1M")
    ]
    assert [c[6] for c in cells] == [f"{f.sd_log:.2%}" for f in floors]
    # a Rich table: its header behind "# ", the rows indented beneath (the learned time is now's)
    assert lines[0] == "# system    op          size  dtype    redop  place  floor  runs  groups  learned (UTC)"
    assert [line[:-19] for line in lines[1:3]] == [
        f"  {SYSTEM.fingerprint()[:8]}  all_reduce  {size:>4}  float32  sum    out    {f.sd_log:.2%}    32       4  "
        for size, f in zip(("1K", "1M"), floors)
    ]
    # 38 runs read: the incomplete ones and those without a revision are counted, not learned from
    assert lines[-1] == "# stored 2 noise floors from 38 runs (grouped by revision)"
    shown = invoke("noise", "show", "--db", db)
    assert shown.exit_code == 0
    assert shown.stdout.splitlines()[:3] == lines[:3]
    assert shown.stdout.splitlines()[-1] == "# 2 noise floors"
    doc = json.loads(invoke("noise", "show", "--db", db, "--json").stdout)
    assert doc["summary"] == "2 noise floors"
    assert [(f["size_bytes"], f["runs"], f["groups"]) for f in doc["floors"]] == [(1024, 32, 4), (1 << 20, 32, 4)]
    assert [f["sd_log"] for f in doc["floors"]] == pytest.approx([f.sd_log for f in floors])
    assert set(doc["floors"][0]) == {
        "fingerprint",
        "op",
        "algo",
        "dtype",
        "redop",
        "root",
        "size_bytes",
        "in_place",
        "sd_log",
        "runs",
        "groups",
        "learned_at",
    }
    other = json.loads(invoke("noise", "show", "--db", db, "--json", "--fingerprint", "nope").stdout)
    assert other == {"summary": "0 noise floors", "floors": []}


def test_noise_learn_options_dry_run_json_and_grouping(db: str) -> None:
    dry = invoke("noise", "learn", "--db", db, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.stderr
    doc = json.loads(dry.stdout)
    assert doc["summary"] == "would store 2 noise floors from 38 runs (grouped by revision)"
    assert len(doc["floors"]) == 2
    assert invoke("noise", "show", "--db", db).stdout == "# 0 noise floors\n"  # a dry run stores nothing
    # only the ad-hoc runs (no revision): nothing to learn by revision, but by tag they are one group of four
    result = invoke("noise", "learn", "--db", db, "--tag", "adhoc")
    assert result.exit_code == 2
    assert result.stderr == (
        "error: no series has enough history among 4 runs: a floor needs runs of the same "
        "revision (3 or more of one series, or pairs)\n"
    )
    by_tag = invoke("noise", "learn", "--db", db, "--tag", "adhoc", "--by", "tag", "--json")
    assert by_tag.exit_code == 0
    assert [(f["runs"], f["groups"]) for f in json.loads(by_tag.stdout)["floors"]] == [(4, 1)] * 2
    stored = json.loads(invoke("noise", "show", "--db", db, "--json").stdout)["floors"]
    assert [f["sd_log"] for f in stored] == [f["sd_log"] for f in json.loads(by_tag.stdout)["floors"]]


def test_noise_learn_without_history_or_store_exits_2(tmp_path: Path) -> None:
    empty = str(tmp_path / "empty.db")
    Store.open(empty).close()
    result = invoke("noise", "learn", "--db", empty)
    assert (result.exit_code, result.stderr) == (
        2,
        (
            "error: no series has enough history among 0 runs: a floor needs runs of the same revision "
            "(3 or more of one series, or pairs)\n"
        ),
    )
    missing = tmp_path / "missing.db"
    for args in (("noise", "learn"), ("noise", "show")):
        result = invoke(*args, "--db", str(missing))
        assert (result.exit_code, result.stderr) == (2, f"error: no result store at {missing}: nothing stored yet\n")
    assert not missing.exists()
    for args, message in [
        (("--min-df", "0"), "error: --min-df 0: must be >= 1\n"),
        (("--since", "yesterday"), "error: --since: 'yesterday' is not an ISO 8601 date or date/time"),
    ]:
        result = invoke("noise", "learn", "--db", empty, *args)
        assert result.exit_code == 2 and result.stderr.startswith(message), result.stderr


def test_noise_learn_and_show_on_either_backend(store_url: str) -> None:
    with Store.open(store_url) as store:
        store.save_runs(history())
    result = invoke("noise", "learn", "--db", store_url, "--json")
    assert result.exit_code == 0, result.stderr
    learned = json.loads(result.stdout)["floors"]
    shown = json.loads(invoke("noise", "show", "--db", store_url, "--json").stdout)["floors"]
    assert shown == learned and len(shown) == 2
