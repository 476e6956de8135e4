"""A real local Ray cluster for tests: a head node started with the venv's ``ray`` CLI, stopped when the module ends.

Import the fixture into a test module (``from ray_cluster import ray_cluster``) and point a driver at it::

    def test_x(ray_cluster: RayCluster) -> None:
        env = {**os.environ, **ray_cluster.driver_env}  # RAY_ADDRESS and the cluster's token

The head runs ``ray start --head --block`` in a session of its own, with a private ``--temp-dir`` and a free GCS
port, two CPUs, no dashboard and no usage stats. Ray advertises the machine's address, not loopback, whatever
``--node-ip-address`` says (``resolve_ip_for_localhost``), and its GCS listens on every interface; drivers reach it
at ``127.0.0.1:PORT``. So the cluster takes Ray's token authentication with a fresh random token in a private file
(``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN_PATH``), which ``driver_env`` hands to the test's drivers; the user's
own ``~/.ray/auth_token`` (which ``ray start`` would otherwise pick up, refusing drivers without it) plays no part.

The cluster is stopped by terminating that launcher (which drains and stops the raylet, GCS, agents and workers
it started), then killing whatever of its session is still there; a process of that session left after that fails
the test. ``ray stop`` is not used: it stops every Ray on the machine, other users' included.

Ray is in the ``test`` extra, so a missing or broken Ray fails the test with the reason; it never skips.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

START_TIMEOUT_S = 90.0  # two CPUs shared with other tests: the head takes ~7 s alone, more under load
STOP_TIMEOUT_S = 40.0  # the launcher drains for up to 30 s on SIGTERM
KILL_TIMEOUT_S = 10.0
STARTED = "Ray runtime started"  # what `ray start` prints once the GCS and the raylet are up
_PORT_ATTEMPTS = 3  # a free port can be taken between choosing it and the GCS binding it


class RayClusterError(RuntimeError):
    """The test cluster failed to start or to stop cleanly."""


@dataclass(frozen=True)
class RayCluster:
    """A running head node: ``address`` for ``RAY_ADDRESS``, its ``temp_dir`` (sessions, logs) and CLI."""

    address: str
    temp_dir: Path
    ray_cli: Path
    token_path: Path

    @property
    def driver_env(self) -> dict[str, str]:
        """The environment variables a driver of this cluster needs (over the test's own)."""
        return {"RAY_ADDRESS": self.address, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(self.token_path)}


def ray_cli() -> Path:
    """The ``ray`` command beside this interpreter (the venv's); fails, saying why, where Ray is not installed."""
    path = Path(sys.executable).parent / "ray"
    if not os.access(path, os.X_OK):
        pytest.fail(f"Ray is not installed ({path} missing): it is in the test extra, pip install -e '.[test]'")
    return path


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def session_processes(session_id: int) -> list[tuple[int, str]]:
    """(pid, command line) of every live process in session ``session_id`` (from ``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[3]) != session_id or fields[0] == "Z":
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        found.append((int(entry.name), cmdline))
    return found


class _Head:
    """One ``ray start --head --block`` in its own session; its pid is the session id of everything it starts."""

    def __init__(self, cli: Path, temp_dir: Path, port: int, token_path: Path) -> None:
        self.log_path = temp_dir / f"ray-start-{port}.log"
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
        env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_path))
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    str(cli),
                    "start",
                    "--head",
                    "--block",
                    "--node-ip-address=127.0.0.1",
                    f"--port={port}",
                    "--num-cpus=2",
                    "--include-dashboard=false",
                    "--disable-usage-stats",
                    f"--temp-dir={temp_dir}",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def wait_started(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if STARTED in self.log():
                # the teardown's check that nothing is left reads the same table: it must see the head now
                if not any("raylet" in cmd for _, cmd in session_processes(self.proc.pid)):
                    raise RayClusterError(f"no raylet in session {self.proc.pid} although ray start is up")
                return
            if self.proc.poll() is not None:
                raise RayClusterError(f"ray start exited with {self.proc.returncode}:\n{self._tail()}")
            time.sleep(0.2)
        raise RayClusterError(f"ray start not up after {START_TIMEOUT_S:.0f} s:\n{self._tail()}")

    def stop(self) -> None:
        """Terminate the launcher, then kill what is left of its session; raise if anything survives that."""
        session_id = self.proc.pid
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=KILL_TIMEOUT_S)
        left = _wait_gone(session_id, KILL_TIMEOUT_S)
        if left:
            for pid, _ in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            survivors = _wait_gone(session_id, KILL_TIMEOUT_S)
            raise RayClusterError(
                f"{len(left)} process(es) of the Ray head outlived it (killed; {len(survivors)} still alive): "
                + "; ".join(f"{pid} {cmd[:120]}" for pid, cmd in left)
            )

    def _tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])


def _wait_gone(session_id: int, timeout_s: float) -> list[tuple[int, str]]:
    """The processes of the session still alive after up to ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = session_processes(session_id)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayCluster]:
    """A Ray head for the module's tests; stopped, and its folder removed, when they are done (also on failure)."""
    cli = ray_cli()
    # A short path: Ray's unix sockets live under it, and a socket path may be 107 bytes at most.
    temp_dir = Path(tempfile.mkdtemp(prefix="commlens-ray-"))  # mode 0700
    token_path = temp_dir / "auth_token"
    token_path.write_text(secrets.token_hex(32))
    head: _Head | None = None
    try:
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            port = free_port()
            head = _Head(cli, temp_dir, port, token_path)
            try:
                head.wait_started()
                break
            except RayClusterError:
                log = head.log().lower()
                head.stop()
                head = None
                if attempt == _PORT_ATTEMPTS or "already in use" not in log:
                    raise
        yield RayCluster(f"127.0.0.1:{port}", temp_dir, cli, token_path)
    finally:
        try:
            if head is not None:
                head.stop()
        finally:
            shutil.rmtree(temp_dir, ignore_errors=True)
