"""commlens compare: exact verdicts on seeded A/A and A/B data with rounds, pooling, files, noise floors, output
shapes, bad input."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from alembic import command
from typer.testing import CliRunner

from commlens.cli import regress_cmd  # noqa: F401  (registers compare and detect)
from commlens.cli.app import app
from commlens.regress import (
    CompareError,
    CompareRequest,
    CompareSettings,
    RowSide,
    compare_runs,
    judge,
    run_compare,
)
from commlens.regress.compare import CompareSettingsError
from commlens.regress.stats import benjamini_hochberg
from commlens.results import (
    Measurement,
    Run,
    SystemInfo,
    TimeStats,
    run_to_dict,
    write_json,
)
from commlens.results.records import FloorKey, MeasurementKey
from commlens.store import Store, make_engine
from commlens.store.noise import NoiseFloor
from commlens.store.schema import _alembic_config

SYSTEM = SystemInfo(world_size=4, backend="gloo", cpu_model="test-cpu", cpu_cores=8, torch_version="2.4.0")
SIZES = (1024, 1 << 20)  # two sizes x two placements: four rows
UNMEASURED = "run-to-run variation not measured"


def _level_s(size_bytes: int) -> float:
    return 20e-6 + size_bytes / 5e9


def make_run(
    run_id: str,
    factor: float,
    seed: int,
    *,
    n: int = 30,
    rounds: int = 5,
    cv: float = 0.02,
    drift: float = 0.01,
    tag: str | None = None,
    started_at: str = "2025-05-01T02:00:00Z",
    system: SystemInfo = SYSTEM,
) -> Run:
    """A run of all_reduce at SIZES, both placements, its ``n`` iterations timed in ``rounds`` rounds.

    Like a real machine, each round has a level of its own: the size's level x ``factor`` x exp(N(0, drift))
    (the machine's state shifts between rounds as between runs); each time in it is that level x (1 + N(0, cv)).
    """
    rng = np.random.default_rng(seed)
    counts = [n // rounds + (1 if r < n % rounds else 0) for r in range(rounds)]
    ms = []
    for size in SIZES:
        for in_place in (False, True):
            levels = _level_s(size) * factor * np.exp(rng.normal(0.0, drift, rounds))
            samples = np.concatenate([level * (1.0 + rng.normal(0.0, cv, k)) for level, k in zip(levels, counts)])
            ms.append(
                Measurement(
                    op="all_reduce",
                    dtype="float32",
                    redop="sum",
                    size_bytes=size,
                    count=size // 4,
                    in_place=in_place,
                    world_size=system.world_size,
                    samples_s=tuple(samples),
                    rounds=tuple(counts) if rounds > 1 else None,
                )
            )
    return Run(run_id=run_id, started_at=started_at, system=system, measurements=tuple(ms), tag=tag)


def reported_run(run_id: str, factor: float, *, tag: str | None = None) -> Run:
    """A run as an nccl-tests log without -I gives it: a reported mean per row, no samples."""
    ms = [
        Measurement(
            op="all_reduce",
            dtype="float32",
            redop="sum",
            size_bytes=size,
            count=size // 4,
            in_place=in_place,
            world_size=SYSTEM.world_size,
            samples_s=(),
            reported=TimeStats(
                mean_s=_level_s(size) * factor,
                p50_s=None,
                p95_s=None,
                p99_s=None,
                min_s=None,
                max_s=None,
                stdev_s=None,
                cv=None,
                n=20,
            ),
        )
        for size in SIZES
        for in_place in (False, True)
    ]
    return Run(run_id=run_id, started_at="2025-05-01T02:00:00Z", system=SYSTEM, measurements=tuple(ms), tag=tag)


def floors_of(run: Run, sd_log: float) -> list[NoiseFloor]:
    """A noise floor of ``sd_log`` for every row of ``run``'s system, as ``commlens noise learn`` stores it."""
    fp = run.system.fingerprint()
    return [
        NoiseFloor(
            fingerprint=fp,
            key=MeasurementKey(m.op, m.algo, m.dtype, m.redop, m.root, m.size_bytes, m.in_place),
            sd_log=sd_log,
            runs=10,
            groups=2,
            learned_at="2025-05-01T00:00:00+00:00",
        )
        for m in run.measurements
    ]


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, list(args), env=env)


