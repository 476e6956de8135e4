"""Tiny loopback HTTP servers that answer as a broken or hostile rank endpoint would, for tests.

``Canned(answer)`` answers every request with ``answer(path)`` (a JSON-able object or raw bytes), one
connection at a time on a thread; ``Trickle()`` accepts connections and sends an HTTP answer one byte every
``every_s`` seconds, never finishing. Both are context managers that close their sockets on exit.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from typing import Any


class _Server:
    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> _Server:
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def __exit__(self, *_: Any) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        for c in self._conns:
            c.close()
        self.sock.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(5)
            self._conns.append(conn)
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()

    def _read_request(self, conn: socket.socket) -> str:
        data = b""
        while b"\r\n\r\n" not in data and len(data) < 65536:
            chunk = conn.recv(4096)
            if not chunk:
                break
            data += chunk
        line = data.split(b"\r\n", 1)[0].decode("latin-1")
        return line.split(" ")[1] if line.count(" ") >= 2 else "/"

    def _serve(self, conn: socket.socket) -> None:
        raise NotImplementedError


class Canned(_Server):
    """Answers ``answer(path)``: an object is sent as JSON, bytes as they are."""

    def __init__(self, answer: Callable[[str], Any]) -> None:
        super().__init__()
        self.answer = answer

    def _serve(self, conn: socket.socket) -> None:
        try:
            path = self._read_request(conn)
            body = self.answer(path)
            if not isinstance(body, bytes):
                body = json.dumps(body).encode()
            head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            conn.sendall(head.encode() + b"Connection: close\r\n\r\n" + body)
        except OSError:
            pass
        finally:
            conn.close()


class Trickle(_Server):
    """Sends a valid-looking answer one byte every ``every_s`` seconds, forever (until closed)."""

    def __init__(self, every_s: float = 1.0) -> None:
        super().__init__()
        self.every_s = every_s

    def _serve(self, conn: socket.socket) -> None:
        try:
            self._read_request(conn)
            payload = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b" " * 100000
            for byte in payload:
                if self._stop.wait(self.every_s):
                    return
                conn.sendall(bytes([byte]))
        except OSError:
            pass
