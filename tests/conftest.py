"""Shared fixtures: the real third-party files of ``../shared/realdata/``."""

from __future__ import annotations

from pathlib import Path

import pytest

# The checkout's sibling ``shared/`` (CI always has it; a user's own clone may not).
REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata"


@pytest.fixture
def realdata() -> Path:
    """``../shared/realdata/``; the test skips, saying why, where that folder is absent."""
    if not REALDATA.is_dir():
        pytest.skip(f"real third-party files not here: {REALDATA} is absent (it sits beside the checkout in CI)")
    return REALDATA


# -- which tests run alone -------------------------------------------------------------------------------------------
# scripts/test.sh runs the suite in two parts: every test but these on pytest-xdist workers, then these one after
# another with nothing beside them. Each judges a speed, a rate or a deadline that a test running beside it on this
# 2-core machine would move (a rank that another worker's torch import starves reads as a straggler; a shaped link
# measured while the CPU is taken reads as slow).
ALONE = {
    "test_monitor.py": "names slowed ranks live and must raise no alarm on a healthy job",
    "test_monitor_cluster.py": "stragglers, slowdowns and below-model groups on the emulated cluster",
    "test_monitor_prometheus.py": "alerts go pending then firing on Prometheus's evaluation clock",
    "test_monitor_hostile.py": "a dead or trickling endpoint is given up on within seconds",
    "test_diagnose_links.py": "finds slow links and hosts by their measured rates",
    "test_diagnose_links_groups.py": "finds slow links and hosts by their measured rates",
    "test_cluster.py": "the emulated cluster's shaped rates",
    "test_cluster_bench.py": "a bench on the emulated cluster feels its slow host",
    "test_replay.py": "replayed calls are timed against the recorded ones",
    "test_serve_hostile.py": "slow clients are cut off within seconds",
    "test_fetch_tls.py": "a stalled TLS peer is given up on within seconds",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``ALONE``'s tests ``alone``. (scripts/test.sh keeps each file on one worker with ``--dist loadfile``, so
    a module fixture, an emulated cluster or a browser, starts once; not ``loadgroup``, whose groups pytest-xdist
    3.8 writes where pytest 9.2 no longer reads a test's id, so every test became a group of its own.)"""
    for item in items:
        if Path(str(item.fspath)).name in ALONE:
            item.add_marker(pytest.mark.alone)