@pytest.fixture()
def db(tmp_path: Path) -> str:
    path = tmp_path / "results.db"
    with Store.open(str(path)) as store:
        store.save_run(make_run("base0000aaaa", 1.00, seed=1))
        store.save_run(make_run("same0000bbbb", 1.00, seed=2))
        store.save_run(make_run("slow0000cccc", 1.10, seed=3))
        store.save_run(make_run("fast0000dddd", 0.90, seed=4))
        store.save_run(make_run("few00000eeee", 1.10, seed=5, n=10, rounds=2))
        store.save_run(make_run("once0000aaaa", 1.00, seed=6, rounds=1))
        store.save_run(make_run("once0000slow", 1.10, seed=7, rounds=1))
        store.save_run(make_run("once0000twice", 2.00, seed=8, rounds=1))
        for i in range(5):
            store.save_run(make_run(f"night{i}00000", 1.00, seed=10 + i, tag="nightly"))
            store.save_run(make_run(f"prrun{i}00000", 1.10, seed=20 + i, tag="pr-123"))
    return str(path)


def _verdicts(stdout: str) -> list[str]:
    return [row["verdict"] for row in json.loads(stdout)["rows"]]


def test_aa_compare_says_no_change_and_exits_0(db: str) -> None:
    result = invoke("compare", "base0000aaaa", "same0000bbbb", "--db", db, "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [r["verdict"] for r in doc["rows"]] == ["no change"] * 4
    assert {r["reason"] for r in doc["rows"]} == {"not significant"}
    assert [(r["unit"], r["base_n"], r["candidate_n"], r["base_rounds"], r["base_runs"]) for r in doc["rows"]] == [
        ("rounds", 5, 5, 5, 1)
    ] * 4
    assert doc["summary"] == {
        "rows": 4,
        "regressions": 0,
        "improvements": 0,
        "no_change": 4,
        "unknown": 0,
        "geomean_ratio": pytest.approx(1.0, abs=0.01),
        "only_in_base": 0,
        "only_in_candidate": 0,
    }


def test_clear_slowdown_is_a_regression_and_exits_1(db: str) -> None:
    result = invoke("compare", "base0000aaaa", "slow0000cccc", "--db", db)
    assert result.exit_code == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1] == (
        "# min change 3%, alpha 0.05 (Welch t on ln time, Benjamini-Hochberg over rows), 95% CI; "
        "unit: rounds or runs, each summarised by its median"
    )
    assert lines[2].split() == [
        "#",
        "op",
        "size",
        "dtype",
        "redop",
        "place",
        "n",
        "base",
        "us",
        "cand",
        "us",
        "base",
        "GB/s",
        "cand",
        "GB/s",
        "spread",
        "ratio",
        "95%",
        "CI",
        "p",
        "adj",
        "verdict",
        "reason",
    ]
    rows = [line for line in lines if line.startswith("  all_reduce")]
    assert len(rows) == 4 and all(" 5x/5x " in row and " regression " in row and "slower +" in row for row in rows)
    assert "unstable" not in result.stdout
    assert lines[-1] == "# 4 rows: 4 regressions, 0 improvements, 0 no change, 0 unknown; geometric mean ratio 1.100"


def test_clear_speedup_is_an_improvement_and_exits_0(db: str) -> None:
    result = invoke("compare", "base0000aaaa", "fast0000dddd", "--db", db, "--format", "json")
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert _verdicts(result.stdout) == ["improvement"] * 4
    assert all(r["reason"].startswith("faster -") and r["ci_high"] < 1.0 for r in doc["rows"])


def test_swapping_sides_swaps_regression_and_improvement(db: str) -> None:
    result = invoke("compare", "slow0000cccc", "base0000aaaa", "--db", db, "--format", "json")
    assert result.exit_code == 0
    assert _verdicts(result.stdout) == ["improvement"] * 4


def test_too_few_rounds_is_unknown_with_the_reason(db: str) -> None:
    result = invoke("compare", "base0000aaaa", "few00000eeee", "--db", db, "--format", "json")
    assert result.exit_code == 0  # a 10 % slowdown that cannot be shown does not fail the gate
    doc = json.loads(result.stdout)
    assert [(r["verdict"], r["reason"], r["candidate_rounds"]) for r in doc["rows"]] == [
        ("unknown", f"{UNMEASURED} (candidate: fewer than 3 rounds or runs, no noise floor known)", 2)
    ] * 4
    assert all(r["ratio"] > 1.05 and r["p_value"] is None and r["ci_low"] is None for r in doc["rows"])
    # --min-samples 2 takes two rounds as a measured spread: judged, though two rounds resolve little
    result = invoke("compare", "base0000aaaa", "few00000eeee", "--db", db, "--format", "json", "--min-samples", "2")
    assert result.exit_code == 1
    assert _verdicts(result.stdout) == ["regression", "unknown", "unknown", "regression"]
    assert all(r["p_value"] is not None for r in json.loads(result.stdout)["rows"])


