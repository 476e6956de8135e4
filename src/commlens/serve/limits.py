"""What bounds ``commlens serve`` against slow and many clients, none of which needs a token.

- **Header read**: a connection has ``header_timeout_s`` to send a request's line and headers, counted from
  when it opened (or when its previous response ended); one that sent part of them gets ``408``, one that
  sent nothing is closed.
- **Body read**: ``body_timeout_s`` from the headers to the body's end.
- **Keep-alive**: an idle kept-alive connection is closed after ``keep_alive_s`` (uvicorn's own timer).
- **Open connections**: at most ``max_connections``, and never more than the process' descriptor limit
  leaves room for (``connection_plan``). A connection over the bound closes the oldest connection that is
  still waiting for its request's headers (an idle or a slow one), else it is answered ``503`` and closed:
  a client that sends its request at once is served however many idle connections are held.
- **Concurrent requests per client**: at most ``max_requests_per_client`` requests of one address are in
  the application at once; more are answered ``429`` (``/healthz`` is never refused: it is answered on
  the event loop, without a worker).

:func:`protocol_class` is the uvicorn HTTP protocol (h11) with these bounds; :class:`PerClientLimit` the
ASGI wrapper of the last.
"""

from __future__ import annotations

import json
import resource
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from commlens.serve.config import ServeConfigError

__all__ = ["Limits", "PerClientLimit", "connection_plan", "protocol_class"]

RESERVED_FDS = 96  # descriptors kept for the store, the live endpoints' polls, logs and the interpreter
MAX_FDS = 1 << 20
MAX_BACKLOG = 512

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class Limits:
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_s: float = 5.0
    max_connections: int = 4096
    max_requests_per_client: int = 32

    def __post_init__(self) -> None:
        for name in ("header_timeout_s", "body_timeout_s", "keep_alive_s"):
            value = getattr(self, name)
            if not (0 < value <= 3600):
                raise ServeConfigError(f"{name.removesuffix('_s').replace('_', '-')} {value}: expected 0 < s <= 3600")
        if not 1 <= self.max_connections <= 1_000_000:
            raise ServeConfigError(f"--max-connections {self.max_connections}: expected 1 to 1000000")
        if not 1 <= self.max_requests_per_client <= 100_000:
            raise ServeConfigError(f"--max-requests-per-client {self.max_requests_per_client}: expected 1 to 100000")


def connection_plan(wanted: int) -> tuple[int, int]:
    """(open connections at most, listen backlog) that never take the descriptors the process needs.

    The soft descriptor limit is raised to the hard one first. asyncio accepts up to a backlog's worth of
    connections in one burst before any of them is seen (and a connection closed to make room frees its
    descriptor a moment later), so room is kept for two bursts over the bound and ``RESERVED_FDS`` besides.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = MAX_FDS if hard == resource.RLIM_INFINITY else min(hard, MAX_FDS)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        soft = MAX_FDS
    backlog = max(8, min(MAX_BACKLOG, (soft - RESERVED_FDS) // 4))
    return max(8, min(wanted, soft - RESERVED_FDS - 2 * backlog)), backlog


def _plain(status: str, text: str, *extra: str) -> bytes:
    body = f"error: {text}\n".encode()
    head = [f"HTTP/1.1 {status}", "content-type: text/plain", f"content-length: {len(body)}", "connection: close"]
    return ("\r\n".join([*head, *extra]) + "\r\n\r\n").encode() + body


_408 = _plain("408 Request Timeout", "the request came too slowly")
_503 = _plain("503 Service Unavailable", "too many open connections", "retry-after: 1")


def protocol_class(limits: Limits, max_connections: int) -> type[H11Protocol]:
    """uvicorn's h11 protocol with header and body timeouts and a bound of ``max_connections``."""
    # the connections waiting for a request's headers, the one waiting longest first (the one closed to make room)
    waiting: OrderedDict[Any, None] = OrderedDict()

    class Bounded(H11Protocol):
        _phase: str | None = None
        _phase_started = 0.0
        _timer: Any = None
        _partial = False  # bytes of the current request's head arrived

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            if len(self.connections) > max_connections and not self._make_room():
                transport.write(_503)
                transport.close()
                return
            self._sync()

        def _make_room(self) -> bool:
            """Close the connection that has waited longest for its request's headers; False: none waits."""
            while waiting:
                oldest, _ = waiting.popitem(last=False)
                if oldest is not self and not oldest.transport.is_closing():
                    oldest._expire()
                    return True
            return False

        def data_received(self, data: bytes) -> None:
            if self._phase == "header":
                self._partial = True
            super().data_received(data)
            if not self.transport.is_closing():
                self._sync()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._sync()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel()
            waiting.pop(self, None)
            self._phase = "closed"
            super().connection_lost(exc)

        def _sync(self) -> None:
            state = self.conn.their_state
            if state is h11.IDLE:
                self._arm("header", limits.header_timeout_s)
            elif state is h11.SEND_BODY:
                self._arm("body", limits.body_timeout_s)
            else:
                self._arm("app", None)

        def _arm(self, phase: str, seconds: float | None) -> None:
            if self._phase == phase:
                return
            self._cancel()
            self._phase, self._phase_started, self._partial = phase, self.loop.time(), False
            if phase == "header":
                waiting[self] = None  # newest last
            else:
                waiting.pop(self, None)
            if seconds is not None:
                self._timer = self.loop.call_later(seconds, self._expire)

        def _cancel(self) -> None:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _expire(self) -> None:
            self._timer = None
            if self.transport.is_closing():
                return
            started = self.cycle is not None and self.cycle.response_started
            if (self._phase == "header" and self._partial) or (self._phase == "body" and not started):
                self.transport.write(_408)
            self._phase = "closed"
            self.transport.close()

    return Bounded


class PerClientLimit:
    """At most ``limit`` requests of one client address in the application at once; more get ``429``."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], limit: int) -> None:
        self.app = app
        self.limit = limit
        self.active: dict[str, int] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") == "/healthz":  # health: answered on the loop, at once
            await self.app(scope, receive, send)
            return
        client = str((scope.get("client") or ("?",))[0])
        n = self.active.get(client, 0)
        if n >= self.limit:
            body = json.dumps({"error": f"over {self.limit} requests of this client at once: retry"}).encode()
            headers = [(b"content-type", b"application/json"), (b"retry-after", b"1")]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({"type": "http.response.start", "status": 429, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        self.active[client] = n + 1
        try:
            await self.app(scope, receive, send)
        finally:
            left = self.active[client] - 1
            if left:
                self.active[client] = left
            else:
                del self.active[client]
