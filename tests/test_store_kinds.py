"""Every kind of stored object is reached from the store (issue 29): ``store.baselines``, ``.thresholds``,
``.floors``, ``.reports``, ``.change_points``, each the same rows its module's functions read and write."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sqlalchemy import create_engine, text
from store_backends import make_run, pg_server, pg_url, store_url  # noqa: F401 - fixtures

from commlens.store import Store
from commlens.store.reports import default_title
from commlens.store.series_meta import Threshold, list_thresholds


def _projection(tmp_path: Path, gpus: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "commlens", "project", "megatron-gpt-1.7b", "-t", "dgx-h100", "-n", gpus, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_each_kind_is_a_repository_of_the_store(tmp_path: Path) -> None:
    with Store.open(str(tmp_path / "s.db")) as store:
        assert store.baselines.list() == [] and store.floors.list() == [] and store.change_points.load() == []
        saved = store.thresholds.set(Threshold(op="all_reduce", min_change=0.05))
        assert saved.set_at and list_thresholds(store) == store.thresholds.list() == [saved]
        assert store.thresholds.unset(Threshold(op="all_reduce")) and store.thresholds.list() == []

        first = store.reports.save("projection", "eight", _projection(tmp_path, "8"))
        second = store.reports.save("projection", "sixteen", _projection(tmp_path, "16"))
        assert store.reports.count() == store.reports.count("projection") == 2
        assert [r.report_id for r in store.reports.list()] == [second, first]  # newest first
        assert store.reports.get(first[:8]).payload["gpus"] == 8
        assert store.reports.get(second).payload["gpus"] == 16
        # A title of None is what the document found, as `commlens reports import` without --title keeps it.
        doc = store.reports.get(first).payload
        untitled = store.reports.save("projection", None, doc)
        assert store.reports.get(untitled).summary.title == default_title("projection", doc) != "eight"


def test_refresh_statistics_gives_sqlite_its_planner_statistics(store_url: str) -> None:  # noqa: F811
    """What `commlens serve` runs at start: on SQLite an ANALYZE (sqlite_stat1 filled), on PostgreSQL nothing
    (its autovacuum keeps its own), and no error on either."""
    with Store.open(store_url) as store:
        store.save_runs([make_run(f"{i:02d}" + "a" * 14) for i in range(3)])
        store.refresh_statistics()
        if store_url.startswith("sqlite"):
            engine = create_engine(store_url)
            with engine.connect() as conn:
                tables = {row[0] for row in conn.execute(text("SELECT tbl FROM sqlite_stat1"))}
            engine.dispose()
            assert {"runs", "measurements"} <= tables