def test_single_round_sides_are_unknown_run_to_run_variation_not_measured(db: str) -> None:
    """One round a side measures nothing of the next run: even a 10 % or 2x change is not judged."""
    for base, cand in [
        ("once0000aaaa", "once0000slow"),
        ("once0000aaaa", "once0000twice"),
        ("base0000aaaa", "once0000slow"),
    ]:
        result = invoke("compare", base, cand, "--db", db, "--format", "json", "--no-noise-floors")
        assert result.exit_code == 0, (base, cand)
        rows = json.loads(result.stdout)["rows"]
        where = "candidate" if base == "base0000aaaa" else "base and candidate"
        assert [(r["unit"], r["verdict"], r["reason"], r["p_value"]) for r in rows] == [
            (
                "single round",
                "unknown",
                f"{UNMEASURED} ({where}: fewer than 3 rounds or runs, no noise floor known)",
                None,
            )
        ] * 4
        assert all(r["candidate_n"] == 1 and r["candidate_spread"] is None for r in rows)
    table = invoke("compare", "once0000aaaa", "once0000twice", "--db", db, "--no-noise-floors").stdout
    assert [line.split()[5] for line in table.splitlines() if line.startswith("  all_reduce")] == ["1x/1x"] * 4


def test_a_huge_change_beyond_the_noise_floor_is_judged_on_single_rounds(db: str) -> None:
    """With a learned floor of 2 % a run, a 2x slowdown is far beyond 5 floors: a regression even on one
    round a side; +10 % is within 5 floors and stays unknown."""
    with Store.open(db) as store:
        store.floors.save(floors_of(store.get_run("once0000aaaa"), 0.02))
    result = invoke("compare", "once0000aaaa", "once0000twice", "--db", db, "--format", "json")
    assert result.exit_code == 1, result.stderr
    rows = json.loads(result.stdout)["rows"]
    assert [r["verdict"] for r in rows] == ["regression"] * 4
    assert all(r["noise_floor"] == 0.02 and r["unit"] == "single round" for r in rows)
    assert [r["reason"] for r in rows] == [
        f"slower {r['ratio'] - 1:+.1%}: one round a side, but beyond 5 noise floors (2.0% a run)" for r in rows
    ]
    assert all(0.9 < r["ratio"] - 1 < 1.1 for r in rows)
    result = invoke("compare", "once0000aaaa", "once0000slow", "--db", db, "--format", "json")
    assert result.exit_code == 0
    rows = json.loads(result.stdout)["rows"]
    assert [(r["verdict"], r["reason"]) for r in rows] == [
        (
            "unknown",
            (f"{UNMEASURED} (a side has one round); {r['ratio'] - 1:+.1%} is within 5 noise floors (2.0% a run)"),
        )
        for r in rows
    ]
    # the same floor given on the command line; --no-noise-floors ignores the stored ones
    given = invoke("compare", "once0000aaaa", "once0000twice", "--db", db, "--format", "json", "--noise-floor", "2%")
    assert (
        given.exit_code == 1
        and json.loads(given.stdout)["rows"]
        == json.loads(invoke("compare", "once0000aaaa", "once0000twice", "--db", db, "--format", "json").stdout)["rows"]
    )
    ignored = invoke("compare", "once0000aaaa", "once0000twice", "--db", db, "--format", "json", "--no-noise-floors")
    assert ignored.exit_code == 0
    assert {(r["verdict"], r["noise_floor"]) for r in json.loads(ignored.stdout)["rows"]} == {("unknown", None)}


def _tight(run_id: str, factor: float, seed: int) -> Run:
    return make_run(run_id, factor, seed, n=50, cv=0.005, drift=0.002)


def test_a_floor_larger_than_the_rounds_spread_makes_a_borderline_regression_unknown() -> None:
    """Rounds of one run scatter by 0.2 %: +4 % is a regression on them alone; a floor of 5 % a run says
    whole runs scatter far more, and one run a side cannot resolve 3 % then."""
    base, cand = _tight("a", 1.00, 31), _tight("b", 1.04, 32)
    alone = compare_runs([base], [cand])
    assert [r.verdict for r in alone.rows] == ["regression"] * 4
    assert all(
        r.reason == f"slower {r.ratio - 1:+.1%}" and max(r.base_spread, r.candidate_spread) < 0.01 for r in alone.rows
    )
    floors = {FloorKey(SYSTEM.fingerprint(), m.key): 0.05 for m in base.measurements}
    floored = compare_runs([base], [cand], floors=floors)
    assert [(r.verdict, r.reason, r.noise_floor) for r in floored.rows] == [
        (
            "unknown",
            (
                f"unstable: too noisy to resolve 3% (runs of this series scatter by 5.0%, its noise floor; "
                f"{r.ratio - 1:+.1%})"
            ),
            0.05,
        )
        for r in alone.rows
    ]
    assert [r.ratio for r in floored.rows] == [r.ratio for r in alone.rows]  # the floor widens, never shifts
    # a floor below the rounds' own spread changes nothing
    small = {key: 1e-4 for key in floors}
    assert [(r.verdict, r.reason) for r in compare_runs([base], [cand], floors=small).rows] == [
        (r.verdict, r.reason) for r in alone.rows
    ]


