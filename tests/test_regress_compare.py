"""commlens compare: exact verdicts on seeded A/A and A/B data, pooling, files, output shapes, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from commlens.cli import regress_cmd  # noqa: F401  (registers compare and detect)
from commlens.cli.app import app
from commlens.regress import CompareError, CompareSettings, compare_runs, judge
from commlens.regress.stats import benjamini_hochberg
from commlens.results import Measurement, Run, SystemInfo, TimeStats, run_to_dict, write_json
from commlens.store import Store

SYSTEM = SystemInfo(world_size=4, backend="gloo", cpu_model="test-cpu", cpu_cores=8, torch_version="2.4.0")
SIZES = (1024, 1 << 20)  # two sizes x two placements: four rows


def _level_s(size_bytes: int) -> float:
    return 20e-6 + size_bytes / 5e9


def make_run(run_id: str, factor: float, seed: int, *, n: int = 20, cv: float = 0.02, tag: str | None = None,
             started_at: str = "2025-05-01T02:00:00Z", system: SystemInfo = SYSTEM) -> Run:
    """A run of all_reduce at SIZES, both placements; every time is the level x ``factor`` x (1 + N(0, cv))."""
    rng = np.random.default_rng(seed)
    ms = [
        Measurement(op="all_reduce", dtype="float32", redop="sum", size_bytes=size, count=size // 4,
                    in_place=in_place, world_size=system.world_size,
                    samples_s=tuple(_level_s(size) * factor * (1.0 + rng.normal(0.0, cv, n))))
        for size in SIZES for in_place in (False, True)
    ]
    return Run(run_id=run_id, started_at=started_at, system=system, measurements=tuple(ms), tag=tag)


def reported_run(run_id: str, factor: float, *, tag: str | None = None) -> Run:
    """A run as an nccl-tests log without -I gives it: a reported mean per row, no samples."""
    ms = [
        Measurement(op="all_reduce", dtype="float32", redop="sum", size_bytes=size, count=size // 4,
                    in_place=in_place, world_size=SYSTEM.world_size, samples_s=(),
                    reported=TimeStats(mean_s=_level_s(size) * factor, p50_s=None, p95_s=None, p99_s=None,
                                       min_s=None, max_s=None, stdev_s=None, cv=None, n=20))
        for size in SIZES for in_place in (False, True)
    ]
    return Run(run_id=run_id, started_at="2025-05-01T02:00:00Z", system=SYSTEM, measurements=tuple(ms), tag=tag)


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


@pytest.fixture()
def db(tmp_path: Path) -> str:
    path = tmp_path / "results.db"
    with Store.open(str(path)) as store:
        store.save_run(make_run("base0000aaaa", 1.00, seed=1))
        store.save_run(make_run("same0000bbbb", 1.00, seed=2))
        store.save_run(make_run("slow0000cccc", 1.10, seed=3))
        store.save_run(make_run("fast0000dddd", 0.90, seed=4))
        store.save_run(make_run("few00000eeee", 1.10, seed=5, n=3))
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
    assert doc["summary"] == {"rows": 4, "regressions": 0, "improvements": 0, "no_change": 4, "unknown": 0,
                              "geomean_ratio": pytest.approx(1.0, abs=0.01), "only_in_base": 0,
                              "only_in_candidate": 0}


def test_clear_slowdown_is_a_regression_and_exits_1(db: str) -> None:
    result = invoke("compare", "base0000aaaa", "slow0000cccc", "--db", db)
    assert result.exit_code == 1, result.stderr
    lines = result.stdout.splitlines()
    rows = [line for line in lines if line.startswith("  all_reduce")]
    assert len(rows) == 4 and all(" regression " in row and "slower +" in row for row in rows)
    assert lines[-1] == "# 4 rows: 4 regressions, 0 improvements, 0 no change, 0 unknown; geometric mean ratio 1.099"


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


def test_too_few_samples_is_unknown_with_the_reason(db: str) -> None:
    result = invoke("compare", "base0000aaaa", "few00000eeee", "--db", db, "--format", "json")
    assert result.exit_code == 0  # a 10 % slowdown that cannot be shown does not fail the gate
    doc = json.loads(result.stdout)
    assert [(r["verdict"], r["reason"]) for r in doc["rows"]] == [("unknown", "too few samples (n=3)")] * 4
    assert all(r["ratio"] > 1.05 and r["p_value"] is None and r["ci_low"] is None for r in doc["rows"])


def test_too_noisy_is_unknown_with_the_cv() -> None:
    base, cand = make_run("a", 1.0, seed=7, n=10, cv=0.15), make_run("b", 1.0, seed=8, n=10, cv=0.15)
    report = compare_runs([base], [cand])
    for row in report.rows:
        worst = max(row.base_cv, row.candidate_cv)
        assert (row.verdict, row.reason) == ("unknown", f"too noisy (CV {worst:.0%})")
        assert (row.ci_high - row.ci_low) / 2 > 0.03


def test_tags_pool_their_runs(db: str) -> None:
    result = invoke("compare", "nightly", "pr-123", "--db", db, "--format", "json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert sorted(doc["base"]["run_ids"]) == [f"night{i}00000" for i in range(5)]
    assert len(doc["candidate"]["run_ids"]) == 5
    for row in doc["rows"]:
        assert (row["unit"], row["base_runs"], row["base_n"], row["candidate_n"]) == ("samples", 5, 100, 100)
        assert row["verdict"] == "regression"


def test_a_tag_can_be_named_explicitly_and_a_run_by_prefix(db: str) -> None:
    result = invoke("compare", "tag:nightly", "run:slow0000", "--db", db, "--format", "json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["candidate"]["run_ids"] == ["slow0000cccc"] and len(doc["base"]["run_ids"]) == 5


def test_reported_statistics_need_a_pool_of_runs(tmp_path: Path) -> None:
    # One run a side with only reported means: a ratio, but no verdict.
    report = compare_runs([reported_run("a", 1.0)], [reported_run("b", 1.2)])
    assert [(r.verdict, r.reason, r.unit) for r in report.rows] == [
        ("unknown", "no samples: reported statistics only", "run means")] * 4
    assert [round(r.ratio, 6) for r in report.rows] == [1.2] * 4
    # Reported on one side only: the reason says which.
    report = compare_runs([reported_run("a", 1.0)], [make_run("b", 1.0, seed=1)])
    assert {r.reason for r in report.rows} == {"no samples: reported statistics only (base)"}
    # Pools of runs: each run's mean is one observation.
    base = [reported_run(f"b{i}", 1.0 + d) for i, d in enumerate((-0.01, 0.0, 0.01, 0.005, -0.005))]
    cand = [reported_run(f"c{i}", 1.1 + d) for i, d in enumerate((0.0, 0.01, -0.01, 0.005, -0.005))]
    report = compare_runs(base, cand)
    assert [(r.verdict, r.unit, r.base_n, r.candidate_n) for r in report.rows] == [
        ("regression", "run means", 5, 5)] * 4
    report = compare_runs(base[:3], cand[:3])
    assert {(r.verdict, r.reason) for r in report.rows} == {("unknown", "too few runs (n=3)")}


def test_files_are_compared_without_touching_a_store(tmp_path: Path) -> None:
    write_json(tmp_path / "base.json", run_to_dict(make_run("base", 1.0, seed=1)))
    write_json(tmp_path / "cand.json", run_to_dict(make_run("cand", 1.1, seed=3)))
    never = tmp_path / "never.db"
    result = invoke("compare", str(tmp_path / "base.json"), str(tmp_path / "cand.json"), "--db", str(never),
                    "--format", "json")
    assert result.exit_code == 1, result.stderr
    assert _verdicts(result.stdout) == ["regression"] * 4
    assert not never.exists()


def test_markdown_is_a_pull_request_table_with_regressions_first(db: str) -> None:
    with Store.open(db) as store:
        mixed = make_run("mixed000ffff", 1.0, seed=2)
        slow = make_run("x", 1.10, seed=3)
        # Row 4 (1 MiB, in place) slowed down; the others unchanged.
        store.save_run(Run(run_id="mixed000ffff", started_at=mixed.started_at, system=SYSTEM,
                           measurements=mixed.measurements[:3] + slow.measurements[3:]))
    result = invoke("compare", "base0000aaaa", "mixed000ffff", "--db", db, "--format", "markdown")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "### commlens compare"
    assert lines[2] == "Base `base0000aaaa` (1 run) vs candidate `mixed000ffff` (1 run)"
    assert lines[4].startswith("**4 rows: 1 regressions, 0 improvements, 3 no change, 0 unknown; geometric mean")
    assert lines[6] == ("| op | size | dtype | redop | place | n | base us | cand us | base GB/s | cand GB/s | ratio "
                        "| 95% CI | p | verdict | reason |")
    assert lines[7] == "|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---|---|"
    table = lines[8:12]
    assert table[0].startswith("| all_reduce | 1M | float32 | sum | in | 20/20 |")
    assert "| **regression** | slower +" in table[0]
    assert all("| no change |" in row for row in table[1:])
    assert lines[-1].startswith("<sub>min change 3%, alpha 0.05 (Benjamini-Hochberg over rows)")
    assert all(ord(ch) < 128 for ch in result.stdout)  # no emoji


def test_json_carries_settings_seed_and_every_row_field(db: str) -> None:
    result = invoke("compare", "base0000aaaa", "slow0000cccc", "--db", db, "--format", "json", "--seed", "7")
    doc = json.loads(result.stdout)
    assert set(doc) == {"base", "candidate", "settings", "summary", "warnings", "rows"}
    assert doc["settings"] == {"min_change": 0.03, "alpha": 0.05, "min_samples": 5, "confidence": 0.95,
                               "resamples": 2000, "seed": 7}
    assert doc["warnings"] == []
    row = doc["rows"][0]
    assert set(row) == {
        "op", "algo", "dtype", "redop", "root", "size_bytes", "in_place", "unit", "base_n", "candidate_n",
        "base_runs", "candidate_runs", "base_mean_s", "candidate_mean_s", "base_busbw_bytes_per_s",
        "candidate_busbw_bytes_per_s", "base_cv", "candidate_cv", "ratio", "ci_low", "ci_high", "p_value",
        "p_adjusted", "verdict", "reason"}
    assert (row["op"], row["size_bytes"], row["in_place"]) == ("all_reduce", 1024, False)
    assert row["ci_low"] < row["ratio"] < row["ci_high"]
    assert row["candidate_busbw_bytes_per_s"] == pytest.approx(
        row["base_busbw_bytes_per_s"] * row["base_mean_s"] / row["candidate_mean_s"])
    # Seeded: the same seed gives the same intervals, another seed others.
    again = json.loads(invoke("compare", "base0000aaaa", "slow0000cccc", "--db", db, "--format", "json",
                              "--seed", "7").stdout)
    other = json.loads(invoke("compare", "base0000aaaa", "slow0000cccc", "--db", db, "--format", "json",
                              "--seed", "8").stdout)
    assert [r["ci_low"] for r in again["rows"]] == [r["ci_low"] for r in doc["rows"]]
    assert [r["ci_low"] for r in other["rows"]] != [r["ci_low"] for r in doc["rows"]]


def test_different_systems_are_compared_with_a_warning(tmp_path: Path) -> None:
    other = SystemInfo(world_size=4, backend="gloo", cpu_model="other-cpu", cpu_cores=8, torch_version="2.4.0")
    write_json(tmp_path / "a.json", run_to_dict(make_run("a", 1.0, seed=1)))
    write_json(tmp_path / "b.json", run_to_dict(make_run("b", 1.0, seed=2, system=other)))
    result = invoke("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"))
    assert result.exit_code == 0
    assert result.stderr.startswith("warning: base and candidate ran on different systems (fingerprint "
                                    f"{SYSTEM.fingerprint()} vs {other.fingerprint()})")


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
    result = invoke("compare", "base0000aaaa", "same0000bbbb", "--db", db, "--min-change", "3")
    assert result.exit_code == 2 and "expected a percentage such as 3% or a fraction such as 0.03" in result.stderr
    result = invoke("compare", "base0000aaaa", "same0000bbbb", "--db", db, "--alpha", "2")
    assert result.exit_code == 2 and result.stderr == "error: alpha must be in (0, 1), got 2.0\n"


def test_no_row_in_common_is_an_error() -> None:
    a = make_run("a", 1.0, seed=1)
    b = Run(run_id="b", started_at=a.started_at, system=SYSTEM, measurements=(
        Measurement(op="all_gather", dtype="float32", size_bytes=1024, count=64, in_place=False, world_size=4,
                    samples_s=(1e-5,) * 20),))
    with pytest.raises(CompareError, match="no row in common"):
        compare_runs([a], [b])


def test_min_change_decides_what_counts() -> None:
    # A real 2 % slowdown, tightly measured: below the default 3 %, a regression at 1 %.
    rng = np.random.default_rng(11)
    base, cand = 1e-4 * (1 + rng.normal(0, 0.005, 50)), 1.02e-4 * (1 + rng.normal(0, 0.005, 50))
    [default] = judge([(base, cand)])
    assert (default.verdict, default.reason) == ("no change", "+2.2%, below the 3% threshold")
    [strict] = judge([(base, cand)], CompareSettings(min_change=0.01))
    assert (strict.verdict, strict.reason) == ("regression", "slower +2.2%")


def test_p_values_are_adjusted_over_rows_benjamini_hochberg() -> None:
    p = np.array([0.01, 0.04, 0.03, 0.005, 0.5])
    assert benjamini_hochberg(p).tolist() == pytest.approx([0.025, 0.05, 0.05, 0.025, 0.5])
    # Among 22 rows, a clear slowdown stays a regression; a marginal one (p = 0.012 alone) does not.
    rng = np.random.default_rng(9)
    pairs = [(1e-4 * (1 + rng.normal(0, 0.03, 20)), 1e-4 * (1 + rng.normal(0, 0.03, 20))) for _ in range(20)]
    clear = (1e-4 * (1 + rng.normal(0, 0.03, 20)), 1.05e-4 * (1 + rng.normal(0, 0.03, 20)))
    rng = np.random.default_rng(102)
    marginal = (1e-4 * (1 + rng.normal(0, 0.03, 20)), 1.04e-4 * (1 + rng.normal(0, 0.03, 20)))
    [alone] = judge([marginal])
    assert (alone.verdict, alone.reason, round(alone.p_value, 4)) == ("regression", "slower +3.4%", 0.0123)
    together = judge([clear, marginal, *pairs])
    assert (together[0].verdict, together[0].reason) == ("regression", "slower +6.0%")
    assert together[0].p_adjusted == pytest.approx(together[0].p_value * 22)  # the smallest p of 22
    assert (together[1].verdict, together[1].reason) == (
        "no change", "not significant after adjusting for 22 rows (adjusted p 0.091)")
    assert [j.verdict for j in together[2:]] == ["no change"] * 20


def test_nccl_tests_logs_without_samples_give_a_ratio_but_no_verdict() -> None:
    data = Path(__file__).parent / "data" / "regress"
    result = invoke("compare", str(data / "base-all_reduce.log"), str(data / "candidate-all_reduce-10pct-slower.log"),
                    "--format", "json")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [(r["size_bytes"], r["in_place"], round(r["ratio"], 3), r["unit"], r["verdict"], r["reason"])
            for r in doc["rows"]] == [
        (size, in_place, 1.1, "run means", "unknown", "no samples: reported statistics only")
        for in_place in (False, True) for size in (1 << 20, 2 << 20, 4 << 20)]
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
        ("run means", 5, 5, "regression")] * 4
    assert [round(r["ratio"], 6) for r in rows] == [1.1] * 4
