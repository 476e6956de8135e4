"""Baselines, thresholds and saved change points: the store API on SQLite and PostgreSQL, the resolution rule,
and `commlens baseline`, `commlens threshold`, `compare baseline`, `detect` with stored thresholds and
`detect --save`, end to end through the CLI, every error path included."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from store_backends import pg_server, pg_url, store_url  # noqa: F401  (fixtures)
from typer.testing import CliRunner

from commlens.cli import baseline_cmd, regress_cmd  # noqa: F401  (registers the commands)
from commlens.cli.app import app
from commlens.regress import detect_history
from commlens.regress.series_settings import baseline_runs, candidate_series
from commlens.results import Measurement, Run, SystemInfo
from commlens.results.records import MeasurementKey, Series
from commlens.store import MeasurementFilter, Store
from commlens.store.series_meta import (
    ANY,
    BaselineError,
    Threshold,
    ThresholdError,
    resolve_threshold,
)

SYSTEM = SystemInfo(world_size=4, backend="gloo", cpu_model="test-cpu", cpu_cores=8, torch_version="2.4.0")
OTHER = SystemInfo(world_size=8, backend="gloo", cpu_model="test-cpu", cpu_cores=8, torch_version="2.4.0")
FP, OTHER_FP = SYSTEM.fingerprint(), OTHER.fingerprint()
SIZES = (1024, 1 << 20)
T0 = datetime(2025, 3, 1, 2, 0, tzinfo=timezone.utc)


def make_run(
    run_id: str,
    factor: float,
    seed: int,
    *,
    tag: str | None = "main",
    system: SystemInfo = SYSTEM,
    day: int = 0,
    rounds: int = 5,
    n: int = 30,
) -> Run:
    """all_reduce at SIZES out of place, ``n`` iterations in ``rounds`` rounds, each round's level drifting by 1 %
    and each time scattering by 2 % around it; every time x ``factor``."""
    rng = np.random.default_rng(seed)
    counts = [n // rounds] * rounds
    ms = []
    for size in SIZES:
        levels = (20e-6 + size / 5e9) * factor * np.exp(rng.normal(0.0, 0.01, rounds))
        samples = np.concatenate([level * (1.0 + rng.normal(0.0, 0.02, k)) for level, k in zip(levels, counts)])
        ms.append(
            Measurement(
                op="all_reduce",
                dtype="float32",
                redop="sum",
                size_bytes=size,
                count=size // 4,
                in_place=False,
                world_size=system.world_size,
                samples_s=tuple(samples),
                rounds=tuple(counts) if rounds > 1 else None,
            )
        )
    return Run(
        run_id=run_id,
        started_at=(T0 + timedelta(days=day)).isoformat(),
        system=system,
        measurements=tuple(ms),
        tag=tag,
        revision=f"rev{day:03d}",
    )


def _save(url: str, runs: list[Run]) -> None:
    with Store.open(url) as store:
        store.save_runs(runs)


KEY_SMALL = MeasurementKey("all_reduce", "builtin", "float32", "sum", None, 1024, False)
KEY_LARGE = KEY_SMALL._replace(size_bytes=1 << 20)


# -- the store API, on SQLite and PostgreSQL --------------------------------------------------------------


def test_baselines_are_set_replaced_listed_and_unset(store_url: str) -> None:
    _save(
        store_url,
        [
            make_run("main0000aaaa", 1.0, 1, day=0),
            make_run("main0000bbbb", 1.0, 2, day=1),
            make_run("rel00000cccc", 1.0, 3, tag="release", day=2),
            make_run("rel00000dddd", 1.0, 4, tag="release", day=3),
            make_run("rel00000eeee", 1.0, 5, tag="release", system=OTHER, day=4),
            make_run("untagged0001", 1.0, 6, tag=None, day=5),
        ],
    )
    with Store.open(store_url) as store:
        first = store.baselines.set(FP, "main", "run", "main0000a", note="last good nightly")
        assert (first.ref_kind, first.ref, first.note) == ("run", "main0000aaaa", "last good nightly")
        assert store.baselines.get(FP, "main") == first
        assert store.baselines.run_ids(first) == ["main0000aaaa"]
        # Setting the series' baseline again replaces it: a tag, pooled, only its runs of this system.
        second = store.baselines.set(FP, "main", "tag", "release")
        assert store.baselines.get(FP, "main") == second and second.set_at >= first.set_at
        assert store.baselines.run_ids(second) == ["rel00000cccc", "rel00000dddd"]
        untagged = store.baselines.set(FP, None, "run", "untagged0001")
        assert store.baselines.get(FP, None) == untagged and store.baselines.get(OTHER_FP, "main") is None
        assert store.baselines.list() == [untagged, second]  # untagged ('') sorts first
        assert store.baselines.unset(FP, "main") is True
        assert store.baselines.unset(FP, "main") is False
        assert store.baselines.list() == [untagged]
        # A baseline whose run was deleted since says so when used.
        store.delete_run("untagged0001")
        with pytest.raises(BaselineError, match="run untagged0001, which is no longer stored"):
            store.baselines.run_ids(untagged)


def test_a_baseline_that_names_no_run_of_the_series_is_refused(store_url: str) -> None:
    _save(
        store_url,
        [
            make_run("main0000aaaa", 1.0, 1),
            make_run("main0000abbb", 1.0, 2),
            make_run("other000cccc", 1.0, 3, system=OTHER, tag="other"),
        ],
    )
    with Store.open(store_url) as store:
        with pytest.raises(BaselineError, match="baseline run: no run matches 'nope0000'"):
            store.baselines.set(FP, "main", "run", "nope0000")
        with pytest.raises(BaselineError, match="'main0000a' matches 2 runs"):
            store.baselines.set(FP, "main", "run", "main0000a")
        with pytest.raises(BaselineError, match=f"run other000cccc ran on system {OTHER_FP}, not on the series' {FP}"):
            store.baselines.set(FP, "main", "run", "other000cccc")
        with pytest.raises(BaselineError, match="no stored run has tag 'nightly'"):
            store.baselines.set(FP, "main", "tag", "nightly")
        with pytest.raises(BaselineError, match=f"tag 'other' has no run of system {FP} .*its runs ran on {OTHER_FP}"):
            store.baselines.set(FP, "main", "tag", "other")
        with pytest.raises(BaselineError, match="the series' tag must not be empty"):
            store.baselines.set(FP, " ", "run", "main0000aaaa")
        with pytest.raises(BaselineError, match="a baseline is a run or a tag, not 'file'"):
            store.baselines.set(FP, "main", "file", "x.json")  # type: ignore[arg-type]
        assert store.baselines.list() == []
        # Fingerprints: a unique prefix of a stored one, or a full one not stored yet.
        assert store.baselines.fingerprint(FP[:6].upper()) == FP
        assert store.baselines.fingerprint("0123456789abcdef") == "0123456789abcdef"
        with pytest.raises(BaselineError, match="no stored run has a fingerprint starting 'zz'"):
            store.baselines.fingerprint("zz")


def test_thresholds_are_upserted_on_their_selector_listed_and_unset(store_url: str) -> None:
    with Store.open(store_url) as store:
        everything = store.thresholds.set(Threshold(min_change=0.05))
        untagged_small = store.thresholds.set(Threshold(tag=None, size_bytes=1024, group=None, alpha=0.01))
        main = store.thresholds.set(Threshold(fingerprint=FP, tag="main", op="all_reduce", detect_alpha=1e-3))
        assert store.thresholds.list() == [untagged_small, everything, main]  # by selector: '' (no tag) before '*'
        assert untagged_small.tag is None and untagged_small.group is None and everything.group == ANY
        replaced = store.thresholds.set(Threshold(min_change=0.08, alpha=0.02))  # same selector: replaces
        assert store.thresholds.list() == [untagged_small, replaced, main]
        assert store.thresholds.unset(Threshold(tag=None, size_bytes=1024, group=None)) is True
        assert store.thresholds.unset(Threshold(tag=None, size_bytes=1024, group=None)) is False
        assert store.thresholds.unset(Threshold(tag="main")) is False  # selectors match exactly, not by pattern
        assert store.thresholds.list() == [replaced, main]


@pytest.mark.parametrize(
    ("threshold", "message"),
    [
        (Threshold(), "must set min_change, alpha or detect_alpha"),
        (Threshold(min_change=1.0), r"min_change must be in \[0, 1\), got 1.0"),
        (Threshold(min_change=-0.01), r"min_change must be in \[0, 1\)"),
        (Threshold(alpha=0.0), r"alpha must be in \(0, 1\), got 0.0"),
        (Threshold(detect_alpha=1.5), r"detect_alpha must be in \(0, 1\), got 1.5"),
        (Threshold(alpha=float("nan")), "alpha must be a number, got nan"),
        (Threshold(dtype="float13", min_change=0.1), "dtype 'float13': expected one of"),
        (Threshold(size_bytes=-2, min_change=0.1), "size_bytes must be >= 0 .-1 for any., got -2"),
        (Threshold(op="", min_change=0.1), "op must not be empty"),
        (Threshold(tag="", min_change=0.1), "tag must not be empty"),
        (Threshold(group="", min_change=0.1), "group must not be empty"),
    ],
)
def test_a_bad_threshold_is_refused_and_nothing_stored(tmp_path: Path, threshold: Threshold, message: str) -> None:
    with Store.open(str(tmp_path / "results.db")) as store:
        with pytest.raises(ThresholdError, match=message):
            store.thresholds.set(threshold)
        assert store.thresholds.list() == []


def test_resolution_most_specific_match_setting_by_setting_then_newest() -> None:
    broad = Threshold(min_change=0.10, alpha=0.01, set_at="2025-01-01T00:00:00.000000Z")
    op_only = Threshold(op="all_reduce", min_change=0.05, set_at="2025-01-01T00:00:00.000000Z")
    big = Threshold(op="all_reduce", size_bytes=1 << 20, min_change=0.02, set_at="2025-01-01T00:00:00.000000Z")
    # Two thresholds equally specific (one field each): the newer wins.
    tag_old = Threshold(tag="main", detect_alpha=1e-3, set_at="2025-01-01T00:00:00.000000Z")
    fp_new = Threshold(fingerprint=FP, detect_alpha=1e-2, set_at="2025-02-01T00:00:00.000000Z")
    other_system = Threshold(
        fingerprint=OTHER_FP, op="all_reduce", size_bytes=1024, min_change=0.5, set_at="2025-01-01T00:00:00.000000Z"
    )
    untagged = Threshold(tag=None, op="all_reduce", dtype="float32", min_change=0.07, set_at="2025-03-01T00:00:00Z")
    grouped = Threshold(group="tp0", op="all_reduce", dtype="float32", min_change=0.09)
    stored = [broad, op_only, big, tag_old, fp_new, other_system, untagged, grouped]

    small = resolve_threshold(stored, Series(KEY_SMALL, FP, "main"))
    assert (small.min_change, small.alpha, small.detect_alpha) == (0.05, 0.01, 1e-2)
    assert small.matched == (fp_new, op_only, broad)  # the deciding ones, most specific (then newest) first
    large = resolve_threshold(stored, Series(KEY_LARGE, FP, "main"))
    assert (large.min_change, large.alpha) == (0.02, 0.01)
    # A series without a tag: the untagged threshold (3 fields) beats op_only; tag_old does not match.
    # On the other system, untagged (tag, op, dtype) and other_system (fingerprint, op, size) tie at three
    # fields: the newer one wins. Neither tag_old nor fp_new match, so detect_alpha is not set.
    bare = resolve_threshold(stored, Series(KEY_SMALL, OTHER_FP, None))
    assert (bare.min_change, bare.alpha, bare.detect_alpha) == (0.07, 0.01, None)
    assert bare.matched == (untagged, broad)
    older = resolve_threshold([untagged, other_system, broad], Series(KEY_LARGE, OTHER_FP, None))
    assert older.min_change == 0.07  # other_system is for 1 KiB only
    group_row = resolve_threshold(stored, Series(KEY_SMALL._replace(group="tp0"), FP, "main"))
    assert group_row.min_change == 0.09
    assert resolve_threshold([], Series(KEY_SMALL, FP, "main")) == resolve_threshold(
        [other_system], Series(KEY_SMALL, FP, "main")
    )
    assert resolve_threshold([], Series(KEY_SMALL, FP, "main")).min_change is None


# -- saved change points -----------------------------------------------------------------------------------


def _history(step_at: int = 8, points: int = 16, factor: float = 1.06, tag: str = "nightly") -> list[Run]:
    """``points`` nightlies, one round each, 10 iterations at 1 % scatter; ``factor`` slower from ``step_at``."""
    return [
        make_run(f"{tag}-{i:03d}", factor if i >= step_at else 1.0, 100 + i, tag=tag, day=i, rounds=1, n=10)
        for i in range(points)
    ]


def test_change_points_are_saved_replaced_and_loaded(store_url: str) -> None:
    _save(store_url, _history())
    with Store.open(store_url) as store:
        report = detect_history(store.measurement_rows())
        assert len(report.examined) == 2 and len(report.changes) == 2
        assert store.change_points.save(report.changes, report.examined) == 2
        loaded = store.change_points.load()
        assert {(c.series.key.size_bytes, c.run_id, c.direction) for c in loaded} == {
            (1024, "nightly-008", "regression"),
            (1 << 20, "nightly-008", "regression"),
        }
        change = next(c for c in report.changes if c.series.key == KEY_SMALL)
        [saved] = store.change_points.load(series=change.series)
        assert saved.series == change.series and saved.series.tag == "nightly"
        assert (saved.previous_run_id, saved.revision, saved.mean_before_s, saved.mean_after_s) == (
            "nightly-007",
            "rev008",
            change.mean_before_s,
            change.mean_after_s,
        )
        assert saved.started_at == change.started_at and saved.change == pytest.approx(change.change)
        assert store.change_points.load(direction="improvement") == []
        assert store.change_points.load(since="2025-03-10") == []  # the step was on day 8, 2025-03-09
        assert len(store.change_points.load(since="2025-03-09", limit=1)) == 1
        assert store.change_points.load(fingerprint=OTHER_FP) == []
        # Saving again replaces the examined series' changes: one series examined with none found now.
        small_only = detect_history(store.measurement_rows(MeasurementFilter(size_bytes=1024)), report.settings)
        quiet = type(small_only)(**{**small_only.__dict__, "changes": ()})
        assert store.change_points.save(quiet.changes, quiet.examined) == 0
        assert [c.series.key.size_bytes for c in store.change_points.load()] == [1 << 20]


# -- the CLI, end to end --------------------------------------------------------------------------------


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def _rows(stdout: str) -> list[dict]:
    return json.loads(stdout)["rows"]


@pytest.fixture()
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "results.db")
    _save(
        path,
        [
            make_run("base0000aaaa", 1.00, seed=1, day=0),
            make_run("slow0000bbbb", 1.04, seed=2, day=1),  # 4 % slower
            make_run("same0000cccc", 1.00, seed=3, day=2),
            make_run("pr000000dddd", 1.04, seed=4, tag="pr-7", day=3),
            make_run("othr0000eeee", 1.00, seed=5, tag="main", system=OTHER, day=4),
        ],
    )
    return path


def test_compare_baseline_gives_the_verdicts_of_comparing_the_baseline_run(db: str) -> None:
    result = invoke("baseline", "set", "base0000", "--db", db, "--note", "v1.0")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == f"baseline of fingerprint {FP} tag 'main': run:base0000aaaa"
    listed = json.loads(invoke("baseline", "list", "--db", db, "--json").stdout)["baselines"]
    assert [(b["fingerprint"], b["tag"], b["ref_kind"], b["ref"], b["note"]) for b in listed] == [
        (FP, "main", "run", "base0000aaaa", "v1.0")
    ]
    table = invoke("baseline", "list", "--db", db).stdout
    assert "run:base0000aaaa" in table and "v1.0" in table
    explicit = invoke("compare", "base0000aaaa", "slow0000bbbb", "--db", db, "--format", "json")
    for ref in ("baseline", "baseline:"):
        stored = invoke("compare", ref, "slow0000bbbb", "--db", db, "--format", "json")
        assert stored.exit_code == explicit.exit_code == 1, stored.stderr
        assert _rows(stored.stdout) == _rows(explicit.stdout)
        assert [r["verdict"] for r in _rows(stored.stdout)] == ["regression", "regression"]
        assert json.loads(stored.stdout)["base"]["ref"] == "baseline run:base0000aaaa"


def test_a_tag_baseline_pools_the_tag_runs_of_the_system(db: str) -> None:
    result = invoke("baseline", "set", "tag:main", "--tag", "pr-7", "--fingerprint", FP[:8], "--db", db)
    assert result.exit_code == 0, result.stderr
    doc = json.loads(invoke("compare", "baseline", "pr000000dddd", "--db", db, "--format", "json").stdout)
    assert doc["base"]["run_ids"] == ["base0000aaaa", "slow0000bbbb", "same0000cccc"]  # not othr0000eeee
    assert doc["base"]["ref"] == "baseline tag:main"
    # The series main's baseline being tag main, a main run is compared with the other main runs.
    assert invoke("baseline", "set", "tag:main", "--tag", "main", "--fingerprint", FP, "--db", db).exit_code == 0
    doc = json.loads(invoke("compare", "baseline", "same0000cccc", "--db", db, "--format", "json").stdout)
    assert doc["base"]["run_ids"] == ["base0000aaaa", "slow0000bbbb"]


def test_a_stored_min_change_silences_a_4_percent_change_and_an_explicit_option_wins(db: str) -> None:
    before = invoke("compare", "base0000aaaa", "slow0000bbbb", "--db", db, "--format", "json")
    assert [r["verdict"] for r in _rows(before.stdout)] == ["regression", "regression"]
    assert all("threshold" not in r for r in _rows(before.stdout))
    result = invoke("threshold", "set", "--tag", "main", "--op", "allreduce", "--min-change", "5%", "--db", db)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == "threshold for tag=main op=all_reduce: min change 5%"
    after = invoke("compare", "base0000aaaa", "slow0000bbbb", "--db", db, "--format", "json")
    assert after.exit_code == 0, after.stderr
    rows = _rows(after.stdout)
    assert [r["verdict"] for r in rows] == ["no change", "no change"]
    assert all(r["reason"].endswith(", below the 5% threshold") for r in rows), rows
    assert [r["threshold"] for r in rows] == [
        {"min_change": 0.05, "alpha": 0.05, "source": "tag=main op=all_reduce"}
    ] * 2
    table = invoke("compare", "base0000aaaa", "slow0000bbbb", "--db", db).stdout
    assert "stored: min 5.0%, alpha 0.05" in table and "threshold" in table.splitlines()[2]
    # An explicit --min-change beats the stored one: the rows are judged as before, marked with no threshold.
    given = invoke("compare", "base0000aaaa", "slow0000bbbb", "--db", db, "--format", "json", "--min-change", "3%")
    assert given.exit_code == 1 and _rows(given.stdout) == _rows(before.stdout)
    # A stored alpha still applies beside an explicit --min-change.
    invoke("threshold", "set", "--size", "1K", "--alpha", "0.01", "--db", db)
    mixed = _rows(
        invoke("compare", "base0000aaaa", "slow0000bbbb", "--db", db, "--format", "json", "--min-change", "3%").stdout
    )
    assert [r.get("threshold") for r in mixed] == [{"min_change": 0.03, "alpha": 0.01, "source": "size=1024"}, None]
    # The threshold is the candidate's series': a run of tag pr-7 is not matched by tag=main.
    pr = _rows(invoke("compare", "base0000aaaa", "pr000000dddd", "--db", db, "--format", "json").stdout)
    assert [r.get("threshold", {}).get("min_change") for r in pr] == [0.03, None]
    listed = json.loads(invoke("threshold", "list", "--db", db, "--json").stdout)["thresholds"]
    assert [(t["tag"], t["op"], t["size_bytes"], t["min_change"], t["alpha"]) for t in listed] == [
        ("*", "*", 1024, None, 0.01),
        ("main", "all_reduce", -1, 0.05, None),
    ]
    assert invoke("threshold", "unset", "--tag", "main", "--op", "all_reduce", "--db", db).exit_code == 0
    assert invoke("compare", "base0000aaaa", "slow0000bbbb", "--db", db).exit_code == 1


def test_compare_of_two_files_touches_no_store(tmp_path: Path) -> None:
    from commlens.results import run_to_dict, write_json

    write_json(tmp_path / "base.json", run_to_dict(make_run("base", 1.0, seed=1)))
    write_json(tmp_path / "cand.json", run_to_dict(make_run("cand", 1.04, seed=2)))
    missing = tmp_path / "never.db"
    result = invoke("compare", str(tmp_path / "base.json"), str(tmp_path / "cand.json"), "--db", str(missing))
    assert result.exit_code == 1, result.stderr
    assert not missing.exists()


@pytest.fixture()
def history_db(tmp_path: Path) -> str:
    path = str(tmp_path / "history.db")
    _save(path, _history(factor=1.04))  # a 4 % step at nightly-008
    return path


def test_detect_uses_stored_thresholds_and_save_keeps_what_it_found(history_db: str) -> None:
    db = history_db
    found = invoke("detect", "--db", db, "--json")
    assert found.exit_code == 1, found.stderr
    changes = json.loads(found.stdout)["changes"]
    assert [(c["run_id"], c["threshold"]) for c in changes] == [
        ("nightly-008", {"min_change": 0.03, "alpha": 0.0003, "stored": None})
    ] * 2
    invoke("threshold", "set", "--tag", "nightly", "--min-change", "6%", "--db", db)
    quiet = invoke("detect", "--db", db, "--json")
    assert quiet.exit_code == 0 and json.loads(quiet.stdout)["changes"] == []
    assert json.loads(quiet.stdout)["thresholded"] == 2
    # An explicit --min-change wins over the stored one.
    again = invoke("detect", "--db", db, "--json", "--min-change", "3%")
    assert again.exit_code == 1 and len(json.loads(again.stdout)["changes"]) == 2
    # A stored threshold that lowers the bar for one size shows up in that change's threshold.
    invoke(
        "threshold",
        "set",
        "--tag",
        "nightly",
        "--size",
        "1K",
        "--min-change",
        "2%",
        "--detect-alpha",
        "0.001",
        "--db",
        db,
    )
    one = invoke("detect", "--db", db, "--json")
    [change] = json.loads(one.stdout)["changes"]
    assert change["size_bytes"] == 1024
    assert change["threshold"] == {"min_change": 0.02, "alpha": 0.001, "stored": "tag=nightly size=1024"}
    table = invoke("detect", "--db", db).stdout
    assert "stored thresholds in 2 series" in table and "stored: min 2.0%, alpha 0.001" in table
    # --save stores what was found; a later save replaces the examined series' changes.
    saved = invoke("detect", "--db", db, "--save", "--min-change", "3%")
    assert saved.exit_code == 1 and "saved 2 change points of 2 series" in saved.stderr
    with Store.open(db) as store:
        assert sorted(c.series.key.size_bytes for c in store.change_points.load()) == [1024, 1 << 20]
    resaved = invoke("detect", "--db", db, "--save", "--size", "1M")  # 6 % stored: nothing in the 1 MiB series
    assert resaved.exit_code == 0 and "saved 0 change points of 1 series" in resaved.stderr
    with Store.open(db) as store:
        assert [c.series.key.size_bytes for c in store.change_points.load()] == [1024]


# -- every error path, through the CLI ----------------------------------------------------------------------


def _error(*args: str) -> str:
    result = invoke(*args)
    assert result.exit_code == 2, (args, result.stdout, result.stderr)
    assert result.stderr.startswith("error: "), result.stderr
    return result.stderr


def test_compare_baseline_errors(db: str) -> None:
    message = _error("compare", "baseline", "slow0000bbbb", "--db", db)
    assert f"no baseline is set for the candidate's series (fingerprint {FP} tag 'main')" in message
    assert f"commlens baseline set RUN_OR_tag:NAME --fingerprint {FP} --tag main" in message
    assert (
        f"base 'baseline': the candidate's runs ran on 2 systems ({', '.join(sorted([FP, OTHER_FP]))}): a baseline "
        "belongs to one series; name the base run or tag instead"
    ) in _error("compare", "baseline", "tag:main", "--db", db)
    invoke("baseline", "set", "base0000aaaa", "--db", db)
    assert invoke("compare", "baseline", "slow0000bbbb", "--db", db).exit_code == 1
    assert "the candidate is the baseline of its series" in _error("compare", "baseline", "base0000aaaa", "--db", db)
    with Store.open(db) as store:
        store.delete_run("base0000aaaa")
    assert "which is no longer stored" in _error("compare", "baseline", "slow0000bbbb", "--db", db)


def test_a_candidate_of_two_tags_has_no_one_baseline(db: str) -> None:
    """(A tag's runs share it; runs of several tags come from one file, read here from the store.)"""
    with Store.open(db) as store:
        runs = store.get_runs(["base0000aaaa", "pr000000dddd"])
        with pytest.raises(BaselineError, match="the candidate's runs have 2 tags .'main', 'pr-7'.: a baseline"):
            baseline_runs(store, runs)
        with pytest.raises(BaselineError, match="have 2 tags .untagged, 'main'."):
            candidate_series([runs[0], dataclasses.replace(runs[1], tag=None)])
    message = _error("compare", "baseline", "tag:pr-7", "--db", db)
    assert "no baseline is set" in message and "--tag pr-7" in message


def test_baseline_command_errors(db: str, tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text("{}")
    assert "not a file" in _error("baseline", "set", f"file:{tmp_path / 'run.json'}", "--db", db)
    assert "baseline run: no run matches 'nope0000'" in _error("baseline", "set", "nope0000", "--db", db)
    assert "give the series' tag: --tag NAME, or --untagged" in _error("baseline", "set", "tag:main", "--db", db)
    assert f"tag 'main' has runs of 2 systems ({', '.join(sorted([FP, OTHER_FP]))}): give --fingerprint" in _error(
        "baseline", "set", "tag:main", "--tag", "main", "--db", db
    )
    assert "tag 'nightly' has runs of 0 systems: give --fingerprint" in _error(
        "baseline", "set", "tag:nightly", "--untagged", "--db", db
    )
    assert "--tag and --untagged contradict" in _error(
        "baseline", "set", "base0000", "--tag", "x", "--untagged", "--db", db
    )
    assert "--tag must not be empty" in _error("baseline", "set", "base0000", "--tag", " ", "--db", db)
    assert f"ran on system {FP}, not on the series' {OTHER_FP}" in _error(
        "baseline", "set", "base0000", "--fingerprint", OTHER_FP[:6], "--db", db
    )
    assert "--fingerprint: no stored run has a fingerprint starting 'zz'" in _error(
        "baseline", "set", "base0000", "--fingerprint", "zz", "--db", db
    )
    assert f"no baseline is set for fingerprint {FP} untagged" in _error(
        "baseline", "unset", "--fingerprint", FP, "--untagged", "--db", db
    )
    assert "give the series' tag" in _error("baseline", "unset", "--fingerprint", FP, "--db", db)
    missing = str(tmp_path / "none.db")
    assert "no result store" in _error("baseline", "list", "--db", missing)
    assert "no result store" in _error("threshold", "list", "--db", missing)
    assert not Path(missing).exists()
    # What a success prints, and unset after set.
    assert invoke("baseline", "set", "base0000", "--untagged", "--db", db).stdout.strip() == (
        f"baseline of fingerprint {FP} untagged: run:base0000aaaa"
    )
    assert invoke("baseline", "unset", "--fingerprint", FP[:5], "--untagged", "--db", db).exit_code == 0
    assert invoke("baseline", "list", "--db", db).stdout.startswith("# no baselines set")


def test_threshold_command_errors(db: str) -> None:
    assert "must set min_change, alpha or detect_alpha" in _error("threshold", "set", "--op", "all_reduce", "--db", db)
    assert "--min-change '150%': expected a percentage" in _error(
        "threshold", "set", "--min-change", "150%", "--db", db
    )
    assert "alpha must be in (0, 1), got 2.0" in _error("threshold", "set", "--alpha", "2", "--db", db)
    assert "detect_alpha must be in (0, 1), got 0.0" in _error("threshold", "set", "--detect-alpha", "0", "--db", db)
    assert "alpha must be a number, got nan" in _error("threshold", "set", "--alpha", "nan", "--db", db)
    assert "--size: invalid size '12X'" in _error("threshold", "set", "--size", "12X", "--alpha", "0.1", "--db", db)
    assert "--op: " in _error("threshold", "set", "--op", "nope", "--alpha", "0.1", "--db", db)
    assert "dtype 'float13'" in _error("threshold", "set", "--dtype", "float13", "--alpha", "0.1", "--db", db)
    assert "--group and --no-group contradict" in _error(
        "threshold", "set", "--group", "g", "--no-group", "--alpha", "0.1", "--db", db
    )
    assert "--group must not be empty" in _error("threshold", "set", "--group", "", "--alpha", "0.1", "--db", db)
    assert "--tag and --untagged contradict" in _error(
        "threshold", "set", "--tag", "a", "--untagged", "--alpha", "0.1", "--db", db
    )
    assert "--fingerprint: no stored run" in _error(
        "threshold", "set", "--fingerprint", "zz", "--alpha", "0.1", "--db", db
    )
    assert "no threshold is set for op=all_reduce" in _error("threshold", "unset", "--op", "all_reduce", "--db", db)
    assert json.loads(invoke("threshold", "list", "--db", db, "--json").stdout) == {"thresholds": []}
    # A full fingerprint of a system not stored yet is accepted; no group and no tag are selectors too.
    ok = invoke(
        "threshold",
        "set",
        "--fingerprint",
        "0123456789ABCDEF",
        "--untagged",
        "--no-group",
        "--alpha",
        "0.1",
        "--db",
        db,
    )
    assert ok.exit_code == 0, ok.stderr
    assert ok.stdout.strip() == "threshold for fingerprint=0123456789abcdef tag=(none) group=(none): alpha 0.1"
    assert "(none)" in invoke("threshold", "list", "--db", db).stdout
    assert (
        invoke(
            "threshold", "unset", "--fingerprint", "0123456789abcdef", "--untagged", "--no-group", "--db", db
        ).exit_code
        == 0
    )


def test_detect_save_errors(tmp_path: Path) -> None:
    missing = str(tmp_path / "none.db")
    assert "no result store" in _error("detect", "--save", "--db", missing)
    assert not Path(missing).exists()