def test_unstable_is_never_said_of_a_regression() -> None:
    """Over noisy and quiet, slow and equal seeded pairs, a row is unstable (unknown) or a regression, not both."""
    seen: set[str] = set()
    for seed in range(12):
        for factor in (1.0, 1.05, 1.15):
            for drift in (0.005, 0.05, 0.15):
                base = make_run("a", 1.0, 100 + seed, drift=drift)
                cand = make_run("b", factor, 200 + seed, drift=drift)
                for row in compare_runs([base], [cand]).rows:
                    seen.add(row.verdict)
                    assert "unstable" not in row.reason or row.verdict == "unknown", row
                    if row.verdict == "regression":
                        assert row.reason.startswith("slower +") and "unstable" not in row.reason
    assert seen == {"regression", "improvement", "no change", "unknown"}


def test_too_noisy_is_unknown_unstable_with_the_spread() -> None:
    base, cand = make_run("a", 1.0, seed=7, drift=0.15), make_run("b", 1.0, seed=8, drift=0.15)
    report = compare_runs([base], [cand])
    for row in report.rows:
        worst = max(row.base_spread, row.candidate_spread)
        assert (row.verdict, row.reason) == (
            "unknown",
            f"unstable: too noisy to resolve 3% (runs or rounds scatter by {worst:.1%}; {row.change:+.1%})",
        )
        assert (row.ci_high - row.ci_low) / 2 > 0.03


