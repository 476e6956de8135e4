"""Trust in ``commlens bench`` (issue 12): loopback-only local runs, ranks that end with their launcher, temporary
directories removed on every exit path, outputs checked before launch, a finished run never lost, file modes
that follow the umask, a start-up timeout named as such. Real ranks, real sockets, real (tmpfs) file systems.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from benchutil import BIN, QUICK, clean_env, commlens, error_lines, stored_runs, table_rows

LONG_SWEEP = ("--op", "all_reduce", "-b", "8", "-e", "8", "-n", "1000000", "-w", "1", "-q")


# -- real processes and sockets, read from /proc ------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            kids.setdefault(ppid, []).append(int(entry))
    return kids


def descendants(pid: int) -> list[int]:
    kids, out, todo = _children(), [], [pid]
    while todo:
        for child in kids.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def alive(pid: int) -> bool:
    """Running (not a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _socket_inodes(pid: int) -> set[str]:
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    except OSError:
        pass
    return inodes


def listening_addresses(pids: list[int]) -> list[tuple[str, int, int]]:
    """(address, port, pid) of every TCP socket in LISTEN state that one of ``pids`` holds."""
    owner = {ino: pid for pid in pids for ino in _socket_inodes(pid)}
    out = []
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in owner:  # 0A: LISTEN
                continue
            hex_addr, hex_port = fields[1].split(":")
            raw = b"".join(struct.pack("<I", int(hex_addr[i : i + 8], 16)) for i in range(0, len(hex_addr), 8))
            out.append((socket.inet_ntop(family, raw), int(hex_port, 16), owner[fields[9]]))
    return out


def start_bench(*args: str, env: dict[str, str]) -> tuple[subprocess.Popen[str], list[str]]:
    """Start ``commlens bench`` and return once its table header is printed (every rank has joined)."""
    proc = subprocess.Popen(
        [str(BIN / "commlens"), "bench", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    seen: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("#        (B)"):  # the last header line: the sweep is running
            return proc, seen
    proc.wait()
    raise AssertionError(f"bench ended before its table: {''.join(seen)} {proc.stderr.read() if proc.stderr else ''}")


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@pytest.fixture
def private_tmp(tmp_path: Path) -> Path:
    """A TMPDIR of the test's own, so the temporary directories bench leaves (or not) can be counted."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    return tmp


def leftovers(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("commlens-"))


# -- item 2: a local run listens on loopback only; item 8: processes and temporary directories -----------------


@dataclass
class LongRun:
    """A 3-rank run of a sweep that does not end, seen once every rank has joined."""

    proc: subprocess.Popen[str]
    ranks: list[int]  # the launcher's descendants then
    sockets: list[tuple[str, int, int]]  # the TCP sockets they and the launcher were listening on then
    tmp: Path  # its TMPDIR, of this module's own


@pytest.fixture(scope="module")
def long_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LongRun]:
    """One launch (3 ranks, each importing torch) for the two tests that need a run in its sweep: the loopback test
    reads its sockets, the kill -9 test then kills its launcher. Processes and sockets are read here, before either
    test, so the two checks do not depend on their order."""
    tmp = tmp_path_factory.mktemp("long-run") / "tmp"
    tmp.mkdir()
    proc, _ = start_bench("--nproc", "3", *LONG_SWEEP, "--no-store", env=clean_env(TMPDIR=str(tmp)))
    ranks: list[int] = []
    try:
        ranks = descendants(proc.pid)
        yield LongRun(proc, ranks, listening_addresses([proc.pid, *ranks]), tmp)
    finally:
        for r in ranks:
            if alive(r):
                os.kill(r, signal.SIGKILL)
        stop(proc)


def test_a_local_run_listens_on_loopback_only(long_run: LongRun) -> None:
    sockets = long_run.sockets
    # the launcher's rendezvous store and each rank's gloo listener, at least
    assert {pid for _, _, pid in sockets} >= {long_run.proc.pid}, sockets
    assert len(sockets) >= 4, sockets
    exposed = [s for s in sockets if not ipaddress.ip_address(s[0]).is_loopback]
    assert exposed == [], f"listening beyond loopback: {exposed}"


def test_kill_9_of_the_launcher_ends_every_rank_and_the_next_run_clears_its_dir(long_run: LongRun) -> None:
    proc, ranks, tmp = long_run.proc, long_run.ranks, long_run.tmp
    env = clean_env(TMPDIR=str(tmp))
    try:
        assert len(ranks) >= 3, ranks
        assert proc.poll() is None, "the launcher ended before it was killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while any(alive(r) for r in ranks) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [r for r in ranks if alive(r)] == [], "ranks outlived their launcher"
    finally:
        for r in ranks:
            if alive(r):
                os.kill(r, signal.SIGKILL)
        stop(proc)
    assert len(leftovers(tmp)) == 1  # SIGKILL leaves no chance to clean up ...
    done = commlens("bench", "--nproc", "2", *QUICK, "--no-store", env=env)
    assert done.returncode == 0, done.stderr
    assert leftovers(tmp) == []  # ... the next launch removes the dead launcher's directory


def test_no_temporary_directory_remains_after_any_exit(private_tmp: Path, tmp_path: Path) -> None:
    env = clean_env(TMPDIR=str(private_tmp))
    ok = commlens("bench", "--nproc", "2", *QUICK, "--no-store", env=env)
    assert ok.returncode == 0, ok.stderr
    assert leftovers(private_tmp) == []
    failed = commlens(
        "bench",
        "--nproc",
        "2",
        *QUICK,
        "-b",
        "8",
        "-e",
        "64",
        "--no-store",
        env={**env, "COMMLENS_INJECT_FAULT": "raise:rank=1,size=32"},
    )
    assert failed.returncode == 1 and "injected failure" in failed.stderr
    assert leftovers(private_tmp) == []
    bad = commlens("bench", "--nproc", "2", *QUICK, "--json", str(tmp_path), "--no-store", env=env)
    assert bad.returncode == 2
    assert leftovers(private_tmp) == []
    for sig in (signal.SIGTERM, signal.SIGINT):
        proc, _ = start_bench("--nproc", "2", *LONG_SWEEP, "--no-store", env=env)
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=60)
        finally:
            stop(proc)
        assert leftovers(private_tmp) == [], sig


# -- item 7 (launcher side): a start-up that outlasts --timeout ---------------------------------------------


def test_a_timeout_during_start_up_says_so() -> None:
    env = clean_env(COMMLENS_INJECT_FAULT="pause:rank=1,op=init,seconds=60")
    t0 = time.monotonic()
    proc = commlens("bench", "--nproc", "2", *QUICK, "--timeout", "5", "--no-store", env=env, timeout=120)
    assert time.monotonic() - t0 < 50  # not the 60 s pause: the others gave up after --timeout
    assert proc.returncode == 2, proc.stderr
    assert error_lines(proc.stderr) == [
        "error: timed out during start-up after 5 s: raise --timeout (rank 1 had not joined)"
    ]
    assert "Traceback" not in proc.stderr


# -- item 3: destinations checked before launch --------------------------------------------------------------


def _refused_before_launch(proc: subprocess.CompletedProcess[str], message: str) -> None:
    assert proc.returncode == 2, proc.stderr
    (err,) = error_lines(proc.stderr)
    assert message in err, err
    assert "Traceback" not in proc.stderr
    assert "Rank" not in proc.stdout  # no rank was started: the refusal came before the sweep


def test_json_naming_a_directory_is_refused_before_launch(tmp_path: Path) -> None:
    proc = commlens("bench", "--nproc", "2", *QUICK, "--json", str(tmp_path), "--no-store")
    _refused_before_launch(proc, f"--json {tmp_path}: is a directory")


@pytest.mark.parametrize(
    "url, message",
    [
        ("postgresql://user@[unclosed/db", "--db: "),
        ("mysql://host/db", "unsupported database 'mysql'"),
    ],
)
def test_a_malformed_or_unsupported_db_url_is_refused_before_launch(url: str, message: str) -> None:
    _refused_before_launch(commlens("bench", "--nproc", "2", *QUICK, "--db", url), message)


def test_a_tag_that_is_not_utf8_is_refused_before_launch(tmp_path: Path) -> None:
    db = tmp_path / "results.db"
    proc = subprocess.run(
        [
            str(BIN / "commlens").encode(),
            b"bench",
            b"--nproc",
            b"2",
            *(a.encode() for a in QUICK),
            b"--db",
            str(db).encode(),
            b"--tag",
            b"nightly-\xff\xfe",
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
    )
    _refused_before_launch(proc, "--tag is not valid UTF-8 text: b'nightly-\\xff\\xfe'")
    assert not db.exists() or stored_runs(db) == []


# -- tmpfs file systems, full or read-only (root only) ------------------------------------------------------


def _mount_tmpfs(where: Path, size: str) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs of the test's own, unmounted afterwards."""
    where = tmp_path / "fs"
    _mount_tmpfs(where, "4m")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(fs: Path) -> None:
    """Fill the file system to the last byte."""
    with open(fs / "ballast", "wb") as fp:
        try:
            while True:
                fp.write(b"\0" * 65536)
                fp.flush()
        except OSError:
            pass
    for i in range(64):  # the last blocks, a smaller write at a time
        try:
            (fs / f"ballast-{i}").write_bytes(b"\0" * 512)
        except OSError:
            break


def remount_read_only(fs: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(fs)], check=True)


def test_json_on_a_full_disk_is_refused_before_launch(tmpfs: Path) -> None:
    fill(tmpfs)
    proc = commlens("bench", "--nproc", "2", *QUICK, "--json", str(tmpfs / "run.json"), "--no-store")
    _refused_before_launch(proc, "no space left")
    assert not (tmpfs / "run.json").exists()


def test_a_read_only_db_is_refused_before_launch(tmpfs: Path) -> None:
    db = tmpfs / "results.db"
    made = commlens("db", "upgrade", "--db", str(db))
    assert made.returncode == 0, made.stderr
    before = db.read_bytes()
    remount_read_only(tmpfs)
    proc = commlens("bench", "--nproc", "2", *QUICK, "--db", str(db))
    _refused_before_launch(proc, "--db: ")
    assert db.read_bytes() == before


# -- item 3: a write that fails at the end keeps the run -----------------------------------------------------

SWEEP_WITH_A_PAUSE = ("--op", "all_reduce", "-b", "8", "-e", "1K", "-n", "3", "-w", "1", "-q")
PAUSE = "pause:rank=0,size=1024,seconds=4"  # the last row waits, while the test breaks the destination


def _run_and_break(args: list[str], env: dict[str, str], breaker: object) -> tuple[int, str, str]:
    proc, seen = start_bench("--nproc", "2", *SWEEP_WITH_A_PAUSE, *args, env={**env, "COMMLENS_INJECT_FAULT": PAUSE})
    try:
        breaker()  # type: ignore[operator]
        # Read on through the same text stream: communicate() would lose the lines it has buffered.
        out = proc.stdout.read() if proc.stdout else ""
        proc.wait(timeout=120)
        err = proc.stderr.read() if proc.stderr else ""
    finally:
        stop(proc)
    return proc.returncode, "".join(seen) + out, err


def _fallback_named(stderr: str) -> Path:
    (err,) = error_lines(stderr)
    assert "the run is kept in " in err, err
    return Path(err.rsplit("the run is kept in ", 1)[1])


@pytest.mark.parametrize("broken", ["db made read-only", "json disk full"])
def test_a_save_that_fails_at_the_end_keeps_the_whole_run(broken: str, tmpfs: Path, tmp_path: Path) -> None:
    data_home = tmp_path / "data"
    env = clean_env(XDG_DATA_HOME=str(data_home))
    db, out = tmpfs / "results.db", tmpfs / "run.json"
    if broken == "db made read-only":
        made = commlens("db", "upgrade", "--db", str(db))
        assert made.returncode == 0, made.stderr
        code, stdout, stderr = _run_and_break(["--db", str(db)], env, lambda: remount_read_only(tmpfs))
    else:
        code, stdout, stderr = _run_and_break(["--json", str(out), "--no-store"], env, lambda: fill(tmpfs))
    assert code == 1, stderr
    assert "Traceback" not in stderr
    kept = _fallback_named(stderr)
    assert kept == data_home / "commlens" / "unsaved" / f"{kept.stem}.json"
    doc = json.loads(kept.read_text())
    sizes = sorted({m["size_bytes"] for m in doc["measurements"]})
    assert sizes == [8, 16, 32, 64, 128, 256, 512, 1024]  # every row, the one after the pause included
    assert len(doc["measurements"]) == 8, doc["measurements"]  # all_reduce: in-place only on torch
    assert len(table_rows(stdout)) == 8, stdout
    assert doc["status"] == "complete"
    ingest = commlens("ingest", str(kept), "--db", str(tmp_path / "later.db"))  # the kept file is a run
    assert ingest.returncode == 0, ingest.stderr
    assert [r["run_id"] for r in stored_runs(tmp_path / "later.db")] == [doc["run_id"]]


# -- item 10: --json files follow the umask ------------------------------------------------------------------


@pytest.mark.parametrize("umask, mode", [(0o077, 0o600), (0o022, 0o644)])
def test_json_files_follow_the_umask(umask: int, mode: int, tmp_path: Path) -> None:
    out, nccl = tmp_path / "run.json", tmp_path / "nccl.json"
    proc = subprocess.run(
        [
            str(BIN / "commlens"),
            "bench",
            "--nproc",
            "2",
            *QUICK,
            "--no-store",
            "--json",
            str(out),
            "--nccl-tests-json",
            str(nccl),
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=180,
        preexec_fn=lambda: os.umask(umask),
    )
    assert proc.returncode == 0, proc.stderr
    assert (out.stat().st_mode & 0o777, nccl.stat().st_mode & 0o777) == (mode, mode)


def test_diagnose_links_local_ranks_listen_on_loopback_only() -> None:
    proc = subprocess.Popen(
        [str(BIN / "commlens"), "diagnose", "links", "--nproc", "3", "-b", "4M", "-n", "200", "--timeout", "60"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        env=clean_env(),
        start_new_session=True,
    )
    try:
        sockets: list[tuple[str, int, int]] = []
        deadline = time.monotonic() + 60
        while len(sockets) < 4 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)  # the launcher's store and each rank's gloo listener, once all have joined
            sockets = listening_addresses([proc.pid, *descendants(proc.pid)])
    finally:
        stop(proc)
    assert len(sockets) >= 4, sockets
    assert [s for s in sockets if not ipaddress.ip_address(s[0]).is_loopback] == []


def test_tune_output_naming_a_directory_is_refused_before_the_sweep(tmp_path: Path) -> None:
    proc = commlens("tune", "--nproc", "2", "-n", "2", "--output", str(tmp_path), "--replace", "--no-store")
    assert proc.returncode == 2
    assert error_lines(proc.stderr) == [f"error: --output {tmp_path}: is a directory; give a file name"]


def test_a_locked_db_is_refused_before_launch(tmp_path: Path) -> None:
    """Another process holds the write lock: bench waits as a save would (the busy timeout), then refuses."""
    import sqlite3

    db = tmp_path / "results.db"
    made = commlens("db", "upgrade", "--db", str(db))
    assert made.returncode == 0, made.stderr
    holder = sqlite3.connect(db, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")
        # The wait is the store URL's busy timeout (30 s unless told): 1 s here.
        proc = commlens("bench", "--nproc", "2", *QUICK, "--db", f"sqlite:///{db}?timeout=1")
    finally:
        holder.close()
    _refused_before_launch(proc, "locked")


@pytest.mark.skipif(os.geteuid() != 0, reason="the emulated cluster needs root")
def test_a_cluster_run_binds_its_store_to_the_bridge_address_only(tmp_path: Path) -> None:
    env = clean_env(COMMLENS_CLUSTER_DIR=str(tmp_path))
    name = f"ts{os.getpid() % 10000}"
    assert commlens("cluster", "up", "--name", name, "--hosts", "2", env=env).returncode == 0
    try:
        bridge = json.loads(commlens("cluster", "status", name, "--json", env=env).stdout)["bridge_address"]
        proc, _ = start_bench("--cluster", name, *LONG_SWEEP, "--no-store", env=env)
        try:
            launcher_sockets = listening_addresses([proc.pid])  # the ranks listen inside their namespaces
        finally:
            stop(proc)
        assert launcher_sockets and {addr for addr, _, _ in launcher_sockets} == {bridge}, launcher_sockets
    finally:
        assert commlens("cluster", "down", name, env=env).returncode == 0
