"""commlens detect: a known step found at the right run, flat history quiet, --since, --by revision, filters."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from commlens.cli import regress_cmd  # noqa: F401  (registers compare and detect)
from commlens.cli.app import app
from commlens.regress import DetectSettings, find_changes
from commlens.regress.stats import robust_noise
from commlens.results import Measurement, Run, SystemInfo
from commlens.results.records import MeasurementKey
from commlens.store import Store

SYSTEM = SystemInfo(world_size=4, backend="gloo", cpu_model="test-cpu", cpu_cores=8, torch_version="2.4.0")
T0 = datetime(2025, 3, 1, 2, 0, tzinfo=timezone.utc)
STEP_AT = 37  # the first run at the new level
SMALL, LARGE = 1024, 1 << 20


def _when(i: int) -> datetime:
    return T0 + timedelta(days=i)


def _run(
    i: int,
    factors: dict[int, float],
    rng: np.random.Generator,
    *,
    revision: str | None = None,
    when: datetime | None = None,
    tag: str = "nightly",
) -> Run:
    """Nightly run ``i``: all_reduce at SMALL and LARGE, 10 samples each, 1.5 % CV, level x factors[size]."""
    ms = [
        Measurement(
            op="all_reduce",
            dtype="float32",
            redop="sum",
            size_bytes=size,
            count=size // 4,
            in_place=False,
            world_size=4,
            samples_s=tuple((20e-6 + size / 5e9) * factor * (1.0 + rng.normal(0.0, 0.015, 10))),
        )
        for size, factor in factors.items()
    ]
    return Run(
        run_id=f"run-{i:03d}",
        started_at=(when or _when(i)).isoformat(),
        system=SYSTEM,
        measurements=tuple(ms),
        tag=tag,
        revision=revision or f"rev{i:03d}",
    )


def _store(path: Path, runs: list[Run]) -> str:
    with Store.open(str(path)) as store:
        for run in runs:
            store.save_run(run)
    return str(path)


@pytest.fixture(scope="module")
def step_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """60 nightlies; LARGE is 8 % slower from run STEP_AT on, SMALL stays flat."""
    rng = np.random.default_rng(42)
    runs = [_run(i, {SMALL: 1.0, LARGE: 1.08 if i >= STEP_AT else 1.0}, rng) for i in range(60)]
    return _store(tmp_path_factory.mktemp("step") / "results.db", runs)


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def test_a_known_step_is_found_at_its_run(step_db: str) -> None:
    result = invoke("detect", "--db", step_db, "--json")
    assert result.exit_code == 1, result.stderr
    doc = json.loads(result.stdout)
    assert (doc["series"], doc["points"], doc["too_short"]) == (2, 120, 0)
    assert doc["summary"] == {"changes": 1, "regressions": 1, "improvements": 0}
    [change] = doc["changes"]
    assert (change["op"], change["size_bytes"], change["tag"]) == ("all_reduce", LARGE, "nightly")
    assert abs(change["index"] - STEP_AT) <= 1
    assert change["index"] == STEP_AT  # this seed's noise puts it exactly there
    assert (change["run_id"], change["revision"], change["previous_run_id"]) == (
        f"run-{STEP_AT:03d}",
        f"rev{STEP_AT:03d}",
        f"run-{STEP_AT - 1:03d}",
    )
    assert change["started_at"] == _when(STEP_AT).isoformat()
    assert change["direction"] == "regression"
    assert change["change"] == pytest.approx(0.08, abs=0.01)
    assert change["mean_after_s"] / change["mean_before_s"] - 1 == pytest.approx(change["change"])
    assert change["p_value"] < 1e-6
    assert change["fingerprint"] == SYSTEM.fingerprint()


def test_the_table_names_the_run_and_the_change(step_db: str) -> None:
    result = invoke("detect", "--db", step_db)
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert lines[0] == "# ordered by time; min change 3%, alpha 0.0003, at least 4 points a level"
    assert lines[1].split() == [
        "#",
        "op",
        "size",
        "dtype",
        "place",
        "tag",
        "system",
        "at",
        "(UTC)",
        "run",
        "revision",
        "points",
        "before",
        "us",
        "after",
        "us",
        "change",
        "p",
        "direction",
    ]
    cells = lines[2].split()
    assert cells[:6] == ["all_reduce", "1M", "float32", "out", "nightly", SYSTEM.fingerprint()[:8]]
    assert cells[6:11] == ["2025-04-07", "02:00", "run-037", "rev037", "37/60"]
    assert cells[13].startswith("+") and cells[-1] == "regression"
    assert lines[-1] == "# 2 series, 120 points: 1 changes (1 regressions, 0 improvements)"
    # a Rich table: its header behind "# ", the rows indented beneath
    assert lines[1:3] == [
        "# op          size  dtype    place  tag      system    at (UTC)          run      revision  points  before us  "
        "after us  change      p  direction",
        f"  all_reduce    1M  float32  out    nightly  {SYSTEM.fingerprint()[:8]}  2025-04-07 02:00  run-037  rev037     "
        "37/60      229.6     248.4   +8.2%  1e-10  regression",
    ]


def test_since_reports_only_changes_inside_the_window(step_db: str) -> None:
    # The window starts after the step: the step is history, not news.
    after = invoke("detect", "--db", step_db, "--since", _when(STEP_AT + 1).isoformat())
    assert after.exit_code == 0
    assert after.stdout.splitlines()[-1] == (
        "# 2 series, 120 points: 0 changes since 2025-04-08T02:00:00+00:00 (0 regressions, 0 improvements)"
    )
    # A window that starts at the first slow run (inclusive) or before it reports it.
    for since in (_when(STEP_AT).isoformat(), "2025-04-01", "2025-04-07T03:00:00+01:00"):
        result = invoke("detect", "--db", step_db, "--since", since, "--json")
        assert result.exit_code == 1, since
        assert [c["run_id"] for c in json.loads(result.stdout)["changes"]] == [f"run-{STEP_AT:03d}"]


def test_filters_pick_series(step_db: str) -> None:
    flat = invoke("detect", "--db", step_db, "--size", "1K", "--json")
    assert flat.exit_code == 0
    assert json.loads(flat.stdout)["series"] == 1 and json.loads(flat.stdout)["changes"] == []
    large = invoke(
        "detect",
        "--db",
        step_db,
        "--size",
        "1M",
        "--op",
        "allreduce",
        "--dtype",
        "float32",
        "--tag",
        "nightly",
        "--json",
    )
    assert large.exit_code == 1 and json.loads(large.stdout)["series"] == 1
    other = invoke("detect", "--db", step_db, "--op", "all_gather", "--json")
    assert other.exit_code == 0 and json.loads(other.stdout)["series"] == 0
    assert invoke("detect", "--db", step_db, "--tag", "weekly", "--json").exit_code == 0


def test_a_flat_history_has_no_change(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    db = _store(tmp_path / "flat.db", [_run(i, {SMALL: 1.0, LARGE: 1.0}, rng) for i in range(60)])
    result = invoke("detect", "--db", db)
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        "# ordered by time; min change 3%, alpha 0.0003, at least 4 points a level",
        "# 2 series, 120 points: 0 changes (0 regressions, 0 improvements)",
    ]


def test_an_improvement_is_reported_but_does_not_fail(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    db = _store(tmp_path / "faster.db", [_run(i, {LARGE: 0.92 if i >= 30 else 1.0}, rng) for i in range(40)])
    result = invoke("detect", "--db", db, "--json")
    assert result.exit_code == 0
    [change] = json.loads(result.stdout)["changes"]
    assert (change["index"], change["direction"]) == (30, "improvement")
    assert change["change"] == pytest.approx(-0.08, abs=0.01)


def test_by_revision_keeps_reruns_of_old_revisions_in_place(tmp_path: Path) -> None:
    """Revisions 0-39 fast, 40-59 slow; then revisions 10-14 are measured again (fast, as they were)."""
    rng = np.random.default_rng(9)
    runs = [_run(i, {LARGE: 1.08 if i >= 40 else 1.0}, rng) for i in range(60)]
    runs += [_run(60 + j, {LARGE: 1.0}, rng, revision=f"rev{10 + j:03d}") for j in range(5)]
    db = _store(tmp_path / "rev.db", runs)
    by_time = json.loads(invoke("detect", "--db", db, "--json").stdout)
    assert [(c["run_id"], c["direction"]) for c in by_time["changes"]] == [
        ("run-040", "regression"),
        ("run-060", "improvement"),
    ]
    result = invoke("detect", "--db", db, "--by", "revision", "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["order"] == "revision"
    [change] = doc["changes"]
    # Five re-runs now sit among revisions 10-14, so revision 40's first run is point 45.
    assert (change["run_id"], change["revision"], change["index"]) == ("run-040", "rev040", 45)


def test_short_series_are_counted_not_tested(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    db = _store(tmp_path / "short.db", [_run(i, {LARGE: 1.5 if i >= 3 else 1.0}, rng) for i in range(7)])
    result = invoke("detect", "--db", db)
    assert result.exit_code == 0
    assert "# 1 series too short to hold a change (fewer than 8 points)" in result.stdout.splitlines()


def test_an_empty_store_and_bad_options(tmp_path: Path) -> None:
    db = str(tmp_path / "empty.db")
    result = invoke("detect", "--db", db)  # a read: no store is created where there is none
    assert (result.exit_code, result.stderr) == (2, f"error: no result store at {db}: nothing stored yet\n")
    assert not Path(db).exists()
    _store(Path(db), [])
    result = invoke("detect", "--db", db)
    assert result.exit_code == 0 and result.stdout.splitlines()[-1] == (
        "# 0 series, 0 points: 0 changes (0 regressions, 0 improvements)"
    )
    for args, message in [
        (("--since", "last week"), "error: 'last week' is not an ISO 8601 date or date/time"),
        (("--size", "12Q"), "error: invalid size '12Q'"),
        (("--op", "allreduc"), "error: --op: unknown op 'allreduc'"),
        (("--dtype", "float8"), "error: --dtype 'float8': expected one of float32"),
        (("--min-change", "50"), "error: --min-change '50': expected a percentage"),
    ]:
        result = invoke("detect", "--db", db, *args)
        assert result.exit_code == 2, args
        assert result.stderr.startswith(message), result.stderr


def test_find_changes_on_plain_series() -> None:
    rng = np.random.default_rng(3)
    x = 1e-4 * (1 + rng.normal(0, 0.02, 100))
    assert find_changes(x) == []
    x[55:] *= 1.05
    [change] = find_changes(x)
    assert change.index == 55 and change.is_regression and change.change == pytest.approx(0.05, abs=0.01)
    # Two steps, up then back down, with a single-point outlier in between that is not a change.
    y = 1e-4 * (1 + rng.normal(0, 0.01, 120))
    y[40:80] *= 1.10
    y[100] *= 1.8
    assert [(c.index, c.is_regression) for c in find_changes(y)] == [(40, True), (80, False)]
    # Too short to hold a level on each side.
    assert find_changes(x[:7]) == []
    with pytest.raises(ValueError, match="min_segment must be >= 2"):
        DetectSettings(min_segment=1)


def test_the_noise_estimate_ignores_steps_and_outliers() -> None:
    rng = np.random.default_rng(4)
    y = rng.normal(0, 0.02, 400)
    clean = robust_noise(y)
    y[200:] += 0.5
    y[[50, 300]] += 3.0
    assert clean == pytest.approx(0.02, rel=0.1)
    assert robust_noise(y) == pytest.approx(clean, rel=0.05)


def _aa_runs(rng: np.random.Generator, run_sd: float, count: int = 12) -> list[Run]:
    """Repeated runs of one revision (tag ``aa``): each whole run's level drawn from exp(N(0, run_sd))."""
    return [
        _run(
            100 + i,
            {LARGE: float(np.exp(rng.normal(0.0, run_sd)))},
            rng,
            revision="aaa",
            tag="aa",
            when=_when(70) + timedelta(hours=i),
        )
        for i in range(count)
    ]


