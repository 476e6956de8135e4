"""commlens ingest of many files in one transaction (issue 34): every good file stored, a file that fails left out,
and a database fault midway stores nothing of any file."""

from __future__ import annotations

import os
import re
import resource
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from store_backends import pg_server, pg_url  # noqa: E402,F401

DATA = Path(__file__).parent / "data"
LOG = (DATA / "regress" / "base-all_reduce.log").read_text()


def _logs(folder: Path, count: int) -> list[Path]:
    """``count`` nccl-tests logs, each with other pids: each a run of its own."""
    folder.mkdir()
    paths = []
    for i in range(count):
        path = folder / f"run-{i:03d}.log"
        path.write_text(re.sub(r"Pid (\d+)", lambda m, shift=16 * i: f"Pid {int(m.group(1)) + shift}", LOG))
        paths.append(path)
    return paths


def _ingest(*args: str, limit_bytes: int | None = None) -> subprocess.CompletedProcess[str]:
    def limited() -> None:  # writes past limit_bytes fail (EFBIG) as on a full disk
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run(
        [sys.executable, "-m", "commlens", "ingest", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
        preexec_fn=limited if limit_bytes else None,
    )


def _stored(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM runs").fetchone()[0]


def test_many_files_in_one_command_store_each_good_one_once(tmp_path: Path) -> None:
    logs = _logs(tmp_path / "logs", 20)
    twin = tmp_path / "twin.log"
    twin.write_text(logs[3].read_text())  # the same content as a file before it
    bad = DATA / "ingest" / "truncated-row.log"
    db = tmp_path / "results.db"
    proc = _ingest(*map(str, logs[:10]), str(bad), str(twin), *map(str, logs[10:]), "--db", str(db))
    assert proc.returncode == 2  # the bad file
    assert f"error: {bad}:67: table row cut short" in proc.stderr
    assert f"{twin}: already stored as run " in proc.stderr and "(same content); skipped" in proc.stderr
    stored_lines = [line for line in proc.stdout.splitlines() if ": stored run " in line]
    assert [line.split(":")[0] for line in stored_lines] == [str(p) for p in logs]
    assert _stored(db) == 20
    again = _ingest(*map(str, logs), "--db", str(db))
    assert again.returncode == 0 and again.stdout == "" and again.stderr.count("already stored") == 20
    assert _stored(db) == 20


def test_a_database_fault_midway_stores_nothing_of_any_file(tmp_path: Path) -> None:
    logs = _logs(tmp_path / "logs", 80)
    db = tmp_path / "results.db"
    first = _ingest(str(logs[0]), "--db", str(db))
    assert first.returncode == 0 and _stored(db) == 1
    size = db.stat().st_size
    proc = _ingest(*map(str, logs[1:]), "--db", str(db), limit_bytes=size + 32 * 1024)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == (
        f"error: result store sqlite:///{db}: the disk failed a read or write (full, or failing): disk I/O error"
    )
    assert "Traceback" not in proc.stderr and proc.stdout == ""  # no file said stored
    assert _stored(db) == 1  # the runs of the files before the fault are not kept either
    done = _ingest(*map(str, logs[1:]), "--db", str(db))
    assert done.returncode == 0 and _stored(db) == 80


def test_many_files_into_postgresql_in_one_command(pg_url: str, tmp_path: Path) -> None:
    logs = _logs(tmp_path / "logs", 12)
    proc = _ingest(*map(str, logs[:8]), str(logs[2]), "--db", pg_url, "--json")
    assert proc.returncode == 0, proc.stderr
    assert f"{logs[2]}: already stored as run " in proc.stderr
    again = _ingest(*map(str, logs), "--db", pg_url)
    assert again.returncode == 0 and again.stderr.count("already stored") == 8
    assert again.stdout.count(": stored run ") == 4
