"""A real ``commlens serve`` process for tests: started on a free loopback port over a given store.

Use the context manager, or the ``serve`` fixture (``from serve_server import serve``) that stops
every server it started when the test ends::

    server = serve(store_url, write_token="w" * 24)
    status, headers, body = server.get("/api/runs")

The server is ``python -m commlens serve`` in this interpreter (the installed console script's
code), its output kept in a file: a server that exits or never answers ``GET /healthz`` fails
the test with what it printed. Stopping terminates it, then kills it if it does not exit.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
MAX_BODY_BYTES = 64 * 1024 * 1024  # a response larger than this is refused, not read
_PORT_ATTEMPTS = 3  # a free port can be taken between choosing it and the server binding it


class ServeStartError(RuntimeError):
    """The server exited, or did not answer /healthz in time; the message holds its output."""


def free_port() -> int:
    """A loopback TCP port nobody listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ServeProcess:
    """A running ``commlens serve``: its base URL, its tokens, its output so far."""

    def __init__(
        self,
        db_url: str,
        *,
        token: str | None = None,
        write_token: str | None = None,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.db_url = db_url
        self.token = token
        self.write_token = write_token
        self.args = list(args)
        self.env = dict(env or {})
        self.dir = Path(tempfile.mkdtemp(prefix="commlens-serve-"))
        self.log_path = self.dir / "serve.log"
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def output(self) -> str:
        """Everything the server printed (stdout and stderr), for failure messages."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    # -- life cycle ----------------------------------------------------------------------------

    def start(self) -> ServeProcess:
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            self.port = free_port()
            try:
                self._launch()
                return self
            except ServeStartError:
                self.stop()
                if attempt == _PORT_ATTEMPTS or "address already in use" not in self.output().lower():
                    raise
        raise AssertionError("unreachable")

    def _launch(self) -> None:
        command = [sys.executable, "-m", "commlens", "serve", "--db", self.db_url]
        command += ["--host", "127.0.0.1", "--port", str(self.port), *self.args]
        env = {k: v for k, v in os.environ.items() if not k.startswith("COMMLENS_SERVE_")}
        env.update(self.env)
        # Tokens through the environment, as an operator should pass them (not visible in ps).
        if self.token is not None:
            env["COMMLENS_SERVE_TOKEN"] = self.token
        if self.write_token is not None:
            env["COMMLENS_SERVE_WRITE_TOKEN"] = self.write_token
        env["PYTHONUNBUFFERED"] = "1"
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.dir
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                raise ServeStartError(
                    f"commlens serve exited with status {self.proc.returncode} before answering /healthz:\n"
                    + self.output()
                )
            try:
                status, _headers, body = self.get("/healthz", auth=False)
                if status == 200 and json.loads(body) == {"ok": True}:
                    return
            except (OSError, ValueError):
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise ServeStartError(
                    f"commlens serve did not answer /healthz within {START_TIMEOUT_S:.0f} s:\n" + self.output()
                )
            time.sleep(0.1)

    def stop(self) -> None:
        """Terminate the server, kill it if it does not exit within STOP_TIMEOUT_S."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT_S)

    # -- requests ------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        auth: bool = True,
    ) -> tuple[int, dict[str, str], bytes]:
        """One HTTP request, redirects not followed; the read token is sent when ``auth`` and one is set.
        Returns status, headers (lower-case names) and body, for error statuses too."""
        all_headers = dict(headers or {})
        if auth and self.token is not None:
            all_headers.setdefault("Authorization", f"Bearer {self.token}")
        req = urllib.request.Request(self.url(path), data=body, method=method, headers=all_headers)
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(req, timeout=30) as resp:
                return resp.status, _lower(resp.headers.items()), _read(resp)
        except urllib.error.HTTPError as e:
            return e.code, _lower(e.headers.items()), _read(e)

    def get(self, path: str, *, auth: bool = True) -> tuple[int, dict[str, str], bytes]:
        return self.request("GET", path, auth=auth)

    def get_json(self, path: str) -> object:
        """GET an API path that must answer 200 with JSON."""
        status, _headers, body = self.get(path)
        assert status == 200, (path, status, body[:500], self.output()[-2000:])
        return json.loads(body)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None  # a 3xx comes back as an HTTPError the caller can inspect


def _lower(items: Sequence[tuple[str, str]] | object) -> dict[str, str]:
    return {k.lower(): v for k, v in items}  # type: ignore[attr-defined]


def _read(resp: object) -> bytes:
    data: bytes = resp.read(MAX_BODY_BYTES + 1)  # type: ignore[attr-defined]
    if len(data) > MAX_BODY_BYTES:
        raise AssertionError(f"response larger than {MAX_BODY_BYTES} bytes")
    return data


@contextmanager
def running_server(
    db_url: str,
    *,
    token: str | None = None,
    write_token: str | None = None,
    args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> Iterator[ServeProcess]:
    """A started server, stopped on exit and its working directory (the server's log) removed; a failure to start
    fails the test with the server's output."""
    server = ServeProcess(db_url, token=token, write_token=write_token, args=args, env=env)
    try:
        try:
            server.start()
        except ServeStartError as e:
            pytest.fail(str(e), pytrace=False)
        yield server
    finally:
        server.stop()
        shutil.rmtree(server.dir, ignore_errors=True)


@pytest.fixture
def serve() -> Iterator[Callable[..., ServeProcess]]:
    """Start servers: ``serve(db_url, token=..., write_token=..., args=[...])``; all stopped after the test."""
    with ExitStack() as stack:
        yield lambda db_url, **kw: stack.enter_context(running_server(db_url, **kw))