@pytest.fixture(scope="module")
def small_step_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    """60 quiet nightlies of LARGE with a 4 % step at run 30, and A/A runs of the same series that scatter by 6 %."""
    rng = np.random.default_rng(21)
    runs = [_run(i, {LARGE: 1.04 if i >= 30 else 1.0}, rng) for i in range(60)]
    return _store(tmp_path_factory.mktemp("floor") / "results.db", runs + _aa_runs(rng, 0.06))


def test_a_step_smaller_than_the_learned_noise_floor_is_no_change(small_step_db: str) -> None:
    from commlens.cli import noise_cmd  # noqa: F401  (registers noise learn)

    # No floor known: the nightlies alone are quiet (0.5 % a run), and the 4 % step is a change.
    before = invoke("detect", "--db", small_step_db, "--tag", "nightly", "--json")
    assert before.exit_code == 1, before.stderr
    doc = json.loads(before.stdout)
    assert doc["floored"] == 0
    [change] = doc["changes"]
    assert (change["index"], change["direction"], change["noise_floor"]) == (30, "regression", None)
    assert change["change"] == pytest.approx(0.04, abs=0.01)
    # The A/A runs say whole runs of this series differ by about 6 %: a 4 % step is within that.
    learned = invoke("noise", "learn", "--db", small_step_db, "--tag", "aa", "--json")
    assert learned.exit_code == 0, learned.stderr
    [floor] = json.loads(learned.stdout)["floors"]
    assert (floor["size_bytes"], floor["runs"], floor["groups"]) == (LARGE, 12, 1)
    assert floor["sd_log"] == pytest.approx(0.06, rel=0.3)  # 11 degrees of freedom: about 21 % either way
    assert floor["sd_log"] > 0.045  # this seed's: larger than the step
    after = invoke("detect", "--db", small_step_db, "--tag", "nightly", "--json")
    assert after.exit_code == 0, after.stderr
    doc = json.loads(after.stdout)
    assert (doc["floored"], doc["changes"], doc["settings"]["floor_multiple"]) == (1, [], 1.0)
    table = invoke("detect", "--db", small_step_db, "--tag", "nightly")
    assert table.stdout.splitlines() == [
        (
            "# ordered by time; min change 3%, alpha 0.0003, at least 4 points a level; changes beyond 1 noise floor in "
            "1 series"
        ),
        "# 1 series, 60 points: 0 changes (0 regressions, 0 improvements)",
    ]