def test_tags_pool_their_runs(db: str) -> None:
    result = invoke("compare", "nightly", "pr-123", "--db", db, "--format", "json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert sorted(doc["base"]["run_ids"]) == [f"night{i}00000" for i in range(5)]
    assert len(doc["candidate"]["run_ids"]) == 5
    for row in doc["rows"]:
        assert (row["unit"], row["base_runs"], row["base_n"], row["candidate_n"], row["base_rounds"]) == (
            "runs",
            5,
            5,
            5,
            25,
        )
        assert (row["verdict"], row["reason"]) == ("regression", f"slower {row['ratio'] - 1:+.1%}")
    table = invoke("compare", "nightly", "pr-123", "--db", db).stdout
    assert [line.split()[5] for line in table.splitlines() if line.startswith("  all_reduce")] == ["5r/5r"] * 4


def test_a_tag_can_be_named_explicitly_and_a_run_by_prefix(db: str) -> None:
    result = invoke("compare", "tag:nightly", "run:slow0000", "--db", db, "--format", "json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["candidate"]["run_ids"] == ["slow0000cccc"] and len(doc["base"]["run_ids"]) == 5
    # five runs against the five rounds of one run: the weaker side's unit
    assert [(r["unit"], r["base_n"], r["candidate_n"], r["candidate_rounds"]) for r in doc["rows"]] == [
        ("rounds", 5, 5, 5)
    ] * 4


def test_reported_statistics_need_a_pool_of_runs() -> None:
    # One run a side with only reported means: a ratio, but no verdict (one figure is one round).
    report = compare_runs([reported_run("a", 1.0)], [reported_run("b", 1.2)])
    assert [(r.verdict, r.reason, r.unit) for r in report.rows] == [
        (
            "unknown",
            f"{UNMEASURED} (base and candidate: fewer than 3 rounds or runs, no noise floor known)",
            "single round",
        )
    ] * 4
    assert [round(r.ratio, 6) for r in report.rows] == [1.2] * 4
    # Reported on one side only: the reason says which.
    report = compare_runs([reported_run("a", 1.0)], [make_run("b", 1.0, seed=1)])
    assert {r.reason for r in report.rows} == {
        f"{UNMEASURED} (base: fewer than 3 rounds or runs, no noise floor known)"
    }
    # Pools of runs: each run's mean is one observation.
    base = [reported_run(f"b{i}", 1.0 + d) for i, d in enumerate((-0.01, 0.0, 0.01, 0.005, -0.005))]
    cand = [reported_run(f"c{i}", 1.1 + d) for i, d in enumerate((0.0, 0.01, -0.01, 0.005, -0.005))]
    report = compare_runs(base, cand)
    assert [(r.verdict, r.unit, r.base_n, r.candidate_n) for r in report.rows] == [("regression", "runs", 5, 5)] * 4
    report = compare_runs(base[:2], cand[:2])
    assert {(r.verdict, r.reason) for r in report.rows} == {
        ("unknown", f"{UNMEASURED} (base and candidate: fewer than 3 rounds or runs, no noise floor known)")
    }


def test_files_are_compared_without_touching_a_store(tmp_path: Path) -> None:
    write_json(tmp_path / "base.json", run_to_dict(make_run("base", 1.0, seed=1)))
    write_json(tmp_path / "cand.json", run_to_dict(make_run("cand", 1.1, seed=3)))
    never = tmp_path / "never.db"
    result = invoke(
        "compare", str(tmp_path / "base.json"), str(tmp_path / "cand.json"), "--db", str(never), "--format", "json"
    )
    assert result.exit_code == 1, result.stderr
    assert _verdicts(result.stdout) == ["regression"] * 4
    assert [r["candidate_rounds"] for r in json.loads(result.stdout)["rows"]] == [5] * 4  # rounds kept in the file
    assert not never.exists()
    assert result.stderr == ""


def test_files_are_compared_when_the_default_store_has_an_old_schema(tmp_path: Path) -> None:
    """The default store is only read for noise floors: an old one is a warning, and the files are compared."""
    old = tmp_path / "old.db"
    engine = make_engine(f"sqlite:///{old}")
    try:
        with engine.begin() as conn:
            command.upgrade(_alembic_config(conn), "0003")
    finally:
        engine.dispose()
    write_json(tmp_path / "base.json", run_to_dict(make_run("base", 1.0, seed=1)))
    write_json(tmp_path / "cand.json", run_to_dict(make_run("cand", 1.1, seed=3)))
    for env in ({"COMMLENS_DB": str(old)}, {"COMMLENS_DB": "", "XDG_DATA_HOME": str(tmp_path / "xdg")}):
        if "XDG_DATA_HOME" in env:
            (tmp_path / "xdg" / "commlens").mkdir(parents=True)
            old.rename(tmp_path / "xdg" / "commlens" / "results.db")
        result = invoke(
            "compare", str(tmp_path / "base.json"), str(tmp_path / "cand.json"), "--format", "json", env=env
        )
        assert result.exit_code == 1, result.stderr
        assert _verdicts(result.stdout) == ["regression"] * 4
        [warning] = result.stderr.splitlines()
        assert warning.startswith("warning: noise floors not read: ")
        assert "has schema 0003, this commlens needs 0007: run `commlens db upgrade`" in warning


def test_markdown_is_a_pull_request_table_with_regressions_first(db: str) -> None:
    with Store.open(db) as store:
        mixed = make_run("mixed000ffff", 1.0, seed=2)
        slow = make_run("x", 1.10, seed=3)
        # Row 4 (1 MiB, in place) slowed down; the others unchanged.
        store.save_run(
            Run(
                run_id="mixed000ffff",
                started_at=mixed.started_at,
                system=SYSTEM,
                measurements=mixed.measurements[:3] + slow.measurements[3:],
            )
        )
    result = invoke("compare", "base0000aaaa", "mixed000ffff", "--db", db, "--format", "markdown")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "### commlens compare"
    assert lines[2] == "Base `base0000aaaa` (1 run) vs candidate `mixed000ffff` (1 run)"
    assert lines[4].startswith("**4 rows: 1 regressions, 0 improvements, 3 no change, 0 unknown; geometric mean")
    assert lines[6] == (
        "| op | size | dtype | redop | place | n | base us | cand us | base GB/s | cand GB/s | spread "
        "| ratio | 95% CI | p adj | verdict | reason |"
    )
    assert lines[7] == "|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---|"
    table = lines[8:12]
    assert table[0].startswith("| all_reduce | 1M | float32 | sum | in | 5x/5x |")
    assert "| **regression** | slower +" in table[0]
    assert all("| no change |" in row for row in table[1:])
    assert lines[-1] == (
        "<sub>min change 3%, alpha 0.05 (Welch t on ln time, Benjamini-Hochberg over rows), 95% CI; "
        "unit: rounds or runs, each summarised by its median; ratio = candidate / base typical time; "
        "n = runs (r) or rounds of one run (x) a side</sub>"
    )
    assert all(ord(ch) < 128 for ch in result.stdout)  # no emoji


def test_json_carries_settings_and_every_row_field(db: str) -> None:
    result = invoke("compare", "base0000aaaa", "slow0000cccc", "--db", db, "--format", "json")
    doc = json.loads(result.stdout)
    assert set(doc) == {"base", "candidate", "settings", "summary", "warnings", "rows"}
    assert doc["settings"] == {
        "min_change": 0.03,
        "alpha": 0.05,
        "min_samples": 3,
        "confidence": 0.95,
        "statistic": "median",
        "far_floors": 5.0,
    }
    assert doc["warnings"] == []
    row = doc["rows"][0]
    assert set(row) == {
        "op",
        "algo",
        "dtype",
        "redop",
        "root",
        "size_bytes",
        "in_place",
        "unit",
        "base_n",
        "candidate_n",
        "base_runs",
        "candidate_runs",
        "base_rounds",
        "candidate_rounds",
        "base_time_s",
        "candidate_time_s",
        "base_busbw_bytes_per_s",
        "candidate_busbw_bytes_per_s",
        "base_spread",
        "candidate_spread",
        "noise_floor",
        "ratio",
        "ci_low",
        "ci_high",
        "p_value",
        "p_adjusted",
        "verdict",
        "reason",
    }
    assert (row["op"], row["size_bytes"], row["in_place"], row["noise_floor"]) == ("all_reduce", 1024, False, None)
    assert row["ci_low"] < row["ratio"] < row["ci_high"]
    assert row["ratio"] == pytest.approx(row["candidate_time_s"] / row["base_time_s"])
    assert row["candidate_busbw_bytes_per_s"] == pytest.approx(
        row["base_busbw_bytes_per_s"] * row["base_time_s"] / row["candidate_time_s"]
    )
    assert 0.0 < row["base_spread"] < 0.05 and 0.0 < row["candidate_spread"] < 0.05
    # No resampling: the same inputs give the same output, byte for byte.
    again = invoke("compare", "base0000aaaa", "slow0000cccc", "--db", db, "--format", "json")
    assert again.stdout == result.stdout
    # --statistic mean summarises each round by its mean instead, and says so.
    mean = json.loads(
        invoke("compare", "base0000aaaa", "slow0000cccc", "--db", db, "--format", "json", "--statistic", "mean").stdout
    )
    assert mean["settings"]["statistic"] == "mean" and _verdicts(json.dumps(mean)) == ["regression"] * 4
    assert [r["base_time_s"] for r in mean["rows"]] != [r["base_time_s"] for r in doc["rows"]]


def test_different_systems_are_compared_with_a_warning(tmp_path: Path) -> None:
    other = SystemInfo(world_size=4, backend="gloo", cpu_model="other-cpu", cpu_cores=8, torch_version="2.4.0")
    write_json(tmp_path / "a.json", run_to_dict(make_run("a", 1.0, seed=1)))
    write_json(tmp_path / "b.json", run_to_dict(make_run("b", 1.0, seed=2, system=other)))
    result = invoke("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--db", str(tmp_path / "none.db"))
    assert result.exit_code == 0
    assert result.stderr.startswith(
        "warning: base and candidate ran on different systems (fingerprint "
        f"{SYSTEM.fingerprint()} vs {other.fingerprint()})"
    )


def test_a_failed_results_check_leaves_its_rows_unjudged(db: str) -> None:
    slow = make_run("x", 1.10, seed=3)
    wrong = dataclasses.replace(slow.measurements[0], nwrong=3)
    with Store.open(db) as store:
        store.save_run(
            Run(
                run_id="wrong000gggg",
                started_at=slow.started_at,
                system=SYSTEM,
                status="check_failed",
                measurements=(wrong, *(dataclasses.replace(m, nwrong=0) for m in slow.measurements[1:])),
            )
        )
    result = invoke("compare", "base0000aaaa", "wrong000gggg", "--db", db, "--format", "json")
    assert result.exit_code == 1  # the rows that were right are still judged
    doc = json.loads(result.stdout)
    assert [(r["verdict"], r["reason"]) for r in doc["rows"]] == [
        ("unknown", "results check failed (wrong000gggg): wrong results are not timed results")
    ] + [("regression", f"slower {r['ratio'] - 1:+.1%}") for r in doc["rows"][1:]]
    assert doc["warnings"] == [
        (
            "wrong000gggg: results check failed in run wrong000gggg: its rows with wrong "
            "results are not judged (verdict unknown); its other rows are"
        )
    ]


@pytest.mark.parametrize(
    ("base", "candidate", "message"),
    [
        ("base0000aaaa", "nope", "error: candidate 'nope' is not a file, a tag or a run id in "),
        ("missing.json", "base0000aaaa", "error: base 'missing.json': no such file"),
        ("tag:no-such-tag", "base0000aaaa", "error: base: no run has tag 'no-such-tag' in "),
        ("run:nightly", "base0000aaaa", "error: base: no run matches 'nightly'"),
    ],
)
def test_unknown_inputs_exit_2_with_a_clear_error(db: str, base: str, candidate: str, message: str) -> None:
    result = invoke("compare", base, candidate, "--db", db)
    assert result.exit_code == 2
    assert result.stderr.startswith(message)


def test_a_malformed_file_and_bad_options_exit_2(db: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = invoke("compare", str(bad), "base0000aaaa", "--db", db)
    assert result.exit_code == 2 and result.stderr.startswith(f"error: base: {bad}:1: ")
    for args, message in [
        (
            ("--min-change", "3"),
            "error: --min-change '3': expected a percentage such as 3% or a fraction such as 0.03\n",
        ),
        (("--alpha", "2"), "error: alpha must be in (0, 1), got 2.0\n"),
        (("--min-samples", "1"), "error: min_samples must be >= 2, got 1\n"),
        (("--statistic", "mode"), "error: statistic must be median or mean, got 'mode'\n"),
        (
            ("--noise-floor", "150%"),
            "error: --noise-floor '150%': expected a percentage such as 3% or a fraction such as 0.03\n",
        ),
        (
            ("--noise-floor", "lots"),
            "error: --noise-floor 'lots': expected a percentage such as 3% or a fraction such as 0.03\n",
        ),
        (("--noise-floor", "0"), "error: --noise-floor 0: a floor must be > 0 (use --no-noise-floors for none)\n"),
        (
            ("--noise-floor", "5%", "--no-noise-floors"),
            "error: --noise-floor and --no-noise-floors contradict each other: give one\n",
        ),
    ]:
        result = invoke("compare", "base0000aaaa", "same0000bbbb", "--db", db, *args)
        assert (result.exit_code, result.stderr) == (2, message), args


def test_the_noise_floor_option_sets_every_rows_floor(db: str) -> None:
    """--noise-floor gives every row a floor: 2 % a run still resolves 10 % between single runs, 8 % does not."""
    result = invoke("compare", "base0000aaaa", "slow0000cccc", "--db", db, "--format", "json", "--noise-floor", "2%")
    assert result.exit_code == 1
    rows = json.loads(result.stdout)["rows"]
    assert [(r["verdict"], r["noise_floor"]) for r in rows] == [("regression", 0.02)] * 4
    table = invoke("compare", "base0000aaaa", "slow0000cccc", "--db", db, "--noise-floor", "0.02").stdout
    assert all("(floor 2.0%)" in line for line in table.splitlines() if line.startswith("  all_reduce"))
    result = invoke("compare", "base0000aaaa", "slow0000cccc", "--db", db, "--format", "json", "--noise-floor", "8%")
    assert result.exit_code == 0
    assert [(r["verdict"], r["reason"].split(":")[0], r["noise_floor"]) for r in json.loads(result.stdout)["rows"]] == [
        ("unknown", "unstable", 0.08)
    ] * 4
    # stored floors are used unless told otherwise
    with Store.open(db) as store:
        store.floors.save(floors_of(store.get_run("base0000aaaa"), 0.08))
    stored = json.loads(invoke("compare", "base0000aaaa", "slow0000cccc", "--db", db, "--format", "json").stdout)
    assert {(r["verdict"], r["noise_floor"]) for r in stored["rows"]} == {("unknown", 0.08)}
    off = invoke("compare", "base0000aaaa", "slow0000cccc", "--db", db, "--format", "json", "--no-noise-floors")
    assert off.exit_code == 1
    assert {(r["verdict"], r["noise_floor"]) for r in json.loads(off.stdout)["rows"]} == {("regression", None)}


def test_no_row_in_common_is_an_error() -> None:
    a = make_run("a", 1.0, seed=1)
    b = Run(
        run_id="b",
        started_at=a.started_at,
        system=SYSTEM,
        measurements=(
            Measurement(
                op="all_gather",
                dtype="float32",
                size_bytes=1024,
                count=64,
                in_place=False,
                world_size=4,
                samples_s=(1e-5,) * 20,
            ),
        ),
    )
    with pytest.raises(CompareError, match="no row in common"):
        compare_runs([a], [b])


def _side(rng: np.random.Generator, level: float, sd: float, rounds: int) -> RowSide:
    """One run's row: ``rounds`` round medians scattered by ``sd`` around ``level``."""
    return RowSide((tuple(level * (1 + rng.normal(0, sd, rounds))),))


def test_min_change_decides_what_counts() -> None:
    # A real 2 % slowdown, tightly measured over 10 rounds a side: below the default 3 %, a regression at 1 %.
    rng = np.random.default_rng(11)
    pair = (_side(rng, 1e-4, 0.005, 10), _side(rng, 1.02e-4, 0.005, 10))
    [default] = judge([pair])
    assert (default.verdict, default.reason) == ("no change", "+2.1%, below the 3% threshold")
    [strict] = judge([pair], CompareSettings(min_change=0.01))
    assert (strict.verdict, strict.reason) == ("regression", "slower +2.1%")


def test_p_values_are_adjusted_over_rows_benjamini_hochberg() -> None:
    p = np.array([0.01, 0.04, 0.03, 0.005, 0.5])
    assert benjamini_hochberg(p).tolist() == pytest.approx([0.025, 0.05, 0.05, 0.025, 0.5])
    # Among 22 rows, a clear slowdown stays a regression; a marginal one does not.
    rng = np.random.default_rng(9)
    pairs = [(_side(rng, 1e-4, 0.015, 10), _side(rng, 1e-4, 0.015, 10)) for _ in range(20)]
    clear = (_side(rng, 1e-4, 0.015, 10), _side(rng, 1.08e-4, 0.015, 10))
    rng = np.random.default_rng(108)
    marginal = (_side(rng, 1e-4, 0.015, 10), _side(rng, 1.04e-4, 0.015, 10))
    [alone] = judge([marginal])
    assert (alone.verdict, alone.reason, round(alone.p_value, 4)) == ("regression", "slower +3.0%", 0.0071)
    together = judge([clear, marginal, *pairs])
    assert (together[0].verdict, together[0].reason) == ("regression", "slower +8.8%")
    assert together[0].p_adjusted == pytest.approx(together[0].p_value * 22)  # the smallest p of 22
    assert (together[1].verdict, together[1].reason) == (
        "no change",
        "not significant after adjusting for 22 rows (adjusted p 0.078)",
    )
    assert [j.verdict for j in together[2:]] == ["no change"] * 20


def test_nccl_tests_logs_without_samples_give_a_ratio_but_no_verdict(tmp_path: Path) -> None:
    data = Path(__file__).parent / "data" / "regress"
    result = invoke(
        "compare",
        str(data / "base-all_reduce.log"),
        str(data / "candidate-all_reduce-10pct-slower.log"),
        "--format",
        "json",
        "--db",
        str(tmp_path / "none.db"),
    )
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [
        (r["size_bytes"], r["in_place"], round(r["ratio"], 3), r["unit"], r["verdict"], r["reason"])
        for r in doc["rows"]
    ] == [
        (
            size,
            in_place,
            1.1,
            "single round",
            "unknown",
            f"{UNMEASURED} (base and candidate: fewer than 3 rounds or runs, no noise floor known)",
        )
        for in_place in (False, True)
        for size in (1 << 20, 2 << 20, 4 << 20)
    ]
    assert doc["summary"]["unknown"] == 6 and doc["warnings"] == []


def test_pooled_tags_of_summaries_from_the_store_compare_run_means(tmp_path: Path) -> None:
    db = str(tmp_path / "summaries.db")
    with Store.open(db) as store:
        for i, d in enumerate((-0.01, 0.0, 0.01, 0.005, -0.005)):
            store.save_run(reported_run(f"nccl-base-{i}", 1.0 + d, tag="nccl-nightly"))
            store.save_run(reported_run(f"nccl-cand-{i}", 1.1 - d, tag="nccl-pr"))
    result = invoke("compare", "nccl-nightly", "nccl-pr", "--db", db, "--format", "json")
    assert result.exit_code == 1, result.stderr
    rows = json.loads(result.stdout)["rows"]
    assert [(r["unit"], r["base_n"], r["candidate_n"], r["verdict"]) for r in rows] == [
        ("runs", 5, 5, "regression")
    ] * 4
    # the geometric mean of the runs' means: 1.1 within the +-1 % the runs scatter by
    assert [r["ratio"] for r in rows] == [pytest.approx(1.1, rel=1e-4)] * 4


def test_runs_with_identical_times_on_both_sides_are_compared_not_a_zero_division():
    """Several runs per side, every time the same (a simulator, a rounded log): no spread anywhere."""
    a = [make_run(f"a{i}", 1.0, 1, cv=0.0, drift=0.0) for i in range(3)]
    b = [make_run(f"b{i}", 2.0, 1, cv=0.0, drift=0.0) for i in range(3)]
    rows = compare_runs(a, b).rows
    assert rows and all(r.verdict == "regression" for r in rows), [r.verdict for r in rows]


def test_one_compare_request_gives_the_shorthands_report_and_names_its_sides_in_errors() -> None:
    base, cand = _tight("a", 1.00, 31), _tight("b", 1.04, 32)
    floors = {FloorKey(SYSTEM.fingerprint(), m.key): 0.05 for m in base.measurements}
    request = CompareRequest((base,), (cand,), CompareSettings(min_change=0.02), "main", "pr", floors)
    report = run_compare(request)
    assert (
        report.as_dict()
        == compare_runs(
            [base], [cand], CompareSettings(min_change=0.02), base_label="main", candidate_label="pr", floors=floors
        ).as_dict()
    )
    assert [r.verdict for r in report.rows] == ["unknown"] * 4 and report.base.label == "main"
    with pytest.raises(CompareError, match="^pr: no runs to compare"):
        run_compare(CompareRequest((base,), (), base_label="main", candidate_label="pr"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.floors = None  # type: ignore[misc]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"base": []}, "base must be a tuple of runs, got list"),
        ({"candidate": None}, "candidate must be a tuple of runs, got NoneType"),
        ({"settings": {"alpha": 0.1}}, "settings must be CompareSettings, got dict"),
    ],
)
def test_a_compare_request_that_cannot_run_is_refused_when_made(fields: dict, message: str) -> None:
    with pytest.raises(CompareSettingsError, match=message) as caught:
        CompareRequest(**{"base": (), "candidate": (), **fields})
    assert caught.value.exit_code == 2
