"""Every kind of stored object is reached from the store (issue 29): ``store.baselines``, ``.thresholds``,
``.floors``, ``.reports``, ``.change_points``, each the same rows its module's functions read and write."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from commlens.store import Store
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