def test_a_small_floor_keeps_the_step_and_is_reported_with_it(small_step_db: str, tmp_path: Path) -> None:
    from commlens.store.noise import NoiseFloor

    db = tmp_path / "copy.db"
    db.write_bytes(Path(small_step_db).read_bytes())
    with Store.open(str(db)) as store:
        store.floors.save(
            [
                NoiseFloor(
                    fingerprint=SYSTEM.fingerprint(),
                    key=MeasurementKey("all_reduce", "builtin", "float32", "sum", None, LARGE, False),
                    sd_log=0.01,
                    runs=12,
                    groups=1,
                    learned_at="2025-05-01T00:00:00+00:00",
                )
            ],
        )
    result = invoke("detect", "--db", str(db), "--tag", "nightly", "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["floored"] == 1
    [change] = doc["changes"]
    assert (change["index"], change["noise_floor"]) == (30, 0.01)


def test_find_changes_ignores_a_shift_within_the_floor() -> None:
    rng = np.random.default_rng(22)
    x = 1e-4 * (1 + rng.normal(0, 0.005, 80))
    x[40:] *= 1.04
    [change] = find_changes(x)
    assert change.index == 40
    assert find_changes(x, floor=0.06) == []
    assert [c.index for c in find_changes(x, floor=0.01)] == [40]
    # floor_multiple 0 counts the floor in the noise estimate only
    assert find_changes(x, DetectSettings(floor_multiple=0.0), floor=0.02) != []
    with pytest.raises(ValueError, match="floor_multiple must be >= 0"):
        DetectSettings(floor_multiple=-1.0)
