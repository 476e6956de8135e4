"""Issue 28's store edges, through the commands a user runs: a SQLite store damaged mid-file is refused before a
write (exit 2, the file named, the file untouched); an ingest that refuses every file creates no store file; ``export
-o`` into a missing directory is an error that creates nothing.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "ingest"
CLI = str(Path(sys.executable).parent / "commlens")
PAGE = 4096


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of six runs, its WAL folded into the file (so that its pages are where the damage goes)."""
    path = tmp_path_factory.mktemp("pristine") / "results.db"
    logs = [p for p in sorted(DATA.glob("*.log")) if "rank" not in p.name and "nan" not in p.name][:6]
    out = _cli("ingest", *map(str, logs), "--db", str(path))
    assert "stored run" in out.stdout, out.stderr
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path


def test_a_store_damaged_mid_file_is_refused_before_a_write(tmp_path: Path, pristine: Path) -> None:
    """8 KiB of zeros over two pages a third of the way in (leaves of the samples' table, which neither the
    ingest's reads nor its insert touch): before the fix the ingest exited 0 (measured: damage anywhere in pages
    8-17 and 28-33 of this 36-page store) and the store then failed its integrity check."""
    store = tmp_path / "results.db"
    shutil.copyfile(pristine, store)
    pages = store.stat().st_size // PAGE
    assert pages > 20
    with store.open("r+b") as f:
        f.seek(pages // 3 * PAGE)
        f.write(bytes(2 * PAGE))
    with sqlite3.connect(store) as conn:  # the damage is real
        try:
            damaged = conn.execute("PRAGMA quick_check").fetchone()[0] != "ok"
        except sqlite3.DatabaseError:  # "database disk image is malformed"
            damaged = True
    assert damaged
    before = store.read_bytes()
    out = _cli("ingest", str(DATA / "a100-2node-reduce_scatter-v1.json"), "--db", str(store))
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.startswith("error: ") and "corrupted" in out.stderr and str(store) in out.stderr
    assert "stored run" not in out.stdout
    assert store.read_bytes() == before  # nothing written into the damaged file


def test_a_sound_store_takes_the_write_after_its_check(tmp_path: Path, pristine: Path) -> None:
    store = tmp_path / "results.db"
    shutil.copyfile(pristine, store)
    out = _cli("ingest", str(DATA / "a100-2node-reduce_scatter-v1.json"), "--db", str(store))
    assert out.returncode == 0 and "stored run" in out.stdout, out.stderr


def test_a_refused_ingest_creates_no_store_file(tmp_path: Path) -> None:
    store = tmp_path / "sub" / "results.db"
    junk = tmp_path / "junk.txt"
    junk.write_text("not a benchmark log\n")
    out = _cli("ingest", str(junk), str(DATA / "truncated-row.log"), "--db", str(store))
    assert out.returncode == 2 and out.stderr.startswith("error: ")
    assert not store.exists() and not store.parent.exists()


def test_export_into_a_missing_directory_is_an_error_and_creates_nothing(tmp_path: Path) -> None:
    store = tmp_path / "results.db"
    assert _cli("ingest", str(DATA / "h100-8gpu-all_reduce.log"), "--db", str(store)).returncode == 0
    target = tmp_path / "no" / "such" / "dir" / "x.csv"
    out = _cli("export", "-o", str(target), "--db", str(store))
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.startswith("error: ") and str(target) in out.stderr
    assert not (tmp_path / "no").exists()
    fine = tmp_path / "x.csv"
    assert _cli("export", "-o", str(fine), "--db", str(store)).returncode == 0 and fine.read_text().count("\n") > 1
