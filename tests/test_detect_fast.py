"""detect's bulk read (issue 34): Store.mean_history + detect_history of a MeanHistory give the report the per-row path gives,
and the change-point search is ruptures' own PELT without importing ruptures."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from commlens.regress import (
    DetectRequest,
    DetectRequestError,
    DetectSettings,
    HistoryPoint,
    HistoryRun,
    MeanHistory,
    detect_history,
    find_changes,
    run_detect,
)
from commlens.regress.detect import _pelt_l2
from commlens.results import Measurement, Run, SystemInfo
from commlens.store import MeasurementFilter, Store

sys.path.insert(0, str(Path(__file__).parent))
from store_backends import pg_server, pg_url, store_url  # noqa: E402,F401

T0 = datetime(2025, 3, 1, 2, 0, tzinfo=timezone.utc)
SYSTEMS = (
    SystemInfo(world_size=4, backend="gloo", cpu_model="cpu-a", cpu_cores=8, torch_version="2.4.0"),
    SystemInfo(world_size=2, backend="gloo", cpu_model="cpu-b", cpu_cores=4, torch_version="2.4.0"),
)


def _run(i: int, rng: np.random.Generator) -> Run:
    """Run ``i``: two systems, two tags, revisions rerun out of order, a failed check, several ops and roots; a
    9 % step of all_reduce at 1 MiB from run 30 and a 6 % improvement of broadcast from run 45."""
    system = SYSTEMS[i % 2]
    ms = []
    for op, redop, root in (("all_reduce", "sum", None), ("broadcast", None, 1), ("all_gather", None, None)):
        for size in (4096, 1 << 20):
            factor = 1.09 if op == "all_reduce" and size == 1 << 20 and i >= 30 else 1.0
            factor *= 0.94 if op == "broadcast" and i >= 45 else 1.0
            for in_place in (False, True):
                ms.append(
                    Measurement(
                        op=op,
                        dtype="float32",
                        redop=redop,
                        root=root,
                        size_bytes=size,
                        count=size // 4,
                        in_place=in_place,
                        world_size=system.world_size,
                        samples_s=tuple((20e-6 + size / 5e9) * factor * (1 + rng.normal(0, 0.01, 6))),
                        nwrong=1 if i == 33 and op == "all_gather" else 0,
                    )
                )
    return Run(
        run_id=f"run-{i:03d}",
        started_at=(T0 + timedelta(hours=7 * i + (5 if i % 7 == 0 else 0))).isoformat(),
        system=system,
        measurements=tuple(ms),
        tag="nightly" if i % 5 else "pr-1",
        revision=f"rev{i // 3:03d}" if i % 11 else None,
        status="check_failed" if i == 33 else "complete",
    )


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    rng = np.random.default_rng(34)
    path = tmp_path_factory.mktemp("fast") / "results.db"
    with Store.open(str(path)) as store:
        store.save_runs([_run(i, rng) for i in range(80)])
    return str(path)


@pytest.mark.parametrize("order", ["time", "revision"])
@pytest.mark.parametrize(
    "filters", [{}, {"op": "all_reduce"}, {"tag": "nightly", "size_bytes": 1 << 20}, {"fingerprint": "0"}]
)
def test_the_bulk_read_gives_the_report_the_per_row_read_gives(store_path: str, order: str, filters: dict) -> None:
    with Store.open(store_path, create=False) as store:
        if "fingerprint" in filters:
            filters = {"fingerprint": SYSTEMS[0].fingerprint()[:6]}
        rows = store.measurement_rows(MeasurementFilter(**filters))
        runs, points = store.mean_history(MeasurementFilter(**filters))
    since = T0 + timedelta(days=5)
    for settings in (DetectSettings(), DetectSettings(min_change=0.05, min_segment=3)):
        slow = detect_history(rows, settings, order=order, since=since)  # type: ignore[arg-type]
        fast = detect_history(MeanHistory(runs, points), settings, order=order, since=since)  # type: ignore[arg-type]
        assert fast.as_dict() == slow.as_dict()
        assert fast.examined == slow.examined and fast.series == slow.series
    if not filters:
        kinds = {(c.series.key.op, c.series.key.size_bytes, c.direction) for c in fast.changes}
        assert kinds == {
            ("all_reduce", 1 << 20, "regression"),
            ("broadcast", 4096, "improvement"),
            ("broadcast", 1 << 20, "improvement"),
        }
        assert fast.excluded_runs == ("run-033",) and fast.points == len({(r.run_id, r.key) for r in rows}) - 12


def test_the_bulk_read_is_the_same_on_sqlite_and_postgresql(store_url: str) -> None:
    rng = np.random.default_rng(5)
    with Store.open(store_url) as store:
        store.save_runs([_run(i, rng) for i in range(40)])
        rows = store.measurement_rows(MeasurementFilter(tag="nightly"))
        runs, points = store.mean_history(MeasurementFilter(tag="nightly"))
    fast = detect_history(MeanHistory(runs, points), DetectSettings(min_segment=3))  # type: ignore[arg-type]
    assert fast.as_dict() == detect_history(rows, DetectSettings(min_segment=3)).as_dict()
    assert fast.points == 32 * 12 - 12 and fast.excluded_runs == ("run-033",)


def test_one_detect_request_gives_the_shorthands_report_from_rows_plain_tuples_or_named_ones(store_path: str) -> None:
    with Store.open(store_path, create=False) as store:
        rows = store.measurement_rows()
        runs, points = store.mean_history()
    since, settings = T0 + timedelta(days=5), DetectSettings(min_change=0.05, min_segment=3)
    expected = detect_history(MeanHistory(runs, points), settings, order="revision", since=since).as_dict()
    named = MeanHistory(tuple(map(HistoryRun._make, runs)), tuple(map(HistoryPoint._make, points)))
    for history in (MeanHistory(runs, points), named, tuple(rows)):
        report = run_detect(DetectRequest(history, settings, "revision", since))
        assert report.as_dict() == expected
    assert expected["changes"] and named.points[0].mean_s == points[0][2]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"order": "size"}, "order must be time or revision, got 'size'"),
        ({"settings": {"min_change": 0.05}}, "settings must be DetectSettings, got dict"),
        ({"since": datetime(2025, 1, 1)}, "since must be an aware datetime"),
        ({"since": "2025-01-01"}, "since must be an aware datetime"),
    ],
)
def test_a_detect_request_that_cannot_run_is_refused_when_made(fields: dict, message: str) -> None:
    with pytest.raises(DetectRequestError, match=message.replace("(", r"\(")) as caught:
        DetectRequest((), **fields)
    assert caught.value.exit_code == 2


def test_the_mann_whitney_p_value_is_scipys_to_the_last_bit() -> None:
    from scipy.stats import mannwhitneyu

    from commlens.regress.stats import mann_whitney_p

    rng = np.random.default_rng(3)
    for _ in range(400):
        n1, n2 = (int(k) for k in rng.integers(2, 300, 2))
        if rng.random() < 0.5:  # continuous: large samples take the normal approximation, small ones scipy's exact
            a, b = rng.normal(0, 1, n1), rng.normal(rng.normal(0, 0.5), 1, n2)
        else:  # ties
            a, b = rng.integers(0, 6, n1).astype(float), rng.integers(0, 6, n2).astype(float)
        if a.min() == a.max() == b.min() == b.max():
            continue
        assert mann_whitney_p(a, b) == float(mannwhitneyu(a, b, alternative="two-sided").pvalue)


def test_the_search_equals_ruptures_kernelcpd() -> None:
    import ruptures

    rng = np.random.default_rng(7)
    for _ in range(150):
        n = int(rng.integers(8, 400))
        y = rng.normal(0.0, 0.02, n)
        for _ in range(int(rng.integers(0, 4))):
            y[int(rng.integers(1, n)) :] += rng.normal(0.0, 0.1)
        min_size = int(rng.integers(2, 6))
        penalty = float(rng.uniform(1e-4, 0.05))
        if n < 2 * min_size:
            continue
        expected = ruptures.KernelCPD(kernel="linear", min_size=min_size).fit(y.reshape(-1, 1)).predict(pen=penalty)
        assert _pelt_l2(y, penalty, min_size) == [int(b) for b in expected]


def test_a_flat_series_within_min_change_finds_nothing_and_imports_no_ruptures() -> None:
    code = (
        "import sys, numpy as np\n"
        "from commlens.regress import find_changes\n"
        "x = 1e-3 * (1 + np.random.default_rng(1).normal(0, 0.004, 300))\n"
        "y = np.r_[x[:150], x[150:] * 1.2]\n"
        "print(find_changes(x), len(find_changes(y)), *(m in sys.modules for m in ('ruptures', 'scipy.stats', "
        "'scipy.special')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["[]", "1", "False", "False", "False"]  # ruptures, scipy.stats, .special: not loaded
    assert find_changes([1.0] * 20) == []


def test_a_mean_time_that_is_no_number_is_a_store_error_naming_it(tmp_path: Path) -> None:
    import sqlite3

    from commlens.store import StoreError

    path = tmp_path / "results.db"
    with Store.open(str(path)) as store:
        store.save_run(_run(0, np.random.default_rng(1)))
        assert [len(x) for x in store.mean_history()] == [1, 12]
        with sqlite3.connect(path) as db:
            db.execute("UPDATE measurements SET mean_s = 'fast' WHERE position = 0")
        with pytest.raises(StoreError, match="cannot be read back"):
            store.mean_history()
